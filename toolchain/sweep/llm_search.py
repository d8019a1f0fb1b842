"""``bitforge sweep`` kind "llm": joint per-layer bit-width and rank allocation for the Q + LR methods (QERA, SRR)
under a memory budget in bits per weight, scales, zero-points and low-rank factors counted (the checkpoint's
``bpw``), compared with the uniform configurations (every layer the same bits and rank) at or under the budget.

Multi-fidelity, cheapest first:

1. **Proxy** (:mod:`.llm_proxy`, one executor job per decoder block): for every layer and candidate (bits, group,
   rank) the calibration output error ``tr(D H D^T)`` of exactly the ``W_hat`` the method stores, the same error
   weighted per output channel by the output Fisher diagonal (:func:`.llm_eval.output_fisher`: an estimate of the
   loss increase per token), and its stored bits. Cached under ``OUT/llm/proxy-<method>-<hash>.json`` by content
   (the layers' weights, the text and calibration settings, the method and its options, the candidates), so a
   rerun or a new budget skips it.
2. **Allocation** (:mod:`.llm_alloc`): per budget, a multiple-choice knapsack (DP, exact up to a 0.1 % cost
   rounding) minimising the summed proxy, one survivor per proxy of option ``proxies`` (:data:`PROXIES`):
   summed output errors of different layers are not equally harmful. Measured on SmolLM2-135M (QERA, bits 2-4,
   ranks 0-32, g64) at 3.5 bpw: the allocation minimising the plain output error scored perplexity 173, the
   relative error 79.7, the Fisher proxy 35.2, against 42.7 for uniform W3 (the best uniform within 3.5).
3. **Perplexity** (:mod:`.llm_eval`): each survivor and each uniform configuration within the budget is quantized
   through the compress driver and measured on the evaluation chunks and on disjoint *selection* chunks. The
   search's answer per budget is the survivor with the lowest selection perplexity; it is compared with the best
   uniform configuration by evaluation perplexity (which favours uniform: its pick sees the evaluation numbers).
   Uniform configurations that another one within the budget beats on every layer's proxy are not measured.

Spec (``base``, any of them may be an axis instead; see :data:`BASE_KEYS`)::

    kind: llm
    base: {model: smollm2, method: qera, bits: [2, 3, 4], rank: [0, 8, 16, 32], group: 64}
    axes: {budget_bpw: [3.75, 4.0]}

Rows: one per measured uniform configuration (``params.config`` "uniform w3 g64 r16") and one per survivor
(``config`` "allocated"), metrics ``bpw``, ``ppl``, ``proxy`` (the summed Fisher proxy, or the summed output
error when the table has no Fisher values), ``error`` (= ppl);
``files["allocation.json"]`` the per-layer settings. ``OUT/llm/summary.json``: per (method, budget) the chosen
allocation against the best uniform configuration.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from ..compress.calibration import DEFAULT_TEXT, TextConfig
from ..errors import BitforgeError
from ..flows.cache import write_atomic
from . import llm_alloc, llm_eval, llm_proxy
from .model import Point, Row, SweepError, SweepSpec, point_key

#: base keys (and the axes that may replace them) -> (default, meaning)
BASE_KEYS = {
    "model": ("smollm2", "MODEL as bitforge quantize takes it: the alias smollm2, a Hugging Face folder or a .gguf"),
    "method": ("qera", "the Q + LR method: qera or srr (an axis of methods: one search each)"),
    "bits": ([2, 3, 4], "candidate base bit widths per layer (list)"),
    "rank": ([0, 8, 16, 32], "candidate low-rank correction ranks per layer (list; 0: the base quantizer alone)"),
    "group": (64, "quantization group size (int, null for per channel, or a list of candidates)"),
    "budget_bpw": (None, "the memory budget(s) in bits per weight, every stored bit counted (number or list)"),
    "options": ({}, "the method's --option settings (base, scaling, damp, k_tol, ...)"),
    "seed": (0, "the method's seed (SRR's probe)"),
    "text": (DEFAULT_TEXT, "calibration and evaluation text (as bitforge quantize --text)"),
    "ctx": (512, "tokens per chunk"),
    "calib_chunks": (16, "calibration chunks"),
    "eval_chunks": (8, "evaluation chunks (the reported perplexity)"),
    "select_chunks": (4, "selection chunks (disjoint; ranks the survivors)"),
    "proxies": (["fisher", "relative"], "the layer proxies, one survivor each: fisher, output, relative or a number "
                                        "alpha (error / ref^alpha)"),
    "batch_size": (4, "calibration batch size"),
    "proxy_cpus": (1, "CPUs each proxy job declares (and the torch threads it uses)"),
}


#: the layer proxies a survivor can minimise: "fisher" (estimated loss increase: the output error weighted by the
#: output Fisher diagonal), "output" (the output error tr(D H D^T)), "relative" (divided by tr(W H W^T))
PROXIES = ("fisher", "output", "relative")


@dataclass(frozen=True)
class Settings:
    model: str
    methods: tuple[str, ...]
    bits: tuple[int, ...]
    ranks: tuple[int, ...]
    groups: tuple
    budgets: tuple[float, ...]
    options: dict
    seed: int
    text: TextConfig
    select_chunks: int
    proxies: tuple
    batch_size: int
    proxy_cpus: int


def _as_list(value) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def settings_from_spec(spec: SweepSpec) -> Settings:
    """Read the search's settings from ``spec.base`` and its axes; a bad value is a :class:`SweepError` naming the
    spec file and the key."""
    where = spec.source or "the spec"
    unknown = sorted(set(spec.base) - set(BASE_KEYS))
    if unknown:
        raise SweepError(f"{where}: base.{unknown[0]}: not a setting of kind llm; known: {', '.join(BASE_KEYS)}")
    val = {k: spec.base.get(k, d) for k, (d, _) in BASE_KEYS.items()}
    for a in spec.axes:
        if a.name not in BASE_KEYS:
            raise SweepError(f"{where}: axes.{a.name}: not an axis of kind llm; use budget_bpw, method, bits, rank")
        val[a.name] = list(a.values)

    def ints(key, lo, hi):
        items = _as_list(val[key])
        if not items or any(isinstance(x, bool) or not isinstance(x, int) or not lo <= x <= hi for x in items):
            raise SweepError(f"{where}: {key}: {val[key]!r}; expected integers in {lo}..{hi} (a list of candidates)")
        return tuple(sorted(set(items)))

    methods = tuple(dict.fromkeys(_as_list(val["method"])))
    bad = [m for m in methods if m not in llm_proxy.METHODS]
    if bad or not methods:
        raise SweepError(f"{where}: method: {bad or methods}; expected qera or srr (the Q + LR methods)")
    groups = tuple(dict.fromkeys(_as_list(val["group"])))
    if any(g is not None and (isinstance(g, bool) or not isinstance(g, int) or g <= 0) for g in groups):
        raise SweepError(f"{where}: group: {val['group']!r}; expected a positive int, null (per channel) or a list")
    budgets = _as_list(val["budget_bpw"])
    if val["budget_bpw"] is None or not budgets or any(
            isinstance(b, bool) or not isinstance(b, (int, float)) or not b > 0 for b in budgets):
        raise SweepError(f"{where}: budget_bpw: {val['budget_bpw']!r}; expected the budget in bits per weight "
                         f"(> 0, a number or a list, as base.budget_bpw or an axis), e.g. 4.0")
    proxies = _as_list(val["proxies"])
    if not proxies or any(not (p in PROXIES or (isinstance(p, (int, float)) and not isinstance(p, bool)))
                          for p in proxies):
        raise SweepError(f"{where}: proxies: {val['proxies']!r}; expected a list of {', '.join(PROXIES)} or "
                         f"numbers alpha (error / ref^alpha)")
    if not isinstance(val["options"], dict):
        raise SweepError(f"{where}: options: expected a mapping of --option names to values")
    try:
        text = TextConfig(str(val["text"]), int(val["ctx"]), int(val["eval_chunks"]), int(val["calib_chunks"]))
    except BitforgeError as e:
        raise SweepError(f"{where}: {e}") from None
    return Settings(str(val["model"]), methods, ints("bits", 2, 8), ints("rank", 0, 4096), groups,
                    tuple(float(b) for b in budgets), dict(val["options"]), int(val["seed"]), text,
                    int(val["select_chunks"]), tuple(dict.fromkeys(proxies)), int(val["batch_size"]),
                    max(1, int(val["proxy_cpus"])))


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def _write_json(path: Path, data) -> None:
    write_atomic(path, json.dumps(data, indent=1, default=str) + "\n")


def budget_bits(budget_bpw: float, weights: int) -> int:
    """``floor(budget * weights)`` in exact arithmetic (a decimal budget such as 3.7 is taken as written)."""
    return int(Fraction(str(budget_bpw)) * weights)


# -- phase 1: proxies ----------------------------------------------------------------------------------------

def proxy_table(session, st: Settings, method: str, executor, out: Path, log) -> dict:
    """Every layer's candidate table, from the cache under ``OUT/llm`` or computed as one executor job per block."""
    fisher = "fisher" in st.proxies
    key = _digest({"weights": session.weights_digest(), "text": session.text.to_json(), "method": method,
                   "fisher": fisher,
                   "options": st.options, "seed": st.seed, "bits": st.bits, "ranks": st.ranks, "groups": st.groups,
                   "version": importlib.metadata.version("bitforge"), "statistics": "float"})[:16]
    path = out / "llm" / f"proxy-{method}-{key}.json"
    if path.is_file():
        table = json.loads(path.read_text())
        table["cached"] = True
        log(f"llm {method}: proxy table from the cache ({path.name})")
        return table
    stats = llm_eval.collect_stats(session)
    log(f"llm {method}: float statistics in {session.stats_seconds:.1f} s; proxies for {len(stats)} layers x "
        f"{len(st.bits) * len(st.ranks) * len(st.groups)} candidates")
    t0 = time.perf_counter()
    fdiag = llm_eval.output_fisher(session) if fisher else {}
    fisher_seconds = time.perf_counter() - t0
    if fisher:
        log(f"llm {method}: output Fisher diagonal in {fisher_seconds:.1f} s")
    blocks: dict[str, list] = {}
    for name, s in stats.items():
        lay = (name, session.snapshot[name].clone(), s) + ((fdiag[name],) if fisher else ())
        blocks.setdefault(name.rsplit(".", 2)[0], []).append(lay)
    futures = [executor.submit(llm_proxy.proxy_job, layers, method, list(st.bits), list(st.groups), list(st.ranks),
                               st.options, st.seed, st.proxy_cpus, num_cpus=st.proxy_cpus)
               for layers in blocks.values()]
    layers = [row for f in futures for row in f.result()]
    table = {"method": method, "key": key, "layers": layers, "seconds": round(time.perf_counter() - t0, 2),
             "stats_seconds": round(session.stats_seconds, 2), "fisher_seconds": round(fisher_seconds, 2),
             "cached": False}
    _write_json(path, table)
    log(f"llm {method}: proxies in {table['seconds']:.1f} s")
    return table


