"""RTL forms of ``Conv`` and ``Pool``: one output position per clock, through a window sequencer.

Within the stage contract (a whole tensor per sample on ``in_data``/``out_data``) a window op is three parts:

1. a **window sequencer**, generated per stage (``templates/window_seq.v.j2``): it registers the input tensor
   once and issues its windows in C order, one a clock. Each tap is a multiplexer over the positions, built
   from :func:`windows.window_indices` (the table the golden model, the interval analysis and the ONNX
   backend read), so every executor agrees on which element sits under which tap;
2. the **per-window arithmetic**, II 1 (or R): for a Conv, the window is a ``Dense`` over ``C_in * taps``
   inputs with the kernel as constant weights, built by :mod:`.dense` (reuse 1: one shared shift-add graph,
   the same constant multipliers for every position; reuse R > 1: ``bf_dense_folded``, each window's products
   folded by R). Groups make the weight block-diagonal: the shared graph skips the zeros; folded, each group
   is its own ``bf_dense_folded`` (identical schedules, run in lockstep), so no multiplier works on a zero.
   For a Pool, ``bf_pool_window``: a comparator tree (max) or an adder tree and the window's reciprocal as a
   constant multiply (avg; a tag from the sequencer says which of the distinct reciprocals), then requantize;
3. ``bf_window_collect``: the P position vectors, shifted into the channels-first output tensor.

Timing, known by construction: the sequencer's first window is 2 cycles after the handshake, window w enters
the per-window stage at w * II_w (II_w = 1 or the folded reuse), and the collector presents the tensor a cycle
after the last vector, so ``latency = 3 + (P - 1) * II_w + latency_w`` and ``II = P * II_w`` (the steady rate:
the sequencer takes the next tensor as it issues the last window, so with II_w > 1 the second tensor of a burst
is taken 2 (II_w - 1) cycles early, then one every II). A stage's
reuse factor (``--reuse``) is the per-window fold: ``--reuse auto`` counts each Conv's multipliers at it
(registered below), capped at the products of one group's window.

Not built (clear errors): ``--weights ram`` for a Conv (its kernel is constant: the shared graph is made of
its digits; a writable kernel would be the folded RAM form per group, not done yet).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ...emulate import pool_reciprocals
from ...fixed import FixedType, clog2
from ...ir import Conv, Pool
from ...windows import PAD, output_spatial, window_indices
from .dense import DenseSpec, DenseStage, dense_instance, folded_multipliers, form_options, merge_resources
from .stages import Ports, Stage, StageRequest, emitter
from .verilog import UNTYPED, RtlError, packed_parameter, templates, type_parameters, verilog_literal, verilog_name

__all__ = ["WindowGeometry", "geometry", "conv_matrix", "conv_folded_multipliers", "pool_window_latency",
           "emit_conv", "emit_pool", "COLLECT_LIBRARY", "POOL_LIBRARY"]

COLLECT_LIBRARY = ("bf_window_collect.v",)
POOL_LIBRARY = ("bf_pool_window.v", "bf_max_tree.v", "bf_adder_tree.v", "bf_const_mul.v", "bf_requant.v")
#: Cycles from a window stage's handshake to its first window (input register, then window register), and
#: from the last vector to the collected tensor.
SEQUENCER_LATENCY = 2
COLLECT_LATENCY = 1
#: Comparator/adder levels between registers in bf_pool_window's trees (option ``levels_per_stage``).
POOL_LEVELS_PER_STAGE = 2


@dataclass(frozen=True)
class WindowGeometry:
    """A window op's input (channels, spatial shape) and windows.window_indices' table ``(positions, taps)``."""

    channels: int
    spatial: tuple[int, ...]
    out_spatial: tuple[int, ...]
    index: np.ndarray

    @property
    def positions(self) -> int:
        return int(self.index.shape[0])

    @property
    def taps(self) -> int:
        return int(self.index.shape[1])

    @property
    def size(self) -> int:
        """Spatial elements per channel of the input."""
        return int(np.prod(self.spatial))


def geometry(req: StageRequest, kernel: tuple[int, ...], dilation: tuple[int, ...]) -> WindowGeometry:
    n = req.node
    shape = tuple(int(d) for d in req.graph.tensors[n.inputs[0]].shape)
    channels, spatial = shape[0], shape[1:]
    if len(spatial) != len(kernel):
        raise RtlError(f"{n.describe()}: input shape {shape} has {len(spatial)} spatial axes, the kernel "
                       f"{tuple(kernel)} {len(kernel)} (run ir.validate)")
    idx = window_indices(spatial, kernel, n.stride, n.padding, dilation)
    out = output_spatial(spatial, kernel, n.stride, n.padding, dilation)
    return WindowGeometry(channels, tuple(spatial), tuple(out), idx)


# -- the window sequencer --------------------------------------------------------------------------------------

def _case_label(positions: list[int], width: int) -> str:
    return ", ".join(f"{width}'d{p}" for p in positions)


def sequencer(module: str, where: str, graph: str, geo: WindowGeometry, x_type: FixedType, pad_code: int,
              pad_note: str, tags: Optional[np.ndarray] = None, tag_note: str = "") -> tuple[str, int]:
    """The sequencer module's text and its window width (``C * taps`` elements, then the tag bits)."""
    w, c, s_count, p_count = x_type.width, geo.channels, geo.size, geo.positions
    pos_w = max(1, clog2(p_count))
    read = sorted({int(s) for s in geo.index.ravel() if s != PAD})
    sources = [{"index": s, "concat": "{" + ", ".join(
        f"x[{(ch * s_count + s) * w + w - 1}:{(ch * s_count + s) * w}]" for ch in reversed(range(c))) + "}"}
               for s in read]
    tap_muxes = []
    for k in range(geo.taps):
        by_source: dict[int, list[int]] = {}
        for p in range(p_count):
            s = int(geo.index[p, k])
            if s != PAD:
                by_source.setdefault(s, []).append(p)
        items = [{"positions": _case_label(ps, pos_w), "source": s}
                 for s, ps in sorted(by_source.items(), key=lambda kv: kv[1][0])]
        tap_muxes.append({"index": k, "cases": items})
    tag_w, tag_items = 0, []
    if tags is not None and int(np.max(tags)) > 0:
        tag_w = max(1, clog2(int(np.max(tags)) + 1))
        by_tag: dict[int, list[int]] = {}
        for p, t in enumerate(tags):
            if int(t):
                by_tag.setdefault(int(t), []).append(p)
        tag_items = [{"positions": _case_label(ps, pos_w), "tag": t} for t, ps in sorted(by_tag.items())]
    parts = (["tag"] if tag_w else []) + [f"t{k}[{ch * w + w - 1}:{ch * w}]" for ch in reversed(range(c))
                                          for k in reversed(range(geo.taps))]
    out_w = c * geo.taps * w + tag_w
    text = templates().get_template("window_seq.v.j2").render(
        module=module, where=where, graph=graph, channels=c, spatial="x".join(map(str, geo.spatial)),
        positions=p_count, taps=geo.taps, w=w, x_type=x_type.to_short(), pad_note=pad_note, tag_w=tag_w,
        tag_note=tag_note, in_w=c * s_count * w, out_w=out_w, pos_w=pos_w, unread=len(read) < s_count,
        read=sources, tap_muxes=tap_muxes, tag_items=tag_items, cw=c * w,
        pad="{" + ", ".join([verilog_literal(pad_code, w)] * c) + "}", window="{" + ", ".join(parts) + "}")
    return text, out_w


