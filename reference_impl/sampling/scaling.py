"""Samplers that rewrite logits: temperature, dynamic temperature, penalties, logit bias.

Pure functions with the semantics of llama.cpp src/llama-sampler.cpp (82bb485):
``llama_sampler_temp_impl``, ``llama_sampler_temp_ext_apply``,
``llama_sampler_penalties_apply`` and ``llama_sampler_logit_bias_apply``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from reference_impl.sampling import numerics
from reference_impl.sampling.numerics import Real
from reference_impl.sampling.token_data import TokenDataArray
from reference_impl.spec_links import implements

F32 = np.float32
F64 = np.float64


@implements("SMP-040", "SMP-041")
def temp(cur: TokenDataArray, t: Real) -> TokenDataArray:
    """t > 0: every logit divided by t (float). t <= 0: the first maximum keeps its logit and
    every other candidate gets -inf. Order, ids, p and ``sorted`` are unchanged."""
    t32 = F32(t)
    if cur.size == 0:
        return cur
    if t32 <= 0.0:
        best = int(np.argmax(cur.logits))  # argmax returns the first maximum
        out = np.full(cur.size, -np.inf, dtype=F32)
        out[best] = cur.logits[best]
        return cur.with_logits(out)
    with np.errstate(over="ignore"):  # a tiny t overflows to +-inf, as in C
        return cur.with_logits(cur.logits / t32)


@implements("SMP-042")
def temp_ext(cur: TokenDataArray, t: Real, delta: Real, exponent: Real) -> TokenDataArray:
    """Dynamic temperature (entropy-scaled) when ``delta > 0``, plain :func:`temp` otherwise.

    dyn = max(0, t - delta) + 2*delta' * (H / ln n) ** exponent, where H is the entropy of the
    sorted softmax (float, terms with p = 0 skipped) and the range is [max(0, t-delta),
    t+delta]; then temp(dyn) and p recomputed in double from logits[0] as the max. Arrays of
    size <= 1 are left unchanged. The result is sorted descending.
    """
    t32, d32, e32 = F32(t), F32(delta), F32(exponent)
    if not d32 > 0:
        return temp(cur, t32)
    min_temp = max(F32(0.0), F32(t32 - d32))
    max_temp = F32(t32 + d32)
    if cur.size <= 1:
        return cur
    max_entropy = F32(-numerics.logf(F32(1.0) / F32(cur.size)))
    cur = numerics.softmax(cur, do_sort=True)
    positive = cur.p[cur.p > 0.0]
    entropy = (
        F32(-numerics.sum_f32(positive * numerics.logf(positive))) if positive.size else F32(0)
    )
    # the C loop subtracts each term from 0; summing the terms then negating rounds the same
    normalized = F32(entropy / max_entropy)
    dyn = F32(min_temp + F32(F32(max_temp - min_temp) * numerics.powf(normalized, e32)))
    cur = temp(cur, dyn)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(cur.logits.astype(F64) - F64(cur.logits[0]))
        p = e.astype(F32)  # stored into the float field first ...
        p = (p.astype(F64) / numerics.cumsum_f64(e)[-1]).astype(F32)  # ... then divided
    return cur.with_p(p)


@implements("SMP-043")
def penalties(
    cur: TokenDataArray,
    counts: Mapping[int, int],
    repeat: Real,
    freq: Real,
    present: Real,
) -> TokenDataArray:
    """Repetition penalties for tokens seen in the window (``counts``: id -> occurrences > 0).

    For a candidate with count c > 0: ``logit *= repeat`` if logit <= 0 else ``/= repeat``,
    then ``logit -= c * freq + present``. Others are untouched. ``sorted`` becomes false.
    """
    r32, f32, p32 = F32(repeat), F32(freq), F32(present)
    logits = cur.logits.copy()
    if counts:
        seen = np.fromiter(counts.keys(), dtype=np.int64, count=len(counts))
        seen_counts = np.fromiter(counts.values(), dtype=np.int64, count=len(counts))
        order = np.argsort(seen)
        seen, seen_counts = seen[order], seen_counts[order]
        slot = np.clip(np.searchsorted(seen, cur.ids), 0, seen.size - 1)
        hit = seen[slot] == cur.ids
        c = seen_counts[slot[hit]].astype(F32)
        old = logits[hit]
        scaled = np.where(old <= 0, old * r32, old / r32).astype(F32)
        logits[hit] = scaled - (c * f32 + p32)
    return cur.with_logits(logits, sorted=False)


@implements("SMP-045")
def logit_bias(cur: TokenDataArray, biases: Sequence[tuple[int, Real]]) -> TokenDataArray:
    """Add each ``(token, bias)`` to that token's logit.

    A bias whose token sits at its own index (``ids[token] == token``) is added there, each
    entry in turn; the remaining entries are searched for, and a candidate takes the first
    matching remaining entry only.
    """
    logits = cur.logits.copy()
    to_search: dict[int, np.float32] = {}
    for token, bias in biases:
        b32 = F32(bias)
        if 0 <= token < cur.size and int(cur.ids[token]) == token:
            logits[token] = F32(logits[token] + b32)
        else:
            to_search.setdefault(int(token), b32)
    if to_search:
        for i in np.nonzero(np.isin(cur.ids, np.fromiter(to_search, dtype=np.int64)))[0]:
            logits[i] = F32(logits[i] + to_search[int(cur.ids[i])])
    return cur.with_logits(logits)
