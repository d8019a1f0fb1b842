"""sweep.spec: a spec file (YAML or JSON) into a checked SweepSpec. Every refusal names the file and the key path
and says what was expected; defaults (error always, the earliest stage, the Pareto pairs) follow the metrics; the
digest follows input files' content, not their place or the spec's formatting. No tool runs."""
from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import shutil
from pathlib import Path

import pytest

from bitforge.toolchain.sweep.model import METRICS, SweepError
from bitforge.toolchain.sweep.sampling import sample
from bitforge.toolchain.sweep.spec import AXES, FILE_KEYS, RUNNER_SET, base_keys, load_spec, parse_spec

KAN = {
    "kind": "learn",
    "base": {"task": "t1", "samples": 4000},
    "axes": {"datapath": ["fixed<16,6>", "fixed<12,4>", "fixed<10,3>"], "grid_size": {"range": [4, 10, 2]},
             "target": ["ice40-up5k", "ecp5-25f"]},
    "metrics": ["error", "lut", "ff", "dsp", "fmax_mhz", "latency_ns"],
    "pareto": [["lut", "error"], ["latency_ns", "error"], ["lut", "fmax_mhz"]],
    "best": [{"label": "fits ice40-up5k, lowest error", "best": "error", "where": {"fits": "ice40-up5k"}},
             {"label": "latency under 200 ns, fewest LUT", "best": "lut", "where": {"latency_ns": "< 200"}}],
}

KAN_YAML = """\
# the issue's KAN-learner sweep
name: kan
kind: learn
base:
  task: t1
  samples: 4000
axes:
  datapath: ["fixed<16,6>", "fixed<12,4>", "fixed<10,3>"]
  grid_size: {range: [4, 10, 2]}
  target: [ice40-up5k, ecp5-25f]
metrics: [error, lut, ff, dsp, fmax_mhz, latency_ns]
pareto: [[lut, error], [latency_ns, error], [lut, fmax_mhz]]
best:
  - {label: "fits ice40-up5k, lowest error", best: error, where: {fits: ice40-up5k}}
  - label: latency under 200 ns, fewest LUT
    best: lut
    where: {latency_ns: "< 200"}
"""


def write(folder: Path, data, name: str = "sweep.json") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(data if isinstance(data, str) else json.dumps(data, indent=2))
    return path


def compile_spec(**changes) -> dict:
    spec = {"kind": "compile", "base": {"model": "model.onnx"}, "axes": {"precision": ["w8a16", "w6a12"],
                                                                         "reuse": [1, 2, 4]}}
    spec.update(changes)
    return spec


def with_model(folder: Path, content: bytes = b"not really onnx") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.onnx").write_bytes(content)
    return folder


# -- a valid spec and its defaults ---------------------------------------------------------------------------------

def test_the_issue_kan_sweep_parses(tmp_path):
    spec = load_spec(write(tmp_path, KAN))
    assert spec.kind == "learn" and spec.name == "sweep" and spec.source == str(tmp_path / "sweep.json")
    assert [(a.name, a.values) for a in spec.axes] == [
        ("datapath", ("fixed<16,6>", "fixed<12,4>", "fixed<10,3>")), ("grid_size", (4, 6, 8, 10)),
        ("target", ("ice40-up5k", "ecp5-25f"))]
    assert spec.base == {"task": "t1", "samples": 4000}
    assert spec.metrics == ("error", "lut", "ff", "dsp", "fmax_mhz", "latency_ns")
    assert spec.stage == "pnr"  # fmax_mhz and latency_ns come from place and route
    assert spec.pareto == (("lut", "error"), ("latency_ns", "error"), ("lut", "fmax_mhz"))
    assert [(c.label, c.best, c.where) for c in spec.constraints] == [
        ("fits ice40-up5k, lowest error", "error", (("fits", "==", "ice40-up5k"),)),
        ("latency under 200 ns, fewest LUT", "lut", (("latency_ns", "<", 200),))]
    assert spec.sampling.method == "grid" and len(sample(spec)) == 24
    assert len(spec.digest) == 64


