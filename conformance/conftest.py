"""Shared fixtures of the conformance suite (the plugin itself lives in conformance.plugin)."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.snapshots import ConformanceSnapshotExtension


@pytest.fixture
def snapshot(snapshot: Any) -> Any:
    """Syrupy snapshots stored under the top-level snapshots/ tree with the array serializer."""
    return snapshot.use_extension(ConformanceSnapshotExtension)
