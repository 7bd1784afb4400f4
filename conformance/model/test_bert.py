"""bert: an encoder-only model through a context without memory (spec/model.md GGUF-052;
spec/decoder.md DEC-048, DEC-066).

The ``bert`` fixture (2 layers, 32-value embeddings, 4 heads, 64 learned positions, 2 token
types, MEAN pooling by default, WordPiece vocabulary) has no output head: its contexts give
embeddings, per token (pooling NONE) or pooled per sequence (MEAN, CLS, LAST). Every check
compares them with the float64 oracle (``oracle.bert_embeddings``) and, in the differential
tests, with the peer (llama.cpp by default), within NMSE 1e-6 (F32 weights). A bert context has
no memory: ``decode`` encodes the batch (every token an output, non-causal, positions from 0
when missing) and keeps nothing, and the memory operations act on nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conformance.assertions import assert_nmse, nmse, raises_code
from conformance.decoder.helpers import batch
from conformance.fixtures.bert_model import (
    BERT_FIXTURES,
    BERT_POOLING,
    bert_fixture_path,
    write_bert_gguf,
)
from conformance.gate import cached
from conformance.model import oracle

NAME = "bert"
CFG = BERT_FIXTURES[NAME]
NMSE_BAR = 1e-6  # F32 weights: both engines compute the same float32 function
CLS, SEP = 2, 3  # [CLS] and [SEP] in the WordPiece fixture vocabulary
PROMPTS: dict[str, list[int]] = {
    "one": [CLS],
    "short": [CLS, 40, 311, 95, SEP],
    # 48 tokens (of the 64 positions), ids spread over the vocabulary
    "long": [CLS, *((37 * i + 11) % 700 + 5 for i in range(46)), SEP],
}
POOLINGS = list(BERT_POOLING)  # none, mean, cls, last

pytestmark = pytest.mark.requires("model.load", "model.arch.bert")


def _context(engine: Any, path: Path | str, **params: Any) -> Any:
    model = cached(engine, "load_model", str(path))
    return engine.new_context(model, **{"n_ctx": 64, "n_batch": 64, "n_ubatch": 64, **params})


def pool(hidden: np.ndarray, pooling: str) -> np.ndarray:
    """One sequence's pooled row from its hidden states in position order (NONE: all rows)."""
    if pooling == "mean":
        return hidden.mean(axis=0)
    if pooling == "cls":
        return hidden[0]
    if pooling == "last":
        return hidden[-1]
    return hidden


def read(ctx: Any, pooling: str, seqs: Sequence[int], n_tokens: int) -> np.ndarray:
    """Per-token rows in batch order (NONE) or the pooled row of each of ``seqs``."""
    if pooling == "none":
        return np.stack([np.asarray(ctx.get_embeddings_ith(i)) for i in range(n_tokens)])
    return np.stack([np.asarray(ctx.get_embeddings_seq(s)) for s in seqs])


def encode(engine: Any, b: Any, pooling: str, seqs: Sequence[int], **params: Any) -> np.ndarray:
    """A fresh bert context of ``engine`` decodes ``b``; its embeddings (see :func:`read`)."""
    ctx = _context(
        engine,
        bert_fixture_path(),
        embeddings=True,
        pooling=BERT_POOLING[pooling],
        **params,
    )
    assert ctx.decode(b) == 0
    return read(ctx, pooling, seqs, b.n_tokens).astype(np.float64)


# Three sequences interleaved in one batch, each at its own positions from 0. n_ubatch is a
# multiple of n_seq_max: llama.cpp aborts creating a MEAN-pooling context otherwise (DEC-057).
SEQS = {0: PROMPTS["short"], 1: PROMPTS["long"][:9], 2: [CLS, 77, 78, 79, SEP, 5, 6]}
MULTI = {"n_seq_max": len(SEQS), "n_batch": 60, "n_ubatch": 60}


