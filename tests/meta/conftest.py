"""Mutant verdicts travel as a user property of each test's report (``dc_mutant_verdict``), so
that a serial run and an xdist run (whose controller receives the workers' reports) gather the
same ones; ``tests/conftest.py`` turns them into the mutation score."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

VERDICT_PROPERTY = "dc_mutant_verdict"


@pytest.fixture
def record_verdict(record_property: Callable[[str, Any], None]) -> Callable[..., None]:
    def record(mutant_id: str, killed: bool, outcomes: dict[str, str]) -> None:
        record_property(VERDICT_PROPERTY, {"id": mutant_id, "killed": killed, "outcomes": outcomes})

    return record
