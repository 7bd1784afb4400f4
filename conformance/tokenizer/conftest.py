"""Fixtures of the tokenizer area (the fixture vocabulary lives in every GGUF fixture)."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.fixtures.gguf_models import fixture_path

VOCAB_FIXTURE = "mha"  # every fixture carries the same vocabulary


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "parity: differential test against llama.cpp (llama-cpp-python)"
    )


@pytest.fixture(scope="session")
def vocab_path() -> Any:
    return fixture_path(VOCAB_FIXTURE)


@pytest.fixture(scope="session")
def tok_model(target: Any, vocab_path: Any) -> Any:
    """The fixture model loaded by the target, used for its vocabulary."""
    return target.load_model(vocab_path)
