"""--weights ram: a device built for model A becomes model B's by writing B's words, bit-exact on Icarus and Verilator.

Model B is A with every parameter code drawn anew over its whole type (so accumulators overflow and saturate
as the types allow, not only as A's values did): the architecture (types, shapes, attributes) is A's, the
values are not. Each design streams A's vectors, takes B's words through ``wr_*`` (in chunks written out of
order, as frames with their own start address would), streams B's vectors, then A's words and vectors again.
"""
from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path

import numpy as np
import pytest
from bitforge.toolchain import emulate, fixed, ir
from bitforge.toolchain.backends.rtl import weights_layout as wl
from bitforge.toolchain.backends.rtl.generate import RtlError, RtlOptions, generate, library_source
from bitforge.toolchain.bspline import index_params
from bitforge.toolchain.compiler import CompileError, CompileOptions, load_model, prepare
from bitforge.toolchain.fixed import parse_type
from bitforge.toolchain.identity import arch_id
from bitforge.toolchain.passes.precision import infer_precision
from bitforge.toolchain.verify.simulators import run_cocotb
from bitforge.toolchain.verify.vectors import make_vectors

HERE = Path(__file__).parent
X = parse_type("fixed<10,4,RND_CONV,SAT>")


def _t(name: str, n: int, t=X) -> ir.TensorSpec:
    return ir.TensorSpec(name, (n,), t)


def _codes(rng, t, shape) -> np.ndarray:
    return rng.integers(t.min_code, t.max_code + 1, size=shape, dtype=np.int64)


def dense_chain(seed: int = 0) -> ir.Graph:
    """x(5) -> Dense 7 + bias -> ReLU -> Dense 3 + bias (WRAP accumulators: overflow is part of the model)."""
    rng = np.random.default_rng(seed)
    w, b = parse_type("fixed<6,1>"), parse_type("fixed<8,3>")
    fc1 = ir.Dense("fc1", ("x",), ("h",), weight=_codes(rng, w, (7, 5)), bias=_codes(rng, b, (7,)), weight_type=w,
                   bias_type=b)
    fc2 = ir.Dense("fc2", ("r",), ("y",), weight=_codes(rng, w, (3, 7)), bias=_codes(rng, b, (3,)), weight_type=w,
                   bias_type=b)
    tensors = {"in": ir.TensorSpec("in", (5,), None), "x": _t("x", 5), "h": _t("h", 7), "r": _t("r", 7),
               "y": _t("y", 3, parse_type("fixed<12,6,RND,SAT>"))}
    nodes = [ir.Quantize("q", ("in",), ("x",)), fc1, ir.ReLU("relu", ("h",), ("r",)), fc2]
    return infer_precision(ir.validate(ir.Graph("dense_chain", ["in"], ["y"], tensors, nodes,
                                                {"input_range": [-8.0, 8.0]})))


def low_rank_chain(seed: int = 0) -> ir.Graph:
    """x(6) -> LowRankDense (rank 2) 4 + bias -> ReLU -> Dense 3 (no bias)."""
    rng = np.random.default_rng(seed)
    w, b = parse_type("fixed<6,1>"), parse_type("fixed<8,3>")
    lr = ir.LowRankDense("lr", ("x",), ("h",), u=_codes(rng, w, (4, 2)), v=_codes(rng, w, (2, 6)),
                         bias=_codes(rng, b, (4,)), u_type=w, v_type=w, bias_type=b, mid_type=X)
    fc = ir.Dense("fc", ("r",), ("y",), weight=_codes(rng, w, (3, 4)), weight_type=w)
    tensors = {"in": ir.TensorSpec("in", (6,), None), "x": _t("x", 6), "h": _t("h", 4), "r": _t("r", 4),
               "y": _t("y", 3)}
    nodes = [ir.Quantize("q", ("in",), ("x",)), lr, ir.ReLU("relu", ("h",), ("r",)), fc]
    return infer_precision(ir.validate(ir.Graph("low_rank_chain", ["in"], ["y"], tensors, nodes,
                                                {"input_range": [-8.0, 8.0]})))


