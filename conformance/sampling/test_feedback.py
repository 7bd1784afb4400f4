"""Mirostat v1/v2 (SMP-082) and adaptive-p (SMP-083): exact small cases and properties."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.assertions import raises_code
from conformance.sampling.support import (
    candidates,
    chain_of,
    describe,
    from_probs,
    mt19937_uniforms,
    needs_samplers,
    same_array,
)
from conformance.strategies.sampling import seeds, token_arrays
from reference_impl.errors import SamplingError
from reference_impl.sampling.token_data import TokenDataArray

F32 = np.float32
MIROSTAT_CAPS = ("sampling.chain", "sampling.mirostat", "sampling.mirostat_v2")
ADAPTIVE_CAPS = ("sampling.chain", "sampling.adaptive_p")


@pytest.mark.invariant("SMP-082")
@pytest.mark.requires(*MIROSTAT_CAPS)
def test_mirostat_v2_mu_learns_and_resets(target: Any) -> None:
    # surprises -log2 p = 1, 2, 3, 3; mu starts at 2 * tau = 2.5, so two rows stay. A sole
    # candidate (surprise 0) moves mu to 2.5 - 1 * (0 - 1.25) = 3.75: then all four stay.
    four = from_probs([0.5, 0.25, 0.125, 0.125])
    one = candidates(np.array([0.0], F32))
    spec = [["mirostat_v2", {"seed": 3, "tau": 1.25, "eta": 1.0}]]
    with chain_of(target, spec) as fresh, chain_of(target, spec) as taught:
        assert target.sampler_apply(fresh, four).size == 2
        out = target.sampler_apply(taught, one)
        assert out.size == 1 and out.selected == 0
        grown = target.sampler_apply(taught, four)
        assert grown.size == 4, describe(grown)
        target.sampler_reset(taught)
        assert target.sampler_apply(taught, four).size == 2


@pytest.mark.invariant("SMP-082", "SMP-011")
@pytest.mark.requires(*MIROSTAT_CAPS)
@pytest.mark.parametrize(
    "entry",
    [
        ["mirostat_v2", {"seed": 21, "tau": 5.0, "eta": 0.1}],
        ["mirostat", {"n_vocab": 16, "seed": 21, "tau": 5.0, "eta": 0.1}],
    ],
    ids=["v2", "v1"],
)
def test_mirostat_reset_restarts_the_stream(target: Any, entry: Any) -> None:
    # Zipf-like rows p ~ 1/(i + 1): every -log2 p is below mu = 10 (v2) and v1's k is far above
    # 16, so each draw picks among all 16; reset must restore mu *and* reseed the stream
    zipf = candidates(-np.log(np.arange(1, 17)).astype(F32))
    with chain_of(target, [entry]) as handle:
        first = [target.sampler_apply(handle, zipf) for _ in range(10)]
        target.sampler_reset(handle)
        again = [target.sampler_apply(handle, zipf) for _ in range(10)]
    picks = [int(a.ids[a.selected]) for a in first]
    assert len(set(picks)) > 1 and all(a.size == 16 for a in first), picks
    assert [int(a.ids[a.selected]) for a in again] == picks


@pytest.mark.invariant("SMP-082")
@pytest.mark.requires(*MIROSTAT_CAPS)
@pytest.mark.parametrize(
    "entry",
    [
        ["mirostat", {"n_vocab": 8, "seed": 1, "m": 1}],  # no ratio to fit: k is NaN
        ["mirostat", {"n_vocab": 8, "seed": 1}],  # flat: s = 0, k overflows
    ],
    ids=["m-1", "flat"],
)
def test_mirostat_v1_degenerate_fits_keep_one_row(target: Any, entry: Any) -> None:
    out = None
    with chain_of(target, [entry]) as handle:
        for _ in range(3):
            out = target.sampler_apply(handle, candidates(np.zeros(8, F32)))
            assert out.size == 1 and out.selected == 0 and out.p[0] == F32(1.0), describe(out)


@pytest.mark.invariant("SMP-082")
@pytest.mark.requires(*MIROSTAT_CAPS)
@pytest.mark.parametrize(
    ("tau", "kept"),
    [(23.688125610351562, 120), (23.688127517700195, 1), (23.688129425048828, 1)],
    ids=["below", "exactly", "above"],
)
def test_mirostat_v1_k_of_2_pow_31_overflows_to_one_row(target: Any, tau: float, kept: int) -> None:
    # Zipf s = 1.5 over 120 rows, n_vocab 148: three consecutive float taus put the float k
    # just below 2^31 (int(k) fits: all 120 rows stay), at exactly 2^31 and just above; both
    # of the latter are outside int32 (x86 truncation gives INT32_MIN), so one row stays.
    cur = candidates((-1.5 * np.log(np.arange(1, 121, dtype=np.float64))).astype(F32))
    entry = ["mirostat", {"n_vocab": 148, "seed": 3, "tau": tau}]
    with chain_of(target, [entry]) as handle:
        out = target.sampler_apply(handle, cur)
    assert out.size == kept and out.ids[0] == 0, describe(out)


@pytest.mark.invariant("SMP-082", "SMP-083")
@pytest.mark.requires("sampling.chain")
@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize(
    "entry",
    [
        needs_samplers([e], e, id=i)
        for i, e in [
            ("mirostat_v2", ["mirostat_v2", {"seed": 2, "tau": 5.0, "eta": 0.0}]),
            ("adaptive_p", ["adaptive_p", {"target": -1.0, "decay": 0.5, "seed": 2}]),
        ]
    ],
)
def test_discrete_draw_over_equal_rows_follows_the_seed(target: Any, entry: Any, n: int) -> None:
    # n equal logits (n a power of two): p = 1/n each and the cumulative weights k/n are exact,
    # so discrete_distribution's lower_bound picks row ceil(n u) - 1 for the canonical u of
    # each two-output draw. Two rows already take a draw (only one row takes none).
    cur = candidates(np.zeros(n, F32))
    expected = [max(math.ceil(n * u) - 1, 0) for u in mt19937_uniforms(2, 12)]
    with chain_of(target, [entry]) as handle:
        got = [target.sampler_apply(handle, cur).selected for _ in range(12)]
    assert got == expected and len(set(expected)) == n, (got, expected)


@pytest.mark.invariant("SMP-082")
@pytest.mark.requires(*MIROSTAT_CAPS)
def test_mirostat_v1_fits_the_first_100_rows_by_default(target: Any) -> None:
    # Zipf with s = 1.5 over the first 100 rows, then a cliff. Fitted on 100 rows, s = 1.5:
    # k = int((0.5 * 2^6 / (1 - 120^-0.5))^(1 / 1.5)) = 10 rows stay (mu = 2 tau = 6); a fit
    # that reaches the cliff (m = 101) finds a steeper s and keeps fewer.
    logits = (-1.5 * np.log(np.arange(1, 121, dtype=np.float64))).astype(F32)
    logits[100:] = F32(-40.0)
    cur = candidates(logits)

    def kept(rows: TokenDataArray = cur, **extra: int) -> TokenDataArray:
        entry = ["mirostat", {"n_vocab": 120, "seed": 3, "tau": 3.0} | extra]
        with chain_of(target, [entry]) as handle:
            out: TokenDataArray = target.sampler_apply(handle, rows)
            return out

    default, explicit, wider = kept(), kept(m=100), kept(m=101)
    assert default.size == 10 and same_array(default, explicit), describe(default)
    assert wider.size < 10, describe(wider)
    # m <= 0: the C bound (size_t) m - 1 wraps, so every ratio is fitted, exactly as with an
    # m past the array's end: on the 120 rows, and on the first 101, whose last ratio is the
    # cliff (a fit that stops one ratio short keeps the 10 rows of m = 100)
    head = candidates(logits[:101])
    for rows, every_row in ((cur, kept(m=121)), (head, kept(head, m=102))):
        for m in (0, -1):
            got = kept(rows, m=m)
            assert same_array(got, every_row), (rows.size, m, describe(got))
    assert kept(head, m=102).size < 10, describe(kept(head, m=102))


@pytest.mark.invariant("SMP-082", "SMP-045")
@pytest.mark.requires(*MIROSTAT_CAPS, "sampling.top_k", "sampling.logit_bias")
def test_mirostat_v2_trusts_the_sorted_flag(target: Any) -> None:
    # top-k marks the array sorted; a logit bias after it breaks the order but keeps the flag,
    # so mirostat v2 neither sorts before nor after its cut: with mu = 20 every row stays, in
    # the array's own order, the softmax taking row 0's logit as the max
    spec = [
        ["top_k", {"k": 3}],
        ["logit_bias", {"biases": [[2, 5.0]]}],
        ["mirostat_v2", {"seed": 5, "tau": 10.0, "eta": 0.0}],
    ]
    with chain_of(target, spec) as handle:
        out = target.sampler_apply(handle, candidates(np.array([3.0, 2.0, 1.0, 0.0], F32)))
    assert out.sorted and out.ids.tolist() == [0, 1, 2], describe(out)
    assert out.logits.tolist() == [3.0, 2.0, 6.0] and int(np.argmax(out.p)) == 2, describe(out)


@pytest.mark.invariant("SMP-082")
@pytest.mark.requires(*MIROSTAT_CAPS)
@given(
    cur=token_arrays(1, 80, max_scale=4.0),
    seed=seeds(),
    tau=st.floats(0.5, 8.0),
    eta=st.floats(0.0, 1.0),
    version=st.sampled_from(["mirostat", "mirostat_v2"]),
)
def test_mirostat_selects_from_a_sorted_renormalised_head(
    target: Any, cur: TokenDataArray, seed: int, tau: float, eta: float, version: str
) -> None:
    params: dict[str, Any] = {"seed": seed, "tau": tau, "eta": eta}
    if version == "mirostat":
        params["n_vocab"] = cur.size
    with chain_of(target, [[version, params]]) as handle:
        for _ in range(3):
            out = target.sampler_apply(handle, cur)
            assert 1 <= out.size <= cur.size and out.sorted
            assert 0 <= out.selected < out.size
            assert np.all(np.diff(out.logits) <= 0)
            assert abs(float(np.sum(out.p, dtype=np.float64)) - 1.0) < 1e-5
            # the head: the kept rows are the highest logits of the input
            assert out.logits[-1] >= np.sort(cur.logits)[::-1][out.size - 1]


@pytest.mark.invariant("SMP-086")
@pytest.mark.requires(*MIROSTAT_CAPS, "sampling.adaptive_p", "sampling.input_checks")
@pytest.mark.parametrize(
    "entry",
    [
        ["mirostat", {"n_vocab": 4, "seed": 1}],
        ["mirostat_v2", {"seed": 1}],
        ["adaptive_p", {"target": 0.5, "decay": 0.5, "seed": 1}],
    ],
    ids=["v1", "v2", "adaptive-p"],
)
def test_selection_without_a_finite_logit_is_refused(target: Any, entry: Any) -> None:
    hopeless = candidates(np.full(4, -np.inf, F32))
    ok = candidates(np.array([0.0, 1.0, 2.0, 3.0], F32))
    with chain_of(target, [entry]) as a, chain_of(target, [entry]) as b:
        with raises_code("SMP_NO_MASS", field="logits", exc=SamplingError):
            target.sampler_apply(a, hopeless)
        # the refused call changed nothing: both chains continue alike
        for _ in range(4):
            x, y = target.sampler_apply(a, ok), target.sampler_apply(b, ok)
            assert x.selected == y.selected and x.size == y.size


# -- adaptive-p ----------------------------------------------------------------------------

INV_WIDTH = F32(F32(1.0) / F32(0.3))


def shaped(p: float, goal: float) -> np.float32:
    """adaptive-p's transform of one probability, in float: 5 - 10 d^2 / (1 + d)."""
    d = abs(F32(F32(F32(p) - F32(goal)) * INV_WIDTH))
    return F32(F32(5.0) - F32(F32(F32(F32(10.0) * d) * d) / F32(F32(1.0) + d)))


