"""The vectorized sanitizer and splitter agree with their readable scalar specifications."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from conformance.strategies.batch import BatchCase, invalid_cases, valid_cases
from reference_impl.batch.sanitize import SanitizedBatch, sanitize
from reference_impl.batch.sanitize_scalar import sanitize_scalar
from reference_impl.batch.split import BatchSplitter
from reference_impl.batch.split_scalar import ScalarSplitter
from reference_impl.batch.types import UBatch
from reference_impl.errors import BatchError


def _run(
    fn: Any, case: BatchCase
) -> SanitizedBatch | tuple[str, str | None, int | None, int | None]:
    try:
        return fn(case.batch, **case.kwargs())
    except BatchError as e:
        return (e.code, e.field, e.index, e.seq_id)


def _same_array(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b))


def assert_same_sanitized(a: SanitizedBatch, b: SanitizedBatch) -> None:
    for name in ("token", "embd", "pos", "n_seq_id", "seq_id", "logits"):
        assert _same_array(getattr(a.batch, name), getattr(b.batch, name)), name
    for name in ("seq_id_unq", "seq_idx", "seq_pos_min_arr", "seq_pos_max_arr", "set_id"):
        assert _same_array(getattr(a, name), getattr(b, name)), name
    for name in (
        "n_tokens", "n_outputs", "n_seq_max", "n_pos", "output_all", "generated",
        "outputs_overridden", "has_cpl", "coupled", "seq_sets",
    ):  # fmt: skip
        assert getattr(a, name) == getattr(b, name), name


def assert_same_ubatch(a: UBatch, b: UBatch) -> None:
    for name in ("equal_seqs", "n_tokens", "n_seq_tokens", "n_seqs", "n_seqs_unq", "n_pos"):
        assert getattr(a, name) == getattr(b, name), name
    for name in (
        "token", "embd", "pos", "n_seq_id", "seq_id", "seq_id_unq", "seq_idx", "output", "idxs",
    ):  # fmt: skip
        assert _same_array(getattr(a, name), getattr(b, name)), name


@given(st.one_of(valid_cases(), invalid_cases().map(lambda t: t[0])))
def test_sanitize_agrees_with_scalar(case: BatchCase) -> None:
    vec = _run(sanitize, case)
    ref = _run(sanitize_scalar, case)
    if isinstance(ref, tuple) or isinstance(vec, tuple):
        assert vec == ref
    else:
        assert_same_sanitized(vec, ref)


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("simple"), st.integers(1, 9)),
        st.tuples(st.just("equal"), st.integers(1, 9), st.booleans(), st.integers(0, 3)),
        st.tuples(st.just("seq"), st.integers(1, 9)),
        st.tuples(st.just("reset")),
    ),
    min_size=1,
    max_size=25,
)


@given(valid_cases(max_tokens=30), OPS)
def test_splitter_agrees_with_scalar(case: BatchCase, ops: list[tuple[Any, ...]]) -> None:
    sb = sanitize(case.batch, **case.kwargs())
    vec, ref = BatchSplitter(sb), ScalarSplitter(sb)
    for op in ops:
        if op[0] == "reset":
            vec.split_reset()
            ref.split_reset()
            continue
        if op[0] == "equal" and op[3] >= op[1]:
            continue  # n_keep_tail must stay below n_ubatch
        name, *args = op
        ua = getattr(vec, f"split_{name}")(*args)
        ub = getattr(ref, f"split_{name}")(*args)
        assert_same_ubatch(ua, ub)
        assert vec.n_used == ref.n_used
        assert vec.out_ids == ref.out_ids
        assert (vec.last_error is None) == (ref.last_error is None)
