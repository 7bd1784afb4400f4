"""std::mt19937 and libstdc++'s ``uniform_real_distribution<double>(0, 1)``.

The dist sampler draws one double in [0, 1) per sample from a ``std::mt19937`` seeded with a
32-bit seed. libstdc++ builds that double with ``generate_canonical<double, 53>``: two 32-bit
outputs ``a`` then ``b`` combined as ``(a + b * 2^32) / 2^64`` in double arithmetic, with a
result of 1.0 replaced by the largest double below 1. (libc++ and MSVC build it differently,
so llama.cpp's seeded streams are only reproducible against a libstdc++ build.)
"""

from __future__ import annotations

import numpy as np

from reference_impl.spec_links import implements

N = 624
M = 397
_MATRIX_A = np.uint32(0x9908B0DF)
_UPPER = np.uint32(0x80000000)
_LOWER = np.uint32(0x7FFFFFFF)
_ONE = np.uint32(1)
_TWO_32 = 2.0**32
_TWO_64 = 2.0**64
_BELOW_ONE = float(np.nextafter(1.0, 0.0))


def _init_state(seed: int) -> np.ndarray:
    # init_genrand: mt[i] = 1812433253 * (mt[i-1] ^ (mt[i-1] >> 30)) + i  (mod 2^32)
    state = [seed & 0xFFFFFFFF]
    for i in range(1, N):
        prev = state[-1]
        state.append((1812433253 * (prev ^ (prev >> 30)) + i) & 0xFFFFFFFF)
    return np.array(state, dtype=np.uint32)


def _twist(mt: np.ndarray) -> None:
    """Regenerate all 624 words in place.

    Word i reads words i+1 and i+M (mod N); the blocks below are the largest runs in which
    every word read is either not yet rewritten or already rewritten, as the scalar loop sees
    them.
    """
    for lo, hi in ((0, N - M), (N - M, 2 * (N - M)), (2 * (N - M), N - 1), (N - 1, N)):
        i = np.arange(lo, hi)
        y = (mt[i] & _UPPER) | (mt[(i + 1) % N] & _LOWER)
        mag = np.where((y & _ONE) != 0, _MATRIX_A, np.uint32(0))
        mt[i] = mt[(i + M) % N] ^ (y >> _ONE) ^ mag


def _temper(y: np.ndarray) -> np.ndarray:
    y = y ^ (y >> np.uint32(11))
    y = y ^ ((y << np.uint32(7)) & np.uint32(0x9D2C5680))
    y = y ^ ((y << np.uint32(15)) & np.uint32(0xEFC60000))
    return y ^ (y >> np.uint32(18))


@implements("SMP-023")
class MT19937:
    """The 32-bit Mersenne Twister with std::mt19937's seeding and output stream."""

    def __init__(self, seed: int = 5489) -> None:
        self.seed(seed)

    def seed(self, seed: int) -> None:
        self._mt = _init_state(seed)
        self._out = np.empty(0, dtype=np.uint32)
        self._pos = 0

    def next_u32(self) -> int:
        if self._pos >= self._out.shape[0]:
            _twist(self._mt)
            self._out = _temper(self._mt)
            self._pos = 0
        value = int(self._out[self._pos])
        self._pos += 1
        return value

    def outputs(self, n: int) -> list[int]:
        return [self.next_u32() for _ in range(n)]

    @implements("SMP-012")
    def copy(self) -> MT19937:
        other = MT19937.__new__(MT19937)
        other._mt = self._mt.copy()
        other._out = self._out.copy()
        other._pos = self._pos
        return other


@implements("SMP-023")
def generate_canonical(rng: MT19937) -> float:
    """libstdc++ ``generate_canonical<double, 53>`` over a 32-bit engine: two draws."""
    low = float(rng.next_u32())
    high = float(rng.next_u32())
    value = (low + high * _TWO_32) / _TWO_64
    return _BELOW_ONE if value >= 1.0 else value


@implements("SMP-023")
def uniform_01(rng: MT19937) -> float:
    """``std::uniform_real_distribution<double>(0, 1)(rng)`` = canonical * (1 - 0) + 0."""
    return generate_canonical(rng) * 1.0 + 0.0


_TWO_32_F = np.float32(2.0**32)
_BELOW_ONE_F = np.nextafter(np.float32(1.0), np.float32(0.0))


@implements("SMP-081")
def uniform_float_01(rng: MT19937) -> np.float32:
    """``std::uniform_real_distribution<float>(0, 1)(rng)`` (XTC's chance): libstdc++
    ``generate_canonical<float, 24>`` takes one 32-bit output, rounds it to float and divides
    by 2^32 in float; a result of 1 becomes the largest float below 1."""
    value = np.float32(np.float32(rng.next_u32()) / _TWO_32_F)
    return _BELOW_ONE_F if value >= 1.0 else value


@implements("SMP-082", "SMP-083")
def discrete_index(weights: np.ndarray, rng: MT19937) -> int:
    """``std::discrete_distribution<int>(weights)(rng)`` as libstdc++ builds it.

    Fewer than two weights: index 0 and *no* draw. Otherwise the weights are divided by
    their double sum, accumulated in double (the last cumulative value forced to 1), and
    the result is the first index whose cumulative value is ``>= u`` (lower_bound), u the
    two-output canonical double of :func:`uniform_01`.
    """
    w = np.asarray(weights, dtype=np.float64)
    if w.shape[0] < 2:
        return 0
    total = float(np.cumsum(w)[-1])
    cumulative = np.cumsum(w / total)
    cumulative[-1] = 1.0
    u = uniform_01(rng)
    return int(np.searchsorted(cumulative, u, side="left"))
