"""Context parameters: what a context derives from the requested values (DEC-001 .. DEC-010)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from conformance.assertions import assert_code
from conformance.decoder.helpers import batch, invalid, prompt
from conformance.fixtures.bert_model import BERT_POOLING, bert_fixture_path
from conformance.gate import cached, release

pytestmark = pytest.mark.requires("decoder.params")

N_CTX_TRAIN = 256  # of the fixture models


@pytest.mark.invariant("DEC-001", "DEC-010")
def test_n_seq_max_is_at_least_one_and_at_most_256(new_ctx: Callable[..., Any]) -> None:
    assert new_ctx(n_seq_max=0).n_seq_max() == 1
    assert new_ctx(n_seq_max=256, kv_unified=True).n_seq_max() == 256
    with pytest.raises(Exception):  # noqa: B017 - any engine error: no context is returned
        new_ctx(n_seq_max=257)


@pytest.mark.invariant("DEC-002", "DEC-010")
@pytest.mark.parametrize(
    ("requested", "expected"), [(300, 512), (512, 512), (1, 256), (0, N_CTX_TRAIN)]
)
def test_n_ctx_is_rounded_up_to_256(
    new_ctx: Callable[..., Any], requested: int, expected: int
) -> None:
    ctx = new_ctx(n_ctx=requested, n_batch=64)
    assert ctx.n_ctx() == expected


@pytest.mark.invariant("DEC-004", "DEC-010")
def test_causal_n_batch_is_capped_by_the_unpadded_n_ctx(new_ctx: Callable[..., Any]) -> None:
    ctx = new_ctx(n_ctx=300, n_batch=1000, n_ubatch=64)
    assert ctx.n_batch() == 300
    assert new_ctx(n_ctx=300, n_batch=100, n_ubatch=64).n_batch() == 100
    assert new_ctx(n_ctx=0, n_batch=1000, n_ubatch=64).n_batch() == N_CTX_TRAIN


@pytest.mark.requires("decoder.non_causal")
@pytest.mark.invariant("DEC-004", "DEC-003")
def test_non_causal_n_batch_is_the_request(new_ctx: Callable[..., Any]) -> None:
    assert new_ctx(n_ctx=300, n_batch=1000, n_ubatch=64, attention_type=1).n_batch() == 1000


@pytest.mark.invariant("DEC-005", "DEC-010")
def test_n_ubatch_derivation(new_ctx: Callable[..., Any]) -> None:
    assert new_ctx(n_ctx=256, n_batch=100, n_ubatch=0).n_ubatch() == 100
    assert new_ctx(n_ctx=256, n_batch=100, n_ubatch=300).n_ubatch() == 100
    assert new_ctx(n_ctx=256, n_batch=100, n_ubatch=32).n_ubatch() == 32
    # n_ubatch = 0 means the *requested* n_batch, then capped by the derived one
    assert new_ctx(n_ctx=128, n_batch=1000, n_ubatch=0).n_ubatch() == 128


@pytest.mark.invariant("DEC-007", "DEC-010")
def test_n_ctx_split_among_sequences_can_grow(new_ctx: Callable[..., Any]) -> None:
    ctx = new_ctx(n_ctx=512, n_batch=64, n_seq_max=3)
    assert (ctx.n_ctx_seq(), ctx.n_ctx()) == (256, 768)
    unified = new_ctx(n_ctx=512, n_batch=64, n_seq_max=3, kv_unified=True)
    assert (unified.n_ctx_seq(), unified.n_ctx()) == (512, 512)
    assert new_ctx(n_ctx=1024, n_batch=64, n_seq_max=2).n_ctx_seq() == 512


@pytest.mark.requires("decoder.embeddings")
@pytest.mark.invariant("DEC-009", "DEC-010")
def test_default_parameters(target: Any, load: Callable[[str], Any]) -> None:
    ctx = target.new_context(load("gqa"))
    try:
        assert ctx.n_ctx() == 512
        assert ctx.n_batch() == 512  # min(n_ctx 512, n_batch 2048)
        assert ctx.n_ubatch() == 512
        assert ctx.n_seq_max() == 1
        # embeddings off by default: no per-token embeddings
        assert invalid(lambda: ctx.get_embeddings_ith(0))
    finally:
        release(ctx)
    # n_ctx 512 caps n_batch and n_ubatch: with room above 2048 the defaults themselves show
    big = target.new_context(load("gqa"), n_ctx=4096)
    try:
        assert (big.n_batch(), big.n_ubatch()) == (2048, 512)
    finally:
        release(big)


@pytest.mark.requires("decoder.logits", "decoder.memory_ops", "model.arch.gemma3")
@pytest.mark.invariant("DEC-009")
def test_swa_full_is_the_default(new_ctx: Callable[..., Any]) -> None:
    # gemma3 slides over 8 positions. Without swa_full the window cache would have
    # pad(8 + n_ubatch 8) = 256 cells and, once full, reuse the oldest one, moving seq_pos_min
    # (MEM-015); the default keeps all 512, so position 0 is still there after 288 tokens.
    ctx = new_ctx("gemma3", n_ctx=512, n_batch=32, n_ubatch=8)
    toks = prompt(288, start=11, stride=23)
    for start in range(0, len(toks), 32):
        out = [0] * 31 + [1]
        assert (
            ctx.decode(batch(toks[start : start + 32], pos=range(start, start + 32), out=out)) == 0
        )
    assert (ctx.seq_pos_min(0), ctx.seq_pos_max(0)) == (0, 287)


@pytest.mark.requires("decoder.logits", "decoder.non_causal")
@pytest.mark.invariant("DEC-003")
def test_attention_type_decides_causality(new_ctx: Callable[..., Any]) -> None:
    """Under causal attention a token's logits ignore later tokens; non-causally they do not."""
    a = prompt(6)
    b = [*a[:-1], (a[-1] + 11) % 400 + 3]

    def first_row(attention_type: int, toks: list[int]) -> np.ndarray:
        ctx = new_ctx(n_ctx=256, n_batch=16, n_ubatch=16, attention_type=attention_type)
        assert ctx.decode(batch(toks, all_out=True)) == 0
        return ctx.get_logits_ith(0)

    assert np.array_equal(first_row(0, a), first_row(0, b))
    assert not np.allclose(first_row(1, a), first_row(1, b))
    # UNSPECIFIED follows the model (llama: causal)
    assert np.array_equal(first_row(-1, a), first_row(-1, b))


