"""A deployed model as a Python object: ``Device.open(bundle, transport)``, then ``predict``, ``learn``,
``read_state``, ``load_weights``, ``close``.

The host does the float side and the device the integer side, so the answers are the golden model's bit for
bit: :meth:`Device.predict` quantizes real inputs exactly as the model's input ``Quantize`` node does
(float32 first, then :func:`bitforge.toolchain.fixed.quantize` into the device's input type), sends the codes
in words (``docs/protocol.md``), and turns the answer's codes into real values (:func:`fixed.to_float`).

The transport decides where the integers are computed: ``"sim"`` (the bundle's device RTL on the simulated
board, the whole host-to-gates path without hardware), a serial port such as ``"/dev/ttyUSB0"`` (a board
programmed with the bundle's bitstream), ``"cpu"`` (ONNX Runtime or the golden learner in this process), or
any :class:`~bitforge.runtime.session.ByteLink` (tests). On a byte link every request has a deadline and is
retried (:mod:`bitforge.runtime.session`); a session starts with a flush and ``hello``, whose answer must
describe the bundle's model: the same protocol version, ids and word formats.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np

from bitforge.toolchain import fixed
from bitforge.toolchain.errors import BitforgeError
from bitforge.toolchain.fixed import FixedType

from . import deployed
from .cpu_transport import CpuTransport
from .deployed import DeployedModel
from .protocol import (
    ID_BYTES,
    PROTOCOL_VERSION,
    Capability,
    FrameError,
    FrameType,
    Hello,
    bytes_to_words,
    pack_word,
    read_state_request,
    unpack_word,
    words_to_bytes,
    write_weights_request,
)
from .session import ByteLink, DeviceFault, DeviceRefused, DeviceTimeout, LinkTiming, Session, SessionStats

__all__ = ["Device", "DeviceFault", "DeviceTimeout", "DeviceRefused", "DeviceMismatch", "InputError",
           "WeightsMismatch", "LearnerState"]

#: ``(done, total)`` samples, for progress bars.
Progress = Callable[[int, int], None]
DEFAULT_RETRIES = 4
#: The hello answer: 72 bytes of fields and up to 32 of version text.
HELLO_ANSWER_BYTES = 104


class DeviceMismatch(DeviceFault):
    """The device runs something else than the bundle describes (another model, another build, another protocol)."""


class WeightsMismatch(BitforgeError):
    """Weights of another architecture than the device's: refused before a byte is sent."""


class InputError(BitforgeError):
    """Inputs that do not fit the model: wrong shape, non-finite values, codes outside their type."""


@dataclass(frozen=True)
class LearnerState:
    """A learner's coefficients as read back: ``codes`` (storage codes, shaped as the golden model's state:
    one dict per layer, ``coeffs`` for a KAN, ``weight`` and ``bias`` for an MLP) and ``values`` (the same as
    real numbers)."""

    codes: list
    values: list


def _hex(b: bytes) -> str:
    return b.hex()


