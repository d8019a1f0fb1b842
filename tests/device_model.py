"""A reference device for the host runtime's tests: the device side of ``docs/protocol.md`` in Python, with the
golden model computing every answer, reachable in memory (deterministic faults) or on a pseudo-terminal (the
serial transport's real path).

It follows the page, not the host code: one error frame per bad frame (seq from the damaged body where it can
be read), the last request's type and seq remembered with its answer (a repeat that arrives intact is answered
from that copy, not executed again), ``hello`` always executed and forgetting the copy, ``write_weights``
zeroing the ``model_id`` until ``commit_weights``. Its weight layout (``REFERENCE_LAYOUT``) is the simplest one:
every parameter array of every node, in node order and field-name order, C order, one code per word.
"""
from __future__ import annotations

import dataclasses
import os
import threading
import time
import tty
from typing import Callable, Optional

import numpy as np

from bitforge.runtime import state_layout
from bitforge.runtime.deployed import DeployedModel
from bitforge.runtime.protocol import (
    PROTOCOL_VERSION,
    Capability,
    DeviceError,
    ErrorCode,
    Frame,
    FrameDecoder,
    FrameError,
    FrameType,
    Hello,
    HEADER_BYTES,
    CRC_BYTES,
    bytes_to_words,
    encode_frame,
    pack_word,
    unpack_word,
    word_bytes,
    words_to_bytes,
)
from bitforge.runtime.session import LinkTiming
from bitforge.toolchain import emulate, ir
from bitforge.toolchain.learn.emulate import Stepper

REFERENCE_LAYOUT = {"mode": "ram", "layout": "reference"}


def codes_graph(g: ir.Graph) -> ir.Graph:
    """``g`` from its input quantizer's output on: the integer function a device computes."""
    if not isinstance(g.nodes[0], ir.Quantize):
        return g
    h = g.copy()
    q = h.nodes[0]
    h.nodes = h.nodes[1:]
    h.inputs = [q.output]
    h.tensors = {k: v for k, v in h.tensors.items() if k != q.input}
    return h


def reference_params(g: ir.Graph) -> list[tuple[ir.Node, str, np.ndarray]]:
    return [(n, k, a) for n in g.nodes for k, a in sorted(n.array_fields().items())]


def reference_weight_words(model: DeployedModel, layout: dict) -> list[int]:
    """The reference layout's words for ``model`` (the host side of ``REFERENCE_LAYOUT``)."""
    assert layout == REFERENCE_LAYOUT, layout
    return [int(v) for _, _, a in reference_params(model.graph) for v in np.asarray(a).ravel()]


def _param_bits(g: ir.Graph) -> int:
    bits = 1
    for n, k, a in reference_params(g):
        a = np.asarray(a, dtype=np.int64)
        m = int(max(abs(int(a.min(initial=0))), abs(int(a.max(initial=0))))) if a.size else 0
        bits = max(bits, m.bit_length() + 1)
    return max(bits, 16)


