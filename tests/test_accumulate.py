"""hls4ml's accumulation as the IR's rule (docs/ir.md, ``toolchain/accumulate.py``): the golden model against hls4ml's
own ``nnet::dense_latency`` compiled with the ap_fixed headers it ships, ONNX Runtime against the golden model, the
RTL backend's refusal, and the interval analysis of accumulators narrower than their products.

``tests/accumulate_probe.cpp`` holds the configurations (types are template parameters); :data:`CONFIGS` is the
same table in bitforge's types. The probe is compiled once per source/header/compiler hash into a cache under the
temp folder (about 4 s); a missing g++ or hls4ml is a failure, not a skip: hls4ml's code is the reference.
"""
from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from bitforge.toolchain import accumulate, emulate, fixed, ir
from bitforge.toolchain.accumulate import accumulation_plan, dense_accumulator, exact_accumulation
from bitforge.toolchain.backends.onnx_backend import OnnxExportError, run_onnxruntime, to_onnx
from bitforge.toolchain.backends.onnx_int64 import MAX_SEQUENTIAL_INPUTS
from bitforge.toolchain.backends.rtl.generate import RtlError, generate
from bitforge.toolchain.fixed import FixedType, Overflow, parse_type
from bitforge.toolchain.passes.intervals import analyze
from bitforge.toolchain.passes.precision import check_precision, infer_precision

PROBE_SOURCE = Path(__file__).with_name("accumulate_probe.cpp")
CXXFLAGS = ["-O1", "-std=c++14", "-w", "-DNDEBUG"]
#: Weight/bias draws per configuration, and input vectors per draw: 2,400 vectors each.
DRAWS, VECTORS = 4, 600


@dataclasses.dataclass(frozen=True)
class Config:
    """One row of the probe's CONFIGS table: x, weight, bias, accumulator and output types, n_in, n_out."""

    x: FixedType
    w: FixedType
    b: FixedType
    acc: FixedType
    out: FixedType
    n_in: int
    n_out: int


def _config(x, w, b, acc, out, n_in, n_out) -> Config:
    return Config(*(parse_type(t) for t in (x, w, b, acc, out)), n_in, n_out)


CONFIGS = {
    "default_16_6_trn_wrap": _config("ap_fixed<16,6>", "ap_fixed<16,6>", "ap_fixed<16,6>", "ap_fixed<16,6>",
                                     "ap_fixed<16,6>", 16, 8),
    "rnd_sat_mid_sum": _config("ap_fixed<8,3>", "ap_fixed<8,2>", "ap_fixed<8,3>", "ap_fixed<10,4,AP_RND,AP_SAT>",
                               "ap_fixed<8,4,AP_RND_CONV,AP_SAT>", 12, 5),
    "bias_finer": _config("ap_fixed<10,4>", "ap_fixed<6,2>", "ap_fixed<16,2>", "ap_fixed<24,14,AP_RND_INF,AP_WRAP>",
                          "ap_fixed<10,6,AP_RND,AP_SAT>", 9, 6),
    "accum_finer_sat_sym": _config("ap_ufixed<8,4>", "ap_fixed<6,2>", "ap_fixed<8,5>",
                                   "ap_fixed<22,6,AP_TRN,AP_SAT_SYM>", "ap_fixed<12,8,AP_RND_ZERO,AP_SAT>", 10, 4),
    "rnd_min_inf_sat_zero": _config("ap_fixed<12,4>", "ap_fixed<9,1>", "ap_fixed<12,3>",
                                    "ap_fixed<12,5,AP_RND_MIN_INF,AP_SAT_ZERO>", "ap_fixed<8,3,AP_RND_CONV,AP_SAT>",
                                    7, 3),
    "exact_wrap": _config("ap_fixed<8,3>", "ap_fixed<8,2>", "ap_fixed<8,3>", "ap_fixed<24,13>",
                          "ap_fixed<9,4,AP_RND_CONV,AP_SAT>", 20, 7),
}


# -- the probe -------------------------------------------------------------------------------------------------

