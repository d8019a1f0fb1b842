"""cocotb tests of a generated device (docs/protocol.md) against the host's protocol code and the golden models.

Driven through ``<name>_protocol`` (the UART's byte streams, for speed) or ``<name>_device`` (the UART pins at a
small CLKS_PER_BIT). The host side is :mod:`bitforge.runtime.protocol` (frames are built with ``encode_frame``
and answers read with ``FrameDecoder``); expected outputs come from ``emulate`` (compiled models, precomputed
codes in ``vectors.npz``) or from the learner's golden :class:`Stepper`, which mirrors every request the
device executes. The configuration is the JSON file named by ``BITFORGE_DEVICE_BENCH``.
"""
from __future__ import annotations

import json
import os
import random
from pathlib import Path

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly

from bitforge.runtime.protocol import (
    DeviceError, ErrorCode, Frame, FrameDecoder, FrameType, Hello, bytes_to_words, encode_body,
    encode_frame, pack_word, read_state_request, words_to_bytes, write_weights_request)
from cobs import cobs
from device_fuzz import check, fuzz_unit, pieces, verdicts

CFG = json.loads(Path(os.environ["BITFORGE_DEVICE_BENCH"]).read_text())
DEV = CFG["device"]
HELLO = DEV["hello"]
MAX_PAYLOAD = DEV["max_payload"]
IN_BYTES, OUT_BYTES = DEV["in_bytes"], DEV["out_bytes"]
PINS = CFG["mode"] == "pins"
CPB = CFG["clks_per_bit"]
TIMEOUT = CFG["timeout_clks"]
#: An answer must start within this many clocks of the request's end (a batch at most k * in_bytes feed
#: cycles plus the pipeline; at the pins, the answer's own bytes).
ANSWER_CLOCKS = 4 * MAX_PAYLOAD + 4000 + (40 * CPB * (MAX_PAYLOAD + 16) if PINS else 0)


