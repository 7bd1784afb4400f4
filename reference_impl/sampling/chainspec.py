"""The sampler chain description: a small JSON-able format, parsed and validated here.

A chain is a list of entries, applied in order; each entry is ``[name, {params}]`` (a
2-element list or tuple) or a bare ``name`` for samplers without parameters::

    [["penalties", {"last_n": 64, "repeat": 1.1}],
     ["top_k", {"k": 40}], ["top_p", {"p": 0.95}], ["min_p", {"p": 0.05}],
     ["temp_ext", {"t": 0.8, "delta": 0.0, "exponent": 1.0}],
     ["dist", {"seed": 42}]]

Names and parameters follow llama.cpp's ``llama_sampler_init_*`` functions:

=============  ==========================================================================
name           parameters (default)
=============  ==========================================================================
greedy         none
dist           seed: uint32 (0xFFFFFFFF = a fresh random seed at init and on each reset)
top_k          k: int32 (<= 0 disables)
top_p          p: float (>= 1 disables), min_keep: int >= 0 (0)
min_p          p: float (<= 0 disables), min_keep (0)
typical        p: float (>= 1 disables), min_keep (0)
temp           t: float (1 disables; <= 0 keeps only the first maximum)
temp_ext       t: float, delta: float (0), exponent: float (1)
penalties      last_n: int32 (<= 0 disables), repeat (1, finite > 0), freq (0), present (0)
top_n_sigma    n: float (<= 0 disables)
logit_bias     biases: list of [token, bias] (bias may be -inf; empty disables)
dry            multiplier: float (0 disables), base (1.75; < 1 disables), allowed_length:
               int32 (2), penalty_last_n: int32 (64; <= 0 disables), breakers: list of
               token sequences ([]; each a list of int32 ids, head first; [] skipped),
               breaker_strings: list of ASCII strings ([]; needs a vocabulary, exclusive
               with breakers)
xtc            p: float (<= 0 disables), t: float (0.1; > 0.5 disables), min_keep (0),
               seed: uint32 (0xFFFFFFFF)
mirostat       n_vocab: int32, seed: uint32, tau: float (5.0), eta: float (0.1), m: int32
               (100)
mirostat_v2    seed: uint32, tau: float (5.0), eta: float (0.1)
adaptive_p     target: float (< 0: plain sampling), decay: float (clamped to [0, 0.99]),
               seed: uint32
=============  ==========================================================================

Floats must be real numbers and not NaN; infinities are rejected except for logit biases.
Errors are :class:`SamplingError` with code ``SMP_SPEC_FORMAT`` (malformed entry),
``SMP_UNKNOWN_SAMPLER`` or ``SMP_PARAM`` (unknown, missing, ill-typed or out-of-range value); the
``field`` names the entry and parameter (``spec[2].k``) and ``index`` the entry.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from reference_impl.errors import SamplingError
from reference_impl.spec_links import implements

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
UINT32_MAX = 2**32 - 1
LLAMA_DEFAULT_SEED = 0xFFFFFFFF


@dataclass(frozen=True)
class SamplerSpec:
    """One validated chain entry: the sampler name and its full parameter set."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)


# -- value checkers: (value, field, index) -> normalised value ------------------------------

Checker = Callable[[Any, str, int | None], Any]


def _fail(field_name: str, index: int | None, message: str) -> SamplingError:
    return SamplingError("SMP_PARAM", message, field=field_name, index=index)


def _int_in(lo: int, hi: int) -> Checker:
    def check(value: Any, name: str, index: int | None) -> int:
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise _fail(name, index, f"'{name}' must be an integer, got {value!r}")
        if not lo <= int(value) <= hi:
            raise _fail(name, index, f"'{name}' = {value} is outside [{lo}, {hi}]")
        return int(value)

    return check


def _real(*, allow_inf: bool = False) -> Checker:
    def check(value: Any, name: str, index: int | None) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
            raise _fail(name, index, f"'{name}' must be a number, got {value!r}")
        f = float(value)
        if math.isnan(f) or (math.isinf(f) and not allow_inf):
            raise _fail(name, index, f"'{name}' must be a finite number, got {value!r}")
        return f

    return check


@implements("SMP-061")
def _positive_real(value: Any, name: str, index: int | None) -> float:
    f: float = _real()(value, name, index)
    if not f > 0.0:
        raise _fail(name, index, f"'{name}' must be > 0, got {value!r}")
    return f


def _biases(value: Any, name: str, index: int | None) -> list[tuple[int, float]]:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise _fail(name, index, f"'{name}' must be a list of [token, bias] pairs")
    out: list[tuple[int, float]] = []
    for j, pair in enumerate(value):
        where = f"{name}[{j}]"
        if isinstance(pair, str | bytes) or not isinstance(pair, Sequence) or len(pair) != 2:
            raise _fail(where, index, f"'{where}' must be a [token, bias] pair, got {pair!r}")
        token = _int_in(INT32_MIN, INT32_MAX)(pair[0], where, index)
        out.append((token, _real(allow_inf=True)(pair[1], where, index)))
    return out


