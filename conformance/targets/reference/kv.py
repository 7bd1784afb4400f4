"""The kv area of the reference target: :mod:`conformance.protocol.kv` over ``reference_impl``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from reference_impl.batch.types import UBatch

if TYPE_CHECKING:
    from reference_impl.kv.cache import KVCache


class Reference:
    def new_kv_cache(self, **config: Any) -> KVCache:
        from reference_impl.kv.cache import KVCache, KVCacheConfig

        return KVCache(KVCacheConfig(**config))

    def kv_mask(
        self,
        cache: Any,
        ubatch: UBatch,
        n_kv: int,
        causal_attn: bool = True,
        use_alibi: bool = False,
    ) -> torch.Tensor:
        from reference_impl.kv import mask

        return mask.build_kq_mask(cache, ubatch, n_kv, causal_attn=causal_attn, use_alibi=use_alibi)

    def swa_is_masked(self, n_swa: int, swa_type: int, p0: int, p1: int) -> bool:
        from reference_impl.kv import swa

        return swa.is_masked_swa(n_swa, swa_type, p0, p1)
