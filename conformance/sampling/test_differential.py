"""Differential tests: the target's samplers against the peer's (llama.cpp's own samplers by
default, :mod:`conformance.targets.llamacpp.sampling`).

Every test feeds the same candidate arrays, seeds and accepted tokens to the target and to the
peer and requires the same kept rows, the same p (bit for bit where SMP-025 and the spec's
*Rounding* decision say so, within 1e-6 otherwise) and the same selected token. Rows in a run of
equal logits are compared as a set (their order is unspecified in llama.cpp). Chains drawn by
hypothesis use only the samplers both engines have.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.sampling.support import candidates, describe, needs_samplers
from conformance.strategies.sampling import (
    adaptive_p_entries,
    dry_entries,
    logits_from_seed,
    mirostat_entries,
    repetitive_histories,
    seeds,
    token_arrays,
    xtc_entries,
)
from reference_impl.sampling.token_data import TokenDataArray

F32 = np.float32


# samplers whose float arithmetic the spec requires to match llama.cpp bit for bit
EXACT = {
    "greedy", "dist", "top_k", "top_p", "min_p", "temp", "penalties", "logit_bias",
    "dry", "xtc", "mirostat", "mirostat_v2", "adaptive_p",
}  # fmt: skip


class Pair:
    """The same chain on the target and on the peer, driven in lockstep."""

    def __init__(self, target: Any, peer: Any, spec: Any = None, default: Any = None) -> None:
        self.target, self.peer = target, peer
        if default is not None:
            self.handles = (
                target.sampler_chain_init_default(default),
                peer.sampler_chain_init_default(default),
            )
        else:
            self.handles = (target.sampler_chain_init(spec), peer.sampler_chain_init(spec))

    def apply(self, cur: TokenDataArray) -> tuple[TokenDataArray, TokenDataArray]:
        return self.target.sampler_apply(self.handles[0], cur), self.peer.sampler_apply(
            self.handles[1], cur
        )

    def sample(self, logits: np.ndarray) -> tuple[int, int]:
        return self.target.sampler_sample(self.handles[0], logits), self.peer.sampler_sample(
            self.handles[1], logits
        )

    def accept(self, token: int) -> None:
        self.target.sampler_accept(self.handles[0], token)
        self.peer.sampler_accept(self.handles[1], token)

    def reset(self) -> None:
        self.target.sampler_reset(self.handles[0])
        self.peer.sampler_reset(self.handles[1])

    def clone(self) -> Pair:
        twin = Pair.__new__(Pair)
        twin.target, twin.peer = self.target, self.peer
        twin.handles = (
            self.target.sampler_clone(self.handles[0]),
            self.peer.sampler_clone(self.handles[1]),
        )
        return twin

    def free(self) -> None:
        self.target.sampler_free(self.handles[0])
        self.peer.sampler_free(self.handles[1])


def _runs(cur: TokenDataArray) -> np.ndarray:
    """The index of the run of equal logits each row belongs to."""
    return np.concatenate([[0], np.cumsum(cur.logits[1:] != cur.logits[:-1])]).astype(np.int64)


def _canonical(cur: TokenDataArray) -> np.ndarray:
    """Row order with each run of equal logits sorted by id."""
    return np.lexsort((cur.ids, _runs(cur)))


def _tail(cur: TokenDataArray) -> np.ndarray:
    """Rows of a sorted result whose logit equals the last one: a cut (top-k, top-p, min-p)
    through a run of equal logits may keep other members of the run in llama.cpp."""
    if not (cur.sorted and cur.size):
        return np.zeros(cur.size, dtype=bool)
    return np.asarray(cur.logits == cur.logits[-1])


def assert_same(mine: TokenDataArray, theirs: TokenDataArray, exact: bool) -> None:
    """Same rows, flags and selection. ``exact``: bit-identical values in the same order (up
    to the order inside runs of equal logits); otherwise the same rows as a set with values
    within 1e-6 (last-bit ``logf`` differences may swap rows of nearly equal typical score).
    The ids of a trailing run of equal logits (see :func:`_tail`) are not compared.
    """
    msg = f"target:\n{describe(mine)}\npeer:\n{describe(theirs)}"
    assert mine.size == theirs.size and mine.sorted == theirs.sorted, msg
    assert mine.selected == theirs.selected, msg
    tail_a, tail_b = _tail(mine), _tail(theirs)
    if exact:
        a, b = _canonical(mine), _canonical(theirs)
        assert np.array_equal(mine.ids[a][~tail_a[a]], theirs.ids[b][~tail_b[b]]), msg
        assert np.array_equal(mine.logits[a], theirs.logits[b], equal_nan=True), msg
        assert np.array_equal(mine.p[a], theirs.p[b], equal_nan=True), msg
        if 0 <= mine.selected < mine.size:
            assert mine.logits[mine.selected] == theirs.logits[theirs.selected], msg
        return

    def close(x: Any, y: Any) -> None:
        np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-6, err_msg=msg)

    head_a, head_b = np.flatnonzero(~tail_a), np.flatnonzero(~tail_b)
    head_a, head_b = head_a[np.argsort(mine.ids[head_a])], head_b[np.argsort(theirs.ids[head_b])]
    assert np.array_equal(mine.ids[head_a], theirs.ids[head_b]), msg
    close(mine.logits[head_a], theirs.logits[head_b])
    close(mine.p[head_a], theirs.p[head_b])
    close(np.sort(mine.logits[tail_a]), np.sort(theirs.logits[tail_b]))
    close(np.sort(mine.p[tail_a]), np.sort(theirs.p[tail_b]))
    if 0 <= mine.selected < mine.size:
        close(mine.logits[mine.selected], theirs.logits[theirs.selected])


def _exact(spec: list[Any]) -> bool:
    return all((e if isinstance(e, str) else e[0]) in EXACT for e in spec)


# -- one sampler at a time ----------------------------------------------------------------

keep = st.integers(0, 4)
SINGLE: dict[str, tuple[str, st.SearchStrategy[Any]]] = {
    "greedy": ("SMP-020", st.just("greedy")),
    "top_k": ("SMP-030", st.builds(lambda k: ["top_k", {"k": k}], st.integers(-1, 400))),
    "top_p": (
        "SMP-031",
        st.builds(lambda p, m: ["top_p", {"p": p, "min_keep": m}], st.floats(0.0, 1.0), keep),
    ),
    "min_p": (
        "SMP-032",
        st.builds(lambda p, m: ["min_p", {"p": p, "min_keep": m}], st.floats(0.0, 1.2), keep),
    ),
    "typical": (
        "SMP-034",
        st.builds(lambda p, m: ["typical", {"p": p, "min_keep": m}], st.floats(0.05, 1.0), keep),
    ),
    "top_n_sigma": (
        "SMP-035",
        st.builds(lambda n: ["top_n_sigma", {"n": n}], st.floats(-1.0, 3.0)),
    ),
    "temp": ("SMP-040", st.builds(lambda t: ["temp", {"t": t}], st.floats(-0.5, 3.0))),
    "temp_ext": (
        "SMP-042",
        st.builds(
            lambda t, d, e: ["temp_ext", {"t": t, "delta": d, "exponent": e}],
            st.floats(0.0, 2.0),
            st.floats(-0.5, 1.0),
            st.floats(0.2, 3.0),
        ),
    ),
    "penalties": (
        "SMP-043",
        st.builds(
            lambda n, r, f, p: ["penalties", {"last_n": n, "repeat": r, "freq": f, "present": p}],
            st.integers(1, 16),
            st.floats(0.5, 2.5),
            st.floats(-1.0, 1.0),
            st.floats(-1.0, 1.0),
        ),
    ),
    "dry": ("SMP-080", dry_entries()),
    "xtc": ("SMP-081", xtc_entries()),
    "mirostat": ("SMP-082", mirostat_entries()),
    "mirostat_v2": ("SMP-082", mirostat_entries(v2=True)),
    "adaptive_p": ("SMP-083", adaptive_p_entries()),
    "logit_bias": (
        "SMP-045",
        st.builds(
            lambda b: ["logit_bias", {"biases": b}],
            st.lists(st.tuples(st.integers(-2, 400), st.floats(-5.0, 5.0)).map(list), max_size=6),
        ),
    ),
}


@pytest.mark.requires("sampling.chain", "sampling.dist")
@pytest.mark.parametrize(
    "kind",
    [
        pytest.param(
            k, marks=[pytest.mark.invariant(v[0], "SMP-025"), pytest.mark.requires(f"sampling.{k}")]
        )
        for k, v in SINGLE.items()
    ],
)
@given(
    data=st.data(),
    cur=token_arrays(1, 400, max_scale=3.0),
    seed=seeds(),
    history=st.lists(st.integers(0, 400), max_size=10),
)
def test_single_sampler_matches_peer(
    target: Any,
    peer: Any,
    kind: str,
    data: st.DataObject,
    cur: TokenDataArray,
    seed: int,
    history: list[int],
) -> None:
    entry = data.draw(SINGLE[kind][1], label="entry")
    for spec in ([entry], [entry, ["dist", {"seed": seed}]]):
        pair = Pair(target, peer, spec)
        try:
            for token in history:
                pair.accept(token)
            for _ in range(2):
                assert_same(*pair.apply(cur), exact=_exact(spec))
        finally:
            pair.free()


# -- dist bit for bit ---------------------------------------------------------------------


@pytest.mark.invariant("SMP-025", "SMP-021")
@pytest.mark.requires("sampling.chain", "sampling.dist")
@given(cur=token_arrays(1, 5000, max_scale=8.0), seed=seeds())
def test_dist_is_bit_identical(target: Any, peer: Any, cur: TokenDataArray, seed: int) -> None:
    pair = Pair(target, peer, [["dist", {"seed": seed}]])
    try:
        for _ in range(5):
            mine, theirs = pair.apply(cur)
            assert mine.selected == theirs.selected
            assert np.array_equal(mine.p, theirs.p), "p differs from the peer's in some bit"
    finally:
        pair.free()


@pytest.mark.invariant("SMP-025", "SMP-050")
@pytest.mark.requires("sampling.default_chain", "sampling.dist")
@pytest.mark.parametrize("n_vocab", [32000, 131072])
def test_large_vocab_default_chain_and_dist(target: Any, peer: Any, n_vocab: int) -> None:
    logits = logits_from_seed(n_vocab, n_vocab, 3.0)
    for kwargs in ({"spec": [["dist", {"seed": 123}]]}, {"default": {"seed": 123}}):
        pair = Pair(target, peer, **kwargs)
        try:
            cur = candidates(logits)
            for _ in range(3):
                assert_same(*pair.apply(cur), exact=True)
            tokens = [pair.sample(logits) for _ in range(8)]
            assert all(a == b for a, b in tokens), tokens
        finally:
            pair.free()


@pytest.mark.invariant("SMP-030", "SMP-031", "SMP-025")
@pytest.mark.requires("sampling.chain", "sampling.dist")
@pytest.mark.parametrize(
    "entry",
    [
        needs_samplers([e], e, id=name)
        for name, e in (
            ("top_k-40", ["top_k", {"k": 40}]),
            ("top_k-300", ["top_k", {"k": 300}]),
            ("top_p-0.3", ["top_p", {"p": 0.3, "min_keep": 0}]),
            ("top_p-0.9-keep300", ["top_p", {"p": 0.9, "min_keep": 300}]),
        )
    ],
)
def test_large_vocab_cuts_through_equal_logits_match_peer(
    target: Any, peer: Any, entry: list[Any]
) -> None:
    # logits on a 1/4 grid: every cut of a 6000-row array (over the size an engine may select
    # from without a full sort) goes through a run of equal logits
    logits = (np.round(logits_from_seed(6000, 6000, 3.0) * 4) / 4).astype(F32)
    for spec in ([entry], [entry, ["dist", {"seed": 7}]]):
        pair = Pair(target, peer, spec)
        try:
            assert_same(*pair.apply(candidates(logits)), exact=True)
        finally:
            pair.free()


# -- chains, state, default chain ---------------------------------------------------------


CHAIN_FILTERS = ("top_k", "top_p", "min_p", "top_n_sigma", "temp", "penalties", "logit_bias")
CHAIN_SAMPLERS = tuple(f"sampling.{k}" for k in (*CHAIN_FILTERS, "temp_ext", "typical"))


def _available(target: Any, peer: Any, name: str) -> bool:
    cap = f"sampling.{name}"
    return bool(target.has(cap) and peer.has(cap))


def _parity_filters(target: Any, peer: Any) -> st.SearchStrategy[list[Any]]:
    """Chains of the filters both engines have (none: an empty list)."""
    options = [SINGLE[k][1] for k in CHAIN_FILTERS if _available(target, peer, k)]
    if _available(target, peer, "temp_ext"):
        options.append(
            st.builds(
                lambda t, d, e: ["temp_ext", {"t": t, "delta": d, "exponent": e}],
                st.floats(0.5, 1.5),
                st.floats(0.0, 0.3),
                st.floats(0.5, 2.0),
            )
        )
    typical_first = (
        st.lists(SINGLE["typical"][1], max_size=1)
        if _available(target, peer, "typical")
        else st.just([])
    )
    rest = st.lists(st.one_of(*options), max_size=4) if options else st.just([])
    # typical goes first: after strong temperatures a p can underflow to 0 (undefined, spec)
    return st.builds(lambda t, r: t + r, typical_first, rest)


@pytest.mark.invariant("SMP-010", "SMP-013", "SMP-023", "SMP-044")
@pytest.mark.requires("sampling.chain", "sampling.dist")
@pytest.mark.uses(*CHAIN_SAMPLERS)
@given(
    data=st.data(),
    seed=seeds(),
    row_seed=st.integers(0, 2**32 - 1),
    n=st.integers(2, 600),
)
def test_chain_sequences_match_peer(
    target: Any, peer: Any, data: st.DataObject, seed: int, row_seed: int, n: int
) -> None:
    filters = data.draw(_parity_filters(target, peer), label="filters")
    spec = [*filters, ["dist", {"seed": seed}]]
    logits = logits_from_seed(row_seed, n, 2.0)
    pair = Pair(target, peer, spec)
    try:
        tokens = [pair.sample(logits) for _ in range(10)]
        assert all(a == b for a, b in tokens), tokens
        assert_same(*pair.apply(candidates(logits)), exact=_exact(spec))
    finally:
        pair.free()


@pytest.mark.invariant("SMP-011", "SMP-012", "SMP-024", "SMP-044")
@pytest.mark.requires("sampling.chain", "sampling.penalties", "sampling.top_k", "sampling.dist")
@given(seed=seeds(), last_n=st.integers(1, 6), warmup=st.integers(0, 8))
def test_accept_reset_clone_match_peer(
    target: Any, peer: Any, seed: int, last_n: int, warmup: int
) -> None:
    spec = [
        ["penalties", {"last_n": last_n, "repeat": 1.8, "freq": 0.3, "present": 0.2}],
        ["top_k", {"k": 25}],
        ["dist", {"seed": seed}],
    ]
    logits = logits_from_seed(seed, 50, 1.0)
    pair = Pair(target, peer, spec)
    try:
        for _ in range(warmup):
            a, b = pair.sample(logits)
            assert a == b
        twin = pair.clone()
        try:
            after = [pair.sample(logits) for _ in range(6)]
            assert [twin.sample(logits) for _ in range(6)] == after
        finally:
            twin.free()
        pair.reset()
        again = [pair.sample(logits) for _ in range(6)]
        assert all(a == b for a, b in after + again)
    finally:
        pair.free()


STATEFUL = {
    "dry": ("SMP-080", dry_entries()),
    "xtc": ("SMP-081", xtc_entries()),
    "mirostat": ("SMP-082", mirostat_entries()),
    "mirostat_v2": ("SMP-082", mirostat_entries(v2=True)),
    "adaptive_p": ("SMP-083", adaptive_p_entries()),
}


@pytest.mark.requires("sampling.chain", "sampling.dist")
@pytest.mark.parametrize(
    "kind",
    [
        pytest.param(
            k,
            marks=[
                pytest.mark.invariant(v[0], "SMP-011", "SMP-012"),
                pytest.mark.requires(f"sampling.{k}"),
            ],
        )
        for k, v in STATEFUL.items()
    ],
)
@given(
    data=st.data(),
    seed=seeds(),
    row_seed=st.integers(0, 2**32 - 1),
    n=st.integers(2, 300),
    history=repetitive_histories(),
)
def test_stateful_sampler_sequences_match_peer(
    target: Any,
    peer: Any,
    kind: str,
    data: st.DataObject,
    seed: int,
    row_seed: int,
    n: int,
    history: list[int],
) -> None:
    """Step by step over accepts: the candidate arrays and sampled tokens of the target equal
    the peer's, also for a clone taken midway and after a reset."""
    entry = data.draw(STATEFUL[kind][1], label="entry")
    selects = kind in ("mirostat", "mirostat_v2", "adaptive_p")
    spec = [entry] if selects else [entry, ["dist", {"seed": seed}]]
    logits = logits_from_seed(row_seed, n, 2.0)
    cur = candidates(logits)
    pair = Pair(target, peer, spec)
    try:
        for token in history:
            pair.accept(token % n)
        for _ in range(3):
            assert_same(*pair.apply(cur), exact=True)
            a, b = pair.sample(logits)
            assert a == b
        twin = pair.clone()
        try:
            for _ in range(4):
                assert_same(*twin.apply(cur), exact=True)
                assert_same(*pair.apply(cur), exact=True)
                x, y = twin.sample(logits)
                assert x == y
                a, b = pair.sample(logits)
                assert a == b
        finally:
            twin.free()
        pair.reset()
        tokens = [pair.sample(logits) for _ in range(6)]
        assert all(a == b for a, b in tokens), tokens
    finally:
        pair.free()


