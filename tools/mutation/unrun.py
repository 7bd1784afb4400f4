"""Mutation sites that their area's conformance tests never execute: certain survivors, found
without running a single mutant.

Each area's conformance folder runs once under line coverage (the same reference target, no peer
and hypothesis profile as a mutant run), and every site of that area whose statement never ran is
listed. Such a site survives whatever its mutation, so the list is the cheap, complete part of
the survivor crop: a fresh mutation sample finds the rest (lines that run but whose effect no
check reads). A listed site that is not triaged in triage.txt is *new* and fails the command,
like a new survivor of ``run``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tools.mutation.run import read_triage
from tools.mutation.sites import ROOT, Site, all_sites, test_folders


def executed_lines(area: str, workdir: Path) -> tuple[dict[str, set[int]], str]:
    """``path -> executed line numbers`` of reference_impl/ and kernels/ over one run of
    ``conformance/<area>``, and the run's last output line."""
    from coverage import CoverageData  # a test dependency; only this command needs it

    data_file = workdir / f"{area}.coverage"
    env = {
        **os.environ,
        "DC_HYPOTHESIS_PROFILE": "ci",
        "DC_MUTATION_RUN": "1",
        "PYTHONHASHSEED": "0",
        "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET", "1"),
        "OMP_NUM_THREADS": "1",
    }
    cmd = [
        sys.executable, "-m", "coverage", "run", f"--data-file={data_file}",
        "--source=reference_impl,kernels", "-m", "pytest", f"conformance/{area}",
        "--target", "reference", "--peer", "none", "-q", "-p", "no:cacheprovider",
        "-p", "no:xdist", "--no-header", "--assert=plain",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    tail = (proc.stdout + proc.stderr).strip().splitlines()
    last = tail[-1] if tail else ""
    if proc.returncode != 0:
        raise SystemExit(
            f"conformance/{area} failed under coverage (exit {proc.returncode}): {last}"
        )
    data = CoverageData(basename=str(data_file))
    data.read()
    out: dict[str, set[int]] = {}
    for name in data.measured_files():
        out[Path(name).resolve().relative_to(ROOT).as_posix()] = set(data.lines(name) or ())
    return out, last


def statement_start(path: str, line: int, parsers: dict[str, object]) -> int:
    """The first line of the statement holding ``line`` (itself outside multi-line ones)."""
    from coverage.python import PythonParser

    parser = parsers.get(path)
    if parser is None:
        parser = PythonParser(filename=str(ROOT / path))
        parser.parse_source()
        parsers[path] = parser
    assert isinstance(parser, PythonParser)
    return int(parser.first_line(line))


def unrun_sites(sites: Sequence[Site], lines: dict[str, set[int]]) -> list[Site]:
    """The sites whose statement never ran. Both sides go through the statement's first line:
    a site inside a multi-line statement, and a tracer that records a wrapped ``if (`` under
    the line of its condition (Python 3.11), both meet there."""
    parsers: dict[str, object] = {}
    ran = {
        path: {statement_start(path, n, parsers) for n in lines.get(path, ())}
        for path in {s.path for s in sites}
    }
    return [s for s in sites if statement_start(s.path, s.line, parsers) not in ran[s.path]]


def unrun(areas: Sequence[str] | None, jobs: int, out: Path) -> int:
    sites = all_sites()
    by_area: dict[str, list[Site]] = defaultdict(list)
    for s in sites:
        by_area[s.area].append(s)
    chosen = sorted(a for a in by_area if not areas or a in areas)
    folders = {s.path: [f.removeprefix("conformance/") for f in test_folders(s)] for s in sites}
    needed = sorted({f for a in chosen for s in by_area[a] for f in folders[s.path]})
    triage = read_triage()
    rows: dict[str, dict[str, object]] = {}
    new: list[Site] = []
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max(1, jobs)) as pool:
        runs = {a: pool.submit(executed_lines, a, Path(tmp)) for a in needed}
        for area in chosen:
            last = runs[area].result()[1]
            # a shared file counts as run where any folder its mutants run against ran it
            lines = {
                path: set().union(*(runs[f].result()[0].get(path, set()) for f in folders[path]))
                for path in {s.path for s in by_area[area]}
            }
            missed = unrun_sites(by_area[area], lines)
            fresh = [s for s in missed if s.id not in triage]
            new += fresh
            gaps = sum(triage.get(s.id, ("", ""))[0] == "gap" for s in missed)
            rows[area] = {
                "sites": len(by_area[area]),
                "unrun": len(missed),
                "triaged": len(missed) - len(fresh),
                "gaps": gaps,
                "new": [s.id for s in fresh],
                "unrun_sites": [s.id for s in missed],
            }
            print(
                f"{area:10s} {len(by_area[area]):5d} sites  {len(missed):3d} unrun "
                f"({len(missed) - len(fresh)} triaged, {gaps} of them gaps)   [{last}]",
                flush=True,
            )
    out.mkdir(parents=True, exist_ok=True)
    (out / "mutation_unrun.json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    for s in new:
        print(f"NEW unrun site {s.id}: {s.describe()}")
    if new:
        print(
            f"{len(new)} sites no conformance test of their area executes: make a test reach "
            "them, remove the dead code, or triage them in tools/mutation/triage.txt",
            file=sys.stderr,
        )
    return 1 if new else 0