@pytest.mark.invariant("DEC-008")
@pytest.mark.requires("decoder.logits", "decoder.embeddings", "decoder.pooling")
def test_unspecified_pooling_resolves_to_the_models_none(new_ctx: Callable[..., Any]) -> None:
    ctx = new_ctx(n_batch=16, embeddings=True, pooling=-1)
    assert ctx.decode(batch(prompt(4))) == 0
    assert ctx.get_embeddings_ith(0).shape[-1] > 0  # per-token embeddings: pooling NONE
    assert invalid(lambda: ctx.get_embeddings_seq(0))


@pytest.mark.invariant("DEC-008", "DEC-010")
@pytest.mark.requires("decoder.embeddings", "decoder.pooling")
def test_pooling_type_reports_the_resolved_pooling(
    target: Any, new_ctx: Callable[..., Any]
) -> None:
    """-1 takes the model's pooling (the bert fixture declares MEAN; the decoder fixture none,
    so NONE); any other value is the context's own."""
    assert new_ctx(embeddings=True, pooling=-1).pooling_type() == 0
    bert = cached(target, "load_model", str(bert_fixture_path()))
    got = {}
    for pooling in (-1, 0, 2, 3):
        ctx = target.new_context(bert, n_ctx=64, n_batch=64, n_ubatch=64, pooling=pooling)
        try:
            got[pooling] = int(ctx.pooling_type())
        finally:
            release(ctx)
    assert got == {-1: BERT_POOLING["mean"], 0: 0, 2: 2, 3: 3}, got


@pytest.mark.invariant("DEC-059")
@pytest.mark.uses("decoder.errors")
def test_more_sequences_than_output_rows_is_refused_at_creation(
    new_ctx: Callable[..., Any], target: Any
) -> None:
    with pytest.raises(Exception) as exc:
        new_ctx(n_seq_max=128, n_batch=64, kv_unified=True)
    if target.has("decoder.errors"):
        assert_code(exc.value, "DEC_N_OUTPUTS_MAX", field="n_seq_max")
    assert new_ctx(n_seq_max=64, n_batch=64, kv_unified=True).n_seq_max() == 64