class Link:
    """The host's end: bytes to the device and frames back, one clock loop for both directions."""

    def __init__(self, dut, seed: int):
        self.dut = dut
        self.rng = random.Random(seed)
        self.out: list[int] = []        # bytes (byte mode) or pin levels (pin mode) still to drive
        self.raw = bytearray()          # every byte the device sent
        self.decoder = FrameDecoder()
        self.frames: list = []          # decoded answers not yet taken (Frame or FrameError)
        self.raw_frames: list[bytes] = []
        self.cycles = 0
        self._rx_state = None           # pin mode: the software UART receiver
        self._since_answer = 0

    async def start(self) -> None:
        d = self.dut
        cocotb.start_soon(Clock(d.clk, 10, unit="ns").start())
        d.rst.value = 1
        if PINS:
            d.uart_rx.value = 1
        else:
            d.rx_valid.value = 0
            d.rx_data.value = 0
            d.tx_ready.value = 0
        for _ in range(5):
            await FallingEdge(d.clk)
        d.rst.value = 0
        cocotb.start_soon(self._loop())

    async def _loop(self) -> None:
        d = self.dut
        cur = bytearray()
        while True:
            await FallingEdge(d.clk)
            self.cycles += 1
            if PINS:
                d.uart_rx.value = self.out.pop(0) if self.out else 1
            else:
                item = self.out.pop(0) if self.out else None
                d.rx_valid.value = int(item is not None)
                d.rx_data.value = item or 0
                d.tx_ready.value = int(self.rng.random() < 0.75)
            await ReadOnly()
            if PINS:
                b = self._uart_sample(int(d.uart_tx.value))
            else:
                b = int(d.tx_data.value) if int(d.tx_valid.value) and int(d.tx_ready.value) else None
            if b is not None:
                self.raw.append(b)
                cur.append(b)
                if b == 0:
                    self.raw_frames.append(bytes(cur))
                    cur = bytearray()
                self.frames += self.decoder.feed(bytes([b]))

    def _uart_sample(self, level: int):
        """A receiver sampling mid-bit: returns a byte at its stop bit."""
        st = self._rx_state
        if st is None:
            if level == 0:
                self._rx_state = [0, 0, 0]  # clocks since the edge, bits, value
            return None
        st[0] += 1
        at = st[0] - CPB // 2
        if at > 0 and at % CPB == 0:
            n = at // CPB
            if n <= 8:
                st[2] |= level << (n - 1)
            else:
                self._rx_state = None
                assert level == 1, "device's stop bit is low"
                return st[2]
        return None

    def send(self, data: bytes, gap: int = 2) -> None:
        for b in data:
            if PINS:
                for bit in [0] + [(b >> i) & 1 for i in range(8)] + [1]:
                    self.out += [bit] * CPB
            else:
                self.out.append(b)
                self.out += [None] * self.rng.randint(0, gap)

    async def idle(self, cycles: int) -> None:
        end = self.cycles + cycles
        while self.cycles < end or self.out:
            await FallingEdge(self.dut.clk)

    async def answer(self, clocks: int = ANSWER_CLOCKS):
        """The next frame from the device; fails when none comes (the device hangs)."""
        while self.out:
            await FallingEdge(self.dut.clk)
        end = self.cycles + clocks
        while not self.frames:
            assert self.cycles < end, f"no answer within {clocks} clocks (device hangs); got bytes {self.raw[-16:].hex()}"
            await FallingEdge(self.dut.clk)
        return self.frames.pop(0)

    async def quiet(self, clocks: int = 200) -> None:
        """Nothing more comes, and busy falls: exactly one answer per request."""
        await self.idle(clocks)
        assert not self.frames, f"an extra frame came: {self.frames[0]}"
        assert int(self.dut.busy.value) == 0, "busy still high with nothing to do"

    async def request(self, ftype: int, seq: int, payload: bytes = b"") -> Frame:
        self.send(encode_frame(Frame(ftype, seq, payload)))
        f = await self.answer()
        assert isinstance(f, Frame), f"the device's answer is not a valid frame: {f}"
        return f


def expect_ok(f: Frame, ftype: int, seq: int) -> bytes:
    if f.type == FrameType.ERROR:
        raise AssertionError(f"request 0x{ftype:02x} seq {seq} answered with error "
                             f"{DeviceError.parse(f.payload).describe()}")
    assert (f.type, f.seq) == (ftype | 0x80, seq), f"answer {f.describe()} to request 0x{ftype:02x} seq {seq}"
    return f.payload


def expect_error(f, code: int, seq: int, rtype: int, detail: int, what: str) -> None:
    assert isinstance(f, Frame) and f.type == FrameType.ERROR, f"{what}: expected an error frame, got {f}"
    e = DeviceError.parse(f.payload)
    got = (e.code, f.seq, e.request_type, e.detail)
    assert got == (code, seq, rtype, detail), (f"{what}: error (code, seq, type, detail) {got}, expected "
                                                f"{(code, seq, rtype, detail)} ({e.describe()})")


def expected_hello() -> Hello:
    h = dict(HELLO)
    h["clks_per_bit"] = CPB
    h["model_id"], h["arch_id"] = bytes.fromhex(h["model_id"]), bytes.fromhex(h["arch_id"])
    return Hello(**h)


# -- the golden side --------------------------------------------------------------------------------------------

