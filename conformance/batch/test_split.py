"""The splitter's rules and properties (spec/batch.md)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from conformance.assertions import assert_code, raises_code, unchanged
from conformance.batch import examples as ex
from conformance.batch.checks import (
    check_empty_ubatch,
    check_ubatch,
    sanitize,
    split,
    split_until_empty,
    summarize_ubatch,
    token_seqs,
)
from conformance.fixtures.batch_corpus import case_named
from conformance.strategies.batch import (
    MANY_SEQ_MAX,
    BatchCase,
    many_sequence_batches,
    valid_cases,
)
from reference_impl.batch.split import SplitPlan
from reference_impl.batch.types import LLAMA_MAX_SEQ, Batch
from reference_impl.errors import BatchError

pytestmark = pytest.mark.requires("batch.sanitize", "batch.split")

MODES = st.sampled_from(["simple", "equal", "equal_seq", "seq"])
UBATCH = st.integers(1, 9)


def _splitter(target: Any, case: BatchCase | Batch, **kw: Any) -> tuple[Any, Any]:
    if isinstance(case, Batch):
        kw.setdefault("n_vocab", 32)
        kw.setdefault("n_seq_max", 8)
        sb = target.batch_sanitize(case, **kw)
    else:
        sb = sanitize(target, case)
    return sb, target.batch_splitter(sb)


def _run(splitter: Any, mode: str, n_ubatch: int, keep_tail: int = 0) -> list[Any]:
    if mode == "equal_seq":
        return split_until_empty(splitter, "equal", n_ubatch, True, keep_tail)
    return split_until_empty(splitter, mode, n_ubatch, False, keep_tail if mode == "equal" else 0)


def _refused(sb: Any, mode: str) -> bool:
    return mode == "equal_seq" and sb.has_cpl


# ---- SPL-001: split_simple -------------------------------------------------------------------


@pytest.mark.invariant("SPL-001")
@given(valid_cases(max_tokens=30), UBATCH)
@example(case=ex.GET_ONE, n_ubatch=2)
def test_split_simple(target: Any, case: BatchCase, n_ubatch: int) -> None:
    sb, sp = _splitter(target, case)
    ubs = _run(sp, "simple", n_ubatch)
    start = 0
    for ub in ubs:
        size = min(n_ubatch, sb.n_tokens - start)
        assert list(ub.idxs) == list(range(start, start + size))
        assert (ub.equal_seqs, ub.n_seq_tokens, ub.n_seqs) == (False, 1, ub.n_tokens)
        start += size
    assert start == sb.n_tokens


# ---- SPL-002 .. SPL-007: every ubatch, every split ---------------------------------------------


@pytest.mark.invariant("SPL-002", "SPL-003", "SPL-004")
@given(valid_cases(max_tokens=30), MODES, UBATCH, st.integers(0, 3))
@example(case=ex.UNEQUAL, mode="equal", n_ubatch=8, tail=0)
def test_ubatch_records(target: Any, case: BatchCase, mode: str, n_ubatch: int, tail: int) -> None:
    sb, sp = _splitter(target, case)
    for ub in _run(sp, mode, n_ubatch, tail if tail < n_ubatch else 0):
        check_ubatch(ub, sb)


@pytest.mark.invariant("SPL-003")
def test_seq_idx_is_fresh_per_ubatch(target: Any) -> None:
    # four sequences, then only sequence 0 is left: seq_idx must forget 1..3
    b = Batch.from_lists(
        list(range(6)), pos=[0, 0, 0, 0, 1, 2], seq_ids=[[0], [1], [2], [3], [0], [0]]
    )
    _, sp = _splitter(target, b)
    first, second = _run(sp, "equal", 4)
    assert list(first.seq_id_unq) == [0, 1, 2, 3] and list(first.seq_idx[:5]) == [0, 1, 2, 3, -1]
    assert list(second.idxs) == [4, 5] and list(second.seq_id_unq) == [0]
    assert list(second.seq_idx[:5]) == [0, -1, -1, -1, -1]
    assert int((np.asarray(second.seq_idx) >= 0).sum()) == 1


@pytest.mark.invariant("SPL-004")
def test_positions_layout(target: Any) -> None:
    # token batch with 4 sections: each section repeats the position
    _, sp = _splitter(target, Batch.from_lists([1, 2, 3], pos=[4, 5, 6]), n_pos_per_embd=4)
    ub = sp.split_simple(2)
    assert ub.n_pos == 4 and list(ub.pos) == [4, 5] * 4
    # every accepted section count (SAN-002: 1..4) repeats it, not only M-RoPE's 4
    for n_pos in (1, 2, 3):
        _, sp = _splitter(target, Batch.from_lists([1, 2, 3], pos=[4, 5, 6]), n_pos_per_embd=n_pos)
        ub = sp.split_simple(2)
        assert ub.n_pos == n_pos and list(ub.pos) == [4, 5] * n_pos, f"n_pos_per_embd {n_pos}"
    # embedding batch: sections copied as given (section-major)
    planes = np.array([[10, 11, 12], [5, 6, 7], [7, 8, 9], [0, 1, 2]], np.int32)
    b = Batch(embd=np.arange(6, dtype=np.float32).reshape(3, 2), pos=planes)
    _, sp = _splitter(target, b, n_pos_per_embd=4)
    sp.split_simple(1)
    ub = sp.split_simple(2)
    assert list(ub.pos) == [11, 12, 6, 7, 8, 9, 1, 2]
    assert np.array_equal(np.asarray(ub.embd).reshape(2, 2), [[2, 3], [4, 5]])
    assert ub.token is None


@pytest.mark.invariant("SPL-005", "SPL-007")
@given(valid_cases(max_tokens=30), MODES, UBATCH, st.integers(0, 3))
def test_each_token_once_and_all_outputs(
    target: Any, case: BatchCase, mode: str, n_ubatch: int, tail: int
) -> None:
    sb, sp = _splitter(target, case)
    ubs = _run(sp, mode, n_ubatch, tail if tail < n_ubatch else 0)
    emitted = [int(i) for ub in ubs for i in ub.idxs]
    if _refused(sb, mode):
        assert emitted == [] and sp.n_used == 0 and sp.out_ids == []
        return
    assert sorted(emitted) == list(range(sb.n_tokens))
    assert sp.n_used == sp.n_tokens == sb.n_tokens
    assert len(sp.out_ids) == sb.n_outputs == int(np.count_nonzero(sb.batch.logits))


@pytest.mark.invariant("SPL-006")
@given(valid_cases(max_tokens=30), MODES, UBATCH)
@example(case=ex.UNEQUAL, mode="equal", n_ubatch=8)
def test_out_ids_in_emission_order(target: Any, case: BatchCase, mode: str, n_ubatch: int) -> None:
    _, sp = _splitter(target, case)
    ubs = _run(sp, mode, n_ubatch)
    want = [int(i) for ub in ubs for i, o in zip(ub.idxs, ub.output) if o != 0]
    assert list(sp.out_ids) == want
    sp.split_reset()
    assert list(sp.out_ids) == []


@pytest.mark.invariant("SPL-006")
def test_out_ids_not_in_batch_order(target: Any) -> None:
    case = case_named("unequal_seq_lengths")
    _, sp = _splitter(target, case.build(), n_seq_max=4)
    ubs = _run(sp, "equal", 8)
    assert [list(ub.idxs) for ub in ubs] == [[0, 1, 4, 5], [2, 3]]
    assert list(sp.out_ids) == [5, 3]


@pytest.mark.invariant("SPL-007")
@given(valid_cases(max_tokens=30), st.lists(st.tuples(MODES, UBATCH), min_size=2, max_size=4))
def test_output_count_independent_of_split(
    target: Any, case: BatchCase, plans: list[tuple[str, int]]
) -> None:
    sb, sp = _splitter(target, case)
    counts = set()
    for mode, n_ubatch in plans:
        if _refused(sb, mode):
            continue
        ubs = _run(sp, mode, n_ubatch)
        counts.add(sum(int(np.count_nonzero(ub.output)) for ub in ubs))
        assert len(sp.out_ids) == sb.n_outputs
    assert counts <= {sb.n_outputs}


# ---- SPL-008 .. SPL-013: split_equal ---------------------------------------------------------


def _expected_sets(
    sb: Any, used: set[int], n_ubatch: int, sequential: bool
) -> list[frozenset[int]]:
    """SPL-009, written from the rule: scan unused tokens in batch order."""
    seqs = token_seqs(sb)
    chosen: list[frozenset[int]] = []
    last = -1
    for i in range(sb.n_tokens):
        if i in used:
            continue
        cur = frozenset(seqs[i])
        add = all(not (c & cur) for c in chosen)
        if sequential:
            add = add and (not chosen or seqs[i][0] == last + 1)
        if add:
            chosen.append(cur)
            last = seqs[i][0]
            if len(chosen) > n_ubatch:
                break
    return chosen


@pytest.mark.invariant("SPL-008", "SPL-009", "SPL-010", "SPL-013")
@given(valid_cases(max_tokens=30), UBATCH, st.booleans(), st.integers(0, 3))
@example(case=ex.OVERLAPPING_SETS, n_ubatch=4, sequential=False, tail=0)
def test_split_equal_sets(
    target: Any, case: BatchCase, n_ubatch: int, sequential: bool, tail: int
) -> None:
    sb, sp = _splitter(target, case)
    if sequential and sb.has_cpl:
        return
    _check_split_equal_sets(sb, sp, n_ubatch, sequential, tail if tail < n_ubatch else 0)


def _check_split_equal_sets(
    sb: Any, sp: Any, n_ubatch: int, sequential: bool, n_keep_tail: int = 0
) -> None:
    """Split ``sp`` to the end with split_equal; every ubatch follows SPL-008/009/010 and, with
    ``n_keep_tail``, SPL-013: the expected runs are rebuilt from the rules, ubatch by ubatch."""
    seqs = token_seqs(sb)
    used: set[int] = set()
    members: dict[frozenset[int], list[int]] = {}
    for i, s in enumerate(seqs):
        members.setdefault(frozenset(s), []).append(i)
    for ub in _run(sp, "equal_seq" if sequential else "equal", n_ubatch, n_keep_tail):
        assert ub.equal_seqs
        chosen = _expected_sets(sb, used, n_ubatch, sequential)  # SPL-009
        unused = [[i for i in members[c] if i not in used] for c in chosen]
        rem = [len(u) for u in unused]
        length = min(min(rem), max(1, n_ubatch // len(chosen)))  # SPL-010
        n_keep = len(chosen)
        if n_keep_tail > 0:  # SPL-013: the prefix of sets that finish or keep >= T for later
            n_keep = 0
            for r in rem:
                if not (r == length or r - length >= n_keep_tail):
                    break
                n_keep += 1
            if n_keep == 0:  # none does: the first chosen set alone, finished or cut to keep T
                n_keep = 1
                length = rem[0] if rem[0] <= n_ubatch else rem[0] - n_keep_tail
        # SPL-008: the kept sets, laid out set by set, each its next unused tokens
        want = [u[:length] for u in unused[:n_keep]]
        runs = [
            [int(i) for i in ub.idxs[k * ub.n_seq_tokens : (k + 1) * ub.n_seq_tokens]]
            for k in range(ub.n_seqs)
        ]
        assert (ub.n_seqs, ub.n_seq_tokens) == (n_keep, length), (runs, want)
        assert runs == want, f"sets {[sorted(c) for c in chosen[:n_keep]]}"
        for a in range(n_keep):
            for b in range(a + 1, n_keep):
                assert not (chosen[a] & chosen[b])
        used.update(int(i) for i in ub.idxs)
    assert sorted(used) == list(range(sb.n_tokens))


@pytest.mark.invariant("SPL-008", "SPL-009", "SPL-010")
@pytest.mark.parametrize("sequential", [False, True], ids=["any", "sequential"])
@pytest.mark.parametrize("layout", ["blocks", "interleaved"])
@pytest.mark.parametrize("n_ubatch", [3, 8, 32])
def test_split_equal_sets_many_uneven_sequences(
    target: Any, layout: str, n_ubatch: int, sequential: bool
) -> None:
    # twenty sequences of uneven lengths (more sets than the small batches above make): a
    # sequence runs dry while the ones before it still hold tokens, and neither scan may pick
    # a set with no unused token left
    lengths = [1 + (5 * k) % 4 for k in range(20)]  # 1, 2, 3, 4, 1, 2, ...
    if layout == "blocks":
        order = [(s, p) for s, n in enumerate(lengths) for p in range(n)]
    else:  # round-robin over the sequences that still have tokens
        order = [(s, p) for p in range(max(lengths)) for s, n in enumerate(lengths) if p < n]
    b = Batch.from_lists(
        [i % 32 for i in range(len(order))],
        pos=[p for _, p in order],
        seq_ids=[[s] for s, _ in order],
    )
    sb, sp = _splitter(target, b, n_seq_max=len(lengths))
    _check_split_equal_sets(sb, sp, n_ubatch, sequential)


@pytest.mark.invariant("SPL-008", "SPL-009", "SPL-010", "SPL-013")
@given(
    many_sequence_batches(),
    st.sampled_from([1, 2, 3, 4, 6, 8, 32]),
    st.booleans(),
    st.integers(0, 3),
)
@example(batch=ex.CHAIN_INTO_FIRST_SET, n_ubatch=2, sequential=True, tail=0)
def test_split_equal_many_sequences(
    target: Any, batch: Batch, n_ubatch: int, sequential: bool, tail: int
) -> None:
    # 17 to 40 sequences of uneven lengths, drawn interleavings and id orders, some sharing a
    # prefix: more sequence sets than valid_cases makes, so sets run dry at different times
    # while the scan, the run length and n_keep_tail's resolution are rebuilt from the rules
    sb, sp = _splitter(target, batch, n_seq_max=MANY_SEQ_MAX)
    sequential = sequential and not sb.has_cpl  # SPL-011 refuses coupled sequential splits
    _check_split_equal_sets(sb, sp, n_ubatch, sequential, tail if tail < n_ubatch else 0)


@pytest.mark.invariant("SPL-010")
def test_more_sets_than_ubatch(target: Any) -> None:
    b = Batch.from_lists([1, 2, 3, 4], pos=[0, 0, 0, 1], seq_ids=[[0], [1], [2], [0]])
    _, sp = _splitter(target, b)
    ub = sp.split_equal(2, False)
    # the scan stops only once more than U sets are chosen: U + 1 sets of one token
    assert (ub.n_tokens, ub.n_seqs, ub.n_seq_tokens) == (3, 3, 1)
    assert list(ub.idxs) == [0, 1, 2]


@pytest.mark.invariant("SPL-009", "SPL-010", "SPL-015")
@pytest.mark.parametrize(
    ("sequential", "per_set"),
    [(False, 1), (True, 1), (False, 2)],
    ids=["any", "sequential", "pairs"],
)
def test_more_sets_than_ubatch_many_sequences(target: Any, sequential: bool, per_set: int) -> None:
    # twenty one-token sequence sets in order (a batch with many sequence sets; with pairs each
    # token belongs to two sequences): the scan still stops at U + 1 sets
    n = 20
    sets = [[per_set * k + j for j in range(per_set)] for k in range(n)]
    b = Batch.from_lists(list(range(1, n + 1)), pos=[0] * n, seq_ids=sets)
    sb, sp = _splitter(target, b, n_seq_max=n * per_set)
    for n_ubatch in (2, 5):
        sp.split_reset()
        ub = sp.split_equal(n_ubatch, sequential)
        assert (ub.n_tokens, ub.n_seqs, ub.n_seq_tokens) == (n_ubatch + 1, n_ubatch + 1, 1)
        assert [int(i) for i in ub.idxs] == list(range(n_ubatch + 1))
    # more sets than the splitter's small-batch path handles also run dry (SPL-015): every
    # token once, in batch order, then the empty ubatch
    taken: list[int] = []
    for ub in split_until_empty(sp, "equal", 5, sequential):
        check_ubatch(ub, sb)
        taken.extend(int(i) for i in ub.idxs)
    assert taken == list(range(n))
    check_empty_ubatch(sp.split_equal(5, sequential))


@pytest.mark.invariant("SPL-011")
def test_sequential_refuses_coupled(target: Any) -> None:
    b = Batch.from_lists([1, 2], pos=[0, 1], seq_ids=[[0, 1], [0, 1]])
    _, sp = _splitter(target, b)
    ub = sp.split_equal(4, True)
    assert ub.n_tokens == 0 and sp.n_used == 0 and list(sp.out_ids) == []
    assert_code(sp.last_error, "SPL_COUPLED_SEQUENTIAL")
    ub = sp.split_equal(4, False)
    assert (ub.n_tokens, ub.n_seqs, ub.n_seqs_unq) == (2, 1, 2)
    assert list(ub.seq_idx[:3]) == [0, 1, -1]


@pytest.mark.invariant("SPL-011")
@given(valid_cases(max_tokens=20), UBATCH)
@example(case=ex.OVERLAPPING_SETS, n_ubatch=4)
def test_sequential_refusal_property(target: Any, case: BatchCase, n_ubatch: int) -> None:
    sb, sp = _splitter(target, case)
    ub = sp.split_equal(n_ubatch, True)
    if sb.has_cpl:
        assert ub.n_tokens == 0 and sp.n_used == 0
        assert_code(sp.last_error, "SPL_COUPLED_SEQUENTIAL")
        assert sp.split_equal(n_ubatch, False).n_tokens > 0
    else:
        assert ub.n_tokens > 0 and sp.last_error is None


@pytest.mark.invariant("SPL-012")
@given(valid_cases(max_tokens=30), st.integers(2, 9), st.integers(1, 4), st.booleans())
@example(case=ex.FIVE, n_ubatch=4, tail=2, sequential=False)
def test_keep_tail(
    target: Any, case: BatchCase, n_ubatch: int, tail: int, sequential: bool
) -> None:
    if tail >= n_ubatch:
        return
    sb, sp = _splitter(target, case)
    if sequential and sb.has_cpl:
        return
    ubs = _run(sp, "equal_seq" if sequential else "equal", n_ubatch, tail)
    where = {int(i): k for k, ub in enumerate(ubs) for i in ub.idxs}
    assert len(where) == sb.n_tokens
    sets: dict[frozenset[int], list[int]] = {}
    for i, s in enumerate(token_seqs(sb)):
        sets.setdefault(frozenset(s), []).append(i)
    for toks in sets.values():
        last = toks[-tail:]
        assert len({where[i] for i in last}) == 1, f"tail {last} split across ubatches"


@pytest.mark.invariant("SPL-013")
@pytest.mark.parametrize(
    ("lengths", "n_ubatch", "sequential", "expect"),
    [
        ([2, 2], 4, False, [[0, 0, 1, 1]]),
        ([2, 3], 4, True, [[0, 0], [1, 1, 1]]),
        ([3, 3], 4, False, [[0, 0, 0], [1, 1, 1]]),
        ([5], 4, False, [[0, 0, 0], [0, 0]]),
        ([6], 4, False, [[0, 0, 0, 0], [0, 0]]),
        ([3, 4], 6, True, [[0, 0, 0], [1, 1, 1, 1]]),
        ([1, 5, 2], 4, False, [[0, 1], [1, 1, 2, 2], [1, 1]]),
        # no set qualifies: the first finishes, whether the next holds more or fewer tokens
        ([3, 4], 4, False, [[0, 0, 0], [1, 1, 1, 1]]),
        ([3, 2], 4, False, [[0, 0, 0], [1, 1]]),
    ],
)
def test_keep_tail_resolution(
    target: Any, lengths: list[int], n_ubatch: int, sequential: bool, expect: list[list[int]]
) -> None:
    pos, seqs = [], []
    for s, k in enumerate(lengths):
        pos += list(range(k))
        seqs += [[s]] * k
    _, sp = _splitter(target, Batch.from_lists([1] * len(pos), pos=pos, seq_ids=seqs))
    ubs = _run(sp, "equal_seq" if sequential else "equal", n_ubatch, 2)
    assert [[int(ub.seq_id[i, 0]) for i in range(ub.n_tokens)] for ub in ubs] == expect


# ---- SPL-014: split_seq ----------------------------------------------------------------------


@pytest.mark.invariant("SPL-014")
@given(valid_cases(max_tokens=30), UBATCH)
# the second chain starts in the coupled set and narrows to the first set of the batch (set 0)
@example(case=ex.NARROWS_TO_FIRST_SET, n_ubatch=2)
def test_split_seq_chains(target: Any, case: BatchCase, n_ubatch: int) -> None:
    sb, sp = _splitter(target, case)
    seqs = [frozenset(s) for s in token_seqs(sb)]
    used: set[int] = set()
    for ub in _run(sp, "seq", n_ubatch):
        assert (ub.n_seqs, ub.equal_seqs, ub.n_seq_tokens) == (1, True, ub.n_tokens)
        assert ub.n_tokens <= n_ubatch
        # the chain, rebuilt from the rule
        cur = min(i for i in range(sb.n_tokens) if i not in used)
        chain = [cur]
        while len(chain) < n_ubatch:
            nxt = next(
                (j for j in range(cur + 1, sb.n_tokens) if j not in used and seqs[j] <= seqs[cur]),
                None,
            )
            if nxt is None:
                break
            chain.append(nxt)
            cur = nxt
        idxs = [int(i) for i in ub.idxs]
        assert idxs == chain
        for a, b in itertools.pairwise(idxs):
            assert seqs[b] <= seqs[a]  # narrows monotonically
        used.update(idxs)


@pytest.mark.invariant("SPL-001", "SPL-005", "SPL-014")
def test_split_after_a_long_used_run(target: Any) -> None:
    # 300 tokens of sequence 0, then 8 of sequence 1: once split_seq has taken sequence 0, the
    # next split must find token 300 behind a run of used tokens longer than the small test
    # batches ever make (a splitter that gives up scanning past it ends the batch early)
    n0, n1 = 300, 8
    b = Batch.from_lists(
        [i % 32 for i in range(n0 + n1)],
        pos=list(range(n0)) + list(range(n1)),
        seq_ids=[[0]] * n0 + [[1]] * n1,
    )
    _, sp = _splitter(target, b)
    tail = list(range(n0, n0 + n1))
    assert [list(ub.idxs) for ub in _run(sp, "seq", n0)] == [list(range(n0)), tail]
    sp.split_reset()
    assert list(sp.split_seq(n0).idxs) == list(range(n0))
    assert list(sp.split_simple(n0).idxs) == tail  # split_simple skips the used run too
    check_empty_ubatch(sp.split_simple(n0))
    assert sp.n_used == n0 + n1


# ---- SPL-015 .. SPL-021 ----------------------------------------------------------------------


@pytest.mark.invariant("SPL-015")
@given(valid_cases(max_tokens=20), MODES, UBATCH)
def test_exhaustion_and_reset(target: Any, case: BatchCase, mode: str, n_ubatch: int) -> None:
    sb, sp = _splitter(target, case)
    if _refused(sb, mode):
        return
    first = [summarize_ubatch(ub) for ub in _run(sp, mode, n_ubatch)]
    for m in ("simple", "equal", "seq"):
        check_empty_ubatch(split(sp, m, n_ubatch))
    assert sp.n_used == sb.n_tokens
    sp.split_reset()
    assert sp.n_used == 0 and list(sp.out_ids) == []
    again = [summarize_ubatch(ub) for ub in _run(sp, mode, n_ubatch)]
    assert again == first


@pytest.mark.invariant("SPL-016")
@pytest.mark.requires("batch.split")
@pytest.mark.parametrize(("n_seq_tokens", "n_seqs", "n_pos"), [(3, 2, 1), (1, 1, 1), (4, 256, 4)])
def test_ubatch_reserve(target: Any, n_seq_tokens: int, n_seqs: int, n_pos: int) -> None:
    ub = target.batch_ubatch_reserve(n_seq_tokens, n_seqs, n_pos_per_embd=n_pos)
    n = n_seq_tokens * n_seqs
    assert (ub.n_tokens, ub.n_seq_tokens, ub.n_seqs, ub.n_seqs_unq) == (
        n,
        n_seq_tokens,
        n_seqs,
        n_seqs,
    )
    assert ub.equal_seqs and ub.embd is None and ub.n_pos == n_pos
    assert ub.token is not None and np.array_equal(ub.token, np.zeros(n))
    assert list(ub.seq_id_unq) == list(range(n_seqs))
    want = np.full(LLAMA_MAX_SEQ, -1)
    want[:n_seqs] = np.arange(n_seqs)
    assert np.array_equal(ub.seq_idx, want)
    assert np.array_equal(ub.pos, np.zeros(n * n_pos))
    # no token lists a sequence (the caller fills them), none is an output, and no batch token
    # backs any of them (decision S5: idxs -1)
    assert np.array_equal(ub.n_seq_id, np.zeros(n)) and np.array_equal(ub.output, np.zeros(n))
    assert np.asarray(ub.seq_id).shape[0] == n and (np.asarray(ub.seq_id) == -1).all()
    assert np.array_equal(ub.idxs, np.full(n, -1))


PLAN_TABLE = [
    # kind, unified, embd_all, n_rs_seq -> mode, sequential, n_keep_tail, fallback
    ("kv", True, False, 0, ("simple", False, 0, None)),
    ("kv", False, False, 0, ("equal", True, 0, None)),
    ("kv", False, True, 3, ("equal", True, 0, None)),
    ("iswa", True, False, 0, ("simple", False, 0, ("equal", False, 0))),
    ("iswa", False, False, 0, ("equal", True, 0, None)),
    ("iswa", True, True, 2, ("simple", False, 0, ("equal", False, 0))),
    ("recurrent", True, True, 0, ("seq", False, 0, None)),
    ("recurrent", False, False, 0, ("equal", True, 0, None)),
    ("recurrent", True, False, 2, ("equal", True, 3, None)),
    ("hybrid", True, True, 1, ("seq", False, 0, None)),
    ("hybrid", True, False, 0, ("equal", False, 0, None)),
    ("hybrid", False, False, 0, ("equal", True, 0, None)),
    ("hybrid", False, False, 1, ("equal", True, 2, None)),
]


@pytest.mark.invariant("SPL-017")
@pytest.mark.requires("batch.split_plan")
@pytest.mark.parametrize(("kind", "unified", "embd_all", "n_rs_seq", "want"), PLAN_TABLE)
def test_split_plan_table(
    target: Any, kind: str, unified: bool, embd_all: bool, n_rs_seq: int, want: tuple[Any, ...]
) -> None:
    plan = target.batch_split_plan(kind, unified=unified, embd_all=embd_all, n_rs_seq=n_rs_seq)
    assert (plan.mode, plan.sequential, plan.n_keep_tail) == want[:3]
    fb = plan.fallback
    assert (None if fb is None else (fb.mode, fb.sequential, fb.n_keep_tail)) == want[3]
    if fb is not None:
        assert fb.fallback is None


@pytest.mark.invariant("SPL-018")
@pytest.mark.requires("batch.split_plan")
@given(valid_cases(max_tokens=20), st.sampled_from(["kv", "iswa", "recurrent", "hybrid"]),
       st.booleans(), st.booleans(), UBATCH)  # fmt: skip
def test_split_all(
    target: Any, case: BatchCase, kind: str, unified: bool, embd_all: bool, n_ubatch: int
) -> None:
    sb, sp = _splitter(target, case)
    plan = target.batch_split_plan(kind, unified=unified, embd_all=embd_all)
    sp.split_simple(n_ubatch)  # a split in progress: split_all starts over
    out = target.batch_split_all(sp, plan, n_ubatch)
    refused = plan.mode == "equal" and plan.sequential and sb.has_cpl
    if refused and plan.fallback is None:
        assert out is None
        return
    assert out is not None
    used = plan.fallback if refused else plan
    mode = "equal_seq" if used.mode == "equal" and used.sequential else used.mode
    want = [summarize_ubatch(ub) for ub in _run(target.batch_splitter(sb), mode, n_ubatch)]
    assert [summarize_ubatch(ub) for ub in out] == want
    assert sp.n_used == sb.n_tokens


@pytest.mark.invariant("SPL-018")
@pytest.mark.requires("batch.split_plan")
def test_split_all_fallback(target: Any) -> None:
    b = Batch.from_lists([1, 2, 3], pos=[0, 1, 2], seq_ids=[[0, 1], [0, 1], [0, 1]])
    _, sp = _splitter(target, b)
    plan = target.batch_split_plan("kv", unified=False, embd_all=False)
    assert target.batch_split_all(sp, plan, 2) is None
    with_fallback = SplitPlan("equal", sequential=True, fallback=SplitPlan("equal"))
    out = target.batch_split_all(sp, with_fallback, 2)
    assert out is not None and [ub.n_tokens for ub in out] == [2, 1]


@pytest.mark.invariant("SPL-019")
@pytest.mark.uses("batch.split_plan")
def test_split_argument_errors(target: Any) -> None:
    _, sp = _splitter(target, Batch.get_one([1, 2, 3]))
    sp.split_simple(1)
    # (call, code, field): the field names the argument at fault (spec error table)
    calls = [
        (lambda: sp.split_simple(0), "SPL_N_UBATCH", "n_ubatch"),
        (lambda: sp.split_seq(-1), "SPL_N_UBATCH", "n_ubatch"),
        (lambda: sp.split_equal(0, False), "SPL_N_UBATCH", "n_ubatch"),
        (lambda: sp.split_equal(2, False, 2), "SPL_KEEP_TAIL", "n_keep_tail"),
        # the smallest tail: T == U
        (lambda: sp.split_equal(1, True, 1), "SPL_KEEP_TAIL", "n_keep_tail"),
        (lambda: sp.split_equal(4, True, 7), "SPL_KEEP_TAIL", "n_keep_tail"),
        (lambda: sp.split_equal(4, True, -1), "SPL_KEEP_TAIL", "n_keep_tail"),
        (lambda: target.batch_ubatch_reserve(0, 2), "SPL_RESERVE", "n_seq_tokens"),
        (lambda: target.batch_ubatch_reserve(2, 0), "SPL_RESERVE", "n_seqs"),
        (lambda: target.batch_ubatch_reserve(2, LLAMA_MAX_SEQ + 1), "SPL_RESERVE", "n_seqs"),
        # both sizes below 1: n_seq_tokens is named
        (lambda: target.batch_ubatch_reserve(0, 0), "SPL_RESERVE", "n_seq_tokens"),
    ]
    if target.has("batch.split_plan"):
        calls.append(
            (
                lambda: target.batch_split_plan("paged", unified=True, embd_all=False),
                "SPL_MEMORY_KIND",
                "memory_kind",
            )
        )
    for call, code, field in calls:
        with raises_code(code, field=field, exc=BatchError):
            call()
        assert sp.n_used == 1 and list(sp.out_ids) == []  # state untouched
    assert [int(i) for i in sp.split_simple(5).idxs] == [1, 2]


OPS = st.lists(
    st.tuples(st.sampled_from(["simple", "equal", "equal_seq", "seq", "reset"]), UBATCH),
    min_size=1,
    max_size=30,
)


@pytest.mark.invariant("SPL-020")
@given(valid_cases(max_tokens=25), OPS)
def test_no_token_twice_when_mixing(
    target: Any, case: BatchCase, ops: list[tuple[str, int]]
) -> None:
    _, sp = _splitter(target, case)
    emitted: set[int] = set()
    for op, n_ubatch in ops:
        if op == "reset":
            sp.split_reset()
            emitted.clear()
            continue
        if op == "equal_seq":
            ub = sp.split_equal(n_ubatch, True)
        else:
            ub = split(sp, op, n_ubatch)
        idxs = [int(i) for i in ub.idxs]
        assert not emitted & set(idxs), "a token was emitted twice"
        assert len(set(idxs)) == len(idxs)
        emitted.update(idxs)
        assert sp.n_used == len(emitted)


@pytest.mark.invariant("SPL-021")
@given(valid_cases(max_tokens=20), MODES, UBATCH)
def test_deterministic_and_read_only(
    target: Any, case: BatchCase, mode: str, n_ubatch: int
) -> None:
    sb = sanitize(target, case)
    fields = ("pos", "seq_id", "n_seq_id", "logits")
    with unchanged(lambda: {k: getattr(sb.batch, k) for k in fields}, "the sanitized batch"):
        a = [summarize_ubatch(ub) for ub in _run(target.batch_splitter(sb), mode, n_ubatch)]
        b = [summarize_ubatch(ub) for ub in _run(target.batch_splitter(sb), mode, n_ubatch)]
    assert a == b