def _module_name(req: StageRequest) -> str:
    return f"{verilog_name(req.graph.name)}_{req.instance_name}_windows"


def _timing(geo: WindowGeometry, ii_w: int, latency_w: int) -> tuple[int, int]:
    """(latency, II) of a window stage whose per-window part has II ``ii_w`` and latency ``latency_w``."""
    return (SEQUENCER_LATENCY + (geo.positions - 1) * ii_w + latency_w + COLLECT_LATENCY,
            geo.positions * ii_w)


# -- Conv ------------------------------------------------------------------------------------------------------

def conv_matrix(n: Conv) -> np.ndarray:
    """The kernel as one window's Dense weight: ``(C_out, C_in * taps)``, column ``c * taps + k`` for input
    channel c and tap k (the sequencer's window order), zero outside each output channel's group."""
    c_out, cg = n.out_channels, int(n.weight.shape[1])
    taps = int(np.prod(n.kernel))
    og = c_out // n.groups
    w = np.zeros((c_out, n.groups * cg * taps), dtype=np.int64)
    flat = np.asarray(n.weight, dtype=np.int64).reshape(c_out, cg * taps)
    for g in range(n.groups):
        w[g * og:(g + 1) * og, g * cg * taps:(g + 1) * cg * taps] = flat[g * og:(g + 1) * og]
    return w


