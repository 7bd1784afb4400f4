"""PNG charts (matplotlib, imported only here and only when a chart is drawn)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tools.bench.compare import Comparison
from tools.bench.runs import Run

COLORS = {
    "slower": "#c62828",
    "faster": "#2e7d32",
    "inconclusive": "#f9a825",
    "no change": "#546e7a",
}


_RATIO_TICKS = (0.25, 0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 4.0, 8.0)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def compare_chart(comp: Comparison, path: Path) -> Path:
    """One row per case: HEAD/BASE ratio with its interval, on a log axis, the no-change band
    shaded; colours give the verdict."""
    plt = _pyplot()
    from matplotlib.ticker import FixedFormatter, FixedLocator, NullLocator

    cases = sorted(comp.cases, key=lambda c: (c.area, c.name), reverse=True)
    height = max(2.5, 0.32 * len(cases) + 1.4)
    fig, ax = plt.subplots(figsize=(10, height))
    t = comp.threshold
    ax.axvspan(1 / (1 + t), 1 + t, color="#eceff1", zorder=0, label=f"±{t:.0%} threshold")
    ax.axvline(1.0, color="black", lw=0.8, zorder=1)
    for y, c in enumerate(cases):
        e = c.estimate
        color = COLORS[c.verdict]
        ax.plot([e.low, e.high], [y, y], color=color, lw=2.5, solid_capstyle="butt", zorder=2)
        ax.plot([e.ratio], [y], "o", color=color, ms=6, zorder=3)
    ax.set_yticks(range(len(cases)))
    ax.set_yticklabels([f"{c.area}: {c.name}" for c in cases], fontsize=7)
    ax.set_xscale("log")
    lo = min([c.estimate.low for c in cases] + [1 / (1 + 2 * t)])
    hi = max([c.estimate.high for c in cases] + [1 + 2 * t])
    ax.set_xlim(lo / 1.05, hi * 1.05)
    ticks = [t for t in _RATIO_TICKS if lo / 1.05 <= t <= hi * 1.05]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FixedFormatter([f"{t:g}" for t in ticks]))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel(
        f"time HEAD/BASE (median, {comp.confidence:.0%} interval; > 1 is slower)", fontsize=8
    )
    for v, col in COLORS.items():
        ax.plot([], [], "o", color=col, label=f"{v} ({comp.count(v)})")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    ax.set_title(f"HEAD {comp.head_label} vs BASE {comp.base_label} ({comp.mode})", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run_chart(run: Run, path: Path) -> Path:
    """Per case, each round's median relative to the case's median: the round-to-round noise
    on this machine, i.e. what a comparison threshold has to clear."""
    plt = _pyplot()
    cases = sorted(run.cases.values(), key=lambda c: (c.area, c.name), reverse=True)
    height = max(2.5, 0.32 * len(cases) + 1.4)
    fig, ax = plt.subplots(figsize=(9, height))
    ax.axvline(0.0, color="black", lw=0.8)
    for y, c in enumerate(cases):
        rel = [100.0 * (m / c.median - 1.0) for m in c.medians]
        ax.plot(rel, [y] * len(rel), "o", color="#1565c0", ms=4, alpha=0.8)
    ax.set_yticks(range(len(cases)))
    ax.set_yticklabels([f"{c.area}: {c.name}" for c in cases], fontsize=7)
    ax.set_xlabel("round median vs the case's median (%)", fontsize=8)
    ax.set_title(f"Round-to-round spread, run {run.label} ({run.rounds} rounds)", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