@implements("SMP-080")
def _breakers(value: Any, name: str, index: int | None) -> list[list[int]]:
    """DRY's sequence breakers as token sequences: a list of lists of int32 ids (an empty
    sequence is skipped, as llama.cpp skips an empty breaker)."""
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise _fail(name, index, f"'{name}' must be a list of token sequences")
    out: list[list[int]] = []
    for j, seq in enumerate(value):
        where = f"{name}[{j}]"
        if isinstance(seq, str | bytes) or not isinstance(seq, Sequence):
            raise _fail(where, index, f"'{where}' must be a list of token ids")
        out.append(
            [_int_in(INT32_MIN, INT32_MAX)(t, f"{where}[{k}]", index) for k, t in enumerate(seq)]
        )
    return out


@implements("SMP-087")
def _breaker_strings(value: Any, name: str, index: int | None) -> list[str]:
    """DRY's sequence breakers as strings (ASCII: each is matched and cut byte by byte)."""
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise _fail(name, index, f"'{name}' must be a list of strings")
    for j, item in enumerate(value):
        if not isinstance(item, str) or not item.isascii():
            raise _fail(f"{name}[{j}]", index, f"'{name}[{j}]' must be an ASCII string")
    return list(value)


_INT32 = _int_in(INT32_MIN, INT32_MAX)
_MIN_KEEP = _int_in(0, INT32_MAX)
_SEED = _int_in(0, UINT32_MAX)
_REAL = _real()

_REQUIRED = object()

# name -> {param: (checker, default or _REQUIRED)}
SAMPLER_PARAMS: dict[str, dict[str, tuple[Checker, Any]]] = {
    "greedy": {},
    "dist": {"seed": (_SEED, _REQUIRED)},
    "top_k": {"k": (_INT32, _REQUIRED)},
    "top_p": {"p": (_REAL, _REQUIRED), "min_keep": (_MIN_KEEP, 0)},
    "min_p": {"p": (_REAL, _REQUIRED), "min_keep": (_MIN_KEEP, 0)},
    "typical": {"p": (_REAL, _REQUIRED), "min_keep": (_MIN_KEEP, 0)},
    "temp": {"t": (_REAL, _REQUIRED)},
    "temp_ext": {"t": (_REAL, _REQUIRED), "delta": (_REAL, 0.0), "exponent": (_REAL, 1.0)},
    "penalties": {
        "last_n": (_INT32, _REQUIRED),
        "repeat": (_positive_real, 1.0),
        "freq": (_REAL, 0.0),
        "present": (_REAL, 0.0),
    },
    "top_n_sigma": {"n": (_REAL, _REQUIRED)},
    "logit_bias": {"biases": (_biases, _REQUIRED)},
    "dry": {
        "multiplier": (_REAL, _REQUIRED),
        "base": (_REAL, 1.75),
        "allowed_length": (_INT32, 2),
        "penalty_last_n": (_INT32, 64),
        "breakers": (_breakers, []),
        "breaker_strings": (_breaker_strings, []),
    },
    "xtc": {
        "p": (_REAL, _REQUIRED),
        "t": (_REAL, 0.1),
        "min_keep": (_MIN_KEEP, 0),
        "seed": (_SEED, LLAMA_DEFAULT_SEED),
    },
    "mirostat": {
        "n_vocab": (_INT32, _REQUIRED),
        "seed": (_SEED, _REQUIRED),
        "tau": (_REAL, 5.0),
        "eta": (_REAL, 0.1),
        "m": (_INT32, 100),
    },
    "mirostat_v2": {"seed": (_SEED, _REQUIRED), "tau": (_REAL, 5.0), "eta": (_REAL, 0.1)},
    "adaptive_p": {
        "target": (_REAL, _REQUIRED),
        "decay": (_REAL, _REQUIRED),
        "seed": (_SEED, _REQUIRED),
    },
}


@implements("SMP-060")
def parse_params(
    name: str, params: Mapping[str, Any], *, prefix: str, index: int | None
) -> dict[str, Any]:
    rules = SAMPLER_PARAMS[name]
    if not isinstance(params, Mapping):
        raise SamplingError(
            "SMP_SPEC_FORMAT",
            f"parameters of '{name}' must be a mapping",
            field=prefix,
            index=index,
        )
    unknown = sorted(str(k) for k in params if k not in rules)
    if unknown:
        raise _fail(f"{prefix}.{unknown[0]}", index, f"'{name}' has no parameter '{unknown[0]}'")
    out: dict[str, Any] = {}
    for key, (check, default) in rules.items():
        if key in params:
            out[key] = check(params[key], f"{prefix}.{key}", index)
        elif default is _REQUIRED:
            raise _fail(f"{prefix}.{key}", index, f"'{name}' requires parameter '{key}'")
        else:
            out[key] = default
    return out


