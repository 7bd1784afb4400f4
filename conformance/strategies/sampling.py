"""Hypothesis strategies for the sampling area: logits rows, candidate arrays, chains.

Logits are drawn as continuous values from a numpy generator seeded by hypothesis, so equal
logits (whose order llama.cpp leaves unspecified) practically never occur unless a strategy
asks for ties on purpose; hypothesis still shrinks the size, scale and seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from hypothesis import strategies as st

from reference_impl.sampling.token_data import TokenDataArray

F32 = np.float32


def logits_from_seed(seed: int, n: int, scale: float = 3.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(n) * scale).astype(F32)


@st.composite
def logits_rows(
    draw: st.DrawFn, min_size: int = 1, max_size: int = 64, max_scale: float = 6.0
) -> np.ndarray:
    """A float32 row of continuous (practically distinct) logits."""
    n = draw(st.integers(min_size, max_size))
    seed = draw(st.integers(0, 2**32 - 1))
    scale = draw(st.floats(0.1, max_scale))
    return logits_from_seed(seed, n, scale)


@st.composite
def tied_logits_rows(draw: st.DrawFn, min_size: int = 1, max_size: int = 24) -> np.ndarray:
    """Logits from a handful of values (many ties), sometimes with -inf entries."""
    values = st.sampled_from([-2.0, -1.0, 0.0, 0.5, 3.0, float("-inf")])
    row = draw(st.lists(values, min_size=min_size, max_size=max_size))
    return np.array(row, dtype=F32)


@st.composite
def token_arrays(
    draw: st.DrawFn,
    min_size: int = 1,
    max_size: int = 64,
    max_scale: float = 6.0,
    sorted_: bool | None = None,
) -> TokenDataArray:
    """A candidate array: shuffled distinct ids, continuous logits, arbitrary p, and either
    unsorted or sorted descending (with the flag set)."""
    logits = draw(logits_rows(min_size, max_size, max_scale))
    n = logits.shape[0]
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    ids = rng.permutation(max(n * 3, 8))[:n].astype(np.int32)
    p = rng.random(n).astype(F32)
    is_sorted = draw(st.booleans()) if sorted_ is None else sorted_
    if is_sorted:
        order = np.argsort(-logits, kind="stable")
        ids, logits, p = ids[order], logits[order], p[order]
    return TokenDataArray(ids, logits, p, -1, is_sorted)


def seeds() -> st.SearchStrategy[int]:
    return st.integers(0, 2**32 - 2)  # 0xFFFFFFFF means "random seed"


FILTERS = ("top_k", "top_p", "min_p", "typical", "temp", "temp_ext", "top_n_sigma")


def filter_entries(names: Sequence[str] = FILTERS) -> st.SearchStrategy[list[Any]]:
    """One non-selecting chain entry with enabled parameters, of one of the samplers ``names``
    (those the target has: a drawn chain must not need a sampler the target lacks)."""
    keep = st.integers(0, 4)
    prob = st.floats(0.05, 0.95)
    options = {
        "top_k": st.builds(lambda k: ["top_k", {"k": k}], st.integers(1, 50)),
        "top_p": st.builds(lambda p, m: ["top_p", {"p": p, "min_keep": m}], prob, keep),
        "min_p": st.builds(
            lambda p, m: ["min_p", {"p": p, "min_keep": m}], st.floats(0.01, 0.9), keep
        ),
        "typical": st.builds(lambda p, m: ["typical", {"p": p, "min_keep": m}], prob, keep),
        "temp": st.builds(lambda t: ["temp", {"t": t}], st.floats(0.2, 2.5)),
        "temp_ext": st.builds(
            lambda t, d, e: ["temp_ext", {"t": t, "delta": d, "exponent": e}],
            st.floats(0.3, 2.0),
            st.floats(0.0, 0.8),
            st.floats(0.5, 2.0),
        ),
        "top_n_sigma": st.builds(lambda n: ["top_n_sigma", {"n": n}], st.floats(0.5, 3.0)),
    }
    chosen = [options[n] for n in FILTERS if n in names]
    return st.one_of(*chosen) if chosen else st.nothing()


def chains(names: Sequence[str] = FILTERS, max_filters: int = 4) -> st.SearchStrategy[list[Any]]:
    """A chain of up to ``max_filters`` filters (of ``names``) ending with a seeded dist."""
    if not any(n in FILTERS for n in names):  # a target without filters: just dist
        return st.builds(lambda seed: [["dist", {"seed": seed}]], seeds())
    return st.builds(
        lambda fs, seed: [*fs, ["dist", {"seed": seed}]],
        st.lists(filter_entries(names), min_size=1, max_size=max_filters),
        seeds(),
    )


def available_filters(target: Any) -> list[str]:
    """The chain filters the target has (a test drawing chains declares them with ``uses``)."""
    return [n for n in FILTERS if target.has(f"sampling.{n}")]


FILTER_CAPABILITIES = tuple(f"sampling.{n}" for n in FILTERS)


# -- DRY, XTC, Mirostat, adaptive-p -----------------------------------------------------------


@st.composite
def repetitive_histories(draw: st.DrawFn, vocab: int = 12, max_size: int = 120) -> list[int]:
    """Accepted tokens with repeats: copies of a few short phrases over a small vocabulary,
    so DRY finds repeated runs of many lengths (plain random tokens rarely repeat)."""
    phrases = draw(
        st.lists(
            st.lists(st.integers(0, vocab - 1), min_size=1, max_size=6), min_size=1, max_size=4
        )
    )
    picks = draw(st.lists(st.integers(0, len(phrases) - 1), max_size=max_size // 3))
    noise = draw(st.lists(st.integers(0, vocab - 1), max_size=4))
    return [t for i in picks for t in phrases[i]][:max_size] + noise


def dry_entries() -> st.SearchStrategy[list[Any]]:
    """An enabled (mostly) DRY entry with breakers drawn over the ids of the histories above."""
    breakers = st.lists(st.lists(st.integers(0, 11), min_size=1, max_size=3), max_size=3)
    return st.builds(
        lambda m, b, a, n, br: [
            "dry",
            {"multiplier": m, "base": b, "allowed_length": a, "penalty_last_n": n, "breakers": br},
        ],
        st.floats(-0.5, 3.0),
        st.floats(0.9, 4.0),
        st.integers(-1, 4),
        st.integers(-1, 150),
        breakers,
    )


def xtc_entries() -> st.SearchStrategy[list[Any]]:
    return st.builds(
        lambda p, t, k, s: ["xtc", {"p": p, "t": t, "min_keep": k, "seed": s}],
        st.floats(0.0, 1.0),
        st.floats(0.0, 0.6),
        st.integers(0, 4),
        seeds(),
    )


def mirostat_entries(v2: bool = False) -> st.SearchStrategy[list[Any]]:
    tau, eta = st.floats(0.2, 10.0), st.floats(0.0, 1.0)
    if v2:
        return st.builds(
            lambda s, t, e: ["mirostat_v2", {"seed": s, "tau": t, "eta": e}], seeds(), tau, eta
        )
    return st.builds(
        lambda nv, s, t, e, m: [
            "mirostat",
            {"n_vocab": nv, "seed": s, "tau": t, "eta": e, "m": m},
        ],
        st.integers(1, 100000),
        seeds(),
        tau,
        eta,
        st.integers(-1, 120),
    )


def adaptive_p_entries() -> st.SearchStrategy[list[Any]]:
    return st.builds(
        lambda t, d, s: ["adaptive_p", {"target": t, "decay": d, "seed": s}],
        st.floats(-0.5, 1.2),
        st.floats(-0.2, 1.2),
        seeds(),
    )
