"""The sampler chain and llama.cpp common's default chain.

``Chain`` follows llama_sampler_chain (llama.cpp src/llama-sampler.cpp, 82bb485): ``apply``
runs the members in insertion order, ``accept``/``reset``/``clone`` fan out to every member,
and ``sample`` is llama_sampler_sample for one logits row. ``common_chain_spec`` is
common_sampler_init (common/sampling.cpp) for the samplers this suite implements.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from reference_impl.errors import SamplingError
from reference_impl.sampling import candidates, chainspec, samplers
from reference_impl.sampling.chainspec import SamplerSpec
from reference_impl.sampling.samplers import Empty, Sampler
from reference_impl.sampling.token_data import TokenDataArray
from reference_impl.spec_links import implements


class Chain:
    name = "chain"

    def __init__(self, members: Iterable[Sampler] = ()) -> None:
        self.samplers: list[Sampler] = list(members)

    def add(self, sampler: Sampler) -> None:
        self.samplers.append(sampler)

    @implements("SMP-010")
    def apply(self, cur: TokenDataArray) -> TokenDataArray:
        for sampler in self.samplers:
            cur = sampler.apply(cur)
        return cur

    @implements("SMP-011")
    def accept(self, token: int) -> None:
        for sampler in self.samplers:
            sampler.accept(token)

    @implements("SMP-011")
    def reset(self) -> None:
        for sampler in self.samplers:
            sampler.reset()

    @implements("SMP-012")
    def clone(self) -> Chain:
        return Chain(s.clone() for s in self.samplers)

    @implements("SMP-013", "SMP-014")
    def sample(self, logits: np.ndarray) -> int:
        """Full-vocabulary candidates from ``logits``, apply, accept the chosen token, return it.

        A chain that leaves no valid ``selected`` index (no greedy/dist, or a truncation after
        the selection) raises ``SMP_NO_SELECTION`` -- llama.cpp aborts there -- and the chain
        keeps the state it had before the call (the random engine is not advanced).
        """
        cur = candidates.build_candidates(logits)
        saved = [s.clone() for s in self.samplers]
        out = self.apply(cur)
        if not 0 <= out.selected < out.size:
            self.samplers = saved
            raise SamplingError(
                "SMP_NO_SELECTION",
                f"the chain selected index {out.selected} of {out.size} candidates",
                field="selected",
                index=out.selected,
            )
        token = int(out.ids[out.selected])
        self.accept(token)
        return token

    def __repr__(self) -> str:
        return f"<chain {[s.name for s in self.samplers]}>"


def build_sampler(spec: SamplerSpec) -> Sampler:
    p = spec.params
    match spec.name:
        case "greedy":
            return samplers.init_greedy()
        case "dist":
            return samplers.init_dist(p["seed"])
        case "top_k":
            return samplers.init_top_k(p["k"])
        case "top_p":
            return samplers.init_top_p(p["p"], p["min_keep"])
        case "min_p":
            return samplers.init_min_p(p["p"], p["min_keep"])
        case "typical":
            return samplers.init_typical(p["p"], p["min_keep"])
        case "temp":
            return samplers.init_temp(p["t"])
        case "temp_ext":
            return samplers.init_temp_ext(p["t"], p["delta"], p["exponent"])
        case "penalties":
            return samplers.init_penalties(p["last_n"], p["repeat"], p["freq"], p["present"])
        case "top_n_sigma":
            return samplers.init_top_n_sigma(p["n"])
        case "logit_bias":
            return samplers.init_logit_bias(p["biases"])
        case "dry" | "xtc":  # the parser only lets the disabled form through
            return Empty(f"?{spec.name}")
    raise SamplingError("SMP_UNKNOWN_SAMPLER", f"unknown sampler {spec.name!r}", field="name")


def build_chain(spec: Any) -> Chain:
    """Parse a chain description (see :mod:`chainspec`) and construct the chain."""
    return Chain(build_sampler(s) for s in chainspec.parse_chain(spec))


# common_params_sampling.samplers default order (common/common.h) and, for each entry, the
# chain entry common_sampler_init adds for it.
COMMON_ORDER: tuple[str, ...] = chainspec.COMMON_SAMPLER_NAMES


def _common_entry(kind: str, prm: Mapping[str, Any]) -> SamplerSpec:
    keep = prm["min_keep"]
    match kind:
        case "penalties":
            return SamplerSpec(
                "penalties",
                {
                    "last_n": prm["penalty_last_n"],
                    "repeat": prm["penalty_repeat"],
                    "freq": prm["penalty_freq"],
                    "present": prm["penalty_present"],
                },
            )
        case "dry":
            return SamplerSpec("dry", {"multiplier": prm["dry_multiplier"]})
        case "top_n_sigma":
            return SamplerSpec("top_n_sigma", {"n": prm["top_n_sigma"]})
        case "top_k":
            return SamplerSpec("top_k", {"k": prm["top_k"]})
        case "typ_p":
            return SamplerSpec("typical", {"p": prm["typ_p"], "min_keep": keep})
        case "top_p":
            return SamplerSpec("top_p", {"p": prm["top_p"], "min_keep": keep})
        case "min_p":
            return SamplerSpec("min_p", {"p": prm["min_p"], "min_keep": keep})
        case "xtc":
            return SamplerSpec("xtc", {"p": prm["xtc_probability"], "t": prm["xtc_threshold"]})
        case "temperature":
            return SamplerSpec(
                "temp_ext",
                {
                    "t": prm["temp"],
                    "delta": prm["dynatemp_range"],
                    "exponent": prm["dynatemp_exponent"],
                },
            )
    raise SamplingError("SMP_PARAM", f"unknown sampler kind {kind!r}", field="params.samplers")


@implements("SMP-050", "SMP-062")
def common_chain_spec(params: Mapping[str, Any] | None = None) -> list[SamplerSpec]:
    """The chain common_sampler_init builds (mirostat 0): [logit_bias when any bias] ->
    the ``samplers`` list (default: COMMON_ORDER) -> dist(seed)."""
    prm = chainspec.parse_common_params(params)
    if np.float32(prm["dry_multiplier"]) != 0.0:
        raise SamplingError(
            "SMP_UNSUPPORTED", "DRY is not implemented by this suite", field="params.dry_multiplier"
        )
    if np.float32(prm["xtc_probability"]) > 0.0 and np.float32(prm["xtc_threshold"]) <= 0.5:
        raise SamplingError(
            "SMP_UNSUPPORTED",
            "XTC is not implemented by this suite",
            field="params.xtc_probability",
        )
    order = prm["samplers"] if params and "samplers" in params else list(COMMON_ORDER)
    out: list[SamplerSpec] = []
    if prm["logit_bias"]:
        out.append(SamplerSpec("logit_bias", {"biases": prm["logit_bias"]}))
    out.extend(_common_entry(kind, prm) for kind in order)
    out.append(SamplerSpec("dist", {"seed": prm["seed"]}))
    return out


@implements("SMP-050")
def build_common_chain(params: Mapping[str, Any] | None = None) -> Chain:
    return Chain(build_sampler(s) for s in common_chain_spec(params))
