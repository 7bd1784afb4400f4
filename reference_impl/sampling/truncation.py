"""Samplers that keep a subset of the candidates: top-k, top-p, min-p, typical, top-n-sigma.

Each rule is a pure function ``(TokenDataArray, params) -> TokenDataArray`` with the semantics
of the matching ``llama_sampler_*_apply`` in llama.cpp src/llama-sampler.cpp (82bb485). Float
parameters are rounded to float32 first, as the C API stores them.
"""

from __future__ import annotations

import numpy as np

from reference_impl.sampling import numerics
from reference_impl.sampling.numerics import Real
from reference_impl.sampling.token_data import TokenDataArray
from reference_impl.spec_links import implements

F32 = np.float32
FLT_MAX = F32(np.finfo(np.float32).max)


def _first_true(mask: np.ndarray) -> int | None:
    idx = int(np.argmax(mask)) if mask.size else 0
    return idx if mask.size and mask[idx] else None


@implements("SMP-030")
def top_k(cur: TokenDataArray, k: int) -> TokenDataArray:
    """Keep the min(k, n) highest logits in descending order (``sorted`` = true); p untouched.

    An already sorted array is only truncated. ``k >= 1``: k <= 0 builds the empty sampler
    (SMP-015), so llama.cpp's no-op for it never reaches this function.
    """
    k = min(k, cur.size)
    if cur.sorted:
        return cur.take(np.arange(k), sorted=True)
    return cur.take(numerics.top_k_order(cur.logits, k), sorted=True)


@implements("SMP-031")
def top_p(cur: TokenDataArray, p: Real, min_keep: int) -> TokenDataArray:
    """Nucleus: p over the current set (softmax, no renormalisation afterwards), then keep the
    shortest descending prefix whose float running sum is ``>= p`` and whose length is
    ``>= min_keep`` (everything when no prefix qualifies). Output sorted descending."""
    p32 = F32(p)
    if p32 >= 1.0:
        return cur
    cur = numerics.softmax(cur, do_sort=False)
    if cur.sorted:
        order = np.arange(cur.size)
    else:
        # like llama.cpp, look at the top 256 first and sort everything only when needed
        order = numerics.top_k_order(cur.logits, min(cur.size, max(256, min_keep)))
    while True:
        running = numerics.cumsum_f32(cur.p[order])
        lengths = np.arange(1, order.size + 1)
        last = _first_true((running >= p32) & (lengths >= min_keep))
        if last is not None:
            return cur.take(order[: last + 1], sorted=True)
        if order.size == cur.size:
            return cur.take(order, sorted=True)
        order = numerics.descending_order(cur.logits)


@implements("SMP-032", "SMP-033")
def min_p(cur: TokenDataArray, p: Real, min_keep: int) -> TokenDataArray:
    """Keep tokens with ``logit >= max_logit + logf(p)`` (prob >= p * p_max).

    Unsorted input: filtered in place, original order kept, if at least one and at least
    ``min_keep`` tokens pass. Otherwise (or sorted input): sort, keep index 0 and every next
    token up to the first one below the threshold at a position >= min_keep.
    ``p > 0`` and ``n >= 1``: p <= 0 builds the empty sampler (SMP-015) and no array reaching
    a sampler is empty.
    """
    p32 = F32(p)
    log_p = numerics.logf(p32)
    if not cur.sorted:
        # the C loop starts from -FLT_MAX, so an all -inf row gives a finite max
        max_logit = max(F32(np.max(cur.logits)), -FLT_MAX)
        threshold = F32(max_logit + log_p)
        keep = np.nonzero(cur.logits >= threshold)[0]
        if keep.size > 0 and keep.size >= min_keep:
            return cur.take(keep, sorted=cur.sorted)
        cur = cur.take(numerics.descending_order(cur.logits), sorted=True)
    threshold = F32(cur.logits[0] + log_p)
    positions = np.arange(1, cur.size)
    stop = _first_true((cur.logits[1:] < threshold) & (positions >= min_keep))
    size = cur.size if stop is None else stop + 1
    return cur.take(np.arange(size), sorted=cur.sorted)


@implements("SMP-034")
def typical(cur: TokenDataArray, p: Real, min_keep: int) -> TokenDataArray:
    """Locally typical sampling: sorted softmax, entropy H = -sum p ln p (float), score
    |-ln p_i - H|; candidates ordered by ascending score; keep the prefix up to the first
    running sum strictly ``> p`` at a position >= min_keep - 1. Output in score order,
    ``sorted`` = false, p = the softmax (not renormalised).

    A candidate whose p underflows to 0 makes H NaN (0 * log 0); llama.cpp's std::sort then
    sees NaN scores, so that case has no defined result (the reference sorts NaN last).
    """
    p32 = F32(p)
    if p32 >= 1.0:
        return cur
    cur = numerics.softmax(cur, do_sort=True)
    log_p = numerics.logf(cur.p)
    with np.errstate(invalid="ignore"):
        entropy = numerics.sum_f32(-cur.p * log_p)
        scores = np.abs(-log_p - entropy).astype(F32)
    order = numerics.ascending_order(scores)  # std::sort: order of equal scores unspecified
    running = numerics.cumsum_f32(cur.p[order])
    positions = np.arange(cur.size)
    stop = _first_true((running > p32) & ((min_keep == 0) | (positions >= min_keep - 1)))
    keep = cur.size if stop is None else stop + 1
    return cur.take(order[:keep], sorted=False)


@implements("SMP-035")
def top_n_sigma(cur: TokenDataArray, n: Real) -> TokenDataArray:
    """Set to -inf every logit below ``max - n * std`` (mean/std over the non -inf logits).

    The C code accumulates the variance as float += double; the reference sums in double,
    so the threshold can differ from llama.cpp's in the last bits.
    """
    n32 = F32(n)
    if n32 <= 0.0 or cur.size <= 1:
        return cur
    logits = cur.logits
    finite = logits[logits != -np.inf]
    if finite.size:
        max_l = max(F32(logits[0]), F32(np.max(finite)))
        mean = F32(numerics.sum_f32(finite) / F32(finite.size))
        diff = (finite - mean).astype(np.float64)
        std = F32(np.sqrt(F32(np.sum(diff * diff)) / F32(finite.size)))
    else:
        max_l, std = F32(logits[0]), F32(0.0)
    threshold = F32(max_l - F32(n32 * std))
    out = np.where(logits < threshold, F32(-np.inf), logits).astype(F32)
    return cur.with_logits(out)


@implements("SMP-081")
def xtc(cur: TokenDataArray, threshold: Real, min_keep: int) -> TokenDataArray:
    """Exclude top choices (the cut itself; the sampler decides by its draw whether to cut).

    Sorted softmax; ``last`` = the last row of the leading run of rows with ``p >= threshold``
    (0 when row 0 is below it). When ``last > 0`` and ``n - last >= min_keep`` the rows before
    ``last`` are dropped, so the least likely of the top choices survives; otherwise the
    sorted softmax is returned whole.
    """
    cur = numerics.softmax(cur, do_sort=True)
    above = cur.p >= F32(threshold)
    run = cur.size if bool(np.all(above)) else int(np.argmin(above))  # leading run length
    last = max(run - 1, 0)
    if last > 0 and cur.size - last >= min_keep:
        return cur.take(np.arange(last, cur.size), sorted=True)
    return cur
