"""Ratio estimates, confidence intervals and verdicts for comparing two sets of bench timings.

Unit of replication
    One *round* is one fresh process that runs every case for a short time; pytest-benchmark's
    median of that round's iterations is one sample. Iterations inside a round are not
    independent (same process, same memory layout, same neighbours on the machine), so they are
    never used as samples: only rounds are. Process-to-process differences (allocation layout,
    what else runs on the machine) are the noise that makes "same commit, run twice" look
    different, and a round captures exactly that.

Paired rounds (two commits in one job)
    Rounds alternate A B, B A, A B, ... so a slow drift of the machine hits both commits alike
    and a linear drift cancels. Round ``i`` gives the ratio ``r_i = head_i / base_i``. The
    estimate is the median of the ``r_i``; its confidence interval comes from the order
    statistics of the ``r_i`` (inverting the sign test): ``[r_(k), r_(n+1-k)]`` covers the median
    ratio with probability ``1 - 2 P(Bin(n, 1/2) <= k-1)``, whatever the noise distribution,
    as long as rounds are independent. No resampling, so the result is deterministic and its
    coverage is exact rather than a bootstrap approximation (which is poor at n < 10).

Unpaired runs (two saved runs, taken at different times)
    The estimate is the two-sample Hodges–Lehmann estimator on log times: the median of all
    ``n*m`` ratios ``head_j / base_i``. Its interval inverts the Mann–Whitney test:
    ``[D_(k), D_(nm+1-k)]`` over the sorted pairwise ratios, with ``k`` from the exact null
    distribution of the U statistic. Same guarantees, fewer assumptions than a t interval.

Verdicts, for a threshold ``t`` (default 10%)
    * ``slower``: the estimate exceeds ``1 + t`` **and** the interval excludes 1.0 (its lower
      bound is above 1). "Slower beyond the threshold and the interval excludes 1.0" read
      literally: the size of the change is judged on the estimate, its reality on the interval.
    * ``faster``: the estimate is below ``1 / (1 + t)`` and the upper bound is below 1.
    * ``inconclusive``: the estimate is beyond the threshold (either way) but the interval
      contains 1.0, or the rounds are too few to reach the requested confidence at all; the
      case moved but the noise is too large to say. Never counted as a pass silently: it is
      listed, and ``--strict`` fails on it.
    * ``no change``: the estimate is within the threshold.

    A comparison fails when at least one case is ``slower``. With many cases the threshold does
    most of the work against multiple testing: under no change, the median of the paired ratios
    must drift by more than ``t`` *and* every round up to the ``k``-th must agree, which the
    calibration in docs/benchmarks.md measures.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Verdict = Literal["slower", "faster", "no change", "inconclusive"]
VERDICTS: tuple[Verdict, ...] = ("slower", "faster", "inconclusive", "no change")


@dataclass(frozen=True)
class RatioEstimate:
    """HEAD/BASE time ratio: > 1 means HEAD takes longer (is slower)."""

    ratio: float
    low: float
    high: float
    confidence: float  # coverage actually achieved by [low, high]
    n_base: int
    n_head: int
    paired: bool

    @property
    def excludes_one(self) -> bool:
        return self.low > 1.0 or self.high < 1.0


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    if n == 0:
        raise ValueError("median of no values")
    mid = n // 2
    return s[mid] if n % 2 else 0.5 * (s[mid - 1] + s[mid])


def _positive(name: str, xs: Sequence[float]) -> list[float]:
    out = [float(x) for x in xs]
    if not out:
        raise ValueError(f"{name}: no samples")
    bad = [x for x in out if not (x > 0 and math.isfinite(x))]
    if bad:
        raise ValueError(f"{name}: timings must be positive and finite, got {bad[:3]}")
    return out


def sign_test_rank(n: int, confidence: float) -> tuple[int, float]:
    """Largest ``k`` with ``[x_(k), x_(n+1-k)]`` covering the median at ``confidence``.

    Returns ``(k, achieved)``. When even ``k = 1`` (min..max) falls short, returns ``k = 1``
    with the lower coverage it does achieve, so the caller can say so.
    """
    if n < 1:
        raise ValueError("need at least one sample")
    best_k, best_cov = 1, 1.0 - 2.0 * 0.5**n
    cdf = 0.0
    for k in range(1, n // 2 + 1):
        cdf += math.comb(n, k - 1) / 2.0**n  # P(Bin(n, 1/2) <= k-1)
        cov = 1.0 - 2.0 * cdf
        if cov >= confidence:
            best_k, best_cov = k, cov
        else:
            break
    return best_k, best_cov


def mann_whitney_counts(n: int, m: int) -> list[int]:
    """Number of orderings of n and m values with U = u, for u = 0..n*m (exact null law)."""
    # Coefficients of the Gaussian binomial [n+m choose n]_q, built one element at a time:
    # ways[i][j][u] = ways[i-1][j][u-j] + ways[i][j-1][u].
    table: list[list[list[int]]] = [[[1] for _ in range(m + 1)] for _ in range(n + 1)]
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            size = i * j + 1
            row = [0] * size
            a = table[i - 1][j]
            for u, c in enumerate(a):
                if u + j < size:
                    row[u + j] += c
            b = table[i][j - 1]
            for u, c in enumerate(b):
                row[u] += c
            table[i][j] = row
    return table[n][m]


def mann_whitney_rank(n: int, m: int, confidence: float) -> tuple[int, float]:
    """Largest ``k`` with ``[D_(k), D_(nm+1-k)]`` (sorted pairwise differences) at ``confidence``."""
    if n < 1 or m < 1:
        raise ValueError("need at least one sample on each side")
    counts = mann_whitney_counts(n, m)
    total = math.comb(n + m, n)
    best_k, best_cov = 1, 1.0 - 2.0 * counts[0] / total
    cdf = 0
    for k in range(1, (n * m) // 2 + 1):
        cdf += counts[k - 1]  # P(U <= k-1) * total
        cov = 1.0 - 2.0 * cdf / total
        if cov >= confidence:
            best_k, best_cov = k, cov
        else:
            break
    return best_k, best_cov


def paired_ratio(
    base: Sequence[float], head: Sequence[float], confidence: float = 0.95
) -> RatioEstimate:
    """Median of per-round ratios head_i/base_i with its sign-test interval."""
    b = _positive("base", base)
    h = _positive("head", head)
    if len(b) != len(h):
        raise ValueError(f"paired rounds differ in number: base {len(b)}, head {len(h)}")
    logs = sorted(math.log(y / x) for x, y in zip(b, h))
    k, achieved = sign_test_rank(len(logs), confidence)
    return RatioEstimate(
        ratio=math.exp(_median(logs)),
        low=math.exp(logs[k - 1]),
        high=math.exp(logs[len(logs) - k]),
        confidence=achieved,
        n_base=len(b),
        n_head=len(h),
        paired=True,
    )


def unpaired_ratio(
    base: Sequence[float], head: Sequence[float], confidence: float = 0.95
) -> RatioEstimate:
    """Hodges–Lehmann ratio (median of all head_j/base_i) with its Mann–Whitney interval."""
    b = _positive("base", base)
    h = _positive("head", head)
    diffs = sorted(math.log(y) - math.log(x) for x in b for y in h)
    k, achieved = mann_whitney_rank(len(b), len(h), confidence)
    return RatioEstimate(
        ratio=math.exp(_median(diffs)),
        low=math.exp(diffs[k - 1]),
        high=math.exp(diffs[len(diffs) - k]),
        confidence=achieved,
        n_base=len(b),
        n_head=len(h),
        paired=False,
    )


def verdict(est: RatioEstimate, threshold: float = 0.10, confidence: float = 0.95) -> Verdict:
    """Classify one case; see the module docstring for the rules."""
    if threshold <= 0:
        raise ValueError("threshold must be positive")
    up = 1.0 + threshold
    down = 1.0 / up
    moved = est.ratio > up or est.ratio < down
    if not moved:
        return "no change"
    if est.confidence + 1e-12 < confidence:
        return "inconclusive"  # too few rounds to reach the requested confidence
    if est.ratio > up and est.low > 1.0:
        return "slower"
    if est.ratio < down and est.high < 1.0:
        return "faster"
    return "inconclusive"


def min_rounds_for(confidence: float, paired: bool = True) -> int:
    """Fewest rounds (per side) whose min..max interval reaches ``confidence``."""
    for n in range(1, 64):
        cov = sign_test_rank(n, confidence)[1] if paired else mann_whitney_rank(n, n, confidence)[1]
        if cov >= confidence:
            return n
    raise ValueError(f"confidence {confidence} is not reachable")