def kan_two_layers(seed: int = 0) -> ir.Graph:
    """x(3) -> KAN 4 (G 6, cubic, cells not a power of two of LSBs) -> KAN 2 (G 4, quadratic: 3 banks)."""
    rng = np.random.default_rng(seed)
    c, basis, h = parse_type("fixed<10,3>"), parse_type("ufixed<11,1>"), parse_type("fixed<12,4,RND_CONV,SAT>")

    def layer(name, src, dst, n_in, n_out, grid, size, order, x_t):
        lo, mult, shift, u_bits = index_params(*grid, size, x_t)
        return ir.KANLayer(name, (src,), (dst,), coeffs=_codes(rng, c, (n_out, n_in, size + order)), grid_lo=grid[0],
                           grid_hi=grid[1], grid_size=size, order=order, coeff_type=c, basis_type=basis,
                           u_bits=u_bits, index_lo=lo, index_mult=mult, index_shift=shift, basis_impl="table")

    tensors = {"in": ir.TensorSpec("in", (3,), None), "x": _t("x", 3), "h": _t("h", 4, h),
               "y": _t("y", 2, parse_type("fixed<14,6,RND_CONV,SAT>"))}
    nodes = [ir.Quantize("q", ("in",), ("x",)), layer("k1", "x", "h", 3, 4, (-1.7, 2.3), 6, 3, X),
             layer("k2", "h", "y", 4, 2, (-2.0, 2.0), 4, 2, h)]
    return infer_precision(ir.validate(ir.Graph("kan_two", ["in"], ["y"], tensors, nodes,
                                                {"input_range": [-2.0, 2.5]})))


@functools.lru_cache(maxsize=1)
def _kan_tracker() -> ir.Graph:
    g, _ = prepare(load_model("kan-tracker"), None)
    return g


def kan_tracker() -> ir.Graph:
    return _kan_tracker().copy()


def perturbed(g: ir.Graph, seed: int) -> ir.Graph:
    """``g`` with every parameter code drawn anew over its type: the same architecture, other values."""
    rng = np.random.default_rng(seed)
    b = g.copy()
    for i, n in enumerate(b.nodes):
        new = {}
        for k, a in n.array_fields().items():
            t = getattr(n, wl.TYPE_FIELDS[(n.OP, k)])
            new[k] = _codes(rng, t, a.shape)
        b.nodes[i] = dataclasses.replace(n, **new)
    return b


MODELS = {"dense-r1": (dense_chain, 1), "dense-r4": (dense_chain, 4), "low-rank-r3": (low_rank_chain, 3),
          "kan-tracker": (kan_tracker, 1), "kan-2-layers": (kan_two_layers, 1)}


def build(g: ir.Graph, reuse: int, folder: Path):
    design = generate(g, RtlOptions(reuse=reuse, weights="ram"))
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in design.files.items():
        (folder / name).write_text(text)
    for name in design.library:
        (folder / name).write_text(library_source(name))
    return design, [folder / n for n in sorted(set(design.files) | set(design.library))]


def chunked(words: list[int], size: int = 5) -> list[list[int]]:
    """(address, word) pairs in chunks of ``size`` consecutive addresses, the chunks last to first."""
    chunks = [list(enumerate(words))[i:i + size] for i in range(0, len(words), size)]
    return [pair for chunk in reversed(chunks) for pair in chunk]


