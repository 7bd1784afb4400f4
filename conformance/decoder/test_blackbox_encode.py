"""Encode seen through a public API alone (DEC-049, black-box): ``llama_encode`` on the
encoder-only ``bert`` fixture (``model.arch.bert``), read through per-token embeddings
(pooling NONE, ``decoder.pooling``) and ``seq_pos_*``.

Every token is an output whatever its flag, attention is non-causal and missing positions are
numbered from 0 at every call: each row equals the float64 oracle's encoding of the whole
sequence at positions 0.. (``conformance.model.oracle``, the oracle of GGUF-052) within the F32
bound, and a prefix encodes to other rows than the same tokens followed by more (a causal
encode would give the prefix's rows). Nothing stays in memory. The white-box test
(test_flow_failures.py) reads the output mapping and uses a decoder model, on which llama.cpp
0.3.36's llama_encode crashes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from conformance.assertions import assert_nmse, nmse
from conformance.decoder.helpers import batch, memory_view
from conformance.fixtures.bert_model import BERT_POOLING, bert_fixture_path
from conformance.gate import cached
from conformance.model import oracle

pytestmark = [
    pytest.mark.invariant("DEC-049"),
    pytest.mark.requires(
        "model.load",
        "model.arch.bert",
        "decoder.encode",
        "decoder.embeddings",
        "decoder.pooling",
        "decoder.memory_ops",
    ),
]

NMSE_BAR = 1e-6  # F32 weights: the bound of GGUF-052
CLS, SEP = 2, 3  # [CLS] and [SEP] in the WordPiece fixture vocabulary
TOKENS = [CLS, 40, 311, 95, 17, 208, SEP]


def rows(ctx: Any, n: int) -> np.ndarray:
    return np.stack([np.asarray(ctx.get_embeddings_ith(i)) for i in range(n)]).astype(np.float64)


def expected(tokens: Sequence[int]) -> np.ndarray:
    return np.asarray(oracle.bert_embeddings(bert_fixture_path(), list(tokens)), dtype=np.float64)


def test_encode_is_one_non_causal_pass_with_every_token_an_output(target: Any) -> None:
    model = cached(target, "load_model", str(bert_fixture_path()))
    ctx = target.new_context(
        model, n_ctx=64, n_batch=64, n_ubatch=64, embeddings=True, pooling=BERT_POOLING["none"]
    )
    n = len(TOKENS)
    want = expected(TOKENS)
    prefix = expected(TOKENS[:3])
    assert nmse(want[:3], prefix) > NMSE_BAR, "the fixture must tell causal from non-causal"
    for call in range(2):  # positions restart from 0: nothing of the first call is kept
        assert ctx.encode(batch(TOKENS, out=[0] * n)) == 0, f"call {call}"
        assert_nmse(want, rows(ctx, n), NMSE_BAR, f"call {call}: every token, non-causal")
        assert memory_view(ctx, [0]) == {0: (-1, -1)}, f"call {call}: no memory"
    assert ctx.encode(batch(TOKENS[:3], out=[0, 0, 1])) == 0
    assert_nmse(prefix, rows(ctx, 3), NMSE_BAR, "the prefix alone")
