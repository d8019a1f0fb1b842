"""An online learner (KAN or MLP) as HLS C++, and its C simulation against the golden learner, bit for bit.

:func:`generate_hls_learner` emits, for a :class:`~bitforge.toolchain.learn.spec.Learner`, a Vitis HLS project
folder around the templates ``hls/bitforge_learner_kan.h`` / ``bitforge_learner_mlp.h`` (package data
``bitforge.hls``): ``firmware/<name>.h`` (types, sizes, one config struct per layer), ``firmware/<name>.cpp`` (the
top function ``<name>(x, target, learn_enable, y)``: predict, then update on the same sample; the learned state
and the LFSR lanes are file-scope arrays holding the initial state, as the RTL learner's memories hold theirs;
the basis ROMs), the two templates, ``tb/<name>_tb.cpp`` (the C-simulation testbench: reads a binary stream of
codes, writes the predictions and the final state, and compares them with the golden ones when present),
``build_csim.sh`` (g++ and hls4ml's ap_types headers), ``build_vitis.tcl`` (csim_design and csynth_design, part
and clock set) and a README. bitforge runs g++ only; nothing here has been through Vitis HLS.

Why the C++ is bit-exact: values are ap_fixed; products and sums are exact (accumulator types sized here, with
the same bounds as the golden model), every rounding is an ap_fixed assignment where the golden model rounds
(bitforge.toolchain.fixed reproduces ap_fixed's modes, tests/test_fixed_apfixed.py), and the update's rounding
works on integer codes exactly as ``learn.emulate`` does. :func:`csim_vs_golden` proves it per learner: g++
builds the testbench, the whole trajectory runs, and every prediction, every stored coefficient (weight, bias)
and every LFSR lane is compared with :func:`bitforge.toolchain.learn.emulate.run`.

Binary files (little-endian int64): ``tb_data/stimulus.bin`` is ``n, d_in, d_out`` then per sample the input
codes, the target codes and learn_enable (0/1); the testbench writes ``csim_predictions.bin`` (n x d_out datapath
codes), ``csim_state.bin`` (storage codes: per layer the KAN coefficients (out, in, G+k), or the MLP weights
(out, in) then biases (out,), in C order) and ``csim_lanes.bin`` (the 32-bit LFSR lanes in
:func:`~bitforge.toolchain.learn.spec.lane_seeds` order), and compares them with ``golden_*.bin`` when present.
"""
from __future__ import annotations

import json
import math
import re
import subprocess
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Optional, Union

import numpy as np

from ... import ir
from ...bspline import basis_table
from ...errors import VerificationFailed
from ...fixed import FixedType, Overflow, Rounding, clog2, signed_bits
from ...learn.emulate import Trajectory, derivative_table
from ...learn.emulate import run as golden_run
from ...learn.spec import Learner, LearnerError, State, dense_accum_type, kan_accum_type, lane_counts, lane_seeds
from .gxx import CompileResult, HlsToolError, compile_cpp

__all__ = ["HlsLearner", "CsimRun", "generate_hls_learner", "write_hls_learner", "build_csim", "run_csim",
           "csim_vs_golden", "compare_trajectory", "c_name", "DEFAULT_PART", "DEFAULT_CLOCK_NS", "TEMPLATES"]

#: Vitis HLS defaults written into build_vitis.tcl: bitforge's xcvu9p target's part and a 10 ns clock.
DEFAULT_PART = "xcvu9p-flga2104-2L-e"
DEFAULT_CLOCK_NS = 10.0
#: The template each learner kind includes (the MLP's includes the KAN's shared helpers too).
TEMPLATES = {"kan": ("bitforge_learner_kan.h",), "mlp": ("bitforge_learner_kan.h", "bitforge_learner_mlp.h")}
#: Initial values are written as decimal double literals, exact while a code has at most 53 significant bits.
MAX_LITERAL_BITS = 53
_WRAP = dict(rounding=Rounding.TRN, overflow=Overflow.WRAP)


@dataclass(frozen=True)
class HlsLearner:
    """A generated HLS project: its files (path relative to the project folder -> text) and what the
    testbench's files hold."""

    name: str
    kind: str
    files: dict[str, str]
    n_state: int  # storage codes in csim_state.bin
    n_lanes: int  # LFSR lanes in csim_lanes.bin
    sizes: tuple[int, ...] = ()

    def manifest(self) -> dict:
        return {"name": self.name, "kind": self.kind, "sizes": list(self.sizes), "n_state": self.n_state,
                "n_lanes": self.n_lanes, "top": self.name, "sources": [f"firmware/{self.name}.cpp"],
                "testbench": f"tb/{self.name}_tb.cpp"}


@dataclass(frozen=True)
class CsimRun:
    """One C simulation of a trajectory: predictions (datapath codes, ``(n, d_out)``), the final state (as
    :attr:`Trajectory.final`), the final LFSR lanes (as :attr:`Trajectory.lfsr`), and its times: ``seconds`` is the
    testbench's own loop over the samples (the learner's calls only), ``wall_seconds`` the whole process."""

    predictions: np.ndarray
    state: State
    lanes: list
    seconds: float
    wall_seconds: float


def c_name(name: str) -> str:
    """A C identifier from a learner's name (``t1-kan`` -> ``t1_kan``)."""
    s = re.sub(r"[^A-Za-z0-9_]", "_", name).strip("_") or "learner"
    return s if re.match(r"[A-Za-z]", s) else f"learner_{s}"


# -- literals ------------------------------------------------------------------------------------------------