def interleaved() -> tuple[Any, list[tuple[int, int]]]:
    """The batch of :data:`SEQS`, round-robin, and (sequence, position) of each token."""
    order: list[tuple[int, int]] = []
    for p in range(max(len(t) for t in SEQS.values())):
        order += [(s, p) for s, toks in SEQS.items() if p < len(toks)]
    b = batch(
        [SEQS[s][p] for s, p in order],
        seqs=[[s] for s, _ in order],
        pos=[p for _, p in order],
        all_out=True,
    )
    return b, order


def oracle_rows(order: list[tuple[int, int]], pooling: str) -> np.ndarray:
    """What the interleaved batch must give: each sequence encoded alone by the oracle."""
    hidden = {s: oracle.bert_embeddings(bert_fixture_path(), toks) for s, toks in SEQS.items()}
    if pooling == "none":
        return np.stack([hidden[s][p] for s, p in order])
    return np.stack([pool(hidden[s], pooling) for s in SEQS])


@pytest.mark.invariant("GGUF-052", "DEC-048")
@pytest.mark.requires("decoder.logits", "decoder.embeddings", "decoder.pooling")
@pytest.mark.parametrize("pooling", POOLINGS)
@pytest.mark.parametrize("prompt", list(PROMPTS))
def test_embeddings_match_oracle(prompt: str, pooling: str, target: Any) -> None:
    toks = PROMPTS[prompt]
    got = encode(target, batch(toks, pos=list(range(len(toks))), all_out=True), pooling, [0])
    want = pool(oracle.bert_embeddings(bert_fixture_path(), toks), pooling)
    assert_nmse(want.reshape(got.shape), got, NMSE_BAR, f"{prompt}/{pooling}")


@pytest.mark.invariant("GGUF-052", "DEC-048")
@pytest.mark.requires("decoder.logits", "decoder.embeddings", "decoder.pooling")
@pytest.mark.parametrize("pooling", POOLINGS)
def test_embeddings_match_peer(
    pooling: str, target: Any, peer: Any, request: pytest.FixtureRequest
) -> None:
    worst = 0.0
    for prompt, toks in PROMPTS.items():
        b = batch(toks, pos=list(range(len(toks))), all_out=True)
        ours, theirs = encode(target, b, pooling, [0]), encode(peer, b, pooling, [0])
        err = nmse(theirs, ours)
        worst = max(worst, err)
        assert err <= NMSE_BAR, f"{prompt}/{pooling}: NMSE vs the peer {err:.3e}"
    request.node.user_properties.append(("nmse_vs_peer", worst))


@pytest.mark.invariant("GGUF-052", "DEC-048")
@pytest.mark.requires("decoder.logits", "decoder.embeddings", "decoder.pooling")
@pytest.mark.parametrize("pooling", POOLINGS)
def test_multi_sequence_batch_matches_oracle(pooling: str, target: Any) -> None:
    # each sequence of an interleaved batch is encoded as if alone: attention stays inside
    # its sequence, and each pooled row comes from its own tokens
    b, order = interleaved()
    got = encode(target, b, pooling, list(SEQS), **MULTI)
    assert_nmse(oracle_rows(order, pooling), got, NMSE_BAR, pooling)


@pytest.mark.invariant("GGUF-052", "DEC-048")
@pytest.mark.requires("decoder.logits", "decoder.embeddings", "decoder.pooling")
@pytest.mark.parametrize("pooling", POOLINGS)
def test_multi_sequence_batch_matches_peer(
    pooling: str, target: Any, peer: Any, request: pytest.FixtureRequest
) -> None:
    b, _ = interleaved()
    ours = encode(target, b, pooling, list(SEQS), **MULTI)
    theirs = encode(peer, b, pooling, list(SEQS), **MULTI)
    err = nmse(theirs, ours)
    assert err <= NMSE_BAR, f"{pooling}: NMSE vs the peer {err:.3e}"
    request.node.user_properties.append(("nmse_vs_peer", err))