def test_yaml_and_json_give_the_same_spec(tmp_path):
    from_yaml = load_spec(write(tmp_path / "y", KAN_YAML, "kan.yml"))
    from_json = load_spec(write(tmp_path / "j", {"name": "kan", **KAN}, "kan.json"))
    assert dataclasses.replace(from_yaml, source="") == dataclasses.replace(from_json, source="")
    assert from_yaml.digest == from_json.digest


def test_yaml_suffix_yaml_is_read_too(tmp_path):
    assert load_spec(write(tmp_path, KAN_YAML, "kan.yaml")).name == "kan"


@pytest.mark.parametrize("metrics,stage", [(["error"], "golden"), (["mse", "params"], "golden"),
                                           (["ii"], "sim"), (["error", "lut"], "synth"),
                                           (["lut", "latency_ns"], "pnr")])
def test_stage_defaults_to_the_earliest_that_gives_every_metric(tmp_path, metrics, stage):
    spec = load_spec(write(tmp_path, {**KAN, "metrics": metrics, "pareto": None, "best": []}))
    assert spec.stage == stage == max((METRICS[m].stage for m in spec.metrics), key=["golden", "sim", "synth",
                                                                                     "pnr"].index)
    assert spec.metrics[0] == "error" and set(metrics) <= set(spec.metrics)


def test_pareto_defaults_to_each_hardware_metric_against_error(tmp_path):
    data = {**KAN, "metrics": ["lut", "sim_mismatches", "fmax_mhz", "mse"], "best": []}
    del data["pareto"]
    spec = load_spec(write(tmp_path, data))
    assert spec.metrics == ("error", "lut", "sim_mismatches", "fmax_mhz", "mse")
    assert spec.pareto == (("lut", "error"), ("fmax_mhz", "error"))
    data["metrics"] = ["mse"]
    assert load_spec(write(tmp_path, data)).pareto == ()


def test_best_bounds_and_default_labels(tmp_path):
    data = {**KAN, "metrics": ["lut", "latency_ns", "fmax_mhz"], "pareto": None,
            "best": [{"best": "lut", "where": {"latency_ns": 200}},
                     {"best": "fmax_mhz", "where": {"fits": "ecp5-25f", "lut": ">= 1.5e3", "error": "<0.25"}}]}
    c1, c2 = load_spec(write(tmp_path, data)).constraints
    assert (c1.label, c1.best, c1.where) == ("latency_ns <= 200, lowest lut", "lut", (("latency_ns", "<=", 200),))
    assert c2.where == (("fits", "==", "ecp5-25f"), ("lut", ">=", 1500.0), ("error", "<", 0.25))
    assert c2.label == "fits ecp5-25f, lut >= 1500.0, error < 0.25, highest fmax_mhz"


def test_ranges_of_whole_numbers_and_of_floats(tmp_path):
    def grid(rng):
        return load_spec(write(tmp_path, {**KAN, "axes": {"grid_size": {"range": rng}}, "metrics": ["error"],
                                          "pareto": None, "best": []})).axis("grid_size").values
    assert grid([4, 10, 2]) == (4, 6, 8, 10)
    assert grid([4, 9, 2]) == (4, 6, 8)  # hi only when the steps land on it
    assert grid([5, 5, 3]) == (5,)
    assert grid([4.0, 8.0, 2.0]) == (4, 6, 8)  # integral floats are whole numbers for a whole-number axis


def test_float_ranges_are_rounded_to_12_significant_digits(tmp_path):
    data = {"kind": "llm", "axes": {"budget_bpw": {"range": [0.1, 0.7, 0.1]}}}
    values = load_spec(write(tmp_path, data)).axis("budget_bpw").values
    assert values == (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7)  # 0.1 + 2 * 0.1 is 0.30000000000000004 unrounded
    data["axes"]["budget_bpw"] = {"range": [3, 4, 0.25]}
    assert load_spec(write(tmp_path, data)).axis("budget_bpw").values == (3.0, 3.25, 3.5, 3.75, 4.0)