# -- phase 2: allocations ------------------------------------------------------------------------------------

def _label(bits, group, rank) -> str:
    return f"w{bits} g{'c' if group is None else group} r{rank}"


def candidate_keys(table: dict) -> list[tuple]:
    """(bits, group, rank) available in every layer: the uniform configurations."""
    sets = [{(c["bits"], c["group"], c["rank"]) for c in layer["candidates"]} for layer in table["layers"]]
    common = set.intersection(*sets) if sets else set()
    return sorted(common, key=lambda k: (k[0], -1 if k[1] is None else k[1], k[2]))


def uniform_configs(table: dict, budget: int) -> list[dict]:
    """Uniform configurations within ``budget`` bits, less those that another one within the budget beats on every
    layer's proxy (RTN W2 against W3 at any rank, say): at the same budget their bits do not matter, and a model
    worse layer by layer is not measured."""
    layers = table["layers"]
    info = []
    for key in candidate_keys(table):
        cands = [next(c for c in layer["candidates"] if (c["bits"], c["group"], c["rank"]) == key) for layer in layers]
        cost = sum(c["cost"] for c in cands)
        if cost <= budget:
            info.append({"key": key, "cost": cost, "errors": [c["error"] for c in cands]})
    keep = []
    for a in info:
        dominated = any(b is not a and all(x <= y for x, y in zip(b["errors"], a["errors"]))
                        and (b["errors"] != a["errors"] or b["cost"] < a["cost"]) for b in info)
        if not dominated:
            keep.append(a)
    return keep