class ReferenceDevice:
    """The device side of the protocol for one model; :meth:`receive` takes host bytes, returns device bytes."""

    def __init__(self, model: DeployedModel, *, max_payload: int = 128, weights_ram: bool = False,
                 model_id: Optional[bytes] = None, arch_id: Optional[bytes] = None):
        self.model = model
        self.max_payload = max_payload
        self.weights_ram = weights_ram
        self.model_id = model_id if model_id is not None else model.model_id16
        self.arch_id = arch_id if arch_id is not None else model.arch_id16
        self.decoder = FrameDecoder(HEADER_BYTES + max_payload + CRC_BYTES)
        self.last: Optional[tuple[int, int, bytes]] = None
        self.executed: list[tuple[int, int]] = []  # (type, seq) of every request executed
        self.learner = model.learner
        self.stepper = Stepper(self.learner) if self.learner is not None else None
        self.graph = codes_graph(model.graph)
        self.weight_bits = _param_bits(model.graph) if weights_ram else 0
        self.n_weights = sum(np.asarray(a).size for _, _, a in reference_params(model.graph)) if weights_ram else 0
        self.pending: dict[int, int] = {}
        m = model
        self.in_bits = m.d_in * m.in_type.width + (m.d_out * m.out_type.width + 1 if self.learner else 0)
        self.out_bits = m.d_out * m.out_type.width
        if self.learner is not None:
            addrs = state_layout.addresses(self.learner)
            st = self.learner.formats.storage
            self.state_bits = (max(n.out_features for n in self.learner.layers()) * st.width
                               if self.learner.spec.kind == "kan" else st.width)
            self.state_words = max(addrs) + 1
        else:
            self.state_bits = self.state_words = 0

    # -- the description ---------------------------------------------------------------------------------------
    def hello(self) -> Hello:
        m = self.model
        caps = Capability.INFER
        if self.learner is not None:
            caps |= Capability.LEARN | Capability.READ_STATE
        if self.weights_ram:
            caps |= Capability.WRITE_WEIGHTS
        return Hello(PROTOCOL_VERSION, int(caps), self.max_payload, self.in_bits, self.out_bits, m.d_in,
                     m.in_type.width, m.in_type.frac, m.in_type.signed, m.d_out, m.out_type.width, m.out_type.frac,
                     m.out_type.signed, m.latency_cycles, m.ii, self.state_bits, self.state_words, self.weight_bits,
                     self.n_weights, 8, self.model_id, self.arch_id, "reference")

    # -- bytes --------------------------------------------------------------------------------------------------
    def receive(self, data: bytes) -> bytes:
        out = b""
        for item in self.decoder.feed(data):
            if isinstance(item, FrameError):
                detail = self.max_payload if item.code == ErrorCode.TOO_LONG else item.detail
                out += self._error(item.seq, item.code, 0, detail)
            else:
                out += self._frame(item)
        return out

    def _error(self, seq: int, code: int, kind: int, detail: int = 0) -> bytes:
        return encode_frame(Frame(FrameType.ERROR, seq, DeviceError(code, kind, min(detail, 0xFFFF)).pack()))

    def _frame(self, f: Frame) -> bytes:
        if f.type == FrameType.HELLO:
            self.last = None
            self.executed.append((f.type, f.seq))
            return encode_frame(Frame(FrameType.HELLO.response, f.seq, self.hello().pack()))
        if self.last is not None and self.last[:2] == (f.type, f.seq):
            return self.last[2]
        try:
            kind = FrameType(f.type)
        except ValueError:
            return self._error(f.seq, ErrorCode.UNKNOWN_TYPE, f.type)
        try:
            answer = self._execute(kind, f.payload)
        except _Refuse as r:
            return self._error(f.seq, r.code, f.type, r.detail)
        self.executed.append((f.type, f.seq))
        frame = encode_frame(Frame(kind.response, f.seq, answer))
        self.last = (f.type, f.seq, frame)
        return frame

    def _words(self, payload: bytes, bits: int) -> list[int]:
        n = word_bytes(bits)
        if not payload or len(payload) % n:
            raise _Refuse(ErrorCode.WRONG_SHAPE, n)
        k = len(payload) // n
        if k * word_bytes(self.out_bits) > self.max_payload:
            raise _Refuse(ErrorCode.WRONG_SHAPE, n)
        return bytes_to_words(payload, bits)

    def _execute(self, kind: FrameType, payload: bytes) -> bytes:
        m = self.model
        if kind in (FrameType.INFER, FrameType.INFER_BATCH):
            words = self._words(payload, self.in_bits)
            if kind == FrameType.INFER and len(words) != 1:
                raise _Refuse(ErrorCode.WRONG_SHAPE, word_bytes(self.in_bits))
            x = np.array([unpack_word(w, m.d_in, m.in_type.width, m.in_type.signed) for w in words], dtype=np.int64)
            if self.stepper is not None:
                y = np.concatenate([self.stepper.predict(row[None]) for row in x])
            else:
                y = emulate.run(self.graph, x.reshape((len(x),) + self.graph.tensors[self.graph.inputs[0]].shape))
                y = np.asarray(y[self.graph.outputs[0]]).reshape(len(x), -1)
            return words_to_bytes([pack_word(row, m.out_type.width) for row in y.tolist()], self.out_bits)
        if kind == FrameType.LEARN:
            if self.stepper is None:
                raise _Refuse(ErrorCode.UNSUPPORTED, 0)
            words = self._words(payload, self.in_bits)
            xw, dw = m.in_type.width, m.out_type.width
            out = []
            for w in words:
                x = unpack_word(w, m.d_in, xw, True)
                t = unpack_word(w >> (m.d_in * xw), m.d_out, dw, True)
                le = bool(w >> (m.d_in * xw + m.d_out * dw) & 1)
                pred, _ = self.stepper.step(np.array([x]), np.array([t]), np.array([le]))
                out.append(pack_word(pred[0].tolist(), dw))
            return words_to_bytes(out, self.out_bits)
        if kind == FrameType.READ_STATE:
            if self.stepper is None:
                raise _Refuse(ErrorCode.UNSUPPORTED, 0)
            if len(payload) != 6:
                raise _Refuse(ErrorCode.WRONG_SHAPE, 6)
            first, count = int.from_bytes(payload[:4], "little"), int.from_bytes(payload[4:], "little")
            if count < 1 or count * word_bytes(self.state_bits) > self.max_payload:
                raise _Refuse(ErrorCode.WRONG_SHAPE, 6)
            if first + count > self.state_words:
                raise _Refuse(ErrorCode.BAD_ADDRESS, self.state_words)
            return words_to_bytes([self._state_word(a) for a in range(first, first + count)], self.state_bits)
        if kind == FrameType.WRITE_WEIGHTS:
            if not self.weights_ram:
                raise _Refuse(ErrorCode.UNSUPPORTED, 0)
            if len(payload) < 4 + word_bytes(self.weight_bits) or (len(payload) - 4) % word_bytes(self.weight_bits):
                raise _Refuse(ErrorCode.WRONG_SHAPE, word_bytes(self.weight_bits))
            first = int.from_bytes(payload[:4], "little")
            words = bytes_to_words(payload[4:], self.weight_bits)
            if first + len(words) > self.n_weights:
                raise _Refuse(ErrorCode.BAD_ADDRESS, self.n_weights)
            for i, w in enumerate(words):
                self.pending[first + i] = unpack_word(w, 1, self.weight_bits, True)[0]
            self.model_id = bytes(16)
            return b""
        if kind == FrameType.COMMIT_WEIGHTS:
            if not self.weights_ram:
                raise _Refuse(ErrorCode.UNSUPPORTED, 0)
            if len(payload) != 16:
                raise _Refuse(ErrorCode.WRONG_SHAPE, 16)
            self._commit()
            self.model_id = payload
            return b""
        raise _Refuse(ErrorCode.UNKNOWN_TYPE, 0)

    def _state_word(self, address: int) -> int:
        st = self.learner.formats.storage
        state = self.stepper.state()
        if self.learner.spec.kind == "kan":
            for a, layer, i, p in state_layout._kan_addresses(self.learner):
                if a == address:
                    return pack_word(state[layer]["coeffs"][:, i, p].tolist(), st.width)
            return 0
        from bitforge.toolchain.backends.rtl.learner_mlp import parameter_order
        layer, kind, idx = parameter_order(self.learner)[address]
        return pack_word([int(state[layer]["weight" if kind == "w" else "bias"][idx])], st.width)

    def _commit(self) -> None:
        it = iter(range(self.n_weights))
        nodes = []
        for n in self.graph.nodes:
            changes = {}
            for k, a in sorted(n.array_fields().items()):
                flat = np.array([self.pending.get(next(it), 0) for _ in range(a.size)], dtype=np.int64)
                changes[k] = flat.reshape(a.shape)
            nodes.append(dataclasses.replace(n, **changes) if changes else n)
        g = self.graph.copy()
        g.nodes = nodes
        self.graph = g