class Golden:
    """Expected answers: a compiled model's precomputed codes, or a learner mirrored request by request."""

    def __init__(self):
        h = HELLO
        self.in_bits, self.out_bits = h["in_bits"], h["out_bits"]
        self.learner = None
        if CFG["kind"] == "learner":
            from bitforge.toolchain.learn.emulate import Stepper
            from bitforge.toolchain.learn.spec import load_learner
            self.learner = load_learner(CFG["learner"])
            self.stepper = Stepper(self.learner)
        else:
            v = np.load(CFG["vectors"])
            self.xs, self.ys = v["inputs"], v["expected"]

    def infer_words(self, n: int, rng: random.Random) -> tuple[list[int], list[int]]:
        """(input words, expected output words) of n samples (learners: learn_enable 0, no update)."""
        if self.learner is None:
            idx = [rng.randrange(len(self.xs)) for _ in range(n)]
            xw = [pack_word(self.xs[i], HELLO["in_elem_bits"]) for i in idx]
            yw = [pack_word(self.ys[i], HELLO["out_elem_bits"]) for i in idx]
            return xw, yw
        x = self._x(n, rng)
        y = np.concatenate([self.stepper.predict(x[i:i + 1]) for i in range(n)])
        return [pack_word(r, HELLO["in_elem_bits"]) for r in x], [pack_word(r, HELLO["out_elem_bits"]) for r in y]

    def _x(self, n: int, rng: random.Random) -> np.ndarray:
        t = self.learner.formats.input
        lo, hi = t.min_code, t.max_code
        return np.array([[rng.randint(lo, hi) for _ in range(HELLO["in_count"])] for _ in range(n)], dtype=np.int64)

    def learn_words(self, n: int, rng: random.Random, apply: bool = True) -> tuple[list[int], list[int]]:
        """(learner input words, expected predictions) of n samples with random targets and learn_enable."""
        f = self.learner.formats
        x = self._x(n, rng)
        t = np.array([[rng.randint(f.datapath.min_code, f.datapath.max_code) // 4 for _ in range(HELLO["out_count"])]
                      for _ in range(n)], dtype=np.int64)
        le = np.array([rng.random() < 0.85 for _ in range(n)])
        xw, dw = HELLO["in_elem_bits"], HELLO["out_elem_bits"]
        t_at, le_at = HELLO["in_count"] * xw, HELLO["in_count"] * xw + HELLO["out_count"] * dw
        words = [pack_word(x[i], xw) | pack_word(t[i], dw) << t_at | int(le[i]) << le_at for i in range(n)]
        preds = []
        for i in range(n):
            p, _ = self.stepper.step(x[i:i + 1], t[i:i + 1], le[i:i + 1]) if apply else (self.stepper.predict(x[i:i + 1]), None)
            preds.append(pack_word(p[0], dw))
        return words, preds


async def sync_state(link: Link, golden: Golden, seq: int) -> int:
    """Makes the golden learner start from the device's state (coefficients survive reset, so a test that runs
    after one that learned starts from where that one ended); returns the next seq."""
    from bitforge.toolchain.learn.emulate import Stepper
    state, seq = await device_state(link, golden, seq)
    golden.stepper = Stepper(golden.learner.with_state(state))
    return seq


async def device_state(link: Link, golden: Golden, seq: int) -> tuple[list, int]:
    """The learner's state read from the device (every word its layout uses), and the next seq."""
    from bitforge.runtime.state_layout import state_from_words, state_words_needed
    words = {}
    sb = (HELLO["state_word_bits"] + 7) // 8
    for first, count in state_words_needed(golden.learner):
        while count:
            k = min(count, MAX_PAYLOAD // sb)
            p = expect_ok(await link.request(FrameType.READ_STATE, seq, read_state_request(first, k)),
                          FrameType.READ_STATE, seq)
            seq = (seq + 1) & 0xFF
            assert len(p) == k * sb
            for i, w in enumerate(bytes_to_words(p, HELLO["state_word_bits"])):
                words[first + i] = w
            first, count = first + k, count - k
    return state_from_words(golden.learner, words), seq


async def read_state(link: Link, golden: Golden, seq: int) -> int:
    """The device's state equals the golden learner's; returns the next seq."""
    got, seq = await device_state(link, golden, seq)
    want = golden.stepper.state()
    for layer, (g, w) in enumerate(zip(got, want)):
        for key in w:
            assert np.array_equal(g[key], np.asarray(w[key])), f"read_state layer {layer} {key}: {g[key]} vs {w[key]}"
    return seq


def k_max() -> int:
    return min(MAX_PAYLOAD // IN_BYTES, MAX_PAYLOAD // OUT_BYTES)


# -- tests ------------------------------------------------------------------------------------------------------

@cocotb.test()
async def hello_answers_the_manifest(dut):
    link = Link(dut, 1)
    await link.start()
    f = await link.request(FrameType.HELLO, 17)
    payload = expect_ok(f, FrameType.HELLO, 17)
    assert Hello.parse(payload) == expected_hello(), f"{Hello.parse(payload)} != {expected_hello()}"
    assert link.raw_frames[-1] == encode_frame(f), "answer bytes differ from the reference COBS encoder's"
    await link.quiet()


@cocotb.test()
async def infer_matches_the_golden_model(dut):
    link = Link(dut, 2)
    await link.start()
    golden, rng = Golden(), random.Random(2)
    for i in range(CFG["infer_vectors"]):
        xw, yw = golden.infer_words(1, rng)
        p = expect_ok(await link.request(FrameType.INFER, i & 0xFF, words_to_bytes(xw, golden.in_bits)),
                      FrameType.INFER, i & 0xFF)
        assert bytes_to_words(p, golden.out_bits) == yw, f"vector {i}: {bytes_to_words(p, golden.out_bits)} != {yw}"
    await link.quiet()


@cocotb.test()
async def infer_batch_matches_the_golden_model(dut):
    link = Link(dut, 3)
    await link.start()
    golden, rng = Golden(), random.Random(3)
    for seq, k in enumerate(sorted({1, 2, 3, 7, k_max()})):
        xw, yw = golden.infer_words(k, rng)
        p = expect_ok(await link.request(FrameType.INFER_BATCH, seq, words_to_bytes(xw, golden.in_bits)),
                      FrameType.INFER_BATCH, seq)
        assert bytes_to_words(p, golden.out_bits) == yw, f"batch of {k}: outputs differ"
    await link.quiet()


async def probe(link: Link, golden: Golden, rng: random.Random, seq: int, what: str) -> None:
    """A good infer right after something bad is answered right."""
    xw, yw = golden.infer_words(1, rng)
    f = await link.request(FrameType.INFER, seq, words_to_bytes(xw, golden.in_bits))
    try:
        p = expect_ok(f, FrameType.INFER, seq)
    except AssertionError as e:
        raise AssertionError(f"after {what}: {e}") from None
    assert bytes_to_words(p, golden.out_bits) == yw, f"after {what}: wrong output"
    await link.quiet()


def body_frame(body: bytes) -> bytes:
    return cobs.encode(body) + b"\x00"


def bad_frames(golden: Golden) -> list[tuple[str, bytes, tuple[int, int, int, int]]]:
    """(what, wire bytes, (code, seq, request type, detail)) of one frame per error code."""
    good_in = bytes(IN_BYTES)
    infer = encode_body(Frame(FrameType.INFER, 31, good_in))
    crc_bad = bytearray(infer)
    crc_bad[4] ^= 0x40
    head_len = bytearray(infer[:4])
    head_len[2] += 1
    from bitforge.runtime.protocol import crc16
    bad_len = bytes(head_len) + good_in
    bad_len += crc16(bad_len).to_bytes(2, "big")
    caps = HELLO["capabilities"]
    out = [
        ("bad CRC", body_frame(bytes(crc_bad)), (ErrorCode.BAD_CRC, 31, FrameType.INFER, 0)),
        ("bad length", body_frame(bad_len), (ErrorCode.BAD_LENGTH, 31, FrameType.INFER, IN_BYTES)),
        ("unknown type", encode_frame(Frame(0x42, 32)), (ErrorCode.UNKNOWN_TYPE, 32, 0x42, 0)),
        ("error type from the host", encode_frame(Frame(FrameType.ERROR, 33, bytes(4))),
         (ErrorCode.UNKNOWN_TYPE, 33, FrameType.ERROR, 0)),
        ("infer of one byte too many", encode_frame(Frame(FrameType.INFER, 34, bytes(IN_BYTES + 1))),
         (ErrorCode.WRONG_SHAPE, 34, FrameType.INFER, IN_BYTES)),
        ("infer_batch of no words", encode_frame(Frame(FrameType.INFER_BATCH, 35)),
         (ErrorCode.WRONG_SHAPE, 35, FrameType.INFER_BATCH, IN_BYTES)),
        ("hello with a payload", encode_frame(Frame(FrameType.HELLO, 36, b"\x01")),
         (ErrorCode.WRONG_SHAPE, 36, FrameType.HELLO, 0)),
        ("too long", body_frame(bytes([FrameType.INFER, 37, 0xFF, 0xFF]) + bytes(range(1, 256)) * 3),
         (ErrorCode.TOO_LONG, 37, FrameType.INFER, MAX_PAYLOAD)),
        ("bad COBS", bytes([0x09, FrameType.INFER, 38, 0x03]) + b"\x00", (ErrorCode.BAD_COBS, 38, FrameType.INFER, 0)),
        ("short", body_frame(bytes([FrameType.INFER, 39, 0])), (ErrorCode.SHORT, 39, FrameType.INFER, 3)),
        ("one byte", b"\x01\x00", (ErrorCode.SHORT, 0, 0, 0)),
    ]
    if k_max() * IN_BYTES + IN_BYTES <= MAX_PAYLOAD:  # an answer that would not fit
        out.append(("infer_batch whose answer does not fit",
                    encode_frame(Frame(FrameType.INFER_BATCH, 40, bytes(IN_BYTES * (k_max() + 1)))),
                    (ErrorCode.WRONG_SHAPE, 40, FrameType.INFER_BATCH, IN_BYTES)))
    if not caps & 2:
        out.append(("learn without a learner", encode_frame(Frame(FrameType.LEARN, 41, bytes(IN_BYTES))),
                    (ErrorCode.UNSUPPORTED, 41, FrameType.LEARN, 0)))
        out.append(("read_state without a learner", encode_frame(Frame(FrameType.READ_STATE, 42, read_state_request(0, 1))),
                    (ErrorCode.UNSUPPORTED, 42, FrameType.READ_STATE, 0)))
    else:
        words = HELLO["state_words"]
        sat = min(words, 0xFFFF)
        out += [("read_state beyond the state", encode_frame(Frame(FrameType.READ_STATE, 43, read_state_request(words - 1, 2))),
                 (ErrorCode.BAD_ADDRESS, 43, FrameType.READ_STATE, sat)),
                ("read_state at 2**32 - 1", encode_frame(Frame(FrameType.READ_STATE, 44, read_state_request(0xFFFFFFFF, 1))),
                 (ErrorCode.BAD_ADDRESS, 44, FrameType.READ_STATE, sat)),
                ("read_state of 0 words", encode_frame(Frame(FrameType.READ_STATE, 45, read_state_request(0, 0))),
                 (ErrorCode.WRONG_SHAPE, 45, FrameType.READ_STATE, 0)),
                ("read_state of 5 bytes", encode_frame(Frame(FrameType.READ_STATE, 46, bytes(5))),
                 (ErrorCode.WRONG_SHAPE, 46, FrameType.READ_STATE, 6)),
                ("learn of half a word", encode_frame(Frame(FrameType.LEARN, 47, bytes(IN_BYTES + 1))),
                 (ErrorCode.WRONG_SHAPE, 47, FrameType.LEARN, IN_BYTES))]
    if not caps & 8:
        out += [("write_weights into constants", encode_frame(Frame(FrameType.WRITE_WEIGHTS, 48, bytes(6))),
                 (ErrorCode.UNSUPPORTED, 48, FrameType.WRITE_WEIGHTS, 0)),
                ("commit_weights into constants", encode_frame(Frame(FrameType.COMMIT_WEIGHTS, 49, bytes(16))),
                 (ErrorCode.UNSUPPORTED, 49, FrameType.COMMIT_WEIGHTS, 0))]
    return out


@cocotb.test()
async def every_bad_frame_gets_one_error_then_the_device_answers(dut):
    link = Link(dut, 4)
    await link.start()
    golden, rng = Golden(), random.Random(4)
    for i, (what, wire, want) in enumerate(bad_frames(golden)):
        link.send(wire)
        expect_error(await link.answer(), *want, what)
        await link.quiet()
        await probe(link, golden, rng, 100 + i, what)
    # a partial frame, then silence: one timeout error (its seq and type were read)
    link.send(encode_frame(Frame(FrameType.INFER, 60, bytes(IN_BYTES)))[:-3])
    expect_error(await link.answer(TIMEOUT + 2000), ErrorCode.TIMEOUT, 60, FrameType.INFER, 0, "timeout")
    await link.quiet()
    await probe(link, golden, rng, 61, "timeout")
    # an empty frame (0x00 after 0x00) is ignored; a lone 0x00 ends a partial frame with one error
    link.send(b"\x00\x00\x00")
    await link.quiet()
    link.send(b"\x05\x02\x00")
    expect_error(await link.answer(), ErrorCode.BAD_COBS, 0, FrameType.INFER, 0, "partial frame ended by 0x00")
    await link.quiet()
    await probe(link, golden, rng, 62, "an empty frame")


@cocotb.test(skip=CFG["kind"] != "learner")
async def learn_follows_the_golden_trajectory_and_read_state_its_state(dut):
    link = Link(dut, 6)
    await link.start()
    golden, rng = Golden(), random.Random(6)
    seq = await read_state(link, golden, 0)  # the initial state
    total = 0
    for k in [1, 2, 5, 1, 13, min(MAX_PAYLOAD // IN_BYTES, MAX_PAYLOAD // OUT_BYTES), 3]:
        words, preds = golden.learn_words(k, rng)
        p = expect_ok(await link.request(FrameType.LEARN, seq, words_to_bytes(words, golden.in_bits)),
                      FrameType.LEARN, seq)
        assert bytes_to_words(p, golden.out_bits) == preds, f"learn batch of {k} after {total} samples differs"
        seq, total = (seq + 1) & 0xFF, total + k
        # infer on a learner predicts without learning (the learn_enable bit is cleared by the device)
        xw, yw = golden.infer_words(2, rng)
        xw = [w | (1 << (golden.in_bits - 1)) for w in xw]
        p = expect_ok(await link.request(FrameType.INFER_BATCH, seq, words_to_bytes(xw, golden.in_bits)),
                      FrameType.INFER_BATCH, seq)
        assert bytes_to_words(p, golden.out_bits) == yw
        seq = (seq + 1) & 0xFF
    seq = await read_state(link, golden, seq)
    # a repeated learn (its answer lost, say) is applied once: the state says so
    words, preds = golden.learn_words(4, rng)
    first = await link.request(FrameType.LEARN, seq, words_to_bytes(words, golden.in_bits))
    assert bytes_to_words(expect_ok(first, FrameType.LEARN, seq), golden.out_bits) == preds
    assert await link.request(FrameType.LEARN, seq, words_to_bytes(words, golden.in_bits)) == first
    seq = await read_state(link, golden, (seq + 1) & 0xFF)
    await link.quiet()


@cocotb.test()
async def a_repeated_request_is_answered_from_the_kept_copy(dut):
    link = Link(dut, 5)
    await link.start()
    golden, rng = Golden(), random.Random(5)
    if golden.learner is not None:  # the state earlier tests left (it survives reset), then some learning
        await sync_state(link, golden, 180)
        words, preds = golden.learn_words(30, rng)
        p = expect_ok(await link.request(FrameType.LEARN, 200, words_to_bytes(words, golden.in_bits)), FrameType.LEARN, 200)
        assert bytes_to_words(p, golden.out_bits) == preds
    xa, ya = golden.infer_words(1, rng)
    for _ in range(100):  # two inputs whose outputs differ, so that the answer says which one was executed
        xb, yb = golden.infer_words(1, rng)
        if yb != ya:
            break
    assert yb != ya, "no two inputs with different outputs found"
    first = await link.request(FrameType.INFER, 9, words_to_bytes(xa, golden.in_bits))
    assert bytes_to_words(expect_ok(first, FrameType.INFER, 9), golden.out_bits) == ya
    # the same type and seq with other input: the kept answer, not a new one (not executed again),
    # also with an error frame (a damaged retry) in between
    again = await link.request(FrameType.INFER, 9, words_to_bytes(xb, golden.in_bits))
    assert again == first and link.raw_frames[-1] == link.raw_frames[-2]
    broken = bytearray(encode_frame(Frame(FrameType.INFER, 9, words_to_bytes(xb, golden.in_bits))))
    broken[2] ^= 0x10
    link.send(bytes(broken))
    assert (await link.answer()).type == FrameType.ERROR
    assert await link.request(FrameType.INFER, 9, words_to_bytes(xb, golden.in_bits)) == first
    # another seq executes; hello forgets the kept request, so seq 9 executes again afterwards
    p = expect_ok(await link.request(FrameType.INFER, 10, words_to_bytes(xb, golden.in_bits)), FrameType.INFER, 10)
    assert bytes_to_words(p, golden.out_bits) == yb
    await link.request(FrameType.INFER, 9, words_to_bytes(xa, golden.in_bits))
    expect_ok(await link.request(FrameType.HELLO, 9), FrameType.HELLO, 9)
    p = expect_ok(await link.request(FrameType.INFER, 9, words_to_bytes(xb, golden.in_bits)), FrameType.INFER, 9)
    assert bytes_to_words(p, golden.out_bits) == yb, "after hello, a request with the old seq must execute"
    await link.quiet()


@cocotb.test(skip="reload" not in CFG)
async def write_and_commit_weights_load_another_model(dut):
    """--weights ram: model B's words go in (bad frames first, which change nothing), hello reports model_id 0
    until commit_weights sets B's, and infer then gives B's golden outputs."""
    link = Link(dut, 8)
    await link.start()
    golden, rng = Golden(), random.Random(8)
    reload = CFG["reload"]
    wbits, nwords = HELLO["weight_word_bits"], HELLO["weight_words"]
    wbytes = (wbits + 7) // 8
    assert nwords == len(reload["words"])
    h = Hello.parse(expect_ok(await link.request(FrameType.HELLO, 1), FrameType.HELLO, 1))
    assert h.model_id.hex() == HELLO["model_id"] and h.can(8)
    bad = [(write_weights_request(nwords - 1, [0, 0], wbits), (ErrorCode.BAD_ADDRESS, min(nwords, 0xFFFF))),
           (write_weights_request(0xFFFFFFFF, [0], wbits), (ErrorCode.BAD_ADDRESS, min(nwords, 0xFFFF))),
           (write_weights_request(0, [0], wbits) + b"\x01", (ErrorCode.WRONG_SHAPE, wbytes)),
           (b"\x00\x00\x00", (ErrorCode.WRONG_SHAPE, wbytes)),
           (write_weights_request(0, [], wbits), (ErrorCode.WRONG_SHAPE, wbytes))]
    for seq, (payload, (code, detail)) in enumerate(bad, start=2):
        link.send(encode_frame(Frame(FrameType.WRITE_WEIGHTS, seq, payload)))
        expect_error(await link.answer(), code, seq, FrameType.WRITE_WEIGHTS, detail, f"write_weights {payload.hex()}")
    link.send(encode_frame(Frame(FrameType.COMMIT_WEIGHTS, 9, bytes(15))))
    expect_error(await link.answer(), ErrorCode.WRONG_SHAPE, 9, FrameType.COMMIT_WEIGHTS, 16, "commit of 15 bytes")
    h = Hello.parse(expect_ok(await link.request(FrameType.HELLO, 10), FrameType.HELLO, 10))
    assert h.model_id.hex() == HELLO["model_id"], "a refused write_weights changed the model_id"
    await probe(link, golden, rng, 11, "refused weight writes")
    per = max(1, min(7, (MAX_PAYLOAD - 4) // wbytes))  # several frames, so that a run of writes is exercised
    seq = 20
    for first in range(0, nwords, per):
        chunk = reload["words"][first:first + per]
        payload = write_weights_request(first, chunk, wbits)
        answer = expect_ok(await link.request(FrameType.WRITE_WEIGHTS, seq, payload), FrameType.WRITE_WEIGHTS, seq)
        assert answer == b""
        # a retry of the same frame is answered from the kept copy
        assert expect_ok(await link.request(FrameType.WRITE_WEIGHTS, seq, payload), FrameType.WRITE_WEIGHTS, seq) == b""
        seq += 1
        h = Hello.parse(expect_ok(await link.request(FrameType.HELLO, seq), FrameType.HELLO, seq))
        assert h.model_id == bytes(16), "model_id must read 0 while weights are being loaded"
        seq += 1
    mid = bytes.fromhex(reload["model_id"])
    assert expect_ok(await link.request(FrameType.COMMIT_WEIGHTS, seq, mid), FrameType.COMMIT_WEIGHTS, seq) == b""
    h = Hello.parse(expect_ok(await link.request(FrameType.HELLO, seq + 1), FrameType.HELLO, seq + 1))
    assert h.model_id == mid and h.arch_id.hex() == HELLO["arch_id"]
    v = np.load(reload["vectors"])
    xs, ys = v["inputs"], v["expected"]
    for i in range(0, len(xs), max(1, len(xs) // 20)):
        xw = [pack_word(xs[i], HELLO["in_elem_bits"])]
        p = expect_ok(await link.request(FrameType.INFER, i & 0xFF, words_to_bytes(xw, golden.in_bits)), FrameType.INFER,
                      i & 0xFF)
        assert bytes_to_words(p, golden.out_bits) == [pack_word(ys[i], HELLO["out_elem_bits"])], f"model B, vector {i}"
    await link.quiet()


@cocotb.test(skip=CFG.get("fuzz_frames", 0) == 0)
async def fuzzed_frames_never_hang_the_device(dut):
    """Random and mutated frames; each non-empty frame gets exactly one answer of the kind the host's own
    decoder expects, and a good probe every ``probe_every`` frames is answered right."""
    link = Link(dut, 7)
    await link.start()
    golden, rng = Golden(), random.Random(CFG.get("fuzz_seed", 7))
    host = FrameDecoder(max_body=MAX_PAYLOAD + 6)
    for i in range(CFG["fuzz_frames"]):
        wire = fuzz_unit(rng, IN_BYTES, lambda k: words_to_bytes(golden.infer_words(k, rng)[0], golden.in_bits))
        for piece in pieces(wire):
            link.send(piece, gap=0)
            for want in verdicts(host, piece):
                check(i, wire, want, await link.answer(TIMEOUT + ANSWER_CLOCKS))
            await link.quiet(20)
        if i % CFG["probe_every"] == CFG["probe_every"] - 1:
            expect_ok(await link.request(FrameType.HELLO, 0), FrameType.HELLO, 0)  # also forgets kept answers
            await probe(link, golden, rng, (i // CFG["probe_every"]) & 0xFF, f"fuzz frame {i}")

