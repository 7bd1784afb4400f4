"""Harness hooks for every bench case (owned by the bench harness, not by the areas).

* The contract: a bench case that passes must have called ``tools.bench.common.record()``;
  otherwise the case fails with a message saying so (the harness could not report it).
* ``DC_BENCH_MANIFEST=path``: write every case's outcome and ``extra_info`` there as JSON, also
  under ``--benchmark-disable``, so the harness learns which cases ran and which were skipped.
* Machine info in pytest-benchmark's JSON gains the bench thread count and, when a case loaded
  torch, its GPU (if any).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

REQUIRED = ("area", "work", "unit")
_MANIFEST: list[dict[str, Any]] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    rep = yield
    if rep.when == "setup" and rep.skipped:
        _note(item, "skipped", _skip_reason(rep))
    if rep.when != "call":
        return rep
    if rep.skipped:
        _note(item, "skipped", _skip_reason(rep))
        return rep
    if not rep.passed:
        _note(item, "failed")
        return rep
    bench = getattr(item, "funcargs", {}).get("benchmark")
    info = getattr(bench, "extra_info", None)
    missing = list(REQUIRED) if info is None else [k for k in REQUIRED if k not in info]
    if missing:
        rep.outcome = "failed"
        rep.longrepr = (
            f"{item.nodeid}: a bench case must use the benchmark fixture and call "
            "tools.bench.common.record(benchmark, area=..., work=..., unit=...) "
            f"(missing: {', '.join(missing)})"
        )
        _note(item, "failed")
        return rep
    _note(item, "passed", extra=dict(info or {}))
    return rep


def _skip_reason(rep: pytest.TestReport) -> str:
    if isinstance(rep.longrepr, tuple) and len(rep.longrepr) == 3:
        return str(rep.longrepr[2]).removeprefix("Skipped: ")
    return ""


def _note(item: pytest.Item, outcome: str, reason: str = "", extra: Any = None) -> None:
    _MANIFEST.append(
        {"nodeid": item.nodeid, "outcome": outcome, "reason": reason, "extra_info": extra}
    )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = os.environ.get("DC_BENCH_MANIFEST")
    if path:
        Path(path).write_text(json.dumps(_MANIFEST, indent=1, default=str) + "\n")


def pytest_benchmark_update_machine_info(
    config: pytest.Config, machine_info: dict[str, Any]
) -> None:
    machine_info["dc_bench_threads"] = os.environ.get("DC_BENCH_THREADS")
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        machine_info["gpu"] = torch.cuda.get_device_name(0)