def _hls4ml_templates() -> Path:
    try:
        import hls4ml
    except ImportError:
        pytest.fail("hls4ml is not installed; its nnet_utils and ap_fixed headers are this test's reference "
                    "(pip install 'bitforge[test]')")
    d = Path(hls4ml.__file__).parent / "templates" / "vivado"
    if not (d / "nnet_utils" / "nnet_dense_latency.h").is_file() or not (d / "ap_types" / "ap_fixed.h").is_file():
        pytest.fail(f"{d}: nnet_utils/nnet_dense_latency.h or ap_types/ap_fixed.h missing from this hls4ml version")
    return d


def _gxx() -> str:
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.fail("g++ not found on PATH: the accumulation reference compiles hls4ml's nnet::dense_latency; "
                    "install g++ (Debian/Ubuntu: apt-get install -y g++)")
    return gxx


def _probe_key(gxx: str, templates: Path) -> str:
    h = hashlib.sha256(PROBE_SOURCE.read_bytes())
    h.update(subprocess.run([gxx, "--version"], capture_output=True, text=True).stdout.encode())
    h.update(" ".join(CXXFLAGS).encode())
    for sub in ("ap_types", "nnet_utils"):
        for f in sorted((templates / sub).rglob("*.h")):
            h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()[:16]


