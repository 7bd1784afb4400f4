"""Meta-tests: a run spread over xdist workers, or over shards merged afterwards, reports what
one serial run reports.

The runs use a mutant target on two areas so the report has passed and failed verdicts,
differential tests against the peer and snapshots, and the comparison can fail. The tokenizer
files left out (BPE, UGM, the differential ones) would add only minutes of the same kinds.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

from tests.meta.suite_runs import CONFORMANCE_DIR, run_conformance

_SLOW = ("test_bpe.py", "test_ugm.py", "test_differential.py")
SUBSET = [CONFORMANCE_DIR / "sampling"] + [
    f for f in sorted((CONFORMANCE_DIR / "tokenizer").glob("test_*.py")) if f.name not in _SLOW
]
MUTANT = "smp-top-p-strict"  # fails SMP-031; the rest of the subset passes or skips
ARGS = (f"--target=mutant:{MUTANT}", "--tb=no", "--snapshot-warn-unused")


def verdicts(report: dict[str, Any]) -> dict[str, Any]:
    """Everything a run decides, without what differs between runs (time, paths)."""
    s = report["summary"]
    return {
        "invariants": [
            (i["id"], i["outcome"], i["tests"], i["details"]) for i in report["invariants"]
        ],
        "outcomes": s["outcomes"],
        "areas": s["areas"],
        "skip_reasons": s["skip_reasons"],
        "target": s["target"],
        "commit": s["commit"],
    }


def _once_per_run(factory: pytest.TempPathFactory, name: str, make: Callable[[], Any]) -> Any:
    """``make()``'s JSON result, computed once per pytest run. Under xdist the tests sharing a
    module fixture usually land on different workers, each with its own fixture instance: the
    first worker to take the lock computes the value (minutes of conformance runs) and leaves it
    in the run's shared temporary directory; the others read it."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # a single process: the fixture runs once
        return make()
    shared = factory.getbasetemp().parent / f"{name}.json"
    with FileLock(f"{shared}.lock"):
        if shared.is_file():
            return json.loads(shared.read_text(encoding="utf-8"))
        value = make()
        shared.write_text(json.dumps(value), encoding="utf-8")
        return value


@pytest.fixture(scope="module")
def serial(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    def run() -> dict[str, Any]:
        out = tmp_path_factory.mktemp("serial")
        _, report = run_conformance(out, *ARGS, "-p", "no:xdist", timeout=600, paths=SUBSET)
        outcomes = report["summary"]["outcomes"]
        assert outcomes["failed"] >= 1 and outcomes["passed"] >= 30, outcomes  # telling subset
        return report

    report: dict[str, Any] = _once_per_run(tmp_path_factory, "serial-report", run)
    return report


@pytest.fixture(scope="module")
def shard_reports(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    def run() -> list[str]:
        paths = []
        for i in range(1, 5):
            out = tmp_path_factory.mktemp(f"shard{i}")
            _, report = run_conformance(out, *ARGS, f"--shard={i}/4", timeout=600, paths=SUBSET)
            assert report["shard"]["index"] == i and report["shard"]["selected"], report["shard"]
            paths.append(str(out / "conformance.json"))
        return paths

    return [Path(p) for p in _once_per_run(tmp_path_factory, "shard-reports", run)]


def merge(*parts: Path, out: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "conformance.report", "merge", *map(str, parts), "-o", str(out)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_xdist_run_reports_what_a_serial_run_reports(
    serial: dict[str, Any], tmp_path: Path
) -> None:
    proc, report = run_conformance(tmp_path, *ARGS, "-n", "2", timeout=600, paths=SUBSET)
    assert "bringing up nodes" in proc.stdout, proc.stdout[-2000:]  # xdist did run
    assert verdicts(report) == verdicts(serial)


def test_four_shards_merged_report_what_a_serial_run_reports(
    serial: dict[str, Any], shard_reports: list[Path], tmp_path: Path
) -> None:
    selected = [set(json.loads(p.read_text())["shard"]["selected"]) for p in shard_reports]
    assert all(selected) and sum(map(len, selected)) == len(set().union(*selected))
    proc = merge(*shard_reports, out=tmp_path)
    assert proc.returncode == 0, proc.stderr
    merged = json.loads((tmp_path / "conformance.json").read_text())
    assert merged["summary"]["shards"] == 4
    assert verdicts(merged) == verdicts(serial)


def test_merge_refuses_a_missing_shard(shard_reports: list[Path], tmp_path: Path) -> None:
    proc = merge(*shard_reports[:2], shard_reports[3], out=tmp_path)
    assert proc.returncode == 2 and not (tmp_path / "conformance.json").exists()
    assert proc.stderr.strip() == "merge: missing shard 3/4 (have 1, 2, 4)"


def test_merge_refuses_a_duplicated_shard(shard_reports: list[Path], tmp_path: Path) -> None:
    proc = merge(*shard_reports, shard_reports[1], out=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "shard 2/4 given twice" in proc.stderr


def test_merge_refuses_a_shard_from_another_commit(
    shard_reports: list[Path], tmp_path: Path
) -> None:
    other = json.loads(shard_reports[2].read_text())
    other["summary"]["commit"]["id"] = "0" * 40
    foreign = tmp_path / "shard3-other-commit.json"
    foreign.write_text(json.dumps(other))
    proc = merge(shard_reports[0], shard_reports[1], foreign, shard_reports[3], out=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert f"{foreign}: commit '{'0' * 40}' differs" in proc.stderr


def test_merge_refuses_a_report_that_is_not_a_shard(
    serial: dict[str, Any], shard_reports: list[Path], tmp_path: Path
) -> None:
    whole = tmp_path / "whole.json"
    whole.write_text(json.dumps(serial))
    proc = merge(whole, *shard_reports, out=tmp_path)
    assert proc.returncode == 2
    assert "not a shard report" in proc.stderr


SNAPSHOT_FILES = [
    CONFORMANCE_DIR / "sampling" / "test_snapshots.py",
    CONFORMANCE_DIR / "tokenizer" / "test_spm.py",
]


def test_snapshots_spread_over_workers_are_all_used_and_an_unused_one_is_found(
    tmp_path: Path,
) -> None:
    root = tmp_path / "snapshots"
    shutil.copytree(CONFORMANCE_DIR.parent / "snapshots", root)
    env = {"DC_SNAPSHOT_ROOT": str(root)}
    args = ("-n", "2", "--tb=short")
    proc, _ = run_conformance(tmp_path / "ok", *args, timeout=600, paths=SNAPSHOT_FILES, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:]  # no worker's snapshot counted as unused
    assert "unused" not in proc.stdout
    ambr = root / "conformance" / "sampling" / "test_snapshots.ambr"
    ambr.write_text(ambr.read_text() + "# name: test_planted_but_never_run\n  'stale'\n# ---\n")
    proc, _ = run_conformance(tmp_path / "bad", *args, timeout=600, paths=SNAPSHOT_FILES, env=env)
    assert proc.returncode != 0 and "1 snapshot unused" in proc.stdout, proc.stdout[-3000:]
