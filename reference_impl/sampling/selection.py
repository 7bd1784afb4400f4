"""Samplers that choose a token: greedy and dist (llama.cpp src/llama-sampler.cpp, 82bb485).

Both write ``selected`` (an index into the current array, not a token id) and nothing else
about the order; the sampler that owns the random engine draws the uniform number and passes
it in, so these functions stay pure.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from reference_impl.sampling import numerics
from reference_impl.sampling.token_data import TokenDataArray
from reference_impl.spec_links import implements

F32 = np.float32
F64 = np.float64


@implements("SMP-020")
def greedy(cur: TokenDataArray) -> TokenDataArray:
    """Select the first index holding the maximum logit (a strict ``>`` scan); p untouched."""
    return cur.with_selected(int(np.argmax(cur.logits)) if cur.size else 0)


@implements("SMP-021", "SMP-022", "SMP-025")
def dist(cur: TokenDataArray, draw: Callable[[], float]) -> TokenDataArray:
    """Sample from softmax(logits) in the current array order and normalise p.

    * n = 1: one draw is consumed (kept in step with backend sampling), selected = 0, p = 1;
    * otherwise: p_i = expf(l_i - max) (float; max = logits[0] when sorted), S = the double
      running sum of the p_i, u = draw(); selected = the first i whose running sum is
      ``>= S * u``; every p_i becomes p_i / S (computed in double, stored as float).

    No array reaching it is empty (``sampler_apply`` refuses one, and no sampler truncates to
    zero rows), so llama.cpp's n = 0 case (no draw, selected = -1) is left out.
    """
    if cur.size == 1:
        draw()
        return TokenDataArray(cur.ids, cur.logits, np.ones(1, F32), 0, cur.sorted)
    max_l = cur.logits[0] if cur.sorted else np.max(cur.logits)
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf = NaN, as in C
        p = numerics.expf(cur.logits - F32(max_l))
    running = numerics.cumsum_f64(p)
    total = running[-1]
    reached = running >= total * draw()
    # the first row reaching the target; with NaN sums no row does and, like llama.cpp, the
    # last row is taken
    selected = int(np.argmax(reached)) if reached.any() else cur.size - 1
    with np.errstate(invalid="ignore", divide="ignore"):
        normalized = (p.astype(F64) / total).astype(F32)
    return TokenDataArray(cur.ids, cur.logits, normalized, selected, cur.sorted)
