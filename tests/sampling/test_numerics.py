"""Float helpers: glibc-compatible expf, running sums, ordering helpers."""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any

import numpy as np
import pytest

from reference_impl.sampling import numerics
from reference_impl.sampling.token_data import TokenDataArray

F32 = np.float32


def _glibc_expf() -> Any:
    """glibc's expf through ctypes, or None on another C library."""
    try:
        ctypes.CDLL(None).gnu_get_libc_version  # noqa: B018 -- only glibc exports it
        fn = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6").expf
    except (OSError, AttributeError):
        return None
    fn.restype, fn.argtypes = ctypes.c_float, [ctypes.c_float]
    return fn


def test_expf_matches_glibc_bit_for_bit() -> None:
    expf = _glibc_expf()
    if expf is None:
        pytest.skip("glibc's libm is not available on this platform")
    rng = np.random.default_rng(0)
    x = np.concatenate(
        [
            -np.abs(rng.standard_normal(20000) * 20),
            rng.uniform(-1.0, 0.0, 5000),
            rng.uniform(-110.0, -80.0, 5000),  # subnormal results and underflow to 0
            [0.0, -0.0, -np.inf, -1e-30, -87.33655, -103.97208, -104.0],
        ]
    ).astype(F32)
    expected = np.array([expf(float(v)) for v in x], dtype=F32)
    got = numerics.expf(x)
    mismatches = np.nonzero(got.view(np.uint32) != expected.view(np.uint32))[0]
    assert mismatches.size == 0, (x[mismatches][:5], got[mismatches][:5], expected[mismatches][:5])


def test_expf_special_values() -> None:
    got = numerics.expf(np.array([-np.inf, np.inf, np.nan, 0.0, 100.0], F32))
    assert got[0] == 0.0 and got[1] == np.inf and np.isnan(got[2]) and got[3] == 1.0
    assert got[4] == np.inf


def test_running_sums_are_sequential() -> None:
    # pairwise summation would give 1.0 + 1e-8 + ... differently from a left-to-right loop
    x = np.array([1.0] + [1e-8] * 1000, dtype=F32)
    acc = F32(0.0)
    for v in x:
        acc = F32(acc + v)
    assert numerics.sum_f32(x) == acc == F32(1.0)
    assert numerics.cumsum_f64(x)[-1] == pytest.approx(1.0 + 1e-5, rel=1e-6)


@pytest.mark.parametrize("n", [10, 5000, 20000])
def test_top_k_order_is_stable_among_ties(n: int) -> None:
    rng = np.random.default_rng(n)
    logits = rng.integers(0, 5, n).astype(F32)
    for k in (1, 7, n // 3, n):
        got = numerics.top_k_order(logits, k)
        assert np.array_equal(got, np.argsort(-logits, kind="stable")[:k])


def test_softmax_uses_first_logit_as_max_when_sorted() -> None:
    cur = TokenDataArray(
        np.arange(2, dtype=np.int32), np.array([1.0, 2.0], F32), np.zeros(2, F32), -1, True
    )
    out = numerics.softmax(cur, do_sort=False)
    # max taken from logits[0] = 1 (as llama.cpp does when the flag says sorted)
    assert out.p[1] > out.p[0] and np.isclose(out.p.sum(), 1.0)
    unsorted = numerics.softmax(TokenDataArray(cur.ids, cur.logits, cur.p), do_sort=True)
    assert unsorted.sorted and unsorted.ids.tolist() == [1, 0]