def reload_on(simulator: str, model: str, work: Path, vectors: int = 60) -> dict:
    make, reuse = MODELS[model]
    a = make()
    b = perturbed(a, seed=7)
    assert arch_id(a) == arch_id(b)
    design, sources = build(a, reuse, work / "rtl")
    layout = wl.Layout.from_json(json.loads(json.dumps(design.weights)))
    words_a, words_b = wl.pack_weight_words(a, layout), wl.pack_weight_words(b, layout)
    xin = make_vectors(a, vectors, seed=3)
    env_a, env_b = emulate.run(a, xin, keep=True), emulate.run(b, xin, keep=True)
    xs = np.asarray(env_a[design.input_tensor], dtype=np.int64)
    ya = np.asarray(env_a[design.output_tensor], dtype=np.int64)
    yb = np.asarray(env_b[design.output_tensor], dtype=np.int64)
    assert not np.array_equal(ya, yb), "model B must compute something else, or the test proves nothing"
    np.savez(work / "vectors.npz", xs=xs, ya=ya, yb=yb)
    out_t = a.tensors[design.output_tensor].dtype
    cfg = {"vectors": str(work / "vectors.npz"), "result": str(work / "result.json"), "seed": 5,
           "in_width": a.tensors[design.input_tensor].dtype.width, "out_width": out_t.width,
           "out_count": int(ya.shape[1]), "out_signed": out_t.signed, "ii": design.ii,
           "phases": [{"name": "A", "inputs": "xs", "expected": "ya"},
                      {"name": "B after writing B", "words": chunked(words_b), "inputs": "xs", "expected": "yb"},
                      {"name": "A after writing A", "words": chunked(words_a), "inputs": "xs", "expected": "ya"}]}
    (work / "bench.json").write_text(json.dumps(cfg))
    outcome = run_cocotb(simulator, sources, design.top, "cocotb_weights", HERE, work / "build",
                         extra_env={"BITFORGE_WEIGHTS_BENCH": str(work / "bench.json")})
    result = json.loads((work / "result.json").read_text()) if (work / "result.json").is_file() else {}
    assert outcome.passed == 1 and not outcome.failed, (outcome.failures, result)
    return result


@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
@pytest.mark.parametrize("model", list(MODELS))
def test_writing_model_b_words_turns_the_device_into_model_b(simulator, model, tmp_path):
    result = reload_on(simulator, model, tmp_path)
    assert [p["mismatches"] for p in result["phases"]] == [0, 0, 0]
    assert result["tlast_ok"]


# -- the layout and the packer -----------------------------------------------------------------------------

@pytest.mark.parametrize("model", list(MODELS))
def test_every_parameter_has_exactly_one_word(model):
    make, reuse = MODELS[model]
    g = make()
    layout = wl.weight_layout(g, reuse)
    spans = sorted((e.offset, e.offset + e.count) for e in layout.entries)
    assert spans[0][0] == 0 and spans[-1][1] == layout.words
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])), "regions must tile the address space"
    for e in layout.entries:
        index = e.index_map()
        used = index[index >= 0]
        assert sorted(used.tolist()) == list(range(int(np.prod(e.shape)))), f"{e.node}.{e.array}"


def test_packed_words_are_the_codes_sign_extended_to_the_word():
    g = dense_chain()
    layout = wl.weight_layout(g, 1)
    words = wl.pack_weight_words(g, layout)
    fc1 = g.node("fc1")
    weight = next(e for e in layout.entries if e.array == "weight" and e.node == "fc1")
    assert weight.order["scheme"] == "folded_lanes" and weight.order["rows"] == 1  # reuse 1: row-major registers
    w = words[weight.offset:weight.offset + weight.count]
    assert [v - (1 << layout.word_bits) if v >> (layout.word_bits - 1) else v for v in w] == \
        fc1.weight.ravel().tolist()
    assert layout.word_bits == 8 and all(0 <= v < 256 for v in words)


def test_layout_round_trips_through_the_manifest():
    g = kan_two_layers()
    layout = wl.weight_layout(g, 1)
    doc = json.loads(json.dumps(layout.to_json()))
    assert doc["mode"] == "ram" and doc["arch_id"] == arch_id(g)
    assert set(doc["layout"][0]) == {"node", "array", "offset", "count", "shape", "type", "order"}
    assert wl.Layout.from_json(doc) == layout


