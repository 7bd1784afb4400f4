"""Stateful sampler objects (the ``llama_sampler`` interface: apply, accept, reset, clone).

Each ``init_*`` function mirrors the llama.cpp constructor of the same name, including its
"empty" rule: a disabled parameter yields an :class:`Empty` sampler named ``?<name>`` that
does nothing. ``apply`` delegates to the pure rule functions through their modules (looked
up at call time), so a rule can be swapped for a mutant.
"""

from __future__ import annotations

import copy
import secrets
from collections import Counter, deque
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from reference_impl.sampling import mt19937, scaling, selection, truncation
from reference_impl.sampling.token_data import TokenDataArray
from reference_impl.spec_links import implements

F32 = np.float32
LLAMA_DEFAULT_SEED = 0xFFFFFFFF


class Sampler(Protocol):
    name: str

    def apply(self, cur: TokenDataArray) -> TokenDataArray: ...

    def accept(self, token: int) -> None: ...

    def reset(self) -> None: ...

    def clone(self) -> Sampler: ...


class _Base:
    name = "base"

    def accept(self, token: int) -> None:
        return None

    def reset(self) -> None:
        return None

    def apply(self, cur: TokenDataArray) -> TokenDataArray:
        raise NotImplementedError

    @implements("SMP-012")
    def clone(self) -> Sampler:
        return copy.deepcopy(self)

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"<{self.name} {fields}>"


@implements("SMP-015")
class Empty(_Base):
    """A disabled sampler (``?top-k``, ``?temp``, ...): every call is a no-op."""

    def __init__(self, name: str) -> None:
        self.name = name

    def apply(self, cur: TokenDataArray) -> TokenDataArray:
        return cur


class Greedy(_Base):
    name = "greedy"

    def apply(self, cur: TokenDataArray) -> TokenDataArray:
        return selection.greedy(cur)


@implements("SMP-024")
def rng_seed(seed: int) -> int:
    """get_rng_seed: LLAMA_DEFAULT_SEED asks for a fresh random seed, anything else is used."""
    return secrets.randbits(32) if seed == LLAMA_DEFAULT_SEED else seed


@implements("SMP-024", "SMP-025")
class Dist(_Base):
    """Seeded categorical sampling; ``reset`` reseeds (a fresh seed for LLAMA_DEFAULT_SEED)."""

    name = "dist"

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.seed_cur = rng_seed(seed)
        self._rng = mt19937.MT19937(self.seed_cur)

    def _draw(self) -> float:
        return mt19937.uniform_01(self._rng)

    def apply(self, cur: TokenDataArray) -> TokenDataArray:
        return selection.dist(cur, self._draw)

    @implements("SMP-011", "SMP-024")
    def reset(self) -> None:
        self.seed_cur = rng_seed(self.seed)
        self._rng.seed(self.seed_cur)

    @implements("SMP-012")
    def clone(self) -> Sampler:
        other = Dist.__new__(Dist)
        other.seed, other.seed_cur, other._rng = self.seed, self.seed_cur, self._rng.copy()
        return other


class TopK(_Base):
    name = "top-k"

    def __init__(self, k: int) -> None:
        self.k = k

    def apply(self, cur: TokenDataArray) -> TokenDataArray:
        return truncation.top_k(cur, self.k)


class TopP(_Base):
    name = "top-p"

    def __init__(self, p: float, min_keep: int) -> None:
        self.p, self.min_keep = F32(p), min_keep

    def apply(self, cur: TokenDataArray) -> TokenDataArray:
        return truncation.top_p(cur, self.p, self.min_keep)


class MinP(_Base):
    name = "min-p"

    def __init__(self, p: float, min_keep: int) -> None:
        self.p, self.min_keep = F32(p), min_keep

    def apply(self, cur: TokenDataArray) -> TokenDataArray:
        return truncation.min_p(cur, self.p, self.min_keep)


class Typical(_Base):
    name = "typical"

    def __init__(self, p: float, min_keep: int) -> None:
        self.p, self.min_keep = F32(p), min_keep

    def apply(self, cur: TokenDataArray) -> TokenDataArray:
        return truncation.typical(cur, self.p, self.min_keep)


class TopNSigma(_Base):
    name = "top-n-sigma"

    def __init__(self, n: float) -> None:
        self.n = F32(n)

    def apply(self, cur: TokenDataArray) -> TokenDataArray:
        return truncation.top_n_sigma(cur, self.n)


