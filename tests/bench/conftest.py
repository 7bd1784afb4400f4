"""Fixtures for the bench harness's own tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.bench.runner import SmokeResult, smoke

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def smoke_run() -> SmokeResult:
    """Every bench case run once (``--benchmark-disable``), shared by the tests that need it."""
    return smoke(ROOT)