def test_a_model_of_another_architecture_is_refused_naming_the_node():
    g = dense_chain()
    layout = wl.weight_layout(g, 4)
    wider = dense_chain()
    fc2 = wider.node("fc2")
    wider.nodes[-1] = dataclasses.replace(fc2, weight_type=parse_type("fixed<7,1>"))
    with pytest.raises(wl.WeightsError, match=r"Dense 'fc2': weight has type fixed<7,1.*device's has fixed<6,1"):
        wl.pack_weight_words(wider, layout)
    other_out = dense_chain()
    other_out.tensors["y"] = _t("y", 3, parse_type("fixed<12,5,RND,SAT>"))
    with pytest.raises(wl.WeightsError, match=r"Dense 'fc2': its attributes, tensor types or wiring differ"):
        wl.pack_weight_words(other_out, layout)
    with pytest.raises(wl.WeightsError, match=r"has no node 'fc1'"):
        wl.pack_weight_words(low_rank_chain(), layout)
    kan = kan_two_layers()
    other_grid = kan_two_layers()
    other_grid.nodes[1] = dataclasses.replace(other_grid.nodes[1], grid_lo=-1.5)
    with pytest.raises(wl.WeightsError, match=r"KANLayer 'k1': its attributes"):
        wl.pack_weight_words(other_grid, wl.weight_layout(kan, 1))


def test_codes_outside_their_type_are_refused():
    g = dense_chain()
    layout = wl.weight_layout(g, 1)
    bad = g.copy()
    bad.nodes[1].bias[0] = 1000
    with pytest.raises(wl.WeightsError, match=r"Dense 'fc1': bias codes span .*outside fixed<8,3"):
        wl.pack_weight_words(bad, layout)


def test_a_rom_design_has_no_layout_to_load():
    g = kan_tracker()
    design = generate(g, RtlOptions())
    assert design.manifest()["weights"] == {"mode": "rom", "arch_id": arch_id(g)}
    with pytest.raises(wl.WeightsError, match="constants of its bitstream"):
        wl.Layout.from_json(design.weights)


def test_ram_ports_appear_on_the_core_and_the_board_top_only_with_ram():
    g = dense_chain()
    ram = generate(g, RtlOptions(reuse=4, weights="ram"))
    rom = generate(g, RtlOptions(reuse=4))
    layout = wl.Layout.from_json(ram.weights)
    for text in (ram.files[f"{ram.name}.v"], ram.files[f"{ram.board_top}.v"]):
        assert f"input  wire [{layout.addr_bits - 1}:0] wr_addr" in text
        assert f"input  wire [{layout.word_bits - 1}:0] wr_data" in text
    assert all("wr_en" not in text for text in rom.files.values())
    assert "bf_dense_folded_ram.v" in ram.library and "bf_dense_folded.v" not in ram.library
    assert [x.latency for x in ram.layers] == [x.latency for x in rom.layers]  # same schedule


def test_compile_options_refuse_ram_without_rtl_and_unknown_modes():
    with pytest.raises(CompileError, match="--weights only applies to the RTL backend"):
        CompileOptions(to=("onnx",), weights="ram")
    with pytest.raises(CompileError, match="--weights must be rom or ram"):
        CompileOptions(to=("rtl",), weights="flash")
    with pytest.raises(RtlError, match="--weights must be one of rom, ram"):
        RtlOptions(weights="eeprom")


def test_ram_designs_are_deterministic():
    g = kan_two_layers()
    one, two = (generate(g, RtlOptions(weights="ram")) for _ in range(2))
    assert one.files == two.files and one.manifest() == two.manifest()


def test_manifest_weights_word_layout_matches_the_hardware_widths():
    g = kan_tracker()
    design = generate(g, RtlOptions(weights="ram"))
    layout = wl.Layout.from_json(design.weights)
    node = g.node(layout.entries[0].node)
    assert layout.word_bits == node.coeff_type.width
    assert layout.words == int(np.prod(node.coeffs.shape))  # G + k = 8 coefficients, 4 banks of 2 rows: no padding
    assert fixed.clog2(layout.words) == layout.addr_bits
