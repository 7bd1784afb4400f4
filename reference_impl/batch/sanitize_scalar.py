"""The batch sanitizer as readable per-token loops: the specification of :func:`sanitize`.

Every step follows llama.cpp's ``llama_batch_compat::init`` (defaults) and
``llama_batch_allocr::init`` (checks) in order, one token at a time. It is slow; the vectorized
:func:`reference_impl.batch.sanitize.sanitize` must return the same result (or raise the same
error) for every input, which ``tests/batch`` checks with hypothesis.
"""

from __future__ import annotations

import numpy as np

from reference_impl.batch.codes import (
    SAN_EMPTY,
    SAN_N_SEQ_ID,
    SAN_POS_DECREASING,
    SAN_POS_GAP,
    SAN_POS_MEMORY,
    SAN_SEQ_DIVERGED,
    SAN_SEQ_ID_RANGE,
    SAN_TOKEN_RANGE,
    fail,
)
from reference_impl.batch.fields import normalize_fields
from reference_impl.batch.sanitize import SanitizedBatch, check_params
from reference_impl.batch.types import LLAMA_MAX_SEQ, Batch, MemoryView
from reference_impl.spec_links import implements


@implements(
    "SAN-001",
    "SAN-004",
    "SAN-005",
    "SAN-006",
    "SAN-007",
    "SAN-008",
    "SAN-009",
    "SAN-010",
    "SAN-011",
    "SAN-012",
    "SAN-013",
    "SAN-014",
    "SAN-015",
    "SAN-016",
    "SAN-017",
    "SAN-018",
    "SAN-019",
    "SAN-020",
    "SAN-021",
    "SAN-023",
    "SAN-024",
)
def sanitize_scalar(
    batch: Batch,
    *,
    n_vocab: int,
    n_seq_max: int,
    memory: MemoryView | None = None,
    output_all: bool = False,
    n_pos_per_embd: int = 1,
) -> SanitizedBatch:
    """Same contract as :func:`reference_impl.batch.sanitize.sanitize`."""
    # 0. decode refuses an empty batch before the allocator runs
    if batch.n_tokens == 0:
        raise fail(SAN_EMPTY, "the batch has no tokens (n_tokens == 0)", field="n_tokens")
    # 1. parameters (n_seq_max <= LLAMA_MAX_SEQ), 2. field shapes
    check_params(n_vocab, n_seq_max, n_pos_per_embd)
    f = normalize_fields(batch, n_pos_per_embd)
    n = f.n

    # 3. token ids (embedding batches are not checked)
    if f.token is not None:
        for i in range(n):
            t = int(f.token[i])
            if t < 0 or t >= n_vocab:
                raise fail(
                    SAN_TOKEN_RANGE,
                    f"invalid token[{i}] = {t}, expected [0, {n_vocab})",
                    field="token",
                    index=i,
                )

    # 4. sequence ids: defaults, count, range, duplicates collapse (first kept)
    seqs: list[list[int]] = []
    for i in range(n):
        if f.seq_id is None:
            if f.n_seq_id is not None and int(f.n_seq_id[i]) != 1:
                raise fail(
                    SAN_N_SEQ_ID,
                    f"n_seq_id[{i}] = {int(f.n_seq_id[i])} but seq_id is absent (only 1 can be "
                    "filled with the default sequence 0)",
                    field="n_seq_id",
                    index=i,
                )
            seqs.append([0])
            continue
        width = f.seq_id.shape[1]
        k = 1 if f.n_seq_id is None else int(f.n_seq_id[i])
        if k < 1 or k > width:
            raise fail(
                SAN_N_SEQ_ID,
                f"n_seq_id[{i}] = {k} is outside [1, {width}] (the seq_id row width)",
                field="n_seq_id",
                index=i,
            )
        ids: list[int] = []
        for j in range(k):
            s = int(f.seq_id[i, j])
            if s < 0 or s >= n_seq_max:
                raise fail(
                    SAN_SEQ_ID_RANGE,
                    f"invalid seq_id[{i}][{j}] = {s}, expected [0, {n_seq_max})",
                    field="seq_id",
                    index=i,
                    seq_id=s,
                )
            if s not in ids:
                ids.append(s)
        seqs.append(ids)

    # 5. positions: each token continues its first sequence (only that counter advances)
    generated: set[str] = set()
    if f.seq_id is None:
        generated.add("seq_id")
    if f.pos is not None:
        pos = f.pos
    else:
        generated.add("pos")
        next_pos: dict[int, int] = {}
        pos0_list: list[int] = []
        for i in range(n):
            s0 = seqs[i][0]
            if s0 not in next_pos:
                next_pos[s0] = (memory.seq_pos_max(s0) if memory is not None else -1) + 1
            pos0_list.append(next_pos[s0])
            next_pos[s0] += 1
        if f.has_token or n_pos_per_embd == 1:
            pos = np.asarray(pos0_list, dtype=np.int32)
        else:
            pos = np.zeros((n_pos_per_embd, n), dtype=np.int32)
            pos[0] = pos0_list
    pos0 = [int(p) for p in (pos if pos.ndim == 1 else pos[0])]

    # 6. output flags
    overridden = False
    if f.logits is None:
        generated.add("logits")
        out = [1 if (output_all or i == n - 1) else 0 for i in range(n)]
    else:
        out = [int(v) for v in f.logits]
        if output_all and 0 in out:
            out = [1] * n
            overridden = True

    # 7. per-sequence positions and coupling (seq_cpl[s1][s0] for s0 first, s1 listed later)
    seq_positions: dict[int, list[int]] = {}
    coupled: dict[tuple[int, int], int] = {}
    for i in range(n):
        s0 = seqs[i][0]
        for j, s1 in enumerate(seqs[i]):
            seq_positions.setdefault(s1, []).append(pos0[i])
            if j > 0 and (s1, s0) not in coupled:
                coupled[(s1, s0)] = i

    # 8. per sequence, ascending: continuation of the memory, then continuity in the batch
    for s in sorted(seq_positions):
        present = set(seq_positions[s])
        lo, hi = min(present), max(present)
        x = memory.seq_pos_max(s) if memory is not None else -1
        if n_pos_per_embd > 1:
            # M-RoPE: forward jumps allowed; embeddings may repeat the last position
            bad = x >= 0 and (x >= lo if f.has_token else x > lo)
            rule = "X < Y (M-RoPE)" if f.has_token else "X <= Y (M-RoPE embeddings)"
        else:
            bad = x >= 0 and lo != x + 1
            rule = "Y = X + 1"
        if bad:
            i = next(t for t in range(n) if s in seqs[t] and pos0[t] == lo)
            raise fail(
                SAN_POS_MEMORY,
                f"sequence {s}: the memory ends at position X = {x} and the batch starts at "
                f"Y = {lo}; required: {rule}",
                field="pos",
                index=i,
                seq_id=s,
            )
        if n_pos_per_embd == 1 and hi - lo + 1 > len(present):
            c = lo
            while c + 1 in present:
                c += 1
            i = next(t for t in range(n) if s in seqs[t] and pos0[t] > c)
            raise fail(
                SAN_POS_GAP,
                f"sequence {s}: positions are not continuous (position {c + 1} is missing)",
                field="pos",
                index=i,
                seq_id=s,
            )

    # 9. coupled sequences must not have diverged in the memory
    if memory is not None:
        for s1, s0 in sorted(coupled):
            if memory.seq_pos_min(s1) != memory.seq_pos_min(s0) or memory.seq_pos_max(
                s1
            ) != memory.seq_pos_max(s0):
                raise fail(
                    SAN_SEQ_DIVERGED,
                    f"sequence {s1} is coupled to {s0} in the input batch, but their memory "
                    f"ranges differ ([{memory.seq_pos_min(s1)}, {memory.seq_pos_max(s1)}] vs "
                    f"[{memory.seq_pos_min(s0)}, {memory.seq_pos_max(s0)}])",
                    field="seq_id",
                    index=coupled[(s1, s0)],
                    seq_id=s1,
                )

    # 10. positions never decrease inside a sequence (llama.cpp's "incompatible sequence sets"
    #     check shares this loop but can never fire: it is not reproduced, see the spec)
    last: dict[int, int] = {}
    for i in range(n):
        for s in seqs[i]:
            if s in last and pos0[i] < last[s]:
                raise fail(
                    SAN_POS_DECREASING,
                    f"sequence {s}: position {pos0[i]} of token {i} is below the previous "
                    f"position {last[s]} of the sequence",
                    field="pos",
                    index=i,
                    seq_id=s,
                )
            last[s] = pos0[i]

    # stats
    width = max(len(ids) for ids in seqs)
    seq_id = np.full((n, width), -1, dtype=np.int32)
    for i, ids in enumerate(seqs):
        seq_id[i, : len(ids)] = ids
    n_seq_id = np.asarray([len(ids) for ids in seqs], dtype=np.int32)
    seq_pos_min_arr = np.full(LLAMA_MAX_SEQ, -1, dtype=np.int32)
    seq_pos_max_arr = np.full(LLAMA_MAX_SEQ, -1, dtype=np.int32)
    for s, ps in seq_positions.items():
        seq_pos_min_arr[s] = min(ps)
        seq_pos_max_arr[s] = max(ps)
    unq = sorted(seq_positions)
    seq_idx = np.full(LLAMA_MAX_SEQ, -1, dtype=np.int32)
    for k, s in enumerate(unq):
        seq_idx[s] = k
    sets: list[tuple[int, ...]] = []
    set_id = np.zeros(n, dtype=np.int32)
    for i, ids in enumerate(seqs):
        key = tuple(sorted(ids))
        if key not in sets:
            sets.append(key)
        set_id[i] = sets.index(key)
    logits = np.asarray(out, dtype=np.int8)
    return SanitizedBatch(
        batch=Batch(
            token=f.token, embd=f.embd, pos=pos, n_seq_id=n_seq_id, seq_id=seq_id, logits=logits
        ),
        n_tokens=n,
        n_outputs=sum(out),
        n_seq_max=n_seq_max,
        n_pos=n_pos_per_embd,
        output_all=output_all,
        generated=frozenset(generated),
        outputs_overridden=overridden,
        seq_id_unq=np.asarray(unq, dtype=np.int32),
        seq_idx=seq_idx,
        seq_pos_min_arr=seq_pos_min_arr,
        seq_pos_max_arr=seq_pos_max_arr,
        has_cpl=bool(coupled),
        coupled=tuple(sorted(coupled)),
        seq_sets=tuple(sets),
        set_id=set_id,
    )
