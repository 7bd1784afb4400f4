"""The iSWA memory through decode, without a peer: the gemma3 fixture against the float64 oracle
(DEC-065).

Layers 0-4 of the fixture slide over an 8-position window, layer 5 is global. A prompt longer
than the window, decoded in ubatches shorter than it, then cached one-token steps: every
logits row must be the oracle's for the whole sequence so far, which holds only when the
sliding layers attend through the window cache's own mask.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from conformance.assertions import assert_nmse
from conformance.decoder.helpers import batch
from conformance.fixtures.gguf_models import fixture_path
from conformance.model import oracle

pytestmark = pytest.mark.requires("decoder.logits", "decoder.kv_dtype", "model.arch.gemma3")

NMSE_BAR = 1e-6  # F32 weights and K/V against a float64 forward (DEC-065's bound)
# 20 tokens: two and a half windows; BOS first, ids spread over the vocabulary
TOKENS = [1, *((29 * i + 7) % 500 + 3 for i in range(19))]


@pytest.mark.invariant("DEC-065")
def test_sliding_layers_decode_like_the_oracle(new_ctx: Callable[..., Any]) -> None:
    expected = oracle.forward(fixture_path("gemma3"), TOKENS)
    ctx = new_ctx("gemma3", n_batch=32, n_ubatch=6, kv_dtype=torch.float32)
    k = 16  # the prompt: ubatches of 6, 6 and 4 tokens, each window spanning two of them
    assert ctx.decode(batch(TOKENS[:k], pos=list(range(k)), all_out=True)) == 0
    got = np.stack([np.asarray(ctx.get_logits_ith(i), dtype=np.float64) for i in range(k)])
    assert_nmse(expected[:k], got, NMSE_BAR, "prompt rows")
    for p in range(k, len(TOKENS)):  # cached steps: keys leave the window one by one
        assert ctx.decode(batch([TOKENS[p]], pos=[p], all_out=True)) == 0
        assert_nmse(expected[p], np.asarray(ctx.get_logits_ith(0)), NMSE_BAR, f"step at {p}")