def proxy_values(table: dict, proxy) -> list[list[float]]:
    """Each layer's candidate values under one proxy (see :data:`PROXIES`)."""
    out = []
    for layer in table["layers"]:
        if proxy == "fisher":
            if any(c.get("fisher") is None for c in layer["candidates"]):
                raise SweepError("llm search: the proxy table has no Fisher values (computed without proxy fisher)")
            out.append([c["fisher"] for c in layer["candidates"]])
            continue
        alpha = {"output": 0.0, "relative": 1.0}.get(proxy, proxy)
        out.append([c["error"] / max(layer["ref"], 1e-300) ** float(alpha) for c in layer["candidates"]])
    return out


def survivors(table: dict, budget: int, proxies) -> list[dict]:
    """One knapsack optimum per proxy, duplicates merged."""
    layers = table["layers"]
    costs = [[c["cost"] for c in layer["candidates"]] for layer in layers]
    found: dict[tuple, dict] = {}
    for proxy in proxies:
        alloc = llm_alloc.allocate(costs, proxy_values(table, proxy), budget)
        if alloc.choice in found:
            found[alloc.choice]["proxies"].append(proxy)
            continue
        found[alloc.choice] = {"choice": alloc.choice, "cost": alloc.cost, "proxies": [proxy], "exact": alloc.exact}
    return list(found.values())


