"""Collects mutant verdicts and attaches the mutation score to the conformance report."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from conformance.mutants import all_mutants
from conformance.report import merge_mutation

_VERDICTS: dict[str, dict[str, Any]] = {}


@pytest.fixture(scope="session")
def mutant_verdicts() -> dict[str, dict[str, Any]]:
    return _VERDICTS


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not _VERDICTS:
        return
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
