"""Float arithmetic with the C library's rounding, and the shared softmax/sort helpers.

llama.cpp's samplers are plain C++ loops over ``float`` (and a few ``double``) values,
compiled without FMA contraction and calling libm's ``expf``/``logf``/``powf``. To reproduce
them bit for bit with numpy:

* running sums use ``np.cumsum`` (a sequential left-to-right accumulation, like the C loop)
  and never ``np.sum`` (pairwise, which rounds differently);
* ``expf`` re-implements glibc's algorithm (a 32-entry table of 2^(i/32) and a cubic
  polynomial evaluated in double, then rounded to float): numpy's own float32 ``exp`` differs
  from glibc in the last bit for a large share of inputs, and a double ``exp`` rounded to
  float still differs for about 1 input in 2000;
* ``logf``/``powf`` are the double results rounded to float (glibc's ``logf`` agrees except
  for rare last-bit differences; they only feed thresholds and entropies).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from reference_impl.sampling.token_data import TokenDataArray
from reference_impl.spec_links import implements

F32 = np.float32
F64 = np.float64
Real = float | np.floating[Any]  # a sampler parameter: a Python float or a numpy scalar

# glibc expf (sysdeps/ieee754/flt-32/e_expf.c): 2^(i/32) as double bits minus (i << 47), so
# that adding k << 47 for the integer part of x*32/ln2 scales by 2^(k/32).
_EXP2F_TAB = np.array(
    [
        0x3FF0000000000000, 0x3FEFD9B0D3158574, 0x3FEFB5586CF9890F, 0x3FEF9301D0125B51,
        0x3FEF72B83C7D517B, 0x3FEF54873168B9AA, 0x3FEF387A6E756238, 0x3FEF1E9DF51FDEE1,
        0x3FEF06FE0A31B715, 0x3FEEF1A7373AA9CB, 0x3FEEDEA64C123422, 0x3FEECE086061892D,
        0x3FEEBFDAD5362A27, 0x3FEEB42B569D4F82, 0x3FEEAB07DD485429, 0x3FEEA47EB03A5585,
        0x3FEEA09E667F3BCD, 0x3FEE9F75E8EC5F74, 0x3FEEA11473EB0187, 0x3FEEA589994CCE13,
        0x3FEEACE5422AA0DB, 0x3FEEB737B0CDC5E5, 0x3FEEC49182A3F090, 0x3FEED503B23E255D,
        0x3FEEE89F995AD3AD, 0x3FEEFF76F2FB5E47, 0x3FEF199BDD85529C, 0x3FEF3720DCEF9069,
        0x3FEF5818DCFBA487, 0x3FEF7C97337B9B5F, 0x3FEFA4AFA2A490DA, 0x3FEFD0765B6E4540,
    ],
    dtype=np.uint64,
)  # fmt: skip
_N = 32
_SHIFT = float.fromhex("0x1.8p+52")  # adding it rounds to an integer kept in the low bits
_INV_LN2_N = float.fromhex("0x1.71547652b82fep+0") * _N
_C0 = float.fromhex("0x1.c6af84b912394p-5") / _N / _N / _N
_C1 = float.fromhex("0x1.ebfce50fac4f3p-3") / _N / _N
_C2 = float.fromhex("0x1.62e42ff0c52d6p-1") / _N
_UNDERFLOW = F32(float.fromhex("-0x1.9fe368p6"))  # below log(2^-150): the result is +0
_OVERFLOW = F32(float.fromhex("0x1.62e42ep6"))  # above log(2^128): the result is +inf


_BLOCK = 8192  # elements per pass: the double scratch arrays stay in the L2 cache


@implements("SMP-021", "SMP-025")
def expf(x: np.ndarray) -> np.ndarray:
    """``expf`` of a float32 array (flattened), bit-identical to glibc's.

    Per element: z = x * 32/ln2 = k + r (k the nearest integer, |r| <= 1/2), scale =
    2^(k/32) built from the table entry k mod 32 by adding k to the exponent bits, and
    exp(x) = scale * (C0 r^3 + C1 r^2 + C2 r + 1) in double, rounded once to float. The array
    is processed in blocks with preallocated scratch space: the dozen passes stay in cache.
    """
    x = np.asarray(x, dtype=F32).reshape(-1)
    out = np.empty(x.shape, F32)
    n = x.shape[0]
    m = min(n, _BLOCK)
    r_buf, k_buf, y_buf, t_buf = (np.empty(m, F64) for _ in range(4))
    bits_buf = np.empty(m, np.uint64)
    with np.errstate(over="ignore", invalid="ignore"):
        for start in range(0, n, _BLOCK):
            stop = min(n, start + _BLOCK)
            size = stop - start
            r, kd, y, t, bits = (
                r_buf[:size],
                k_buf[:size],
                y_buf[:size],
                t_buf[:size],
                bits_buf[:size],
            )
            np.multiply(x[start:stop], _INV_LN2_N, out=r, dtype=F64)  # z
            np.add(r, _SHIFT, out=kd)  # k sits in the low bits of kd
            np.subtract(kd, _SHIFT, out=t)  # k as a double
            np.subtract(r, t, out=r)  # r = z - k
            ki = kd.view(np.uint64)
            np.bitwise_and(ki, np.uint64(_N - 1), out=bits)
            _EXP2F_TAB.take(bits.view(np.int64), out=bits)
            np.left_shift(ki, np.uint64(52 - 5), out=ki)
            np.add(bits, ki, out=bits)  # 2^(k/32) as double bits
            np.multiply(r, _C0, out=y)
            np.add(y, _C1, out=y)
            np.multiply(r, r, out=t)
            np.multiply(y, t, out=y)
            np.multiply(r, _C2, out=t)
            np.add(t, 1.0, out=t)
            np.add(y, t, out=y)
            np.multiply(y, bits.view(F64), out=y)
            out[start:stop] = y
    if not np.all((x >= _UNDERFLOW) & (x <= _OVERFLOW)):  # -inf, NaN, under/overflow
        out[x < _UNDERFLOW] = 0.0
        out[x > _OVERFLOW] = np.inf
        nan = np.isnan(x)
        out[nan] = x[nan]
    return out


def logf(x: np.ndarray | Real) -> np.ndarray:
    """``logf``: the double logarithm rounded to float (log 0 = -inf, no warning)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(np.asarray(x, dtype=F32).astype(F64)).astype(F32)


