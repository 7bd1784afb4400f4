"""Shared fixtures of the conformance suite (the plugin itself lives in conformance.plugin)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from conformance.fixtures.gguf_models import fixture_path
from conformance.gate import cached, release
from conformance.snapshots import ConformanceSnapshotExtension


@pytest.fixture
def snapshot(snapshot: Any) -> Any:
    """Syrupy snapshots stored under the top-level snapshots/ tree with the array serializer."""
    return snapshot.use_extension(ConformanceSnapshotExtension)


@pytest.fixture
def load(target: Any) -> Callable[[str], Any]:
    """``load(name)``: the named GGUF fixture loaded by the target (once per session)."""

    def get(name: str) -> Any:
        return cached(target, "load_model", str(fixture_path(name)))

    return get


@pytest.fixture
def new_ctx(target: Any, load: Callable[[str], Any]) -> Iterator[Callable[..., Any]]:
    """``new_ctx(model="gqa", **params)``: a fresh decode context of the target (n_ctx 256
    unless given); closed after the test."""
    made: list[Any] = []

    def make(model: str = "gqa", **params: Any) -> Any:
        params.setdefault("n_ctx", 256)
        ctx = target.new_context(load(model), **params)
        made.append(ctx)
        return ctx

    yield make
    for ctx in made:
        release(ctx)


@pytest.fixture
def make_gen(
    new_ctx: Callable[..., Any], load: Callable[[str], Any], target: Any
) -> Callable[..., Any]:
    """``make_gen(model="gqa", **params)``: a reference Generator over a new context of the
    target (unified KV cache, n_batch 64, n_ubatch 16, n_ctx 256 per sequence unless given)."""
    from reference_impl.generator import Generator

    def make(model: str = "gqa", **params: Any) -> Generator:
        params.setdefault("n_ctx", 256 * params.get("n_seq_max", 1))
        params.setdefault("n_batch", 64)
        params.setdefault("n_ubatch", 16)
        params.setdefault("kv_unified", True)
        ctx = new_ctx(model, **params)
        handle = load(model)
        info = target.model_info(handle)

        def tokenize(text: str) -> list[int]:  # text prompts need tokenizer.tokenize
            return list(target.tokenize(handle, text, True, False))

        eos = info.get("eos", -1)
        return Generator(
            ctx, n_vocab=info["n_vocab"], eos=None if eos < 0 else eos, tokenize=tokenize
        )

    return make