def _group_products(n: Conv) -> tuple[int, int, int]:
    """(inputs, outputs, products) of one group's window Dense."""
    n_in = int(n.weight.shape[1]) * int(np.prod(n.kernel))
    n_out = n.out_channels // n.groups
    return n_in, n_out, n_in * n_out


def conv_folded_multipliers(n: Conv, reuse: int) -> int:
    """Multipliers of a Conv's window arithmetic at a reuse factor: its constant multipliers (the kernel's size)
    at reuse 1; else each group's folded Dense, reuse capped at that group's products."""
    n_in, n_out, products = _group_products(n)
    if min(reuse, products) <= 1:
        return int(n.weight.size)
    return n.groups * folded_multipliers(n_in, n_out, min(reuse, products))


def _conv_spec(req: StageRequest, weight: np.ndarray, bias, where: str) -> DenseSpec:
    n: Conv = req.node
    return DenseSpec(where, weight, bias, req.in_type, n.need("weight_type", *UNTYPED),
                     n.need("bias_type", *UNTYPED) if bias is not None else None, n.need("accum_type", *UNTYPED),
                     req.out_type, req.relu_type)


@emitter("Conv", multiplies=lambda n: int(n.weight.size), folded_multipliers=conv_folded_multipliers,
         fuses_relu=True)
def emit_conv(req: StageRequest) -> Stage:
    n = req.node
    if not isinstance(n, Conv):
        raise RtlError(f"{n.describe()}: the Conv emitter got a {n.OP} node")
    if req.write_port is not None:
        raise RtlError(f"{n.describe()}: --weights ram is not built for Conv layers yet (the kernel is constant "
                       "in the hardware); compile with --weights rom")
    if req.reuse < 1:
        raise RtlError(f"{n.describe()}: reuse factor must be at least 1, got {req.reuse}")
    geo = geometry(req, n.kernel, tuple(n.dilation))
    base, ports = req.instance_name, req.ports
    module = _module_name(req)
    seq_text, win_w = sequencer(module, n.describe(), req.graph.name, geo, req.in_type, 0, "code 0")
    y_type = req.relu_type if req.relu_type is not None else req.out_type
    vec_w = n.out_channels * y_type.width
    options = form_options(req)
    win = Ports(ports.clk, ports.rst, f"{base}_win_valid", f"{base}_win_ready", f"{base}_win_data",
                f"{base}_vec_valid", f"{base}_vec_ready", f"{base}_vec_data")
    groups = []
    n_in, n_out, products = _group_products(n)
    if n.groups == 1 or min(req.reuse, products) == 1:
        # One Dense over the whole window (block-diagonal when grouped: the shared graph drops the zeros). A
        # group of one product (a 1x1 depthwise kernel) does not fold: reuse 1, not a fold of the zeros.
        d = dense_instance(_conv_spec(req, conv_matrix(n), n.bias, f"{n.describe()} (window)"), f"{base}_dense",
                           win, req.reuse if n.groups == 1 else 1, **options)
        dense_stages = [d]
    else:
        # Folded and grouped: a bf_dense_folded per group on its slice of the window, in lockstep (equal
        # shapes give equal schedules, so group 0's handshakes stand for all).
        dense_stages = []
        weight = np.asarray(n.weight, dtype=np.int64).reshape(n.out_channels, n_in)
        for g in range(n.groups):
            gp = Ports(ports.clk, ports.rst, win.in_valid, f"{base}_g{g}_in_ready", f"{base}_g{g}_in",
                       f"{base}_g{g}_out_valid", win.out_ready, f"{base}_g{g}_out")
            bias = None if n.bias is None else np.asarray(n.bias)[g * n_out:(g + 1) * n_out]
            spec = _conv_spec(req, weight[g * n_out:(g + 1) * n_out], bias, f"{n.describe()} (group {g})")
            dense_stages.append(dense_instance(spec, f"{base}_g{g}_dense", gp, req.reuse, **options))
            groups.append({"index": g, "in_lo": g * n_in * req.in_type.width, "in_w": n_in * req.in_type.width,
                           "out_w": n_out * y_type.width})
    first: DenseStage = dense_stages[0]
    latency, ii = _timing(geo, first.ii, first.latency)
    text = templates().get_template("conv.v.j2").render(
        where=n.describe(), base=base, ports=ports, module=module, win_w=win_w, vec_w=vec_w, groups=groups,
        dense=[d.text for d in dense_stages], c_out=n.out_channels, y_w=y_type.width, positions=geo.positions,
        taps=geo.taps, c_in=geo.channels, n_groups=n.groups, out_spatial="x".join(map(str, geo.out_spatial)),
        latency=latency, ii=ii, reuse=first.reuse, window_ii=first.ii)
    resources = merge_resources(*(d.resources for d in dense_stages))
    resources.update({"positions": geo.positions, "window_elements": geo.channels * geo.taps})
    library = tuple(dict.fromkeys(COLLECT_LIBRARY + tuple(lib for d in dense_stages for lib in d.library)))
    return Stage(text, latency, ii, library, generated={f"{module}.v": seq_text}, resources=resources,
                 reuse=first.reuse)