@pytest.mark.invariant("SMP-083")
@pytest.mark.requires(*ADAPTIVE_CAPS)
def test_adaptive_p_transform_and_moving_average(target: Any) -> None:
    # p = 0.25 each, exactly; ids 3, 2, 1, 0: no row holds its own id, so an accept is matched
    # to the selection by the token id, not by the row it was selected at
    flat = candidates(np.zeros(4, F32)).take(np.arange(3, -1, -1), sorted=False)
    spec = [["adaptive_p", {"target": 0.5, "decay": 0.75, "seed": 9}]]
    with chain_of(target, spec) as handle:
        # start: average = target, so the adapted target is 2 * 0.5 - 0.5 = 0.5
        out = target.sampler_apply(handle, flat)
        assert np.all(out.logits == shaped(0.25, 0.5)) and np.all(out.p == F32(0.25))
        assert 0 <= out.selected < 4
        assert int(out.ids[out.selected]) != out.selected
        target.sampler_accept(handle, out.selected)  # the selected row, not its token: no update
        out = target.sampler_apply(handle, flat)
        assert np.all(out.logits == shaped(0.25, 0.5)), describe(out)
        target.sampler_accept(handle, int(out.ids[out.selected]))
        # sum = 0.25 + 0.75 * 2 = 1.75, weight = 1 + 0.75 * 4 = 4: adapted = 1 - 0.4375
        out = target.sampler_apply(handle, flat)
        assert np.all(out.logits == shaped(0.25, 0.5625)), describe(out)
        target.sampler_reset(handle)
        out = target.sampler_apply(handle, flat)
        assert np.all(out.logits == shaped(0.25, 0.5))


