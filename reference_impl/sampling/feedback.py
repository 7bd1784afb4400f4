"""Selecting samplers with feedback: Mirostat v1 and v2, adaptive-p.

Pure rules with the semantics of llama-cpp-python 0.3.36's ``llama_sampler_mirostat_apply``,
``llama_sampler_mirostat_v2_apply`` and ``llama_sampler_adaptive_p_apply``/``_accept``
(llama.cpp src/llama-sampler.cpp). Each selects with ``pick(weights) -> index``, the
sampler's ``std::discrete_distribution`` over its own mt19937 stream
(:func:`reference_impl.sampling.mt19937.discrete_index`: no draw for fewer than 2 rows), and
returns the state the sampler keeps for the next step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from reference_impl.errors import SamplingError
from reference_impl.sampling import numerics
from reference_impl.sampling.numerics import Real
from reference_impl.sampling.token_data import TokenDataArray
from reference_impl.spec_links import implements

F32 = np.float32
F64 = np.float64
INT32_MIN = -(2**31)
Pick = Callable[[np.ndarray], int]


@implements("SMP-086")
def require_mass(cur: TokenDataArray) -> None:
    """A selecting sampler needs one finite logit: with every logit -inf (or +inf) llama.cpp's
    softmax is NaN and its selection reads out of bounds, so the reference refuses first."""
    if not np.any(np.isfinite(cur.logits)) or np.any(cur.logits == np.inf):
        raise SamplingError(
            "SMP_NO_MASS", "no candidate has a finite logit to select from", field="logits"
        )


def log2f(x: Real) -> np.float32:
    """``log2f``: the double result rounded to float."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return F32(np.log2(F64(F32(x))))


def float_to_int(x: np.float32) -> int:
    """``int(x)`` as x86-64 computes it (cvttss2si): truncation toward zero, and INT32_MIN for
    NaN or a value outside the int32 range (undefined behaviour in C++, this in practice)."""
    if not np.isfinite(x) or not -(2.0**31) <= float(x) < 2.0**31:
        return INT32_MIN
    return int(x)


@implements("SMP-082")
def mirostat_k(cur: TokenDataArray, n_vocab: int, mu: Real, m: int) -> int:
    """Mirostat v1's top-k size from a sorted softmax ``cur``.

    The Zipf exponent ``s`` is fitted on the first ``m`` probabilities (``m - 1`` ratios;
    every ratio when ``m <= 0``, as the C loop bound wraps to SIZE_MAX), then
    ``k = (e * 2^mu / (1 - n_vocab^-e)) ^ (1/s)`` with ``e = s - 1``, in float; the size is
    ``max(int(k), 1)``, so a NaN or overflowing k keeps one row.
    """
    pairs = cur.size - 1 if m <= 0 else min(m - 1, cur.size - 1)
    sum_tb, sum_tt = F32(0.0), F32(0.0)
    with np.errstate(all="ignore"):
        for i in range(max(pairs, 0)):
            t_i = numerics.logf(F32(F32(i + 2) / F32(i + 1)))
            b_i = numerics.logf(F32(cur.p[i] / cur.p[i + 1]))
            sum_tb = F32(sum_tb + F32(t_i * b_i))
            sum_tt = F32(sum_tt + F32(t_i * t_i))
        s_hat = F32(sum_tb / sum_tt)
        eps = F32(s_hat - F32(1.0))
        numer = F32(eps * numerics.powf(F32(2.0), mu))
        denom = F32(F32(1.0) - numerics.powf(F32(n_vocab), -eps))
        k = numerics.powf(F32(numer / denom), F32(F32(1.0) / s_hat))
    return max(float_to_int(k), 1)


def _surprise_update(mu: Real, p: Real, tau: Real, eta: Real) -> np.float32:
    """mu - eta * (-log2f(p) - tau), in float."""
    error = F32(-log2f(p) - F32(tau))
    return F32(F32(mu) - F32(F32(eta) * error))


@implements("SMP-082")
def mirostat(
    cur: TokenDataArray, n_vocab: int, tau: Real, eta: Real, m: int, mu: Real, pick: Pick
) -> tuple[TokenDataArray, np.float32]:
    """Mirostat v1: sorted softmax, keep the top ``mirostat_k`` rows, softmax again, pick,
    then ``mu`` moves by ``eta`` times the surprise error of the picked row."""
    require_mass(cur)
    cur = numerics.softmax(cur, do_sort=True)
    k = mirostat_k(cur, n_vocab, mu, m)
    cur = cur.take(np.arange(min(k, cur.size)), sorted=True)
    cur = numerics.softmax(cur, do_sort=True)
    idx = pick(cur.p)
    return cur.with_selected(idx), _surprise_update(mu, cur.p[idx], tau, eta)


