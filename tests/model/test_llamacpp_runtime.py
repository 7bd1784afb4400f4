"""Unit tests of the llama.cpp wrapper (skipped when llama-cpp-python is not installed)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from conformance.fixtures.gguf_models import fixture_path
from reference_impl.batch.types import Batch

lc = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
from conformance.targets.llamacpp import runtime as rt  # noqa: E402


@pytest.fixture(scope="module")
def model() -> Iterator[Any]:
    m = rt.LlamaCppModel(fixture_path("gqa"))
    yield m
    m.close()


@pytest.fixture
def ctx(model: Any) -> Iterator[Any]:
    c = rt.LlamaCppContext(model, n_ctx=256, n_batch=64, n_ubatch=16, n_seq_max=2, n_threads=1)
    yield c
    c.close()


def test_model_info_and_meta(model: Any) -> None:
    assert model.info() == {
        "n_vocab": 508,
        "n_embd": 64,
        "n_layer": 3,
        "n_head": 8,
        "n_head_kv": 2,
        "n_ctx_train": 256,
        "eos": 2,
    }
    assert model.meta("general.name") == "decode-conformance fixture gqa"
    assert model.meta("no.such.key") is None
    assert (model.bos, model.eos) == (1, 2)


def test_context_parameters(ctx: Any) -> None:
    assert ctx.n_ctx >= 256 and ctx.n_batch == 64 and ctx.n_ubatch == 16 and ctx.n_seq_max == 2


def test_null_fields_take_llamacpp_defaults(ctx: Any) -> None:
    """Batch fields left None reach llama_decode as NULL: positions continue from memory,
    sequence 0, and only the last token has logits."""
    full = ctx.logits_all([1, 290, 97, 300])
    ctx.memory_clear()
    assert ctx.decode(Batch.get_one([1, 290])) == 0
    assert ctx.seq_pos_max(0) == 1
    assert ctx.logits_ith(0) is None  # no logits requested for token 0
    assert ctx.decode(Batch.get_one([97, 300])) == 0
    assert ctx.seq_pos_max(0) == 3
    assert np.allclose(ctx.logits_ith(-1), full[3], atol=1e-5)


def test_two_sequences_and_memory_ops(model: Any) -> None:
    # one unified cache: with per-sequence streams, seq_keep(0) leaves seq 1's stream alone
    ctx = rt.LlamaCppContext(model, n_ctx=256, n_seq_max=2, n_threads=1, kv_unified=True)
    batch = Batch.from_lists(
        [1, 290, 1, 97], pos=[0, 1, 0, 1], seq_ids=[[0], [0], [1], [1]], logits=[0, 1, 0, 1]
    )
    assert ctx.decode(batch) == 0
    a, b = ctx.logits_ith(1), ctx.logits_ith(3)  # batch indices of the output tokens
    assert ctx.logits_ith(2) is None
    assert a is not None and b is not None and not np.allclose(a, b)
    assert (ctx.seq_pos_min(1), ctx.seq_pos_max(1)) == (0, 1)
    assert ctx.seq_rm(1, -1, -1)
    assert ctx.seq_pos_max(1) == -1
    ctx.seq_cp(0, 1, -1, -1)
    assert ctx.seq_pos_max(1) == 1
    ctx.seq_keep(0)
    assert ctx.seq_pos_max(1) == -1
    ctx.seq_add(0, 0, -1, 5)
    assert (ctx.seq_pos_min(0), ctx.seq_pos_max(0)) == (5, 6)
    ctx.close()


def test_invalid_batch_returns_minus_one(ctx: Any) -> None:
    ctx.memory_clear()
    assert ctx.decode(Batch.from_lists([1, 508], pos=[0, 1], seq_ids=[[0], [0]])) == -1
    with pytest.raises(rt.LlamaCppError):
        ctx.logits_all([1, -3])


def test_tokenizer_round_trip(model: Any) -> None:
    ids = model.tokenize("Hello world!", True, False)
    assert ids[0] == 1
    assert model.detokenize(ids[1:]) == b"Hello world!"
    assert model.token_to_piece(1, special=True) == b"<s>"
    assert model.token_to_piece(1) == b""


def test_unloadable_file_raises(tmp_path: Any) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file")
    with pytest.raises(rt.LlamaCppError):
        rt.LlamaCppModel(bad)