class Device:
    """One session with a device running a bundle's model. Open with :meth:`open`; use as a context manager."""

    def __init__(self, model: DeployedModel, backend: Any, hello: Hello, session: Optional[Session] = None):
        self.model = model
        self._backend = backend
        self.hello = hello
        self.session = session

    # -- opening ------------------------------------------------------------------------------------------------

    @classmethod
    def open(cls, source: Any, transport: Union[str, ByteLink, CpuTransport] = "sim", *,
             timeout: Optional[float] = None, retries: int = DEFAULT_RETRIES, baud: Optional[int] = None,
             expect_sha256: Optional[str] = None, flip_rate: float = 0.0, seed: int = 0,
             progress: Optional[Callable[[str], None]] = None) -> "Device":
        """Open ``source`` (a ``.bfb`` path, a ``Bundle``, an output folder, a graph or learner) on ``transport``:
        ``"sim"``, ``"cpu"``, a serial port path, or a byte link. ``timeout`` replaces the link's margin (seconds
        added to every computed deadline); ``retries`` tries after the first; ``baud`` overrides the bundle's for
        a serial port; ``flip_rate``/``seed`` inject bit errors on the simulated board."""
        model = deployed.load(source, expect_sha256=expect_sha256)
        if isinstance(transport, CpuTransport):
            return cls._open_cpu(model, transport)
        if transport == "cpu":
            return cls._open_cpu(model, CpuTransport(model))
        if transport == "sim":
            from .transports import SimTransport
            link = SimTransport.for_model(model, flip_rate=flip_rate, seed=seed, progress=progress)
        elif isinstance(transport, str):
            from .transports import DEFAULT_BAUD, SerialTransport
            link = SerialTransport(transport, baud or model.baud or DEFAULT_BAUD, clock_hz=model.clock_hz)
        else:
            link = transport
        try:
            return cls._open_link(model, link, timeout=timeout, retries=retries)
        except BaseException:
            link.close()
            raise

    @classmethod
    def _open_cpu(cls, model: DeployedModel, cpu: CpuTransport) -> "Device":
        return cls(model, cpu, cpu.hello())

    @classmethod
    def _open_link(cls, model: DeployedModel, link: ByteLink, *, timeout: Optional[float], retries: int) -> "Device":
        timing: LinkTiming = getattr(link, "timing", None) or LinkTiming(1 / 115_200, 1 / 12e6, 0.25, 0.05)
        if timeout is not None:
            if not timeout > 0:
                raise BitforgeError(f"timeout must be a positive number of seconds, not {timeout!r}")
            timing = LinkTiming(timing.bit_s, timing.cycle_s, float(timeout), timing.settle_s)
        session = Session(link, timing, retries=retries)
        session.flush()
        payload = session.request(FrameType.HELLO, answer_bytes=HELLO_ANSWER_BYTES)
        try:
            hello = Hello.parse(payload)
        except FrameError as e:
            raise DeviceMismatch(f"{link.name}: {e}") from None
        _check_hello(model, hello, link.name)
        session.set_max_payload(hello.max_payload)
        return cls(model, _WireBackend(session, hello, model), hello, session)

    # -- inference ----------------------------------------------------------------------------------------------

    def predict(self, x, *, progress: Optional[Progress] = None) -> np.ndarray:
        """Real outputs ``(n, *out_shape)`` for real inputs ``(n, d_in)`` / ``(n, *in_shape)``; a single sample
        (``(d_in,)`` or ``in_shape``) gives a single output. Bit-exact with the golden model (``emulate.run``)."""
        x, single = self._samples(x, "inputs")
        codes = self.quantize_inputs(x)
        y = fixed.to_float(self.predict_codes(codes, progress=progress), self.model.out_type)
        y = y.reshape((len(x),) + self.model.out_shape)
        return y[0] if single else y

    def quantize_inputs(self, x) -> np.ndarray:
        """Input codes ``(n, d_in)``: float32 first, then the input type's rounding and overflow, exactly the
        golden model's input ``Quantize``."""
        x = np.asarray(x)
        if x.dtype.kind not in "biuf":
            raise InputError(f"inputs must be real numbers, found dtype {x.dtype}")
        x64 = x.astype(np.float64)
        bad = ~np.isfinite(x64)
        if bad.any():
            first = tuple(int(i) for i in np.argwhere(bad)[0])
            raise InputError(f"{int(bad.sum())} input value(s) are NaN or infinite, first at index {first}; a "
                             "device quantizes finite numbers only: clean or clip the data")
        big = np.abs(x64) > np.finfo(np.float32).max
        if big.any():
            first = tuple(int(i) for i in np.argwhere(big)[0])
            raise InputError(f"{int(big.sum())} input value(s) beyond float32's range (+-3.4e38), first at index "
                             f"{first}; the model's inputs are float32: scale or clip the data")
        return fixed.quantize(x64.astype(np.float32), self.model.in_type).reshape(len(x), self.model.d_in)

    def predict_codes(self, codes, *, progress: Optional[Progress] = None) -> np.ndarray:
        """Output codes ``(n, d_out)`` for input codes ``(n, d_in)`` of the device's input type."""
        codes = self._codes(codes, self.model.in_type, self.model.d_in, "input codes")
        return self._backend.infer_codes(codes, progress)

    # -- online learning ----------------------------------------------------------------------------------------

    def learn(self, x, y, learn_enable=None, *, progress: Optional[Progress] = None) -> np.ndarray:
        """Predict, then update on each sample in order (the device's learner); returns the real predictions
        ``(n, d_out)``. ``x`` is quantized into the learner's input format, ``y`` (the targets) into its datapath
        format, as ``bitforge learn`` quantizes a stream."""
        learner = self._learner()
        f = learner.formats
        x, _ = self._samples(x, "inputs x")
        y = np.asarray(y, dtype=np.float64).reshape(len(x), -1)
        for a, what in ((x, "x"), (y, "y")):
            if not np.all(np.isfinite(np.asarray(a, dtype=np.float64))):
                raise InputError(f"{what} holds NaN or infinite values; clean the stream first")
        if y.shape[1] != self.model.d_out:
            raise InputError(f"targets y: expected shape (n, {self.model.d_out}) with n = {len(x)}, found "
                             f"{np.shape(y)}")
        xq = fixed.quantize(np.asarray(x, dtype=np.float64).reshape(len(x), -1), f.input)
        tq = fixed.quantize(y, f.datapath)
        pred = self.learn_codes(xq, tq, learn_enable, progress=progress)
        return fixed.to_float(pred, f.datapath)

    def learn_codes(self, x_codes, target_codes, learn_enable=None, *,
                    progress: Optional[Progress] = None) -> np.ndarray:
        """Prediction codes for input and target codes; ``learn_enable`` (n,) booleans, default all True."""
        learner = self._learner()
        f = learner.formats
        x = self._codes(x_codes, f.input, self.model.d_in, "input codes")
        t = self._codes(target_codes, f.datapath, self.model.d_out, "target codes")
        if len(t) != len(x):
            raise InputError(f"{len(x)} inputs but {len(t)} targets; give one target per sample")
        le = np.ones(len(x), dtype=bool) if learn_enable is None else np.asarray(learn_enable, dtype=bool).ravel()
        if len(le) != len(x):
            raise InputError(f"learn_enable has {len(le)} entries for {len(x)} samples")
        return self._backend.learn_codes(x, t, le, progress)

    def read_state(self) -> LearnerState:
        """The learner's coefficients as they are now on the device (``read_state`` requests)."""
        learner = self._learner()
        codes = self._backend.read_state()
        st = learner.formats.storage
        return LearnerState(codes, [{k: fixed.to_float(v, st) for k, v in layer.items()} for layer in codes])

    def _learner(self):
        if self.model.learner is None:
            raise DeviceFault(f"{self.model.source}: '{self.model.name}' is a compiled model, not an online learner; "
                              "learn and read_state need a device built from 'bitforge learn'")
        return self.model.learner

    # -- weights ------------------------------------------------------------------------------------------------

    def load_weights(self, source: Any) -> None:
        """Load another model of the same architecture (an output folder, a bundle, a graph, a learner) into a
        ``--weights ram`` device. Refused before anything is sent when its ``arch_id`` differs. Afterwards
        ``hello`` reports the new ``model_id`` and :meth:`predict` gives the new model's golden outputs."""
        new = deployed.load(source)
        if new.arch_id != self.model.arch_id:
            raise WeightsMismatch(f"{new.source}: architecture {new.arch_id[:16]}... differs from the device's "
                                  f"{self.model.arch_id[:16]}... ({self.model.name}): its weights do not fit this build; "
                                  f"build and deploy '{new.name}' itself (bitforge deploy), or load a model with the "
                                  "same layers, sizes and types")
        target = self.model.with_parameters(new)
        self._backend.load_weights(target)
        self.model = target
        if self.session is not None:
            self.hello = self._backend.hello
            if self.hello.model_id != new.model_id16:
                raise DeviceMismatch(f"{self.session.link.name}: after loading {new.name} the device reports model_id "
                                     f"{_hex(self.hello.model_id)}, expected {_hex(new.model_id16)}: the load did not "
                                     "take; load the weights again")

    # -- housekeeping -------------------------------------------------------------------------------------------

    @property
    def stats(self) -> Optional[SessionStats]:
        """Requests, retries and what caused them (None on the CPU path)."""
        return None if self.session is None else self.session.stats

    def close(self) -> None:
        backend, self._backend = self._backend, None
        if backend is not None:
            backend.close()

    def __enter__(self) -> "Device":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        where = "cpu" if self.session is None else self.session.link.name
        return f"Device({self.model.name!r} on {where})"

    # -- argument checks ----------------------------------------------------------------------------------------

    def _samples(self, x, what: str) -> tuple[np.ndarray, bool]:
        m = self.model
        x = np.asarray(x)
        for shape in ((m.d_in,), m.in_shape):
            if x.shape == shape:
                return x.reshape(1, m.d_in), True
            if x.ndim == len(shape) + 1 and x.shape[1:] == shape:
                return x.reshape(len(x), m.d_in), False
        expect = f"(n, {m.d_in})" + (f" or (n, {', '.join(map(str, m.in_shape))})" if len(m.in_shape) > 1 else "")
        raise InputError(f"{what}: expected shape {expect} or one sample ({m.d_in},); found {x.shape}")

    def _codes(self, codes, t: FixedType, width: int, what: str) -> np.ndarray:
        a = np.asarray(codes)
        if a.ndim == 1 and a.shape[0] == width:
            a = a[None]
        if a.ndim != 2 or a.shape[1] != width:
            raise InputError(f"{what}: expected shape (n, {width}), found {a.shape}")
        if a.dtype.kind not in "iu":
            raise InputError(f"{what}: expected integer codes of {t}, found dtype {a.dtype}")
        if a.size and (a.min() < t.min_code or a.max() > t.max_code):
            raise InputError(f"{what}: codes in [{a.min()}, {a.max()}] lie outside {t} [{t.min_code}, {t.max_code}]")
        return a.astype(np.int64)


