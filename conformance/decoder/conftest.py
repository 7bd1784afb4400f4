"""Fixtures of the decoder area: models loaded through the target, context factories."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from conformance.fixtures.gguf_models import fixture_path


@pytest.fixture(scope="session")
def load(target: Any) -> Callable[[str], Any]:
    """``load(name)``: the named GGUF fixture loaded by the target (cached per session)."""
    handles: dict[str, Any] = {}

    def get(name: str) -> Any:
        if name not in handles:
            handles[name] = target.load_model(fixture_path(name))
        return handles[name]

    return get


@pytest.fixture
def new_ctx(target: Any, load: Callable[[str], Any]) -> Iterator[Callable[..., Any]]:
    """``new_ctx(model="gqa", **params)``: a fresh context; closed after the test."""
    made: list[Any] = []

    def make(model: str = "gqa", **params: Any) -> Any:
        params.setdefault("n_ctx", 256)
        ctx = target.new_context(load(model), **params)
        made.append(ctx)
        return ctx

    yield make
    for ctx in made:
        close = getattr(ctx, "close", None)
        if close is not None:
            close()
