"""Decode-phase mutants: one deliberate defect each (see tests/meta)."""

from __future__ import annotations

from typing import Any

import numpy as np

from conformance.mutants import Mutant


def _kv_written_twice(target: Any) -> Any:
    """Every ubatch is placed in the memory twice (a second copy of each entry)."""
    from reference_impl.memory.kv import KVBatchContext

    original = KVBatchContext.apply

    def apply(self: KVBatchContext) -> bool:
        ok = original(self)
        ub = self.get_ubatch()
        extra = self.cache.find_slot(ub)
        if extra is not None:
            self.cache.apply_ubatch(extra, ub)
        return ok

    KVBatchContext.apply = apply  # type: ignore[method-assign]
    return target


def _evicts_unlisted_sequences(target: Any) -> Any:
    """Placing a step-like ubatch (one token per sequence) drops the newest entry of every
    other sequence in the cache."""
    from reference_impl.memory.kv import KVBatchContext

    original = KVBatchContext.apply

    def apply(self: KVBatchContext) -> bool:
        ok = original(self)
        ub = self.get_ubatch()
        listed = {int(s) for s in ub.seq_id_unq}
        if ub.n_tokens != len(listed):
            return ok
        cache = self.cache
        for s in range(cache.n_seq_max):
            last = cache.seq_pos_max(s)
            if s not in listed and last >= 0:
                cache.seq_rm(s, last, -1)
        return ok

    KVBatchContext.apply = apply  # type: ignore[method-assign]
    return target


def _batched_attends_everything(target: Any) -> Any:
    """Attention ignores sequence membership: a batched sequence sees its neighbours."""
    from reference_impl.decoder import ubatch_executor

    original = ubatch_executor.stream_mask

    def stream_mask(cache: Any, ub: Any, n_kv: int, causal: bool) -> Any:
        mask, groups = original(cache, ub, n_kv, causal)
        cells = cache.cells[0]
        occupied = np.flatnonzero(cells.pos[:n_kv] >= 0)
        if groups == 1:
            mask = mask.clone()
            pos = np.asarray(ub.pos[: ub.n_tokens])
            for i in range(ub.n_tokens):
                ok = [c for c in occupied if cells.pos[c] <= pos[i]]
                mask[i, [int(c) for c in ok]] = 0.0
        return mask, groups

    ubatch_executor.stream_mask = stream_mask
    return target


MUTANTS = [
    Mutant(
        "phase-step-evicts-other-sequences",
        "decode_phase",
        "a decode step drops the newest entry of every sequence it does not list",
        ("PHASE-012", "PHASE-014"),
        _evicts_unlisted_sequences,
        black_box=True,
    ),
    Mutant(
        "dec-kv-written-twice",
        "decode_phase",
        "each ubatch's entries are appended to the KV cache twice",
        ("PHASE-011", "PHASE-020"),
        _kv_written_twice,
    ),
    Mutant(
        "phase-cross-sequence-attention",
        "decode_phase",
        "in a single-stream ubatch, tokens attend every earlier cell, whatever its sequence",
        ("PHASE-015", "PHASE-017", "PHASE-010"),
        _batched_attends_everything,
        black_box=True,
    ),
]