def _check_hello(model: DeployedModel, h: Hello, where: str) -> None:
    if h.protocol_version != PROTOCOL_VERSION:
        raise DeviceMismatch(f"{where}: the device speaks protocol version {h.protocol_version}, this host "
                             f"{PROTOCOL_VERSION}; use the bitforge version that built the device")
    if h.model_id == bytes(ID_BYTES):
        raise DeviceMismatch(f"{where}: the device reports model_id 0 (its weights were being loaded and the load "
                             f"did not finish); load {model.name}'s weights again (Device.load_weights) or reprogram "
                             "the board")
    if h.arch_id != model.arch_id16 or h.model_id != model.model_id16:
        other = "another architecture" if h.arch_id != model.arch_id16 else "other weights of the same architecture"
        hint = ("program the board with this bundle's bitstream (bitforge program), or open the bundle of the model it "
                "runs" if h.arch_id != model.arch_id16 else
                "load this bundle's weights (Device.load_weights) or open the bundle of the model it runs")
        raise DeviceMismatch(f"{where}: the device runs {other}: model_id {_hex(h.model_id)} arch_id {_hex(h.arch_id)}, "
                             f"but {model.source} is '{model.name}' with model_id {model.model_id16.hex()} arch_id "
                             f"{model.arch_id16.hex()}; {hint}")
    m = model
    words = [("input element", (h.in_count, h.in_elem_bits, h.in_frac, h.in_signed),
              (m.d_in, m.in_type.width, m.in_type.frac, m.in_type.signed)),
             ("output element", (h.out_count, h.out_elem_bits, h.out_frac, h.out_signed),
              (m.d_out, m.out_type.width, m.out_type.frac, m.out_type.signed))]
    for what, got, want in words:
        if got != want:
            raise DeviceMismatch(f"{where}: the device's {what}s are (count, bits, frac, signed) {got}, the bundle's "
                                 f"{want}; the bitstream was built from another version of this model: deploy again")
    want_in = m.d_in * m.in_type.width + (m.d_out * m.out_type.width + 1 if m.learner is not None else 0)
    if h.in_bits != want_in or h.out_bits != m.d_out * m.out_type.width:
        raise DeviceMismatch(f"{where}: the device's words are {h.in_bits} bits in and {h.out_bits} out, the bundle's "
                             f"{want_in} and {m.d_out * m.out_type.width}; deploy again")
    if h.max_payload < max(h.in_bytes, h.out_bytes, 6):
        raise DeviceMismatch(f"{where}: max_payload {h.max_payload} cannot hold one word; not a working bitforge device")