def test_nullable_axes_and_normalised_values(tmp_path):
    data = {**KAN, "axes": {"mlp_lanes": [None, 4], "layers": ["1,4,1", [1, 8, 1]], "model": ["mlp"],
                            "order": [None, 2]}, "metrics": ["error"], "pareto": None, "best": []}
    spec = load_spec(write(tmp_path, data))
    assert spec.axis("mlp_lanes").values == (None, 4)
    assert spec.axis("layers").values == ([1, 4, 1], [1, 8, 1])
    assert spec.axis("order").values == (None, 2)


def test_relative_inputs_resolve_against_the_spec_folder(tmp_path):
    folder = with_model(tmp_path / "specs")
    (folder / "x.npy").write_bytes(b"x")
    (folder / "y.npy").write_bytes(b"y")
    spec = load_spec(write(folder, compile_spec()))
    assert spec.base["model"] == str((folder / "model.onnx").resolve())
    learn = load_spec(write(folder, {"kind": "learn", "base": {"data": "x.npy, y.npy"},
                                     "axes": {"grid_size": [4, 5]}}, "stream.json"))
    assert learn.base == {"data": f"{(folder / 'x.npy').resolve()},{(folder / 'y.npy').resolve()}", "task": None}


def test_a_recipe_name_is_a_model(tmp_path):
    spec = load_spec(write(tmp_path, compile_spec(base={"model": "jet-mlp"})))
    assert spec.base["model"] == "jet-mlp"


# -- digest ----------------------------------------------------------------------------------------------------

def test_digest_follows_the_model_file_content_not_its_place_or_the_spec_formatting(tmp_path):
    a = with_model(tmp_path / "a")
    first = load_spec(write(a, compile_spec())).digest
    reformatted = ("# same sweep, other layout\naxes:\n  reuse: [1, 2, 4]\n  precision:\n    - w8a16\n    - w6a12\n"
                   "base: {model: ./model.onnx}\nkind: compile\n")
    assert load_spec(write(a, reformatted, "sweep.yml")).digest == first
    b = tmp_path / "elsewhere" / "b"
    shutil.copytree(a, b)
    assert load_spec(b / "sweep.json").digest == first
    (b / "model.onnx").write_bytes(b"not really onnx, edited")
    assert load_spec(b / "sweep.json").digest != first


def test_digest_follows_the_base_options_not_the_axes(tmp_path):
    a = with_model(tmp_path)
    first = load_spec(write(a, compile_spec())).digest
    assert load_spec(write(a, compile_spec(axes={"reuse": [1, 8]}))).digest == first
    assert load_spec(write(a, compile_spec(base={"model": "model.onnx", "vectors": 500}))).digest != first


def test_digest_hashes_a_model_folder_by_its_files(tmp_path):
    model = tmp_path / "compiled"
    model.mkdir()
    (model / "graph.json").write_text("{}")
    (model / "weights.npz").write_bytes(b"w1")
    first = load_spec(write(tmp_path, compile_spec(base={"model": "compiled"}))).digest
    (model / "weights.npz").write_bytes(b"w2")
    assert load_spec(tmp_path / "sweep.json").digest != first


# -- the AXES table --------------------------------------------------------------------------------------------

def test_every_axis_sets_an_option_that_exists():
    from bitforge.toolchain.compiler import CompileOptions
    from bitforge.toolchain.learn.commands import LearnOptions, run_learn_flow

    owners = {"CompileOptions": {f.name for f in dataclasses.fields(CompileOptions)},
              "LearnOptions": {f.name for f in dataclasses.fields(LearnOptions)},
              "run_learn_flow": set(inspect.signature(run_learn_flow).parameters)}
    for kind in ("compile", "learn"):
        for name, info in AXES[kind].items():
            assert info.option in owners[info.sets], (kind, name)
            assert name in base_keys(kind) and info.description
    assert set(AXES) == {"compile", "learn", "llm"}