@pytest.mark.invariant("SMP-083")
@pytest.mark.requires(*ADAPTIVE_CAPS)
def test_adaptive_p_keeps_masked_rows_and_negative_target_samples_plainly(target: Any) -> None:
    cur = candidates(np.array([0.0, 0.0, -np.inf, -np.inf], F32))
    with chain_of(target, [["adaptive_p", {"target": 0.5, "decay": 0.9, "seed": 1}]]) as h:
        out = target.sampler_apply(h, cur)
        assert out.logits.tolist() == [5.0, 5.0, -np.inf, -np.inf] and out.selected in (0, 1)
    rising = candidates(np.array([0.0, 1.0, 2.0], F32))
    with chain_of(target, [["adaptive_p", {"target": -1.0, "decay": 0.9, "seed": 1}]]) as h:
        out = target.sampler_apply(h, rising)
        assert np.array_equal(out.logits, rising.logits) and not out.sorted
        assert out.p[2] > out.p[1] > out.p[0] and abs(float(np.sum(out.p)) - 1.0) < 1e-6


@pytest.mark.invariant("SMP-083")
@pytest.mark.requires(*ADAPTIVE_CAPS)
@pytest.mark.parametrize("order", [[0, 1, 2], [2, 0, 1]], ids=["rising", "shuffled"])
def test_adaptive_p_keeps_the_array_order(target: Any, order: list[int]) -> None:
    # p ~ 0.09, 0.24, 0.67 for logits 0, 1, 2: with the adapted target 0.5 the shaped logits
    # rise with p, so they are not descending in the array's order; neither softmax sorts
    cur = candidates(np.array([0.0, 1.0, 2.0], F32)).take(np.array(order), sorted=False)
    with chain_of(target, [["adaptive_p", {"target": 0.5, "decay": 0.9, "seed": 1}]]) as h:
        out = target.sampler_apply(h, cur)
    assert out.ids.tolist() == order and not out.sorted, describe(out)
    by_id = dict(zip(out.ids.tolist(), out.logits.tolist(), strict=True))
    assert by_id[0] < by_id[1] < by_id[2] < 5.0, describe(out)
    assert 0 <= out.selected < 3 and abs(float(np.sum(out.p)) - 1.0) < 1e-6