@implements("SMP-060")
def parse_entry(entry: Any, index: int) -> SamplerSpec:
    where = f"spec[{index}]"
    params: Any
    if isinstance(entry, str):
        name, params = entry, {}
    elif isinstance(entry, Sequence) and not isinstance(entry, bytes) and 1 <= len(entry) <= 2:
        name = entry[0]
        params = entry[1] if len(entry) == 2 else {}
    else:
        raise SamplingError(
            "SMP_SPEC_FORMAT",
            f"chain entry {index} must be a name or [name, params], got {entry!r}",
            field=where,
            index=index,
        )
    if not isinstance(name, str) or name not in SAMPLER_PARAMS:
        raise SamplingError(
            "SMP_UNKNOWN_SAMPLER",
            f"unknown sampler {name!r}; known: {', '.join(SAMPLER_PARAMS)}",
            field=f"{where}.name",
            index=index,
        )
    spec = SamplerSpec(name, parse_params(name, params, prefix=where, index=index))
    if name == "dry" and spec.params["breakers"] and spec.params["breaker_strings"]:
        raise _fail(
            f"{where}.breaker_strings",
            index,
            "DRY takes its breakers either as token sequences or as strings, not both",
        )
    return spec


@implements("SMP-060")
def parse_chain(spec: Any) -> list[SamplerSpec]:
    """Validate a chain description; nothing is constructed when it is rejected."""
    if isinstance(spec, str | bytes | Mapping) or not isinstance(spec, Sequence):
        raise SamplingError(
            "SMP_SPEC_FORMAT", "a sampler chain must be a list of entries", field="spec"
        )
    return [parse_entry(entry, i) for i, entry in enumerate(spec)]


# -- common_params_sampling: the default chain's parameters ---------------------------------

COMMON_SAMPLER_NAMES = (
    "penalties",
    "dry",
    "top_n_sigma",
    "top_k",
    "typ_p",
    "top_p",
    "min_p",
    "xtc",
    "temperature",
)


# names the ``samplers`` list may hold: the default order plus adaptive-p, which (when listed)
# takes dist's place at the end of the chain
KNOWN_COMMON_SAMPLERS = (*COMMON_SAMPLER_NAMES, "adaptive_p")


def _sampler_names(value: Any, name: str, index: int | None) -> list[str]:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise _fail(name, index, f"'{name}' must be a list of sampler names")
    for j, item in enumerate(value):
        if item not in KNOWN_COMMON_SAMPLERS:
            raise _fail(
                f"{name}[{j}]",
                index,
                f"unknown sampler {item!r}; known: {', '.join(KNOWN_COMMON_SAMPLERS)}",
            )
    return list(value)


def _optional_vocab_size(value: Any, name: str, index: int | None) -> int | None:
    return None if value is None else _int_in(1, INT32_MAX)(value, name, index)


# common/common.h common_params_sampling, the fields the default chain reads (82bb485; the
# DRY window default 64 and the adaptive-p fields of the common.h that matches 0.3.36's DRY).
COMMON_PARAMS: dict[str, tuple[Checker, Any]] = {
    "seed": (_SEED, LLAMA_DEFAULT_SEED),
    "top_k": (_INT32, 40),
    "top_p": (_REAL, 0.95),
    "min_p": (_REAL, 0.05),
    "typ_p": (_REAL, 1.0),
    "temp": (_REAL, 0.8),
    "dynatemp_range": (_REAL, 0.0),
    "dynatemp_exponent": (_REAL, 1.0),
    "penalty_last_n": (_INT32, 64),
    "penalty_repeat": (_positive_real, 1.0),
    "penalty_freq": (_REAL, 0.0),
    "penalty_present": (_REAL, 0.0),
    "min_keep": (_MIN_KEEP, 0),
    "top_n_sigma": (_REAL, -1.0),
    "dry_multiplier": (_REAL, 0.0),
    "dry_base": (_REAL, 1.75),
    "dry_allowed_length": (_INT32, 2),
    "dry_penalty_last_n": (_INT32, 64),
    "dry_sequence_breakers": (_breakers, []),
    "xtc_probability": (_REAL, 0.0),
    "xtc_threshold": (_REAL, 0.1),
    "adaptive_target": (_REAL, -1.0),
    "adaptive_decay": (_REAL, 0.9),
    "mirostat": (_int_in(0, 2), 0),
    "mirostat_tau": (_REAL, 5.0),
    "mirostat_eta": (_REAL, 0.1),
    "n_vocab": (_optional_vocab_size, None),  # llama_vocab_n_tokens: mirostat 1 needs it
    "logit_bias": (_biases, []),
    "samplers": (_sampler_names, list(COMMON_SAMPLER_NAMES)),
}


@implements("SMP-051", "SMP-062")
def parse_common_params(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Validate overrides of the default parameters and return the full parameter set."""
    params = {} if params is None else params
    if not isinstance(params, Mapping):
        raise SamplingError("SMP_SPEC_FORMAT", "parameters must be a mapping", field="params")
    unknown = sorted(str(k) for k in params if k not in COMMON_PARAMS)
    if unknown:
        raise _fail(f"params.{unknown[0]}", None, f"unknown sampling parameter '{unknown[0]}'")
    out: dict[str, Any] = {}
    for key, (check, default) in COMMON_PARAMS.items():
        out[key] = check(params[key], f"params.{key}", None) if key in params else default
    return out