def powf(x: Real, y: Real) -> np.float32:
    with np.errstate(all="ignore"):
        return F32(np.power(F64(x), F64(y)))


def cumsum_f32(x: np.ndarray) -> np.ndarray:
    """Running float sums, ``acc += x[i]`` in order (the C loop's rounding)."""
    return np.cumsum(np.asarray(x, dtype=F32), dtype=F32)


def sum_f32(x: np.ndarray) -> np.float32:
    return F32(cumsum_f32(x)[-1]) if len(x) else F32(0.0)


def cumsum_f64(x: np.ndarray) -> np.ndarray:
    """Running double sums of (float or double) values, in order."""
    return np.cumsum(np.asarray(x, dtype=F64), dtype=F64)


def _stable_order(keys: np.ndarray) -> np.ndarray:
    """Ascending order of ``keys`` with equal keys in index order (a stable argsort).

    numpy's unstable sort is several times faster than its stable one; its result is fixed
    up by sorting the indices inside each run of equal keys, which are few in practice.
    """
    order = np.argsort(keys)
    ranked = keys[order]
    if ranked.size and np.isnan(ranked[-1]):  # NaN keys (sorted last) are never "equal"
        return np.argsort(keys, kind="stable")
    same = ranked[1:] == ranked[:-1]
    if not same.any():
        return order
    in_run = np.zeros(order.size, dtype=bool)  # positions belonging to a run of equal keys
    in_run[1:] |= same
    in_run[:-1] |= same
    tied = np.flatnonzero(in_run)
    run_id = np.cumsum(np.concatenate(([True], ~same)))[tied]
    # within each run, order by index: sort the tied slots by (run, index)
    order[tied] = order[tied][np.lexsort((order[tied], run_id))]
    return order


def descending_order(logits: np.ndarray) -> np.ndarray:
    """Indices sorting logits in descending order; equal logits keep their array order.

    llama.cpp uses std::sort/partial_sort, whose order among equal logits is unspecified;
    the reference picks the stable order so its own results are reproducible.
    """
    return _stable_order(-np.asarray(logits, dtype=F32))


def ascending_order(values: np.ndarray) -> np.ndarray:
    """Indices sorting values ascending, equal values in array order (NaN last)."""
    return _stable_order(np.asarray(values))


def top_k_order(logits: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest logits in descending order (stable among equal logits),
    in O(n + k log k) for large arrays (``k`` must be in [1, n])."""
    n = logits.shape[0]
    if k >= n or n <= 4096:
        return descending_order(logits)[:k]
    neg = -logits
    kth = np.partition(neg, k - 1)[k - 1]  # the k-th largest logit, negated
    above = np.nonzero(neg < kth)[0]
    tied = np.nonzero(neg == kth)[0][: k - above.size]  # earliest positions win ties
    chosen = np.concatenate([above, tied])
    chosen.sort()
    return chosen[np.argsort(neg[chosen], kind="stable")]


def softmax(cur: TokenDataArray, *, do_sort: bool) -> TokenDataArray:
    """llama_sampler_softmax_impl: optionally sort, then p_i = expf(l_i - max) / sum (float).

    The max is ``logits[0]`` when the array is sorted, the true max otherwise.
    """
    if do_sort and not cur.sorted:
        cur = cur.take(descending_order(cur.logits), sorted=True)
    logits = cur.logits
    max_l = logits[0] if cur.sorted else np.max(logits)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):  # NaN, inf as in C
        e = expf(logits - F32(max_l))
        p = e / sum_f32(e)
    return cur.with_p(p)