@implements("SMP-082")
def mirostat_v2(
    cur: TokenDataArray, tau: Real, eta: Real, mu: Real, pick: Pick
) -> tuple[TokenDataArray, np.float32]:
    """Mirostat v2: sorted softmax, keep the rows before the first whose surprise
    ``-log2f(p)`` exceeds ``mu`` (at least one row), softmax again, pick, update ``mu``."""
    require_mass(cur)
    cur = numerics.softmax(cur, do_sort=True)
    with np.errstate(divide="ignore"):
        surprise = -np.array([log2f(p) for p in cur.p], dtype=F32)
    over = np.flatnonzero(surprise > F32(mu))
    keep = max(int(over[0]) if over.size else cur.size, 1)
    cur = numerics.softmax(cur.take(np.arange(keep), sorted=True), do_sort=True)
    idx = pick(cur.p)
    return cur.with_selected(idx), _surprise_update(mu, cur.p[idx], tau, eta)


# adaptive-p's transform: a peak logit at the target, quadratic near it, linear in the tails
PEAK_LOGIT = F32(5.0)
SHARPNESS = F32(10.0)
INV_WIDTH = F32(F32(1.0) / F32(0.3))


@dataclass(frozen=True)
class AdaptiveState:
    """The exponential moving average of the original probabilities of accepted tokens."""

    weighted_sum: np.float32
    total_weight: np.float32


@implements("SMP-083")
def adaptive_start(target: Real, decay: Real) -> AdaptiveState:
    """The EMA a new (or reset) sampler starts from: as if ``target`` had always been met."""
    one_minus = F32(F32(1.0) - F32(decay))
    return AdaptiveState(F32(F32(target) / one_minus), F32(F32(1.0) / one_minus))


@implements("SMP-083")
def adapted_target(target: Real, state: AdaptiveState) -> np.float32:
    """clamp(2 * target - average, 0, 1) with target clamped to [0, 1]. llama.cpp falls back
    to the target when the total weight is 0; here it never is (it starts at
    ``1 / (1 - decay) >= 1`` and each update keeps it ``>= 1``), so that branch is left out."""
    t = F32(min(max(F32(target), F32(0.0)), F32(1.0)))
    raw = F32(F32(F32(2.0) * t) - F32(state.weighted_sum / state.total_weight))
    return F32(min(max(raw, F32(0.0)), F32(1.0)))


@implements("SMP-083")
def adaptive_p(
    cur: TokenDataArray, target: Real, state: AdaptiveState, pick: Pick
) -> tuple[TokenDataArray, np.ndarray]:
    """Softmax in place (no sort); a negative target picks from it as is. Otherwise every
    finite logit becomes ``PEAK - SHARPNESS * d^2 / (1 + d)`` with ``d = |p - adapted| / 0.3``
    (float), softmax again and pick. Returns the result and the original probabilities."""
    require_mass(cur)
    cur = numerics.softmax(cur, do_sort=False)
    original = cur.p.copy()
    if F32(target) < 0.0:
        return cur.with_selected(pick(cur.p)), original
    goal = adapted_target(target, state)
    d = np.abs(((cur.p - goal).astype(F32) * INV_WIDTH).astype(F32))
    shaped = (PEAK_LOGIT - ((SHARPNESS * d).astype(F32) * d).astype(F32) / (F32(1.0) + d)).astype(
        F32
    )
    logits = np.where(cur.logits == -np.inf, cur.logits, shaped).astype(F32)
    cur = numerics.softmax(cur.with_logits(logits), do_sort=False)
    return cur.with_selected(pick(cur.p)), original


@implements("SMP-083")
def adaptive_update(state: AdaptiveState, original_p: Real, decay: Real) -> AdaptiveState:
    """Accepting the picked token: sum = p + decay * sum, weight = 1 + decay * weight."""
    d = F32(decay)
    return AdaptiveState(
        F32(F32(original_p) + F32(d * state.weighted_sum)),
        F32(F32(1.0) + F32(d * state.total_weight)),
    )
