"""The bench cases still work (each body once, no timing) and follow the record() contract."""

from __future__ import annotations

import shutil
from pathlib import Path

from tools.bench.runner import SmokeResult, smoke

ROOT = Path(__file__).resolve().parents[2]


def test_every_bench_case_runs_once(smoke_run: SmokeResult) -> None:
    assert smoke_run.returncode == 0, smoke_run.output[-3000:]
    assert smoke_run.ran, "no bench case ran"
    for entry in smoke_run.entries:
        if entry["outcome"] == "passed":
            info = entry["extra_info"]
            assert info["area"] and info["work"] > 0 and info["unit"], entry
            assert info["role"] in ("subject", "peer"), entry
            if info["role"] == "peer":
                assert info.get("peer"), entry


def test_the_floor_cases_are_there(smoke_run: SmokeResult) -> None:
    assert "test_floor.py::test_memcpy_numpy[64MiB]" in smoke_run.ran
    assert smoke_run.ran["test_floor.py::test_python_loop"] == (100_000.0, "iterations")


def _checkout_with(tmp_path: Path, case_source: str) -> Path:
    """A minimal checkout: the harness, its conftest and one extra case file."""
    root = tmp_path / "checkout"
    shutil.copytree(ROOT / "tools", root / "tools", ignore=shutil.ignore_patterns("test_*.py"))
    (root / "tools" / "bench" / "cases" / "test_extra.py").write_text(case_source)
    return root


def test_a_case_that_does_not_call_record_fails_with_a_message(tmp_path: Path) -> None:
    root = _checkout_with(
        tmp_path,
        "def test_unrecorded(benchmark):\n    benchmark(sum, [1, 2])\n",
    )
    res = smoke(root)
    assert res.returncode == 1
    assert "must use the benchmark fixture and call tools.bench.common.record" in res.output
    assert [e["outcome"] for e in res.entries] == ["failed"]


def test_skipped_cases_are_reported_as_skipped(tmp_path: Path) -> None:
    root = _checkout_with(
        tmp_path,
        "import pytest\n\ndef test_gpu(benchmark):\n    pytest.skip('no GPU here')\n",
    )
    res = smoke(root)
    assert res.returncode == 0, res.output
    assert res.ran == {}
    assert res.collected == {"test_extra.py::test_gpu"}
    assert res.entries[0]["reason"] == "no GPU here"
