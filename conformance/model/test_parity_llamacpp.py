"""Differential checks against llama.cpp (llama-cpp-python) on the suite's own GGUF fixtures.

The target's full-sequence logits are compared with llama.cpp's (one sequence, every logit
requested, F32 KV cache, the prompt split into ubatches of 512 and of 7 tokens), and greedy
continuations must be identical. Skipped, with the reason, when llama_cpp is not importable.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from conformance.fixtures.gguf_models import FIXTURES, fixture_path
from conformance.model import oracle
from conformance.model.test_forward import PROMPTS, greedy
from reference_impl.batch.types import Batch

pytestmark = [pytest.mark.parity, pytest.mark.requires("model.load", "model.forward")]

ALL_FIXTURES = list(FIXTURES)
NMSE_BAR = 1e-4


@pytest.fixture(scope="module")
def runtime() -> Any:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    from conformance.targets import llamacpp_runtime

    return llamacpp_runtime


@pytest.fixture(scope="module")
def llama(runtime: Any) -> Iterator[Callable[[str, int], Any]]:
    """``llama(fixture, n_ubatch)``: a llama.cpp context over the fixture (F32 KV cache)."""
    models: dict[str, Any] = {}
    contexts: dict[tuple[str, int], Any] = {}

    def get(name: str, n_ubatch: int = 512) -> Any:
        if name not in models:
            models[name] = runtime.LlamaCppModel(fixture_path(name))
        key = (name, n_ubatch)
        if key not in contexts:
            contexts[key] = runtime.LlamaCppContext(
                models[name], n_ctx=256, n_batch=256, n_ubatch=n_ubatch, n_threads=2
            )
        return contexts[key]

    yield get
    for ctx in contexts.values():
        ctx.close()
    for m in models.values():
        m.close()


@pytest.mark.invariant("GGUF-030")
@pytest.mark.parametrize("n_ubatch", [512, 7])
@pytest.mark.parametrize("name", ALL_FIXTURES)
def test_logits_match_llamacpp(
    name: str,
    n_ubatch: int,
    target: Any,
    load: Callable[[str], Any],
    llama: Callable[[str, int], Any],
    request: pytest.FixtureRequest,
) -> None:
    ctx = llama(name, n_ubatch)
    worst = 0.0
    for label, tokens in PROMPTS.items():
        ours = np.asarray(target.forward_logits(load(name), tokens))
        theirs = ctx.logits_all(tokens)
        err = oracle.nmse(theirs, ours)
        worst = max(worst, err)
        assert err <= NMSE_BAR, f"{name}/{label}: NMSE vs llama.cpp {err:.3e}"
    request.node.user_properties.append(("nmse_vs_llamacpp", worst))  # for reports


def llamacpp_greedy(ctx: Any, prompt: list[int], n: int) -> list[int]:
    """Greedy continuation the llama.cpp way: prefill, then one cached token per step."""
    ctx.memory_clear()
    k = len(prompt)
    batch = Batch.from_lists(
        prompt, pos=list(range(k)), seq_ids=[[0]] * k, logits=[0] * (k - 1) + [1]
    )
    assert ctx.decode(batch) == 0
    out: list[int] = []
    for i in range(n):
        tok = int(np.argmax(ctx.logits_ith(-1)))
        out.append(tok)
        assert ctx.decode(Batch.from_lists([tok], pos=[k + i], seq_ids=[[0]], logits=[1])) == 0
    return out


@pytest.mark.invariant("GGUF-031")
@pytest.mark.parametrize("name", ALL_FIXTURES)
def test_greedy_continuation_matches_llamacpp(
    name: str, target: Any, load: Callable[[str], Any], llama: Callable[[str, int], Any]
) -> None:
    ctx = llama(name, 512)
    for label in ("long", "short"):
        ours = greedy(target, load(name), PROMPTS[label], 32)
        theirs = llamacpp_greedy(ctx, PROMPTS[label], 32)
        assert ours == theirs, f"{name}/{label}"