class _Refuse(Exception):
    def __init__(self, code: int, detail: int):
        self.code, self.detail = code, detail


class MemoryLink:
    """A byte link to a :class:`ReferenceDevice` in this process, with deterministic faults.

    ``on_write(i, data)`` may change (or drop: return ``b""``) the host's i-th write before the device gets it;
    ``on_answer(j, data)`` the device's j-th non-empty answer before the host reads it. ``writes`` keeps every
    host write as sent (before faults). A device that never answers: ``silent=True``.
    """

    def __init__(self, device: Optional[ReferenceDevice], *, bit_s: float = 1e-6, margin_s: float = 0.05,
                 on_write: Optional[Callable[[int, bytes], bytes]] = None,
                 on_answer: Optional[Callable[[int, bytes], bytes]] = None, silent: bool = False):
        self.name = "reference device"
        self.device = device
        self.timing = LinkTiming(bit_s, bit_s / 10, margin_s, 0.002)
        self.on_write, self.on_answer, self.silent = on_write, on_answer, silent
        self.writes: list[bytes] = []
        self.answers = 0
        self._buf = bytearray()
        self.closed = False

    def write(self, data: bytes) -> None:
        i = len(self.writes)
        self.writes.append(bytes(data))
        if self.on_write is not None:
            data = self.on_write(i, bytes(data))
        if self.silent or self.device is None:
            return
        answer = self.device.receive(data)
        if answer:
            j, self.answers = self.answers, self.answers + 1
            if self.on_answer is not None:
                answer = self.on_answer(j, answer)
            self._buf += answer

    def read(self, max_wait: float) -> bytes:
        if not self._buf:
            time.sleep(max(0.0, min(max_wait, 0.5)))
            return b""
        data, self._buf = bytes(self._buf), bytearray()
        return data

    def close(self) -> None:
        self.closed = True

    def frames_sent(self) -> list:
        """Every frame the host wrote (decoded), in order."""
        dec = FrameDecoder()
        return [f for w in self.writes for f in dec.feed(w) if isinstance(f, Frame)]


def flip(data: bytes, index: int, bit: int = 0) -> bytes:
    b = bytearray(data)
    b[index % len(b)] ^= 1 << bit
    return bytes(b)


class PtyDevice:
    """A :class:`ReferenceDevice` served on a pseudo-terminal in raw mode, from a thread: ``port`` is the path
    that pyserial opens, as it opens a board's."""

    def __init__(self, device: ReferenceDevice):
        self.device = device
        self.master, slave = os.openpty()
        tty.setraw(slave)
        self.port = os.ttyname(slave)
        self._slave = slave
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        import select
        while not self._stop.is_set():
            ready, _, _ = select.select([self.master], [], [], 0.05)
            if not ready:
                continue
            try:
                data = os.read(self.master, 4096)
            except OSError:
                return
            answer = self.device.receive(data)
            if answer:
                os.write(self.master, answer)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        os.close(self.master)
        os.close(self._slave)

    def __enter__(self) -> "PtyDevice":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
