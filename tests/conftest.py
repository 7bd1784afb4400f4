"""Shared by every test under tests/: pytester, and the mutation score of the meta-tests.

The score is gathered here, not in tests/meta/, because an xdist controller loads only the
conftest files of its command-line paths and receives every worker's reports through
``pytest_runtest_logreport``: each mutant test's verdict rides on its report as a user property
(tests/meta/conftest.py) and the process that writes the report (the controller, or the only
process of a serial run) attaches the score to ``reports/conformance.json``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["pytester"]

_VERDICTS: dict[str, dict[str, Any]] = {}


@pytest.fixture(autouse=True)
def _child_runs_are_not_xdist_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under xdist the worker's environment says it is one (PYTEST_XDIST_WORKER...); a pytest
    or bench run started by a test inherits it and then behaves as a worker would (syrupy
    defers its unused-snapshot verdict to a controller that does not exist, pytest-benchmark
    turns itself off). The child runs of these tests are each a whole session of their own."""
    for var in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(var, raising=False)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call":
        return
    for name, value in report.user_properties:
        if name == "dc_mutant_verdict":
            _VERDICTS[value["id"]] = value


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not _VERDICTS or hasattr(session.config, "workerinput"):
        return
    from conformance.mutants import all_mutants
    from conformance.report import merge_mutation

    registry = all_mutants()
    mutants = []
    for mid in sorted(_VERDICTS):
        m = registry[mid]
        v = _VERDICTS[mid]
        mutants.append(
            {
                "id": mid,
                "area": m.area,
                "description": m.description,
                "kills": list(m.kills),
                "killed": v["killed"],
                "outcomes": v["outcomes"],
            }
        )
    killed = sum(1 for m in mutants if m["killed"])
    mutation = {
        "total": len(mutants),
        "killed": killed,
        "score": killed / len(mutants),
        "registered": len(registry),
        "mutants": mutants,
    }
    report_dir = Path(os.environ.get("DC_REPORT_DIR", "reports"))
    merge_mutation(report_dir, mutation)
