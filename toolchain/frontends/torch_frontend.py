"""PyTorch frontend: ``torch.export`` programs (live modules or ``.pt2`` archives) -> bitforge IR.

The frontend reads the exported ATen graph, never the module's attributes, so a live module and its
saved archive give the same IR. Types come from ``bitforge::fake_quant`` nodes (see
``bitforge.models.quant``): a quantizer on a parameter types that parameter, a quantizer on a graph input
is a ``Quantize``, a quantizer right after a fixed-point op types that op's output, any other one is a
``Requantize``. ``node.meta['nn_module_stack']`` says which module call an op came from; the ops of a
``KANLayer`` (the Cox-de Boor recursion) and the two products of a ``LowRankLinear`` are folded into one
IR node each. Accumulator types are left unset: the precision pass chooses them.

Convolutional and activation layers (``torch_layers`` reads their arguments) become float IR nodes that the
quantization pass types. A model with several unsupported nodes gets them all in one message: a node whose
input could not be converted is skipped (its own op is still checked), so each problem is reported once, at the
layer that has it, never as a shape mismatch further down.
"""
from __future__ import annotations

import dataclasses
import io
import operator
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np
import torch
from bitforge.models.kan import KANLayer as TorchKANLayer
from bitforge.models.kan import grid_from_spec
from bitforge.models.lowrank import LowRankLinear
from bitforge.models.quant import FAKE_QUANT_OP, fixed_type_of
from torch import nn
from torch.fx.operator_schemas import normalize_function

from .. import fixed, ir
from ..bspline import BASIS_IMPLS, index_params
from ..errors import BitforgeError
from ..fixed import FixedType, Overflow
from ..weight_codes import WEIGHT_CODES_KEY, weight_code_counts
from .pt2_archive import ArchiveError, logged_cause, quiet_torch_export_logs, read_archive
from .recurrent import ATEN_RECURRENT, recurrent_message
from .torch_layers import (
    TABLE_OPS,
    LayerError,
    activation,
    adaptive_pool_attrs,
    batchnorm_scale_shift,
    check_spatial_mean,
    conv_attrs,
    pool_attrs,
    spatial_pads,
)

__all__ = ["FrontendError", "from_torch", "load_pt2", "from_exported", "DEFAULT_BASIS_TYPE",
           "SUPPORTED_MODULES", "SUPPORTED_OPS"]

#: Basis type of fixed-point KAN layers whose module does not fake-quantize its basis.
DEFAULT_BASIS_TYPE = FixedType(13, 1, False, "RND_CONV", "SAT")

SUPPORTED_MODULES = ("nn.Sequential", "nn.Linear", "nn.ReLU", "nn.Dropout (eval)", "InputQuant", "QuantLinear",
                     "LowRankLinear", "KANLayer", "nn.Conv1d/Conv2d (padding_mode='zeros')",
                     "nn.BatchNorm1d/BatchNorm2d (eval)", "nn.MaxPool1d/MaxPool2d", "nn.AvgPool1d/AvgPool2d",
                     "nn.AdaptiveAvgPool1d/AdaptiveAvgPool2d (sizes that divide the input)", "nn.Flatten",
                     "nn.LeakyReLU", "nn.PReLU", "nn.ReLU6", "nn.Hardtanh", "nn.Hardsigmoid", "nn.Hardswish",
                     "nn.Sigmoid", "nn.Tanh", "nn.GELU", "nn.SiLU", "nn.ELU (alpha=1)", "nn.Softplus (beta=1)",
                     "nn.Softmax (last dim)", "nn.Identity")
SUPPORTED_OPS = ("aten.linear", "aten.mm / aten.addmm (with a constant weight)", "aten.relu", "aten.add.Tensor",
                 "bitforge.fake_quant", "aten.t (of a constant weight)",
                 "aten.clone / alias / detach / dropout (identity)", "aten.conv1d / conv2d / convolution",
                 "aten.constant_pad_nd (zeros, before a convolution)",
                 "aten.batch_norm / _native_batch_norm_legit_no_training (eval)",
                 "aten.max_pool1d / max_pool2d (_with_indices)", "aten.avg_pool1d / avg_pool2d (ceil_mode=False)",
                 "aten.adaptive_avg_pool1d / adaptive_avg_pool2d", "aten.mean.dim (over the spatial axes)",
                 "aten.view / reshape / _unsafe_view / flatten / squeeze / unsqueeze",
                 "aten.permute / transpose (not the batch axis)", "aten.cat", "aten.leaky_relu", "aten.prelu",
                 "aten.hardtanh / clamp", "aten.hardsigmoid / hardswish",
                 "aten.sigmoid / tanh / gelu / silu / elu / softplus", "aten.softmax / _softmax (last dim)",
                 "aten.argmax (last dim)")

_aten = torch.ops.aten
_IDENTITY_OPS = {_aten.clone.default, _aten.alias.default, _aten.detach.default, _aten.dropout.default,
                 _aten.contiguous.default}
_RELU_OPS = {_aten.relu.default, _aten.relu_.default}
_ADD_OPS = {_aten.add.Tensor, _aten.add_.Tensor}
_CONV_OPS = {_aten.conv1d, _aten.conv2d, _aten.convolution}
_POOL_OPS = {_aten.max_pool1d, _aten.max_pool2d, _aten.max_pool2d_with_indices, _aten.avg_pool1d, _aten.avg_pool2d}
_ADAPTIVE_OPS = {_aten.adaptive_avg_pool1d, _aten.adaptive_avg_pool2d, _aten._adaptive_avg_pool2d}
_BATCHNORM_OPS = {_aten.batch_norm, _aten._native_batch_norm_legit_no_training}
_RESHAPE_OPS = {_aten.view, _aten._unsafe_view, _aten.reshape, _aten.flatten, _aten.squeeze, _aten.unsqueeze}
_ACTIVATION_OPS = {_aten.leaky_relu, _aten.leaky_relu_, _aten.hardtanh, _aten.hardtanh_, _aten.clamp,
                   _aten.clamp_min, _aten.clamp_max, _aten.hardsigmoid, _aten.hardswish, *TABLE_OPS}
#: Element-wise ops that are exact in a fixed-point input's own type (the others need the quantization pass).
_EXACT_ON_CODES = {_aten.hardtanh, _aten.hardtanh_, _aten.clamp, _aten.clamp_min, _aten.clamp_max}
#: Padding ops and their mode: ``Conv(padding_mode='reflect')`` exports as ``aten.pad(mode='reflect')`` before the
#: conv; zeros before a conv become its padding.
_PAD_OPS = {_aten.pad: "constant", _aten.constant_pad_nd: "constant", _aten.reflection_pad1d: "reflect",
            _aten.reflection_pad2d: "reflect", _aten.replication_pad1d: "replicate",
            _aten.replication_pad2d: "replicate", _aten._pad_circular: "circular"}