def _literal(code: int, frac: int) -> str:
    """The exact value ``code * 2**-frac`` as a C++ double literal (the shortest repr round-trips exactly)."""
    return repr(math.ldexp(float(int(code)), -frac))


def _array(values: np.ndarray, fmt, indent: str = "") -> str:
    """A nested brace initialiser of ``values`` (any shape), wrapped at 120 columns."""
    values = np.asarray(values)
    if values.ndim == 1:
        items = [fmt(v) for v in values.tolist()]
        lines, line = [], ""
        for it in items:
            piece = it if not line else f"{line}, {it}"
            if len(indent) + len(piece) + 2 > 118 and line:
                lines.append(line + ",")
                line = it
            else:
                line = piece
        lines.append(line)
        if len(lines) == 1:
            return "{" + lines[0] + "}"
        return "{\n" + "\n".join(indent + "    " + ln for ln in lines) + "\n" + indent + "}"
    inner = [_array(v, fmt, indent + "    ") for v in values]
    return "{\n" + ",\n".join(indent + "    " + s for s in inner) + "\n" + indent + "}"


def _codes(values: np.ndarray, t: FixedType) -> str:
    return _array(values, lambda c: _literal(c, t.frac))


def _lane_literals(values: np.ndarray) -> str:
    return _array(values, lambda s: f"0x{int(s):08x}u")


def _check_literals(learner: Learner) -> None:
    f = learner.formats
    for what, t in (("storage", f.storage), ("basis", f.basis)):
        if t.width > MAX_LITERAL_BITS:
            raise LearnerError(f"the HLS learner writes {what} values ({t}) as double literals, exact up to "
                               f"{MAX_LITERAL_BITS} bits; narrow the {what} format (storage = coeff + guard bits)")


# -- per-layer configs -----------------------------------------------------------------------------------------

def _exact(width: int, integer: int) -> str:
    return FixedType(width, integer, True, **_WRAP).to_ap()


