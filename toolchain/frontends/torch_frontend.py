"""PyTorch frontend: ``torch.export`` programs (live modules or ``.pt2`` archives) -> bitforge IR.

The frontend reads the exported ATen graph, never the module's attributes, so a live module and its
saved archive give the same IR. Types come from ``bitforge::fake_quant`` nodes (see
``bitforge.models.quant``): a quantizer on a parameter types that parameter, a quantizer on a graph input
is a ``Quantize``, a quantizer right after a fixed-point op types that op's output, any other one is a
``Requantize``. ``node.meta['nn_module_stack']`` says which module call an op came from; the ops of a
``KANLayer`` (the Cox-de Boor recursion) and the two products of a ``LowRankLinear`` are folded into one
IR node each. Accumulator types are left unset: the precision pass chooses them.
"""
from __future__ import annotations

import io
import os
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

from .. import fixed, ir
from ..bspline import BASIS_IMPLS, index_params
from ..errors import BitforgeError
from ..fixed import FixedType, Overflow
from ..weight_codes import WEIGHT_CODES_KEY, weight_code_counts
from .pt2_archive import ArchiveError, logged_cause, quiet_torch_export_logs, read_archive
from .recurrent import ATEN_RECURRENT, recurrent_message

__all__ = ["FrontendError", "from_torch", "load_pt2", "from_exported", "DEFAULT_BASIS_TYPE",
           "SUPPORTED_MODULES", "SUPPORTED_OPS"]

#: Basis type of fixed-point KAN layers whose module does not fake-quantize its basis.
DEFAULT_BASIS_TYPE = FixedType(13, 1, False, "RND_CONV", "SAT")

SUPPORTED_MODULES = ("nn.Sequential", "nn.Linear", "nn.ReLU", "nn.Dropout (eval)", "InputQuant", "QuantLinear",
                     "LowRankLinear", "KANLayer")
SUPPORTED_OPS = ("aten.linear", "aten.mm / aten.addmm (with a constant weight)", "aten.relu", "aten.add.Tensor",
                 "bitforge.fake_quant", "aten.t / aten.permute (of a constant)",
                 "aten.clone / alias / detach / dropout (identity)")

_aten = torch.ops.aten
_IDENTITY_OPS = {_aten.clone.default, _aten.alias.default, _aten.detach.default, _aten.dropout.default,
                 _aten.contiguous.default}
_RELU_OPS = {_aten.relu.default, _aten.relu_.default}
_ADD_OPS = {_aten.add.Tensor, _aten.add_.Tensor}
#: Modules whose ATen ops become ONE IR node: ``type string in nn_module_stack -> IR op``.
_FOLDED = {f"{TorchKANLayer.__module__}.{TorchKANLayer.__qualname__}": "KANLayer",
           f"{LowRankLinear.__module__}.{LowRankLinear.__qualname__}": "LowRankDense"}
_OP_PREFIX = {"Quantize": "quantize", "Requantize": "requantize", "ReLU": "relu", "Add": "add", "Dense": "dense",
              "LowRankDense": "lowrank", "KANLayer": "kan"}


class FrontendError(BitforgeError):
    """A model the frontend cannot turn into IR; the message names the node, op, module and the fix."""


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


Value = Union[Const, Act]


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


def _where(node: torch.fx.Node) -> str:
    """``node 'linear_1' (module '3', bitforge.models.quant.QuantLinear)``: enough to find it in the model."""
    o = _origin(node)
    if not o.path:
        return f"node '{node.name}' (top-level forward of {o.module_type or 'the module'})"
    return f"node '{node.name}' (module '{o.path}', {o.module_type})"


def _supported_list() -> str:
    return f"supported modules: {', '.join(SUPPORTED_MODULES)}; supported ops: {', '.join(SUPPORTED_OPS)}"


def _op_name(target) -> str:
    name = getattr(target, "name", None)
    return name() if callable(name) else str(target)


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
        for node in self.ep.graph.nodes:
            if node.op == "call_function" and _op_name(node.target).replace("::", ".").startswith(ATEN_RECURRENT):
                raise FrontendError(f"{_where(node)}: {recurrent_message(_op_name(node.target))}")
        state = {**self.ep.state_dict, **self.ep.constants}
        kinds = {s.arg.name: s for s in self.ep.graph_signature.input_specs}
        outputs: list[str] = []
        for node in self.ep.graph.nodes:
            if node in self.done:
                continue
            if node.op == "placeholder":
                self._placeholder(node, kinds[node.name], state)
            elif node.op == "output":
                outputs = [self._act(a, node, "graph output").tensor for a in node.args[0]]
            elif node.op == "call_function":
                group = _origin(node).group
                if group is not None:
                    self._fold_group(node, group, state)
                else:
                    self._call(node)
            else:
                raise FrontendError(f"{_where(node)}: unexpected fx node kind '{node.op}' in the exported program")
        g = ir.Graph(self.name, self.inputs, outputs, self.tensors, self.nodes)
        if self.weight_codes:
            g.metadata[WEIGHT_CODES_KEY] = self.weight_codes
        return g

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
        return self.env[arg]

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
        if t in (_aten.t.default, _aten.permute.default):
            return self._transpose(node)
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
        raise FrontendError(f"{_where(node)}: op {_op_name(t)} is not supported by the torch frontend; "
                            f"{_supported_list()}")

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

    def _transpose(self, node: torch.fx.Node) -> None:
        c = self._const(node.args[0], node, "transposed tensor")
        if c.values.ndim != 2 or (node.target == _aten.permute.default and list(node.args[1]) != [1, 0]):
            raise FrontendError(f"{_where(node)}: only 2-D transposes of constant weights are supported")
        self.env[node] = self._transposed(c)

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

