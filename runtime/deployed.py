"""What the host knows about the model a device should run: identity, word formats, timing, weight layout.

The host runtime (:mod:`bitforge.runtime.device`) needs the same few facts whatever it was given: a bundle
(the normal case), a compiled output folder, a learner, or an IR graph (tests, ``load_weights``). This module
turns each of those into one :class:`DeployedModel`, so that the device code never reads files itself and a
weight file is judged by the same ``arch_id`` function the bundle was stamped with
(:mod:`bitforge.toolchain.identity`).

The word formats come from the IR, which is what the golden model runs: a compiled model's device input is
the output type of its input ``Quantize`` (the host quantizes, the core starts after it), its output is the
graph's output type; a learner's are its ``formats.input`` and ``formats.datapath``.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from bitforge.toolchain import identity, ir
from bitforge.toolchain.errors import BitforgeError
from bitforge.toolchain.fixed import FixedType
from bitforge.toolchain.learn.spec import Learner, find_learner, learner_from_graph, load_learner

PathLike = Union[str, os.PathLike]


class ModelSourceError(BitforgeError):
    """Something that should describe a model (a bundle, an output folder, a graph) does not."""


@dataclass(frozen=True)
class DeployedModel:
    """One model as a device runs it.

    ``graph`` is the IR the golden model runs on real-valued inputs (a learner's inference graph with its input
    ``Quantize``); ``learner`` is set for online learners (their trajectory is ``learn.emulate``'s). ``in_type``
    and ``out_type`` are the element types of the stream words; ``d_in``/``d_out`` their element counts.
    ``in_shape``/``out_shape`` are the model's per-sample shapes (their products are ``d_in``/``d_out``).
    Timing (``latency_cycles``, ``ii``, ``clock_hz``, ``baud``) sizes the host's deadlines; ``weights`` is the
    weight layout of a ``--weights ram`` build (None: constant weights); ``bundle`` the bundle it came from.
    """

    name: str
    model_id: str
    arch_id: str
    graph: ir.Graph
    in_type: FixedType
    out_type: FixedType
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    learner: Optional[Learner] = None
    latency_cycles: int = 0
    ii: int = 1
    clock_hz: Optional[int] = None
    baud: Optional[int] = None
    clks_per_bit: Optional[int] = None
    weights: Optional[dict] = None
    rtl_device: dict = field(default_factory=dict)
    bundle: Any = None
    source: str = ""

    @property
    def d_in(self) -> int:
        return math.prod(self.in_shape)

    @property
    def d_out(self) -> int:
        return math.prod(self.out_shape)

    @property
    def model_id16(self) -> bytes:
        """The ``model_id`` as ``hello`` carries it: the first 16 bytes of the digest."""
        return bytes.fromhex(self.model_id)[:16]

    @property
    def arch_id16(self) -> bytes:
        return bytes.fromhex(self.arch_id)[:16]

    def onnx_bytes(self) -> bytes:
        """The ONNX model the CPU path runs: the bundle's ``model.onnx`` when there is one, else exported from
        the IR (the same exporter ``compile`` uses)."""
        if self.bundle is not None and self.learner is None and self.bundle.manifest.model_id == self.model_id:
            return self.bundle.read("model.onnx")
        from bitforge.toolchain.backends.onnx_backend import to_onnx
        return to_onnx(self.graph).SerializeToString()

    def with_parameters(self, other: "DeployedModel") -> "DeployedModel":
        """This device's model after ``other``'s weights were loaded into it: ``other``'s identity, graph and
        learner, this build's timing, link settings and layout (the architecture is the same)."""
        return DeployedModel(other.name, other.model_id, other.arch_id, other.graph, self.in_type, self.out_type,
                             self.in_shape, self.out_shape, other.learner, self.latency_cycles, self.ii,
                             self.clock_hz, self.baud, self.clks_per_bit, self.weights, self.rtl_device, self.bundle,
                             other.source)


def _io_types(g: ir.Graph, source: str) -> tuple[FixedType, FixedType, tuple[int, ...], tuple[int, ...]]:
    if len(g.inputs) != 1 or len(g.outputs) != 1:
        raise ModelSourceError(f"{source}: graph '{g.name}' has {len(g.inputs)} inputs and {len(g.outputs)} outputs; "
                               "a device runs single-input, single-output models")
    x = g.tensors[g.inputs[0]]
    first = g.nodes[0] if g.nodes else None
    in_t = g.tensors[first.output].dtype if isinstance(first, ir.Quantize) else x.dtype
    out_t = g.tensors[g.outputs[0]].dtype
    if in_t is None or out_t is None:
        raise ModelSourceError(f"{source}: graph '{g.name}' has a float {'input' if in_t is None else 'output'} after "
                               "its input quantizer; a device needs fixed point (compile with --precision)")
    return in_t, out_t, tuple(x.shape), tuple(g.tensors[g.outputs[0]].shape)


def from_graph(g: ir.Graph, *, source: str = "", **timing) -> DeployedModel:
    """A compiled model's IR (its first node the input ``Quantize``, or a fixed-point input)."""
    in_t, out_t, in_shape, out_shape = _io_types(g, source or g.name)
    return DeployedModel(g.name, identity.model_id(g), identity.arch_id(g), g, in_t, out_t, in_shape, out_shape,
                         source=source or g.name, **timing)


def from_learner(learner: Learner, *, source: str = "", **timing) -> DeployedModel:
    """An online learner: ids from its spec and stored state (``identity.learner_model_id``/``learner_arch_id``,
    which cover the update rule and formats), as the device wrapper and ``bitforge deploy`` stamp them; words
    from its formats (``{learn_enable, t, x}`` in, predictions out)."""
    f = learner.formats
    d_in, d_out = learner.spec.sizes[0], learner.spec.sizes[-1]
    return DeployedModel(learner.graph.name, identity.learner_model_id(learner), identity.learner_arch_id(learner),
                         learner.inference_graph(float_input=True), f.input, f.datapath, (d_in,), (d_out,),
                         learner=learner, source=source or learner.graph.name, **timing)


def from_folder(path: PathLike) -> DeployedModel:
    """A ``bitforge compile``/``learn`` output folder (or an IR folder). Of a ``bitforge learn`` output, the
    initial state (``learner/``): the one its device starts from (``final/`` is where the golden run ended)."""
    path = Path(path)
    learner_dir = path / "learner" if find_learner(path / "learner") is not None else find_learner(path)
    if learner_dir is not None:
        return from_learner(load_learner(learner_dir), source=str(path))
    g = ir.load(path)
    timing = {}
    man = path / "rtl" / "manifest.json"
    if man.is_file():
        try:
            doc = json.loads(man.read_text())
        except (OSError, ValueError) as e:
            raise ModelSourceError(f"{man}: not readable JSON ({e}); compile the model again") from None
        timing = _timing_from_rtl_manifest(doc)
    return from_graph(g, source=str(path), **timing)


def _timing_from_rtl_manifest(doc: dict) -> dict:
    out: dict = {}
    if isinstance(doc.get("latency_cycles"), int):
        out["latency_cycles"] = doc["latency_cycles"]
    if isinstance(doc.get("ii"), int):
        out["ii"] = doc["ii"]
    weights = doc.get("weights", (doc.get("device") or {}).get("weights"))
    if isinstance(weights, dict) and weights.get("mode") == "ram":  # "rom": constants of the bitstream
        out["weights"] = weights
    if isinstance(doc.get("device"), dict):
        out["rtl_device"] = doc["device"]
    return out


def from_bundle(bundle) -> DeployedModel:
    """An opened :class:`bitforge.runtime.bundle.Bundle`: its IR (a learner's initial state), ids (checked against
    the IR: a bundle whose manifest names another model than its files hold is refused), word formats, a
    learner's state layout (checked against the learner's own), timing and board link."""
    from safetensors.numpy import load as load_safetensors

    src = str(bundle.path)
    man = bundle.manifest
    folder = "" if man.learner is None else "learner/"
    try:
        doc = json.loads(bundle.read(f"{folder}model.json").decode("utf-8"))
        arrays = load_safetensors(bundle.read(f"{folder}weights.safetensors"))
    except (ValueError, UnicodeDecodeError) as e:
        raise ModelSourceError(f"{src}: {folder}model.json or {folder}weights.safetensors cannot be read ({e})") \
            from None
    rtl = bundle.read_json("rtl/manifest.json")
    timing = _timing_from_rtl_manifest(rtl)
    timing.update(latency_cycles=man.device.latency_cycles, ii=man.device.ii)
    if man.device.weights is not None and man.device.weights.get("mode") == "ram":
        timing["weights"] = man.device.weights
    if man.board is not None:
        timing.update(clock_hz=man.board.clock_hz, baud=man.board.baud, clks_per_bit=man.board.clks_per_bit)
    if man.learner is not None:
        learner = learner_from_graph(ir.from_json(doc, arrays, f"{src}: {folder}model.json"), f"{src}: {folder}")
        _check_learner_info(learner, man.learner, (rtl.get("device") or {}).get("hello") or {}, src)
        model = from_learner(learner, source=src, **timing)
    else:
        g = ir.from_json(doc, arrays, f"{src}: model.json")
        model = from_graph(g, source=src, **timing)
    if (model.model_id, model.arch_id) != (man.model_id, man.arch_id):
        raise ModelSourceError(f"{src}: bundle.json says model_id {man.model_id[:16]}... arch_id {man.arch_id[:16]}..., "
                               f"but its model.json and weights.safetensors are model_id {model.model_id[:16]}... "
                               f"arch_id {model.arch_id[:16]}...; the bundle was assembled by hand: deploy it again")
    return DeployedModel(model.name, model.model_id, model.arch_id, model.graph, model.in_type, model.out_type,
                         model.in_shape, model.out_shape, model.learner, model.latency_cycles, model.ii,
                         model.clock_hz, model.baud, model.clks_per_bit, model.weights, model.rtl_device, bundle, src)


def _check_learner_info(learner: Learner, info, hello: dict, src: str) -> None:
    """The manifest's learner section must be what the learner it carries gives on the device it carries (the
    state words of ``rtl/manifest.json``'s hello): formats, rule and state layout (a client without bitforge reads
    them from there, bitforge's host from the learner itself)."""
    from .learner_manifest import learner_info

    want = learner_info(learner, hello.get("state_word_bits", 0), hello.get("state_words", 0)).to_json()
    got = info.to_json()
    for key in want:
        if got.get(key) != want[key]:
            raise ModelSourceError(f"{src}: bundle.json's learner.{key} is not what its learner/model.json describes "
                                   f"({json.dumps(got.get(key))[:80]} vs {json.dumps(want[key])[:80]}); the bundle "
                                   "was assembled by hand: deploy it again")


def load(source: Any, *, expect_sha256: Optional[str] = None) -> DeployedModel:
    """Any model source: a :class:`DeployedModel`, a ``Bundle``, a ``.bfb`` path, an output folder, an
    ``ir.Graph`` or a ``Learner``."""
    if isinstance(source, DeployedModel):
        return source
    if isinstance(source, Learner):
        return from_learner(source)
    if isinstance(source, ir.Graph):
        return from_graph(source)
    from .bundle import Bundle
    if isinstance(source, Bundle):
        return from_bundle(source)
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if path.is_dir():
            return from_folder(path)
        return from_bundle(Bundle.open(path, expect_sha256=expect_sha256))
    raise ModelSourceError(f"cannot run {type(source).__name__!r} on a device: give a .bfb bundle, a bitforge "
                           "output folder, an IR graph or a learner")
