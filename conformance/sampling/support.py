"""Helpers shared by the sampling conformance tests (not tests themselves)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

from conformance.protocol.sampling import samplers_named
from reference_impl.sampling import candidates as candidate_rules
from reference_impl.sampling.token_data import TokenDataArray

F32 = np.float32


@contextmanager
def chain_of(target: Any, spec: Any) -> Iterator[Any]:
    """A chain handle of the target for the ``with`` block (usable inside @given tests)."""
    handle = target.sampler_chain_init(spec)
    try:
        yield handle
    finally:
        target.sampler_free(handle)


def needs_samplers(spec: Any, *values: Any, id: str | None = None, marks: Any = ()) -> Any:
    """``pytest.param(*values)`` requiring the sampler capabilities the chain ``spec`` names
    (``sampling.top_k`` ...), so a target without one skips only the cases that use it."""
    caps = sorted(samplers_named(spec))
    extra = [pytest.mark.requires(*caps)] if caps else []
    return pytest.param(*values, id=id, marks=[*marks, *extra])


def candidates(logits: np.ndarray) -> TokenDataArray:
    """The full-vocabulary candidate array of a logits row, as test *input*: built with the
    reference's rules (SMP-001), so a test that only needs an array does not need the target's
    ``sampling.candidates``."""
    return candidate_rules.build_candidates(logits)


def apply_once(target: Any, spec: Any, cur: TokenDataArray) -> TokenDataArray:
    """Build a chain, apply it once to ``cur``, free it."""
    handle = target.sampler_chain_init(spec)
    try:
        out: TokenDataArray = target.sampler_apply(handle, cur)
        return out
    finally:
        target.sampler_free(handle)


def from_probs(probs: list[float]) -> TokenDataArray:
    """tests/test-sampling.cpp's sampler_tester: ids 0..n-1, logit = logf(prob), p = prob."""
    p = np.array(probs, dtype=F32)
    with np.errstate(divide="ignore"):
        logits = np.log(p.astype(np.float64)).astype(F32)
    return TokenDataArray(np.arange(len(probs), dtype=np.int32), logits, p.copy(), -1, False)


def same_array(a: TokenDataArray, b: TokenDataArray) -> bool:
    """Bit-identical rows and flags (NaN equal to NaN)."""
    return (
        a.size == b.size
        and a.selected == b.selected
        and a.sorted == b.sorted
        and np.array_equal(a.ids, b.ids)
        and np.array_equal(a.logits, b.logits, equal_nan=True)
        and np.array_equal(a.p, b.p, equal_nan=True)
    )


def describe(a: TokenDataArray) -> str:
    return (
        f"n={a.size} selected={a.selected} sorted={a.sorted}\n ids={a.ids.tolist()}\n"
        f" logits={a.logits.tolist()}\n p={a.p.tolist()}"
    )
