"""``bench deploy``'s rich tables and its plot (samples per second against baud rate)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from .deploy import DeployBenchResult, computed
from .wire_timing import DeviceShape


def _table(title: str, cols: list[str], left: int = 1):
    from rich import box
    from rich.table import Table

    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), collapse_padding=True,
              pad_edge=False, show_edge=False)
    for i, c in enumerate(cols):
        t.add_column(c, justify="left" if i < left else "right", no_wrap=True)
    return t


def _n(v, fmt: str = ",.0f") -> str:
    return "-" if v is None else format(v, fmt)


def tables(res: DeployBenchResult):
    """One table per part that ran."""
    from rich.console import Group

    out = []
    if res.sim:
        clock = res.sim[0].sim_clock_hz / 1e6
        t = _table(f"simulated board, measured (seconds at {clock:g} MHz; every answer equals the golden model)",
                   ["model", "clk/bit", "batch", "host smp/s", "host ms", "cyc/req", "model cyc", "x model",
                    "wrapper cyc", "sim us", "sim smp/s", "wire", "core"], left=1)
        for r in res.sim:
            t.add_row(r.model, str(r.clks_per_bit), str(r.batch), _n(r.host_samples_per_s),
                      _n(r.host_latency_ms_median, ".2f"), _n(r.cycles_per_request), _n(r.model_cycles_per_request),
                      _n(r.model_ratio, ".3f"), _n(r.wrapper_cycles), _n(r.sim_latency_us, ",.1f"),
                      _n(r.sim_samples_per_s), f"{100 * r.wire_share:.1f} %", f"{100 * r.core_share:.1f} %")
        out.append(t)
    if res.wrapper_fits:
        t = _table("wrapper cycles per request = a + b * CLKS_PER_BIT (fit of the rows above)",
                   ["model", "batch", "a", "b", "max residual"], left=1)
        for f in res.wrapper_fits:
            t.add_row(f["model"], str(f["batch"]), _n(f["a"], ",.1f"), _n(f["b_per_clks_per_bit"], ".2f"),
                      _n(f["max_residual_cycles"], ".1f"))
        out.append(t)
    if res.boards:
        t = _table("real boards, computed from the same counts", ["model", "board", "MHz", "baud", "batch",
                                                                  "samples/s", "latency ms", "wire", "core",
                                                                  "x batch 1"], left=2)
        for r in res.boards:
            t.add_row(r["model"], r["board"], f"{r['core_clock_hz'] / 1e6:g}",
                      f"{r['baud']:,}" + ("" if r["achievable"] else " *"), str(r["batch"]), _n(r["samples_per_s"]),
                      _n(r["latency_ms"], ",.3f"), f"{100 * r['wire_share']:.1f} %", f"{100 * r['core_share']:.2f} %",
                      _n(r["samples_per_s_vs_batch_1"], ".2f"))
        if any(not r["achievable"] for r in res.boards):
            t.caption = ("* the board flow refuses this rate at this clock (more than 2 % off); computed at the "
                         "nominal rate")
        out.append(t)
    if res.wrapper:
        t = _table("the wrapper's cost: UART, frame engine and buffers around a pass-through core, after place and "
                   "route", ["board", "target", "LUT", "FF", "BRAM", "DSP", "Fmax MHz", "clock MHz"], left=2)
        for r in res.wrapper:
            if r["status"] != "ok":
                t.add_row(r["board"], r["target"], "failed", "", "", "", "", "")
                continue
            t.add_row(r["board"], r["target"], _n(r["lut"]), _n(r["ff"]), _n(r["bram"]), _n(r["dsp"]),
                      _n(r["fmax_mhz"], ".1f"), _n(r["core_clock_hz"] / 1e6, "g"))
        out.append(t)
    if res.weights:
        t = _table(f"--weights ram vs rom ({res.weights[0]['model']}, reuse {res.weights[0]['reuse']})",
                   ["target", "LUT rom/ram", "FF rom/ram", "BRAM rom/ram", "DSP rom/ram", "Fmax rom/ram",
                    "LUT x", "Fmax x"], left=1)
        for q in res.weights_ratios:
            rom = next(r for r in res.weights if r["target"] == q["target"] and r["weights"] == "rom")
            ram = next(r for r in res.weights if r["target"] == q["target"] and r["weights"] == "ram")
            cell = lambda k, f=",.0f": f"{_n(rom.get(k), f)} / {_n(ram.get(k), f)}"  # noqa: E731
            t.add_row(q["target"], cell("lut"), cell("ff"), cell("bram"), cell("dsp"), cell("fmax_mhz", ".1f"),
                      _n(q["lut_ram_vs_rom"], ".2f"), _n(q["fmax_mhz_ram_vs_rom"], ".2f"))
        out.append(t)
    return Group(*out)


def _curve(shape: DeviceShape, fit: dict, batch: int, bauds: np.ndarray, key: str) -> np.ndarray:
    return np.array([computed(shape, fit, batch, b)[key] for b in bauds])


def plot(res: DeployBenchResult, path: Path) -> Optional[Path]:
    """Per model: samples per second (top) and the wire's share of a request (bottom) against baud rate, the
    model's curves for batch 1 (solid) and the largest batch (dashed) at each board's clock and at the simulated
    board's, and the simulated board's measured points on the latter."""
    if not res.sim:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..flows.boards import get_board

    fits = {(f["model"], f["batch"]): f for f in res.wrapper_fits}
    boards = list(dict.fromkeys(r["board"] for r in res.boards)) or list(res.options["boards"])
    clocks = {b: float(next((r["core_clock_hz"] for r in res.boards if r["board"] == b), get_board(b).clock_hz))
              for b in boards}
    sim_clock = res.sim[0].sim_clock_hz
    fig, axes = plt.subplots(2, len(res.models), figsize=(6.5 * len(res.models), 8), squeeze=False,
                             gridspec_kw={"height_ratios": [3, 2]})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    series = [(f"{b}, {clocks[b] / 1e6:g} MHz", clocks[b], colors[i % len(colors)], 1.4)
              for i, b in enumerate(boards)]
    series.append((f"simulated board, {sim_clock / 1e6:g} MHz", sim_clock, "black", 0.8))
    for col, info in enumerate(res.models):
        m, top, bottom = info["model"], axes[0][col], axes[1][col]
        k_max = info["max_batch"]
        for label, clock, color, lw in series:
            shape = DeviceShape(info["in_bytes"], info["out_bytes"], info["latency_cycles"], info["ii"],
                                info["max_payload"], clock)
            bauds = np.geomspace(9600, clock / 4, 80)  # the receiver needs 4 clocks a bit
            for k, style in ((1, "-"), (k_max, "--")):
                kw = {"color": color, "lw": lw, "label": label if k == 1 else None}
                top.plot(bauds, _curve(shape, fits[(m, k)], k, bauds, "samples_per_s"), style, **kw)
                bottom.plot(bauds, 100 * _curve(shape, fits[(m, k)], k, bauds, "wire_share"), style, **kw)
        for r in (r for r in res.sim if r.model == m):
            top.plot(r.sim_baud, r.sim_samples_per_s, "o" if r.batch == 1 else "s", color="black", mfc="none", ms=7)
        top.plot([], [], "ko", mfc="none", label="simulated board, measured cycles, batch 1")
        top.plot([], [], "ks", mfc="none", label=f"simulated board, measured cycles, batch {k_max}")
        top.plot([], [], "k--", lw=0.8, label=f"dashed: batch {k_max}")
        for ax in (top, bottom):
            for b in res.options["bauds"]:
                ax.axvline(b, color="grey", lw=0.6, ls=":")
            ax.set_xscale("log")
            ax.grid(True, which="both", lw=0.3, alpha=0.5)
        top.set_yscale("log")
        top.set_ylabel("samples per second")
        top.set_title(f"{m}: {info['operation']}, {info['in_bytes']} B in / {info['out_bytes']} B out a word, "
                      f"latency {info['latency_cycles']}, II {info['ii']}", fontsize=9)
        top.legend(fontsize=7, loc="upper left")
        bottom.set_xlabel("baud rate (dotted: " + ", ".join(f"{b:,}" for b in res.options["bauds"]) + ")")
        bottom.set_ylabel("wire's share of a request, %")
    fig.suptitle("bitforge bench deploy: lines from wire_timing with the measured wrapper cycles; markers: the "
                 "simulated board's cycle counts", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return path
