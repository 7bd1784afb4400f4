"""Markdown for a bench run (per area: throughput, spread, peer ratios) and for a comparison."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict

from tools.bench.compare import Comparison
from tools.bench.runner import TIMERS
from tools.bench.runs import Case, Run

_PREFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def quantity(x: float, unit: str, digits: int = 3) -> str:
    """(4096, 'tokens') -> '4.1 k tokens'; (3.2e9, 'bytes') -> '3.2 GB'."""
    num, prefix = f"{x:.{digits}g}", ""
    for scale, p in _PREFIXES:
        if abs(x) >= scale:
            num, prefix = f"{x / scale:.{digits}g}", p
            break
    if unit == "bytes":
        return f"{num} {prefix}B"
    return f"{num} {prefix} {unit}" if prefix else f"{num} {unit}"


def throughput(work: float, seconds: float, unit: str) -> str:
    return quantity(work / seconds, unit) + "/s"


def seconds(s: float) -> str:
    for scale, name in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if s >= scale:
            return f"{s / scale:.3g} {name}"
    return f"{s / 1e-9:.3g} ns"


def pct(x: float) -> str:
    return "–" if math.isnan(x) else f"{100 * x:.1f}%"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


# -- a run -------------------------------------------------------------------------------------


def memory_floor(run: Run) -> Case | None:
    """The largest numpy-memcpy case: this machine's memory-bandwidth floor."""
    copies = [c for c in run.cases.values() if c.peer == "numpy-memcpy" and c.bytes]
    return max(copies, key=lambda c: c.work, default=None)


def traffic(case: Case) -> float | None:
    """Bytes per second moved (``bytes_moved / median``), when the case declared its bytes."""
    return case.bytes / case.median if case.bytes else None


def peer_rows(run: Run) -> tuple[list[list[str]], list[str]]:
    """Rows ``subject/peer`` time ratio per pair (median and range over the rounds, both cases
    timed in the same process each round), and notes on pairs missing a side."""
    pairs: dict[str, list[Case]] = defaultdict(list)
    for c in run.cases.values():
        if c.pair:
            pairs[c.pair].append(c)
    rows, notes = [], []
    for key in sorted(pairs):
        subjects = [c for c in pairs[key] if c.role == "subject"]
        peers = [c for c in pairs[key] if c.role == "peer"]
        if not subjects or not peers:
            have = "subject" if subjects else "peer"
            notes.append(f"pair `{key}` has only its {have} in this run (the other side skipped?)")
            continue
        for s in subjects:
            for p in peers:
                per_round = [a / b for a, b in zip(s.medians, p.medians)]
                r = statistics.median(per_round)
                rows.append(
                    [
                        key,
                        f"`{s.name}`",
                        f"{p.peer}: `{p.name}`",
                        f"**{r:.3f}**",
                        f"{min(per_round):.3f}–{max(per_round):.3f}",
                    ]
                )
    return rows, notes


