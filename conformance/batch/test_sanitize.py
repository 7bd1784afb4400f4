"""The sanitizer's rules, one invariant at a time (spec/batch.md)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from conformance.assertions import assert_code, raises_code, unchanged
from conformance.batch import examples as ex
from conformance.batch.checks import (
    input_pos0,
    input_seqs,
    make_case,
    outcome,
    pos0,
    sanitize,
    token_seqs,
)
from conformance.fixtures.batch_corpus import RangeMemory, Rejected, case_named
from conformance.strategies.batch import BatchCase, invalid_cases, valid_cases
from reference_impl.batch.types import LLAMA_MAX_SEQ, Batch
from reference_impl.errors import BatchError

pytestmark = pytest.mark.requires("batch.sanitize")


def _err(target: Any, batch: Batch, **kw: Any) -> BatchError:
    kw.setdefault("n_vocab", 32)
    kw.setdefault("n_seq_max", 4)
    with pytest.raises(BatchError) as info:
        target.batch_sanitize(batch, **kw)
    return info.value


def _ok(target: Any, batch: Batch, **kw: Any) -> Any:
    kw.setdefault("n_vocab", 32)
    kw.setdefault("n_seq_max", 4)
    return target.batch_sanitize(batch, **kw)


def _code(target: Any, case: BatchCase) -> str | None:
    out = outcome(target, case)
    return out[0] if isinstance(out, tuple) else None


# ---- SAN-001 / SAN-002 / SAN-003: empty batch, parameters, shapes ------------------------------


@pytest.mark.invariant("SAN-001")
@pytest.mark.parametrize(
    "batch",
    [Batch(token=np.zeros(0, np.int32)), Batch(embd=np.zeros((0, 2), np.float32)), Batch()],
    ids=["tokens", "embd", "nothing"],
)
def test_empty_batch_is_rejected(target: Any, batch: Batch) -> None:
    assert_code(_err(target, batch), "SAN_EMPTY", field="n_tokens")


@pytest.mark.invariant("SAN-002")
@pytest.mark.parametrize("n_seq_max", [0, -1, LLAMA_MAX_SEQ + 1, 1000])
def test_n_seq_max_range(target: Any, n_seq_max: int) -> None:
    # reported before any field is read: the logits array is also malformed here
    bad = Batch(token=np.array([1, 2], np.int32), logits=np.array([1], np.int8))
    assert_code(_err(target, bad, n_seq_max=n_seq_max), "SAN_N_SEQ_MAX", field="n_seq_max")


@pytest.mark.invariant("SAN-002")
@pytest.mark.parametrize("n_seq_max", [1, LLAMA_MAX_SEQ])
def test_n_seq_max_bounds_accepted(target: Any, n_seq_max: int) -> None:
    sb = _ok(target, Batch.get_one([1, 2]), n_seq_max=n_seq_max)
    assert sb.n_tokens == 2


@pytest.mark.invariant("SAN-002")
@pytest.mark.parametrize(
    ("kw", "field"),
    [({"n_vocab": -1}, "n_vocab"), ({"n_pos_per_embd": 0}, "n_pos_per_embd"),
     ({"n_pos_per_embd": 5}, "n_pos_per_embd")],
)  # fmt: skip
def test_other_parameters(target: Any, kw: dict[str, int], field: str) -> None:
    assert_code(_err(target, Batch.get_one([1]), **kw), "SAN_PARAM", field=field)


@pytest.mark.invariant("SAN-003")
@given(invalid_cases("SAN_SHAPE"))
def test_shape_errors(target: Any, case_code: tuple[BatchCase, str]) -> None:
    case, _ = case_code
    out = outcome(target, case)
    assert isinstance(out, tuple) and out[0] == "SAN_SHAPE"
    assert out[1] in ("logits", "pos", "n_seq_id", "seq_id")
    assert out[2] is None and out[3] is None


@pytest.mark.invariant("SAN-003")
@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"token": np.array([1.0, 2.0])}, "token"),
        ({"token": np.array([[1, 2]], np.int32)}, "token"),
        ({"token": np.array(1, np.int32)}, "token"),  # rank 0: no length to read
        ({"embd": np.zeros(2, np.float32)}, "embd"),
        ({"embd": np.array(1.0, np.float32)}, "embd"),
        ({"token": np.array([1, 2], np.int32), "embd": np.zeros((3, 2), np.float32)}, "embd"),
        ({"embd": np.zeros((2, 0), np.float32)}, "embd"),
        ({"token": np.array([1, 2], np.int32), "pos": np.array([[0, 1]], np.int32)}, "pos"),
        ({"token": np.array([1, 2], np.int32), "pos": np.array([0.0, 1.0])}, "pos"),
        ({"token": np.array([1, 2], np.int32), "seq_id": np.zeros((2, 0), np.int32)}, "seq_id"),
        ({"token": np.array([1, 2], np.int32), "logits": np.array([0.5, 1.0])}, "logits"),
        ({"token": np.array([1, 2], np.int32), "pos": np.array([0, 2**40])}, "pos"),
        ({"token": np.array([1, 2], np.int32), "pos": np.array([0, -(2**31) - 1])}, "pos"),
        # the first values past int32's ends: 2**31 must not wrap to a negative position
        ({"token": np.array([1, 2], np.int32), "pos": np.array([0, 2**31])}, "pos"),
        ({"token": np.array([1, 2**31 + 1], np.int64)}, "token"),
    ],
)
def test_shape_examples(target: Any, fields: dict[str, Any], field: str) -> None:
    assert_code(_err(target, Batch(**fields)), "SAN_SHAPE", field=field)


@pytest.mark.invariant("SAN-003")
def test_mrope_embedding_positions_layouts(target: Any) -> None:
    embd = np.zeros((2, 3), np.float32)
    planes = np.array([[10, 11], [5, 6], [7, 8], [0, 0]], np.int32)
    a = _ok(target, Batch(embd=embd, pos=planes), n_pos_per_embd=4)
    b = _ok(target, Batch(embd=embd, pos=planes.reshape(-1)), n_pos_per_embd=4)
    assert np.array_equal(a.batch.pos, planes) and np.array_equal(b.batch.pos, planes)
    e = _err(target, Batch(embd=embd, pos=planes[0]), n_pos_per_embd=4)
    assert_code(e, "SAN_SHAPE", field="pos")


@pytest.mark.invariant("SAN-003")
def test_other_integer_dtypes_and_flat_seq_id(target: Any) -> None:
    # int64/uint16/int8/bool fields and a flat seq_id [n] (one sequence per token) mean exactly
    # what the int32 batch with seq_id [n, 1] means
    narrow = Batch(
        token=np.array([3, 5, 7], np.int32),
        pos=np.array([0, 0, 1], np.int32),
        seq_id=np.array([[0], [1], [0]], np.int32),
        n_seq_id=np.array([1, 1, 1], np.int32),
        logits=np.array([0, 1, 1], np.int8),
    )
    wide = Batch(
        token=np.array([3, 5, 7], np.int64),
        pos=np.array([0, 0, 1], np.uint16),
        seq_id=np.array([0, 1, 0], np.int64),
        n_seq_id=np.array([1, 1, 1], np.int8),
        logits=np.array([False, True, True]),
    )
    a, b = _ok(target, narrow), _ok(target, wide)
    for name in ("token", "pos", "seq_id", "n_seq_id", "logits"):
        x, y = np.asarray(getattr(a.batch, name)), np.asarray(getattr(b.batch, name))
        assert (y.dtype, y.shape) == (x.dtype, x.shape) and np.array_equal(x, y), name
    assert [b.seq_pos_max(s) for s in (0, 1)] == [1, 0]
    assert list(np.asarray(b.seq_id_unq)) == [0, 1] and b.n_outputs == 2


# ---- SAN-004 .. SAN-006: token and sequence ids -----------------------------------------------


@pytest.mark.invariant("SAN-004")
@given(invalid_cases("SAN_TOKEN_RANGE"))
def test_token_range(target: Any, case_code: tuple[BatchCase, str]) -> None:
    case, _ = case_code
    token = np.asarray(case.batch.token)
    first_bad = int(np.flatnonzero((token < 0) | (token >= case.n_vocab))[0])
    assert outcome(target, case) == ("SAN_TOKEN_RANGE", "token", first_bad, None)


@pytest.mark.invariant("SAN-004")
def test_token_range_bounds(target: Any) -> None:
    _ok(target, Batch.get_one([0, 31]), n_vocab=32)
    assert_code(_err(target, Batch.get_one([0, 32]), n_vocab=32), "SAN_TOKEN_RANGE", index=1)
    # embedding batches are not validated against the vocabulary
    _ok(target, Batch(embd=np.zeros((2, 4), np.float32)), n_vocab=0)


@pytest.mark.invariant("SAN-005")
@given(invalid_cases("SAN_N_SEQ_ID"))
def test_n_seq_id_range(target: Any, case_code: tuple[BatchCase, str]) -> None:
    case, _ = case_code
    b = case.batch
    assert b.seq_id is not None and b.n_seq_id is not None
    width = np.asarray(b.seq_id).shape[1]
    nsid = np.asarray(b.n_seq_id)
    first_bad = int(np.flatnonzero((nsid < 1) | (nsid > width))[0])
    assert outcome(target, case) == ("SAN_N_SEQ_ID", "n_seq_id", first_bad, None)


@pytest.mark.invariant("SAN-005")
def test_n_seq_id_without_seq_id(target: Any) -> None:
    ones = Batch(token=np.array([1, 2], np.int32), n_seq_id=np.array([1, 1], np.int32))
    sb = _ok(target, ones)
    assert token_seqs(sb) == [(0,), (0,)]
    two = Batch(token=np.array([1, 2], np.int32), n_seq_id=np.array([1, 2], np.int32))
    assert_code(_err(target, two), "SAN_N_SEQ_ID", field="n_seq_id", index=1)


@pytest.mark.invariant("SAN-006")
@given(invalid_cases("SAN_SEQ_ID_RANGE"))
@example(case_code=ex.SEQ_RANGE)
def test_seq_id_range(target: Any, case_code: tuple[BatchCase, str]) -> None:
    case, _ = case_code
    b = case.batch
    assert b.seq_id is not None and b.n_seq_id is not None
    expect = None
    for i in range(b.n_tokens):
        for j in range(int(b.n_seq_id[i])):
            s = int(b.seq_id[i, j])
            if not 0 <= s < case.n_seq_max:
                expect = ("SAN_SEQ_ID_RANGE", "seq_id", i, s)
                break
        if expect:
            break
    assert outcome(target, case) == expect


@pytest.mark.invariant("SAN-006")
def test_seq_id_bounds_and_padding(target: Any) -> None:
    e = _err(target, Batch.from_lists([1, 2], pos=[0, 0], seq_ids=[[0], [4]]), n_seq_max=4)
    assert_code(e, "SAN_SEQ_ID_RANGE", index=1, seq_id=4)
    # entries past n_seq_id[i] are padding and never read
    seq_id = np.array([[3, 999], [3, -7]], np.int32)
    sb = _ok(
        target,
        Batch(token=np.array([1, 2], np.int32), seq_id=seq_id, n_seq_id=np.array([1, 1], np.int32)),
    )
    assert token_seqs(sb) == [(3,), (3,)]


# ---- SAN-007: order of the checks ------------------------------------------------------------


@pytest.mark.invariant("SAN-007")
@pytest.mark.parametrize(
    "name",
    [
        "token_checked_before_seq_ids",
        "seq_checks_in_id_order",
        "memory_check_before_gap_same_seq",
        "gap_before_decreasing",
        "memory_check_before_decreasing",
        "seq_id_range_auto_pos",
    ],
)
def test_check_order_corpus(target: Any, name: str) -> None:
    case = case_named(name)
    exp = case.expected
    assert isinstance(exp, Rejected)
    with raises_code(exp.code, field=exp.field, index=exp.index, seq_id=exp.seq_id, exc=BatchError):
        sanitize(target, case)


@pytest.mark.invariant("SAN-007")
def test_check_order_examples(target: Any) -> None:
    tok = np.array([1, 2, 3, 4], np.int32)
    # shape before token range; token range before sequence ids
    e = _err(target, Batch(token=np.array([99, 1], np.int32), logits=np.array([1], np.int8)))
    assert_code(e, "SAN_SHAPE")
    # sequence ids token by token: n_seq_id of token 1 before the range of token 3
    seq_id = np.array([[0, 0], [0, 0], [0, 0], [9, 0]], np.int32)
    e = _err(target, Batch(token=tok, seq_id=seq_id, n_seq_id=np.array([1, 3, 1, 1], np.int32)))
    assert_code(e, "SAN_N_SEQ_ID", index=1)
    # positions before coupling divergence, divergence before decreasing positions
    mem = RangeMemory({0: (0, 5), 1: (1, 5)})
    b = Batch.from_lists([1, 2], pos=[7, 8], seq_ids=[[0, 1], [0, 1]])
    assert_code(_err(target, b, memory=mem), "SAN_POS_MEMORY")
    b = Batch.from_lists([1, 2, 3], pos=[6, 7, 6], seq_ids=[[0, 1], [0, 1], [0]])
    assert_code(_err(target, b, memory=mem), "SAN_SEQ_DIVERGED")
    # the lowest token index wins inside one check
    assert_code(_err(target, Batch.get_one([40, 1, -1]), n_vocab=32), "SAN_TOKEN_RANGE", index=0)


# ---- SAN-008 .. SAN-014: defaults ------------------------------------------------------------


@pytest.mark.invariant("SAN-008")
@given(valid_cases())
def test_default_sequence_ids(target: Any, case: BatchCase) -> None:
    sb = sanitize(target, case)
    b = case.batch
    if b.seq_id is None:
        assert token_seqs(sb) == [(0,)] * b.n_tokens
        assert "seq_id" in sb.generated
    elif b.n_seq_id is None:
        assert token_seqs(sb) == [(int(b.seq_id[i, 0]),) for i in range(b.n_tokens)]


@pytest.mark.invariant("SAN-008")
def test_seq_id_without_n_seq_id(target: Any) -> None:
    seq_id = np.array([[2, 0], [2, 1], [2, 3]], np.int32)
    sb = _ok(target, Batch(token=np.array([1, 2, 3], np.int32), seq_id=seq_id))
    assert token_seqs(sb) == [(2,), (2,), (2,)]
    assert list(pos0(sb)) == [0, 1, 2]


@pytest.mark.invariant("SAN-009")
@given(valid_cases())
def test_duplicate_ids_collapse(target: Any, case: BatchCase) -> None:
    sb = sanitize(target, case)
    b = case.batch
    if b.seq_id is None or b.n_seq_id is None:
        return
    for i, got in enumerate(token_seqs(sb)):
        listed = [int(s) for s in b.seq_id[i, : int(b.n_seq_id[i])]]
        assert got == tuple(dict.fromkeys(listed))


@pytest.mark.invariant("SAN-009")
def test_duplicate_ids_are_not_coupling(target: Any) -> None:
    sb = _ok(target, Batch.from_lists([1, 2], seq_ids=[[1, 1], [1, 1]]))
    assert token_seqs(sb) == [(1,), (1,)]
    assert not sb.has_cpl and sb.coupled == ()
    assert list(pos0(sb)) == [0, 1]


@pytest.mark.invariant("SAN-010")
@given(valid_cases())
@example(case=ex.AUTO_AFTER_MEMORY)
def test_generated_positions(target: Any, case: BatchCase) -> None:
    sb = sanitize(target, case)
    if case.batch.pos is not None:
        return
    assert "pos" in sb.generated
    assert tuple(int(p) for p in pos0(sb)) == case.pos0
    # per first sequence: contiguous from the memory's next position, in batch order
    nxt: dict[int, int] = {}
    for i, seqs in enumerate(token_seqs(sb)):
        s = seqs[0]
        if s not in nxt:
            nxt[s] = (case.memory or {}).get(s, (-1, -1))[1] + 1
        assert int(pos0(sb)[i]) == nxt[s]
        nxt[s] += 1


@pytest.mark.invariant("SAN-010")
@pytest.mark.parametrize(
    "name",
    ["get_one_defaults", "get_one_after_memory", "auto_pos_per_seq", "auto_pos_coupled_first_seq_only",
     "seqs_out_of_id_order", "many_seqs_unified"],
)  # fmt: skip
def test_generated_positions_corpus(target: Any, name: str) -> None:
    case = case_named(name)
    sb = sanitize(target, case)
    assert tuple(int(p) for p in pos0(sb)) == case.expected.pos  # type: ignore[union-attr]


@pytest.mark.invariant("SAN-011")
def test_generated_positions_are_validated(target: Any) -> None:
    case = case_named("auto_pos_coupled_rejected")
    assert outcome(target, case) == ("SAN_POS_DECREASING", "pos", 2, 1)


@pytest.mark.invariant("SAN-012")
def test_mrope_generated_positions(target: Any) -> None:
    mem = RangeMemory({0: (0, 4)})
    sb = _ok(target, Batch(embd=np.zeros((3, 2), np.float32)), n_pos_per_embd=4, memory=mem)
    assert np.array_equal(sb.batch.pos, [[5, 6, 7], [0, 0, 0], [0, 0, 0], [0, 0, 0]])
    sb = _ok(target, Batch.get_one([1, 2, 3]), n_pos_per_embd=4, memory=mem)
    assert np.array_equal(sb.batch.pos, [5, 6, 7])


@pytest.mark.invariant("SAN-013")
@given(valid_cases())
@example(case=ex.GET_ONE)
def test_default_outputs(target: Any, case: BatchCase) -> None:
    sb = sanitize(target, case)
    if case.batch.logits is not None:
        return
    n = case.batch.n_tokens
    want = [1] * n if case.output_all else [0] * (n - 1) + [1]
    assert [int(v) for v in sb.batch.logits] == want
    assert sb.n_outputs == sum(want)


@pytest.mark.invariant("SAN-014")
@given(valid_cases())
@example(case=ex.OUTPUT_ALL_FLAGS)
def test_given_outputs(target: Any, case: BatchCase) -> None:
    sb = sanitize(target, case)
    if case.batch.logits is None:
        return
    given_flags = [1 if v != 0 else 0 for v in np.asarray(case.batch.logits)]
    override = case.output_all and 0 in given_flags
    want = [1] * len(given_flags) if override else given_flags
    assert [int(v) for v in sb.batch.logits] == want
    assert sb.outputs_overridden == override
    assert sb.n_outputs == sum(want)


@pytest.mark.invariant("SAN-014")
def test_output_override_example(target: Any) -> None:
    flags = np.array([0, 5, -1, 0], np.int8)
    sb = _ok(target, Batch(token=np.array([1, 2, 3, 4], np.int32), logits=flags))
    assert [int(v) for v in sb.batch.logits] == [0, 1, 1, 0] and sb.n_outputs == 2
    sb = _ok(target, Batch(token=np.array([1, 2, 3, 4], np.int32), logits=flags), output_all=True)
    assert [int(v) for v in sb.batch.logits] == [1, 1, 1, 1] and sb.outputs_overridden


# ---- SAN-015 .. SAN-021: positions -----------------------------------------------------------


@pytest.mark.invariant("SAN-015")
@given(invalid_cases("SAN_POS_MEMORY", mrope=False))
@example(case_code=ex.MEMORY)
def test_memory_continuation(target: Any, case_code: tuple[BatchCase, str]) -> None:
    case, _ = case_code
    out = outcome(target, case)
    assert isinstance(out, tuple) and out[:2] == ("SAN_POS_MEMORY", "pos")
    s, i = out[3], out[2]
    assert case.memory is not None and s in case.memory
    seqs = input_seqs(case.batch)
    positions = input_pos0(case.batch, case.n_pos_per_embd)
    mine = [k for k in range(case.batch.n_tokens) if s in seqs[k]]
    lo = min(positions[k] for k in mine)
    assert lo != case.memory[s][1] + 1
    assert i == next(k for k in mine if positions[k] == lo)


@pytest.mark.invariant("SAN-015")
@pytest.mark.parametrize(
    ("pos", "code"), [([10, 11], None), ([11, 12], "SAN_POS_MEMORY"), ([9, 10], "SAN_POS_MEMORY")]
)
def test_memory_continuation_examples(target: Any, pos: list[int], code: str | None) -> None:
    batch = Batch.from_lists([1, 2], pos=pos)
    out = outcome(target, make_case(batch, {0: (0, 9)}))
    assert (out[0] if isinstance(out, tuple) else None) == code
    # an empty sequence, or no memory at all, accepts any start
    assert not isinstance(outcome(target, make_case(batch, {1: (0, 9)})), tuple)
    assert not isinstance(outcome(target, make_case(batch, None)), tuple)


@pytest.mark.invariant("SAN-016")
@given(invalid_cases("SAN_POS_GAP"))
@example(case_code=ex.GAP)
def test_continuity(target: Any, case_code: tuple[BatchCase, str]) -> None:
    case, _ = case_code
    out = outcome(target, case)
    # the generator appends one token past a gap at the end of the batch
    last_seq = int(np.asarray(case.batch.seq_id)[-1, 0])
    assert out == ("SAN_POS_GAP", "pos", case.batch.n_tokens - 1, last_seq)


@pytest.mark.invariant("SAN-016")
def test_continuity_examples(target: Any) -> None:
    e = _err(target, Batch.from_lists([1, 2, 3], pos=[0, 1, 3]))
    assert_code(e, "SAN_POS_GAP", index=2, seq_id=0)
    _ok(target, Batch.from_lists([1, 2, 3], pos=[0, 0, 1]))
    _ok(target, Batch.from_lists([1, 2, 3, 4], pos=[5, 5, 6, 6]))
    assert_code(_err(target, Batch.from_lists([1, 2, 3], pos=[0, 3, 1])), "SAN_POS_GAP", index=1)
    # the gap is in the second sequence, whose first position is above the first's last one
    two = Batch.from_lists([1, 2, 3], pos=[0, 1, 3], seq_ids=[[0], [1], [1]])
    assert_code(_err(target, two), "SAN_POS_GAP", index=2, seq_id=1)


@pytest.mark.invariant("SAN-017")
@given(invalid_cases("SAN_POS_MEMORY", mrope=True))
@example(case_code=ex.MEMORY_MROPE)
def test_mrope_memory_rule(target: Any, case_code: tuple[BatchCase, str]) -> None:
    case, _ = case_code
    out = outcome(target, case)
    assert isinstance(out, tuple) and out[:2] == ("SAN_POS_MEMORY", "pos")


@pytest.mark.invariant("SAN-017")
def test_mrope_examples(target: Any) -> None:
    mem = RangeMemory({0: (0, 9)})
    kw = {"n_pos_per_embd": 4, "memory": mem}
    _ok(target, Batch.from_lists([1, 2], pos=[15, 20]), **kw)  # forward jumps, no continuity
    _ok(target, Batch.from_lists([1, 2], pos=[10, 30]), **kw)
    assert_code(_err(target, Batch.from_lists([1, 2], pos=[9, 10]), **kw), "SAN_POS_MEMORY")
    emb = np.zeros((1, 2), np.float32)

    def embd_at(p: int) -> Batch:
        return Batch(embd=emb, pos=np.array([[p], [1], [1], [0]], np.int32))

    _ok(target, embd_at(15), **kw)
    _ok(target, embd_at(9), **kw)  # one overlapping position is allowed for embeddings
    assert_code(_err(target, embd_at(8), **kw), "SAN_POS_MEMORY", index=0, seq_id=0)


@pytest.mark.invariant("SAN-018")
@given(invalid_cases("SAN_SEQ_DIVERGED"))
@example(case_code=ex.DIVERGED)
def test_coupled_memory(target: Any, case_code: tuple[BatchCase, str]) -> None:
    case, _ = case_code
    out = outcome(target, case)
    assert isinstance(out, tuple) and out[:2] == ("SAN_SEQ_DIVERGED", "seq_id")
    # without a memory there is nothing to diverge from
    assert not isinstance(outcome(target, make_case(case.batch, None, case)), tuple)


@pytest.mark.invariant("SAN-018")
def test_coupled_memory_examples(target: Any) -> None:
    b = Batch.from_lists([1], pos=[6], seq_ids=[[0, 1]])
    e = _err(target, b, memory=RangeMemory({0: (0, 5), 1: (2, 5)}))
    assert_code(e, "SAN_SEQ_DIVERGED", index=0, seq_id=1)
    _ok(target, b, memory=RangeMemory({0: (0, 5), 1: (0, 5)}))


@pytest.mark.invariant("SAN-019")
@given(invalid_cases("SAN_POS_DECREASING"))
@example(case_code=ex.DECREASING)
def test_decreasing(target: Any, case_code: tuple[BatchCase, str]) -> None:
    case, _ = case_code
    out = outcome(target, case)
    # the generator appends one token that goes back in its sequence
    assert isinstance(out, tuple)
    assert out[:3] == ("SAN_POS_DECREASING", "pos", case.batch.n_tokens - 1)
    assert out[3] == int(np.asarray(case.batch.seq_id)[-1, 0])


@pytest.mark.invariant("SAN-019")
def test_decreasing_examples(target: Any) -> None:
    case = case_named("pos_decreasing_interleaved")
    assert outcome(target, case) == ("SAN_POS_DECREASING", "pos", 6, 0)
    _ok(target, Batch.from_lists([1, 2, 3], pos=[4, 4, 5]))
    e = _err(target, Batch.from_lists([1, 2, 3], pos=[5, 9, 7]), n_pos_per_embd=4)
    assert_code(e, "SAN_POS_DECREASING", index=2)


@pytest.mark.invariant("SAN-020")
def test_incompatible_sets_are_accepted(target: Any) -> None:
    b = Batch.from_lists([1, 2, 3], pos=[0, 1, 1], seq_ids=[[0, 1, 2], [0, 1], [1, 2]])
    sb = _ok(target, b)
    assert token_seqs(sb) == [(0, 1, 2), (0, 1), (1, 2)]
    assert sb.has_cpl


@pytest.mark.invariant("SAN-021")
def test_positions_not_range_checked(target: Any) -> None:
    sb = _ok(target, Batch.from_lists([1, 2, 3], pos=[-3, -2, -1]))
    assert list(pos0(sb)) == [-3, -2, -1]
    sb = _ok(target, Batch.from_lists([1, 2], pos=[10_000, 10_001]))
    assert sb.seq_pos_min(0) == 10_000


# ---- SAN-022 .. SAN-026: properties ----------------------------------------------------------


class _RecordingMemory(RangeMemory):
    """Records every method called on it."""

    def __init__(self, ranges: Any) -> None:
        super().__init__(ranges)
        self.calls: list[str] = []

    def __getattribute__(self, name: str) -> Any:
        if not name.startswith("_") and name not in ("calls", "ranges"):
            object.__getattribute__(self, "calls").append(name)
        return object.__getattribute__(self, name)


def _snapshot(b: Batch) -> dict[str, Any]:
    return {
        k: None if getattr(b, k) is None else np.array(getattr(b, k), copy=True)
        for k in ("token", "embd", "pos", "n_seq_id", "seq_id", "logits")
    }


@pytest.mark.invariant("SAN-022")
@given(st.one_of(valid_cases(), invalid_cases().map(lambda t: t[0])))
@example(case=ex.GET_ONE)
def test_inputs_never_modified(target: Any, case: BatchCase) -> None:
    mem = _RecordingMemory(dict(case.memory or {}))
    kw = case.kwargs()
    kw["memory"] = mem if case.memory is not None else None
    with unchanged(lambda: (_snapshot(case.batch), mem.ranges), "the input batch, the memory"):
        try:
            sb = target.batch_sanitize(case.batch, **kw)
        except BatchError:
            sb = None
    assert set(mem.calls) <= {"seq_pos_min", "seq_pos_max"}
    if sb is not None:
        for k in ("token", "embd", "pos", "n_seq_id", "seq_id", "logits"):
            src, out = getattr(case.batch, k), getattr(sb.batch, k)
            if src is not None and out is not None:
                assert not np.shares_memory(np.asarray(src), np.asarray(out)), k


@pytest.mark.invariant("SAN-022")
@pytest.mark.parametrize(
    "batch",
    [
        Batch.get_one([1, 2, 3]),  # every field but token generated
        Batch.from_lists(
            embd=[[0.5, 1.0], [2.0, 3.0]], pos=[0, 1], seq_ids=[[0, 2], [1]], logits=[0, 1]
        ),
    ],
    ids=["generated", "explicit-embd"],
)
def test_result_arrays_are_read_only(target: Any, batch: Batch) -> None:
    """Decision D11: the result is owned and read-only, so a caller cannot change what later
    steps (the splitter, the outputs) read from it."""
    sb = _ok(target, batch)
    arrays = {
        k: getattr(sb.batch, k) for k in ("token", "embd", "pos", "n_seq_id", "seq_id", "logits")
    }
    arrays.update(seq_id_unq=sb.seq_id_unq, seq_idx=sb.seq_idx)
    for k, a in arrays.items():
        if a is None:
            continue
        a = np.asarray(a)
        before = a.copy()
        with pytest.raises(ValueError, match="read-only"):
            a.flat[0] = a.flat[0] + 1
        assert np.array_equal(a, before), f"{k} changed"


@pytest.mark.invariant("SAN-023")
@given(valid_cases())
def test_deterministic_and_idempotent(target: Any, case: BatchCase) -> None:
    a = sanitize(target, case)
    b = sanitize(target, case)
    again = target.batch_sanitize(a.batch, **case.kwargs())
    for other in (b, again):
        for k in ("token", "embd", "pos", "n_seq_id", "seq_id", "logits"):
            x, y = getattr(a.batch, k), getattr(other.batch, k)
            assert (x is None and y is None) or np.array_equal(x, y), k
        assert other.n_outputs == a.n_outputs
        assert np.array_equal(other.seq_id_unq, a.seq_id_unq)
        assert other.coupled == a.coupled and other.has_cpl == a.has_cpl
        for s in a.seq_id_unq:
            assert other.seq_pos_min(int(s)) == a.seq_pos_min(int(s))
            assert other.seq_pos_max(int(s)) == a.seq_pos_max(int(s))


@pytest.mark.invariant("SAN-024")
@given(valid_cases())
def test_derived_stats(target: Any, case: BatchCase) -> None:
    sb = sanitize(target, case)
    p = pos0(sb)
    per_seq: dict[int, list[int]] = {}
    coupled: set[tuple[int, int]] = set()
    for i, seqs in enumerate(token_seqs(sb)):
        for j, s in enumerate(seqs):
            per_seq.setdefault(s, []).append(int(p[i]))
            if j > 0:
                coupled.add((s, seqs[0]))
    assert [int(s) for s in sb.seq_id_unq] == sorted(per_seq)
    for s in range(LLAMA_MAX_SEQ):
        if s in per_seq:
            assert (sb.seq_pos_min(s), sb.seq_pos_max(s)) == (min(per_seq[s]), max(per_seq[s]))
            assert int(sb.seq_idx[s]) == sorted(per_seq).index(s)
        else:
            assert (sb.seq_pos_min(s), sb.seq_pos_max(s), int(sb.seq_idx[s])) == (-1, -1, -1)
    assert set(sb.coupled) == coupled and sb.has_cpl == bool(coupled)
    assert sb.n_tokens == case.batch.n_tokens


@pytest.mark.invariant("SAN-025")
def test_token_and_embd_batch(target: Any) -> None:
    embd = np.arange(4, dtype=np.float32).reshape(2, 2)
    b = Batch(token=np.array([3, 4], np.int32), embd=embd, pos=np.array([3, 4], np.int32))
    sb = _ok(target, b, n_pos_per_embd=4)
    assert np.array_equal(sb.batch.token, [3, 4]) and np.array_equal(sb.batch.embd, embd)
    assert np.array_equal(sb.batch.pos, [3, 4])  # one plane: token rules
    bad = Batch(token=np.array([3, 40], np.int32), embd=embd)
    assert_code(_err(target, bad), "SAN_TOKEN_RANGE")


CODE_TABLE = {
    "SAN_EMPTY": ("n_tokens", False, False),
    "SAN_N_SEQ_MAX": ("n_seq_max", False, False),
    "SAN_SHAPE": (None, False, False),
    "SAN_TOKEN_RANGE": ("token", True, False),
    "SAN_N_SEQ_ID": ("n_seq_id", True, False),
    "SAN_SEQ_ID_RANGE": ("seq_id", True, True),
    "SAN_POS_MEMORY": ("pos", True, True),
    "SAN_POS_GAP": ("pos", True, True),
    "SAN_SEQ_DIVERGED": ("seq_id", True, True),
    "SAN_POS_DECREASING": ("pos", True, True),
}


@pytest.mark.invariant("SAN-026")
@given(invalid_cases())
def test_error_records(target: Any, case_code: tuple[BatchCase, str]) -> None:
    case, code = case_code
    with raises_code(code, exc=BatchError) as raised:
        sanitize(target, case)
    e = raised.value
    field, has_index, has_seq = CODE_TABLE[code]
    assert e.field is not None and (field is None or e.field == field)
    assert (e.index is not None) == has_index and (e.seq_id is not None) == has_seq
    if has_index:
        assert 0 <= e.index < case.batch.n_tokens
    assert e.message and code in str(e)


@pytest.mark.invariant("SAN-026")
def test_memory_error_message_states_the_rule(target: Any) -> None:
    """The SAN_POS_MEMORY message gives X, Y and the rule broken, in llama.cpp's words."""
    mem = RangeMemory({0: (0, 9)})
    embd = Batch(embd=np.zeros((1, 2), np.float32), pos=np.array([[8], [1], [1], [0]], np.int32))
    for batch, n_pos, y, rule in (
        (Batch.from_lists([1, 2], pos=[11, 12]), 1, 11, "Y = X + 1"),
        (Batch.from_lists([1, 2], pos=[9, 10]), 4, 9, "X < Y"),
        (embd, 4, 8, "X <= Y"),
    ):
        e = _err(target, batch, memory=mem, n_pos_per_embd=n_pos)
        assert_code(e, "SAN_POS_MEMORY", field="pos", index=0, seq_id=0)
        assert "X = 9" in str(e) and f"Y = {y}" in str(e) and rule in str(e), str(e)