def assignment_of(table: dict, choice) -> dict:
    return {layer["name"]: layer["candidates"][i] for layer, i in zip(table["layers"], choice)}


# -- phase 3: perplexity and rows ----------------------------------------------------------------------------

def run_llm_sweep(spec: SweepSpec, out, executor, on_row=None, *, log=None, loader=None) -> list[Row]:
    """Run the search (see the module docstring) into ``out``; ``on_row(row)`` after each finished row.

    ``executor``: the sweep's (``submit(fn, *args, num_cpus=n) -> Future``) for the proxy jobs; the perplexity
    phase runs here, on the one loaded model. ``loader(model) -> (nn.Module, tokenizer)`` replaces the compress
    loader (tests). Returns the rows in the order they finished."""
    log = log or (lambda msg: None)
    st = settings_from_spec(spec)
    out = Path(out)
    (out / "llm").mkdir(parents=True, exist_ok=True)
    session = llm_eval.open_session(st.model, st.text, st.select_chunks, st.batch_size, loader)
    log(f"llm: model and text loaded in {session.load_seconds:.1f} s")
    rows: list[Row] = []
    summary = {"model": st.model, "text": st.text.to_json(), "select_chunks": st.select_chunks, "searches": []}
    for method in st.methods:
        table = proxy_table(session, st, method, executor, out, log)
        n = sum(layer["weights"] for layer in table["layers"])
        per_budget = []
        for budget_bpw in st.budgets:
            budget = budget_bits(budget_bpw, n)
            try:
                surv = survivors(table, budget, st.proxies)
            except SweepError as e:
                rows.append(_failed_row(spec, st, method, budget_bpw, str(e), len(rows), on_row))
                continue
            per_budget.append((budget_bpw, budget, surv, uniform_configs(table, budget)))
        measured_uniform: dict[tuple, Row] = {}
        for budget_bpw, budget, surv, uniforms in per_budget:
            for u in uniforms:
                if u["key"] not in measured_uniform:
                    assignment = {layer["name"]: next(c for c in layer["candidates"]
                                                      if (c["bits"], c["group"], c["rank"]) == u["key"])
                                  for layer in table["layers"]}
                    params = {"method": method, "config": f"uniform {_label(*u['key'])}", "bits": u["key"][0],
                              "group": u["key"][1], "rank": u["key"][2]}
                    row = _measure(spec, st, session, out, method, params, assignment, table, len(rows), log)
                    measured_uniform[u["key"]] = row
                    _emit(rows, row, on_row)
            allocated = []
            for j, s in enumerate(surv):
                params = {"method": method, "config": "allocated", "budget_bpw": budget_bpw,
                          "proxy": s["proxies"][0], "survivor": j}
                row = _measure(spec, st, session, out, method, params, assignment_of(table, s["choice"]), table,
                               len(rows), log, extra={"proxies": s["proxies"], "exact_dp": s["exact"],
                                                      "budget_bits": budget})
                allocated.append(row)
                _emit(rows, row, on_row)
            summary["searches"].append(_compare(method, budget_bpw, budget, n, allocated,
                                                [measured_uniform[u["key"]] for u in uniforms], table))
        _write_json(out / "llm" / "summary.json", summary)
    _write_json(out / "llm" / "summary.json", summary)
    finish_summary(out)
    return rows


def _emit(rows: list, row: Row, on_row) -> None:
    rows.append(row)
    if on_row:
        on_row(row)


def _row_key(spec: SweepSpec, st: Settings, params: dict) -> str:
    ident = {**params, "candidates": {"bits": st.bits, "ranks": st.ranks, "groups": st.groups},
             "settings": {"model": st.model, "text": st.text.to_json(), "select": st.select_chunks,
                          "options": st.options, "seed": st.seed}}
    return point_key(spec, Point(0, json.loads(json.dumps(ident, default=str))))