@pytest.mark.invariant("DEC-048", "DEC-066")
@pytest.mark.requires("decoder.logits", "decoder.embeddings", "decoder.memory_ops")
def test_decode_keeps_nothing(target: Any) -> None:
    # decode on a context without memory encodes: a second batch without positions starts
    # at position 0 again and sees nothing of the first, and the memory reports no position
    ctx = _context(target, bert_fixture_path(), embeddings=True)  # the model's MEAN pooling
    first, second = PROMPTS["long"][:20], PROMPTS["short"]
    assert ctx.decode(batch(first, pos=list(range(len(first))), all_out=True)) == 0
    assert (ctx.seq_pos_min(0), ctx.seq_pos_max(0)) == (-1, -1)
    assert ctx.decode(batch(second)) == 0  # positions and output flags left to the engine
    want = oracle.bert_embeddings(bert_fixture_path(), second).mean(axis=0)
    assert_nmse(want, ctx.get_embeddings_seq(0), NMSE_BAR, "second batch")
    assert (ctx.seq_pos_min(0), ctx.seq_pos_max(0)) == (-1, -1)


@pytest.mark.invariant("DEC-066")
@pytest.mark.requires("decoder.logits", "decoder.embeddings", "decoder.memory_ops")
def test_memory_ops_act_on_nothing(target: Any) -> None:
    ctx = _context(target, bert_fixture_path(), embeddings=True, n_seq_max=2)
    toks = PROMPTS["short"]
    assert ctx.decode(batch(toks, pos=list(range(len(toks))), all_out=True)) == 0
    before = np.asarray(ctx.get_embeddings_seq(0)).copy()
    assert ctx.seq_rm(0, -1, -1) is True
    assert ctx.seq_rm(0, 1, 3) is True
    ctx.seq_cp(0, 1, -1, -1)
    ctx.seq_keep(0)
    ctx.seq_add(0, 0, -1, 5)
    ctx.seq_div(0, 0, -1, 2)
    ctx.memory_clear(True)
    for s in (0, 1):
        assert (ctx.seq_pos_min(s), ctx.seq_pos_max(s)) == (-1, -1), f"sequence {s}"
    # the operations changed nothing: the last outputs stay, the same batch encodes the same
    assert np.array_equal(np.asarray(ctx.get_embeddings_seq(0)), before)
    assert ctx.decode(batch(toks, pos=list(range(len(toks))), all_out=True)) == 0
    assert np.array_equal(np.asarray(ctx.get_embeddings_seq(0)), before)


@pytest.mark.invariant("DEC-048", "DEC-066")
@pytest.mark.requires("decoder.logits", "decoder.embeddings", "decoder.memory_ops")
def test_decode_keeps_nothing_like_peer(target: Any, peer: Any) -> None:
    def run(engine: Any) -> tuple[np.ndarray, list[int]]:
        ctx = _context(engine, bert_fixture_path(), embeddings=True, n_seq_max=2)
        assert ctx.decode(batch(PROMPTS["long"][:20], seqs=[[1]] * 20)) == 0
        assert ctx.decode(batch(PROMPTS["short"])) == 0
        seen = [ctx.seq_pos_min(0), ctx.seq_pos_max(0), ctx.seq_pos_max(1)]
        seen.append(int(ctx.seq_rm(1, 0, -1)))
        return np.asarray(ctx.get_embeddings_seq(0), dtype=np.float64), seen

    ours, ours_seen = run(target)
    theirs, theirs_seen = run(peer)
    assert ours_seen == theirs_seen
    assert_nmse(theirs, ours, NMSE_BAR, "second batch vs the peer")


# -- the file's keys ------------------------------------------------------------------------------

KEY = "bert."
VARIANTS: dict[str, dict[str, Any]] = {
    # optional tensors: no token-type table, no Q/K/V/O/FFN biases
    "no-token-types": {"omit_tensors": ["token_types.weight"]},
    "no-biases": {
        "omit_tensors": [
            f"blk.{il}.{m}.bias"
            for il in range(CFG.n_layer)
            for m in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_up", "ffn_down")
        ]
    },
    "eps-0.5": {"override_keys": {KEY + "attention.layer_norm_epsilon": 0.5}},
}


