"""tools.bench suite: the pytest phase is read from pytest's own last line; rows per worker
count with the speedup against the serial run."""

from __future__ import annotations

from pathlib import Path

from tools.bench import suite_time
from tools.bench.suite_time import SuiteRun


def test_pytest_phase_is_read_from_the_summary_line() -> None:
    out = "....\n===== 3 failed, 1245 passed, 2 skipped in 83.21s (0:01:23) =====\n"
    assert suite_time.pytest_seconds(out) == 83.21
    assert suite_time.pytest_seconds("12 passed in 4.50s\n") == 4.5
    assert suite_time.pytest_seconds("no summary") is None


def test_serial_uses_no_xdist_and_workers_use_n() -> None:
    assert suite_time.command(["conformance"], 1, [])[-2:] == ["-p", "no:xdist"]
    assert suite_time.command(["conformance"], 4, ["-k", "x"])[-4:] == ["-n", "4", "-k", "x"]


def test_summary_and_markdown(tmp_path: Path) -> None:
    runs = [
        SuiteRun(1, 1, 100.0, 95.0, 0),
        SuiteRun(2, 1, 55.0, 50.0, 0),
        SuiteRun(1, 2, 110.0, 104.0, 0),
        SuiteRun(2, 2, 60.0, 54.0, 0),
    ]
    rows = suite_time.summarize(runs)
    assert [(r["workers"], r["wall_s"], r["speedup"]) for r in rows] == [
        (1, 105.0, 1.0),
        (2, 57.5, 1.83),
    ]
    md = suite_time.write(runs, ["conformance"], [], tmp_path).read_text()
    assert "| -n 2 | 2 | 57.5 s | 52.0 s | 1.83x | 0 |" in md
    assert (tmp_path / "suite-time.json").exists()
