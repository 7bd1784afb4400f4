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


def mt19937_uniforms(seed: int, count: int) -> list[float]:
    """``count`` draws of libstdc++'s ``uniform_real_distribution<double>(0, 1)`` over
    ``std::mt19937(seed)``, straight from the published MT19937 algorithm (init_genrand,
    twist, temper) and ``generate_canonical<double, 53>``: ``(a + b * 2^32) / 2^64``."""
    mt = [seed & 0xFFFFFFFF]
    for i in range(1, 624):
        mt.append((1812433253 * (mt[-1] ^ (mt[-1] >> 30)) + i) & 0xFFFFFFFF)
    index = 624
    outputs: list[int] = []
    while len(outputs) < 2 * count:
        if index == 624:
            for i in range(624):
                y = (mt[i] & 0x80000000) | (mt[(i + 1) % 624] & 0x7FFFFFFF)
                mt[i] = mt[(i + 397) % 624] ^ (y >> 1) ^ (0x9908B0DF if y & 1 else 0)
            index = 0
        y = mt[index]
        index += 1
        y ^= y >> 11
        y ^= (y << 7) & 0x9D2C5680
        y ^= (y << 15) & 0xEFC60000
        y ^= y >> 18
        outputs.append(y)
    us = [(outputs[2 * j] + outputs[2 * j + 1] * 2.0**32) / 2.0**64 for j in range(count)]
    return [min(u, float(np.nextafter(1.0, 0.0))) for u in us]
