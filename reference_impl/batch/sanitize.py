"""The batch sanitizer: llama.cpp's ``llama_batch_allocr::init`` (+ ``llama_batch_compat::init``).

``sanitize`` validates a :class:`Batch`, fills in what is missing (sequence ids, positions,
output flags) and derives the statistics the splitter and the memory need. It runs the checks in
llama.cpp's order and raises the first failure as a :class:`BatchError` with a stable code (see
``spec/batch.md``); it never modifies the input batch or the memory.

This module is the vectorized implementation (numpy over all tokens at once); the readable
per-token version, which is the specification, lives in :mod:`reference_impl.batch.sanitize_scalar`
and the two are tested to agree on every input. Each rule is a module-level function called by
name at run time, so a mutant can replace exactly one rule.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reference_impl.batch import fields as _fields
from reference_impl.batch.codes import (
    SAN_EMPTY,
    SAN_N_SEQ_ID,
    SAN_N_SEQ_MAX,
    SAN_PARAM,
    SAN_POS_DECREASING,
    SAN_POS_GAP,
    SAN_POS_MEMORY,
    SAN_SEQ_DIVERGED,
    SAN_SEQ_ID_RANGE,
    SAN_TOKEN_RANGE,
    fail,
)
from reference_impl.batch.types import LLAMA_MAX_SEQ, Batch, MemoryView
from reference_impl.spec_links import implements

MAX_POS_PER_EMBD = 4  # GGML_MROPE_SECTIONS


@implements("SAN-024")
@dataclass(frozen=True, eq=False)
class SanitizedBatch:
    """A validated batch with every field filled, plus what llama_batch_allocr derives from it.

    * ``batch``: token/embd as given; ``pos`` int32 ``[n]`` (``[n_pos, n]`` for M-RoPE
      embedding batches); ``n_seq_id`` int32 ``[n]``; ``seq_id`` int32 ``[n, w]`` (ids of token
      i in first-listed order, duplicates removed, padded with -1); ``logits`` int8 0/1.
    * ``seq_pos_min_arr`` / ``seq_pos_max_arr``: per sequence (``LLAMA_MAX_SEQ`` entries) the
      smallest / largest batch position (section 0), -1 when the sequence is absent.
    * ``coupled``: ``(s1, s0)`` pairs, ascending: some token lists ``s0`` first and ``s1`` later
      (llama.cpp's ``seq_cpl[s1][s0]``); ``has_cpl`` is true iff there is one.
    * ``seq_sets``: the distinct sequence sets (ascending tuples) in order of first appearance;
      ``set_id[i]`` is the index of token i's set.
    * ``generated``: the fields filled in by default (``"seq_id"``, ``"pos"``, ``"logits"``);
      ``outputs_overridden``: explicit flags with zeros were replaced because all outputs are
      required (llama.cpp warns when it does this).
    """

    batch: Batch
    n_tokens: int
    n_outputs: int
    n_seq_max: int
    n_pos: int
    output_all: bool
    generated: frozenset[str]
    outputs_overridden: bool
    seq_id_unq: np.ndarray
    seq_idx: np.ndarray
    seq_pos_min_arr: np.ndarray
    seq_pos_max_arr: np.ndarray
    has_cpl: bool
    coupled: tuple[tuple[int, int], ...]
    seq_sets: tuple[tuple[int, ...], ...]
    set_id: np.ndarray

    def seq_pos_min(self, seq_id: int) -> int:
        return int(self.seq_pos_min_arr[seq_id])

    def seq_pos_max(self, seq_id: int) -> int:
        return int(self.seq_pos_max_arr[seq_id])

    def seq_ids_of(self, i: int) -> tuple[int, ...]:
        assert self.batch.seq_id is not None and self.batch.n_seq_id is not None
        return tuple(int(s) for s in self.batch.seq_id[i, : int(self.batch.n_seq_id[i])])


# --------------------------------------------------------------------------------------------
# rules (each called by name from sanitize(); pure functions over arrays)
# --------------------------------------------------------------------------------------------


def group_starts(sorted_values: np.ndarray) -> np.ndarray:
    """Start index of every run of equal values in a sorted array."""
    change = np.empty(sorted_values.shape[0], dtype=bool)
    change[0] = True
    np.not_equal(sorted_values[1:], sorted_values[:-1], out=change[1:])
    return np.flatnonzero(change)


@implements("SAN-002")
def check_params(n_vocab: int, n_seq_max: int, n_pos_per_embd: int) -> None:
    if not 1 <= n_seq_max <= LLAMA_MAX_SEQ:
        raise fail(
            SAN_N_SEQ_MAX,
            f"n_seq_max = {n_seq_max} is outside [1, {LLAMA_MAX_SEQ}]",
            field="n_seq_max",
        )
    if n_vocab < 0:
        raise fail(SAN_PARAM, f"n_vocab = {n_vocab} is negative", field="n_vocab")
    if not 1 <= n_pos_per_embd <= MAX_POS_PER_EMBD:
        raise fail(
            SAN_PARAM,
            f"n_pos_per_embd = {n_pos_per_embd} is outside [1, {MAX_POS_PER_EMBD}]",
            field="n_pos_per_embd",
        )


@implements("DEC-017", "SAN-004")
def check_token_range(token: np.ndarray, n_vocab: int) -> None:
    bad = (token < 0) | (token >= n_vocab)
    if bad.any():
        i = int(np.argmax(bad))
        raise fail(
            SAN_TOKEN_RANGE,
            f"invalid token[{i}] = {int(token[i])}, expected [0, {n_vocab})",
            field="token",
            index=i,
        )


@implements("SAN-005", "SAN-006", "SAN-008", "SAN-009")
def resolve_seq_ids(
    seq_id: np.ndarray | None, n_seq_id: np.ndarray | None, n: int, n_seq_max: int
) -> tuple[np.ndarray, np.ndarray]:
    """Validate and fill sequence ids; return ``(seq_id [n, w], n_seq_id [n])``.

    Absent ``seq_id`` means sequence 0 for every token; absent ``n_seq_id`` means each token
    uses the first column of ``seq_id``. Duplicates within a token collapse (first kept).
    """
    if seq_id is None:
        if n_seq_id is not None:
            bad = n_seq_id != 1
            if bad.any():
                i = int(np.argmax(bad))
                raise fail(
                    SAN_N_SEQ_ID,
                    f"n_seq_id[{i}] = {int(n_seq_id[i])} but seq_id is absent (only 1 can be "
                    "filled with the default sequence 0)",
                    field="n_seq_id",
                    index=i,
                )
        return np.zeros((n, 1), dtype=np.int32), np.ones(n, dtype=np.int32)

    k = seq_id.shape[1]
    if n_seq_id is None:
        n_seq_id = np.ones(n, dtype=np.int32)
    bad_n = (n_seq_id < 1) | (n_seq_id > k)
    valid = np.arange(k, dtype=np.int32)[None, :] < n_seq_id[:, None]
    bad_r = valid & ((seq_id < 0) | (seq_id >= n_seq_max))
    bad_row = bad_n | bad_r.any(axis=1)
    if bad_row.any():
        i = int(np.argmax(bad_row))
        if bad_n[i]:
            raise fail(
                SAN_N_SEQ_ID,
                f"n_seq_id[{i}] = {int(n_seq_id[i])} is outside [1, {k}] (the seq_id row width)",
                field="n_seq_id",
                index=i,
            )
        j = int(np.argmax(bad_r[i]))
        s = int(seq_id[i, j])
        raise fail(
            SAN_SEQ_ID_RANGE,
            f"invalid seq_id[{i}][{j}] = {s}, expected [0, {n_seq_max})",
            field="seq_id",
            index=i,
            seq_id=s,
        )

    if k == 1 or not (n_seq_id > 1).any():
        return np.ascontiguousarray(seq_id[:, :1]), np.ones(n, dtype=np.int32)

    # drop repeated ids inside a row (llama.cpp stores a token's sequences as a set)
    keep = valid.copy()
    for j in range(1, k):
        same = (seq_id[:, :j] == seq_id[:, j : j + 1]) & valid[:, :j]
        keep[:, j] &= ~same.any(axis=1)
    counts = keep.sum(axis=1).astype(np.int32)
    width = int(counts.max())
    out = np.full((n, width), -1, dtype=np.int32)
    rows, cols = np.nonzero(keep)
    new_cols = (np.cumsum(keep, axis=1) - 1)[rows, cols]
    out[rows, new_cols] = seq_id[rows, cols]
    return out, counts


@implements("SAN-010", "SAN-012")
def auto_positions(
    first_seq: np.ndarray, memory: MemoryView | None, n_pos: int, has_token: bool
) -> np.ndarray:
    """Positions for a batch without them (llama_batch_compat::init).

    Token i gets the next position of its first listed sequence s, starting at the memory's
    ``seq_pos_max(s) + 1`` (0 for an empty sequence or no memory); only that sequence's counter
    advances. M-RoPE embedding batches get section 0 this way and 0 in the other sections.
    """
    n = first_seq.shape[0]
    order = np.argsort(first_seq, kind="stable")
    sorted_seq = first_seq[order]
    starts = group_starts(sorted_seq)
    group_len = np.diff(starts, append=n)
    seqs = sorted_seq[starts]
    base = np.array(
        [next_position(memory, int(s)) for s in seqs], dtype=np.int64
    )  # one memory query per sequence
    rank = np.arange(n) - np.repeat(starts, group_len)
    pos0 = np.empty(n, dtype=np.int32)
    pos0[order] = np.repeat(base, group_len) + rank
    if has_token or n_pos == 1:
        return pos0
    pos = np.zeros((n_pos, n), dtype=np.int32)
    pos[0] = pos0
    return pos


@implements("DEC-039", "DEC-040", "SAN-010")
def next_position(memory: MemoryView | None, seq_id: int) -> int:
    """Where a sequence continues: ``seq_pos_max + 1`` (0 when empty or without memory)."""
    return (memory.seq_pos_max(seq_id) if memory is not None else -1) + 1


@implements("DEC-021", "SAN-013", "SAN-014")
def resolve_outputs(logits: np.ndarray | None, n: int, output_all: bool) -> tuple[np.ndarray, bool]:
    """Output flags: absent -> last token only (all when output_all); output_all overrides."""
    if logits is None:
        out = np.ones(n, dtype=np.int8) if output_all else np.zeros(n, dtype=np.int8)
        out[n - 1] = 1
        return out, False
    if output_all and not logits.all():
        return np.ones(n, dtype=np.int8), True
    return logits, False


@dataclass(frozen=True, eq=False)
class _SeqView:
    """(token, sequence) membership pairs grouped by sequence, batch order inside a group."""

    token: np.ndarray  # token index of each pair, grouped
    col: np.ndarray  # column of the id in the token's seq_id row
    pos: np.ndarray  # section-0 position of each pair, grouped
    seqs: np.ndarray  # present sequences, ascending
    starts: np.ndarray  # start of each group
    ends: np.ndarray  # end (exclusive) of each group


def group_by_seq(seq_id: np.ndarray, n_seq_id: np.ndarray, pos0: np.ndarray) -> _SeqView:
    pt: np.ndarray
    pc: np.ndarray
    if seq_id.shape[1] == 1:
        ps = seq_id[:, 0]
        pt = np.arange(ps.shape[0])  # intp: numpy gathers fastest with intp indices
        pc = np.zeros(ps.shape[0], dtype=np.int8)  # every id is in column 0
    else:
        valid = np.arange(seq_id.shape[1])[None, :] < n_seq_id[:, None]
        pt, pc = np.nonzero(valid)
        ps = seq_id[pt, pc]
    if ps.shape[0] > 1 and not (ps[1:] >= ps[:-1]).all():
        order = np.argsort(ps, kind="stable")
        ps, pt, pc = ps[order], pt[order], pc[order]
    starts = group_starts(ps)
    ends = np.append(starts[1:], ps.shape[0])
    return _SeqView(token=pt, col=pc, pos=pos0[pt], seqs=ps[starts], starts=starts, ends=ends)


@implements("SAN-024")
def seq_bounds(view: _SeqView) -> tuple[np.ndarray, np.ndarray]:
    """Per present sequence: smallest and largest batch position."""
    return (
        np.minimum.reduceat(view.pos, view.starts),
        np.maximum.reduceat(view.pos, view.starts),
    )


@implements("SAN-015", "SAN-016", "SAN-017", "SAN-021")
def check_positions(
    view: _SeqView,
    pmin: np.ndarray,
    pmax: np.ndarray,
    memory: MemoryView | None,
    n_pos: int,
    has_token: bool,
) -> None:
    """Memory continuation and intra-batch continuity, per sequence in ascending id order."""
    mem_max = np.array(
        [memory.seq_pos_max(int(s)) if memory is not None else -1 for s in view.seqs],
        dtype=np.int64,
    )
    if n_pos > 1:
        # M-RoPE: only the memory check; forward jumps allowed, embeddings may overlap by one
        bad = (mem_max >= 0) & ((mem_max >= pmin) if has_token else (mem_max > pmin))
        if bad.any():
            g = int(np.argmax(bad))
            raise _memory_error(view, g, int(mem_max[g]), int(pmin[g]), mrope=True, token=has_token)
        return
    mem_bad = (mem_max >= 0) & (pmin != mem_max + 1)
    gap_bad = check_continuity(view, pmin, pmax)
    bad = mem_bad | gap_bad
    if bad.any():
        g = int(np.argmax(bad))
        if mem_bad[g]:
            raise _memory_error(view, g, int(mem_max[g]), int(pmin[g]), mrope=False, token=True)
        raise _gap_error(view, g, int(pmin[g]))


@implements("SAN-016")
def check_continuity(view: _SeqView, pmin: np.ndarray, pmax: np.ndarray) -> np.ndarray:
    """Per present sequence: true when its batch positions leave a gap (repeats are fine)."""
    pos = view.pos
    if pos.shape[0] > 1:
        inner = np.ones(pos.shape[0] - 1, dtype=bool)
        inner[view.starts[1:] - 1] = False  # no step across two groups
        steps = np.diff(pos)
        if not (inner & (steps < 0)).any():
            # positions already ascend inside every group: count distinct values directly
            # position k starts a new value of its group; sum per group (reduceat: cumsum is
            # several times slower here)
            new_value = np.empty(pos.shape[0], dtype=bool)
            new_value[0] = False
            np.logical_and(inner, steps != 0, out=new_value[1:])
            distinct = np.add.reduceat(new_value, view.starts, dtype=np.int64) + 1
            return np.asarray(pmax - pmin + 1 > distinct)
    distinct = np.array(
        [np.unique(pos[a:b]).shape[0] for a, b in zip(view.starts, view.ends)], dtype=np.int64
    )
    return np.asarray(pmax - pmin + 1 > distinct)


@implements("SAN-026")
def _memory_error(view: _SeqView, g: int, x: int, y: int, *, mrope: bool, token: bool) -> Exception:
    a, b = int(view.starts[g]), int(view.ends[g])
    i = int(view.token[a + int(np.argmax(view.pos[a:b] == y))])
    s = int(view.seqs[g])
    if not mrope:
        rule = "Y = X + 1"
    elif token:
        rule = "X < Y (M-RoPE)"
    else:
        rule = "X <= Y (M-RoPE embeddings)"
    return fail(
        SAN_POS_MEMORY,
        f"sequence {s}: the memory ends at position X = {x} and the batch starts at Y = {y}; "
        f"required: {rule}",
        field="pos",
        index=i,
        seq_id=s,
    )


def _gap_error(view: _SeqView, g: int, y: int) -> Exception:
    a, b = int(view.starts[g]), int(view.ends[g])
    present = set(int(p) for p in view.pos[a:b])
    c = y
    while c + 1 in present:
        c += 1
    k = a + int(np.argmax(view.pos[a:b] > c))
    i = int(view.token[k])
    s = int(view.seqs[g])
    return fail(
        SAN_POS_GAP,
        f"sequence {s}: positions are not continuous (position {c + 1} is missing)",
        field="pos",
        index=i,
        seq_id=s,
    )


@implements("SAN-018", "SAN-024")
def coupled_pairs(seq_id: np.ndarray, n_seq_id: np.ndarray) -> dict[tuple[int, int], int]:
    """``{(s1, s0): first token}`` for every token listing ``s0`` first and ``s1`` later."""
    if seq_id.shape[1] == 1:
        return {}
    later = np.arange(seq_id.shape[1])[None, :] < n_seq_id[:, None]
    later[:, 0] = False
    rows, cols = np.nonzero(later)
    key = seq_id[rows, cols].astype(np.int64) * LLAMA_MAX_SEQ + seq_id[rows, 0]
    order = np.lexsort((rows, key))  # by pair, then first token
    key, rows = key[order], rows[order]
    first = group_starts(key)
    return {
        (int(k) // LLAMA_MAX_SEQ, int(k) % LLAMA_MAX_SEQ): int(i)
        for k, i in zip(key[first].tolist(), rows[first].tolist())
    }


@implements("SAN-018")
def check_coupled_memory(pairs: dict[tuple[int, int], int], memory: MemoryView | None) -> None:
    """Coupled sequences must hold the same positions in the memory (same min and max)."""
    if memory is None:
        return
    for (s1, s0), i in pairs.items():  # ascending (s1, s0), llama.cpp's loop order
        if memory.seq_pos_min(s1) != memory.seq_pos_min(s0) or memory.seq_pos_max(
            s1
        ) != memory.seq_pos_max(s0):
            raise fail(
                SAN_SEQ_DIVERGED,
                f"sequence {s1} is coupled to {s0} in the input batch, but their memory ranges "
                f"differ ([{memory.seq_pos_min(s1)}, {memory.seq_pos_max(s1)}] vs "
                f"[{memory.seq_pos_min(s0)}, {memory.seq_pos_max(s0)}])",
                field="seq_id",
                index=i,
                seq_id=s1,
            )


@implements("SAN-019")
def check_decreasing(view: _SeqView) -> None:
    """Within a sequence, positions may repeat but never decrease in batch order."""
    pos = view.pos
    if pos.shape[0] < 2:
        return
    inner = np.ones(pos.shape[0] - 1, dtype=bool)
    inner[view.starts[1:] - 1] = False
    dec = inner & (np.diff(pos) < 0)
    if not dec.any():
        return
    k = np.flatnonzero(dec) + 1  # the pair that goes below its predecessor
    first = int(k[np.lexsort((view.col[k], view.token[k]))[0]])
    i = int(view.token[first])
    s = int(pos_seq(view, first))
    raise fail(
        SAN_POS_DECREASING,
        f"sequence {s}: position {int(pos[first])} of token {i} is below the previous "
        f"position {int(pos[first - 1])} of the sequence",
        field="pos",
        index=i,
        seq_id=s,
    )


def pos_seq(view: _SeqView, k: int) -> int:
    g = int(np.searchsorted(view.starts, k, side="right")) - 1
    return int(view.seqs[g])


def seq_sets_of(
    seq_id: np.ndarray, n_seq_id: np.ndarray, view: _SeqView
) -> tuple[tuple[tuple[int, ...], ...], np.ndarray]:
    """Distinct sequence sets in order of first appearance and each token's set index."""
    n = seq_id.shape[0]
    if seq_id.shape[1] == 1:
        # one sequence per token: the sets are the present sequences
        first = view.token[view.starts]
        order = np.argsort(first, kind="stable")
        rank = np.empty(LLAMA_MAX_SEQ, dtype=np.int32)
        rank[view.seqs[order]] = np.arange(order.shape[0], dtype=np.int32)
        return tuple((int(s),) for s in view.seqs[order].tolist()), rank[seq_id[:, 0]]
    keys = np.where(
        np.arange(seq_id.shape[1])[None, :] < n_seq_id[:, None], seq_id, np.int32(LLAMA_MAX_SEQ)
    )
    keys = np.sort(keys, axis=1)
    uniq_rows, first_idx, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first_idx, kind="stable")
    rank = np.empty(uniq_rows.shape[0], dtype=np.int32)
    rank[order] = np.arange(uniq_rows.shape[0], dtype=np.int32)
    sets = tuple(tuple(int(s) for s in uniq_rows[r] if s < LLAMA_MAX_SEQ) for r in order.tolist())
    return sets, rank[inverse.reshape(n)].astype(np.int32)


