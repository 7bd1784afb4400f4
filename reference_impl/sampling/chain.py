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
from reference_impl.sampling import candidates, chainspec, dry, samplers
from reference_impl.sampling.chainspec import SamplerSpec
from reference_impl.sampling.samplers import Sampler
from reference_impl.sampling.token_data import TokenDataArray
from reference_impl.spec_links import implements


class Chain:
    name = "chain"

    def __init__(self, members: Iterable[Sampler] = ()) -> None:
        self.samplers: list[Sampler] = list(members)

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


def build_sampler(spec: SamplerSpec, vocab: Any = None) -> Sampler:
    """One chain member; ``vocab`` (a reference tokenizer) turns DRY breaker strings into
    token sequences."""
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
        case "dry":
            breakers = p["breakers"]
            # llama.cpp reads no breaker when disabled: init_dry then returns the empty sampler
            enabled = samplers.dry_enabled(p["multiplier"], p["base"], p["penalty_last_n"])
            if enabled and p["breaker_strings"]:
                breakers = dry.string_breakers(vocab, p["breaker_strings"])
            return samplers.init_dry(
                p["multiplier"], p["base"], p["allowed_length"], p["penalty_last_n"], breakers
            )
        case "xtc":
            return samplers.init_xtc(p["p"], p["t"], p["min_keep"], p["seed"])
        case "mirostat":
            return samplers.init_mirostat(p["n_vocab"], p["seed"], p["tau"], p["eta"], p["m"])
        case "mirostat_v2":
            return samplers.init_mirostat_v2(p["seed"], p["tau"], p["eta"])
        case "adaptive_p":
            return samplers.init_adaptive_p(p["target"], p["decay"], p["seed"])
    raise SamplingError("SMP_UNKNOWN_SAMPLER", f"unknown sampler {spec.name!r}", field="name")


@implements("SMP-087")
def build_chain(spec: Any, vocab: Any = None) -> Chain:
    """Parse a chain description (see :mod:`chainspec`) and construct the chain; DRY breaker
    strings need ``vocab`` (``SMP_PARAM`` on the entry's ``breaker_strings`` without one)."""
    specs = chainspec.parse_chain(spec)
    for i, s in enumerate(specs):
        if vocab is None and s.name == "dry" and s.params["breaker_strings"]:
            raise SamplingError(
                "SMP_PARAM",
                "DRY breaker strings need a vocabulary",
                field=f"spec[{i}].breaker_strings",
                index=i,
            )
    return Chain(build_sampler(s, vocab) for s in specs)


# common_params_sampling.samplers default order (common/common.h) and, for each entry, the
# chain entry common_sampler_init adds for it.
COMMON_ORDER: tuple[str, ...] = chainspec.COMMON_SAMPLER_NAMES


@implements("SMP-080")
def dry_params(prm: Mapping[str, Any]) -> dict[str, Any]:
    """The default chain's DRY entry (llama_sampler_init_dry with the ``dry_*`` parameters)."""
    return {
        "multiplier": prm["dry_multiplier"],
        "base": prm["dry_base"],
        "allowed_length": prm["dry_allowed_length"],
        "penalty_last_n": prm["dry_penalty_last_n"],
        "breakers": prm["dry_sequence_breakers"],
        "breaker_strings": [],
    }


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
            return SamplerSpec("dry", dry_params(prm))
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
            return SamplerSpec(
                "xtc",
                {
                    "p": prm["xtc_probability"],
                    "t": prm["xtc_threshold"],
                    "min_keep": keep,
                    "seed": prm["seed"],
                },
            )
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


@implements("SMP-050", "SMP-062", "SMP-088")
def common_chain_spec(params: Mapping[str, Any] | None = None) -> list[SamplerSpec]:
    """The chain common_sampler_init builds: [logit_bias when any bias] ->

    * mirostat 0: the ``samplers`` list (default: COMMON_ORDER) -> dist(seed), or
      adaptive-p(target, decay, seed) instead of dist when the list names ``adaptive_p``;
    * mirostat 1: temp(temp) -> mirostat(n_vocab, seed, tau, eta, m = 100);
    * mirostat 2: temp(temp) -> mirostat_v2(seed, tau, eta).
    """
    prm = chainspec.parse_common_params(params)
    out: list[SamplerSpec] = []
    if prm["logit_bias"]:
        out.append(SamplerSpec("logit_bias", {"biases": prm["logit_bias"]}))
    seed, tau, eta = prm["seed"], prm["mirostat_tau"], prm["mirostat_eta"]
    if prm["mirostat"] == 1:
        if prm["n_vocab"] is None:
            raise SamplingError(
                "SMP_PARAM", "mirostat 1 needs the vocabulary size", field="params.n_vocab"
            )
        return [
            *out,
            SamplerSpec("temp", {"t": prm["temp"]}),
            SamplerSpec(
                "mirostat",
                {"n_vocab": prm["n_vocab"], "seed": seed, "tau": tau, "eta": eta, "m": 100},
            ),
        ]
    if prm["mirostat"] == 2:
        return [
            *out,
            SamplerSpec("temp", {"t": prm["temp"]}),
            SamplerSpec("mirostat_v2", {"seed": seed, "tau": tau, "eta": eta}),
        ]
    order = prm["samplers"] if params and "samplers" in params else list(COMMON_ORDER)
    out.extend(_common_entry(kind, prm) for kind in order if kind != "adaptive_p")
    if "adaptive_p" in order:
        target, decay = prm["adaptive_target"], prm["adaptive_decay"]
        out.append(SamplerSpec("adaptive_p", {"target": target, "decay": decay, "seed": seed}))
    else:
        out.append(SamplerSpec("dist", {"seed": seed}))
    return out


@implements("SMP-050")
def build_common_chain(params: Mapping[str, Any] | None = None) -> Chain:
    return Chain(build_sampler(s) for s in common_chain_spec(params))
