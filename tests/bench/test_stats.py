"""The statistics behind bench_compare: intervals, verdicts, and their error rates."""

from __future__ import annotations

import math
import random

import pytest

from tools.bench import stats


@pytest.mark.parametrize(
    ("n", "k", "coverage"),
    [(5, 1, 0.9375), (6, 1, 0.96875), (8, 1, 0.9921875), (9, 2, 0.9609375), (12, 3, 0.96142578125)],
)
def test_sign_test_rank_matches_the_binomial_table(n: int, k: int, coverage: float) -> None:
    assert stats.sign_test_rank(n, 0.95) == (k, pytest.approx(coverage))


@pytest.mark.parametrize(("n", "m", "k"), [(5, 5, 3), (6, 6, 6), (8, 8, 14), (10, 10, 24)])
def test_mann_whitney_rank_matches_published_critical_values(n: int, m: int, k: int) -> None:
    # k - 1 is the two-sided 5% critical value of U (e.g. 2 for 5 vs 5, 23 for 10 vs 10).
    got, coverage = stats.mann_whitney_rank(n, m, 0.95)
    assert got == k
    assert coverage >= 0.95


@pytest.mark.parametrize(("n", "m"), [(1, 1), (2, 3), (4, 4), (7, 3)])
def test_mann_whitney_counts_cover_every_ordering(n: int, m: int) -> None:
    counts = stats.mann_whitney_counts(n, m)
    assert len(counts) == n * m + 1
    assert sum(counts) == math.comb(n + m, n)
    assert counts == counts[::-1]  # U is symmetric under the null


def test_min_rounds_for_95_percent() -> None:
    assert stats.min_rounds_for(0.95, paired=True) == 6
    assert stats.min_rounds_for(0.95, paired=False) == 4


def test_paired_ratio_of_a_constant_factor_is_exact() -> None:
    base = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    est = stats.paired_ratio(base, [1.25 * x for x in base])
    assert est.ratio == pytest.approx(1.25)
    assert (est.low, est.high) == (pytest.approx(1.25), pytest.approx(1.25))
    assert est.paired and est.n_base == 6


def test_paired_ratio_interval_is_the_order_statistics() -> None:
    base = [1.0] * 9
    head = [0.9, 1.3, 1.0, 1.2, 1.1, 0.8, 1.4, 1.05, 1.15]
    est = stats.paired_ratio(base, head)
    assert est.ratio == pytest.approx(1.1)
    # n = 9 at 95%: k = 2, i.e. the 2nd smallest and 2nd largest ratio.
    assert (est.low, est.high) == (pytest.approx(0.9), pytest.approx(1.3))


def test_unpaired_ratio_is_hodges_lehmann() -> None:
    est = stats.unpaired_ratio([1.0, 1.0, 1.0, 1.0], [2.0, 2.0, 2.0, 2.0])
    assert est.ratio == pytest.approx(2.0)
    assert not est.paired and est.confidence >= 0.95


def test_bad_samples_are_rejected() -> None:
    with pytest.raises(ValueError, match="positive"):
        stats.paired_ratio([1.0, 0.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="differ in number"):
        stats.paired_ratio([1.0, 1.0], [1.0])
    with pytest.raises(ValueError, match="no samples"):
        stats.unpaired_ratio([], [1.0])


def _est(ratio: float, low: float, high: float, confidence: float = 0.97) -> stats.RatioEstimate:
    return stats.RatioEstimate(ratio, low, high, confidence, 6, 6, True)


@pytest.mark.parametrize(
    ("est", "expected"),
    [
        (_est(1.30, 1.20, 1.40), "slower"),
        (_est(1.30, 0.95, 1.60), "inconclusive"),  # moved, but the interval holds 1.0
        (_est(1.05, 1.01, 1.09), "no change"),  # real but within the threshold
        (_est(1.09, 0.50, 2.00), "no change"),
        (_est(0.70, 0.60, 0.80), "faster"),
        (_est(0.70, 0.60, 1.10), "inconclusive"),
        (_est(1.30, 1.20, 1.40, confidence=0.9375), "inconclusive"),  # too few rounds
        (_est(1.101, 1.05, 1.2), "slower"),
        (_est(1.099, 1.05, 1.2), "no change"),
    ],
)
def test_verdict_rules(est: stats.RatioEstimate, expected: str) -> None:
    assert stats.verdict(est, threshold=0.10, confidence=0.95) == expected


def _simulate(factor: float, sigma: float, rounds: int, trials: int, seed: int) -> dict[str, int]:
    """Verdicts of ``trials`` paired comparisons with log-normal round noise."""
    rng = random.Random(seed)
    out: dict[str, int] = {v: 0 for v in stats.VERDICTS}
    for _ in range(trials):
        base = [math.exp(rng.gauss(0, sigma)) for _ in range(rounds)]
        head = [factor * math.exp(rng.gauss(0, sigma)) for _ in range(rounds)]
        out[stats.verdict(stats.paired_ratio(base, head))] += 1
    return out


def test_no_change_is_rarely_called_slower() -> None:
    # 5% round-to-round noise (what this 2-core shared machine shows) and 6 rounds.
    got = _simulate(1.0, 0.05, 6, 4000, seed=1)
    assert got["slower"] / 4000 < 0.005
    assert got["no change"] / 4000 > 0.9


def test_noisy_non_change_is_never_a_regression_verdict_more_than_rarely() -> None:
    # 25% noise: the median often moves past 10%, but the interval then holds 1.0.
    got = _simulate(1.0, 0.25, 6, 4000, seed=2)
    assert got["slower"] / 4000 < 0.02
    assert got["inconclusive"] > got["slower"]


def test_a_thirty_percent_slowdown_is_caught() -> None:
    got = _simulate(1.3, 0.05, 6, 2000, seed=3)
    assert got["slower"] / 2000 > 0.98


def test_the_paired_interval_covers_the_true_ratio_as_promised() -> None:
    rng = random.Random(4)
    hits = 0
    trials = 3000
    for _ in range(trials):
        base = [math.exp(rng.gauss(0, 0.1)) for _ in range(9)]
        head = [1.2 * b * math.exp(rng.gauss(0, 0.1)) for b in base]
        est = stats.paired_ratio(base, head)
        hits += est.low <= 1.2 <= est.high
    assert hits / trials >= 0.94  # nominal 96.1% for n = 9
