"""The iSWA memory's window cache seen through ``decode`` alone (black-box), over the ``gemma3``
fixture (8-position window): the memory reports positions from the window cache, whose size
shows as the step at which ``seq_pos_min`` starts to move.

One sequence is decoded in order, 32 tokens a batch. While the window cache has a free cell
every token takes one; once it is full, each token takes the cell of the oldest position, which
has left the window (KV-005), so after position ``P`` is decoded ``seq_pos_min`` is exactly
``max(0, P + 1 - C)`` for a cache of ``C`` cells, while the global cache still holds position 0.
``C`` is the context size with ``swa_full``, else ``min(kv_size, n_swa * (n_seq_max if unified
else 1) + n_ubatch)`` rounded up to 256. The cases move each term across a multiple of 256; the
``min`` with ``kv_size`` cannot show here, since a cache that large fills the global cache
first. The white-box test (test_memories.py) reads the memory itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from conformance.assertions import assert_nmse
from conformance.decoder.helpers import ForwardOracle, batch, prompt

pytestmark = pytest.mark.requires(
    "decoder.logits", "decoder.memory_ops", "model.forward", "model.arch.gemma3"
)

# DEC-065's bound for this model (F32 weights and K/V). llama.cpp's rows equal its forward
# pass bit for bit here; the reference's gemma3 rows move by up to ~1e-8 with the shapes of
# its matrix products (its forward pass of 1 or 24 tokens differs by 1.7e-9 at row 0), and a
# window one key too wide or too narrow moves rows by far more than the bound.
NMSE_BAR = 1e-6
MODEL = "gemma3"
STEP = 32  # tokens per decode; divides every cache size below

# name: (context parameters, window cache cells, tokens decoded)
CASES = {
    # swa_full: the window cache has every cell of the context
    "swa_full": ({"n_ctx": 512, "n_ubatch": 8, "swa_full": True}, 512, 320),
    # 8 + 8 -> 256
    "window": ({"n_ctx": 1024, "n_ubatch": 8, "swa_full": False}, 256, 320),
    # 2 * 8 + 248 -> 512: a unified cache holds the windows of n_seq_max sequences, and the
    # ubatch term crosses 256 only with them
    "unified": (
        {"n_ctx": 1024, "n_ubatch": 248, "n_seq_max": 2, "kv_unified": True, "swa_full": False},
        512,
        576,
    ),
    # 8 + 248 -> 256 per stream: one stream per sequence holds one window
    "streams": (
        {"n_ctx": 2048, "n_ubatch": 248, "n_seq_max": 2, "kv_unified": False, "swa_full": False},
        256,
        320,
    ),
}


def decode_in_order(ctx: Any, toks: list[int], cells: int) -> None:
    """Decode ``toks`` as sequence 0, ``STEP`` tokens a batch, checking its positions after
    each batch."""
    for start in range(0, len(toks), STEP):
        last = start + STEP - 1
        out = [0] * (STEP - 1) + [1]
        assert ctx.decode(batch(toks[start : last + 1], pos=range(start, last + 1), out=out)) == 0
        got = (ctx.seq_pos_min(0), ctx.seq_pos_max(0))
        assert got == (max(0, last + 1 - cells), last), f"after position {last}"


@pytest.mark.invariant("MEM-015")
@pytest.mark.parametrize("case", list(CASES))
def test_the_window_cache_size_shows_in_seq_pos_min(new_ctx: Callable[..., Any], case: str) -> None:
    params, cells, n = CASES[case]
    ctx = new_ctx(MODEL, n_batch=max(STEP, params["n_ubatch"]), **params)
    decode_in_order(ctx, prompt(n, start=11, stride=23), cells)


@pytest.mark.invariant("MEM-015")
def test_operations_reach_both_caches(
    new_ctx: Callable[..., Any], target: Any, load: Callable[[str], Any]
) -> None:
    """After the window cache wrapped, ``seq_rm`` of the tail leaves the window cache's first
    position and ends the sequence where the global cache's copy ends too: the next tokens'
    rows equal the forward pass of the shortened history (a tail left in either cache would
    be attended by their layers)."""
    oracle = ForwardOracle(target, load(MODEL))
    toks = prompt(320, start=11, stride=23)
    new = prompt(8, start=200, stride=31)
    ctx = new_ctx(MODEL, n_ctx=1024, n_batch=STEP, n_ubatch=8, swa_full=False)
    decode_in_order(ctx, toks, 256)
    assert_nmse(
        oracle.row(toks), np.asarray(ctx.get_logits_ith(STEP - 1)), NMSE_BAR, "position 319"
    )
    assert ctx.seq_rm(0, 300, -1)
    assert (ctx.seq_pos_min(0), ctx.seq_pos_max(0)) == (64, 299)
    assert ctx.decode(batch(new, pos=range(300, 308), all_out=True)) == 0
    assert ctx.seq_pos_max(0) == 307
    history = toks[:300] + new
    oracle.row(history)  # one forward pass gives every prefix's row
    for i in range(8):
        assert_nmse(
            oracle.row(history[: 301 + i]), np.asarray(ctx.get_logits_ith(i)), NMSE_BAR, f"new {i}"
        )