def _kan_config(learner: Learner, layer: int, n: ir.KANLayer) -> tuple[str, dict]:
    """The config struct of KAN layer ``layer`` and the numbers the top function needs."""
    f, spec = learner.formats, learner.spec
    x_t = f.input if layer == 0 else f.datapath
    co, bt, et, st = f.coeff, f.basis, f.error, f.storage
    k1 = n.order + 1
    depth = -(-(n.grid_size + n.order) // k1)
    top = (n.grid_size << n.u_bits) - 1
    offset_bits = max(x_t.width, signed_bits(int(n.index_lo))) + 1
    index_w = max(offset_bits + int(n.index_mult).bit_length() + 1, top.bit_length() + 2)
    d = et.frac + bt.frac - 1 - st.frac + spec.rule.lr_shift
    # exact sums of the back-propagation: |sum_m c D_m| <= 2 max|c| (the D row sums to 0, sum |D| <= 2)
    pd_frac, pd_int = co.frac + bt.frac, co.integer + 2
    gs_frac, gs_int = et.frac + pd_frac, et.integer + pd_int + clog2(n.out_features) + 1
    mult_w = max(1, int(n.index_mult).bit_length())
    inv_h_frac = n.index_shift + n.u_bits - x_t.frac  # 1/h = index_mult * 2**-inv_h_frac (input LSBs)
    fields = [
        ("int", "n_in", n.in_features), ("int", "n_out", n.out_features), ("int", "grid_size", n.grid_size),
        ("int", "order", n.order), ("int", "k1", k1), ("int", "depth", depth), ("int", "u_bits", n.u_bits),
        ("int", "cell_w", max(1, (n.grid_size - 1).bit_length())), ("int", "addr_w", max(1, (depth - 1).bit_length())),
        ("int", "slot_w", max(1, (k1 - 1).bit_length())), ("int", "index_w", index_w),
        ("long long", "index_lo", int(n.index_lo)), ("long long", "index_mult", int(n.index_mult)),
        ("int", "index_shift", int(n.index_shift)), ("unsigned long long", "inv_h_mult", int(n.index_mult)),
        ("int", "lr_d", d), ("int", "rand_bits", spec.rule.rand_bits),
        ("bool", "stochastic", spec.rule.rounding == "stochastic"), ("bool", "need_grad", layer > 0),
    ]
    types = [
        ("x_t", x_t.to_ap()), ("data_t", f.datapath.to_ap()), ("coeff_t", co.to_ap()), ("storage_t", st.to_ap()),
        ("basis_t", bt.to_ap()), ("dbasis_t", _exact(bt.frac + 2, 2)),
        ("accum_t", kan_accum_type(f, n.in_features).to_ap()), ("pd_t", _exact(pd_int + pd_frac, pd_int)),
        ("gs_t", _exact(gs_int + gs_frac, gs_int)), ("error_t", et.to_ap()),
        ("inv_h_t", FixedType(mult_w, mult_w - inv_h_frac, False, **_WRAP).to_ap()),
    ]
    return _struct(f"layer{layer}_config", f"KAN layer {layer}: {n.in_features} -> {n.out_features}, G = "
                   f"{n.grid_size}, k = {n.order} on [{n.grid_lo:g}, {n.grid_hi:g}), {n.basis_impl} bases",
                   fields, types), {"k1": k1, "depth": depth}


def _dense_config(learner: Learner, layer: int, n: ir.Dense) -> str:
    f, spec = learner.formats, learner.spec
    x_t = f.input if layer == 0 else f.datapath
    co, et = f.coeff, f.error
    gs_frac, gs_int = et.frac + co.frac, et.integer + co.integer + clog2(n.out_features) + 1
    last = layer == spec.n_layers - 1
    fields = [
        ("int", "n_in", n.in_features), ("int", "n_out", n.out_features), ("bool", "relu", not last),
        ("bool", "need_grad", layer > 0), ("int", "lr_d", et.frac - 1 - f.storage.frac + spec.rule.lr_shift),
        ("int", "x_frac", x_t.frac), ("int", "rand_bits", spec.rule.rand_bits),
        ("bool", "stochastic", spec.rule.rounding == "stochastic"),
    ]
    types = [
        ("x_t", x_t.to_ap()), ("data_t", f.datapath.to_ap()), ("coeff_t", co.to_ap()),
        ("storage_t", f.storage.to_ap()), ("accum_t", dense_accum_type(f, x_t, n.in_features).to_ap()),
        ("gs_t", _exact(gs_int + gs_frac, gs_int)), ("error_t", et.to_ap()),
    ]
    return _struct(f"layer{layer}_config", f"Dense layer {layer}: {n.in_features} -> {n.out_features}"
                   + ("" if last else ", ReLU"), fields, types)


def _struct(name: str, comment: str, fields: list, types: list) -> str:
    lines = [f"// {comment}", f"struct {name} {{"]
    lines += [f"    static const {t} {k} = {str(v).lower() if isinstance(v, bool) else v};" for t, k, v in fields]
    lines += [f"    typedef {spelled} {k};" for k, spelled in types]
    return "\n".join(lines + ["};"])


# -- the project ---------------------------------------------------------------------------------------------

def generate_hls_learner(learner: Learner, name: Optional[str] = None, *, part: str = DEFAULT_PART,
                         clock_ns: float = DEFAULT_CLOCK_NS) -> HlsLearner:
    """The project's files for ``learner`` (its initial state baked in), deterministic: the same learner gives
    the same text."""
    _check_literals(learner)
    spec = learner.spec
    name = c_name(name or learner.graph.name)
    kan = spec.kind == "kan"
    seeds = lane_seeds(spec)
    parts = [(_kan_layer if kan else _dense_layer)(learner, l, n, seeds[l]) for l, n in enumerate(learner.layers())]
    configs, decls, partitions, read_state, read_lanes = ([p[j] for p in parts] for j in range(5))
    n_lanes = sum(int(np.prod(s)) for shapes in lane_counts(spec) for s in shapes)
    header = _firmware_header(learner, name, configs, learner.n_params, n_lanes)
    source = _firmware_source(name, [d for layer in decls for d in layer], [p for layer in partitions for p in layer],
                              _top_body(learner, kan), read_state, read_lanes)
    files = {f"firmware/{name}.h": header, f"firmware/{name}.cpp": source, f"tb/{name}_tb.cpp": _testbench(name),
             "build_csim.sh": _build_script(name), "build_vitis.tcl": _vitis_tcl(name, part, clock_ns),
             "README.md": _readme(learner, name, part, clock_ns)}
    for t in TEMPLATES[spec.kind]:
        files[f"firmware/{t}"] = resources.files("bitforge.hls").joinpath(t).read_text()
    return HlsLearner(name, spec.kind, files, learner.n_params, n_lanes, tuple(spec.sizes))


def _kan_layer(learner: Learner, l: int, n: ir.KANLayer, seeds: tuple) -> tuple[str, list, list, str, str]:
    """KAN layer ``l``: its config, its state and ROM declarations (banks: bank j, address a holds coefficient
    p = a (k+1) + j), their pragmas, and the C-sim read-back of its coefficients and lanes."""
    f = learner.formats
    config, dims = _kan_config(learner, l, n)
    k1, depth, G_k = dims["k1"], dims["depth"], n.grid_size + n.order
    C = np.asarray(n.coeffs, dtype=np.int64)
    banks = np.zeros((n.out_features, n.in_features, k1, depth), dtype=np.int64)
    for p in range(G_k):
        banks[:, :, p % k1, p // k1] = C[:, :, p]
    rows = 1 << n.u_bits
    table = basis_table(n.order, n.u_bits, f.basis, n.basis_impl)
    dtable = derivative_table(n.order, n.u_bits, f.basis, n.basis_impl)
    decls = [
        f"// layer {l}: bank j, address a holds coefficient p = a * {k1} + j (zero past the last one)",
        f"static layer{l}_config::storage_t coeffs{l}[{n.out_features}][{n.in_features}][{k1}][{depth}] = "
        f"{_codes(banks, f.storage)};",
        f"static ap_uint<32> lanes{l}[{n.out_features}][{n.in_features}][{k1}] = {_lane_literals(seeds[0])};",
        f"static const layer{l}_config::basis_t basis{l}[{rows}][{k1}] = {_codes(table, f.basis)};",
        f"static const layer{l}_config::dbasis_t dbasis{l}[{rows}][{k1}] = {_codes(dtable, f.basis)};" if l > 0 else
        "// layer 0 back-propagates nothing: its derivative table is a placeholder\n"
        f"static const layer0_config::dbasis_t dbasis0[{rows}][{k1}] = {{}};",
    ]
    partitions = [f"#pragma HLS ARRAY_PARTITION variable=coeffs{l} complete dim={d}" for d in (1, 2, 3)]
    partitions += [f"#pragma HLS ARRAY_PARTITION variable=lanes{l} complete dim=0",
                   f"#pragma HLS ARRAY_PARTITION variable=basis{l} complete dim=2"]
    read_state = (f"    for (int o = 0; o < {n.out_features}; o++)\n"
                  f"        for (int i = 0; i < {n.in_features}; i++)\n"
                  f"            for (int p = 0; p < {G_k}; p++)\n"
                  f"                codes[k++] = bitforge::code_of(coeffs{l}[o][i][p % {k1}][p / {k1}]).to_int64();")
    read_lanes = (f"    for (int o = 0; o < {n.out_features}; o++)\n"
                  f"        for (int i = 0; i < {n.in_features}; i++)\n"
                  f"            for (int m = 0; m < {k1}; m++) states[k++] = lanes{l}[o][i][m].to_int64();")
    return config, decls, partitions, read_state, read_lanes


def _dense_layer(learner: Learner, l: int, n: ir.Dense, seeds: tuple) -> tuple[str, list, list, str, str]:
    """Dense layer ``l``: as :func:`_kan_layer` (weights, biases and their lanes, all registers)."""
    f = learner.formats
    W, b = np.asarray(n.weight, dtype=np.int64), np.asarray(n.bias, dtype=np.int64)
    decls = [
        f"static layer{l}_config::storage_t weight{l}[{n.out_features}][{n.in_features}] = {_codes(W, f.storage)};",
        f"static layer{l}_config::storage_t bias{l}[{n.out_features}] = {_codes(b, f.storage)};",
        f"static ap_uint<32> weight_lanes{l}[{n.out_features}][{n.in_features}] = {_lane_literals(seeds[0])};",
        f"static ap_uint<32> bias_lanes{l}[{n.out_features}] = {_lane_literals(seeds[1])};",
    ]
    partitions = [f"#pragma HLS ARRAY_PARTITION variable={v}{l} complete dim=0"
                  for v in ("weight", "bias", "weight_lanes", "bias_lanes")]
    read_state = (f"    for (int o = 0; o < {n.out_features}; o++)\n"
                  f"        for (int i = 0; i < {n.in_features}; i++) codes[k++] = "
                  f"bitforge::code_of(weight{l}[o][i]).to_int64();\n"
                  f"    for (int o = 0; o < {n.out_features}; o++) "
                  f"codes[k++] = bitforge::code_of(bias{l}[o]).to_int64();")
    read_lanes = (f"    for (int o = 0; o < {n.out_features}; o++)\n"
                  f"        for (int i = 0; i < {n.in_features}; i++) "
                  f"states[k++] = weight_lanes{l}[o][i].to_int64();\n"
                  f"    for (int o = 0; o < {n.out_features}; o++) states[k++] = bias_lanes{l}[o].to_int64();")
    return _dense_config(learner, l, n), decls, partitions, read_state, read_lanes


def _top_body(learner: Learner, kan: bool) -> list[str]:
    """Statements of the top function: forward through every layer, the error, backward from the last layer
    down (each layer updates with its own pre-update values), then every LFSR lane leaps."""
    nodes = learner.layers()
    L = len(nodes)
    stochastic = learner.spec.rule.rounding == "stochastic"
    out = []
    x = "x"
    for l, n in enumerate(nodes):
        cache = "kan_cache" if kan else "dense_cache"
        out += [f"bitforge::{cache}<layer{l}_config> cache{l};", f"data_t h{l}[{n.out_features}];",
                f"bitforge::{'kan_forward' if kan else 'dense_forward'}<layer{l}_config>({x}, h{l}, cache{l}, "
                + (f"coeffs{l}, basis{l});" if kan else f"weight{l}, bias{l});")]
        x = f"h{l}"
    out += [f"grad_t g{L}[N_OUT];", f"bitforge::output_error<data_t, grad_t, N_OUT>(h{L - 1}, target, g{L});"]
    for l in range(L - 1, -1, -1):
        n = nodes[l]
        out.append(f"grad_t g{l}[{n.in_features}];" + ("  // layer 0 needs no input gradient" if l == 0 else ""))
        if kan:
            out.append(f"bitforge::kan_backward<layer{l}_config>(cache{l}, g{l + 1}, g{l}, learn_enable, coeffs{l}, "
                       f"lanes{l}, dbasis{l});")
        else:
            out.append(f"bitforge::dense_backward<layer{l}_config>(cache{l}, g{l + 1}, g{l}, learn_enable, "
                       f"weight{l}, bias{l}, weight_lanes{l}, bias_lanes{l});")
    if stochastic:
        out += [f"bitforge::kan_lfsr_leap<layer{l}_config>(lanes{l});" if kan else
                f"bitforge::dense_lfsr_leap<layer{l}_config>(weight_lanes{l}, bias_lanes{l});" for l in range(L)]
    out += [f"for (int o = 0; o < N_OUT; o++) {{", "#pragma HLS UNROLL", f"    y[o] = h{L - 1}[o];", "}"]
    return out


def _firmware_header(learner: Learner, name: str, configs: list[str], n_state: int, n_lanes: int) -> str:
    spec, f = learner.spec, learner.formats
    guard = f"{name.upper()}_H_"
    template = TEMPLATES[spec.kind][-1]
    return "\n".join([
        f"// {name}: bitforge online {spec.kind.upper()} learner {list(spec.sizes)} as HLS C++ (generated by bitforge; "
        "do not edit).",
        f"// eta = 2^-{spec.rule.lr_shift} (a shift), {spec.rule.rounding} update rounding, storage {f.storage} "
        f"(coeff {f.coeff} + {f.guard_bits} guard bits).",
        f"#ifndef {guard}", f"#define {guard}", "", "#include <ap_fixed.h>", "#include <ap_int.h>", "",
        f'#include "{template}"', "",
        f"typedef {f.input.to_ap()} input_t;  // the sample's inputs",
        f"typedef {f.datapath.to_ap()} data_t;  // predictions, targets, hidden activations",
        f"typedef {f.error.to_ap()} grad_t;  // e = y_hat - t, back-propagated errors (glibc owns error_t)",
        f"typedef {f.storage.to_ap()} storage_t;  // the learned state",
        "", f"static const int N_IN = {spec.sizes[0]};", f"static const int N_OUT = {spec.sizes[-1]};",
        f"static const int N_STATE = {n_state};  // stored coefficients (KAN) or weights and biases (MLP)",
        f"static const int N_LANES = {n_lanes};  // stochastic rounding's LFSR lanes", "",
        *[c + "\n" for c in configs],
        "// One sample: predict y from x, then (learn_enable) update on the same sample towards target.",
        f"void {name}(const input_t x[N_IN], const data_t target[N_OUT], bool learn_enable, data_t y[N_OUT]);", "",
        "#ifndef __SYNTHESIS__",
        "// C simulation only: the learned state as storage codes (bitforge's order) and the LFSR lanes.",
        f"void {name}_read_state(long long codes[N_STATE]);", f"void {name}_read_lanes(long long states[N_LANES]);",
        "#endif", "", f"#endif  // {guard}", ""])


def _firmware_source(name: str, state_decls: list[str], partitions: list[str], body: list[str],
                     read_state: list[str], read_lanes: list[str]) -> str:
    return "\n".join([
        f"// {name}: the top function and the learner's initial state (generated by bitforge; do not edit).",
        f'#include "{name}.h"', "",
        "// The learned state lives here (static: this file's), initialised as the bitstream would be; the top",
        "// function updates it.", "",
        *[d + "\n" for d in state_decls],
        f"void {name}(const input_t x[N_IN], const data_t target[N_OUT], bool learn_enable, data_t y[N_OUT]) {{",
        "#pragma HLS PIPELINE II=1", "#pragma HLS ARRAY_PARTITION variable=x complete",
        "#pragma HLS ARRAY_PARTITION variable=target complete", "#pragma HLS ARRAY_PARTITION variable=y complete",
        *partitions, *("    " + s if not s.startswith("#") else s for s in body), "}", "",
        "#ifndef __SYNTHESIS__", f"void {name}_read_state(long long codes[N_STATE]) {{", "    int k = 0;",
        *read_state, "}", "", f"void {name}_read_lanes(long long states[N_LANES]) {{", "    int k = 0;",
        *read_lanes, "}", "#endif", ""])


def _testbench(name: str) -> str:
    return f"""// C-simulation testbench of {name} (generated by bitforge): streams tb_data/stimulus.bin through the
// learner, writes csim_predictions.bin, csim_state.bin and csim_lanes.bin next to it, and compares them with
// golden_*.bin (bitforge's golden learner) when present: exit status 1 on any difference.
// Usage: {name}_tb [DATA_FOLDER]   (default tb_data)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../firmware/{name}.h"

static bool read_codes(const std::string& path, std::vector<long long>& out) {{
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) return false;
    long long v;
    while (std::fread(&v, sizeof v, 1, f) == 1) out.push_back(v);
    std::fclose(f);
    return true;
}}

static void write_codes(const std::string& path, const long long* v, size_t n) {{
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f || std::fwrite(v, sizeof *v, n, f) != n) {{
        std::fprintf(stderr, "{name}_tb: cannot write %s\\n", path.c_str());
        std::exit(2);
    }}
    std::fclose(f);
}}

// Differences against golden_<what>.bin; -1 when it is absent.
static long long compare(const std::string& dir, const char* what, const long long* got, size_t n) {{
    std::vector<long long> want;
    if (!read_codes(dir + "/golden_" + what + ".bin", want)) return -1;
    if (want.size() != n) {{
        std::fprintf(stderr, "{name}_tb: golden_%s.bin holds %zu codes, expected %zu\\n", what, want.size(), n);
        return (long long)n;
    }}
    long long bad = 0;
    for (size_t k = 0; k < n; k++) bad += want[k] != got[k];
    return bad;
}}

int main(int argc, char** argv) {{
    const std::string dir = argc > 1 ? argv[1] : "tb_data";
    std::vector<long long> s;
    if (!read_codes(dir + "/stimulus.bin", s) || s.size() < 3) {{
        std::fprintf(stderr, "{name}_tb: cannot read %s/stimulus.bin\\n", dir.c_str());
        return 2;
    }}
    const long long n = s[0];
    const size_t row = N_IN + N_OUT + 1;
    if (s[1] != N_IN || s[2] != N_OUT || s.size() != 3 + (size_t)n * row) {{
        std::fprintf(stderr, "{name}_tb: stimulus.bin is not %d inputs + %d targets per sample\\n", N_IN, N_OUT);
        return 2;
    }}
    std::vector<input_t> xs((size_t)n * N_IN);
    std::vector<data_t> ts((size_t)n * N_OUT);
    std::vector<bool> les((size_t)n);
    for (long long k = 0; k < n; k++) {{
        const long long* r = &s[3 + (size_t)k * row];
        for (int i = 0; i < N_IN; i++) xs[k * N_IN + i] = bitforge::from_code<input_t>(ap_int<64>(r[i]));
        for (int o = 0; o < N_OUT; o++) ts[k * N_OUT + o] = bitforge::from_code<data_t>(ap_int<64>(r[N_IN + o]));
        les[k] = r[N_IN + N_OUT] != 0;
    }}
    std::vector<long long> preds((size_t)n * N_OUT);
    data_t y[N_OUT];
    const auto t0 = std::chrono::steady_clock::now();
    for (long long k = 0; k < n; k++) {{
        {name}(&xs[k * N_IN], &ts[k * N_OUT], les[k], y);
        for (int o = 0; o < N_OUT; o++) preds[k * N_OUT + o] = bitforge::code_of(y[o]).to_int64();
    }}
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::vector<long long> state(N_STATE), lanes(N_LANES);
    {name}_read_state(state.data());
    {name}_read_lanes(lanes.data());
    write_codes(dir + "/csim_predictions.bin", preds.data(), preds.size());
    write_codes(dir + "/csim_state.bin", state.data(), state.size());
    write_codes(dir + "/csim_lanes.bin", lanes.data(), lanes.size());
    std::printf("BITFORGE_CSIM samples=%lld seconds=%.9f\\n", n, seconds);
    const long long bp = compare(dir, "predictions", preds.data(), preds.size());
    const long long bs = compare(dir, "state", state.data(), state.size());
    const long long bl = compare(dir, "lanes", lanes.data(), lanes.size());
    if (bp < 0) return 0;
    std::printf("C simulation vs golden learner: %lld of %lld predictions differ, %lld of %d state codes, %lld of "
                "%d lanes\\n", bp, (long long)preds.size(), bs, N_STATE, bl < 0 ? 0 : bl, N_LANES);
    return (bp != 0 || bs > 0 || bl > 0) ? 1 : 0;
}}
"""


def _build_script(name: str) -> str:
    return f"""#!/bin/sh
# Build and run {name}'s C simulation with g++ and the ap_types headers hls4ml ships (no Vitis needed).
# AP_TYPES=/path/to/ap_types says where they are (default: asked from hls4ml with $PYTHON, else python3).
set -e
cd "$(dirname "$0")"
if [ -z "$AP_TYPES" ]; then
    AP_TYPES="$(${{PYTHON:-python3}} -c 'import hls4ml, os; print(os.path.join(os.path.dirname(hls4ml.__file__), \
"templates", "vivado", "ap_types"))')" || {{
        echo "build_csim.sh: hls4ml not found by ${{PYTHON:-python3}}: set PYTHON to a Python that has it" \\
             "(pip install hls4ml), or AP_TYPES to its templates/vivado/ap_types folder" >&2
        exit 2
    }}
fi
mkdir -p build
${{CXX:-g++}} -O2 -std=c++14 -w -Ifirmware -I"$AP_TYPES" firmware/{name}.cpp tb/{name}_tb.cpp -o build/{name}_csim
./build/{name}_csim tb_data
"""


def _vitis_tcl(name: str, part: str, clock_ns: float) -> str:
    return f"""# Vitis HLS: C simulation and synthesis of {name} (written by bitforge, which did not run Vitis).
# Run from any folder: vitis_hls -f build_vitis.tcl
set here [file dirname [file normalize [info script]]]
open_project -reset {name}_prj
set_top {name}
add_files $here/firmware/{name}.cpp -cflags "-std=c++14 -I$here/firmware"
add_files -tb $here/tb/{name}_tb.cpp -cflags "-std=c++14 -I$here/firmware"
open_solution -reset solution1 -flow_target vivado
set_part {{{part}}}
create_clock -period {clock_ns:g} -name default
csim_design -argv "$here/tb_data"
csynth_design
exit
"""


def _readme(learner: Learner, name: str, part: str, clock_ns: float) -> str:
    spec, f = learner.spec, learner.formats
    return f"""# {name}: an online {spec.kind.upper()} learner as HLS C++

Generated by bitforge from the learner {learner.graph.name!r}: {spec.kind.upper()} {list(spec.sizes)}, datapath
`{f.datapath}`, storage `{f.storage}` ({f.guard_bits} guard bits), eta = 2^-{spec.rule.lr_shift}, {spec.rule.rounding}
update rounding. One call of the top function `{name}(x, target, learn_enable, y)` predicts `y` from `x` and then,
when `learn_enable` is set, updates the learned state on the same sample (the golden learner's step, bit for bit).
The state (and the stochastic rounding's LFSR lanes) are arrays at file scope in `firmware/{name}.cpp`,
initialised with the learner's initial state.

| file | what |
|---|---|
| `firmware/{name}.h`, `firmware/{name}.cpp` | types, sizes, per-layer configs, the top function, the initial state |
| `firmware/{TEMPLATES[spec.kind][-1]}` | the learner templates (bitforge's `hls/` package data) |
| `tb/{name}_tb.cpp` | C-simulation testbench: `tb_data/stimulus.bin` in, predictions and final state out |
| `tb_data/` | the stimulus, and the golden learner's predictions, final state and lanes (`golden_*.bin`) |
| `build_csim.sh` | g++ with hls4ml's ap_types headers: builds and runs the C simulation |
| `build_vitis.tcl` | Vitis HLS: `csim_design` then `csynth_design` on `{part}` at {clock_ns:g} ns |

## Run it

```sh
sh build_csim.sh                  # g++: prints the samples/s and the comparison with the golden learner
PYTHON=.venv/bin/python sh build_csim.sh   # when python3 lacks hls4ml (or AP_TYPES=.../ap_types)
vitis_hls -f build_vitis.tcl      # Vitis HLS: C simulation (same testbench and data), then synthesis
```

The testbench exits with status 1 if any prediction, stored coefficient or LFSR lane differs from the golden
learner's (`golden_*.bin`). bitforge built and ran the C simulation with g++; **it did not run Vitis HLS**:
whether synthesis meets II 1 at {clock_ns:g} ns is untested. The pragmas ask for it (`PIPELINE II=1` on the top
function, the coefficient memory partitioned into one bank per active coefficient, the MLP's weights into
registers), but the update closes a loop through the learned state within one sample: a tool that cannot fit
that loop into one clock raises the II or needs a slower clock. The synthesised design has no read-back port;
`{name}_read_state` exists for C simulation only.
"""


def write_hls_learner(learner: Learner, folder: Union[str, Path], name: Optional[str] = None, *,
                      part: str = DEFAULT_PART, clock_ns: float = DEFAULT_CLOCK_NS,
                      x_codes: Optional[np.ndarray] = None, target_codes: Optional[np.ndarray] = None,
                      learn_enable: Optional[np.ndarray] = None, golden: Optional[Trajectory] = None) -> HlsLearner:
    """Write the project into ``folder`` (``manifest.json`` included); with a stream also ``tb_data/stimulus.bin``,
    and with its ``golden`` trajectory the ``golden_*.bin`` the testbench compares with."""
    folder = Path(folder)
    design = generate_hls_learner(learner, name, part=part, clock_ns=clock_ns)
    for rel, text in design.files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    (folder / "build_csim.sh").chmod(0o755)
    (folder / "manifest.json").write_text(json.dumps(design.manifest(), indent=2) + "\n")
    if x_codes is not None:
        _write_stimulus(learner, folder / "tb_data", x_codes, target_codes, learn_enable)
        if golden is not None:
            _write_golden(learner, folder / "tb_data", golden)
    return design


def _stream(learner: Learner, x_codes, target_codes, learn_enable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    spec, f = learner.spec, learner.formats
    x, t = np.asarray(x_codes), np.asarray(target_codes)
    for a, width, typ, what in ((x, spec.sizes[0], f.input, "x_codes"), (t, spec.sizes[-1], f.datapath,
                                                                         "target_codes")):
        if a.dtype.kind not in "iu" or a.ndim != 2 or a.shape[1] != width:
            raise LearnerError(f"{what}: expected integer codes of {typ} of shape (n, {width}), found {a.dtype} "
                               f"{a.shape}")
        if a.size and (a.min() < typ.min_code or a.max() > typ.max_code):
            raise LearnerError(f"{what}: codes in [{a.min()}, {a.max()}] lie outside {typ}")
    if len(x) != len(t):
        raise LearnerError(f"x_codes has {len(x)} samples, target_codes {len(t)}")
    le = np.ones(len(x), dtype=bool) if learn_enable is None else np.asarray(learn_enable, dtype=bool)
    if le.shape != (len(x),):
        raise LearnerError(f"learn_enable: expected shape ({len(x)},), found {le.shape}")
    return x.astype(np.int64), t.astype(np.int64), le


def _write_stimulus(learner: Learner, folder: Path, x_codes, target_codes, learn_enable) -> int:
    x, t, le = _stream(learner, x_codes, target_codes, learn_enable)
    folder.mkdir(parents=True, exist_ok=True)
    rows = np.concatenate([x, t, le[:, None].astype(np.int64)], axis=1)
    head = np.array([len(x), x.shape[1], t.shape[1]], dtype=np.int64)
    (folder / "stimulus.bin").write_bytes(np.concatenate([head, rows.ravel()]).astype("<i8").tobytes())
    for stale in folder.glob("csim_*.bin"):
        stale.unlink()
    return len(x)


def _flat_state(state: State) -> np.ndarray:
    return np.concatenate([np.asarray(v, dtype=np.int64).ravel() for layer in state for v in layer.values()])


def _flat_lanes(learner: Learner, lanes: list) -> np.ndarray:
    if learner.spec.rule.rounding != "stochastic":
        lanes = lane_seeds(learner.spec)  # nearest rounding never steps them
    return np.concatenate([np.asarray(a, dtype=np.int64).ravel() for layer in lanes for a in layer])


def _write_golden(learner: Learner, folder: Path, golden: Trajectory) -> None:
    (folder / "golden_predictions.bin").write_bytes(np.asarray(golden.predictions, dtype="<i8").tobytes())
    (folder / "golden_state.bin").write_bytes(_flat_state(golden.final).astype("<i8").tobytes())
    (folder / "golden_lanes.bin").write_bytes(_flat_lanes(learner, golden.lfsr).astype("<i8").tobytes())


# -- build and run -------------------------------------------------------------------------------------------

def _manifest(folder: Path) -> dict:
    try:
        return json.loads((Path(folder) / "manifest.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise HlsToolError(f"{folder}: not an HLS learner project (manifest.json unreadable: {e}); write one with "
                           "write_hls_learner") from None


def build_csim(folder: Union[str, Path]) -> CompileResult:
    """Compile the project's C simulation (firmware and testbench) with g++ -O2 into ``folder/build/``."""
    folder = Path(folder)
    m = _manifest(folder)
    name = m["name"]
    return compile_cpp([folder / "firmware" / f"{name}.cpp", folder / m["testbench"]],
                       folder / "build" / f"{name}_csim", include_dirs=[folder / "firmware"])


def run_csim(learner: Learner, exe: Union[str, Path], x_codes, target_codes, learn_enable=None, *,
             data: Union[str, Path]) -> CsimRun:
    """Run the built C simulation on a stream (codes, as :func:`bitforge.toolchain.learn.emulate.run` takes
    them) with ``data`` as its tb_data folder; returns what it wrote."""
    from ...processes import end, start, wait

    data = Path(data)
    n = _write_stimulus(learner, data, x_codes, target_codes, learn_enable)
    for stale in data.glob("golden_*.bin"):  # a bare run: no comparison inside the testbench
        stale.unlink()
    t0 = time.perf_counter()
    proc = start([str(Path(exe).resolve()), str(data.resolve())], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                 text=True)
    try:
        log = proc.communicate()[0]
    except BaseException:
        end(proc)
        raise
    wait(proc)
    wall = time.perf_counter() - t0
    m = re.search(r"BITFORGE_CSIM samples=(\d+) seconds=([0-9.eE+-]+)", log)
    if proc.returncode != 0 or m is None:
        raise VerificationFailed(f"the C simulation {exe} failed (exit {proc.returncode}):\n{log[-2000:]}")
    d_out = learner.spec.sizes[-1]
    preds = np.frombuffer((data / "csim_predictions.bin").read_bytes(), dtype="<i8").astype(np.int64)
    flat = np.frombuffer((data / "csim_state.bin").read_bytes(), dtype="<i8").astype(np.int64)
    lanes = np.frombuffer((data / "csim_lanes.bin").read_bytes(), dtype="<i8").astype(np.int64)
    if preds.size != n * d_out or flat.size != learner.n_params:
        raise VerificationFailed(f"the C simulation wrote {preds.size} predictions and {flat.size} state codes; "
                                 f"expected {n * d_out} and {learner.n_params}")
    return CsimRun(preds.reshape(n, d_out), _unflatten_state(learner, flat), _unflatten_lanes(learner, lanes),
                   float(m.group(2)), wall)


def _unflatten_state(learner: Learner, flat: np.ndarray) -> State:
    out, k = [], 0
    for n in learner.layers():
        layer = {}
        for key, a in n.array_fields().items():
            layer[key] = flat[k:k + a.size].reshape(a.shape).copy()
            k += a.size
        out.append(layer)
    return out


def _unflatten_lanes(learner: Learner, flat: np.ndarray) -> list:
    out, k = [], 0
    for shapes in lane_counts(learner.spec):
        arrays = []
        for s in shapes:
            size = int(np.prod(s))
            arrays.append(flat[k:k + size].astype(np.uint64).reshape(s))
            k += size
        out.append(tuple(arrays))
    return out


def compare_trajectory(learner: Learner, golden: Trajectory, csim: CsimRun) -> dict:
    """Counts of differences: samples whose prediction differs, state codes, LFSR lanes; the first difference."""
    bad = np.flatnonzero((np.asarray(golden.predictions) != csim.predictions).any(axis=1))
    want_state, got_state = _flat_state(golden.final), _flat_state(csim.state)
    want_lanes, got_lanes = _flat_lanes(learner, golden.lfsr), _flat_lanes(learner, csim.lanes)
    first = None
    if bad.size:
        s = int(bad[0])
        first = {"sample": s, "golden": golden.predictions[s].tolist(), "csim": csim.predictions[s].tolist()}
    return {"vectors": int(len(csim.predictions)), "mismatches": int(bad.size),
            "state_mismatches": int((want_state != got_state).sum()), "state_codes": int(want_state.size),
            "lane_mismatches": int((want_lanes != got_lanes).sum()) if learner.spec.rule.rounding == "stochastic"
            else 0, "first_mismatch": first}


def csim_vs_golden(learner: Learner, x_codes, target_codes, learn_enable=None, *, work: Union[str, Path],
                   name: Optional[str] = None, golden: Optional[Trajectory] = None,
                   golden_seconds: Optional[float] = None, build: Optional[CompileResult] = None,
                   part: str = DEFAULT_PART,
                   clock_ns: float = DEFAULT_CLOCK_NS) -> dict:
    """Write the project into ``work`` (with the stream and the golden outputs in ``tb_data/``), build it with g++
    (unless ``build`` is the result of an earlier :func:`build_csim` of this same project), run the whole
    trajectory, and compare every prediction, the final state and the LFSR lanes with the golden learner
    (computed and timed here unless ``golden`` is given, with the ``golden_seconds`` it took, if known).

    Returns ``{vectors, mismatches, state_mismatches, state_codes, lane_mismatches, first_mismatch, seconds,
    build_seconds, csim_seconds, csim_samples_per_s, golden_seconds, golden_samples_per_s}``: ``seconds`` is this
    check's wall time (build and run), ``csim_seconds`` the testbench's loop over the samples alone; the golden
    times are None when ``golden`` was given without its time. Differences are counted, not raised: the caller decides
    (``bitforge learn --to hls`` raises :class:`VerificationFailed`)."""
    t_start = time.perf_counter()
    x, t, le = _stream(learner, x_codes, target_codes, learn_enable)
    if golden is None:
        t0 = time.perf_counter()
        golden = golden_run(learner, x, t, le)
        golden_seconds = time.perf_counter() - t0
    work = Path(work)
    write_hls_learner(learner, work, name, part=part, clock_ns=clock_ns, x_codes=x, target_codes=t, learn_enable=le,
                      golden=golden)
    if build is None:
        build = build_csim(work)
    run = run_csim(learner, build.exe, x, t, le, data=work / "tb_data")
    _write_golden(learner, work / "tb_data", golden)  # the folder stays runnable: build_csim.sh compares again
    result = compare_trajectory(learner, golden, run)
    n = result["vectors"]
    result.update(seconds=round(time.perf_counter() - t_start, 3), build_seconds=round(build.seconds, 3),
                  csim_seconds=round(run.seconds, 6),
                  csim_samples_per_s=round(n / run.seconds) if run.seconds else None,
                  golden_seconds=None if golden_seconds is None else round(golden_seconds, 6),
                  golden_samples_per_s=round(n / golden_seconds) if golden_seconds else None)
    return result
