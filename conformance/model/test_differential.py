"""Differential checks against the peer (llama.cpp by default) on the suite's own GGUF fixtures.

The target's full-sequence logits are compared with the peer's (one sequence, every logit
requested, read from a decode context whose prompt is split into ubatches of 512 and of 7
tokens), and greedy continuations must be identical.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from conformance.assertions import nmse
from conformance.fixtures.gguf_models import FIXTURES, fixture_path
from conformance.gate import cached
from conformance.model.test_forward import PROMPTS, greedy
from reference_impl.batch.types import Batch

pytestmark = pytest.mark.requires("model.load", "model.forward", "decoder.logits")

ALL_FIXTURES = list(FIXTURES)
NMSE_BAR = 1e-4


def _context(engine: Any, name: str, n_ubatch: int) -> Any:
    model = cached(engine, "load_model", str(fixture_path(name)))
    return engine.new_context(model, n_ctx=256, n_batch=256, n_ubatch=n_ubatch, n_threads=2)


def decoded_logits(engine: Any, name: str, tokens: list[int], n_ubatch: int) -> np.ndarray:
    """Every row of one sequence decoded from an empty context."""
    ctx = _context(engine, name, n_ubatch)
    n = len(tokens)
    assert ctx.decode(Batch.from_lists(tokens, pos=list(range(n)), logits=[1] * n)) == 0
    return np.stack([np.asarray(ctx.get_logits_ith(i)) for i in range(n)])


def decoded_greedy(engine: Any, name: str, prompt: list[int], n: int) -> list[int]:
    """Greedy continuation the llama.cpp way: prefill, then one cached token per step."""
    ctx = _context(engine, name, 512)
    k = len(prompt)
    batch = Batch.from_lists(
        prompt, pos=list(range(k)), seq_ids=[[0]] * k, logits=[0] * (k - 1) + [1]
    )
    assert ctx.decode(batch) == 0
    out: list[int] = []
    for i in range(n):
        tok = int(np.argmax(ctx.get_logits_ith(-1)))
        out.append(tok)
        assert ctx.decode(Batch.from_lists([tok], pos=[k + i], seq_ids=[[0]], logits=[1])) == 0
    return out


@pytest.mark.invariant("GGUF-030")
@pytest.mark.parametrize("n_ubatch", [512, 7])
@pytest.mark.parametrize("name", ALL_FIXTURES)
def test_logits_match_peer(
    name: str,
    n_ubatch: int,
    target: Any,
    peer: Any,
    load: Callable[[str], Any],
    request: pytest.FixtureRequest,
) -> None:
    worst = 0.0
    for label, tokens in PROMPTS.items():
        ours = np.asarray(target.forward_logits(load(name), tokens))
        theirs = decoded_logits(peer, name, tokens, n_ubatch)
        err = nmse(theirs, ours)
        worst = max(worst, err)
        assert err <= NMSE_BAR, f"{name}/{label}: NMSE vs the peer {err:.3e}"
    request.node.user_properties.append(("nmse_vs_peer", worst))  # for reports


@pytest.mark.invariant("GGUF-031")
@pytest.mark.parametrize("name", ALL_FIXTURES)
def test_greedy_continuation_matches_peer(
    name: str, target: Any, peer: Any, load: Callable[[str], Any]
) -> None:
    for label in ("long", "short"):
        ours = greedy(target, load(name), PROMPTS[label], 32)
        theirs = decoded_greedy(peer, name, PROMPTS[label], 32)
        assert ours == theirs, f"{name}/{label}"
