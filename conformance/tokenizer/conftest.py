"""Fixtures of the tokenizer area: the SPM fixture vocabulary (in every GGUF model fixture) and
the vocabulary-only BPE fixtures (one per pre type, :mod:`conformance.fixtures.vocabularies`)."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.fixtures.gguf_models import fixture_path
from conformance.fixtures.vocabularies import BPE_PRE_TYPES, bpe_vocab_path
from conformance.gate import cached

VOCAB_FIXTURE = "mha"  # every fixture carries the same vocabulary


@pytest.fixture(scope="session")
def vocab_path() -> Any:
    return fixture_path(VOCAB_FIXTURE)


@pytest.fixture
def tok_model(target: Any, vocab_path: Any) -> Any:
    """The fixture model loaded by the target (once per session), used for its vocabulary."""
    return cached(target, "load_model", str(vocab_path))


@pytest.fixture(params=BPE_PRE_TYPES)
def bpe_pre(request: Any) -> str:
    """A ``tokenizer.ggml.pre`` value with a BPE fixture."""
    return str(request.param)


@pytest.fixture
def bpe_path(bpe_pre: str) -> Any:
    return bpe_vocab_path(bpe_pre)


@pytest.fixture
def bpe_vocab(target: Any, bpe_path: Any) -> Any:
    """The BPE fixture of ``bpe_pre`` loaded vocabulary-only by the target."""
    return cached(target, "load_vocab", str(bpe_path))