class _WireBackend:
    """The integer side over the protocol: words, batches as large as ``max_payload`` allows, address runs."""

    def __init__(self, session: Session, hello: Hello, model: DeployedModel):
        self.session = session
        self.hello = hello
        self.model = model
        self.batch = self._batch(hello.in_bytes, hello.out_bytes) if hello.in_bits else 1
        self._clean = 0

    # words per request: both the request and the answer must fit max_payload
    def _batch(self, in_bytes: int, out_bytes: int) -> int:
        return max(1, min(self.hello.max_payload // in_bytes, self.hello.max_payload // out_bytes))

    def _stream(self, kind: FrameType, words: Sequence[int], progress: Optional[Progress]) -> np.ndarray:
        """Words through the core in requests of at most ``self.batch`` words. A request that needed retries
        halves the batch for the next ones (on a noisy line a long frame is rarely whole), four clean ones double
        it again up to what ``max_payload`` allows. An ``infer_batch`` whose retries ran out is split and sent
        again (inference has no side effect); a ``learn`` never is: its samples may have been applied, and only
        the same request (same seq) is answered from the device's copy."""
        h, m = self.hello, self.model
        k_max = self._batch(h.in_bytes, h.out_bytes)
        out = np.zeros((len(words), m.d_out), dtype=np.int64)
        done = 0
        while done < len(words):
            chunk = words[done:done + min(self.batch, k_max)]
            k = len(chunk)
            req = FrameType.INFER if kind == FrameType.INFER_BATCH and k == 1 else kind
            before = self.session.stats.retries
            try:
                answer = self.session.request(req, words_to_bytes(chunk, h.in_bits), answer_bytes=k * h.out_bytes,
                                              cycles=h.latency_cycles + k * h.ii)
            except DeviceTimeout:
                if kind != FrameType.INFER_BATCH or k == 1:
                    raise
                self.batch = max(1, k // 4)
                continue
            if self.session.stats.retries > before:
                self.batch, self._clean = max(1, k // 2), 0
            else:
                self._clean += 1
                if self._clean >= 4 and self.batch < k_max:
                    self.batch, self._clean = min(k_max, 2 * self.batch), 0
            if len(answer) != k * h.out_bytes:
                raise DeviceFault(f"{self.session.link.name}: {req.name.lower()} of {k} words was answered with "
                                  f"{len(answer)} bytes, expected {k * h.out_bytes}; the device runs another build")
            for i, w in enumerate(bytes_to_words(answer, h.out_bits)):
                out[done + i] = unpack_word(w, m.d_out, m.out_type.width, m.out_type.signed)
            done += k
            if progress is not None:
                progress(done, len(words))
        return out

    def infer_codes(self, codes: np.ndarray, progress: Optional[Progress]) -> np.ndarray:
        self._need(Capability.INFER, "infer")
        xw = self.model.in_type.width
        return self._stream(FrameType.INFER_BATCH, [pack_word(row, xw) for row in codes.tolist()], progress)

    def learn_codes(self, x: np.ndarray, t: np.ndarray, le: np.ndarray, progress: Optional[Progress]) -> np.ndarray:
        self._need(Capability.LEARN, "learn")
        m = self.model
        xw, dw = m.in_type.width, m.out_type.width
        t_at, le_at = m.d_in * xw, m.d_in * xw + m.d_out * dw
        words = [pack_word(xs, xw) | pack_word(ts, dw) << t_at | int(e) << le_at
                 for xs, ts, e in zip(x.tolist(), t.tolist(), le.tolist())]
        return self._stream(FrameType.LEARN, words, progress)

    def read_words(self, first: int, count: int) -> list[int]:
        """``count`` state words from address ``first``, in requests as large as ``max_payload`` allows."""
        h = self.hello
        per = max(1, h.max_payload // h.state_word_bytes)
        out: list[int] = []
        while count > 0:
            k = min(per, count, 0xFFFF)
            answer = self.session.request(FrameType.READ_STATE, read_state_request(first, k),
                                          answer_bytes=k * h.state_word_bytes, cycles=4 * k + 16)
            if len(answer) != k * h.state_word_bytes:
                raise DeviceFault(f"{self.session.link.name}: read_state of {k} words at {first} was answered with "
                                  f"{len(answer)} bytes, expected {k * h.state_word_bytes}")
            out += bytes_to_words(answer, h.state_word_bits)
            first, count = first + k, count - k
        return out

    def read_state(self) -> list:
        self._need(Capability.READ_STATE, "read_state")
        from .state_layout import state_from_words, state_words_needed

        learner = self.model.learner
        runs = state_words_needed(learner)
        words = {}
        for first, count in runs:
            for i, w in enumerate(self.read_words(first, count)):
                words[first + i] = w
        return state_from_words(learner, words)

    def load_weights(self, new: DeployedModel) -> None:
        h = self.hello
        name = self.session.link.name
        if not h.can(Capability.WRITE_WEIGHTS) or not h.weight_word_bits:
            raise WeightsMismatch(f"{name}: this device's weights are constants of its bitstream (built without "
                                  "--weights ram); deploy a --weights ram build to load weights at run time")
        if self.model.weights is None:
            raise WeightsMismatch(f"{self.model.source}: the bundle has no weight layout (rtl/manifest.json 'weights'); "
                                  "deploy the --weights ram build again")
        words = weight_words(new, self.model.weights)
        if len(words) != h.weight_words:
            raise WeightsMismatch(f"{new.source}: {len(words)} weight words, the device holds {h.weight_words}; the "
                                  "layout and the device disagree: deploy again")
        per = max(1, (h.max_payload - 4) // h.weight_word_bytes)
        for first in range(0, len(words), per):
            chunk = words[first:first + per]
            self.session.request(FrameType.WRITE_WEIGHTS, write_weights_request(first, chunk, h.weight_word_bits),
                                 cycles=4 * len(chunk) + 16)
        self.session.request(FrameType.COMMIT_WEIGHTS, new.model_id16, cycles=16)
        self.hello = Hello.parse(self.session.request(FrameType.HELLO, answer_bytes=HELLO_ANSWER_BYTES))
        self.model = self.model.with_parameters(new)

    def _need(self, cap: Capability, what: str) -> None:
        if not self.hello.can(cap):
            raise DeviceRefused(f"{self.session.link.name}: the device does not offer {what} (capabilities "
                                f"0x{self.hello.capabilities:02x}); " + (
                                    "only online learners learn" if cap != Capability.INFER else
                                    "it is not a bitforge inference device"), 8, 0)

    def close(self) -> None:
        self.session.link.close()


def weight_words(model: DeployedModel, layout: dict) -> list[int]:
    """The device's weight words for ``model``: the RTL backend's packer for ``--weights ram`` builds, which also
    refuses (naming the node and array) a graph whose layers do not match the layout."""
    from bitforge.toolchain.backends.rtl.weights_layout import Layout, pack_weight_words
    return [int(w) for w in pack_weight_words(model.graph, Layout.from_json(layout, f"{model.source}: weights"))]
