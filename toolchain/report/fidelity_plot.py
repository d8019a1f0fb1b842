"""``fidelity.png``: each layer's golden values against its type, after hls4ml's profiling plot.

One row per layer (graph order, top to bottom) on a log2 axis of magnitudes: the grey band is what the type
represents (from its LSB to its largest magnitude), the box the middle half of the layer's non-zero |values|
(median marked), the whiskers their smallest and largest. A box reaching past the band's right end needs more
integer bits; one far left of it, more fractional bits (those values round to few codes, or to zero). Layers
whose values overflowed the type get a red mark at the band's end with the count; an orange diamond marks the
largest magnitude of the float model's paired tensor, which is where the golden values would reach with room.

The caller gives the positions (:mod:`..verify.fidelity` takes the boxes from a histogram of log2|x| in
1/8-octave bins, the whiskers from the exact extremes). The PNG is deterministic: no software or date
metadata, a fixed size and resolution.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

FILE = "fidelity.png"
DPI = 100


@dataclass(frozen=True)
class PlotRow:
    """One layer as drawn, every position a log2 of a magnitude."""

    label: str
    band: Optional[tuple[float, float]]  # the type: log2(LSB), log2(largest magnitude); None for a float tensor
    box: Optional[tuple[float, float, float]]  # quartiles and median of the non-zero |values|; None if all zero
    whiskers: Optional[tuple[float, float]]  # smallest and largest non-zero |value|
    overflowed: int = 0
    reference_top: Optional[float] = None  # largest |value| of the float reference's paired tensor


def write_plot(path: Path, rows: list[PlotRow], title: str) -> None:
    # A Figure of its own rather than pyplot: no global state, no backend switch in the caller's process.
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    n = len(rows)
    fig = Figure(figsize=(9, 1.2 + 0.42 * max(n, 1)), dpi=DPI)
    ax = fig.subplots()
    lo_x, hi_x = math.inf, -math.inf
    drawn = False
    for i, row in enumerate(rows):
        y = n - 1 - i
        if row.band is not None:
            lsb, top = row.band
            ax.add_patch(Rectangle((lsb, y - 0.4), top - lsb, 0.8, color="0.85", zorder=1))
            lo_x, hi_x = min(lo_x, lsb), max(hi_x, top)
            if row.overflowed:
                ax.plot([top], [y], marker="x", color="red", markersize=9, mew=2, zorder=4)
                ax.annotate(f"{row.overflowed:,} overflowed", (top, y), xytext=(6, 4), textcoords="offset points",
                            color="red", fontsize=8, zorder=4)
        if row.box is None:
            continue
        q1, med, q3 = row.box
        smallest, largest = row.whiskers
        ax.add_patch(Rectangle((q1, y - 0.25), max(q3 - q1, 0.1), 0.5, facecolor="tab:blue", edgecolor="black",
                               alpha=0.8, zorder=2))
        ax.plot([med, med], [y - 0.25, y + 0.25], color="black", lw=1.5, zorder=3)
        ax.plot([smallest, q1], [y, y], color="black", lw=1, zorder=2)
        ax.plot([q3, largest], [y, y], color="black", lw=1, zorder=2)
        for end in (smallest, largest):
            ax.plot([end, end], [y - 0.15, y + 0.15], color="black", lw=1, zorder=2)
        lo_x, hi_x = min(lo_x, smallest), max(hi_x, largest)
    for i, row in enumerate(rows):
        if row.reference_top is not None:
            ax.plot([row.reference_top], [n - 1 - i], marker="D", color="tab:orange", markersize=5, zorder=5,
                    linestyle="none", label="largest |value| of the float model" if not drawn else None)
            drawn = True
            lo_x, hi_x = min(lo_x, row.reference_top), max(hi_x, row.reference_top)
    if drawn:
        ax.legend(loc="best", fontsize=8, framealpha=0.9)
    # A float reference that overflowed to inf (a huge weight) has no place on the axis: keep what is finite.
    if not math.isfinite(lo_x):
        lo_x = -8 if not math.isfinite(hi_x) else hi_x - 16
    if not math.isfinite(hi_x):
        hi_x = lo_x + 16
    ax.set_xlim(math.floor(lo_x) - 1, math.ceil(hi_x) + 4)
    ax.set_ylim(-0.7, n - 0.3)
    ax.set_yticks(range(n))
    ax.set_yticklabels([row.label for row in reversed(rows)], fontsize=8)
    ticks = range(math.floor(lo_x) - 1, math.ceil(hi_x) + 5, max(1, (math.ceil(hi_x) - math.floor(lo_x) + 5) // 12))
    ax.set_xticks(list(ticks))
    ax.set_xticklabels([f"$2^{{{k}}}$" for k in ticks], fontsize=8)
    ax.set_xlabel("|value| (log2 scale): grey = the type's range (LSB to largest), box = golden values")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", color="0.9", zorder=0)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=DPI, metadata={"Software": None})
