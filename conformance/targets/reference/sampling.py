"""The sampling area of the reference target: :mod:`conformance.protocol.sampling` over ``reference_impl``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from reference_impl.sampling import candidates, chain, selector
from reference_impl.sampling.chain import Chain
from reference_impl.sampling.token_data import TokenDataArray, validate


class Reference:
    """The sampling surface over ``reference_impl.sampling`` (handles are ``Chain`` objects)."""

    def build_candidates(self, logits: np.ndarray) -> TokenDataArray:
        return candidates.build_candidates(logits)

    def sampler_chain_init(self, spec: Any) -> Chain:
        return chain.build_chain(spec)

    def sampler_chain_init_vocab(self, spec: Any, vocab: Any) -> Chain:
        from reference_impl.tokenizer import BaseTokenizer

        tokenizer = vocab if isinstance(vocab, BaseTokenizer) else vocab._tok()
        return chain.build_chain(spec, vocab=tokenizer)

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

    def sample_pipeline(self, logits: Sequence[float] | np.ndarray, samplers: Sequence[Any]) -> int:
        return selector.sample_pipeline(logits, samplers)

    def normalize_scores(self, cur: TokenDataArray) -> TokenDataArray:
        return candidates.normalize_scores(validate(cur, copy=True))

    # -- sampling.backend: the decode context's sample router runs the chain on each output
    # row of the sequence during decode (OUT-033); the reference has no separate graph path.

    def backend_set_sampler(self, ctx: Any, seq_id: int, spec: Any) -> None:
        ctx.set_sampler(seq_id, spec)

    def backend_sample(self, ctx: Any, seq_id: int, i: int) -> int:
        token: int = ctx.get_sampled_token_ith(i)
        return token
