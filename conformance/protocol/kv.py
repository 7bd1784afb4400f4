"""Protocol of the KV cache area (spec/kv.md), for engines that expose their cache
(``llama_kv_cache``'s vocabulary). A cache driven only through ``decode`` (llama.cpp's public API)
claims none of these: its rules show through the ``decoder.*`` capabilities instead.

``new_kv_cache(**config)``: ``kv_size``, ``n_seq_max`` (1), ``unified`` (False), ``n_swa`` (0),
``swa_type`` (0 none, 1 standard, 2 chunked, 3 symmetric), ``n_pos_per_embd`` (1; 4 for M-RoPE);
with ``kv.storage`` also ``n_layer``, ``n_head_kv``, ``head_dim``, ``dtype``. Ubatches are
:class:`reference_impl.batch.types.UBatch`; a slot has ``strm`` (stream per group) and ``idxs``
(cells per group). Bad input raises an exception with a ``KV_*`` code (spec/kv.md) and changes
nothing. Engines without a search head may report any constant in ``state()``, but then fail the
head invariants (KV-013, KV-017, KV-018...), which is the point.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from conformance.protocol import capability, role
from reference_impl.batch.types import UBatch


class SequenceOps(Protocol):
    """``llama_memory_i``'s sequence operations, shared by a KV cache and every memory kind."""

    def seq_rm(self, seq_id: int, p0: int = -1, p1: int = -1) -> bool: ...
    def seq_cp(self, seq_id_src: int, seq_id_dst: int, p0: int = -1, p1: int = -1) -> None: ...
    def seq_keep(self, seq_id: int) -> None: ...
    def seq_add(self, seq_id: int, p0: int, p1: int, delta: int) -> None: ...
    def seq_div(self, seq_id: int, p0: int, p1: int, d: int) -> None: ...
    def seq_pos_min(self, seq_id: int) -> int: ...
    def seq_pos_max(self, seq_id: int) -> int: ...
    def clear(self, data: bool = True) -> None: ...


@role("kv_cache")
class KVCacheHandle(SequenceOps, Protocol):
    # slots
    def find_slot(self, ubatch: UBatch, cont: bool = False) -> Any:
        """A slot for the ubatch, or None."""
        ...

    def prepare(self, ubatches: Any) -> Any:
        """One slot per ubatch (placed as if applied in turn, then undone), or None."""
        ...

    def apply_ubatch(self, sinfo: Any, ubatch: UBatch) -> Any:
        """Write the ubatch's cells; returns an undo record for ``restore``."""
        ...

    def restore(self, undo: Any) -> None: ...
    def get_n_kv(self, sinfo: Any) -> int: ...

    # K-shift and introspection
    def update(self, k_shift_fn: Any = None) -> Any:
        """Apply pending stream copies and shifts; the result has ``copied`` and ``shifted``."""
        ...

    def k_shift(self) -> torch.Tensor:
        """The pending per-cell shift ``[n_stream, kv_size]``."""
        ...

    def state(self) -> Any:
        """A snapshot shaped like :class:`reference_impl.kv.KVState` (per stream: ``pos``,
        ``seqs``, ``shift``, ``ext``, ``head``, ``used``, ``has_shift``; ``pending_copies``),
        comparable with ``==``."""
        ...


class Cache(Protocol):
    def new_kv_cache(self, **config: Any) -> KVCacheHandle: ...


@role("kv_cache")
class KVStorageHandle(Protocol):
    """Per-layer K/V tensors ``[n_stream, kv_size, n_head_kv, head_dim]`` (contiguous)."""

    @property
    def k(self) -> list[torch.Tensor]: ...
    @property
    def v(self) -> list[torch.Tensor]: ...

    def write_kv(self, layer: int, sinfo: Any, k: torch.Tensor, v: torch.Tensor) -> None: ...
    def kv_view(self, layer: int, stream: int, n_kv: int) -> tuple[torch.Tensor, torch.Tensor]: ...


class Storage(Protocol):
    def new_kv_cache(self, **config: Any) -> KVStorageHandle: ...


class Mask(Protocol):
    def kv_mask(
        self,
        cache: Any,
        ubatch: UBatch,
        n_kv: int,
        causal_attn: bool = True,
        use_alibi: bool = False,
    ) -> torch.Tensor:
        """The additive KQ mask after ``apply_ubatch``: float32 ``[n_stream_ub,
        n_tokens / n_stream_ub, n_kv]`` of 0 / -inf."""
        ...

    def swa_is_masked(self, n_swa: int, swa_type: int, p0: int, p1: int) -> bool: ...


CAPABILITIES = (
    capability("kv.cache", Cache, "cells, streams, slots, sequence ops, K-shift bookkeeping"),
    capability("kv.storage", Storage, "per-layer K/V tensors of the cache"),
    capability("kv.mask", Mask, "the KQ mask and the sliding-window rule"),
)