#: Recurrent modules by their type in ``nn_module_stack``: a decomposed archive has no ``aten.gru``, only the
#: ``aten.full`` and ``aten.addmm`` it became, so the module type is what names the layer.
_RECURRENT_MODULES = {f"torch.nn.modules.rnn.{k}": k for k in ("LSTM", "GRU", "RNN")}
#: Modules whose ATen ops become ONE IR node: ``type string in nn_module_stack -> IR op``.
_FOLDED = {f"{TorchKANLayer.__module__}.{TorchKANLayer.__qualname__}": "KANLayer",
           f"{LowRankLinear.__module__}.{LowRankLinear.__qualname__}": "LowRankDense"}
_OP_PREFIX = {"Quantize": "quantize", "Requantize": "requantize", "ReLU": "relu", "Add": "add", "Dense": "dense",
              "LowRankDense": "lowrank", "KANLayer": "kan", "Conv": "conv", "Pool": "pool", "ScaleShift": "batchnorm",
              "LeakyReLU": "leaky_relu", "Clip": "clip", "HardSigmoid": "hard_sigmoid", "Table": "table",
              "Softmax": "softmax", "ArgMax": "argmax", "Reshape": "reshape", "Transpose": "transpose",
              "Concat": "concat"}


class FrontendError(BitforgeError):
    """A model the frontend cannot turn into IR; the message names the node, op, module and the fix."""


class _UnsupportedOp(FrontendError):
    """An op the frontend has no conversion for (the report then lists what is supported)."""


class _InputFailed(Exception):
    """A node reads a value whose own conversion failed: it is skipped, the failure is already reported."""


@dataclass(frozen=True)
class Const:
    """A parameter, buffer or constant: the float values the module holds and the type it quantizes them to."""

    source: str
    values: np.ndarray
    dtype: Optional[FixedType] = None


@dataclass(frozen=True)
class Act:
    """A run-time tensor of the IR graph."""

    tensor: str


@dataclass(frozen=True)
class Outputs:
    """The tuple of a multi-output op (BatchNorm's statistics, max pooling's indices): ``operator.getitem``
    picks the first, the others are not run-time tensors bitforge computes."""

    first: Act
    op: str


@dataclass(frozen=True)
class Padded:
    """A tensor behind ``aten.constant_pad_nd`` of zeros: the convolution that reads it takes the pads."""

    act: Act
    pads: tuple[int, ...]  # ONNX pads of the spatial axes


class _Failed:
    """The value of a node whose conversion failed."""


_FAILED = _Failed()
Value = Union[Const, Act, Outputs, Padded]


@dataclass
class _Origin:
    """Where an fx node came from, for names and error messages."""

    path: str  # module path, '' for the top-level forward
    module_type: str
    group: Optional[str] = None  # nn_module_stack key of the folded module it belongs to
    group_op: str = ""  # the IR op that group becomes


def _origin(node: torch.fx.Node) -> _Origin:
    out = _Origin("", "")
    for key, (path, mtype) in (node.meta.get("nn_module_stack") or {}).items():
        mtype = mtype if isinstance(mtype, str) else f"{mtype.__module__}.{mtype.__qualname__}"
        out.path, out.module_type = path, mtype
        if mtype in _FOLDED:
            out.group, out.group_op = key, _FOLDED[mtype]
    return out


_TORCH_DIR = os.path.dirname(torch.__file__)
_FRAME = re.compile(r'File "([^"]+)", line (\d+)')
_INSTALLED_TORCH = re.compile(r"[/\\](site|dist)-packages[/\\]torch[/\\]")  # an archive made by another install


def _source_line(node: torch.fx.Node) -> str:
    """``model.py:12``: the last frame of the node's stack trace outside torch itself, or ''."""
    frames = [(f, n) for f, n in _FRAME.findall(node.meta.get("stack_trace") or "")
              if not f.startswith(_TORCH_DIR) and not _INSTALLED_TORCH.search(f)]
    return f"{frames[-1][0]}:{frames[-1][1]}" if frames else ""


def _where(node: torch.fx.Node) -> str:
    """``node 'linear_1' (module '3', bitforge.models.quant.QuantLinear, at model.py:12)``: enough to find it."""
    o = _origin(node)
    at = _source_line(node)
    at = f", at {at}" if at else ""
    if not o.path:
        return f"node '{node.name}' (top-level forward of {o.module_type or 'the module'}{at})"
    return f"node '{node.name}' (module '{o.path}', {o.module_type}{at})"


def _supported_list() -> str:
    return f"supported modules: {', '.join(SUPPORTED_MODULES)}; supported ops: {', '.join(SUPPORTED_OPS)}"


def _op_name(target) -> str:
    name = getattr(target, "name", None)
    return name() if callable(name) else str(target)


def _packet(target):
    """``aten.conv2d`` for ``aten.conv2d.padding``: the handlers take every overload of an op."""
    return getattr(target, "overloadpacket", target)


def _kwargs(node: torch.fx.Node) -> dict:
    """The op's arguments by schema name, defaults filled in (positional or keyword, as the exporter wrote them)."""
    r = normalize_function(node.target, node.args, node.kwargs, normalize_to_only_use_kwargs=True)
    if r is None:
        raise FrontendError(f"{_where(node)}: the arguments of {_op_name(node.target)} do not match its schema")
    return r.kwargs


@dataclass
class _Problem:
    """A node that failed, and the unsupported ops of other nodes of the same module (a layer that the program
    holds decomposed, e.g. reflection padding as arange/abs/index, is one problem, not ten)."""

    error: FrontendError
    path: str
    more_ops: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        more = f" (and {', '.join(self.more_ops)} in the same module)" if self.more_ops else ""
        return f"{self.error}{more}"


def _record(problems: list[_Problem], error: FrontendError, node: torch.fx.Node) -> None:
    path = _origin(node).path
    if path and isinstance(error, _UnsupportedOp):
        for p in problems:
            if p.path == path and isinstance(p.error, _UnsupportedOp):
                if _op_name(node.target) not in p.more_ops:
                    p.more_ops.append(_op_name(node.target))
                return
    problems.append(_Problem(error, path))


def _report(problems: list[_Problem]) -> str:
    """One message for every node that failed: the unsupported ones all at once, then what is supported."""
    tail = f"; {_supported_list()}" if any(isinstance(p.error, _UnsupportedOp) for p in problems) else ""
    if len(problems) == 1:
        return f"{problems[0]}{tail}"
    lines = "\n".join(f"  - {p}" for p in problems)
    return f"{len(problems)} nodes cannot be converted:\n{lines}\n{tail[2:]}" if tail else \
        f"{len(problems)} nodes cannot be converted:\n{lines}"


