"""Fixtures of the tokenizer area (the fixture vocabulary lives in every GGUF fixture)."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.fixtures.gguf_models import fixture_path
from conformance.gate import cached

VOCAB_FIXTURE = "mha"  # every fixture carries the same vocabulary


@pytest.fixture(scope="session")
def vocab_path() -> Any:
    return fixture_path(VOCAB_FIXTURE)


@pytest.fixture
def tok_model(target: Any, vocab_path: Any) -> Any:
    """The fixture model loaded by the target (once per session), used for its vocabulary."""
    return cached(target, "load_model", str(vocab_path))