# -- Pool ------------------------------------------------------------------------------------------------------

def pool_window_latency(mode: str, taps: int, levels_per_stage: int = POOL_LEVELS_PER_STAGE) -> int:
    """bf_pool_window's LATENCY: the tree's registers, then the output register (and, avg, the sum register)."""
    return clog2(taps) // levels_per_stage + (1 if mode == "max" else 2)


@emitter("Pool")
def emit_pool(req: StageRequest) -> Stage:
    n = req.node
    if not isinstance(n, Pool):
        raise RtlError(f"{n.describe()}: the Pool emitter got a {n.OP} node")
    if n.mode not in ("max", "avg"):
        raise RtlError(f"{n.describe()}: pooling mode {n.mode!r} has no hardware form; 'max' or 'avg'")
    levels = int(req.options.get("levels_per_stage", POOL_LEVELS_PER_STAGE))
    if levels < 1:
        raise RtlError(f"{n.describe()}: levels_per_stage must be at least 1, got {levels}")
    kernel = tuple(int(k) for k in n.kernel)
    geo = geometry(req, kernel, (1,) * len(kernel))
    x, y = req.in_type, req.out_type
    module = _module_name(req)
    params: list[tuple[str, object]] = [("C", geo.channels), ("K", geo.taps), ("IN_W", x.width),
                                        ("IN_FRAC", x.frac), ("IN_SIGNED", int(x.signed))]
    if n.mode == "max":
        # Padding as the smallest code: never larger than the real element every window holds.
        seq_text, win_w = sequencer(module, n.describe(), req.graph.name, geo, x, x.min_code,
                                    f"the smallest code {x.min_code}, which never wins")
        params += [("MODE", 0), ("TAG_W", 1)]
        resources = {"multipliers": 0, "comparators": geo.channels * max(0, geo.taps - 1)}
        recips_note = ""
    else:
        recips = pool_reciprocals(n, geo.spatial)
        distinct = sorted({int(r) for r in recips})
        tags = np.array([distinct.index(int(r)) for r in recips], dtype=np.int64)
        rec_w = max(1, max(distinct).bit_length())
        seq_text, win_w = sequencer(module, n.describe(), req.graph.name, geo, x, 0, "code 0", tags,
                                    f"which of the {len(distinct)} reciprocals the window's divisor takes")
        tag_w = win_w - geo.channels * geo.taps * x.width
        params += [("MODE", 1), ("TAG_W", max(1, tag_w)), ("D", len(distinct)), ("REC_W", rec_w),
                   ("RECIPS", packed_parameter(distinct, rec_w)), ("RECIP_FRAC", n.recip_frac)]
        resources = {"multipliers": 0, "constant_multipliers": geo.channels * len(distinct),
                     "adders": geo.channels * max(0, geo.taps - 1)}
        recips_note = ", ".join(map(str, distinct))
    params += [*type_parameters("OUT", y).items(), ("LEVELS_PER_STAGE", levels)]
    latency_w = pool_window_latency(n.mode, geo.taps, levels)
    latency, ii = _timing(geo, 1, latency_w)
    base = req.instance_name
    text = templates().get_template("pool.v.j2").render(
        where=n.describe(), base=base, ports=req.ports, module=module, win_w=win_w,
        tagged=win_w > geo.channels * geo.taps * x.width, params=params, channels=geo.channels, y_w=y.width,
        positions=geo.positions, taps=geo.taps, mode=n.mode, recips=recips_note, recip_frac=n.recip_frac,
        out_spatial="x".join(map(str, geo.out_spatial)), latency=latency, ii=ii, x_type=x.to_short(),
        y_type=y.to_short())
    resources.update({"positions": geo.positions, "window_elements": geo.channels * geo.taps})
    return Stage(text, latency, ii, COLLECT_LIBRARY + POOL_LIBRARY, generated={f"{module}.v": seq_text},
                 resources=resources, reuse=1)