def test_base_keys_leave_out_what_the_runner_sets():
    for kind in ("compile", "learn"):
        assert not set(RUNNER_SET[kind]) & set(base_keys(kind))
        assert set(FILE_KEYS[kind]) <= set(base_keys(kind))


# -- refusals: each names the file and the key path ---------------------------------------------------------

def mutated(change) -> dict:
    data = copy.deepcopy(KAN)
    change(data)
    return data


def refused(tmp_path, data, name: str = "sweep.json") -> str:
    path = write(tmp_path, data, name)
    with pytest.raises(SweepError) as e:
        load_spec(path)
    return str(e.value).replace(str(path), "FILE")


def setitem(path: str, value):
    """A change that sets data[a][b]... = value (path "a.b"), creating mappings on the way."""
    def change(d):
        *head, last = path.split(".")
        for k in head:
            d = d.setdefault(k, {})
        d[last] = value
    return change


def delitem(path: str):
    def change(d):
        *head, last = path.split(".")
        for k in head:
            d = d[k]
        del d[last]
    return change


LEARN_REFUSALS = [
    # what is wrong, the change, the message's start after "FILE: ", words it must contain
    ("unknown kind", setitem("kind", "fit"), "kind: unknown kind 'fit'", "compile, learn, llm"),
    ("no kind", delitem("kind"), "kind: missing", "compile, learn, llm"),
    ("unknown top key", setitem("axis", {}), "axis: unknown key", "axes"),
    ("unknown axis", setitem("axes.grid", [4]), "axes.grid: unknown axis 'grid' for kind learn; known:", "grid_size"),
    ("scalar axis", setitem("axes.grid_size", 4), "axes.grid_size: expected a list of values", "belongs in base"),
    ("empty list", setitem("axes.grid_size", []), "axes.grid_size: the list is empty", "at least one value"),
    ("bad value", setitem("axes.grid_size", [4, 0]), "axes.grid_size[1]: expected a whole number >= 1", "got 0"),
    ("repeated value", setitem("axes.grid_size", [4, 6, 4]), "axes.grid_size[2]: 4 repeats axes.grid_size[0]",
     "once"),
    ("null value", setitem("axes.datapath", [None]), "axes.datapath[0]: null is not a value", "datapath"),
    ("split type", setitem("axes.datapath", ["fixed<16", "6>"]), "axes.datapath[0]: cannot parse fixed-point type",
     "quote"),
    ("wrapping type", setitem("axes.datapath", ["fixed<16,6,TRN,WRAP>"]), "axes.datapath[0]: learner format",
     "SAT"),
    ("unsigned input", setitem("axes.input_type", ["ufixed<8,2>"]), "axes.input_type[0]: learner format",
     "signed"),
    ("order too high", setitem("axes.order", [3, 9]), "axes.order[1]: spline order k=9", "1..5"),
    ("bad layers", setitem("axes.layers", ["4"]), "axes.layers[0]: expected at least two layer widths", "D_IN"),
    ("unknown target", setitem("axes.target", ["ice40-up5k", "nope"]), "axes.target[1]: unknown target 'nope'",
     "ecp5-25f"),
    ("bad choice", setitem("axes.rounding", ["nearest", "up"]), "axes.rounding[1]: expected one of nearest, "
     "stochastic", "'up'"),
    ("range not a dict", setitem("axes.grid_size", {"from": 4}), "axes.grid_size: expected a list of values or "
     "{range: [lo, hi, step]}", "from"),
    ("range shape", setitem("axes.grid_size", {"range": [4, 10]}), "axes.grid_size.range: expected [lo, hi, step]",
     "[4, 10]"),
    ("range step 0", setitem("axes.grid_size", {"range": [4, 10, 0]}), "axes.grid_size.range: step must be > 0",
     "low to high"),
    ("negative step", setitem("axes.grid_size", {"range": [10, 4, -2]}), "axes.grid_size.range: step must be > 0",
     "low to high"),
    ("empty range", setitem("axes.grid_size", {"range": [10, 4, 2]}), "axes.grid_size.range: empty range",
     "lo <= hi"),
    ("range value refused", setitem("axes.grid_size", {"range": [0, 4, 2]}),
     "axes.grid_size.range (value 0): expected a whole number >= 1", "got 0"),
    ("range not numbers", setitem("axes.grid_size", {"range": [4, "ten", 2]}),
     "axes.grid_size.range[1]: expected a finite number", "'ten'"),
    ("huge range", setitem("axes.grid_size", {"range": [1, 10**6, 1]}), "axes.grid_size.range: 1,000,000 values",
     "step"),
    ("unknown metric", setitem("metrics", ["error", "luts"]), "metrics[1]: unknown metric 'luts'; kind learn has:",
     "lut"),
    ("metric of another kind", setitem("metrics", ["accuracy"]), "metrics[0]: accuracy is not available for kind "
     "learn", "compile"),
    ("metric twice", setitem("metrics", ["lut", "lut"]), "metrics[1]: lut is listed twice", "lut"),
    ("unknown stage", setitem("stage", "route"), "stage: unknown stage 'route'", "golden, sim, synth, pnr"),
    ("stage too early", setitem("stage", "synth"), "stage: metric fmax_mhz needs stage pnr", "drop fmax_mhz"),
    ("pareto not in metrics", setitem("pareto", [["bram", "error"]]), "pareto[0][0]: 'bram' is not among the "
     "sweep's metrics", "add it to metrics"),
    ("pareto unknown", setitem("pareto", [["lut", "errors"]]), "pareto[0][1]: 'errors' is not among", "expected one"),
    ("pareto same", setitem("pareto", [["lut", "lut"]]), "pareto[0]: a front needs two different metrics", "lut"),
    ("pareto not a pair", setitem("pareto", [["lut"]]), "pareto[0]: expected a pair [X, Y]", "lut"),
    ("best metric not asked", setitem("best", [{"best": "bram"}]), "best[0].best: 'bram' is not among", "add it"),
    ("best without metric", setitem("best", [{"label": "x"}]), "best[0].best: missing", "best: error"),
    ("best unknown key", setitem("best", [{"best": "lut", "lbl": "x"}]), "best[0].lbl: unknown key", "label"),
    ("bad bound", setitem("best", [{"best": "lut", "where": {"latency_ns": "about 200"}}]),
     "best[0].where.latency_ns: expected a bound such as '< 200'", "about 200"),
    ("bound on a metric not asked", setitem("best", [{"best": "lut", "where": {"bram": 3}}]),
     "best[0].where.bram: 'bram' is not among", "add it"),
    ("fits unknown target", setitem("best", [{"best": "lut", "where": {"fits": "up5k"}}]),
     "best[0].where.fits: unknown target 'up5k'", "ice40-up5k"),
    ("fits a target not swept", setitem("best", [{"best": "lut", "where": {"fits": "ecp5-85f"}}]),
     "best[0].where.fits: no point of this sweep is built for ecp5-85f", "ice40-up5k, ecp5-25f"),
    ("sampling method", setitem("sampling", {"method": "sobol"}), "sampling.method: unknown sampling method 'sobol'",
     "grid, random, lhs"),
    ("sampling key", setitem("sampling", {"method": "lhs", "size": 4}), "sampling.size: unknown key", "n"),
    ("sampling n missing", setitem("sampling", {"method": "random"}), "sampling.n: missing", "24"),
    ("sampling n zero", setitem("sampling", {"method": "lhs", "n": 0}), "sampling.n: expected a whole number >= 1",
     "0"),
    ("random above grid", setitem("sampling", {"method": "random", "n": 25}), "sampling.n: random draws 25 distinct "
     "points but the grid has only 24", "method grid"),
    ("seed", setitem("sampling", {"method": "lhs", "n": 3, "seed": -1}), "sampling.seed: expected a whole number "
     "from 0 to 4294967295", "-1"),
    ("unknown base key", setitem("base.grid", 4), "base.grid: unknown option 'grid' for kind learn; known:",
     "grid_size"),
    ("runner's key", setitem("base.rtl", True), "base.rtl: rtl is set by the sweep from the stage", "drop it"),
    ("base and axis", setitem("base.datapath", "fixed<16,6>"), "base.datapath: datapath is also an axis",
     "axes only"),
    ("bad base value", setitem("base.samples", 0), "base.samples: expected a whole number >= 1", "0"),
    ("bad base axis value", setitem("base.order", 7), "base.order: spline order k=7", "1..5"),
    ("bad task", setitem("base.task", "t9"), "base.task: expected a task (t1, t2, t4)", "base.data"),
    ("neither task nor data", delitem("base.task"), "base: a learn sweep needs base.task", "neither"),
    ("task and data", setitem("base.data", "sweep.json"), "base: a learn sweep needs base.task", "both"),
    ("missing data", setitem("base", {"data": "x.npy,y.npy"}), "base.data: x.npy: no such file", "spec's folder"),
    ("lr and lr_shift", setitem("base", {"task": "t1", "lr": 0.1, "lr_shift": 3}), "base.lr: give lr or lr_shift",
     "not both"),
    ("no target for pnr", delitem("axes.target"), "metrics: stage pnr (asked by the metrics) needs a target",
     "base.target"),
    ("name", setitem("name", ""), "name: expected a non-empty string", "''"),
    ("kind not a name", lambda d: d.update({"kind": ["learn"]}), "kind: unknown kind ['learn']",
     "learn"),
]