def run_markdown(run: Run) -> str:
    st = run.settings
    m = run.machine
    lines = [
        f"# Bench run {run.label}",
        "",
        f"- taken {run.created} on {m.get('cpu')}, {m.get('cpu_count')} CPUs "
        f"(affinity {m.get('affinity')}), {m.get('mem_gib')} GiB, {m.get('system')} "
        f"{m.get('machine')}, Python {m.get('python')}",
        "- versions: " + " · ".join(f"{k} {v}" for k, v in run.versions.items() if v is not None),
        f"- settings: {st.get('rounds')} rounds (one process each) × "
        f"≥{st.get('inner_rounds')} timed repetitions or {st.get('max_time')} s per case; "
        f"timer {st.get('timer')} ({TIMERS.get(str(st.get('timer')), '?')}); "
        f"{st.get('threads')} thread(s)"
        + (f"; -k {st['keyword']!r}" if st.get("keyword") else "")
        + (f"; {run.wall_s:.0f} s in all" if run.wall_s else ""),
        "- median: median over rounds of each round's median time per call; "
        "± is half the range of the round medians, relative",
    ]
    run_timer = TIMERS.get(str(st.get("timer")), "").removeprefix("time.")
    floor = memory_floor(run)
    floor_bw = traffic(floor) if floor else None
    if floor is not None and floor_bw is not None:
        lines.append(
            f"- memory-bandwidth floor: **{quantity(floor_bw, 'bytes')}/s** of traffic "
            f"(`{floor.name}`, read + write); 'of floor' below is a case's traffic over it"
        )
    by_area: dict[str, list[Case]] = defaultdict(list)
    for c in run.cases.values():
        by_area[c.area].append(c)
    for area in sorted(by_area):
        lines += ["", f"## {area}", ""]
        rows = []
        for c in sorted(by_area[area], key=lambda c: c.name):
            bw = traffic(c)
            role = c.role if c.role == "subject" else f"peer: {c.peer}"
            if c.timer and c.timer != run_timer:
                role += f" ({c.timer})"
            rows.append(
                [
                    f"`{c.name}`",
                    role,
                    quantity(c.work, c.unit),
                    seconds(c.median),
                    pct(c.spread),
                    throughput(c.work, c.median, c.unit),
                    quantity(bw, "bytes") + "/s" if bw else "",
                    pct(bw / floor_bw) if bw and floor_bw else "",
                ]
            )
        lines += _table(
            ["case", "role", "work", "median", "±", "throughput", "traffic", "of floor"], rows
        )
    if run.skipped:
        lines += ["", "## Skipped on this machine", ""]
        lines += [f"- `{n}`: {r or 'skipped'}" for n, r in sorted(run.skipped.items())]
    rows, notes = peer_rows(run)
    lines += ["", "## Peers, measured in the same run", ""]
    if rows:
        lines += _table(
            ["pair", "subject", "peer", "subject/peer time (> 1: slower)", "per-round range"], rows
        )
    else:
        lines.append("(no pair with both a subject and a peer in this run)")
    lines += [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


# -- a comparison ------------------------------------------------------------------------------

_MARK = {"slower": "🔴 slower", "faster": "🟢 faster", "inconclusive": "🟡 inconclusive"}


def compare_markdown(comp: Comparison) -> str:
    t = comp.threshold
    failed = comp.regressed
    mode = (
        "interleaved in one job (paired rounds A B, B A, ...)"
        if comp.mode == "interleaved"
        else "two saved runs (unpaired)"
    )
    verdicts = ", ".join(
        f"{comp.count(v)} {v}" for v in ("slower", "faster", "inconclusive", "no change")
    )
    lines = [
        f"# Bench comparison: HEAD {comp.head_label} vs BASE {comp.base_label}",
        "",
        f"**{'FAIL' if failed else 'PASS'}**: {verdicts} (of {len(comp.cases)} cases).",
        "",
        f"- mode: {mode}; statistic per round: {comp.stat} time per call",
        f"- rule: *slower* when HEAD/BASE > {1 + t:.2f} and the {comp.confidence:.0%} interval "
        f"lies above 1.0; *faster* when < {1 / (1 + t):.3f} and the interval lies below 1.0; "
        "*inconclusive* when the estimate moved past the threshold but the interval contains "
        "1.0; *no change* otherwise",
    ]
    if comp.settings:
        s = comp.settings
        lines.append(
            f"- settings: {s.get('rounds')} rounds per side, ≥{s.get('inner_rounds')} "
            f"repetitions or {s.get('max_time')} s per case and round, timer {s.get('timer')}, "
            f"{s.get('threads')} thread(s)"
        )
    lines += [f"- ⚠ {w}" for w in comp.warnings]
    if comp.only_base:
        lines.append(f"- cases only in BASE (not compared): {', '.join(comp.only_base)}")
    if comp.only_head:
        lines.append(f"- cases only in HEAD (not compared): {', '.join(comp.only_head)}")
    if comp.redefined:
        lines.append(f"- cases whose work changed (not compared): {', '.join(comp.redefined)}")
    lines.append("")
    rows = []
    order = {"slower": 0, "inconclusive": 1, "faster": 2, "no change": 3}
    for c in sorted(comp.cases, key=lambda c: (order[c.verdict], c.area, c.name)):
        e = c.estimate
        sig = " *" if e.excludes_one else ""
        rows.append(
            [
                f"`{c.name}`",
                c.area,
                seconds(c.base_median),
                seconds(c.head_median),
                f"{e.ratio:.3f}{sig}",
                f"{e.low:.3f}–{e.high:.3f} ({e.confidence:.1%})",
                f"{e.n_base}/{e.n_head}",
                _MARK.get(c.verdict, c.verdict),
            ]
        )
    lines += _table(
        ["case", "area", "BASE", "HEAD", "HEAD/BASE", "interval", "rounds", "verdict"], rows
    )
    lines += [
        "",
        "HEAD/BASE is the ratio of times per call (> 1: HEAD is slower); * marks an interval "
        "that excludes 1.0. See docs/benchmarks.md for the statistics.",
    ]
    return "\n".join(lines) + "\n"