@pytest.mark.invariant("SMP-083")
@pytest.mark.requires(*ADAPTIVE_CAPS)
@pytest.mark.parametrize(("decay", "same_as"), [(-1.0, 0.0), (5.0, 0.99)])
@given(seed=seeds(), cur=token_arrays(2, 30, max_scale=2.0))
def test_adaptive_p_decay_is_clamped(
    target: Any, decay: float, same_as: float, seed: int, cur: TokenDataArray
) -> None:
    def run(d: float) -> list[list[float]]:
        rows = []
        with chain_of(target, [["adaptive_p", {"target": 0.3, "decay": d, "seed": seed}]]) as h:
            for _ in range(5):
                out = target.sampler_apply(h, cur)
                target.sampler_accept(h, int(out.ids[out.selected]))
                rows.append(out.logits.tolist())
        return rows

    assert run(decay) == run(same_as)


@pytest.mark.invariant("SMP-083", "SMP-011")
@pytest.mark.requires(*ADAPTIVE_CAPS)
def test_adaptive_p_accept_consumes_the_selection_and_reset_forgets_it(target: Any) -> None:
    flat = candidates(np.zeros(4, F32))
    spec = [["adaptive_p", {"target": 0.5, "decay": 0.75, "seed": 9}]]
    with chain_of(target, spec) as twice, chain_of(target, spec) as reset:
        out = target.sampler_apply(twice, flat)
        target.sampler_accept(twice, int(out.ids[out.selected]))
        target.sampler_accept(twice, int(out.ids[out.selected]))  # nothing pending any more
        again = target.sampler_apply(twice, flat)
        assert np.all(again.logits == shaped(0.25, 0.5625)), describe(again)
        picks = [target.sampler_apply(reset, flat).selected for _ in range(6)]
        out = target.sampler_apply(reset, flat)
        target.sampler_reset(reset)
        target.sampler_accept(reset, int(out.ids[out.selected]))  # reset dropped the selection
        # the average is the start one and the stream restarted from the seed
        after = [target.sampler_apply(reset, flat) for _ in range(6)]
        assert np.all(after[0].logits == shaped(0.25, 0.5)), describe(after[0])
        assert [a.selected for a in after] == picks