@pytest.mark.parametrize("what,change,start,words", LEARN_REFUSALS, ids=[r[0] for r in LEARN_REFUSALS])
def test_refusals_name_the_file_and_the_key_path(tmp_path, what, change, start, words):
    message = refused(tmp_path, mutated(change))
    assert message.startswith(f"FILE: {start}"), message
    assert words in message, message


def test_an_explicit_hardware_stage_without_target_names_the_stage(tmp_path):
    data = {"kind": "learn", "base": {"task": "t1"}, "axes": {"grid_size": [4, 5]}, "stage": "synth"}
    message = refused(tmp_path, data)
    assert message.startswith("FILE: stage: stage synth needs a target: add an axis"), message


def test_fits_needs_synthesis(tmp_path):
    data = {**KAN, "metrics": ["error"], "stage": "sim", "pareto": None,
            "best": [{"best": "error", "where": {"fits": "ice40-up5k"}}]}
    assert refused(tmp_path, data).startswith("FILE: best[0].where.fits: fits needs stage synth or pnr")


COMPILE_REFUSALS = [
    ("no model", setitem("base", {}), "base.model: missing", "recipe name"),
    ("missing model file", setitem("base.model", "nets/other.onnx"), "base.model: nets/other.onnx: no such file",
     "spec's folder"),
    ("bad precision", setitem("axes.precision", ["w8a16", "bogus"]), "axes.precision[1]: bad precision spec",
     "--help"),
    ("bad reuse", setitem("axes.reuse", [1, 0]), "axes.reuse[1]: expected a reuse factor", "auto"),
    ("reuse auto without target", setitem("axes.reuse", [1, "auto"]), "axes.reuse[1]: reuse auto chooses",
     "target"),
    ("base reuse auto without target", lambda d: (d["axes"].pop("reuse"), d["base"].update(reuse="auto")),
     "base.reuse: reuse auto chooses", "target"),
    ("unknown base target", setitem("base.target", "ecp5"), "base.target: unknown target 'ecp5'", "ecp5-25f"),
    ("compile runner key", setitem("base.to", ["onnx"]), "base.to: to is set by the sweep", "drop it"),
    ("learn axis in compile", setitem("axes.grid_size", [4]), "axes.grid_size: unknown axis 'grid_size' for kind "
     "compile", "precision"),
    ("learn metric in compile", setitem("metrics", ["mse"]), "metrics[0]: mse is not available for kind compile",
     "learn"),
]