def _check_finite(c: Const, where: str) -> None:
    if c.values.dtype.kind == "f" and not np.all(np.isfinite(c.values)):
        bad = int(np.size(c.values) - np.count_nonzero(np.isfinite(c.values)))
        raise FrontendError(f"{where}: parameter '{c.source}' contains {bad} NaN/Inf value(s); "
                            "fix the training run or the checkpoint before exporting")


def _check_fits(c: Const, t: FixedType, where: str) -> None:
    """WRAP and SAT_ZERO would silently turn an out-of-range weight into a different one: refuse.

    Saturating modes are accepted: the torch module saturated the same values, so the IR agrees with it.
    """
    if t.overflow in (Overflow.SAT, Overflow.SAT_SYM):
        return
    if fixed.out_of_range(c.values, t).any():
        raise FrontendError(
            f"{where}: type {t.to_short()} too narrow for its values: '{c.source}' must lie in "
            f"[{t.min_value}, {t.max_value}], found [{float(c.values.min())}, {float(c.values.max())}] "
            f"(max |value| {float(np.abs(c.values).max())}); give the type more integer bits or SAT overflow")


def _codes(c: Const, where: str) -> np.ndarray:
    _check_finite(c, where)
    _check_fits(c, c.dtype, where)
    return fixed.int_array(fixed.quantize(c.values, c.dtype), c.dtype.width + 1)


def _float_values(c: Const, where: str) -> np.ndarray:
    """The values the torch module computes with: fake-quantized when the parameter has a type."""
    _check_finite(c, where)
    if c.dtype is None:
        return c.values.astype(np.float32)
    return fixed.to_float(_codes(c, where), c.dtype).astype(np.float32)


