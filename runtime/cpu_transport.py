"""The CPU path: the bundle's model run by ONNX Runtime on the host, for edge computers without an FPGA.

Not a byte link: the :class:`~bitforge.runtime.device.Device` hands this the same integer codes it would pack
into words for a board, and gets the same integer codes back. A compiled model runs the bundle's
``model.onnx`` (bitforge's exact int64 export, checked against the golden model when it was compiled): the
codes are fed as the real values they stand for (exact in float32 for inputs up to 24 bits, checked), the
model's input quantizer maps them back to the same codes, and the answer is the ``*_code`` output. Its real
output times ``2**frac`` must be that same integer: checked on every call, so a model whose two outputs
disagree is reported instead of trusted. An online learner runs the golden learner
(:class:`bitforge.toolchain.learn.emulate.Stepper`) one sample at a time, as the device does.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from bitforge.toolchain import fixed
from bitforge.toolchain.errors import BitforgeError

from .deployed import DeployedModel
from .protocol import PROTOCOL_VERSION, Capability, Hello

#: float32 holds every integer up to 2**24 exactly: wider input codes cannot pass through a float input.
FLOAT32_EXACT_BITS = 24


class CpuTransportError(BitforgeError):
    """The CPU path cannot run this model or these inputs bit for bit."""


class CpuTransport:
    """ONNX Runtime (compiled models) or the golden learner (online learners) in this process."""

    name = "cpu"

    def __init__(self, model: DeployedModel, threads: Optional[int] = None):
        self.threads = threads
        self._load(model)

    def _load(self, model: DeployedModel) -> None:
        self.model = model
        self._session = None
        self._stepper = None
        if model.learner is not None:
            from bitforge.toolchain.learn.emulate import Stepper
            self._stepper = Stepper(model.learner)
        else:
            from bitforge.toolchain.backends.onnx_backend import make_session
            self._session = make_session(model.onnx_bytes(), self.threads)
            self._input = self._session.get_inputs()[0].name
            out = model.graph.outputs[0]
            names = {o.name for o in self._session.get_outputs()}
            if {out, f"{out}_code"} - names:
                raise CpuTransportError(f"{model.source}: model.onnx has outputs {sorted(names)}, not '{out}' and "
                                        f"'{out}_code' as bitforge exports them; deploy the model again")
            self._outputs = [f"{out}_code", out]

    def hello(self) -> Hello:
        """What a device running this model would say (so the same checks apply)."""
        m = self.model
        caps = Capability.INFER | (Capability.LEARN | Capability.READ_STATE if m.learner is not None else 0)
        caps |= Capability.WRITE_WEIGHTS
        return Hello(PROTOCOL_VERSION, int(caps), 0xFFFF, m.d_in * m.in_type.width, m.d_out * m.out_type.width,
                     m.d_in, m.in_type.width, m.in_type.frac, m.in_type.signed, m.d_out, m.out_type.width,
                     m.out_type.frac, m.out_type.signed, m.latency_cycles, m.ii, 0, 0, 0, 0, 0, m.model_id16,
                     m.arch_id16, "cpu")

    def infer_codes(self, codes: np.ndarray, progress=None) -> np.ndarray:
        """Output codes ``(n, d_out)`` for input codes ``(n, d_in)`` (one call: ``progress`` hears of the end)."""
        out = self._infer(codes)
        if progress is not None:
            progress(len(codes), len(codes))
        return out

    def _infer(self, codes: np.ndarray) -> np.ndarray:
        if self._stepper is not None:  # the learner's inference graph with the state it has now
            from bitforge.toolchain import emulate
            g = self.model.learner.with_state(self._stepper.state()).inference_graph()
            return np.asarray(emulate.run(g, codes)[g.outputs[0]], dtype=np.int64)
        t = self.model.in_type
        if t.width > FLOAT32_EXACT_BITS:
            raise CpuTransportError(f"{self.model.source}: the input type {t} is {t.width} bits wide; ONNX Runtime "
                                    f"takes float32 inputs, exact only up to {FLOAT32_EXACT_BITS} bits: run this "
                                    "model on a board or the simulated board")
        values = fixed.to_float(codes, t).astype(np.float32).reshape((len(codes),) + self.model.in_shape)
        code, real = self._session.run(self._outputs, {self._input: values})
        code = np.asarray(code, dtype=np.int64).reshape(len(codes), -1)
        scaled = np.ldexp(np.asarray(real, dtype=np.float64).reshape(len(codes), -1), self.model.out_type.frac)
        if not np.array_equal(scaled, code):
            bad = int(np.argwhere(scaled != code)[0][0])
            raise CpuTransportError(f"{self.model.source}: model.onnx's real output times 2**{self.model.out_type.frac} "
                                    f"is not its code output (sample {bad}: {scaled[bad].tolist()} vs "
                                    f"{code[bad].tolist()}); the ONNX model is damaged: deploy again")
        return code

    def learn_codes(self, x: np.ndarray, t: np.ndarray, learn: np.ndarray, progress=None) -> np.ndarray:
        """Prediction codes of each sample, each predicted with the state its predecessors left (as the device)."""
        out = np.zeros((len(x), self.model.d_out), dtype=np.int64)
        for i in range(len(x)):
            out[i] = self._stepper.step(x[i:i + 1], t[i:i + 1], learn[i:i + 1])[0][0]
            if progress is not None and ((i + 1) % 256 == 0 or i + 1 == len(x)):
                progress(i + 1, len(x))
        return out

    def read_state(self) -> list:
        return self._stepper.state()

    def load_weights(self, model: DeployedModel) -> None:
        self._load(model)

    def close(self) -> None:
        self._session = None
        self._stepper = None
