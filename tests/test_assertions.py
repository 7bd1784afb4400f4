"""conformance.assertions: every helper passes on equal inputs and fails, with its documented
message, on each kind of difference it is meant to catch."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch

from conformance.assertions import (
    as_f64,
    assert_close,
    assert_code,
    assert_finite,
    assert_nmse,
    assert_unchanged,
    max_abs_diff,
    nmse,
    raises_code,
    unchanged,
)
from reference_impl.errors import BatchError, EngineError


def fails(message: str) -> Any:
    """pytest.raises(AssertionError) whose message must equal ``message`` exactly."""
    return pytest.raises(AssertionError, match=f"^{re.escape(message)}$")


def fails_with(fragment: str) -> Any:
    """pytest.raises(AssertionError) whose message must contain ``fragment``."""
    return pytest.raises(AssertionError, match=re.escape(fragment))


# ---- as_f64 --------------------------------------------------------------------------------


def test_as_f64_takes_tensors_arrays_lists_and_scalars() -> None:
    for x in (torch.tensor([1.5, 2.0], dtype=torch.float16), np.array([1.5, 2.0]), [1.5, 2.0]):
        a = as_f64(x)
        assert a.dtype == np.float64 and a.tolist() == [1.5, 2.0]
    assert as_f64(3).shape == ()


# ---- nmse ----------------------------------------------------------------------------------


def test_nmse_of_equal_arrays_is_zero() -> None:
    x = np.array([[0.5, -2.0], [3.0, 0.0]], np.float32)
    assert nmse(x, x.copy()) == 0.0
    assert nmse(torch.from_numpy(x), x) == 0.0


def test_nmse_value_is_squared_error_over_reference_energy() -> None:
    # Σ(out − ref)² = 0.25 + 1 = 1.25; Σ ref² = 1 + 4 = 5
    assert nmse([1.0, 2.0], [1.5, 3.0]) == pytest.approx(0.25)
    # not symmetric: the reference is the first argument
    assert nmse([1.5, 3.0], [1.0, 2.0]) == pytest.approx(1.25 / 11.25)


def test_nmse_is_computed_in_float64() -> None:
    ref = np.full(4, 1e-30, np.float32)  # its square underflows in float32
    assert nmse(ref, ref * 2) == pytest.approx(1.0)


def test_nmse_zero_reference() -> None:
    assert nmse(np.zeros(3), np.zeros(3)) == 0.0
    assert nmse(np.zeros(3), [0.0, 1e-20, 0.0]) == math.inf
    assert nmse(np.zeros(0), np.zeros(0)) == 0.0  # empty: nothing differs


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("side", ["ref", "out"])
def test_nmse_refuses_non_finite_values(bad: float, side: str) -> None:
    good, broken = np.ones(3), np.array([1.0, 1.0, bad])
    ref, out = (broken, good) if side == "ref" else (good, broken)
    with fails(f"nmse: {side} holds NaN/inf at [[2]] (1 of 3)"):
        nmse(ref, out)


def test_nmse_refuses_unequal_shapes_instead_of_broadcasting() -> None:
    with fails("nmse: shapes differ: ref (2,), out (1, 2)"):
        nmse([1.0, 2.0], [[1.0, 2.0]])
    with fails("nmse: shapes differ: ref (2,), out ()"):
        nmse([1.0, 2.0], 1.0)


# ---- assert_nmse ---------------------------------------------------------------------------


def test_assert_nmse_passes_within_and_at_the_bound() -> None:
    assert assert_nmse([1.0, 2.0], [1.0, 2.0], 0.0, "rows") == 0.0
    assert assert_nmse([1.0, 2.0], [1.5, 3.0], 0.25, "rows") == pytest.approx(0.25)
    assert assert_nmse([1.0, 2.0], [1.5, 3.0], 0.3) == pytest.approx(0.25)


def test_assert_nmse_fails_above_the_bound() -> None:
    with fails("logits row 3: NMSE 2.500e-01 > bound 1e-09"):
        assert_nmse([1.0, 2.0], [1.5, 3.0], 1e-9, "logits row 3")
    with fails("NMSE 2.500e-01 > bound 0.1"):
        assert_nmse([1.0, 2.0], [1.5, 3.0], 0.1)


def test_assert_nmse_fails_on_a_zero_reference_with_nonzero_output() -> None:
    with fails("k: NMSE inf > bound 1e-09"):
        assert_nmse(np.zeros(4), [0.0, 0.0, 1e-12, 0.0], 1e-9, "k")
    assert_nmse(np.zeros(4), np.zeros(4), 0.0, "k")


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_assert_nmse_fails_on_non_finite_output(bad: float) -> None:
    with fails("emb: out holds NaN/inf at [[0, 1]] (1 of 4)"):
        assert_nmse(np.ones((2, 2)), [[1.0, bad], [1.0, 1.0]], 1.0, "emb")


def test_assert_nmse_fails_on_shapes() -> None:
    with fails("emb: shapes differ: ref (3,), out (2,)"):
        assert_nmse(np.ones(3), np.ones(2), 1.0, "emb")


# ---- max_abs_diff --------------------------------------------------------------------------


def test_max_abs_diff() -> None:
    assert max_abs_diff([1.0, -2.0], [1.0, -2.0]) == 0.0
    assert max_abs_diff([1.0, -2.0, 0.5], [1.25, -3.0, 0.5]) == 1.0
    assert max_abs_diff(np.zeros((0, 3)), np.zeros((0, 3))) == 0.0
    with fails("max_abs_diff: out holds NaN/inf at [[1]] (1 of 2)"):
        max_abs_diff([1.0, 2.0], [1.0, math.nan])
    with fails("max_abs_diff: shapes differ: ref (2,), out (3,)"):
        max_abs_diff([1.0, 2.0], [1.0, 2.0, 3.0])


# ---- assert_close --------------------------------------------------------------------------


def test_assert_close_passes_on_equal_and_within_tolerance() -> None:
    ref = np.array([1.0, -2.0, 100.0])
    assert_close(ref, ref.copy(), atol=0.0, what="p")
    assert_close(ref, ref + 1e-6, atol=1e-6, what="p")
    assert_close(ref, ref * (1 + 0.5e-5), atol=0.0, rtol=1e-5, what="p")
    assert_close(torch.tensor(ref, dtype=torch.float32), ref, atol=1e-6)


def test_assert_close_fails_beyond_atol() -> None:
    with fails(
        "p: 1 of 3 elements out of tolerance (atol 1e-05, rtol 0); worst at (1,): "
        "out 0.2001 vs ref 0.2 (|diff| 1.000e-04, allowed 1.000e-05)"
    ):
        assert_close([0.1, 0.2, 0.3], [0.1, 0.2001, 0.3], atol=1e-5, what="p")


def test_assert_close_rtol_scales_with_the_reference() -> None:
    assert_close([1000.0], [1000.5], atol=0.0, rtol=1e-3)
    with fails_with("1 of 2 elements out of tolerance (atol 0, rtol 0.001); worst at (0,)"):
        assert_close([1.0, 1000.0], [1.5, 1000.5], atol=0.0, rtol=1e-3)


def test_assert_close_reports_the_worst_element() -> None:
    with fails_with("2 of 3 elements out of tolerance (atol 0.1, rtol 0); worst at (2,)"):
        assert_close([0.0, 0.0, 0.0], [0.0, 0.5, 2.0], atol=0.1)


def test_assert_close_special_values() -> None:
    nan, inf = math.nan, math.inf
    assert_close([nan, inf, -inf], [nan, inf, -inf], atol=0.0)  # same special values match
    with fails_with("1 of 2 elements out of tolerance (atol 1, rtol 0); worst at (1,): out nan"):
        assert_close([0.0, 1.0], [0.0, nan], atol=1.0)
    with fails_with("worst at (0,): out 0 vs ref nan"):
        assert_close([nan], [0.0], atol=1.0)
    with fails_with("worst at (0,): out -inf vs ref inf"):
        assert_close([inf], [-inf], atol=1.0)
    with fails_with("worst at (1,): out inf vs ref 1e+300"):
        assert_close([0.0, 1e300], [0.5, inf], atol=1.0, rtol=1.0)


def test_assert_close_requires_equal_shapes() -> None:
    with fails("p: shapes differ: ref (3,), out ()"):
        assert_close([1.0, 1.0, 1.0], 1.0, atol=1.0, what="p")
    with fails("shapes differ: ref (2, 1), out (2,)"):
        assert_close([[1.0], [2.0]], [1.0, 2.0], atol=1.0)


# ---- assert_finite -------------------------------------------------------------------------


def test_assert_finite() -> None:
    assert_finite(np.zeros((2, 2)), "out")
    assert_finite(torch.ones(3))
    with fails("out: holds NaN/inf at [[0, 1], [1, 0]] (2 of 4)"):
        assert_finite([[0.0, math.nan], [-math.inf, 0.0]], "out")
    with fails("holds NaN/inf at [[0]] (1 of 1)"):
        assert_finite([math.inf])


# ---- assert_code / raises_code -------------------------------------------------------------


def _error(**kw: Any) -> EngineError:
    return BatchError(kw.pop("code", "SAN_SHAPE"), "a message", **kw)


def test_assert_code_passes_and_returns_the_error() -> None:
    e = _error(field="pos", index=2, seq_id=1)
    assert assert_code(e, "SAN_SHAPE") is e
    assert_code(e, "SAN_SHAPE", field="pos", index=2, seq_id=1)
    assert_code(_error(), "SAN_SHAPE", field=None, index=None, seq_id=None)


@pytest.mark.parametrize(
    ("check", "message"),
    [
        (
            {"code": "SAN_EMPTY"},
            "expected an error code='SAN_EMPTY', got code='SAN_SHAPE' (BatchError: ",
        ),
        (
            {"code": "SAN_SHAPE", "field": "token"},
            "expected an error code='SAN_SHAPE' field='token', got code='SAN_SHAPE' field='pos'",
        ),
        (
            {"code": "SAN_SHAPE", "index": 3},
            "expected an error code='SAN_SHAPE' index=3, got code='SAN_SHAPE' index=2",
        ),
        (
            {"code": "SAN_SHAPE", "seq_id": 0},
            "expected an error code='SAN_SHAPE' seq_id=0, got code='SAN_SHAPE' seq_id=1",
        ),
        (
            {"code": "SAN_SHAPE", "field": None},
            "expected an error code='SAN_SHAPE' field=None, got code='SAN_SHAPE' field='pos'",
        ),
    ],
    ids=["code", "field", "index", "seq_id", "field-none"],
)
def test_assert_code_fails_on_each_difference(check: dict[str, Any], message: str) -> None:
    err = _error(field="pos", index=2, seq_id=1)
    code = check.pop("code")
    with fails_with(f"after decode: {message}"):
        assert_code(err, code, what="after decode", **check)


def test_assert_code_fails_without_an_error_or_without_a_code() -> None:
    with fails("last_error: expected an error code='DEC_PARAM', got none"):
        assert_code(None, "DEC_PARAM", what="last_error")
    with fails("expected an error code='X' field='f', got ValueError('boom'), which has no code"):
        assert_code(ValueError("boom"), "X", field="f")


def test_raises_code_passes_and_exposes_the_error() -> None:
    with raises_code("SAN_SHAPE", field="pos", index=2, exc=BatchError) as got:
        raise _error(field="pos", index=2)
    assert isinstance(got.value, BatchError) and got.value.code == "SAN_SHAPE"
    with raises_code("SAN_SHAPE", exc=(KeyError, BatchError)):
        raise _error()


def test_raises_code_fails_when_nothing_is_raised() -> None:
    message = "sanitize: expected an error code='SAN_SHAPE' field='pos', nothing was raised"
    with fails(message), raises_code("SAN_SHAPE", field="pos", what="sanitize"):
        pass


def test_raises_code_fails_on_another_exception_type() -> None:
    message = "expected BatchError code='SAN_SHAPE', got TypeError: bad call"
    with fails(message) as info, raises_code("SAN_SHAPE", exc=BatchError):
        raise TypeError("bad call")
    assert isinstance(info.value.__cause__, TypeError)
    message = "expected KeyError/BatchError code='X', got TypeError: t"
    with fails(message), raises_code("X", exc=(KeyError, BatchError)):
        raise TypeError("t")


def test_raises_code_fails_on_an_error_without_a_code() -> None:
    message = "expected an error code='X', got ValueError('v'), which has no code"
    with fails(message), raises_code("X"):
        raise ValueError("v")


@pytest.mark.parametrize(
    ("kw", "fragment"),
    [
        ({}, "expected an error code='SAN_EMPTY', got code='SAN_SHAPE'"),
        ({"field": "n_tokens"}, "field='n_tokens', got code='SAN_SHAPE' field='pos'"),
        ({"index": 0}, "index=0, got code='SAN_SHAPE' index=2"),
        ({"seq_id": 3}, "seq_id=3, got code='SAN_SHAPE' seq_id=1"),
    ],
    ids=["code", "field", "index", "seq_id"],
)
def test_raises_code_fails_on_each_difference(kw: dict[str, Any], fragment: str) -> None:
    code = "SAN_SHAPE" if kw else "SAN_EMPTY"
    with fails_with(fragment), raises_code(code, **kw):
        raise _error(field="pos", index=2, seq_id=1)


# ---- assert_unchanged / unchanged ----------------------------------------------------------


@dataclass
class Stream:
    pos: tuple[int, ...]
    k: Any
    meta: dict[str, Any]


def _state(**over: Any) -> Stream:
    base: dict[str, Any] = {
        "pos": (0, 1, 2),
        "k": torch.zeros(2, 3),
        "meta": {"head": 3, "seqs": {0, 1}, "logits": np.array([0.5, math.nan]), "x": 1.0},
    }
    base.update(over)
    return Stream(**base)


def test_assert_unchanged_passes_on_equal_readings() -> None:
    assert_unchanged(_state(), _state(), "the cache")  # NaN equals NaN, fresh tensors compare
    assert_unchanged({0: (0, 5), 1: (-1, -1)}, {0: (0, 5), 1: (-1, -1)})
    assert_unchanged(math.nan, math.nan)


@pytest.mark.parametrize(
    ("after", "line"),
    [
        (_state(pos=(0, 1, 3)), ".pos[2]: 2 -> 3"),
        (_state(pos=(0, 1)), ".pos: length 3 -> 2"),
        (_state(pos=[0, 1, 2]), ".pos: (0, 1, 2) -> [0, 1, 2]"),
        (
            _state(k=torch.ones(2, 3)),
            ".k: 6 of 6 elements differ, first at (0, 0): 0.0 -> 1.0",
        ),
        (_state(k=torch.zeros(3, 2)), ".k: shape (2, 3) -> (3, 2)"),
        (_state(k=torch.zeros(2, 3, dtype=torch.float16)), ".k: dtype float32 -> float16"),
        (_state(k=np.zeros((2, 3), np.float32)), ".k: Tensor -> ndarray"),
        (
            _state(meta={"head": 4, "seqs": {0, 1}, "logits": np.array([0.5, math.nan]), "x": 1.0}),
            ".meta['head']: 3 -> 4",
        ),
        (
            _state(meta={"head": 3, "seqs": {0, 2}, "logits": np.array([0.5, math.nan]), "x": 1.0}),
            ".meta['seqs']: lost {1}, gained {2}",
        ),
        (
            _state(meta={"head": 3, "seqs": {0, 1}, "logits": np.array([0.5, 0.0]), "x": 1.0}),
            ".meta['logits']: 1 of 2 elements differ, first at (1,): nan -> 0.0",
        ),
        (
            _state(meta={"head": 3, "seqs": {0, 1}, "logits": np.array([0.5, math.nan])}),
            ".meta['x']: 1.0 -> absent",
        ),
        (
            _state(
                meta={
                    "head": 3,
                    "seqs": {0, 1},
                    "logits": np.array([0.5, math.nan]),
                    "x": 1.0,
                    "y": 2,
                }
            ),
            ".meta['y']: absent -> 2",
        ),
        (
            _state(meta={"head": 3, "seqs": {0, 1}, "logits": np.array([0.5, math.nan]), "x": 2}),
            ".meta['x']: 1.0 -> 2",
        ),
    ],
    ids=[
        "value",
        "length",
        "type",
        "tensor-values",
        "tensor-shape",
        "tensor-dtype",
        "tensor-to-array",
        "dict-value",
        "set",
        "array-nan",
        "key-removed",
        "key-added",
        "float-to-int",
    ],
)
def test_assert_unchanged_fails_on_each_kind_of_change(after: Stream, line: str) -> None:
    with fails(f"the cache changed (before -> after):\n  {line}"):
        assert_unchanged(_state(), after, "the cache")


def test_assert_unchanged_names_top_level_values_and_lists_at_most_ten_changes() -> None:
    with fails("state changed (before -> after):\n  value: 1 -> 2"):
        assert_unchanged(1, 2)
    with fails_with("  [9]: 9 -> 10\n  ... and 10 more"):
        assert_unchanged(list(range(20)), list(range(1, 21)), "memory")


def test_unchanged_passes_when_the_block_changes_nothing() -> None:
    state = {"pos": [0, 1]}
    with unchanged(lambda: state, "memory") as before:
        _ = state["pos"][0]
    assert before == {"pos": [0, 1]}


def test_unchanged_fails_when_the_block_mutates_a_live_reading() -> None:
    state = {"pos": [0, 1]}  # read() returns the live object: unchanged copies it first
    message = "memory changed (before -> after):\n  ['pos']: length 2 -> 3"
    with fails(message), unchanged(lambda: state, "memory"):
        state["pos"].append(2)


def test_unchanged_around_raises_code_checks_a_refused_call() -> None:
    cells = [0, 1]

    def refuse(mutate: bool) -> None:
        if mutate:
            cells[0] = 7
        raise _error(field="pos")

    with unchanged(lambda: cells, "the cache"), raises_code("SAN_SHAPE", field="pos"):
        refuse(False)
    with (
        fails("the cache changed (before -> after):\n  [0]: 0 -> 7"),
        unchanged(lambda: cells, "the cache"),
        raises_code("SAN_SHAPE", field="pos"),
    ):
        refuse(True)


def test_unchanged_lets_an_exception_from_the_block_through() -> None:
    state = [0]
    with pytest.raises(KeyError), unchanged(lambda: state):
        state[0] = 1
        raise KeyError("from the block")
