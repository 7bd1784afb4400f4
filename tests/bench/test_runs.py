"""Saved runs: file format, lookup, bad files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.bench.compare import synthetic_run
from tools.bench.runs import BenchError, Run, find_saved, load_run, save_run


def _save(tmp_path: Path, label: str, created: str) -> Path:
    run = synthetic_run(label, {"c": [1.0, 2.0]})
    run.created = created
    return save_run(run, tmp_path)


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    run = synthetic_run("0123456789abcdef", {"c": [1.0, 2.0, 3.0]})
    run.cases["c"].params = {"n_tokens": 8}
    run.skipped = {"gpu": "no GPU"}
    path = save_run(run, tmp_path)
    assert "0123456789ab" in path.name
    back = load_run(path)
    assert back.cases["c"].medians == [1.0, 2.0, 3.0]
    assert back.cases["c"].params == {"n_tokens": 8}
    assert back.skipped == {"gpu": "no GPU"}
    assert back.label == "0123456789ab"
    assert back.cases["c"].median == 2.0


def test_dirty_runs_say_so_in_their_name(tmp_path: Path) -> None:
    run = synthetic_run("0123456789abcdef", {"c": [1.0]})
    run.commit["dirty"] = True
    assert save_run(run, tmp_path).stem.endswith("0123456789ab_dirty")


def test_find_saved(tmp_path: Path) -> None:
    old = _save(tmp_path, "aaaaaaaaaaaa", "2025-01-01T00:00:00Z")
    new = _save(tmp_path, "bbbbbbbbbbbb", "2025-01-02T00:00:00Z")
    assert find_saved("latest", tmp_path) == new
    assert find_saved("latest~1", tmp_path) == old
    assert find_saved("aaaa", tmp_path) == old
    with pytest.raises(BenchError, match="only 2 saved runs"):
        find_saved("latest~2", tmp_path)
    with pytest.raises(BenchError, match="no saved run of a commit starting with 'cccc'"):
        find_saved("cccc", tmp_path)
    with pytest.raises(BenchError, match="no saved runs"):
        find_saved("latest", tmp_path / "empty")


def test_bad_files_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(BenchError, match="does not exist"):
        load_run(tmp_path / "missing.json")
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    with pytest.raises(BenchError, match="not valid JSON"):
        load_run(junk)
    pb = tmp_path / "pytest-benchmark.json"
    pb.write_text(json.dumps({"benchmarks": []}))
    with pytest.raises(BenchError, match="not a decode-conformance bench run"):
        load_run(pb)
    doc = synthetic_run("aaaaaaa", {"c": [1.0]}).to_json()
    del doc["cases"][0]["unit"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(BenchError, match="malformed case record"):
        load_run(bad)


def test_run_json_keeps_pytest_benchmark_output() -> None:
    run = synthetic_run("aaaaaaa", {"c": [1.0]})
    run.raw = [{"benchmarks": [], "version": "5.3.1"}]
    doc = run.to_json()
    assert doc["pytest_benchmark"] == run.raw
    assert Run.from_json(doc).raw == run.raw