@pytest.mark.invariant("SMP-083", "SMP-012")
@pytest.mark.requires(*ADAPTIVE_CAPS)
def test_adaptive_p_clone_copies_the_average_not_the_stream(target: Any) -> None:
    # (no accept of a pending selection in a fresh clone: llama.cpp's clone lacks the cached
    # probabilities it would read, spec/sampling.md *DRY, XTC, Mirostat, adaptive-p*)
    flat = candidates(np.zeros(4, F32))  # p = 0.25 each: the logits show the adapted target
    spec = [["adaptive_p", {"target": 0.5, "decay": 0.75, "seed": 9}]]
    with chain_of(target, spec) as handle, chain_of(target, spec) as fresh:
        out = target.sampler_apply(handle, flat)
        target.sampler_accept(handle, int(out.ids[out.selected]))  # sum 1.75, weight 4
        twin = target.sampler_clone(handle)
        try:
            picks = []
            for _ in range(6):  # applies without accepts leave the average as it is
                copied = target.sampler_apply(twin, flat)
                assert np.all(copied.logits == shaped(0.25, 0.5625)), describe(copied)
                picks.append(copied.selected)
            # the clone's stream starts afresh from the seed: it picks what a new chain picks
            assert picks == [target.sampler_apply(fresh, flat).selected for _ in range(6)]
            # sum = 0.25 + 0.75 * 1.75, weight = 1 + 0.75 * 4: adapted = 1 - 1.5625 / 4
            target.sampler_accept(twin, int(copied.ids[copied.selected]))
            moved = target.sampler_apply(twin, flat)
            assert np.all(moved.logits == shaped(0.25, 0.609375)), describe(moved)
        finally:
            target.sampler_free(twin)
        # the clone's accept did not reach the original
        again = target.sampler_apply(handle, flat)
        assert np.all(again.logits == shaped(0.25, 0.5625)), describe(again)