@pytest.mark.parametrize("what,change,start,words", COMPILE_REFUSALS, ids=[r[0] for r in COMPILE_REFUSALS])
def test_compile_refusals_name_the_key_path(tmp_path, what, change, start, words):
    data = compile_spec()
    change(data)
    message = refused(with_model(tmp_path), data)
    assert message.startswith(f"FILE: {start}"), message
    assert words in message, message


def test_an_unknown_recipe_lists_the_recipes(tmp_path):
    message = refused(tmp_path, compile_spec(base={"model": "jet-mpl"}))
    assert message.startswith("FILE: base.model: 'jet-mpl' is neither a recipe") and "jet-mlp" in message


def test_llm_refuses_hardware_metrics_and_stages(tmp_path):
    base = {"kind": "llm", "axes": {"budget_bpw": [3.5, 4.0]}}
    assert refused(tmp_path, {**base, "metrics": ["lut"]}).startswith("FILE: metrics[0]: lut is not available for "
                                                                      "kind llm")
    assert refused(tmp_path, {**base, "stage": "sim"}).startswith("FILE: stage: kind llm has no hardware stages")
    assert refused(tmp_path, {**base, "axes": {"method": ["qera", "gptq"]}}).startswith(
        "FILE: axes.method[1]: expected one of srr, qera")