@pytest.fixture(scope="module")
def variant_files(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    folder = tmp_path_factory.mktemp("bert-variants")
    made: dict[str, Path] = {}

    def path(variant: str) -> Path:
        if variant not in made:
            made[variant] = write_bert_gguf(CFG, folder / f"{variant}.gguf", **VARIANTS[variant])
        return made[variant]

    return path


def _token_rows(engine: Any, path: Path, toks: list[int]) -> np.ndarray:
    ctx = _context(engine, path, embeddings=True, pooling=0)
    assert ctx.decode(batch(toks, pos=list(range(len(toks))), all_out=True)) == 0
    return read(ctx, "none", [0], len(toks)).astype(np.float64)


@pytest.mark.invariant("GGUF-052")
@pytest.mark.requires("decoder.logits", "decoder.embeddings", "decoder.pooling")
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_variants_match_oracle_and_peer(
    variant: str, target: Any, peer: Any, variant_files: Callable[[str], Path]
) -> None:
    path, toks = variant_files(variant), PROMPTS["long"]
    ours = _token_rows(target, path, toks)
    assert_nmse(oracle.bert_embeddings(path, toks), ours, NMSE_BAR, f"{variant} vs the oracle")
    assert_nmse(_token_rows(peer, path, toks), ours, NMSE_BAR, f"{variant} vs the peer")
    # the variant is not the fixture in disguise
    moved = nmse(_token_rows(target, bert_fixture_path(), toks), ours)
    assert moved > 1e-4, f"{variant}: the embeddings did not move ({moved:.2e})"


@pytest.mark.invariant("GGUF-052")
@pytest.mark.requires("decoder.logits", "decoder.embeddings")
@pytest.mark.parametrize("pooling", ["mean", "cls", "last"])
def test_model_pooling_is_the_default(pooling: str, target: Any, tmp_path: Path) -> None:
    # no pooling parameter: the context pools as bert.pooling_type says
    path = write_bert_gguf(
        CFG,
        tmp_path / f"{pooling}.gguf",
        override_keys={KEY + "pooling_type": BERT_POOLING[pooling]},
    )
    toks = PROMPTS["short"]
    ctx = _context(target, path, embeddings=True)
    assert ctx.decode(batch(toks, pos=list(range(len(toks))), all_out=True)) == 0
    want = pool(oracle.bert_embeddings(path, toks), pooling)
    assert_nmse(want, np.asarray(ctx.get_embeddings_seq(0)), NMSE_BAR, pooling)


@pytest.mark.invariant("GGUF-052")
@pytest.mark.requires("decoder.logits", "decoder.params", "decoder.embeddings", "decoder.pooling")
@pytest.mark.parametrize("causal", [False, True])
def test_causal_key_sets_the_context_attention(
    causal: bool, target: Any, peer: Any, tmp_path: Path
) -> None:
    # attention.causal is the context's default attention type: a causal context's n_batch is
    # capped at n_ctx, a non-causal one's is not; the encode itself is non-causal either way
    path = write_bert_gguf(
        CFG, tmp_path / f"causal-{causal}.gguf", override_keys={KEY + "attention.causal": causal}
    )
    toks = PROMPTS["long"][:30]  # within the causal context's n_batch of 32
    rows = {}
    for name, engine in (("target", target), ("peer", peer)):
        ctx = _context(
            engine, path, n_ctx=32, n_batch=128, n_ubatch=128, embeddings=True, pooling=0
        )
        assert ctx.n_batch() == (32 if causal else 128), name
        assert ctx.decode(batch(toks, pos=list(range(len(toks))), all_out=True)) == 0
        rows[name] = read(ctx, "none", [0], len(toks)).astype(np.float64)
    assert_nmse(oracle.bert_embeddings(path, toks), rows["target"], NMSE_BAR, "vs the oracle")
    assert_nmse(rows["peer"], rows["target"], NMSE_BAR, "vs the peer")


@pytest.mark.invariant("DEC-048")
@pytest.mark.requires("decoder.logits", "decoder.embeddings", "decoder.errors")
def test_decode_beyond_n_ubatch_refused(target: Any) -> None:
    # encode runs one ubatch: a decode (an encode) of more tokens than n_ubatch is refused
    # (llama.cpp aborts: GGML_ASSERT in encode, spec/decoder.md D1)
    ctx = _context(target, bert_fixture_path(), n_batch=64, n_ubatch=16, embeddings=True)
    toks = PROMPTS["long"][:17]
    assert ctx.decode(batch(toks, pos=list(range(17)), all_out=True)) == -1
    assert ctx.last_error is not None and ctx.last_error.code == "DEC_UBATCH_TOO_SMALL"
    assert ctx.decode(batch(toks[:16], pos=list(range(16)), all_out=True)) == 0


@pytest.mark.invariant("DEC-067")
@pytest.mark.requires("decoder.logits", "decoder.embeddings", "decoder.pooling", "decoder.errors")
def test_position_beyond_the_table_refused(target: Any) -> None:
    # 64 learned positions: position 64 is refused before anything runs (llama.cpp stops the
    # process on the row lookup, decision D1); the last one, 63, encodes
    ctx = _context(target, bert_fixture_path(), embeddings=True, pooling=0)
    toks = PROMPTS["short"]
    n = CFG.n_ctx_train
    assert ctx.decode(batch(toks, pos=list(range(n - 4, n + 1)), all_out=True)) == -1
    err = ctx.last_error
    assert err is not None
    assert (err.code, err.field, err.index) == ("DEC_POS_RANGE", "pos", 4)
    pos = list(range(n - len(toks), n))
    assert ctx.decode(batch(toks, pos=pos, all_out=True)) == 0
    got = read(ctx, "none", [0], len(toks))
    assert_nmse(oracle.bert_embeddings(bert_fixture_path(), toks, pos), got, NMSE_BAR, "last")


BAD_FILES: dict[str, tuple[dict[str, Any], str, str]] = {
    "no-token-type-count": (
        {"omit_keys": ["tokenizer.ggml.token_type_count"]},
        "GGUF_MISSING_KEY",
        "tokenizer.ggml.token_type_count",
    ),
    "zero-token-types": (
        {"override_keys": {"tokenizer.ggml.token_type_count": 0}},
        "GGUF_INVALID_HPARAM",
        "tokenizer.ggml.token_type_count",
    ),
    "no-epsilon": (
        {"omit_keys": [KEY + "attention.layer_norm_epsilon"]},
        "GGUF_MISSING_KEY",
        KEY + "attention.layer_norm_epsilon",
    ),
    "no-norm-bias": (
        {"omit_tensors": ["blk.1.attn_output_norm.bias"]},
        "GGUF_MISSING_TENSOR",
        "blk.1.attn_output_norm.bias",
    ),
    "no-positions": (
        {"omit_tensors": ["position_embd.weight"]},
        "GGUF_MISSING_TENSOR",
        "position_embd.weight",
    ),
    "short-position-table": (
        {
            "override_tensors": {
                "position_embd.weight": np.zeros((CFG.n_ctx_train - 1, CFG.n_embd), np.float32)
            }
        },
        "GGUF_SHAPE_MISMATCH",
        "position_embd.weight",
    ),
    "classifier-head": (
        {"override_tensors": {"cls.weight": np.zeros((CFG.n_embd, CFG.n_embd), np.float32)}},
        "GGUF_UNSUPPORTED_FEATURE",
        "cls.weight",
    ),
    "fused-qkv": (
        {
            "override_tensors": {
                "blk.0.attn_qkv.weight": np.zeros((3 * CFG.n_embd, CFG.n_embd), np.float32)
            }
        },
        "GGUF_UNSUPPORTED_FEATURE",
        "blk.0.attn_qkv.weight",
    ),
    "llama-norm": (
        {"override_tensors": {"blk.0.attn_norm.weight": np.ones(CFG.n_embd, np.float32)}},
        "GGUF_UNEXPECTED_TENSOR",
        "blk.0.attn_norm.weight",
    ),
}


@pytest.mark.invariant("GGUF-052")
@pytest.mark.requires("model.errors")
@pytest.mark.parametrize("case", list(BAD_FILES))
def test_unusable_file_refused(case: str, target: Any, tmp_path: Path) -> None:
    kwargs, code, field = BAD_FILES[case]
    path = write_bert_gguf(CFG, tmp_path / f"{case}.gguf", **kwargs)
    with raises_code(code, field=field):
        target.load_model(path)
