"""Decode-phase fixtures: the generator fixtures (traces of decode steps)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from conformance.decoder.conftest import load, new_ctx  # noqa: F401 - shared fixtures
from reference_impl.generator import Generator


@pytest.fixture
def make_gen(
    new_ctx: Callable[..., Any], load: Callable[[str], Any], target: Any
) -> Callable[..., Generator]:
    """``make_gen(model="gqa", **params)``: a Generator over a new context (unified KV cache,
    n_ubatch >= n_seq_max unless given)."""

    def make(model: str = "gqa", **params: Any) -> Generator:
        params.setdefault("n_ctx", 256 * params.get("n_seq_max", 1))
        params.setdefault("n_batch", 64)
        params.setdefault("n_ubatch", 16)
        params.setdefault("kv_unified", True)
        ctx = new_ctx(model, **params)
        handle = load(model)
        info = target.model_info(handle)
        tokenize = None
        if target.has("model.tokenize"):
            tokenize = lambda text: target.tokenize(handle, text, True, False)  # noqa: E731
        return Generator(
            ctx, n_vocab=info["n_vocab"], eos=getattr(handle, "eos", None), tokenize=tokenize
        )

    return make
