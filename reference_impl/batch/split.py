"""The batch splitter: llama_batch_allocr's split_simple / split_equal / split_seq.

A :class:`BatchSplitter` walks one :class:`SanitizedBatch` and hands out ubatches until an empty
one (``n_tokens == 0``) says nothing is left; ``split_reset`` starts over. ``out_ids`` lists the
batch indices of output tokens in the order the ubatches emitted them.

This is the vectorized implementation: every sequence set keeps its tokens in batch order plus
a cursor, so a split touches only the tokens it emits. It relies on one invariant of all three
split functions: the used tokens of a set always form a prefix of the set's token list. The
readable per-token version (the specification) is :mod:`reference_impl.batch.split_scalar`; the
two are tested to agree.

:func:`split_plan` is llama.cpp's table of which memory uses which split (``init_batch``), and
:func:`split_all` runs a plan the way the memories do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

from reference_impl.batch.codes import (
    SPL_COUPLED_SEQUENTIAL,
    SPL_KEEP_TAIL,
    SPL_MEMORY_KIND,
    SPL_N_UBATCH,
    SPL_RESERVE,
    fail,
)
from reference_impl.batch.sanitize import SanitizedBatch
from reference_impl.batch.types import LLAMA_MAX_SEQ, UBatch
from reference_impl.errors import BatchError
from reference_impl.spec_links import implements

SplitMode = Literal["simple", "equal", "seq"]


# --------------------------------------------------------------------------------------------
# ubatch construction (llama_batch_allocr::ubatch_add)
# --------------------------------------------------------------------------------------------


@implements("SPL-015")
def empty_ubatch(n_pos: int = 1) -> UBatch:
    """The "nothing (more) to emit" ubatch."""
    z = np.zeros(0, dtype=np.int32)
    return UBatch(
        equal_seqs=False,
        n_tokens=0,
        n_seq_tokens=0,
        n_seqs=0,
        n_seqs_unq=0,
        n_pos=n_pos,
        token=None,
        embd=None,
        pos=z,
        n_seq_id=z,
        seq_id=np.zeros((0, 1), dtype=np.int32),
        seq_id_unq=z,
        seq_idx=np.full(LLAMA_MAX_SEQ, -1, dtype=np.int32),
        output=np.zeros(0, dtype=np.int8),
        idxs=z,
    )


@implements("SPL-002", "SPL-003", "SPL-004")
def make_ubatch(
    sb: SanitizedBatch,
    idxs: np.ndarray,
    n_seqs: int,
    equal_seqs: bool,
    seq_id_unq: np.ndarray | None = None,
) -> UBatch:
    """Copy the tokens ``idxs`` (in this order) out of the batch into a self-contained ubatch.

    Positions are section-major (``pos[j * n_tokens + i]``): a token batch repeats its single
    position in every section, an embedding batch copies its sections. ``seq_id_unq``: the
    ascending sequences of these tokens when the caller already knows them.
    """
    b = sb.batch
    idxs = np.asarray(idxs, dtype=np.intp)  # numpy gathers fastest with intp indices
    n = idxs.shape[0]
    assert n % n_seqs == 0, "a ubatch holds n_seqs sets of equal length"
    pos = b.pos
    assert pos is not None and b.seq_id is not None and b.n_seq_id is not None
    assert b.logits is not None
    if pos.ndim == 1:
        p = pos[idxs]
        upos = np.tile(p, sb.n_pos) if sb.n_pos > 1 else p
    else:
        upos = pos[:, idxs].reshape(-1)
    n_seq_id = b.n_seq_id[idxs]
    if b.seq_id.shape[1] == 1:
        seq_id = b.seq_id[idxs]
    else:
        seq_id = b.seq_id[idxs, : int(n_seq_id.max())]
    if seq_id_unq is None:
        present = np.zeros(LLAMA_MAX_SEQ + 1, dtype=bool)
        present[seq_id] = True  # padding (-1) lands on the extra last entry
        seq_id_unq = np.flatnonzero(present[:LLAMA_MAX_SEQ]).astype(np.int32)
    seq_idx = np.full(LLAMA_MAX_SEQ, -1, dtype=np.int32)
    seq_idx[seq_id_unq] = np.arange(seq_id_unq.shape[0], dtype=np.int32)
    return UBatch(
        equal_seqs=equal_seqs,
        n_tokens=n,
        n_seq_tokens=n // n_seqs,
        n_seqs=n_seqs,
        n_seqs_unq=int(seq_id_unq.shape[0]),
        n_pos=sb.n_pos,
        token=None if b.token is None else b.token[idxs],
        embd=None if b.embd is None else b.embd[idxs],
        pos=upos,
        n_seq_id=n_seq_id,
        seq_id=seq_id,
        seq_id_unq=seq_id_unq,
        seq_idx=seq_idx,
        output=b.logits[idxs],
        idxs=idxs.astype(np.int32),
    )


@implements("DEC-047", "SPL-016", "SPL-019")
def ubatch_reserve(n_seq_tokens: int, n_seqs: int, *, n_pos_per_embd: int = 1) -> UBatch:
    """The worst-case ubatch used to reserve graphs: ``n_seqs`` sets of ``n_seq_tokens`` tokens.

    Token ids, positions and outputs are zeros; sequences 0..n_seqs-1 are listed in
    ``seq_id_unq``/``seq_idx`` but no token is assigned one (``n_seq_id`` 0, ``seq_id`` -1) --
    the caller fills them, as in llama.cpp. ``idxs`` is -1: no batch backs these tokens.
    """
    if n_seq_tokens < 1 or n_seqs < 1 or n_seqs > LLAMA_MAX_SEQ:
        raise fail(
            SPL_RESERVE,
            f"ubatch_reserve({n_seq_tokens}, {n_seqs}): both must be >= 1 and n_seqs <= "
            f"{LLAMA_MAX_SEQ}",
            field="n_seqs" if n_seq_tokens >= 1 else "n_seq_tokens",
        )
    n = n_seq_tokens * n_seqs
    seq_id_unq = np.arange(n_seqs, dtype=np.int32)
    seq_idx = np.full(LLAMA_MAX_SEQ, -1, dtype=np.int32)
    seq_idx[:n_seqs] = seq_id_unq
    return UBatch(
        equal_seqs=True,
        n_tokens=n,
        n_seq_tokens=n_seq_tokens,
        n_seqs=n_seqs,
        n_seqs_unq=n_seqs,
        n_pos=n_pos_per_embd,
        token=np.zeros(n, dtype=np.int32),
        embd=None,
        pos=np.zeros(n * n_pos_per_embd, dtype=np.int32),
        n_seq_id=np.zeros(n, dtype=np.int32),
        seq_id=np.full((n, 1), -1, dtype=np.int32),
        seq_id_unq=seq_id_unq,
        seq_idx=seq_idx,
        output=np.zeros(n, dtype=np.int8),
        idxs=np.full(n, -1, dtype=np.int32),
    )


@implements("SPL-019")
def check_n_ubatch(n_ubatch: int) -> None:
    if n_ubatch < 1:
        raise fail(SPL_N_UBATCH, f"n_ubatch = {n_ubatch} must be >= 1", field="n_ubatch")


@implements("SPL-019")
def check_keep_tail(n_ubatch: int, n_keep_tail: int) -> None:
    if n_keep_tail < 0 or (n_keep_tail > 0 and n_ubatch <= n_keep_tail):
        raise fail(
            SPL_KEEP_TAIL,
            f"n_keep_tail = {n_keep_tail} must be >= 0 and below n_ubatch = {n_ubatch}",
            field="n_keep_tail",
        )


@implements("SPL-012", "SPL-013")
def keep_tail_lengths(rem: list[int], length: int, n_ubatch: int, n_keep_tail: int) -> list[int]:
    """Per chosen set, how many tokens to take so no set's last ``n_keep_tail`` tokens are split.

    ``rem[k]``: unused tokens of chosen set k; every set was expanded to ``length``. Keep the
    longest prefix of sets that either finish or keep at least ``n_keep_tail`` tokens for later;
    if none qualifies, finish set 0 when it fits in the ubatch, else cut it so that exactly
    ``n_keep_tail`` tokens remain. Returns the lengths of the kept sets.
    """
    n_keep = 0
    while n_keep < len(rem):
        left = rem[n_keep] - length
        if left != 0 and left < n_keep_tail:
            break
        n_keep += 1
    if n_keep > 0:
        return [length] * n_keep
    if rem[0] <= n_ubatch:
        return [rem[0]]
    return [rem[0] - n_keep_tail]


# --------------------------------------------------------------------------------------------
# the splitter
# --------------------------------------------------------------------------------------------


@implements("SPL-005", "SPL-020", "SPL-021")
class BatchSplitter:
    """Splits one sanitized batch into ubatches (llama_batch_allocr's split state).

    Per sequence set k, its tokens in batch order are
    ``_set_tokens[_set_start[k] : _set_start[k] + _set_count[k]]`` and the first ``_cursor[k]``
    of them are used: every split consumes a prefix of each set's unused tokens, so a cursor is
    enough, and a split costs what it emits plus a little per set.
    """

    def __init__(self, sb: SanitizedBatch) -> None:
        self.sb = sb
        n_sets = len(sb.seq_sets)
        self._n = sb.n_tokens
        self._set_tokens = np.argsort(sb.set_id, kind="stable")  # intp: fast gathers
        self._set_count = np.bincount(sb.set_id, minlength=n_sets).astype(np.intp)
        self._set_start = np.cumsum(self._set_count) - self._set_count
        self._set_count_list: list[int] = self._set_count.tolist()
        self._set_start_list: list[int] = self._set_start.tolist()
        self._set_mask = [sum(1 << s for s in st) for st in sb.seq_sets]
        self._single = all(len(st) == 1 for st in sb.seq_sets)  # no token couples sequences
        # the sequence of each single-sequence set, and the set of each sequence (-1: none)
        self._seq_of_set = np.array([st[0] for st in sb.seq_sets], dtype=np.intp)
        self._set_of_seq = np.full(LLAMA_MAX_SEQ + 1, -1, dtype=np.intp)
        for k, st in enumerate(sb.seq_sets):
            if len(st) == 1:
                self._set_of_seq[st[0]] = k
        self.last_error: BatchError | None = None
        self.split_reset()

    # -- state ---------------------------------------------------------------------------------

    @implements("SPL-006", "SPL-015")
    def split_reset(self) -> None:
        """Forget what was emitted: every token unused again, out_ids empty."""
        self._used = np.zeros(self._n, dtype=bool)
        self._n_used = 0
        self._cursor = np.zeros(len(self.sb.seq_sets), dtype=np.intp)
        self._first_unused = 0
        self._out_chunks: list[np.ndarray] = []
        self.last_error = None

    @property
    def n_tokens(self) -> int:
        return self._n

    @property
    def n_used(self) -> int:
        return self._n_used

    @property
    def out_ids(self) -> list[int]:
        """Batch indices of the output tokens, in the order the ubatches emitted them."""
        return self.out_ids_array.tolist()

    @property
    def out_ids_array(self) -> np.ndarray:
        if not self._out_chunks:
            return np.zeros(0, dtype=np.int32)
        return np.concatenate(self._out_chunks).astype(np.int32)

    def _advance_first_unused(self) -> int:
        c = self._first_unused
        window = 256
        while c < self._n and self._used[c]:
            # look ahead in growing windows: the scan stays linear over a whole split
            free = np.flatnonzero(~self._used[c : c + window])
            c = c + int(free[0]) if free.shape[0] else min(c + window, self._n)
            window *= 2
        self._first_unused = c
        return c

    def _heads(self, sets: np.ndarray) -> np.ndarray:
        """The first unused token of each of ``sets`` (each must have one)."""
        return self._set_tokens[self._set_start[sets] + self._cursor[sets]]

    @implements("SPL-006", "SPL-007")
    def _emit(
        self,
        idxs: np.ndarray,
        n_seqs: int,
        equal_seqs: bool,
        cursor: np.ndarray | None = None,
        seq_id_unq: np.ndarray | None = None,
    ) -> UBatch:
        """Mark ``idxs`` used and build the ubatch. ``cursor``: the per-set cursors after this
        ubatch when the caller knows them (else counted from ``idxs``)."""
        self._used[idxs] = True
        self._n_used += int(idxs.shape[0])
        if cursor is None:
            self._cursor += np.bincount(self.sb.set_id[idxs], minlength=self._cursor.shape[0])
        else:
            self._cursor = cursor
        ub = make_ubatch(self.sb, idxs, n_seqs, equal_seqs, seq_id_unq)
        self._out_chunks.append(idxs[ub.output != 0])
        return ub

    # -- split_simple --------------------------------------------------------------------------

    @implements("SPL-001", "SPL-022")
    def split_simple(self, n_ubatch: int) -> UBatch:
        """The next ``n_ubatch`` unused tokens in batch order (fewer at the end of the batch)."""
        check_n_ubatch(n_ubatch)
        c = self._advance_first_unused()
        if c >= self._n:
            return empty_ubatch(self.sb.n_pos)
        end = min(c + n_ubatch, self._n)
        if not self._used[c:end].any():
            idxs = np.arange(c, end)
            self._first_unused = end  # everything before end is now used
        else:  # only after another split mode without split_reset: skip what it took
            idxs = (c + np.flatnonzero(~self._used[c:]))[:n_ubatch]
        return self._emit(idxs, int(idxs.shape[0]), False)

    # -- split_equal ---------------------------------------------------------------------------

    @implements("SPL-008", "SPL-010", "SPL-011", "SPL-022")
    def split_equal(self, n_ubatch: int, sequential: bool, n_keep_tail: int = 0) -> UBatch:
        """Equal-length runs of non-overlapping sequence sets, laid out set by set.

        ``sequential``: the sets' sequence ids must be consecutive and increasing (one KV stream
        per sequence); refused (empty ubatch, ``last_error`` set) when the batch couples
        sequences. ``n_keep_tail``: never split a set's last ``n_keep_tail`` tokens.
        """
        check_n_ubatch(n_ubatch)
        check_keep_tail(n_ubatch, n_keep_tail)
        if sequential and self.sb.has_cpl:
            self.last_error = fail(
                SPL_COUPLED_SEQUENTIAL,
                "sequential split is not supported when the batch couples sequences "
                "(a unified KV cache is needed)",
                field="seq_id",
            )
            return empty_ubatch(self.sb.n_pos)
        chosen = np.asarray(choose_sets(self, n_ubatch, sequential), dtype=np.intp)
        if chosen.shape[0] == 0:
            return empty_ubatch(self.sb.n_pos)
        rem = self._set_count[chosen] - self._cursor[chosen]
        length = min(int(rem.min()), max(1, n_ubatch // chosen.shape[0]))
        if n_keep_tail > 0:
            lengths = keep_tail_lengths(rem.tolist(), length, n_ubatch, n_keep_tail)
            chosen = chosen[: len(lengths)]
            length = lengths[0]  # one set, or every kept set at the common length
        first = self._set_start[chosen] + self._cursor[chosen]
        if chosen.shape[0] == 1:
            idxs = self._set_tokens[int(first[0]) : int(first[0]) + length]
        else:
            idxs = self._set_tokens[(first[:, None] + np.arange(length)).reshape(-1)]
        if self._single:
            seqs = np.sort(self._seq_of_set[chosen]).astype(np.int32)
        else:
            seqs = np.asarray(
                sorted(s for k in chosen.tolist() for s in self.sb.seq_sets[k]), dtype=np.int32
            )
        cursor = self._cursor.copy()
        cursor[chosen] += length  # the chosen sets are distinct
        return self._emit(idxs, int(chosen.shape[0]), True, cursor, seqs)

    # -- split_seq -----------------------------------------------------------------------------

    @implements("SPL-014", "SPL-022")
    def split_seq(self, n_ubatch: int) -> UBatch:
        """A chain from the first unused token: each next token's set is a subset of the
        current one (the chain narrows); one sequence set per ubatch."""
        check_n_ubatch(n_ubatch)
        c = self._advance_first_unused()
        if c >= self._n:
            return empty_ubatch(self.sb.n_pos)
        masks = self._set_mask
        first = cur = int(self.sb.set_id[c])
        budget = n_ubatch
        parts: list[np.ndarray] = []
        cursor = self._cursor.tolist()
        start = self._set_start_list
        count = self._set_count_list
        while True:
            # the next unused token of a set strictly inside the current one (a single-sequence
            # set has no strict subset: no token is in zero sequences)
            nxt, nxt_set = self._n, -1
            if len(self.sb.seq_sets[cur]) > 1:
                for k in range(len(masks)):
                    if k != cur and masks[k] & ~masks[cur] == 0 and cursor[k] < count[k]:
                        t = int(self._set_tokens[start[k] + cursor[k]])
                        if t < nxt:
                            nxt, nxt_set = t, k
            # the current set's own tokens before it
            own = self._set_tokens[start[cur] + cursor[cur] : start[cur] + count[cur]]
            run = own[: min(budget, int(np.searchsorted(own, nxt)))]
            parts.append(run)
            cursor[cur] += int(run.shape[0])
            budget -= int(run.shape[0])
            if budget == 0 or nxt_set < 0:
                break
            parts.append(np.array([nxt], dtype=np.intp))
            cursor[nxt_set] += 1
            budget -= 1
            cur = nxt_set
            if budget == 0:
                break
        idxs = np.concatenate(parts) if len(parts) > 1 else parts[0]
        # the chain only narrows: its first set holds every sequence of the ubatch
        seqs = np.asarray(self.sb.seq_sets[first], dtype=np.int32)
        return self._emit(idxs, 1, True, np.asarray(cursor, dtype=np.intp), seqs)


FEW_SETS = 16  # below this many sequence sets, plain Python beats numpy's per-call overhead


@implements("SPL-009")
def choose_sets(splitter: BatchSplitter, n_ubatch: int, sequential: bool) -> list[int]:
    """The sequence sets of the next split_equal ubatch (llama.cpp's scan of unused tokens).

    Scanning unused tokens in batch order, a token's set joins when it overlaps no chosen set
    and, for a sequential split, its sequence follows the previously added one; the scan stops
    once more than ``n_ubatch`` sets are chosen. Overlap only grows as sets join, so without
    ``sequential`` the scan is a greedy pass over the sets by first unused token; with it (sets
    are then single sequences), after adding sequence s at token p the scan can only add s + 1,
    at its first unused token after p.
    """
    sp = splitter
    if sp._cursor.shape[0] <= FEW_SETS:
        return _choose_few(sp, n_ubatch, sequential)
    live = np.flatnonzero(sp._cursor < sp._set_count)
    if live.shape[0] == 0:
        return []
    heads = sp._heads(live)
    if not sequential:
        by_head = live[np.argsort(heads, kind="stable")]
        if sp._single:  # single-sequence sets never overlap: the first n_ubatch + 1 by head
            return by_head[: n_ubatch + 1].tolist()
        chosen: list[int] = []
        taken = 0
        for k in by_head.tolist():
            if sp._set_mask[k] & taken:
                continue
            chosen.append(k)
            taken |= sp._set_mask[k]
            if len(chosen) > n_ubatch:
                break
        return chosen
    first = int(np.argmin(heads))
    k0, p0 = int(live[first]), int(heads[first])
    s0 = int(sp._seq_of_set[k0])
    cand = sp._set_of_seq[s0 + 1 : min(s0 + 1 + n_ubatch, LLAMA_MAX_SEQ)]
    ok = cand >= 0
    ok[ok] = sp._cursor[cand[ok]] < sp._set_count[cand[ok]]
    chain = cand[: int(np.argmin(ok)) if not ok.all() else ok.shape[0]]
    # usually each next sequence's first unused token comes later in the batch
    hs = np.concatenate(([p0], sp._heads(chain)))
    rising = hs[1:] > hs[:-1]
    j = int(np.argmin(rising)) if not rising.all() else rising.shape[0]
    chosen = [k0, *chain[:j].tolist()]
    return _continue_sequential(sp, chosen, chain[j:].tolist(), int(hs[j]))


@implements("SPL-009")
def _choose_few(sp: BatchSplitter, n_ubatch: int, sequential: bool) -> list[int]:
    """choose_sets with Python scalars (the same rule, for batches with few sequence sets)."""
    cursor = sp._cursor.tolist()
    count = sp._set_count_list
    start = sp._set_start_list
    tokens = sp._set_tokens
    live = [k for k in range(len(cursor)) if cursor[k] < count[k]]
    if not live:
        return []
    by_head = sorted((int(tokens[start[k] + cursor[k]]), k) for k in live)
    if not sequential:
        chosen: list[int] = []
        taken = 0
        for _, k in by_head:
            if sp._set_mask[k] & taken:
                continue
            chosen.append(k)
            taken |= sp._set_mask[k]
            if len(chosen) > n_ubatch:
                break
        return chosen
    p, k0 = by_head[0]
    seq = int(sp._seq_of_set[k0])
    rest: list[int] = []
    while len(rest) < n_ubatch:
        seq += 1
        k = int(sp._set_of_seq[min(seq, LLAMA_MAX_SEQ)])
        if k < 0 or cursor[k] == count[k]:
            break
        rest.append(k)
    return _continue_sequential(sp, [k0], rest, p)


@implements("SPL-009")
def _continue_sequential(
    sp: BatchSplitter, chosen: list[int], rest: list[int], p: int
) -> list[int]:
    """Add the sets ``rest`` in order while each has an unused token after the previous one."""
    for k in rest:
        a = int(sp._set_start[k] + sp._cursor[k])
        toks = sp._set_tokens[a : int(sp._set_start[k] + sp._set_count[k])]
        i = 0 if int(toks[0]) > p else int(np.searchsorted(toks, p, side="right"))
        if i == toks.shape[0]:
            break
        p = int(toks[i])
        chosen.append(k)
    return chosen


# --------------------------------------------------------------------------------------------
# which memory uses which split (init_batch)
# --------------------------------------------------------------------------------------------

MEMORY_KINDS = ("kv", "iswa", "recurrent", "hybrid")


@dataclass(frozen=True)
class SplitPlan:
    """How a memory splits a batch: the mode and its arguments, and what to try on failure."""

    mode: SplitMode
    sequential: bool = False
    n_keep_tail: int = 0
    fallback: SplitPlan | None = None  # iswa: equal split when the simple split is not usable


@implements("MEM-007", "SPL-017", "SPL-019")
def split_plan(memory_kind: str, *, unified: bool, embd_all: bool, n_rs_seq: int = 0) -> SplitPlan:
    """llama.cpp's init_batch choice per memory kind.

    * ``kv``: one stream (``unified``) -> split_simple; several streams -> sequential split_equal.
    * ``iswa``: unified -> split_simple, falling back to a non-sequential split_equal when the
      split or the slot search fails; otherwise sequential split_equal.
    * ``recurrent``: all outputs (``embd_all``) -> split_seq; else sequential split_equal.
    * ``hybrid``: all outputs -> split_seq; else split_equal, sequential unless unified.

    Recurrent and hybrid memories keep the last ``n_rs_seq + 1`` tokens of each sequence
    together when ``n_rs_seq > 0`` (rollback snapshots).
    """
    keep = n_rs_seq + 1 if n_rs_seq > 0 else 0
    if memory_kind == "kv":
        return SplitPlan("simple") if unified else SplitPlan("equal", sequential=True)
    if memory_kind == "iswa":
        if unified:
            return SplitPlan("simple", fallback=SplitPlan("equal", sequential=False))
        return SplitPlan("equal", sequential=True)
    if memory_kind == "recurrent":
        if embd_all:
            return SplitPlan("seq")
        return SplitPlan("equal", sequential=True, n_keep_tail=keep)
    if memory_kind == "hybrid":
        if embd_all:
            return SplitPlan("seq")
        return SplitPlan("equal", sequential=not unified, n_keep_tail=keep)
    raise fail(
        SPL_MEMORY_KIND,
        f"unknown memory kind {memory_kind!r}; expected one of {', '.join(MEMORY_KINDS)}",
        field="memory_kind",
    )


class Splitter(Protocol):
    """What split_all needs from a splitter (BatchSplitter and the scalar one both fit)."""

    @property
    def n_tokens(self) -> int: ...

    @property
    def n_used(self) -> int: ...

    def split_reset(self) -> None: ...

    def split_simple(self, n_ubatch: int) -> UBatch: ...

    def split_equal(self, n_ubatch: int, sequential: bool, n_keep_tail: int = 0) -> UBatch: ...

    def split_seq(self, n_ubatch: int) -> UBatch: ...


@implements("SPL-018")
def split_all(splitter: Splitter, plan: SplitPlan, n_ubatch: int) -> list[UBatch] | None:
    """Reset, then split until an empty ubatch, as a memory's init_batch does.

    Returns the ubatches, or None when some token was left unplaced (and the plan's fallback,
    tried next, also failed). A memory whose slot search fails on the result calls this again
    with ``plan.fallback`` when there is one (iswa).
    """
    splitter.split_reset()
    out: list[UBatch] = []
    while True:
        if plan.mode == "simple":
            ub = splitter.split_simple(n_ubatch)
        elif plan.mode == "equal":
            ub = splitter.split_equal(n_ubatch, plan.sequential, plan.n_keep_tail)
        else:
            ub = splitter.split_seq(n_ubatch)
        if ub.n_tokens == 0:
            break
        out.append(ub)
    if splitter.n_used < splitter.n_tokens:
        if plan.fallback is not None:
            return split_all(splitter, plan.fallback, n_ubatch)
        return None
    return out