@pytest.fixture(scope="module")
def probe() -> Path:
    gxx, templates = _gxx(), _hls4ml_templates()
    root = Path(tempfile.gettempdir()) / "bitforge-accumulate-probe"
    root.mkdir(parents=True, exist_ok=True)
    exe = root / f"accumulate_probe-{_probe_key(gxx, templates)}"
    with open(root / f"{exe.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel workers wait for one compile instead of repeating it
        if not exe.is_file():
            tmp = root / f"{exe.name}.{os.getpid()}.tmp"
            cmd = [gxx, *CXXFLAGS, f"-I{templates}", f"-I{templates / 'ap_types'}", f"-I{templates / 'nnet_utils'}",
                   str(PROBE_SOURCE), "-o", str(tmp)]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode:
                pytest.fail(f"compiling the accumulation probe failed ({' '.join(cmd)}):\n{r.stderr[-4000:]}")
            os.replace(tmp, exe)  # atomic: a concurrent session sees no binary or the finished one
    listing = subprocess.run([str(exe)], input="L\n", capture_output=True, text=True, timeout=60).stdout.split("\n")
    sizes = [tuple(int(v) for v in line.split()[1:]) for line in listing[:listing.index("END")]]
    assert sizes == [(c.n_in, c.n_out) for c in CONFIGS.values()], "tests/accumulate_probe.cpp and CONFIGS disagree"
    return exe


def _signed(raw: list[int], t: FixedType) -> np.ndarray:
    return np.array([r - (1 << t.width) if t.signed and r >> (t.width - 1) else r for r in raw], dtype=np.int64)


def run_hls4ml(exe: Path, k: int, c: Config, w: np.ndarray, b: np.ndarray, x: np.ndarray):
    """(accumulator codes, output codes) of hls4ml's dense_latency, both ``(N, n_out)``."""
    request = " ".join(map(str, ["C", k, len(x), *w.ravel(), *b.ravel(), *x.ravel()])) + "\n"
    r = subprocess.run([str(exe)], input=request, capture_output=True, text=True, timeout=300)
    if r.returncode:
        pytest.fail(f"{exe} exited with {r.returncode}: {r.stderr[-2000:]}")
    rows = [[int(v) for v in line.split()] for line in r.stdout.splitlines()]
    assert len(rows) == len(x) and all(len(row) == 2 * c.n_out for row in rows)
    acc = np.stack([_signed(row[:c.n_out], c.acc) for row in rows])
    out = np.stack([_signed(row[c.n_out:], c.out) for row in rows])
    return acc, out


def codes(rng: np.random.Generator, t: FixedType, shape) -> np.ndarray:
    return rng.integers(t.min_code, t.max_code + 1, size=shape, dtype=np.int64)


def inputs(rng: np.random.Generator, t: FixedType, n: int, n_in: int) -> np.ndarray:
    """Half over the whole range (sums that overflow a narrow accumulator), half shrunk by up to 16x (sums that
    stay near its range), and the four corner vectors."""
    x = codes(rng, t, (n, n_in))
    x[: n // 2] >>= rng.integers(0, 5, size=(n // 2, 1))
    x[-4:] = [[t.min_code] * n_in, [t.max_code] * n_in, [t.min_code, t.max_code] * (n_in // 2) + [0] * (n_in % 2),
              [0] * n_in]
    return np.clip(x, t.min_code, t.max_code)


def exact_sum_rule(x, c: Config, w, b) -> np.ndarray:
    """The rule before hls4ml's: the exact sum (bias aligned exactly), rounded and overflowed into the
    accumulator once. Where hls4ml's differs from it, the test below can tell the two apart."""
    frac = max(c.x.frac + c.w.frac, c.b.frac)
    total = x.astype(object) @ (w.astype(object).T * (1 << (frac - c.x.frac - c.w.frac))) \
        + b.astype(object) * (1 << (frac - c.b.frac))
    return fixed.requantize(total, FixedType(200, 200 - frac), c.acc)


def rounded_sum_once(x, c: Config, w, b) -> np.ndarray:
    """Every product and the bias rounded to the accumulator's LSB as hls4ml rounds them, summed exactly, and the
    accumulator's overflow applied once: hls4ml's rule without the overflow of each partial sum."""
    wide = FixedType(200, 200 - c.acc.frac, True, c.acc.rounding)
    products = fixed.requantize(x.astype(object)[:, None, :] * w.astype(object)[None], fixed.mul_type(c.x, c.w), wide)
    total = products.sum(axis=2) + fixed.requantize(b.astype(object), c.b, wide)
    return fixed.apply_overflow(total, c.acc)


# -- (a) the golden model against hls4ml's nnet::dense_latency --------------------------------------------------

@pytest.mark.parametrize("name", list(CONFIGS))
def test_golden_model_is_hls4ml_dense_latency_bit_for_bit(probe, name):
    k, c = list(CONFIGS).index(name), CONFIGS[name]
    rng = np.random.default_rng(1900 + k)
    mismatches, differs_from_exact_sum, differs_in_order, vectors = 0, 0, 0, 0
    for _ in range(DRAWS):
        w, b = codes(rng, c.w, (c.n_out, c.n_in)), codes(rng, c.b, c.n_out)
        x = inputs(rng, c.x, VECTORS, c.n_in)
        want_acc, want_out = run_hls4ml(probe, k, c, w, b, x)
        acc = dense_accumulator(x, c.x, w, c.w, b, c.b, c.acc)
        out = emulate.dense_stage(x, c.x, w, c.w, b, c.b, c.acc, c.out)
        mismatches += int((acc != want_acc).any(axis=1).sum() + (out != want_out).any(axis=1).sum())
        differs_from_exact_sum += int((exact_sum_rule(x, c, w, b) != want_acc).any(axis=1).sum())
        vectors += len(x)
        differs_in_order += int((rounded_sum_once(x, c, w, b) != want_acc).any(axis=1).sum())
    assert vectors >= 2000 and mismatches == 0, f"{name}: {mismatches} of {vectors} vectors differ from hls4ml"
    # each configuration exercises what it is named for, on many vectors: rounding makes hls4ml's rule differ from
    # the exact sum, and a saturation that acts mid-sum makes it differ from the rounded products saturated once
    if name == "exact_wrap":
        assert differs_from_exact_sum == 0
    else:
        assert differs_from_exact_sum > vectors // 20, f"{name}: only {differs_from_exact_sum} vectors differ"
    if c.acc.overflow != Overflow.WRAP:
        assert differs_in_order > vectors // 50, f"{name}: saturation acted mid-sum on {differs_in_order} vectors"


def test_each_configuration_is_the_case_it_is_named_for():
    c = CONFIGS
    plans = {name: accumulation_plan(cf.x, codes(np.random.default_rng(0), cf.w, (cf.n_out, cf.n_in)), cf.w,
                                     codes(np.random.default_rng(1), cf.b, cf.n_out), cf.b, cf.acc)
             for name, cf in c.items()}
    flags = {name: (p.rounds_products, p.rounds_bias, p.saturates) for name, p in plans.items()}
    assert flags == {"default_16_6_trn_wrap": (True, False, False), "rnd_sat_mid_sum": (True, False, True),
                     "bias_finer": (False, True, False), "accum_finer_sat_sym": (False, False, True),
                     "rnd_min_inf_sat_zero": (True, True, True), "exact_wrap": (False, False, False)}
    assert plans["exact_wrap"].exact and plans["accum_finer_sat_sym"].shift == -8


def hls4ml_loop(x: np.ndarray, xt: FixedType, w: np.ndarray, wt: FixedType, b, bt, acc: FixedType) -> np.ndarray:
    """nnet::dense_latency written out one scalar at a time with fixed.requantize (checked against ap_fixed)."""
    pt = fixed.mul_type(xt, wt)
    out = np.empty((len(x), len(w)), dtype=object)
    for n in range(len(x)):
        for o in range(len(w)):
            a = int(fixed.requantize(np.array([int(b[o])], dtype=object), bt, acc)[0]) if b is not None else 0
            for i in range(w.shape[1]):
                p = fixed.requantize(np.array([int(x[n, i]) * int(w[o, i])], dtype=object), pt, acc)
                a = int(fixed.apply_overflow(np.array([a + int(p[0])], dtype=object), acc)[0])
            out[n, o] = a
    return out


@pytest.mark.parametrize("xt, wt, bt, acc", [
    ("fixed<40,10>", "fixed<30,5>", "fixed<50,20>", "fixed<45,20,RND_CONV,SAT>"),  # Python ints, saturating
    ("fixed<40,10>", "fixed<30,5>", None, "fixed<70,20,RND,WRAP>"),  # Python ints, rounded, wrapping
    ("fixed<12,4>", "fixed<10,2>", "fixed<12,6>", "fixed<30,14,TRN_ZERO,SAT>"),  # finer bias, a wide SAT
])
def test_wide_types_and_every_path_follow_the_scalar_loop(xt, wt, bt, acc, monkeypatch):
    """Widths past int64 take Python ints; a tiny chunk makes the per-product rounding take many chunks."""
    xt, wt, acc = parse_type(xt), parse_type(wt), parse_type(acc)
    bt = None if bt is None else parse_type(bt)
    rng = np.random.default_rng(7)
    w = codes(rng, wt, (3, 5))
    b = None if bt is None else codes(rng, bt, 3)
    x = inputs(rng, xt, 40, 5)
    monkeypatch.setattr(accumulate, "CHUNK_ELEMENTS", 16)
    got = dense_accumulator(x, xt, w, wt, b, bt, acc)
    assert np.array_equal(got.astype(object), hls4ml_loop(x, xt, w, wt, b, bt, acc))


def test_conv_adds_its_taps_in_channel_then_kernel_order():
    """A saturating Conv accumulator: the order of the taps changes the result, so a reference that walks
    (C_in / groups, kh, kw) in C order with explicit loops pins the order down."""
    xt, wt, bt, acc = (parse_type(t) for t in ("fixed<8,3>", "fixed<8,2>", "fixed<8,3>", "fixed<10,4,RND,SAT>"))
    rng = np.random.default_rng(11)
    conv = ir.Conv("c", ("x",), ("y",), weight=codes(rng, wt, (4, 2, 2, 3)), bias=codes(rng, bt, 4), weight_type=wt,
                   bias_type=bt, accum_type=acc, stride=(1, 2), padding=(1, 0, 0, 1), dilation=(1, 1), groups=2)
    x = inputs(rng, xt, 30, 4 * 4 * 5).reshape(30, 4, 4, 5)
    got = emulate.conv_fixed(conv, x, (4, 4, 2), acc, xt)
    want = np.empty_like(got)
    for co in range(4):
        g = co // 2
        for oh in range(4):
            for ow in range(2):
                taps, ws = [], []
                for ci in range(2):
                    for kh in range(2):
                        for kw in range(3):
                            h, v = oh - 1 + kh, ow * 2 + kw
                            taps.append(x[:, g * 2 + ci, h, v] if 0 <= h < 4 and 0 <= v < 5 else np.zeros(30, int))
                            ws.append(conv.weight[co, ci, kh, kw])
                want[:, co, oh, ow] = hls4ml_loop(np.stack(taps, axis=1), xt, np.array([ws]), wt, conv.bias[co:co + 1],
                                                  bt, acc)[:, 0]
    assert np.array_equal(got, want)
    # the same taps summed exactly and saturated once give other codes: the order is what is being tested
    exact = emulate.conv_fixed(dataclasses.replace(conv, accum_type=FixedType(40, 20)), x, (4, 4, 2),
                               FixedType(40, 20), xt)
    assert (fixed.requantize(exact, FixedType(40, 20), acc) != got).sum() > got.size // 20


# -- (b) ONNX Runtime against the golden model ------------------------------------------------------------------

def _dense_graph(c: Config, rng) -> ir.Graph:
    d = ir.Dense("fc", ("x",), ("y",), weight=codes(rng, c.w, (c.n_out, c.n_in)), bias=codes(rng, c.b, c.n_out),
                 weight_type=c.w, bias_type=c.b, accum_type=c.acc)
    return ir.validate(ir.sequential("dense", ir.TensorSpec("x", (c.n_in,), c.x), [(d, ir.TensorSpec("y", (c.n_out,),
                                                                                                       c.out))]))


def _low_rank_graph(c: Config, rng) -> ir.Graph:
    """V x into the input type (mid), then U h + b: both halves with the configuration's accumulator."""
    lr = ir.LowRankDense("lr", ("x",), ("y",), u=codes(rng, c.w, (c.n_out, 3)), v=codes(rng, c.w, (3, c.n_in)),
                         bias=codes(rng, c.b, c.n_out), u_type=c.w, v_type=c.w, bias_type=c.b, mid_type=c.x,
                         accum_v_type=c.acc, accum_type=c.acc)
    return ir.validate(ir.sequential("lowrank", ir.TensorSpec("x", (c.n_in,), c.x), [(lr, ir.TensorSpec(
        "y", (c.n_out,), c.out))]))


def _conv_graph(c: Config, rng) -> ir.Graph:
    conv = ir.Conv("conv", ("x",), ("y",), weight=codes(rng, c.w, (4, 2, 3, 3)), bias=codes(rng, c.b, 4),
                   weight_type=c.w, bias_type=c.b, accum_type=c.acc, stride=(1, 2), padding=(1, 0, 1, 1),
                   dilation=(1, 1), groups=2)
    return ir.validate(ir.sequential("conv", ir.TensorSpec("x", (4, 5, 6), c.x), [(conv, ir.TensorSpec(
        "y", (4, 5, 3), c.out))]))


@pytest.mark.parametrize("name", [n for n in CONFIGS if n != "exact_wrap"])
@pytest.mark.parametrize("build", [_dense_graph, _low_rank_graph, _conv_graph], ids=["dense", "lowrank", "conv"])
def test_onnxruntime_equals_the_golden_model(name, build):
    c = CONFIGS[name]
    rng = np.random.default_rng(list(CONFIGS).index(name))
    g = build(c, rng)
    shape = g.tensors["x"].shape
    x = inputs(rng, c.x, 2000 if len(shape) == 1 else 300, int(np.prod(shape))).reshape(-1, *shape)
    want = emulate.run(g, x)["y"]
    got = run_onnxruntime(to_onnx(g), x)["y_code"]
    assert np.array_equal(got, want), f"{int((got != want).sum())} codes differ"


def test_onnx_refuses_in_order_saturation_past_its_input_limit():
    c = CONFIGS["rnd_sat_mid_sum"]
    wide = dataclasses.replace(c, n_in=MAX_SEQUENTIAL_INPUTS + 1)
    g = _dense_graph(wide, np.random.default_rng(0))
    with pytest.raises(OnnxExportError, match=rf"Dense 'fc'.*{c.acc}.*may saturate.*{MAX_SEQUENTIAL_INPUTS + 1} "
                                              r"inputs.*WRAP accumulator"):
        to_onnx(g)
    # the same layer with a WRAP accumulator (rounded products, one ReduceSum) exports
    wrap = dataclasses.replace(wide, acc=c.acc.with_(overflow=Overflow.WRAP))
    to_onnx(_dense_graph(wrap, np.random.default_rng(0)))


# -- (c) the RTL backend refuses what it does not build ----------------------------------------------------------

def test_rtl_refuses_an_accumulator_that_rounds_each_product():
    c = CONFIGS["default_16_6_trn_wrap"]
    with pytest.raises(RtlError, match=r"Dense 'fc'.*accumulator fixed<16,6,TRN,WRAP> rounds each product: accum "
                                       r"frac 10 < frac\(x\) \+ frac\(W\) = 20.*give it frac\(x\) \+ frac\(W\) = 20 "
                                       r"fractional bits and WRAP.*--to onnx or --to hls"):
        generate(_dense_graph(c, np.random.default_rng(0)))


def test_rtl_refuses_saturating_partial_sums_and_names_the_low_rank_half():
    c = CONFIGS["accum_finer_sat_sym"]
    exact = dataclasses.replace(c, acc=FixedType(c.acc.width - 8, c.acc.integer, True, "TRN", "SAT_SYM"))
    with pytest.raises(RtlError, match=r"LowRankDense 'lr' \(V\): accumulator fixed<14,6,TRN,SAT_SYM> saturates "
                                       r"partial sums \(SAT_SYM\)"):
        generate(_low_rank_graph(exact, np.random.default_rng(0)))


def test_rtl_refuses_an_exact_accumulator_at_another_frac_and_builds_a_saturating_one_that_cannot_act():
    c = CONFIGS["exact_wrap"]
    finer = dataclasses.replace(c, acc=parse_type("fixed<30,13>"))  # frac 17 > 5 + 6: exact, not built
    with pytest.raises(RtlError, match=r"Conv 'conv' \(window\): accumulator fixed<30,13,TRN,WRAP> has 17 fractional "
                                       r"bits; its sums are exact.*frac\(x\) \+ frac\(W\) = 11.*fixed<24,13,TRN,WRAP>"):
        generate(_conv_graph(finer, np.random.default_rng(0)))
    wide_sat = dataclasses.replace(c, acc=parse_type("fixed<24,13,TRN,SAT>"))  # no partial sum reaches 2**12
    assert exact_accumulation(c.x, codes(np.random.default_rng(0), c.w, (7, 20)), c.w, None, None,
                              wide_sat.acc) is None
    generate(_dense_graph(wide_sat, np.random.default_rng(0)))


# -- (d) interval analysis and check_precision -------------------------------------------------------------------

@pytest.mark.parametrize("name", ["default_16_6_trn_wrap", "rnd_sat_mid_sum", "accum_finer_sat_sym",
                                  "rnd_min_inf_sat_zero", "bias_finer"])
def test_interval_bounds_hold_every_accumulator_the_golden_model_computes(name):
    c = CONFIGS[name]
    rng = np.random.default_rng(5)
    g = _dense_graph(c, rng)
    fc = g.node("fc")
    stage = {s.tensor: s for s in analyze(g).stages}["fc.accum"]
    assert stage.result.frac == c.acc.frac and stage.exact.frac == c.acc.frac
    x = inputs(rng, c.x, 3000, c.n_in)
    acc = dense_accumulator(x, c.x, fc.weight, c.w, fc.bias, c.b, c.acc)
    assert stage.result.contains(acc).all()
    if c.acc.overflow in (Overflow.SAT, Overflow.SAT_SYM):
        # the input at the end each weight favours reaches the bound: the in-order clamp is monotone in every input
        for o in range(c.n_out):
            up = np.where(fc.weight[o] > 0, c.x.max_code, c.x.min_code)[None]
            down = np.where(fc.weight[o] > 0, c.x.min_code, c.x.max_code)[None]
            assert dense_accumulator(up, c.x, fc.weight, c.w, fc.bias, c.b, c.acc)[0, o] == stage.result.hi[o]
            assert dense_accumulator(down, c.x, fc.weight, c.w, fc.bias, c.b, c.acc)[0, o] == stage.result.lo[o]


@pytest.mark.parametrize("name", ["default_16_6_trn_wrap", "rnd_sat_mid_sum", "accum_finer_sat_sym",
                                  "rnd_min_inf_sat_zero"])
def test_conv_interval_bounds_hold_every_accumulator_the_golden_model_computes(name):
    c = CONFIGS[name]
    rng = np.random.default_rng(6)
    g = _conv_graph(c, rng)
    conv = g.node("conv")
    stage = {s.tensor: s for s in analyze(g).stages}["conv.accum"]
    x = inputs(rng, c.x, 400, 4 * 5 * 6).reshape(-1, 4, 5, 6)
    acc = emulate.conv_fixed(conv, x, (4, 5, 3), c.acc, c.x)  # requantized to the accumulator itself: its codes
    assert stage.result.frac == c.acc.frac and stage.result.contains(acc).all()
    if c.acc.overflow != Overflow.WRAP:  # random full-range weights push every saturating one out: reported
        assert stage.overflow


def _swing_graph(acc: str, lo: float = 1.0) -> ir.Graph:
    """Two inputs in [lo, 2] times +3 and -3: the sum stays in [-3, 3], the first partial sum reaches 6."""
    xt, wt = parse_type("fixed<8,4>"), parse_type("fixed<8,4>")
    d = ir.Dense("swing", ("x",), ("y",), weight=np.array([[48, -48]]), weight_type=wt, accum_type=parse_type(acc))
    g = ir.sequential("swing", ir.TensorSpec("x", (2,), xt), [(d, ir.TensorSpec("y", (1,), parse_type(acc)))])
    g.metadata["input_range"] = [lo, 2.0]
    return ir.validate(g)


def test_check_precision_reports_a_partial_sum_that_saturates_though_the_sum_fits():
    g = _swing_graph("fixed<11,3,TRN,SAT>")  # [-4, 4): the final sum fits, the partial sum 6 does not
    warnings = [w for w in check_precision(g) if getattr(w, "where", None) == "accumulator"]
    assert len(warnings) == 1 and warnings[0].tensor == "swing.accum"
    assert "saturate" in warnings[0].message and warnings[0].interval == (-6.0, 6.0)
    x = np.array([[32, 32]])  # 2, 2: each product saturates on its own (6 -> 3.99609375, -6 -> -4), then the sum
    assert emulate.run_values(g, x)["y"][0, 0] == 3.99609375 - 4
    assert {s.tensor: s for s in analyze(g).stages}["swing.accum"].result.contains(emulate.run(g, x)["y"]).all()
    # infer_precision(overwrite=True) gives the exact WRAP accumulator, and nothing is reported
    fixed_g = infer_precision(g, overwrite=True)
    acc = fixed_g.node("swing").accum_type
    assert acc.overflow == Overflow.WRAP and acc.frac == 8
    assert not [w for w in check_precision(fixed_g) if getattr(w, "where", None) == "accumulator"]


def test_a_narrow_wrap_accumulator_that_cannot_overflow_is_not_reported_and_its_bounds_are_the_rounded_sums():
    g = _swing_graph("fixed<8,5,RND,WRAP>", lo=1.0625)  # frac 3 < 8: each product rounded; [-16, 16) holds all
    assert not [w for w in check_precision(g) if getattr(w, "where", None) == "accumulator"]
    stage = {s.tensor: s for s in analyze(g).stages}["swing.accum"]
    assert not stage.overflow and stage.result.frac == 3
    # x in [17, 32] / 16, products x * 3 at LSB 1/8: 25.5 -> 26 and -25.5 -> -25 (RND: ties up), 48 and -48, so the
    # sum lies in [26 - 48, 48 - 25] = [-22, 23], where the exact sum's ends would be -22.5 and 22.5
    assert (int(stage.result.lo[0]), int(stage.result.hi[0])) == (-22, 23)
    x = np.array([[17, 32], [32, 17]])
    assert emulate.run(g, x)["y"][:, 0].tolist() == [-22, 23]
