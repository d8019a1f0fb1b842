"""The Reliability clause on the simulated board: random and mutated frames through the real UART pins of a
compiled model's device top (Verilator behind a pseudo-terminal, reached with pyserial like a board), a known-good
probe every 1,000 units. Every non-empty frame gets exactly one answer of the kind the host's own decoder expects
(tests/rtl/device_fuzz.py), a partial one a timeout error, nothing hangs (a read that times out fails the test),
and every probe (hello, then infer against the golden model) is answered right.

The fast run sends 5,000 units; the slow one 100,000.
"""
from __future__ import annotations

import random
import time

import numpy as np
import pytest
import serial

from bitforge.runtime.protocol import (FrameDecoder, FrameType, Frame, Hello, bytes_to_words, encode_frame, pack_word,
                                       words_to_bytes)
from bitforge.runtime.sim_board import SimBoard, build_sim_board
from device_fuzz import check, fuzz_unit, pieces, verdicts
from test_device_wrapper import model_design  # noqa: F401  (the fixture: a compiled model's device)

CPB = 4
PROBE_EVERY = 1000
READ_TIMEOUT_S = 20.0  # far beyond any answer (the longest waits for the device's timeout, 2,000 clocks)


class Port:
    """Frames over pyserial: send, then read until the answers the host decoder expects have come."""

    def __init__(self, path: str):
        self.serial = serial.Serial(path, timeout=READ_TIMEOUT_S)
        self.decoder = FrameDecoder()

    def answers(self, n: int) -> list:
        out = []
        while len(out) < n:
            data = self.serial.read_until(b"\x00")
            assert data.endswith(b"\x00"), f"no answer within {READ_TIMEOUT_S} s (got {data.hex()}): the device hangs"
            out += self.decoder.feed(data)
        return out

    def extra(self) -> bytes:
        """Bytes that came without being asked for (there must be none)."""
        return self.serial.read(self.serial.in_waiting) if self.serial.in_waiting else b""

    def request(self, ftype: int, seq: int, payload: bytes = b"") -> Frame:
        self.serial.write(encode_frame(Frame(ftype, seq, payload)))
        (f,) = self.answers(1)
        assert isinstance(f, Frame) and (f.type, f.seq) == (ftype | 0x80, seq), f"probe answered with {f}"
        return f


def fuzz_on_sim_board(design: dict, units: int, seed: int) -> dict:
    dev = design["device"]
    h = dev["hello"]
    v = np.load(design["vectors"])
    xs, ys = v["inputs"], v["expected"]
    exe = build_sim_board([design["out"] / f for f in dev["files"]], dev["top"], CPB)
    rng = random.Random(seed)
    host = FrameDecoder(max_body=dev["max_payload"] + 6)
    counts = {"units": 0, "frames": 0, "errors": 0, "probes": 0}

    def payload(k: int) -> bytes:
        return words_to_bytes([pack_word(xs[rng.randrange(len(xs))], h["in_elem_bits"]) for _ in range(k)],
                              h["in_bits"])

    with SimBoard(exe) as board:
        port = Port(board.port)
        t0 = time.perf_counter()
        for i in range(units):
            wire = fuzz_unit(rng, dev["in_bytes"], payload)
            for piece in pieces(wire):
                want = verdicts(host, piece)
                port.serial.write(piece)
                for w, got in zip(want, port.answers(len(want))):
                    check(i, wire, w, got)
                    counts["frames"] += 1
                    counts["errors"] += got.type == FrameType.ERROR
            counts["units"] += 1
            if i % PROBE_EVERY == PROBE_EVERY - 1:
                hello = Hello.parse(port.request(FrameType.HELLO, 0).payload)
                assert hello.clks_per_bit == CPB and hello.model_id.hex() == h["model_id"]
                j = rng.randrange(len(xs))
                out = port.request(FrameType.INFER, 1, words_to_bytes([pack_word(xs[j], h["in_elem_bits"])], h["in_bits"]))
                assert bytes_to_words(out.payload, h["out_bits"]) == [pack_word(ys[j], h["out_elem_bits"])], (
                    f"probe after unit {i}: wrong output")
                assert port.extra() == b"", f"after unit {i}: bytes nobody asked for"
                counts["probes"] += 1
        counts["seconds"] = round(time.perf_counter() - t0, 1)
        port.serial.close()
    return counts


def test_fuzz_5000_units_on_the_simulated_board(model_design):  # noqa: F811
    counts = fuzz_on_sim_board(model_design, 5_000, seed=11)
    assert counts["probes"] == 5 and counts["frames"] >= 5_000 and counts["errors"] > 3_000


@pytest.mark.slow
def test_fuzz_100000_units_on_the_simulated_board(model_design):  # noqa: F811
    counts = fuzz_on_sim_board(model_design, 100_000, seed=12)
    assert counts["probes"] == 100 and counts["frames"] >= 100_000
