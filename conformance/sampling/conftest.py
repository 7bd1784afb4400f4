"""Fixtures of the sampling conformance tests (helpers live in support.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest


@pytest.fixture
def make_chain(target: Any) -> Iterator[Callable[[Any], Any]]:
    """``make_chain(spec)`` -> a chain handle of the target, freed after the test."""
    handles: list[Any] = []

    def make(spec: Any) -> Any:
        handle = target.sampler_chain_init(spec)
        handles.append(handle)
        return handle

    yield make
    for handle in handles:
        target.sampler_free(handle)
