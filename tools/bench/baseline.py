"""The committed baseline ``snapshots/bench/baseline.txt``: the project's current figures.

One line per case, columns separated by two or more spaces::

    name  work  unit  median_s  throughput  commit

``median_s`` is the median over rounds of each round's median time per call. Refreshing keeps a
line (value and commit) when the new median is within ``tolerance`` of it and the case did the
same work on the same machine, so a refresh's diff shows figures that really moved.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from tools.bench.report import throughput
from tools.bench.runs import BenchError, Run

BASELINE = Path("snapshots") / "bench" / "baseline.txt"
COLUMNS = ("name", "work", "unit", "median_s", "throughput", "commit")
_SPLIT = re.compile(r"\s{2,}")
_COMMIT = re.compile(r"^[0-9a-f]{7,40}(\+dirty)?$")


@dataclass(frozen=True)
class Line:
    name: str
    work: float
    unit: str
    median: float
    commit: str

    def render(self) -> list[str]:
        return [
            self.name,
            str(int(self.work)) if self.work.is_integer() else repr(self.work),
            self.unit,
            f"{self.median:.4e}",
            throughput(self.work, self.median, self.unit),
            self.commit,
        ]


@dataclass
class Baseline:
    machine: str
    settings: str
    lines: dict[str, Line]


def machine_key(run: Run) -> str:
    m = run.machine
    return f"{m.get('cpu')} | {m.get('cpu_count')} cpus | {m.get('system')} {m.get('machine')}"


def read(path: Path = BASELINE) -> Baseline:
    if not path.is_file():
        raise BenchError(
            f"the bench baseline {path} is missing: create it with 'nox -s snapshots' "
            "(or python -m tools.bench baseline --update)"
        )
    machine = settings = ""
    lines: dict[str, Line] = {}
    problems: list[str] = []
    for no, raw in enumerate(path.read_text().splitlines(), 1):
        text = raw.strip()
        if text.startswith("# machine:"):
            machine = text.removeprefix("# machine:").strip()
        elif text.startswith("# settings:"):
            settings = text.removeprefix("# settings:").strip()
        if not text or text.startswith("#"):
            continue
        cols = _SPLIT.split(text)
        if len(cols) != len(COLUMNS):
            problems.append(f"line {no}: expected {len(COLUMNS)} columns {COLUMNS}, got {cols}")
            continue
        name, work_s, unit, median_s, rate, commit = cols
        try:
            work, median = float(work_s), float(median_s)
        except ValueError:
            problems.append(f"line {no}: work and median_s must be numbers: {text!r}")
            continue
        if not (work > 0 and median > 0 and math.isfinite(work) and math.isfinite(median)):
            problems.append(f"line {no}: work and median_s must be positive: {text!r}")
            continue
        if not _COMMIT.match(commit):
            problems.append(f"line {no}: commit must be a hex id, got {commit!r}")
            continue
        if rate != throughput(work, median, unit):
            problems.append(
                f"line {no}: throughput {rate!r} does not match work/median "
                f"({throughput(work, median, unit)!r}); edited by hand?"
            )
            continue
        if name in lines:
            problems.append(f"line {no}: duplicate case {name}")
            continue
        lines[name] = Line(name, work, unit, median, commit)
    if problems:
        raise BenchError(f"{path} is malformed:\n  " + "\n  ".join(problems))
    return Baseline(machine, settings, lines)


def render(base: Baseline) -> str:
    header = [
        "# decode-conformance bench baseline: the current figures, one line per case.",
        "# median_s: median over rounds (one process each) of each round's median time per call.",
        "# Refresh: nox -s snapshots (python -m tools.bench baseline --update); lines within the",
        "# tolerance of the new figure keep their value and commit, so diffs show real moves.",
        f"# machine: {base.machine}",
        f"# settings: {base.settings}",
    ]
    rows = [list(COLUMNS)] + [base.lines[n].render() for n in sorted(base.lines)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    body = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    body[0] = "# " + body[0]
    return "\n".join(header + body) + "\n"


def refresh(
    old: Baseline | None, run: Run, tolerance: float = 0.10, force: bool = False
) -> tuple[Baseline, dict[str, list[str]]]:
    """The baseline for ``run``: new lines for new, redefined or moved cases; old ones kept."""
    commit = run.label.replace("+dirty", "")[:12] + ("+dirty" if run.commit.get("dirty") else "")
    machine = machine_key(run)
    same_machine = old is not None and old.machine == machine
    s = run.settings
    settings = (
        f"rounds={s.get('rounds')} inner_rounds={s.get('inner_rounds')} "
        f"max_time={s.get('max_time')} timer={s.get('timer')} threads={s.get('threads')}"
    )
    changes: dict[str, list[str]] = {"added": [], "updated": [], "kept": [], "removed": []}
    lines: dict[str, Line] = {}
    for name, case in sorted(run.cases.items()):
        # Rounded as written, so the throughput column reads back identical.
        new = Line(name, case.work, case.unit, float(f"{case.median:.4e}"), commit)
        prev = old.lines.get(name) if old is not None else None
        if prev is None:
            changes["added"].append(name)
            lines[name] = new
        elif (
            not force
            and same_machine
            and (prev.work, prev.unit) == (new.work, new.unit)
            and abs(new.median / prev.median - 1.0) <= tolerance
        ):
            changes["kept"].append(name)
            lines[name] = prev
        else:
            changes["updated"].append(name)
            lines[name] = new
    if old is not None:
        changes["removed"] = sorted(set(old.lines) - set(lines))
    return Baseline(machine, settings, lines), changes


def check(base: Baseline, ran: dict[str, tuple[float, str]], collected: set[str]) -> list[str]:
    """Problems between the baseline and the cases: ``ran`` maps each case that ran to its
    (work, unit); ``collected`` holds every case that exists (some skip on this machine)."""
    problems = []
    for name in sorted(ran):
        line = base.lines.get(name)
        if line is None:
            problems.append(f"no baseline line for bench case {name}")
        elif (line.work, line.unit) != ran[name]:
            problems.append(
                f"baseline for {name} is for {line.work:g} {line.unit}, the case now does "
                f"{ran[name][0]:g} {ran[name][1]}"
            )
    for name in sorted(set(base.lines) - collected):
        problems.append(f"stale baseline line: no bench case {name}")
    if problems:
        problems.append("refresh with 'nox -s snapshots' (python -m tools.bench baseline --update)")
    return problems