# -- the file itself -------------------------------------------------------------------------------------------

def test_file_refusals(tmp_path):
    assert refused(tmp_path, KAN, "sweep.toml").startswith("FILE: a sweep spec is a YAML (.yml, .yaml) or JSON")
    with pytest.raises(SweepError, match="no such file"):
        load_spec(tmp_path / "missing.yml")
    assert refused(tmp_path, "kind: learn\naxes: [1, 2\n", "bad.yml").startswith("FILE: line 3, column 1: not "
                                                                                  "valid YAML")
    assert refused(tmp_path, '{"kind": "learn",\n "axes": }', "bad.json").startswith("FILE: line 2, column 10: not "
                                                                                    "valid JSON")
    assert refused(tmp_path, "", "empty.yml").startswith("FILE: expected a mapping")
    assert refused(tmp_path, "[1, 2]", "list.json").startswith("FILE: expected a mapping")


def test_a_key_given_twice_is_refused(tmp_path):
    yml = "kind: learn\nbase: {task: t1}\naxes:\n  grid_size: [4]\n  grid_size: [5]\n"
    assert refused(tmp_path, yml, "twice.yml").startswith("FILE: line 5: key 'grid_size' is given twice")
    js = '{"kind": "learn", "base": {"task": "t1", "task": "t2"}}'
    assert refused(tmp_path, js, "twice.json").startswith("FILE: key 'task' is given twice")


def test_parse_spec_without_a_file(tmp_path):
    spec = parse_spec({"kind": "learn", "base": {"task": "t1"}, "axes": {"order": [2, 3]}}, "", tmp_path)
    assert spec.name == "sweep" and spec.source == "" and [p.params for p in sample(spec)] == [{"order": 2},
                                                                                                {"order": 3}]
    with pytest.raises(SweepError, match=r"^axes\.order\[0\]: spline order"):
        parse_spec({"kind": "learn", "base": {"task": "t1"}, "axes": {"order": [6]}}, "", tmp_path)