@pytest.mark.invariant("SMP-050", "SMP-051")
@pytest.mark.requires("sampling.default_chain")
@given(
    prm=st.fixed_dictionaries(
        {"seed": seeds()},
        optional={
            "top_k": st.integers(-1, 80),
            "top_p": st.floats(0.5, 1.0),
            "min_p": st.floats(0.0, 0.2),
            "typ_p": st.sampled_from([1.0, 0.95]),
            "temp": st.floats(0.5, 1.5),
            "dynatemp_range": st.sampled_from([0.0, 0.2]),
            "penalty_last_n": st.integers(0, 16),
            "penalty_repeat": st.floats(0.9, 1.4),
            "penalty_present": st.floats(0.0, 0.5),
            "min_keep": st.integers(0, 3),
            "logit_bias": st.lists(
                st.tuples(st.integers(0, 500), st.floats(-3.0, 3.0)).map(list), max_size=3
            ),
            "dry_multiplier": st.sampled_from([0.0, 0.8, 2.0]),
            "dry_allowed_length": st.integers(0, 3),
            "dry_penalty_last_n": st.sampled_from([-1, 0, 8, 64]),
            "dry_sequence_breakers": st.lists(
                st.lists(st.integers(0, 40), min_size=1, max_size=2), max_size=3
            ),
            "xtc_probability": st.sampled_from([0.0, 0.5, 1.0]),
            "xtc_threshold": st.sampled_from([0.05, 0.1, 0.3, 0.6]),
        },
    ),
    row_seed=st.integers(0, 2**32 - 1),
    history=repetitive_histories(vocab=40),
)
def test_default_chain_matches_peer(
    target: Any, peer: Any, prm: dict[str, Any], row_seed: int, history: list[int]
) -> None:
    logits = logits_from_seed(row_seed, 2000, 2.0)
    pair = Pair(target, peer, default=prm)
    try:
        for token in history:
            pair.accept(token)
        tokens = [pair.sample(logits) for _ in range(8)]
        assert all(a == b for a, b in tokens), tokens
        exact = prm.get("dynatemp_range", 0.0) == 0.0 and prm.get("typ_p", 1.0) == 1.0
        assert_same(*pair.apply(candidates(logits)), exact=exact)
    finally:
        pair.free()
