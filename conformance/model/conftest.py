"""Fixtures of the model area: GGUF fixture paths and models loaded through the target."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conformance.fixtures.gguf_models import fixture_path


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "parity: differential test against llama.cpp (llama-cpp-python)"
    )


@pytest.fixture(scope="session")
def gguf_path() -> Callable[[str], Path]:
    """``gguf_path(name)``: the cached GGUF file of a named fixture (written on first use)."""
    return fixture_path


@pytest.fixture(scope="session")
def load(target: Any) -> Callable[[str], Any]:
    """``load(name)``: the named fixture loaded by the target (one handle per fixture)."""
    handles: dict[str, Any] = {}

    def _load(name: str) -> Any:
        if name not in handles:
            handles[name] = target.load_model(fixture_path(name))
        return handles[name]

    return _load
