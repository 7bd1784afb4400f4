"""Fixtures of the model area: GGUF fixture paths (models load through the root ``load``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from conformance.fixtures.gguf_models import fixture_path


@pytest.fixture(scope="session")
def gguf_path() -> Callable[[str], Path]:
    """``gguf_path(name)``: the cached GGUF file of a named fixture (written on first use)."""
    return fixture_path