@dataclass
class _Converter:
    ep: "torch.export.ExportedProgram"
    name: str
    tensors: dict[str, ir.TensorSpec] = field(default_factory=dict)
    nodes: list[ir.Node] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    env: dict[torch.fx.Node, Value] = field(default_factory=dict)
    done: set = field(default_factory=set)
    used: set = field(default_factory=set)
    weight_codes: dict = field(default_factory=dict)  # metadata[WEIGHT_CODES_KEY]: weights the types zeroed or clipped

    # -- plumbing ----------------------------------------------------------------------------------
    def run(self) -> ir.Graph:
        self._refuse_recurrent()
        state = {**self.ep.state_dict, **self.ep.constants}
        kinds = {s.arg.name: s for s in self.ep.graph_signature.input_specs}
        outputs: list[str] = []
        problems: list[_Problem] = []
        for node in self.ep.graph.nodes:
            if node in self.done:
                continue
            group = _origin(node).group if node.op == "call_function" else None
            try:
                if node.op == "placeholder":
                    self._placeholder(node, kinds[node.name], state)
                elif node.op == "output":
                    outputs = [self._act(a, node, "graph output").tensor for a in node.args[0]]
                elif node.op == "call_function":
                    if group is not None:
                        self._fold_group(node, group, state)
                    else:
                        self._call(node)
                else:
                    raise FrontendError(f"{_where(node)}: unexpected fx node kind '{node.op}' in the exported program")
            except _InputFailed:
                self._fail(node, group)
            except FrontendError as e:
                _record(problems, e, node)
                self._fail(node, group)
            except LayerError as e:
                _record(problems, FrontendError(f"{_where(node)}: {e}"), node)
                self._fail(node, group)
        if problems:
            raise FrontendError(_report(problems))
        outputs = self._merge_unsqueezed_pools(outputs)
        g = ir.Graph(self.name, self.inputs, outputs, self.tensors, self.nodes)
        if self.weight_codes:
            g.metadata[WEIGHT_CODES_KEY] = self.weight_codes
        return g

    def _merge_unsqueezed_pools(self, outputs: list[str]) -> list[str]:
        """``run_decompositions()`` writes a 1-D pool as unsqueeze, a 2-D pool of height 1, squeeze: this makes it
        the one 1-D ``Pool`` the module was (the same windows, without two reshapes around them)."""
        i = 0
        while i + 2 < len(self.nodes):
            a, p, b = self.nodes[i:i + 3]
            if (isinstance(a, ir.Reshape) and isinstance(p, ir.Pool) and isinstance(b, ir.Reshape)
                    and p.input == a.output and b.input == p.output and len(p.kernel) == 2
                    and (p.kernel[0], p.stride[0], p.padding[0], p.padding[2]) == (1, 1, 0, 0)
                    and all(len([n for n in self.nodes if t in n.inputs]) == 1 for t in (a.output, p.output))
                    and a.output not in outputs and p.output not in outputs):
                x, mid, out = self.tensors[a.input], self.tensors[a.output], self.tensors[b.output]
                pooled = self.tensors[p.output]
                if len(x.shape) == 2 and mid.shape == (x.shape[0], 1, x.shape[1]) and \
                        out.shape == (pooled.shape[0], pooled.shape[2]):
                    self.nodes[i:i + 3] = [dataclasses.replace(
                        p, inputs=(a.input,), kernel=(p.kernel[1],), stride=(p.stride[1],),
                        padding=(p.padding[1], p.padding[3]))]
                    del self.tensors[a.output], self.tensors[b.output]
                    self.tensors[p.output] = ir.TensorSpec(p.output, out.shape, out.dtype)
                    for n in self.nodes:
                        n.inputs = tuple(p.output if t == b.output else t for t in n.inputs)
                    outputs = [p.output if t == b.output else t for t in outputs]
            i += 1
        return outputs

    def _refuse_recurrent(self) -> None:
        """LSTM/GRU/RNN by their op, or, in a decomposed archive, by the module the ops came from."""
        for node in self.ep.graph.nodes:
            if node.op != "call_function":
                continue
            if _op_name(node.target).replace("::", ".").startswith(ATEN_RECURRENT):
                raise FrontendError(f"{_where(node)}: {recurrent_message(_op_name(node.target))}")
            for path, mtype in (node.meta.get("nn_module_stack") or {}).values():
                kind = _RECURRENT_MODULES.get(mtype if isinstance(mtype, str) else "")
                if kind is not None:
                    raise FrontendError(f"module '{path}' ({mtype}): {recurrent_message(f'nn.{kind}')}")

    def _fail(self, node: torch.fx.Node, group: Optional[str]) -> None:
        members = self._group_nodes(node, group) if group is not None else [node]
        for m in members:
            self.env[m] = _FAILED
            self.done.add(m)

    def _weight(self, c: Const, where: str, key: str) -> np.ndarray:
        """The codes of a fake-quantized weight, counting what its type zeroed or saturated (``key`` node.field)."""
        codes = _codes(c, where)
        self.weight_codes[key] = weight_code_counts(c.values, codes, c.dtype)
        return codes

    def _placeholder(self, node: torch.fx.Node, spec, state: dict) -> None:
        kind = spec.kind.name
        if kind == "USER_INPUT":
            val = node.meta.get("val")
            if not isinstance(val, torch.Tensor) or val.dim() < 1:
                raise FrontendError(f"graph input '{node.name}' is not a batched tensor; bitforge graphs take "
                                    "tensors of shape (batch, features...)")
            name = self._unique(node.name)
            self.tensors[name] = ir.TensorSpec(name, tuple(int(s) for s in val.shape[1:]), None)
            self.inputs.append(name)
            self.env[node] = Act(name)
        elif kind in ("PARAMETER", "BUFFER", "CONSTANT_TENSOR"):
            t = state[spec.target]
            values = t.detach().cpu()
            values = values.to(torch.float64).numpy() if values.is_floating_point() else values.numpy()
            self.env[node] = Const(spec.target, values)
        else:
            raise FrontendError(f"graph input '{node.name}' of kind {kind} is not supported; {_supported_list()}")

    def _unique(self, base: str) -> str:
        name, i = base, 1
        while name in self.used:
            i += 1
            name = f"{base}_{i}"
        self.used.add(name)
        return name

    def _ir_name(self, op: str, node: torch.fx.Node) -> str:
        path = _origin(node).path
        return self._unique(f"{_OP_PREFIX[op]}_{path.replace('.', '_')}" if path else node.name)

    def _emit(self, n: ir.Node, spec: ir.TensorSpec) -> Act:
        self.nodes.append(n)
        self.tensors[spec.name] = spec
        return Act(spec.name)

    def _value(self, arg, node: torch.fx.Node) -> Value:
        if not isinstance(arg, torch.fx.Node):
            raise FrontendError(f"{_where(node)}: expected a tensor argument, found {arg!r}")
        v = self.env[arg]
        if v is _FAILED:
            raise _InputFailed()
        if isinstance(v, Outputs):
            raise FrontendError(f"{_where(node)}: reads the whole result of {v.op}; only its first output is "
                                "supported")
        if isinstance(v, Padded) and _packet(node.target) not in _CONV_OPS:
            raise FrontendError(f"{_where(node)}: reads a zero-padded tensor (aten.constant_pad_nd); padding is "
                                "supported only as the input of a convolution")
        return v

    def _act(self, arg, node: torch.fx.Node, what: str) -> Act:
        v = self._value(arg, node)
        if not isinstance(v, Act):
            raise FrontendError(f"{_where(node)}: {what} is the constant '{v.source}', expected a run-time tensor; "
                                "bitforge graphs compute on their inputs")
        return v

    def _const(self, arg, node: torch.fx.Node, what: str) -> Optional[Const]:
        if arg is None:
            return None
        v = self._value(arg, node)
        if not isinstance(v, Const):
            raise FrontendError(f"{_where(node)}: {what} is computed at run time; only constant parameters are "
                                "supported as weights")
        return v

    def _spec(self, a: Act) -> ir.TensorSpec:
        return self.tensors[a.tensor]

    @staticmethod
    def _shape(node: torch.fx.Node) -> tuple[int, ...]:
        return tuple(int(s) for s in node.meta["val"].shape[1:])

    def _absorbable_quant(self, node: torch.fx.Node) -> Optional[torch.fx.Node]:
        """A fake_quant that is ``node``'s only user: it types ``node``'s output instead of adding a node."""
        users = list(node.users)
        if len(users) == 1 and users[0].target == FAKE_QUANT_OP and users[0].args[0] is node:
            return users[0]
        return None

    def _bind(self, node: torch.fx.Node, act: Act, absorbed: Optional[torch.fx.Node] = None) -> None:
        self.env[node] = act
        if absorbed is not None:
            self.env[absorbed] = act
            self.done.add(absorbed)

    # -- op-level conversion -------------------------------------------------------------------------
    def _call(self, node: torch.fx.Node) -> None:
        t = node.target
        if t == FAKE_QUANT_OP:
            return self._fake_quant(node)
        if t in _IDENTITY_OPS:
            if t == _aten.dropout.default and len(node.args) > 2 and node.args[2]:
                raise FrontendError(f"{_where(node)}: dropout in training mode; export the module in eval mode")
            self.env[node] = self._value(node.args[0], node)
            return
        if t in (_aten.t.default, _aten.permute.default, _aten.transpose.int):
            return self._permute(node)
        if t == _aten.linear.default:
            bias = node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")
            return self._dense(node, node.args[0], self._const(node.args[1], node, "weight"),
                               self._const(bias, node, "bias"))
        if t == _aten.mm.default:
            return self._dense(node, node.args[0], self._transposed(self._const(node.args[1], node, "weight")), None)
        if t == _aten.addmm.default:
            if node.kwargs.get("beta", 1) != 1 or node.kwargs.get("alpha", 1) != 1:
                raise FrontendError(f"{_where(node)}: addmm with beta/alpha other than 1 is not supported")
            return self._dense(node, node.args[1], self._transposed(self._const(node.args[2], node, "weight")),
                               self._const(node.args[0], node, "bias"))
        if t in _RELU_OPS:
            return self._relu(node)
        if t in _ADD_OPS:
            return self._add(node)
        if _op_name(t).startswith("aten::_assert") and not node.users:
            return None  # shape/dtype guards the exporter inserts; they compute nothing
        handler = self._LAYER_HANDLERS.get(_packet(t))
        if handler is not None:
            return handler(self, node)
        if t is operator.getitem:
            return self._getitem(node)
        raise _UnsupportedOp(f"{_where(node)}: op {_op_name(t)} is not supported by the torch frontend")

    def _fake_quant(self, node: torch.fx.Node) -> None:
        t = fixed_type_of(node)
        v = self._value(node.args[0], node)
        if isinstance(v, Const):
            if v.dtype is not None:  # quantized twice: the first quantization is part of the values
                v = Const(v.source, fixed.to_float(_codes(v, _where(node)), v.dtype), None)
            self.env[node] = Const(v.source, v.values, t)
            return
        x = self._spec(v)
        op = ir.Quantize if x.is_float else ir.Requantize
        name = self._ir_name(op.OP, node)
        self.env[node] = self._emit(op(name, (v.tensor,), (name,)), ir.TensorSpec(name, x.shape, t))

    @staticmethod
    def _transposed(c: Const) -> Const:
        return Const(c.source, np.ascontiguousarray(c.values.T), c.dtype)

    def _dense(self, node: torch.fx.Node, x_arg, w: Const, b: Optional[Const]) -> None:
        x = self._spec(self._act(x_arg, node, "input"))
        where = _where(node)
        name = self._ir_name("Dense", node)
        if x.is_float:
            dense = ir.Dense(name, (x.name,), (name,), weight=_float_values(w, where),
                             bias=None if b is None else _float_values(b, where))
            self._bind(node, self._emit(dense, ir.TensorSpec(name, self._shape(node), None)))
            return
        if w.values.ndim != 2:
            raise FrontendError(f"{where}: weight '{w.source}' has shape {w.values.shape}; expected (out, in)")
        if w.dtype is None:
            raise FrontendError(f"{where}: input '{x.name}' is {x.type_str()} but weight '{w.source}' is float; "
                                "give the layer a weight type (QuantLinear(weight_type=...)) or keep the input float "
                                "and run the quantization pass")
        if b is not None and b.dtype is None:
            raise FrontendError(f"{where}: fixed-point layer with a float bias '{b.source}'; give it a bias_type")
        quant = self._absorbable_quant(node)
        if quant is None:
            raise FrontendError(f"{where}: fixed-point linear layer has no output type; give the module an "
                                "output type (QuantLinear output_type, LowRankLinear mid_type/output_type)")
        dense = ir.Dense(name, (x.name,), (name,), weight=self._weight(w, where, f"{name}.weight"),
                         bias=None if b is None else _codes(b, where), weight_type=w.dtype,
                         bias_type=None if b is None else b.dtype)
        spec = ir.TensorSpec(name, self._shape(node), fixed_type_of(quant))
        self._bind(node, self._emit(dense, spec), quant)

    def _relu(self, node: torch.fx.Node) -> None:
        x = self._spec(self._act(node.args[0], node, "input"))
        name = self._ir_name("ReLU", node)
        quant = None if x.is_float else self._absorbable_quant(node)
        # max(x, 0) of a fixed-point tensor is exact in the input's type, so that stays unless requantized.
        out = fixed_type_of(quant) if quant is not None else x.dtype
        self._bind(node, self._emit(ir.ReLU(name, (x.name,), (name,)), ir.TensorSpec(name, x.shape, out)), quant)

    def _add(self, node: torch.fx.Node) -> None:
        if node.kwargs.get("alpha", 1) != 1 or len(node.args) > 2:
            raise FrontendError(f"{_where(node)}: add with alpha other than 1 is not supported")
        a = self._spec(self._act(node.args[0], node, "first operand"))
        b = self._spec(self._act(node.args[1], node, "second operand"))
        if a.shape != b.shape:
            raise FrontendError(f"{_where(node)}: add of shapes {a.shape} and {b.shape}; broadcasting is not "
                                "supported, operands must have the same shape")
        if a.is_float != b.is_float:
            raise FrontendError(f"{_where(node)}: add of {a.type_str()} and {b.type_str()}; quantize both operands "
                                "or neither")
        name = self._ir_name("Add", node)
        quant = None if a.is_float else self._absorbable_quant(node)
        if a.is_float:
            out = None
        else:  # without a quantizer the exact sum's type, so nothing is lost
            out = fixed_type_of(quant) if quant is not None else fixed.add_type(a.dtype, b.dtype)
        self._bind(node, self._emit(ir.Add(name, (a.name, b.name), (name,)), ir.TensorSpec(name, a.shape, out)),
                   quant)

    # -- the layers of the models people bring (torch_layers reads their arguments) --------------------------
    def _float_input(self, arg, node: torch.fx.Node, layer: str) -> ir.TensorSpec:
        """The input of an op that only the quantization pass can type: it must still be float."""
        return self._still_float(self._spec(self._act(arg, node, "input")), node, layer)

    @staticmethod
    def _still_float(x: ir.TensorSpec, node: torch.fx.Node, layer: str) -> ir.TensorSpec:
        if not x.is_float:
            raise FrontendError(f"{_where(node)}: {layer} of the fixed-point tensor '{x.name}' ({x.type_str()}); "
                                "keep the tensors before it float and let the quantization pass (--precision) type "
                                "the model")
        return x

    def _emit_as(self, node: torch.fx.Node, n: ir.Node, x: ir.TensorSpec, shape: tuple[int, ...],
                 dtype=None) -> Act:
        """``n`` reading ``x``, named for ``node``'s module, bound to ``node``."""
        name = self._ir_name(n.OP, node)
        n.name, n.inputs, n.outputs = name, (x.name,), (name,)
        act = self._emit(n, ir.TensorSpec(name, shape, dtype))
        self.env[node] = act
        return act

    def _exact_type(self, node: torch.fx.Node, x: ir.TensorSpec):
        """Output type of an op exact in its input's type: that type, or the fake_quant right after it."""
        if x.is_float:
            return None, None
        quant = self._absorbable_quant(node)
        return (fixed_type_of(quant) if quant is not None else x.dtype), quant

    def _conv(self, node: torch.fx.Node) -> None:
        kw = _kwargs(node)
        v = self._value(kw["input"], node)
        pads = None
        if isinstance(v, Padded):  # zeros padded before the convolution: its own padding
            v, pads = v.act, v.pads
        x = self._float_input(kw["input"], node, "convolution") if pads is None else \
            self._still_float(self._spec(v), node, "convolution")
        where = _where(node)
        w = self._const(kw["weight"], node, "weight")
        b = self._const(kw.get("bias"), node, "bias")
        nd = w.values.ndim - 2
        if nd not in (1, 2) or len(x.shape) != nd + 1:
            raise FrontendError(f"{where}: {nd}-D convolution of a per-sample {x.shape} tensor; Conv1d takes "
                                "(batch, channels, length), Conv2d (batch, channels, height, width)")
        a = conv_attrs(node.target, kw, nd, tuple(w.values.shape[2:]))
        padding = a.padding if pads is None else tuple(p + q for p, q in zip(a.padding, pads))
        conv = ir.Conv("", (), (), weight=_float_values(w, where), bias=None if b is None else _float_values(b, where),
                       stride=a.stride, padding=padding, dilation=a.dilation, groups=a.groups)
        self._emit_as(node, conv, x, self._shape(node))

    def _pad(self, node: torch.fx.Node) -> None:
        kw = _kwargs(node)
        op = _packet(node.target)
        mode = (kw.get("mode") or "constant") if op == _aten.pad else _PAD_OPS.get(op, "constant")
        if mode != "constant":
            if ".conv.Conv" in _origin(node).module_type:
                raise FrontendError(f"{_where(node)}: padding_mode '{mode}' is not supported; Conv1d/Conv2d take "
                                    "padding_mode='zeros' only")
            raise FrontendError(f"{_where(node)}: '{mode}' padding is not supported; only zeros, before a "
                                "convolution")
        x = self._act(kw["input"], node, "input")
        pads = spatial_pads(kw["pad"], len(self._spec(x).shape) - 1)
        value = float(kw.get("value") or 0.0)
        convs = all(u.op == "call_function" and _packet(u.target) in _CONV_OPS for u in node.users)
        if pads is None or value != 0.0 or not convs or not node.users:
            raise FrontendError(f"{_where(node)}: padding {list(kw['pad'])} with value {value} is supported only as "
                                "zeros on the spatial axes right before a convolution (it becomes the "
                                "convolution's padding)")
        self.env[node] = Padded(x, pads)

    def _batchnorm(self, node: torch.fx.Node) -> None:
        kw = _kwargs(node)
        where = _where(node)
        if kw.get("training") or kw.get("running_mean") is None or kw.get("running_var") is None:
            raise FrontendError(f"{where}: BatchNorm in training mode or without running statistics "
                                "(track_running_stats=False); export the module in eval mode with running statistics")
        x = self._float_input(kw["input"], node, "BatchNorm")
        consts = {k: self._const(kw.get(k), node, k) for k in ("weight", "bias", "running_mean", "running_var")}
        vals = {k: None if c is None else _float_values(c, where).astype(np.float64) for k, c in consts.items()}
        scale, shift = batchnorm_scale_shift(vals["weight"], vals["bias"], vals["running_mean"], vals["running_var"],
                                             float(kw["eps"]))
        act = self._emit_as(node, ir.ScaleShift("", (), (), scale=scale, shift=shift), x, x.shape)
        if _packet(node.target) != _aten.batch_norm:  # (output, saved mean, saved inverse std)
            self.env[node] = Outputs(act, _op_name(node.target))

    def _pool(self, node: torch.fx.Node) -> None:
        kw = _kwargs(node)
        x = self._spec(self._act(kw["input"], node, "input"))
        nd = 2 if "2d" in _op_name(node.target) else 1
        if len(x.shape) != nd + 1:
            raise FrontendError(f"{_where(node)}: {nd}-D pooling of a per-sample {x.shape} tensor; pooling takes "
                                f"(batch, channels, {'height, width' if nd == 2 else 'length'})")
        a = pool_attrs(node.target, kw, nd)
        if a.mode == "avg":
            self._float_input(kw["input"], node, "average pooling")
        out, quant = self._exact_type(node, x)  # a maximum is one of the input's codes
        pool = ir.Pool("", (), (), mode=a.mode, kernel=a.kernel, stride=a.stride, padding=a.padding,
                       count_include_pad=a.count_include_pad)
        shape = self._shape(node) if "with_indices" not in _op_name(node.target) else \
            tuple(int(s) for s in node.meta["val"][0].shape[1:])
        act = self._emit_as(node, pool, x, shape, out)
        self._bind(node, act, quant)
        if "with_indices" in _op_name(node.target):
            self.env[node] = Outputs(act, _op_name(node.target))

    def _adaptive_pool(self, node: torch.fx.Node) -> None:
        kw = _kwargs(node)
        x = self._float_input(kw["input"], node, "average pooling")
        a = adaptive_pool_attrs(kw["output_size"], x.shape[1:])
        pool = ir.Pool("", (), (), mode="avg", kernel=a.kernel, stride=a.stride, padding=a.padding)
        self._emit_as(node, pool, x, self._shape(node))

    def _mean(self, node: torch.fx.Node) -> None:
        kw = _kwargs(node)
        x = self._float_input(kw["input"], node, "mean")
        if kw.get("dtype") is not None:
            raise FrontendError(f"{_where(node)}: mean with dtype={kw['dtype']} is not supported")
        check_spatial_mean(kw["dim"], len(x.shape))
        spatial = tuple(x.shape[1:])
        pool = ir.Pool("", (), (), mode="avg", kernel=spatial, stride=spatial, padding=(0,) * (2 * len(spatial)))
        pooled = (x.shape[0],) + (1,) * len(spatial)
        act = self._emit_as(node, pool, x, pooled)
        if self._shape(node) != pooled:  # keepdim=False: the pooled axes go
            self._emit_as(node, ir.Reshape("", (), ()), self._spec(act), self._shape(node))

    def _reshape(self, node: torch.fx.Node) -> None:
        src = node.args[0]
        v = self._value(src, node)
        if isinstance(v, Const):  # a parameter reshaped (PReLU's slopes in a decomposed program)
            self.env[node] = Const(v.source, np.reshape(v.values, tuple(node.meta["val"].shape)), v.dtype)
            return
        x = self._spec(self._act(src, node, "input"))
        batch_in, batch_out = int(src.meta["val"].shape[0]), node.meta["val"]
        if batch_out.dim() < 1 or int(batch_out.shape[0]) != batch_in:
            raise FrontendError(f"{_where(node)}: {_op_name(node.target)} to {tuple(batch_out.shape)} mixes the "
                                f"batch axis (of size {batch_in} in the example input) into the sample; reshape only "
                                "the axes after the batch (e.g. x.flatten(1) or x.view(x.size(0), -1))")
        shape = self._shape(node)
        if shape == x.shape:
            self.env[node] = Act(x.name)
            return
        self._emit_as(node, ir.Reshape("", (), ()), x, shape, x.dtype)

    def _permute(self, node: torch.fx.Node) -> None:
        src = node.args[0]
        v = self._value(src, node)
        rank = src.meta["val"].dim()
        if node.target == _aten.t.default:
            perm = list(range(rank))[::-1]
        elif node.target == _aten.transpose.int:
            perm = list(range(rank))
            a, b = (int(d) % max(rank, 1) for d in node.args[1:3])
            perm[a], perm[b] = perm[b], perm[a]
        else:
            perm = [int(p) % max(rank, 1) for p in node.args[1]]
        if isinstance(v, Const):  # a weight's transpose: the layer reads the transposed constant
            self.env[node] = Const(v.source, np.ascontiguousarray(np.transpose(v.values, perm)), v.dtype)
            return
        x = self._spec(self._act(src, node, "input"))
        if perm[0] != 0:
            raise FrontendError(f"{_where(node)}: permutation {perm} moves the batch axis; permute only the axes "
                                "after the batch")
        if perm == sorted(perm):
            self.env[node] = Act(x.name)
            return
        self._emit_as(node, ir.Transpose("", (), (), perm=tuple(p - 1 for p in perm[1:])), x, self._shape(node),
                      x.dtype)

    def _cat(self, node: torch.fx.Node) -> None:
        kw = _kwargs(node)
        parts = [self._spec(self._act(t, node, "concatenated tensor")) for t in kw["tensors"]]
        rank = len(parts[0].shape)
        axis = int(kw.get("dim", 0)) % (rank + 1) - 1
        if axis < 0:
            raise FrontendError(f"{_where(node)}: concatenation along the batch axis; concatenate the axes after it")
        if len({p.dtype for p in parts}) != 1:
            raise FrontendError(f"{_where(node)}: concatenation of {', '.join(p.type_str() for p in parts)}; give the "
                                "operands one type (or keep them float)")
        out, quant = self._exact_type(node, parts[0])
        acc = parts[0]
        for i, p in enumerate(parts[1:], start=2):  # Concat joins two tensors: chain them left to right
            shape = tuple(a + b if k == axis else a for k, (a, b) in enumerate(zip(acc.shape, p.shape)))
            name = self._ir_name("Concat", node)
            spec = ir.TensorSpec(name, shape, out if i == len(parts) else parts[0].dtype)
            self._emit(ir.Concat(name, (acc.name, p.name), (name,), axis=axis), spec)
            acc = spec
        self._bind(node, Act(acc.name), quant)

    def _activation(self, node: torch.fx.Node) -> None:
        kw = _kwargs(node)
        n = activation(node.target, kw, "")
        if _packet(node.target) in _EXACT_ON_CODES:
            x = self._spec(self._act(kw["input"], node, "input"))
            out, quant = self._exact_type(node, x)
            self._bind(node, self._emit_as(node, n, x, x.shape, out), quant)
            return
        x = self._float_input(kw["input"], node, type(n).__name__)
        self._emit_as(node, n, x, x.shape)

    def _prelu(self, node: torch.fx.Node) -> None:
        kw = _kwargs(node)
        x = self._float_input(kw["input"], node, "PReLU")
        alpha = _float_values(self._const(kw["weight"], node, "weight"), _where(node)).reshape(-1)
        self._emit_as(node, ir.LeakyReLU("", (), (), alpha=alpha), x, x.shape)

    def _softmax(self, node: torch.fx.Node) -> None:
        kw = _kwargs(node)
        x = self._float_input(kw["input"], node, "softmax")
        dim = int(kw["dim"])
        if dim % (len(x.shape) + 1) != len(x.shape):
            raise FrontendError(f"{_where(node)}: softmax over dim {dim} of a (batch, {x.shape}) tensor; only the "
                                "last dim (dim=-1) is supported")
        if kw.get("dtype") is not None or kw.get("half_to_float"):
            raise FrontendError(f"{_where(node)}: softmax with a dtype change is not supported")
        self._emit_as(node, ir.Softmax("", (), ()), x, x.shape)

    def _argmax(self, node: torch.fx.Node) -> None:
        kw = _kwargs(node)
        x = self._spec(self._act(kw["input"], node, "input"))
        dim = kw.get("dim")
        if dim is None or int(dim) % (len(x.shape) + 1) != len(x.shape):
            raise FrontendError(f"{_where(node)}: argmax over dim {dim} of a (batch, {x.shape}) tensor; only the last "
                                "dim (dim=-1) is supported")
        bits = max(1, (x.shape[-1] - 1).bit_length())
        out = None if x.is_float else FixedType(bits, bits, False)
        act = self._emit_as(node, ir.ArgMax("", (), ()), x, x.shape[:-1] + (1,), out)
        if self._shape(node) != x.shape[:-1] + (1,):  # keepdim=False
            self._emit_as(node, ir.Reshape("", (), ()), self._spec(act), self._shape(node), out)

    def _getitem(self, node: torch.fx.Node) -> None:
        src, index = node.args
        v = self.env.get(src)
        if v is _FAILED:
            raise _InputFailed()
        if not isinstance(v, Outputs):
            raise _UnsupportedOp(f"{_where(node)}: indexing a tensor (operator.getitem) is not supported")
        if index != 0:
            raise FrontendError(f"{_where(node)}: uses output {index} of {v.op} (pooling indices or batch "
                                "statistics); only its first output, the tensor, is supported")
        self.env[node] = v.first

    _LAYER_HANDLERS = {
        **dict.fromkeys(_CONV_OPS, _conv),
        **dict.fromkeys(_PAD_OPS, _pad),
        **dict.fromkeys(_BATCHNORM_OPS, _batchnorm),
        **dict.fromkeys(_POOL_OPS, _pool),
        **dict.fromkeys(_ADAPTIVE_OPS, _adaptive_pool),
        _aten.mean: _mean,
        **dict.fromkeys(_RESHAPE_OPS, _reshape),
        _aten.cat: _cat,
        **dict.fromkeys(_ACTIVATION_OPS, _activation),
        _aten.prelu: _prelu, _aten._prelu_kernel: _prelu,
        _aten.softmax: _softmax, _aten._softmax: _softmax,
        _aten.argmax: _argmax,
    }

    # -- folded modules ------------------------------------------------------------------------------
    def _group_nodes(self, first: torch.fx.Node, group: str) -> list[torch.fx.Node]:
        members, node = [], first
        while node.op == "call_function" and _origin(node).group == group:
            members.append(node)
            node = node.next
        return members

    def _fold_group(self, first: torch.fx.Node, group: str, state: dict) -> None:
        members = self._group_nodes(first, group)
        if _origin(first).group_op == "KANLayer":
            self.done.update(members)
            self._kan(members, state)
        else:
            self._lowrank(members)

    def _lowrank(self, members: list[torch.fx.Node]) -> None:
        """Convert the ops one by one, then merge ``Dense(V) -> Dense(U)`` into one ``LowRankDense``."""
        start = len(self.nodes)
        for node in members:
            if node not in self.done:
                self._call(node)
            self.done.add(node)
        made = self.nodes[start:]
        dense = [n for n in made if isinstance(n, ir.Dense)]
        if len(dense) != 2 or made[0] is not dense[0] or made[1] is not dense[1] or dense[1].input != dense[0].output:
            return  # e.g. a float input with a mid quantizer: the unfused stages are still exact IR
        v, u = dense
        mid = self.tensors.pop(v.output)
        path = _origin(members[-1]).path
        name = self._unique(f"lowrank_{path.replace('.', '_')}" if path else "lowrank")
        merged = ir.LowRankDense(name, v.inputs, (name,), u=u.weight, v=v.weight, bias=u.bias, u_type=u.weight_type,
                                 v_type=v.weight_type, bias_type=u.bias_type, mid_type=mid.dtype)
        old = self.tensors.pop(u.output)
        self.tensors[name] = ir.TensorSpec(name, old.shape, old.dtype)
        for part, stage in (("v", v), ("u", u)):
            if f"{stage.name}.weight" in self.weight_codes:
                self.weight_codes[f"{name}.{part}"] = self.weight_codes.pop(f"{stage.name}.weight")
        self.nodes[start:start + 2] = [merged]
        for n in self.nodes[start + 1:]:
            n.inputs = tuple(name if t == u.output else t for t in n.inputs)
        for fx_node, val in list(self.env.items()):
            if isinstance(val, Act) and val.tensor == u.output:
                self.env[fx_node] = Act(name)

    def _kan(self, members: list[torch.fx.Node], state: dict) -> None:
        inside = set(members)
        last = members[-1]
        path = _origin(last).path
        where = f"layer '{path or '<top level>'}' (KANLayer)"
        prefix = f"{path}." if path else ""
        if f"{prefix}grid_spec" not in state or f"{prefix}coeffs" not in state:
            raise FrontendError(f"{where}: the exported program lacks '{prefix}grid_spec' or '{prefix}coeffs'; "
                                "export a bitforge.models.KANLayer")
        lo, hi, grid_size, order = grid_from_spec(state[f"{prefix}grid_spec"])
        impl_code = state.get(f"{prefix}basis_impl_code")  # absent in archives exported before basis_impl
        basis_impl = BASIS_IMPLS[int(impl_code.reshape(-1)[0])] if impl_code is not None else "table"
        acts, coeff_type, basis_type, out_type = set(), None, None, None
        for node in members:
            for arg in node.all_input_nodes:
                if arg not in inside and isinstance(self.env.get(arg), Act):
                    acts.add(self.env[arg].tensor)
            if node.target == FAKE_QUANT_OP:
                src = node.args[0]
                if isinstance(self.env.get(src), Const):
                    coeff_type = fixed_type_of(node)
                elif node is last:
                    out_type = fixed_type_of(node)
                else:
                    basis_type = fixed_type_of(node)
        if len(acts) != 1:
            raise FrontendError(f"{where}: expected one input tensor, found {sorted(acts)}")
        x = self.tensors[acts.pop()]
        coeffs = Const(f"{prefix}coeffs", state[f"{prefix}coeffs"].detach().cpu().to(torch.float64).numpy(),
                       coeff_type)
        name = self._unique(f"kan_{path.replace('.', '_')}" if path else "kan")
        shape = self._shape(last)
        if x.is_float:
            if basis_type is not None:
                raise FrontendError(f"{where}: basis_type needs a fixed-point input (the float IR has no basis "
                                    "quantization); put an InputQuant before the layer or drop basis_type")
            node = ir.KANLayer(name, (x.name,), (name,), coeffs=_float_values(coeffs, where), grid_lo=lo, grid_hi=hi,
                               grid_size=grid_size, order=order, basis_impl=basis_impl)
            act = self._emit(node, ir.TensorSpec(name, shape, None))
            if out_type is not None:
                qname = self._unique(f"{name}_quantize")
                act = self._emit(ir.Quantize(qname, (name,), (qname,)), ir.TensorSpec(qname, shape, out_type))
            self.env[last] = act
            return
        if coeff_type is None or out_type is None:
            raise FrontendError(f"{where}: fixed-point input '{x.name}' needs coeff_type and output_type on the "
                                "layer")
        basis_type = basis_type or DEFAULT_BASIS_TYPE
        index_lo, mult, shift, u_bits = index_params(lo, hi, grid_size, x.dtype)
        node = ir.KANLayer(name, (x.name,), (name,), coeffs=self._weight(coeffs, where, f"{name}.coeffs"),
                           grid_lo=lo, grid_hi=hi,
                           grid_size=grid_size, order=order, coeff_type=coeff_type, basis_type=basis_type,
                           u_bits=u_bits, index_lo=index_lo, index_mult=mult, index_shift=shift,
                           basis_impl=basis_impl)
        self.env[last] = self._emit(node, ir.TensorSpec(name, shape, out_type))


