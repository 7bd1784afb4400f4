"""snapshots/bench/baseline.txt: format, refresh rules, and coverage of every bench case."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.bench import baseline
from tools.bench.compare import synthetic_run
from tools.bench.runner import SmokeResult
from tools.bench.runs import BenchError

ROOT = Path(__file__).resolve().parents[2]


def _run(samples: dict[str, list[float]], commit: str = "a" * 40, cpu: str = "cpu-x"):
    run = synthetic_run(commit, samples)
    run.machine = {"cpu": cpu, "cpu_count": 2, "system": "Linux", "machine": "x86_64"}
    run.settings = {"rounds": 4, "inner_rounds": 5, "max_time": 0.2, "timer": "wall"}
    return run


def test_render_and_read_round_trip(tmp_path: Path) -> None:
    new, changes = baseline.refresh(None, _run({"t.py::a": [1e-3, 2e-3], "t.py::b": [5e-6]}))
    assert changes["added"] == ["t.py::a", "t.py::b"]
    path = tmp_path / "baseline.txt"
    path.write_text(baseline.render(new))
    back = baseline.read(path)
    assert back.lines == new.lines
    assert back.machine == new.machine
    assert back.lines["t.py::a"].median == pytest.approx(1.5e-3)
    assert back.lines["t.py::a"].commit == "a" * 12
    text = path.read_text()
    assert "t.py::b  1     items  5.0000e-06  200 k items/s  aaaaaaaaaaaa" in text.splitlines()


@pytest.mark.parametrize("work", [1048576.0, 67108864.0, 0.5, 1e-3, 123456789.25])
def test_work_reads_back_exactly(tmp_path: Path, work: float) -> None:
    run = _run({"a": [1.0]})
    run.cases["a"].work = work
    new, _ = baseline.refresh(None, run)
    path = tmp_path / "b.txt"
    path.write_text(baseline.render(new))
    assert baseline.read(path).lines["a"].work == work


def test_refresh_keeps_lines_within_tolerance(tmp_path: Path) -> None:
    old, _ = baseline.refresh(None, _run({"a": [1.0], "b": [1.0], "gone": [1.0]}))
    new, changes = baseline.refresh(old, _run({"a": [1.05], "b": [1.5], "c": [1.0]}, "b" * 40))
    assert changes == {"added": ["c"], "updated": ["b"], "kept": ["a"], "removed": ["gone"]}
    assert new.lines["a"].median == 1.0 and new.lines["a"].commit == "a" * 12
    assert new.lines["b"].median == 1.5 and new.lines["b"].commit == "b" * 12
    _, changes = baseline.refresh(old, _run({"a": [1.05]}, "b" * 40), force=True)
    assert changes["updated"] == ["a"]
    _, changes = baseline.refresh(old, _run({"a": [1.05]}, "b" * 40, cpu="cpu-y"))
    assert changes["updated"] == ["a"]  # figures from another machine are never mixed in


def test_dirty_runs_are_marked(tmp_path: Path) -> None:
    run = _run({"a": [1.0]})
    run.commit["dirty"] = True
    new, _ = baseline.refresh(None, run)
    assert new.lines["a"].commit == "a" * 12 + "+dirty"
    path = tmp_path / "b.txt"
    path.write_text(baseline.render(new))
    assert baseline.read(path).lines["a"].commit.endswith("+dirty")


def test_missing_baseline_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(
        BenchError, match=r"baseline .* is missing: create it with 'nox -s snapshots'"
    ):
        baseline.read(tmp_path / "nope.txt")


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("a  1  items  1.0000e+00  1 items/s", "expected 6 columns"),
        ("a  x  items  1.0000e+00  1 items/s  abcdef1", "must be numbers"),
        ("a  1  items  -1.0000e+00  -1 items/s  abcdef1", "must be positive"),
        ("a  1  items  1.0000e+00  1 items/s  nothex!", "commit must be a hex id"),
        ("a  1  items  1.0000e+00  7 items/s  abcdef1", "does not match work/median"),
    ],
)
def test_malformed_lines_are_reported_with_their_number(
    tmp_path: Path, line: str, problem: str
) -> None:
    path = tmp_path / "b.txt"
    path.write_text("# header\n" + line + "\n")
    with pytest.raises(BenchError, match=f"line 2: .*{problem}"):
        baseline.read(path)


def test_duplicate_lines_are_reported(tmp_path: Path) -> None:
    path = tmp_path / "b.txt"
    path.write_text("a  1  items  1.0000e+00  1 items/s  abcdef1\n" * 2)
    with pytest.raises(BenchError, match="duplicate case a"):
        baseline.read(path)


def test_check_names_missing_stale_and_redefined_cases() -> None:
    base, _ = baseline.refresh(None, _run({"kept": [1.0], "old": [1.0], "moved": [1.0]}))
    ran = {"kept": (1.0, "items"), "moved": (2.0, "items"), "new": (1.0, "items")}
    problems = baseline.check(base, ran, collected={"kept", "moved", "new", "gpu-only"})
    assert "no baseline line for bench case new" in problems
    assert "stale baseline line: no bench case old" in problems
    assert any(p.startswith("baseline for moved is for 1 items") for p in problems)
    assert problems[-1].startswith("refresh with 'nox -s snapshots'")
    assert baseline.check(base, {"kept": (1.0, "items")}, {"kept", "old", "moved"}) == []


def test_committed_baseline_covers_every_case_that_runs(smoke_run: SmokeResult) -> None:
    assert smoke_run.returncode == 0, smoke_run.output[-3000:]
    base = baseline.read(ROOT / baseline.BASELINE)
    problems = baseline.check(base, smoke_run.ran, smoke_run.collected)
    assert not problems, "\n".join(problems)