def _readonly(*arrays: np.ndarray | None) -> None:
    for a in arrays:
        if a is not None:
            a.setflags(write=False)


# --------------------------------------------------------------------------------------------
# the sanitizer
# --------------------------------------------------------------------------------------------


@implements("SAN-001", "SAN-007", "SAN-011", "SAN-020", "SAN-022", "SAN-023", "SAN-027", "SAN-028")
def sanitize(
    batch: Batch,
    *,
    n_vocab: int,
    n_seq_max: int,
    memory: MemoryView | None = None,
    output_all: bool = False,
    n_pos_per_embd: int = 1,
) -> SanitizedBatch:
    """Validate and fill ``batch`` (llama_batch_allocr::init); raise BatchError on the first
    failed check. ``n_seq_max`` is the value llama.cpp passes to init; ``memory`` supplies
    ``seq_pos_min/max`` (None: no memory, as for encode); ``output_all``: every token is an
    output (embeddings); ``n_pos_per_embd``: 4 for M-RoPE models, else 1."""
    if batch.n_tokens == 0:
        raise fail(SAN_EMPTY, "the batch has no tokens (n_tokens == 0)", field="n_tokens")
    check_params(n_vocab, n_seq_max, n_pos_per_embd)
    f = _fields.normalize_fields(batch, n_pos_per_embd)
    n = f.n
    if f.token is not None:
        check_token_range(f.token, n_vocab)
    seq_id, n_seq_id = resolve_seq_ids(f.seq_id, f.n_seq_id, n, n_seq_max)

    generated: set[str] = set()
    if f.seq_id is None:
        generated.add("seq_id")
    pos = f.pos
    if pos is None:
        pos = auto_positions(seq_id[:, 0], memory, n_pos_per_embd, f.has_token)
        generated.add("pos")
    logits, overridden = resolve_outputs(f.logits, n, output_all)
    if f.logits is None:
        generated.add("logits")

    pos0 = pos if pos.ndim == 1 else pos[0]
    view = group_by_seq(seq_id, n_seq_id, pos0)
    pmin, pmax = seq_bounds(view)
    check_positions(view, pmin, pmax, memory, n_pos_per_embd, f.has_token)
    pairs = coupled_pairs(seq_id, n_seq_id)
    check_coupled_memory(pairs, memory)
    check_decreasing(view)

    seq_pos_min_arr = np.full(LLAMA_MAX_SEQ, -1, dtype=np.int32)
    seq_pos_max_arr = np.full(LLAMA_MAX_SEQ, -1, dtype=np.int32)
    seq_pos_min_arr[view.seqs] = pmin
    seq_pos_max_arr[view.seqs] = pmax
    seq_id_unq = view.seqs.astype(np.int32)
    seq_idx = np.full(LLAMA_MAX_SEQ, -1, dtype=np.int32)
    seq_idx[seq_id_unq] = np.arange(seq_id_unq.shape[0], dtype=np.int32)
    sets, set_id = seq_sets_of(seq_id, n_seq_id, view)

    out = Batch(
        token=f.token, embd=f.embd, pos=pos, n_seq_id=n_seq_id, seq_id=seq_id, logits=logits
    )
    _readonly(
        f.token, f.embd, pos, n_seq_id, seq_id, logits, seq_id_unq, seq_idx, set_id,
        seq_pos_min_arr, seq_pos_max_arr,
    )  # fmt: skip
    return SanitizedBatch(
        batch=out,
        n_tokens=n,
        n_outputs=int(np.count_nonzero(logits)),
        n_seq_max=n_seq_max,
        n_pos=n_pos_per_embd,
        output_all=output_all,
        generated=frozenset(generated),
        outputs_overridden=overridden,
        seq_id_unq=seq_id_unq,
        seq_idx=seq_idx,
        seq_pos_min_arr=seq_pos_min_arr,
        seq_pos_max_arr=seq_pos_max_arr,
        has_cpl=bool(pairs),
        coupled=tuple(pairs),
        seq_sets=sets,
        set_id=set_id,
    )
