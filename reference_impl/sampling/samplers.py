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

from reference_impl.sampling import dry, feedback, mt19937, scaling, selection, truncation
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


class LogitBias(_Base):
    name = "logit-bias"

    def __init__(self, biases: Sequence[tuple[int, float]]) -> None:
        self.biases = [(int(t), F32(b)) for t, b in biases]

    def apply(self, cur: TokenDataArray) -> TokenDataArray:
        return scaling.logit_bias(cur, self.biases)


@implements("SMP-080")
class Dry(_Base):
    """DRY over a ring buffer of the last ``penalty_last_n`` accepted tokens."""

    name = "dry"

    def __init__(
        self,
        multiplier: float,
        base: float,
        allowed_length: int,
        penalty_last_n: int,
        breakers: Sequence[Sequence[int]],
    ) -> None:
        self.multiplier, self.base = F32(multiplier), F32(base)
        self.allowed_length, self.penalty_last_n = allowed_length, penalty_last_n
        self.table = dry.breaker_table(breakers)
        self._window: deque[int] = deque(maxlen=penalty_last_n)

    def accept(self, token: int) -> None:
        self._window.append(int(token))

    def apply(self, cur: TokenDataArray) -> TokenDataArray:
        return dry.dry(
            cur,
            list(self._window),
            self.multiplier,
            self.base,
            self.allowed_length,
            self.penalty_last_n,
            self.table,
        )

    @implements("SMP-011")
    def reset(self) -> None:
        self._window.clear()


class _Seeded(_Base):
    """A sampler with its own std::mt19937 stream, reseeded by ``reset`` (get_rng_seed)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.seed_cur = rng_seed(seed)
        self._rng = mt19937.MT19937(self.seed_cur)

    @implements("SMP-024")
    def _reseed(self) -> None:
        self.seed_cur = rng_seed(self.seed)
        self._rng.seed(self.seed_cur)

    def _pick(self, weights: np.ndarray) -> int:
        return mt19937.discrete_index(weights, self._rng)


@implements("SMP-081")
class Xtc(_Seeded):
    """Exclude top choices with probability ``p``: one float draw per apply on >= 2 rows."""

    name = "xtc"

    def __init__(self, p: float, t: float, min_keep: int, seed: int) -> None:
        super().__init__(seed)
        self.p, self.t, self.min_keep = F32(p), F32(t), min_keep

    def apply(self, cur: TokenDataArray) -> TokenDataArray:
        if cur.size < 2:
            return cur
        if mt19937.uniform_float_01(self._rng) > self.p:
            return cur
        return truncation.xtc(cur, self.t, self.min_keep)

    @implements("SMP-011", "SMP-081")
    def reset(self) -> None:
        self._reseed()


@implements("SMP-082")
class Mirostat(_Seeded):
    """Mirostat v1: ``mu`` starts at ``2 * tau`` and learns from each selection."""

    name = "mirostat"

    def __init__(self, n_vocab: int, seed: int, tau: float, eta: float, m: int) -> None:
        super().__init__(seed)
        self.n_vocab, self.m = n_vocab, m
        self.tau, self.eta = F32(tau), F32(eta)
        self.mu = F32(F32(2.0) * self.tau)

    def apply(self, cur: TokenDataArray) -> TokenDataArray:
        out, self.mu = feedback.mirostat(
            cur, self.n_vocab, self.tau, self.eta, self.m, self.mu, self._pick
        )
        return out

    @implements("SMP-011", "SMP-082")
    def reset(self) -> None:
        self.mu = F32(F32(2.0) * self.tau)
        self._reseed()


@implements("SMP-082")
class MirostatV2(_Seeded):
    name = "mirostat-v2"

    def __init__(self, seed: int, tau: float, eta: float) -> None:
        super().__init__(seed)
        self.tau, self.eta = F32(tau), F32(eta)
        self.mu = F32(F32(2.0) * self.tau)

    def apply(self, cur: TokenDataArray) -> TokenDataArray:
        out, self.mu = feedback.mirostat_v2(cur, self.tau, self.eta, self.mu, self._pick)
        return out

    @implements("SMP-011", "SMP-082")
    def reset(self) -> None:
        self.mu = F32(F32(2.0) * self.tau)
        self._reseed()


@implements("SMP-083")
class AdaptiveP(_Seeded):
    """adaptive-p: select near an adapted target probability; ``accept`` of the token it
    selected feeds that token's original probability into the moving average."""

    name = "adaptive-p"

    def __init__(self, target: float, decay: float, seed: int) -> None:
        super().__init__(seed)
        self.target = F32(target)
        self.decay = F32(min(max(F32(decay), F32(0.0)), F32(0.99)))  # clamped, as llama.cpp
        self.state = feedback.adaptive_start(self.target, self.decay)
        self._original = np.zeros(0, F32)
        self._pending: tuple[int, int] | None = None  # (token id, row) of the last selection

    def apply(self, cur: TokenDataArray) -> TokenDataArray:
        out, self._original = feedback.adaptive_p(cur, self.target, self.state, self._pick)
        self._pending = (int(out.ids[out.selected]), out.selected)
        return out

    @implements("SMP-083")
    def accept(self, token: int) -> None:
        if self._pending is not None and self._pending[0] == int(token):
            original = self._original[self._pending[1]]
            self.state = feedback.adaptive_update(self.state, original, self.decay)
        self._pending = None

    @implements("SMP-011", "SMP-083")
    def reset(self) -> None:
        self.state = feedback.adaptive_start(self.target, self.decay)
        self._pending = None
        self._reseed()

    @implements("SMP-083")
    def clone(self) -> Sampler:
        # llama.cpp copies the moving average and the pending selection but not the stream:
        # the clone's stream is freshly seeded from ``seed``
        other = AdaptiveP(float(self.target), float(self.decay), self.seed)
        other.state, other._pending = self.state, self._pending
        other._original = self._original.copy()
        return other


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


@implements("SMP-080")
def dry_enabled(multiplier: float, base: float, penalty_last_n: int) -> bool:
    return bool(F32(multiplier) != 0.0 and F32(base) >= 1.0 and penalty_last_n > 0)


@implements("SMP-080")
def init_dry(
    multiplier: float,
    base: float,
    allowed_length: int,
    penalty_last_n: int,
    breakers: Sequence[Sequence[int]] = (),
) -> Sampler:
    """Empty unless ``multiplier != 0``, ``base >= 1`` and ``penalty_last_n > 0`` (0.3.36)."""
    if not dry_enabled(multiplier, base, penalty_last_n):
        return Empty("?dry")
    return Dry(multiplier, base, allowed_length, penalty_last_n, breakers)


@implements("SMP-081")
def init_xtc(p: float, t: float, min_keep: int = 0, seed: int = LLAMA_DEFAULT_SEED) -> Sampler:
    return Empty("?xtc") if F32(p) <= 0.0 or F32(t) > 0.5 else Xtc(p, t, min_keep, seed)


def init_mirostat(n_vocab: int, seed: int, tau: float, eta: float, m: int) -> Sampler:
    return Mirostat(n_vocab, seed, tau, eta, m)


def init_mirostat_v2(seed: int, tau: float, eta: float) -> Sampler:
    return MirostatV2(seed, tau, eta)


def init_adaptive_p(target: float, decay: float, seed: int) -> Sampler:
    return AdaptiveP(target, decay, seed)
