"""Target protocol for the KV cache area (spec/kv.md).

Capabilities and what a target implements for each:

``kv.cache`` -- ``new_kv_cache(**config) -> handle``. ``config`` keys: ``kv_size``,
``n_seq_max`` (1), ``unified`` (False), ``n_swa`` (0), ``swa_type`` (0 none, 1 standard,
2 chunked, 3 symmetric), ``n_pos_per_embd`` (1; 4 for M-RoPE). The handle is one KV cache with
llama.cpp's ``llama_kv_cache`` vocabulary:

* sequence ops: ``seq_rm(seq_id, p0, p1) -> bool``, ``seq_cp(src, dst, p0, p1)``,
  ``seq_keep(seq_id)``, ``seq_add(seq_id, p0, p1, delta)``, ``seq_div(seq_id, p0, p1, d)``,
  ``seq_pos_min(seq_id)``, ``seq_pos_max(seq_id)``, ``clear(data=True)``;
* slots: ``find_slot(ubatch, cont=False) -> slot | None``, ``prepare(ubatches) -> [slot] |
  None``, ``apply_ubatch(slot, ubatch) -> undo``, ``restore(undo)``, ``get_n_kv(slot)``; a slot
  has ``strm`` (stream per group) and ``idxs`` (cells per group), ubatches are
  :class:`reference_impl.batch.types.UBatch`;
* K-shift: ``update(k_shift_fn=None) -> result`` with ``result.copied`` (stream copies done) and
  ``result.shifted``; ``k_shift()`` the pending per-cell shift ``[n_stream, kv_size]``;
* introspection: ``state()`` -> an object shaped like :class:`reference_impl.kv.KVState`
  (per stream: ``pos``, ``seqs``, ``shift``, ``ext``, ``head``, ``used``, ``has_shift``; plus
  ``pending_copies``). Engines without a search head may report any constant, but then fail the
  head invariants (KV-013, KV-017, KV-018...), which is the point.

Bad input raises an exception with a ``code`` attribute (``KV_SEQ_ID_RANGE``,
``KV_CROSS_STREAM_PARTIAL``, ``KV_DIVISOR``, ``KV_SHIFT_UNSUPPORTED``, ``KV_UBATCH_LAYOUT``,
``KV_STREAM_MISMATCH``, ``KV_SLOT_MISMATCH``, ``KV_POS_RANGE``, ``KV_UBATCH_EMPTY``,
``KV_STREAM_RANGE``, ``KV_N_KV_RANGE``, ``KV_LAYER_RANGE``) and changes nothing.

``kv.mask`` -- ``kv_mask(handle, ubatch, n_kv, causal_attn=True, use_alibi=False)``: the additive
KQ mask after ``apply_ubatch``, float32 ``[n_stream_ub, n_tokens / n_stream_ub, n_kv]`` (0 / -inf);
``swa_is_masked(n_swa, swa_type, p0, p1) -> bool``.

``kv.storage`` -- ``new_kv_cache(**config)`` also accepts ``n_layer``, ``n_head_kv``,
``head_dim``, ``dtype``; the handle then has ``k``/``v`` (per layer, torch
``[n_stream, kv_size, n_head_kv, head_dim]``, contiguous), ``write_kv(layer, slot, k, v)`` and
``kv_view(layer, stream, n_kv) -> (k, v)``.

A cache whose positions are driven only through ``decode`` (llama.cpp's public API) can claim
none of these; the operation records in ``conformance.strategies.kv`` are designed to be
replayed through ``llama_decode`` + ``llama_memory_seq_*`` by a differential test instead.
"""

from __future__ import annotations

from typing import Any

import torch

from reference_impl.batch.types import UBatch

CAPABILITIES = {
    "kv.cache": ("new_kv_cache",),
    "kv.mask": ("new_kv_cache", "kv_mask", "swa_is_masked"),
    "kv.storage": ("new_kv_cache",),
}


class Reference:
    def new_kv_cache(self, **config: Any) -> Any:
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