# -- entry points ------------------------------------------------------------------------------------

def from_exported(ep: "torch.export.ExportedProgram", name: str = "model",
                  input_range: Optional[Sequence[float]] = None) -> ir.Graph:
    """Convert an ``ExportedProgram``; the result is validated (accumulator types are left to the precision pass)."""
    g = _Converter(ep, name).run()
    g.metadata["source"] = "pytorch"
    if input_range is not None:
        lo, hi = (float(v) for v in input_range)
        if not hi > lo:
            raise FrontendError(f"input_range ({lo}, {hi}) is empty; expected (lo, hi) with hi > lo")
        g.metadata["input_range"] = [lo, hi]
    return ir.validate(g)


def from_torch(module: nn.Module, example_input, name: Optional[str] = None, *,
               input_range: Optional[Sequence[float]] = None) -> ir.Graph:
    """Export ``module`` (in eval mode) with ``example_input`` and convert it.

    ``input_range`` defaults to the module's ``input_range`` attribute (recipes set it).
    """
    if not isinstance(module, nn.Module):
        raise FrontendError(f"from_torch expects a torch.nn.Module, got {type(module).__name__}")
    args = tuple(example_input) if isinstance(example_input, (tuple, list)) else (example_input,)
    was_training = module.training
    module.eval()
    try:
        ep = torch.export.export(module, args)
    except Exception as e:  # torch.export raises many error types; all mean "cannot trace this module"
        raise FrontendError(f"torch.export could not trace {type(module).__name__}: {type(e).__name__}: {e}") from e
    finally:
        module.train(was_training)
    rng = input_range if input_range is not None else getattr(module, "input_range", None)
    return from_exported(ep, name or type(module).__name__.lower(), rng)


def load_pt2(path: Union[str, os.PathLike], name: Optional[str] = None, *,
             input_range: Optional[Sequence[float]] = None) -> ir.Graph:
    """Convert a ``torch.export.save`` archive (importing bitforge.models registers the ops it may use)."""
    p = Path(path)
    if not p.is_file():
        raise FrontendError(f"{p}: no such file; expected a .pt2 archive written by torch.export.save")
    try:
        data = read_archive(p)  # torch.export.load unpickles and evals parts of an archive: check them first
    except ArchiveError as e:
        raise FrontendError(f"{p}: {e}") from None
    except OSError as e:
        raise FrontendError(f"{p}: cannot read ({e.strerror or e})") from None
    with quiet_torch_export_logs() as logged:
        try:
            ep = torch.export.load(io.BytesIO(data))  # the bytes that were checked, not the file again
        except Exception as e:  # corrupt payload, unknown custom op, schema mismatch: all unreadable archives
            cause = logged_cause(logged) or f"{type(e).__name__}: {' '.join(str(e).split())}"
            raise FrontendError(f"{p}: cannot read as a torch.export archive ({cause})") from None
    return from_exported(ep, name or p.stem, input_range)

