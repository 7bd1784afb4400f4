"""The suite's own wall time, serial against pytest-xdist workers (``python -m tools.bench suite``).

Each configuration runs the same pytest command in a child process (one process with
``-p no:xdist``, or ``-n N``); configurations alternate round by round so that a slow spell of
the machine does not fall on one side. Recorded per run: the process's wall time and the
pytest phase as pytest reports it ("... in 83.21s"). Written to ``suite-time.json`` and
``suite-time.md`` next to the other bench reports, with the machine (CPU model, core count).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tools.bench.runs import machine_info

_PYTEST_TIME = re.compile(r" in ([0-9.]+)s(?: \(|\s*=*\s*$)", re.MULTILINE)


@dataclass
class SuiteRun:
    workers: int  # 1: one process, no xdist
    round: int
    wall_s: float
    pytest_s: float | None
    returncode: int


def command(paths: Sequence[str], workers: int, extra: Sequence[str]) -> list[str]:
    dist = ["-p", "no:xdist"] if workers <= 1 else ["-n", str(workers)]
    return [sys.executable, "-m", "pytest", *paths, "-q", "-p", "no:cacheprovider", *dist, *extra]


def pytest_seconds(output: str) -> float | None:
    found = _PYTEST_TIME.findall(output)
    return float(found[-1]) if found else None


def measure(
    paths: Sequence[str],
    workers: Sequence[int],
    rounds: int,
    extra: Sequence[str] = (),
    progress: Callable[[str], None] = print,
) -> list[SuiteRun]:
    env = dict(os.environ)
    env.setdefault("DC_HYPOTHESIS_PROFILE", "ci")
    env.setdefault("TRITON_INTERPRET", "1")
    env["PYTHONHASHSEED"] = "0"
    runs = []
    for r in range(1, rounds + 1):
        for w in workers:
            cmd = command(paths, w, extra)
            start = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            wall = time.perf_counter() - start
            run = SuiteRun(w, r, wall, pytest_seconds(proc.stdout), proc.returncode)
            runs.append(run)
            progress(
                f"round {r}/{rounds}, {'serial' if w <= 1 else f'-n {w}'}: {wall:.1f} s wall"
                f" (pytest {run.pytest_s} s, exit {proc.returncode})"
            )
    return runs


def summarize(runs: Sequence[SuiteRun]) -> list[dict[str, Any]]:
    rows = []
    by_workers: dict[int, list[SuiteRun]] = {}
    for run in runs:
        by_workers.setdefault(run.workers, []).append(run)
    serial = by_workers.get(1)
    base = statistics.median(r.wall_s for r in serial) if serial else None
    for w, rs in sorted(by_workers.items()):
        wall = statistics.median(r.wall_s for r in rs)
        phases = [r.pytest_s for r in rs if r.pytest_s is not None]
        rows.append(
            {
                "workers": w,
                "runs": len(rs),
                "wall_s": round(wall, 1),
                "pytest_s": round(statistics.median(phases), 1) if phases else None,
                "speedup": round(base / wall, 2) if base else None,
                "exit_codes": sorted({r.returncode for r in rs}),
            }
        )
    return rows


def write(runs: Sequence[SuiteRun], paths: Sequence[str], extra: Sequence[str], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    machine = machine_info()
    summary = summarize(runs)
    record = {
        "paths": list(paths),
        "extra": list(extra),
        "machine": machine,
        "cores": os.cpu_count(),
        "summary": summary,
        "runs": [asdict(r) for r in runs],
    }
    (out / "suite-time.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    lines = [
        "# Suite wall time, serial and parallel",
        "",
        f"- Command: `pytest {' '.join([*paths, *extra])}`",
        f"- Machine: {machine.get('cpu')} ({os.cpu_count()} cores)",
        "",
        "| workers | runs | wall (median) | pytest phase | speedup | exit |",
        "|---|---|---|---|---|---|",
    ]
    for row in summary:
        label = "1 (serial)" if row["workers"] <= 1 else f"-n {row['workers']}"
        lines.append(
            f"| {label} | {row['runs']} | {row['wall_s']} s | {row['pytest_s']} s | "
            f"{row['speedup']}x | {','.join(map(str, row['exit_codes']))} |"
        )
    md = out / "suite-time.md"
    md.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return md
