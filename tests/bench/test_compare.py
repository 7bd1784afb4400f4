"""Comparison of two runs on synthetic timings: the verdicts, and bad input."""

from __future__ import annotations

import random

import pytest

from tools.bench.compare import compare_runs, synthetic_run
from tools.bench.runs import BenchError

BASE = [1.00, 1.02, 0.98, 1.01, 0.99, 1.03]


def _noisy(factor: float, sigma: float, seed: int, n: int = 6) -> list[float]:
    rng = random.Random(seed)
    return [factor * (1 + rng.gauss(0, sigma)) for _ in range(n)]


def test_no_change() -> None:
    base = synthetic_run("aaaaaaa", {"c": BASE})
    head = synthetic_run("bbbbbbb", {"c": [x * 1.01 for x in reversed(BASE)]})
    comp = compare_runs(base, head, paired=True)
    (case,) = comp.cases
    assert case.verdict == "no change"
    assert not comp.regressed


def test_a_clear_regression() -> None:
    base = synthetic_run("aaaaaaa", {"c": BASE, "d": BASE})
    head = synthetic_run("bbbbbbb", {"c": [1.3 * x for x in _noisy(1, 0.03, 1)], "d": BASE})
    comp = compare_runs(base, head, paired=True)
    verdicts = {c.name: c.verdict for c in comp.cases}
    assert verdicts == {"c": "slower", "d": "no change"}
    assert comp.regressed
    assert comp.count("slower") == 1


def test_a_noisy_non_change_is_inconclusive_not_slower() -> None:
    # Medians 25% apart by chance, but one round of six goes the other way: the interval
    # (min..max of the paired ratios) holds 1.0.
    base = synthetic_run("aaaaaaa", {"c": [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]})
    head = synthetic_run("bbbbbbb", {"c": [1.3, 0.7, 1.25, 1.4, 1.2, 1.35]})
    comp = compare_runs(base, head, paired=True)
    (case,) = comp.cases
    assert case.estimate.ratio > 1.1
    assert case.estimate.low < 1.0
    assert case.verdict == "inconclusive"
    assert not comp.regressed


def test_a_clear_speedup() -> None:
    base = synthetic_run("aaaaaaa", {"c": BASE})
    head = synthetic_run("bbbbbbb", {"c": [0.5 * x for x in BASE]})
    (case,) = compare_runs(base, head, paired=True).cases
    assert case.verdict == "faster"


def test_paired_comparison_uses_the_pairing() -> None:
    # Each round drifts by a lot, but HEAD is 20% slower than BASE within every round.
    drift = [1.0, 2.0, 0.5, 1.5, 3.0, 0.8]
    base = synthetic_run("aaaaaaa", {"c": drift})
    head = synthetic_run("bbbbbbb", {"c": [1.2 * d for d in drift]})
    assert compare_runs(base, head, paired=True).cases[0].verdict == "slower"
    assert compare_runs(base, head, paired=False).cases[0].verdict != "slower"


def test_unpaired_runs_warn_that_they_were_not_interleaved() -> None:
    base = synthetic_run("aaaaaaa", {"c": BASE})
    head = synthetic_run("bbbbbbb", {"c": [1.5 * x for x in BASE]})
    comp = compare_runs(base, head, paired=False)
    assert comp.mode == "unpaired"
    assert comp.cases[0].verdict == "slower"
    assert any("not interleaved" in w for w in comp.warnings)
    head.versions = {"torch": "2.13.0"}
    head.machine = {"cpu": "other"}
    warnings = compare_runs(base, head, paired=False).warnings
    assert any(w.startswith("package versions differ: torch None vs 2.13.0") for w in warnings)
    assert any("different machines (cpu: None vs 'other')" in w for w in warnings)


def test_too_few_rounds_say_so() -> None:
    base = synthetic_run("aaaaaaa", {"c": BASE[:3]})
    head = synthetic_run("bbbbbbb", {"c": [2 * x for x in BASE[:3]]})
    comp = compare_runs(base, head, paired=True)
    assert comp.cases[0].verdict == "inconclusive"
    assert any("too few rounds" in w and "need >= 6" in w for w in comp.warnings)


def test_differing_case_sets_are_an_error_naming_the_cases() -> None:
    base = synthetic_run("aaaaaaa", {"both": BASE, "gone": BASE})
    head = synthetic_run("bbbbbbb", {"both": BASE, "new": BASE})
    with pytest.raises(BenchError) as err:
        compare_runs(base, head, paired=True)
    msg = str(err.value)
    assert "only in BASE (1): gone" in msg
    assert "only in HEAD (1): new" in msg
    assert "--common-only" in msg


def test_common_only_compares_the_rest_and_lists_the_others() -> None:
    base = synthetic_run("aaaaaaa", {"both": BASE, "gone": BASE})
    head = synthetic_run("bbbbbbb", {"both": BASE, "new": BASE})
    comp = compare_runs(base, head, paired=True, common_only=True)
    assert [c.name for c in comp.cases] == ["both"]
    assert (comp.only_base, comp.only_head) == (["gone"], ["new"])


def test_a_case_whose_work_changed_is_not_compared() -> None:
    base = synthetic_run("aaaaaaa", {"c": BASE, "d": BASE})
    head = synthetic_run("bbbbbbb", {"c": BASE, "d": BASE})
    head.cases["d"].work = 2.0
    with pytest.raises(BenchError, match=r"redefined .*: d"):
        compare_runs(base, head, paired=True)
    comp = compare_runs(base, head, paired=True, common_only=True)
    assert comp.redefined == ["d"]
    assert [c.name for c in comp.cases] == ["c"]


def test_nothing_in_common_is_an_error() -> None:
    base = synthetic_run("aaaaaaa", {"a": BASE})
    head = synthetic_run("bbbbbbb", {"b": BASE})
    with pytest.raises(BenchError, match="no bench case in common"):
        compare_runs(base, head, paired=True, common_only=True)


def test_min_statistic_compares_the_fastest_iterations() -> None:
    base = synthetic_run("aaaaaaa", {"c": BASE})
    head = synthetic_run("bbbbbbb", {"c": BASE})
    head.cases["c"].mins = [1.5 * x for x in BASE]
    assert compare_runs(base, head, paired=True).cases[0].verdict == "no change"
    assert compare_runs(base, head, paired=True, stat="min").cases[0].verdict == "slower"
