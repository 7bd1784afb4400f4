"""The whole decode path (``Context.decode``) on the ~25M-parameter f32 fixture, vs llama.cpp.

Unlike ``test_model.py`` (the forward over a hand-made cache), these cases go through the full
flow of both engines: sanitize, split, KV slot planning and apply, KQ mask, forward, output
extraction. Same GGUF file, same thread count (``DC_BENCH_THREADS``), F32 K/V on both sides.

* ``decoder.prefill128``: one 128-token batch into an empty cache (logits of the last token);
* ``decoder.decode128``: 128 single-token decode calls from an empty cache.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from conformance.fixtures.gguf_models import fixture_path
from reference_impl.batch.types import Batch
from tools.bench.common import bench_threads, record

N_TOKENS = 128
FIXTURE = "bench25m"
THREADS = bench_threads()
PARAMS = {"fixture": FIXTURE, "n_tokens": N_TOKENS, "threads": THREADS, "kv": "f32"}
CTX: dict[str, Any] = {"n_ctx": 256, "n_batch": 256, "n_ubatch": 256, "n_threads": THREADS}


def _tokens() -> list[int]:
    rng = np.random.default_rng(1)
    return [1, *(int(t) for t in rng.integers(3, 508, N_TOKENS - 1))]


def _reference_ctx() -> Any:
    from reference_impl.decoder import Context
    from reference_impl.model import Model

    return Context(Model.from_gguf(fixture_path(FIXTURE)), **CTX)


def _llamacpp_ctx() -> Any:
    pytest.importorskip("llama_cpp", reason="llama.cpp peer needs the llamacpp extra")
    from conformance.targets.llamacpp import LlamaCppTarget

    t = LlamaCppTarget()
    return t.new_context(t.load_model(fixture_path(FIXTURE)), **CTX)


ENGINES = {"reference": _reference_ctx, "llama.cpp": _llamacpp_ctx}


def _prefill(ctx: Any, tokens: list[int]) -> None:
    ctx.memory_clear(True)
    assert ctx.decode(Batch.from_lists(tokens)) == 0


def _decode_steps(ctx: Any, tokens: list[int]) -> None:
    ctx.memory_clear(True)
    for t in tokens:
        assert ctx.decode(Batch.from_lists([t])) == 0


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_prefill128(benchmark: Any, engine: str) -> None:
    ctx = ENGINES[engine]()
    tokens = _tokens()
    _prefill(ctx, tokens)
    assert np.isfinite(ctx.get_logits_ith(-1)).all()
    record(
        benchmark,
        area="decoder",
        work=N_TOKENS,
        unit="tokens",
        params=PARAMS,
        pair="decoder.prefill128",
        role="subject" if engine == "reference" else "peer",
        peer=None if engine == "reference" else engine,
    )
    benchmark.pedantic(_prefill, args=(ctx, tokens), rounds=3, iterations=1, warmup_rounds=1)


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_decode128(benchmark: Any, engine: str) -> None:
    ctx = ENGINES[engine]()
    tokens = _tokens()
    record(
        benchmark,
        area="decoder",
        work=N_TOKENS,
        unit="tokens",
        params=PARAMS,
        pair="decoder.decode128",
        role="subject" if engine == "reference" else "peer",
        peer=None if engine == "reference" else engine,
    )
    benchmark.pedantic(_decode_steps, args=(ctx, tokens), rounds=3, iterations=1, warmup_rounds=1)
