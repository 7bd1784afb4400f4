"""The KQ mask of a ubatch (llama.cpp ``llama_kv_cache::set_input_kq_mask``).

The mask is additive: ``0`` where query token ``i`` may attend to KV column ``j``, ``-inf``
elsewhere (``-|p0 - p1|`` instead of 0 with ALiBi). It is built *after* ``apply_ubatch``, so the
ubatch's own cells are visible. Shape ``[n_stream_ub, n_tokens / n_stream_ub, n_kv]``:
``n_stream_ub = 1`` for a single-stream cache, else one block per unique sequence of the ubatch
(the ubatch is sequence-major there); row ``ii`` of block ``s`` is ubatch token
``s * n_tokens / n_stream_ub + ii`` and column ``j`` is cell ``j`` of that token's stream.

Column ``j`` is open for token ``i`` (first sequence ``q``, position ``p1``) iff cell ``j`` holds
``q`` (so is not empty), and, for causal attention, its position ``p0 <= p1`` and, for 2-D
(M-RoPE) positions with ``p0 == p1``, the cell's ``(y, x)`` is not after the token's, and the
cache's sliding window does not mask ``p0`` for ``p1``. Only the *first* sequence id of a token
is used, as in llama.cpp.
"""

from __future__ import annotations

import numpy as np
import torch

from reference_impl.batch.types import UBatch
from reference_impl.errors import KVCacheError
from reference_impl.kv import swa
from reference_impl.kv.cache import KVCache
from reference_impl.spec_links import implements


@implements("KV-024")
def n_stream_of_mask(cache: KVCache, ubatch: UBatch) -> int:
    return 1 if cache.n_stream == 1 else ubatch.n_seqs_unq


@implements(
    "DEC-056", "KV-023", "KV-024", "PHASE-008", "PHASE-009", "PHASE-010", "PHASE-015", "PHASE-017"
)
def build_kq_mask(
    cache: KVCache,
    ubatch: UBatch,
    n_kv: int,
    *,
    causal_attn: bool = True,
    use_alibi: bool = False,
) -> torch.Tensor:
    """Additive float32 mask ``[n_stream_ub, n_tps, n_kv]`` (values exactly 0 / -inf)."""
    n = ubatch.n_tokens
    if not 0 < n_kv <= cache.kv_size:
        raise KVCacheError(
            "KV_N_KV_RANGE", f"n_kv {n_kv} not in (0, {cache.kv_size}]", field="n_kv"
        )
    n_ms = n_stream_of_mask(cache, ubatch)
    if n_ms <= 0 or n % n_ms:
        raise KVCacheError(
            "KV_UBATCH_LAYOUT", f"{n} tokens cannot form {n_ms} mask streams", field="n_seqs_unq"
        )
    n_tps = n // n_ms
    out = np.full((n, n_kv), -np.inf, dtype=np.float32)
    pos = np.asarray(ubatch.pos, dtype=np.int64)
    p1_all = pos[:n]
    is_2d = ubatch.is_pos_2d()
    first_seq = np.asarray(ubatch.seq_id[:n, 0], dtype=np.int64)
    for q in np.unique(first_seq).tolist():
        cache._check_seq(q)
        cells = cache.cells[cache.seq_to_stream[q]]
        rows = np.flatnonzero(first_seq == q)
        p1 = p1_all[rows][:, None]
        p0 = cells.pos[:n_kv].astype(np.int64)[None, :]
        member = np.zeros(n_kv, dtype=bool)
        idx = [c for c in cells.seq_cells(q) if c < n_kv]
        member[idx] = True
        ok = np.broadcast_to(member[None, :], (rows.size, n_kv)).copy()
        if causal_attn:
            ok &= ~(p0 > p1)
            if is_2d:
                y1 = pos[n + rows][:, None]
                x1 = pos[2 * n + rows][:, None]
                ey = cells.ext_y[:n_kv].astype(np.int64)[None, :]
                ex = cells.ext_x[:n_kv].astype(np.int64)[None, :]
                later = (ey > y1) | ((ey == y1) & (ex > x1))
                ok &= ~((p0 == p1) & later)
        if cache.swa_type != swa.SWAType.NONE:
            ok &= ~swa.is_masked_swa_array(cache.n_swa, cache.swa_type, p0, p1)
        vals = (-np.abs(p0 - p1)).astype(np.float32) if use_alibi else np.float32(0.0)
        out[rows] = np.where(ok, vals, np.float32(-np.inf))
    return torch.from_numpy(out.reshape(n_ms, n_tps, n_kv))
