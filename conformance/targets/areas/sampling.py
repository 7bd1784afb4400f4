"""Target protocol for the sampling area: samplers and chains, candidates, token selector.

Capabilities
------------
``sampling.samplers`` -- llama.cpp's sampler chain (``llama_sampler_chain_*``):

* ``sampler_chain_init(spec) -> handle``: a chain from a JSON-able description, a list of
  ``[name, {params}]`` entries applied in order (format and parameter table:
  :mod:`reference_impl.sampling.chainspec`; names follow ``llama_sampler_init_*``).
* ``sampler_chain_init_default(params=None) -> handle``: the chain llama.cpp's common library
  builds (``common_sampler_init``) from ``common_params_sampling`` overrides such as
  ``{"seed": 42, "temp": 0.7, "top_k": 20}``.
* ``sampler_apply(handle, cur: TokenDataArray) -> TokenDataArray``: ``llama_sampler_apply`` on
  a copy of ``cur`` (never modified), returning the resulting array (ids, logits, p,
  ``selected``, ``sorted``).
* ``sampler_accept(handle, token)``, ``sampler_reset(handle)``, ``sampler_clone(handle) ->
  handle``, ``sampler_free(handle)``.
* ``sampler_sample(handle, logits) -> int``: ``llama_sampler_sample`` for one logits row
  (full-vocabulary candidates, apply, accept the selected token, return its id).

``sampling.candidates`` -- ``build_candidates(logits) -> TokenDataArray`` (the candidate
builder of ``llama_sampler_sample``).

``sampling.selector`` -- EMEL's token selector and candidate normalisation:
``select_token(ids, scores, policy, random_01=None) -> int`` with policy ``"argmax"`` or
``"categorical"``, and ``normalize_scores(cur) -> TokenDataArray``.

``TokenDataArray`` is :class:`reference_impl.sampling.TokenDataArray` (a plain record of
numpy columns); invalid input raises :class:`reference_impl.errors.SamplingError` with the
codes listed in ``spec/sampling.md``. The llama.cpp implementation of the first two
capabilities is :mod:`conformance.targets.llamacpp_sampling`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from reference_impl.sampling import candidates, chain, selector
from reference_impl.sampling.chain import Chain
from reference_impl.sampling.token_data import TokenDataArray, validate

CAPABILITIES: dict[str, tuple[str, ...]] = {
    "sampling.samplers": (
        "sampler_chain_init",
        "sampler_chain_init_default",
        "sampler_apply",
        "sampler_accept",
        "sampler_reset",
        "sampler_clone",
        "sampler_sample",
        "sampler_free",
    ),
    "sampling.candidates": ("build_candidates",),
    "sampling.selector": ("select_token", "normalize_scores"),
}


class Reference:
    """The sampling surface over ``reference_impl.sampling`` (handles are ``Chain`` objects)."""

    def build_candidates(self, logits: np.ndarray) -> TokenDataArray:
        return candidates.build_candidates(logits)

    def sampler_chain_init(self, spec: Any) -> Chain:
        return chain.build_chain(spec)

    def sampler_chain_init_default(self, params: Mapping[str, Any] | None = None) -> Chain:
        return chain.build_common_chain(params)

    def sampler_apply(self, handle: Chain, cur: TokenDataArray) -> TokenDataArray:
        return handle.apply(validate(cur, copy=True))

    def sampler_accept(self, handle: Chain, token: int) -> None:
        handle.accept(int(token))

    def sampler_reset(self, handle: Chain) -> None:
        handle.reset()

    def sampler_clone(self, handle: Chain) -> Chain:
        return handle.clone()

    def sampler_sample(self, handle: Chain, logits: np.ndarray) -> int:
        return handle.sample(logits)

    def sampler_free(self, handle: Chain) -> None:
        return None

    def select_token(
        self,
        ids: Sequence[int] | np.ndarray,
        scores: Sequence[float] | np.ndarray,
        policy: str,
        random_01: float | None = None,
    ) -> int:
        return selector.select_token(ids, scores, policy, random_01)

    def normalize_scores(self, cur: TokenDataArray) -> TokenDataArray:
        return candidates.normalize_scores(validate(cur, copy=True))