def _failed_row(spec, st, method, budget_bpw, reason, index, on_row) -> Row:
    params = {"method": method, "config": "allocated", "budget_bpw": budget_bpw}
    row = Row(_row_key(spec, st, params), index, params, "failed", {m: None for m in ("bpw", "ppl", "proxy", "error")},
              reason=reason)
    if on_row:
        on_row(row)
    return row


def _measure(spec, st, session, out: Path, method, params, assignment, table, index, log, extra=None) -> Row:
    """One allocation's row: from ``points/<key>/row.json`` when an earlier run measured it, else measured now."""
    key = _row_key(spec, st, params)
    folder = out / "points" / key
    row_path, alloc_path = folder / "row.json", folder / "allocation.json"
    fisher = [c.get("fisher") for c in assignment.values()]
    proxy = sum(fisher) if None not in fisher else sum(c["error"] for c in assignment.values())
    if row_path.is_file() and alloc_path.is_file():
        row = Row.from_json(json.loads(row_path.read_text()))
        if row.status == "ok":
            row.cached, row.index = True, index
            return row
    t0 = time.perf_counter()
    settings = {name: (c["bits"], c["group"], c["rank"]) for name, c in assignment.items()}
    try:
        res = llm_eval.evaluate(session, method, settings, st.options, st.seed)
    except BitforgeError as e:
        return Row(key, index, params, "failed", {"bpw": None, "ppl": None, "proxy": proxy, "error": None},
                   reason=str(e).splitlines()[0], folder=f"points/{key}", seconds=time.perf_counter() - t0)
    planned = sum(c["cost"] for c in assignment.values())
    if res["stored_bits"] != planned:
        raise RuntimeError(f"llm search: the proxy table counted {planned} stored bits for {params['config']}, the "
                           f"quantized model {res['stored_bits']}: the table does not match the method")
    doc = {"params": params, "method": method, "measured": res, "proxy": proxy, **(extra or {}),
           "layers": {name: {k: c.get(k) for k in ("bits", "group", "rank", "bpw", "cost", "error", "fisher")}
                      for name, c in assignment.items()}}
    _write_json(alloc_path, doc)
    row = Row(key, index, params, "ok", {"bpw": res["bpw"], "ppl": res["ppl"], "proxy": proxy, "error": res["ppl"]},
              folder=f"points/{key}", seconds=round(time.perf_counter() - t0, 2),
              files={"allocation.json": f"points/{key}/allocation.json"})
    _write_json(row_path, row.to_json())
    log(f"llm {method}: {params['config']}{' (budget %s)' % params['budget_bpw'] if 'budget_bpw' in params else ''}"
        f": bpw {res['bpw']:.4f}, ppl {res['ppl']:.3f}, selection ppl {res['select_ppl']:.3f} "
        f"({row.seconds:.0f} s)")
    return row


def _compare(method, budget_bpw, budget, n, allocated: list[Row], uniform: list[Row], table) -> dict:
    ok_u = [r for r in uniform if r.status == "ok"]
    ok_a = [r for r in allocated if r.status == "ok"]
    best_u = min(ok_u, key=lambda r: r.metrics["ppl"], default=None)
    return {"method": method, "budget_bpw": budget_bpw, "budget_bits": budget, "weights": n,
            "proxy_seconds": table.get("seconds"), "proxy_cached": table.get("cached"),
            "allocated": [{"key": r.key, "params": r.params, **r.metrics} for r in ok_a],
            "uniform": [{"key": r.key, "params": r.params, **r.metrics} for r in ok_u],
            "best_uniform": None if best_u is None else {"key": best_u.key, "config": best_u.params["config"],
                                                         **best_u.metrics}}


def finish_summary(out: Path) -> dict:
    """Add the chosen allocation (lowest selection perplexity) and its ratio to the best uniform configuration to
    ``OUT/llm/summary.json`` (the rows' allocation files hold the selection perplexities)."""
    path = out / "llm" / "summary.json"
    summary = json.loads(path.read_text())
    for s in summary["searches"]:
        best, best_sel = None, None
        for a in s["allocated"]:
            sel = json.loads((out / "points" / a["key"] / "allocation.json").read_text())["measured"]["select_ppl"]
            if best is None or sel < best_sel:
                best, best_sel = a, sel
        s["chosen"] = None if best is None else {**best, "select_ppl": best_sel}
        if best is not None and s["best_uniform"]:
            s["ppl_ratio_vs_best_uniform"] = best["ppl"] / s["best_uniform"]["ppl"]
    _write_json(path, summary)
    return summary