class Temp(_Base):
    name = "temp"

    def __init__(self, t: float) -> None:
        self.t = F32(t)

    def apply(self, cur: TokenDataArray) -> TokenDataArray:
        return scaling.temp(cur, self.t)


class TempExt(_Base):
    name = "temp-ext"

    def __init__(self, t: float, delta: float, exponent: float) -> None:
        self.t, self.delta, self.exponent = F32(t), F32(delta), F32(exponent)

    def apply(self, cur: TokenDataArray) -> TokenDataArray:
        return scaling.temp_ext(cur, self.t, self.delta, self.exponent)


class Penalties(_Base):
    """Repetition penalties over a ring buffer of the last ``last_n`` accepted tokens."""

    name = "penalties"

    def __init__(self, last_n: int, repeat: float, freq: float, present: float) -> None:
        self.last_n = last_n
        self.repeat, self.freq, self.present = F32(repeat), F32(freq), F32(present)
        self._window: deque[int] = deque()
        self._counts: Counter[int] = Counter()

    @implements("SMP-044")
    def accept(self, token: int) -> None:
        token = int(token)
        self._counts[token] += 1
        if len(self._window) >= self.last_n:  # the ring is full: the oldest token leaves
            old = self._window.popleft()
            self._counts[old] -= 1
            if self._counts[old] == 0:
                del self._counts[old]
        self._window.append(token)

    def apply(self, cur: TokenDataArray) -> TokenDataArray:
        return scaling.penalties(cur, self._counts, self.repeat, self.freq, self.present)

    @implements("SMP-011")
    def reset(self) -> None:
        self._window.clear()
        self._counts.clear()

    @property
    def history(self) -> list[int]:
        return list(self._window)


class LogitBias(_Base):
    name = "logit-bias"

    def __init__(self, biases: Sequence[tuple[int, float]]) -> None:
        self.biases = [(int(t), F32(b)) for t, b in biases]

    def apply(self, cur: TokenDataArray) -> TokenDataArray:
        return scaling.logit_bias(cur, self.biases)


# -- constructors with llama.cpp's "empty sampler" rules ------------------------------------


def init_greedy() -> Sampler:
    return Greedy()


def init_dist(seed: int) -> Sampler:
    return Dist(seed)


@implements("SMP-015")
def init_top_k(k: int) -> Sampler:
    return Empty("?top-k") if k <= 0 else TopK(k)


@implements("SMP-015")
def init_top_p(p: float, min_keep: int = 0) -> Sampler:
    return Empty("?top-p") if F32(p) >= 1.0 else TopP(p, min_keep)


@implements("SMP-015")
def init_min_p(p: float, min_keep: int = 0) -> Sampler:
    return Empty("?min-p") if F32(p) <= 0.0 else MinP(p, min_keep)


@implements("SMP-015")
def init_typical(p: float, min_keep: int = 0) -> Sampler:
    return Empty("?typical") if F32(p) >= 1.0 else Typical(p, min_keep)


@implements("SMP-015")
def init_temp(t: float) -> Sampler:
    return Empty("?temp") if F32(t) == 1.0 else Temp(t)


@implements("SMP-015")
def init_temp_ext(t: float, delta: float, exponent: float) -> Sampler:
    if F32(t) == 1.0 and F32(delta) <= 0.0:
        return Empty("?temp-ext")
    return TempExt(t, delta, exponent)


@implements("SMP-015")
def init_top_n_sigma(n: float) -> Sampler:
    return Empty("?top-n-sigma") if F32(n) <= 0.0 else TopNSigma(n)


@implements("SMP-015")
def penalties_disabled(last_n: int, repeat: float, freq: float, present: float) -> bool:
    return last_n == 0 or (F32(repeat) == 1.0 and F32(freq) == 0.0 and F32(present) == 0.0)


@implements("SMP-015")
def init_penalties(
    last_n: int, repeat: float = 1.0, freq: float = 0.0, present: float = 0.0
) -> Sampler:
    last_n = max(last_n, 0)  # a negative window is clamped to 0, which disables the sampler
    if penalties_disabled(last_n, repeat, freq, present):
        return Empty("?penalties")
    return Penalties(last_n, repeat, freq, present)


@implements("SMP-015")
def init_logit_bias(biases: Sequence[tuple[int, float]]) -> Sampler:
    return Empty("?logit-bias") if len(biases) == 0 else LogitBias(biases)
