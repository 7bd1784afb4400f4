"""Hypothesis strategies and helpers for the KV cache and memory areas.

* :func:`ubatch_from_lists` builds a :class:`~reference_impl.batch.types.UBatch` from plain
  lists (the splitter lives in the batch area; these tests only need well-formed ubatches).
* Operations on a cache are plain records (:class:`Decode`, :class:`SeqRm`, ...) with
  ``as_dict()``, so a recorded sequence can be replayed through another engine, e.g. llama.cpp's
  ``llama_decode`` + ``llama_memory_seq_*`` (a :class:`Decode` is one single-ubatch decode).
* :class:`ModelCache` is the brute-force oracle: a list of cells per stream and nothing else;
  every rule is re-derived there from the spec text, independent of ``reference_impl``.
* :func:`op_sequences` draws operation sequences that llama.cpp's public API accepts as they
  are (for the differential session: ``Decode`` -> one ``llama_decode`` of those tokens with
  ``n_ubatch >= n_tokens``; ``SeqRm``/``SeqCp``/... -> ``llama_memory_seq_*``; ``Clear`` ->
  ``llama_memory_clear``); :func:`replay` runs them on a ``kv.cache`` handle and returns the
  observations (decode accepted?, ``seq_pos_min``/``seq_pos_max`` per sequence) that a
  llama.cpp replayer reports the same way, and :func:`model_observations` gives the oracle's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st

from reference_impl.batch.types import LLAMA_MAX_SEQ, UBatch


def ubatch_from_lists(
    pos: Sequence[int] | Sequence[Sequence[int]],
    seq_ids: Sequence[Iterable[int]],
    *,
    tokens: Sequence[int] | None = None,
    output: Sequence[int | bool] | None = None,
    n_groups: int | None = None,
) -> UBatch:
    """A ubatch whose token ``i`` has position ``pos[i]`` and sequences ``seq_ids[i]``.

    ``pos`` may be a list of sections (``[n_pos][n_tokens]``) for M-RoPE. ``n_groups`` marks a
    sequence-major (split_equal-like) ubatch of that many equal sequence sets.
    """
    rows = [list(r) for r in seq_ids]
    n = len(rows)
    items: list[object] = list(pos)
    if items and isinstance(items[0], Sequence):
        sections = [[int(p) for p in sec] for sec in items]  # type: ignore[attr-defined]
    else:
        sections = [[int(p) for p in items]]  # type: ignore[call-overload]
    n_pos = len(sections)
    assert all(len(sec) == n for sec in sections), "every position section needs n_tokens entries"
    width = max((len(r) for r in rows), default=1) or 1
    seq_arr = np.full((n, width), -1, dtype=np.int32)
    for i, r in enumerate(rows):
        seq_arr[i, : len(r)] = r
    unq = sorted({s for r in rows for s in r})
    seq_idx = np.full(LLAMA_MAX_SEQ, -1, dtype=np.int32)
    for k, s in enumerate(unq):
        if 0 <= s < LLAMA_MAX_SEQ:
            seq_idx[s] = k
    groups = n_groups if n_groups is not None else n
    return UBatch(
        equal_seqs=n_groups is not None,
        n_tokens=n,
        n_seq_tokens=n // groups if groups else 0,
        n_seqs=groups,
        n_seqs_unq=len(unq),
        n_pos=n_pos,
        token=np.asarray(tokens if tokens is not None else [1] * n, dtype=np.int32),
        embd=None,
        pos=np.asarray([p for sec in sections for p in sec], dtype=np.int32),
        n_seq_id=np.asarray([len(r) for r in rows], dtype=np.int32),
        seq_id=seq_arr,
        seq_id_unq=np.asarray(unq, dtype=np.int32),
        seq_idx=seq_idx,
        output=np.asarray(
            [1 if o else 0 for o in output] if output is not None else [0] * n, dtype=np.int8
        ),
        idxs=np.arange(n, dtype=np.int32),
    )


def run_of(seq: int, start: int, count: int) -> UBatch:
    """``count`` tokens of one sequence at positions ``start .. start + count - 1``."""
    return ubatch_from_lists(list(range(start, start + count)), [[seq]] * count)


def grouped(groups: Sequence[tuple[int, int, int]]) -> UBatch:
    """A sequence-major ubatch: ``(seq, start, count)`` per group, equal counts."""
    pos: list[int] = []
    seqs: list[list[int]] = []
    for seq, start, count in groups:
        pos += list(range(start, start + count))
        seqs += [[seq]] * count
    return ubatch_from_lists(pos, seqs, n_groups=len(groups))


@dataclass(frozen=True)
class Op:
    def as_dict(self) -> dict[str, object]:
        return {"op": type(self).__name__, **asdict(self)}


# ---------------------------------------------------------------------------- operations


@dataclass(frozen=True)
class Decode(Op):
    """Place ubatches (prepare, then apply each); ``tokens[u]`` = [(pos, seq ids), ...].
    ``groups[u]`` > 0 marks a sequence-major ubatch (multi-stream caches)."""

    tokens: tuple[tuple[tuple[int, tuple[int, ...]], ...], ...]
    groups: tuple[int, ...]
    rollback: bool = False  # undo the applied ubatches afterwards (restore, reverse order)

    def ubatches(self) -> list[UBatch]:
        out = []
        for toks, g in zip(self.tokens, self.groups):
            out.append(
                ubatch_from_lists(
                    [p for p, _ in toks], [list(s) for _, s in toks], n_groups=g or None
                )
            )
        return out


@dataclass(frozen=True)
class SeqRm(Op):
    seq_id: int
    p0: int
    p1: int


@dataclass(frozen=True)
class SeqCp(Op):
    seq_id_src: int
    seq_id_dst: int
    p0: int
    p1: int


@dataclass(frozen=True)
class SeqKeep(Op):
    seq_id: int


@dataclass(frozen=True)
class SeqAdd(Op):
    seq_id: int
    p0: int
    p1: int
    delta: int


@dataclass(frozen=True)
class SeqDiv(Op):
    seq_id: int
    p0: int
    p1: int
    d: int


@dataclass(frozen=True)
class Update(Op):
    pass


@dataclass(frozen=True)
class Clear(Op):
    pass


# ---------------------------------------------------------------------------- the oracle

INT32_MAX = 2**31 - 1
SWA_NONE, SWA_STANDARD, SWA_CHUNKED, SWA_SYMMETRIC = 0, 1, 2, 3


def model_is_masked_swa(n_swa: int, swa_type: int, p0: int, p1: int) -> bool:
    """The window rule, restated: is key position p0 outside the window of query p1?"""
    if swa_type == SWA_STANDARD:
        return not (p1 - n_swa < p0)  # the window holds the last n_swa positions up to p1
    if swa_type == SWA_CHUNKED:
        chunk_start = p1 - p1 % n_swa
        return p0 < chunk_start
    if swa_type == SWA_SYMMETRIC:
        return abs(p1 - p0) > n_swa // 2
    return False


@dataclass
class MCell:
    pos: int
    seqs: set[int]
    rope_pos: int  # the position the stored key is rotated for (pending shift = pos - rope_pos)
    ext: tuple[int, int] = (0, 0)


@dataclass(frozen=True)
class ModelConfig:
    kv_size: int
    n_seq_max: int = 1
    unified: bool = False
    n_swa: int = 0
    swa_type: int = SWA_NONE

    @property
    def n_stream(self) -> int:
        return 1 if self.unified else self.n_seq_max

    def stream_of(self, s: int) -> int:
        return 0 if self.n_stream == 1 else s

    def n_seq_ids(self) -> int:
        """Valid sequence ids: [0, 256) on one stream, [0, n_stream) otherwise."""
        return LLAMA_MAX_SEQ if self.n_stream == 1 else self.n_stream

    def as_kwargs(self) -> dict[str, int | bool]:
        return {
            "kv_size": self.kv_size,
            "n_seq_max": self.n_seq_max,
            "unified": self.unified,
            "n_swa": self.n_swa,
            "swa_type": self.swa_type,
        }


class ModelCache:
    """Brute-force KV cache: a list of optional cells per stream, naive loops everywhere."""

    def __init__(self, cfg: ModelConfig) -> None:
        self.cfg = cfg
        self.cells: list[list[MCell | None]] = [[None] * cfg.kv_size for _ in range(cfg.n_stream)]
        self.heads = [0] * cfg.n_stream
        self.has_shift = [False] * cfg.n_stream
        self.pending: list[tuple[int, int]] = []

    def copy(self) -> ModelCache:
        m = ModelCache(self.cfg)
        m.cells = [
            [None if c is None else MCell(c.pos, set(c.seqs), c.rope_pos, c.ext) for c in t]
            for t in self.cells
        ]
        m.heads = list(self.heads)
        m.has_shift = list(self.has_shift)
        m.pending = list(self.pending)
        return m

    # -- queries

    def positions(self, s: int) -> list[int]:
        t = self.cells[self.cfg.stream_of(s)]
        return [c.pos for c in t if c is not None and s in c.seqs]

    def seq_pos_min(self, s: int) -> int:
        ps = self.positions(s)
        return min(ps) if ps else -1

    def seq_pos_max(self, s: int) -> int:
        ps = self.positions(s)
        return max(ps) if ps else -1

    def used(self, stream: int) -> int:
        return sum(c is not None for c in self.cells[stream])

    def used_max_p1(self, stream: int) -> int:
        idx = [i for i, c in enumerate(self.cells[stream]) if c is not None]
        return idx[-1] + 1 if idx else 0

    def n_kv(self, streams: Sequence[int]) -> int:
        best = 0
        for t in streams:
            n = self.used_max_p1(t)
            padded = 256 * ((n + 255) // 256)
            best = max(best, min(self.cfg.kv_size, max(256, padded)))
        return best

    def state(self) -> tuple[object, ...]:
        """Same layout as reference_impl.kv.KVState, as plain tuples."""
        streams = []
        for t, cells in enumerate(self.cells):
            streams.append(
                (
                    tuple(-1 if c is None else c.pos for c in cells),
                    tuple(() if c is None else tuple(sorted(c.seqs)) for c in cells),
                    tuple(0 if c is None else c.pos - c.rope_pos for c in cells),
                    tuple((0, 0) if c is None else c.ext for c in cells),
                    self.heads[t],
                    self.used(t),
                    self.has_shift[t],
                )
            )
        return (tuple(streams), tuple(self.pending))

    # -- slots

    def usable(self, stream: int, i: int) -> bool:
        c = self.cells[stream][i]
        if c is None:
            return True
        if len(c.seqs) != 1 or self.cfg.swa_type == SWA_NONE:
            return False
        (q,) = c.seqs
        return model_is_masked_swa(
            self.cfg.n_swa, self.cfg.swa_type, c.pos, self.seq_pos_max(q) + 1
        )

    def find_slot(
        self, toks: Sequence[tuple[int, Sequence[int]]], groups: int
    ) -> list[tuple[int, list[int]]] | None:
        n_groups = groups if self.cfg.n_stream > 1 else 1
        per = len(toks) // n_groups
        out = []
        for g in range(n_groups):
            stream = self.cfg.stream_of(min(toks[g * per][1]))
            head = self.heads[stream]
            if head > self.used(stream) + 2 * per:
                head = 0
            ring = [(head + k) % self.cfg.kv_size for k in range(self.cfg.kv_size)]
            found = [i for i in ring if self.usable(stream, i)][:per]
            if len(found) < per:
                return None
            out.append((stream, found))
        return out

    def apply(
        self,
        slot: Sequence[tuple[int, Sequence[int]]],
        toks: Sequence[tuple[int, Sequence[int]]],
        ext: Sequence[tuple[int, int]] | None = None,
    ) -> None:
        overwritten: dict[int, int] = {}
        k = 0
        for stream, idxs in slot:
            for i in idxs:
                old = self.cells[stream][i]
                if old is not None:
                    (q,) = old.seqs
                    overwritten[q] = max(overwritten.get(q, -1), old.pos)
                pos, seqs = toks[k]
                self.cells[stream][i] = MCell(pos, set(seqs), pos, ext[k] if ext else (0, 0))
                k += 1
        for q in sorted(overwritten):
            lo = self.seq_pos_min(q)
            if lo != -1 and lo <= overwritten[q]:
                self.seq_rm(q, lo, overwritten[q] + 1)
        for stream, idxs in slot:
            self.heads[stream] = idxs[-1] + 1

    # -- sequence operations

    @staticmethod
    def _norm(p0: int, p1: int) -> tuple[int, int]:
        return max(p0, 0), (INT32_MAX if p1 < 0 else p1)

    def _free(self, stream: int, freed: list[int]) -> None:
        if freed:
            self.heads[stream] = min(self.heads[stream], min(freed))

    def seq_rm(self, s: int, p0: int, p1: int) -> bool:
        p0, p1 = self._norm(p0, p1)
        streams = range(self.cfg.n_stream) if s == -1 else [self.cfg.stream_of(s)]
        for t in streams:
            freed = []
            for i, c in enumerate(self.cells[t]):
                if c is None or not p0 <= c.pos < p1:
                    continue
                if s == -1:
                    c.seqs.clear()
                else:
                    c.seqs.discard(s)
                if not c.seqs:
                    self.cells[t][i] = None
                    freed.append(i)
            self._free(t, freed)
        return True

    def seq_cp(self, src: int, dst: int, p0: int, p1: int) -> None:
        s0, s1 = self.cfg.stream_of(src), self.cfg.stream_of(dst)
        if s0 == s1:
            q0, q1 = self._norm(p0, p1)
            for c in self.cells[s0]:
                if c is not None and src in c.seqs and q0 <= c.pos < q1:
                    c.seqs.add(dst)
            return
        size = self.cfg.kv_size
        if not ((p0 <= 0 or p0 >= size - 1) and (p1 <= 0 or p1 >= size - 1)):
            raise ValueError("cross-stream partial copy")
        self.pending.append((s0, s1))
        self.has_shift[s1] = False
        new: list[MCell | None] = [None] * size
        for i, c in enumerate(self.cells[s0]):
            if c is not None and src in c.seqs:
                new[i] = MCell(c.pos, {dst}, c.rope_pos, c.ext)
                if c.pos != c.rope_pos:
                    self.has_shift[s1] = True
        self.cells[s1] = new
        self.heads[s1] = self.heads[s0]

    def seq_keep(self, s: int) -> None:
        t = self.cfg.stream_of(s)
        freed = []
        for i, c in enumerate(self.cells[t]):
            if c is None:
                continue
            if s in c.seqs:
                c.seqs = {s}
            else:
                self.cells[t][i] = None
                freed.append(i)
        self._free(t, freed)

    def seq_add(self, s: int, p0: int, p1: int, delta: int) -> None:
        p0, p1 = self._norm(p0, p1)
        if delta == 0 or p0 >= p1:
            return
        t = self.cfg.stream_of(s)
        freed = []
        for i, c in enumerate(self.cells[t]):
            if c is not None and s in c.seqs and p0 <= c.pos < p1:
                self.has_shift[t] = True
                c.pos += delta
                if c.pos < 0:
                    self.cells[t][i] = None
                    freed.append(i)
        self.heads[t] = min(freed) if freed else 0

    def seq_div(self, s: int, p0: int, p1: int, d: int) -> None:
        p0, p1 = self._norm(p0, p1)
        if d == 1 or p0 >= p1:
            return
        t = self.cfg.stream_of(s)
        for c in self.cells[t]:
            if c is not None and s in c.seqs and p0 <= c.pos < p1:
                self.has_shift[t] = True
                c.pos = c.pos // d

    def update(self) -> None:
        self.pending.clear()
        if any(self.has_shift):
            for t in self.cells:
                for c in t:
                    if c is not None:
                        c.rope_pos = c.pos
            self.has_shift = [False] * self.cfg.n_stream

    def clear(self) -> None:
        self.cells = [[None] * self.cfg.kv_size for _ in range(self.cfg.n_stream)]
        self.heads = [0] * self.cfg.n_stream
        self.has_shift = [False] * self.cfg.n_stream

    # -- the KQ mask, entry by entry

    def mask(
        self,
        toks: Sequence[tuple[int, Sequence[int]]],
        groups: int,
        n_kv: int,
        ext: Sequence[tuple[int, int]] | None = None,
        causal: bool = True,
        alibi: bool = False,
    ) -> list[list[list[float]]]:
        n_ms = 1 if self.cfg.n_stream == 1 else groups
        per = len(toks) // n_ms
        out = []
        for g in range(n_ms):
            rows = []
            for ii in range(per):
                p1, seqs = toks[g * per + ii]
                q = seqs[0]
                cells = self.cells[self.cfg.stream_of(q)]
                row = []
                for j in range(n_kv):
                    c = cells[j]
                    see = c is not None and q in c.seqs
                    if see and causal:
                        assert c is not None
                        if c.pos > p1:
                            see = False
                        elif ext is not None and c.pos == p1:
                            x1, y1 = ext[g * per + ii]
                            if (c.ext[1], c.ext[0]) > (y1, x1):
                                see = False
                    if see and self.cfg.swa_type != SWA_NONE:
                        assert c is not None
                        see = not model_is_masked_swa(self.cfg.n_swa, self.cfg.swa_type, c.pos, p1)
                    if not see:
                        row.append(float("-inf"))
                    else:
                        assert c is not None
                        row.append(-float(abs(c.pos - p1)) + 0.0 if alibi else 0.0)
                rows.append(row)
            out.append(rows)
        return out


def state_tuple(state: object) -> tuple[object, ...]:
    """A reference/adapter ``KVState`` in the model's tuple layout."""
    streams = tuple(
        (
            tuple(s.pos),
            tuple(tuple(x) for x in s.seqs),
            tuple(s.shift),
            tuple(tuple(e) for e in s.ext),
            s.head,
            s.used,
            s.has_shift,
        )
        for s in state.streams  # type: ignore[attr-defined]
    )
    return (streams, tuple(tuple(p) for p in state.pending_copies))  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------- memory doubles


class RecordingSplitter:
    """Wraps a batch splitter and logs every split call as ``(method, args...)``."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.calls: list[tuple[object, ...]] = []

    @property
    def n_tokens(self) -> int:
        return int(self.inner.n_tokens)  # type: ignore[attr-defined]

    @property
    def n_used(self) -> int:
        return int(self.inner.n_used)  # type: ignore[attr-defined]

    def split_reset(self) -> None:
        self.calls.append(("split_reset",))
        self.inner.split_reset()  # type: ignore[attr-defined]

    def split_simple(self, n_ubatch: int) -> UBatch:
        self.calls.append(("split_simple", n_ubatch))
        return self.inner.split_simple(n_ubatch)  # type: ignore[attr-defined]

    def split_equal(self, n_ubatch: int, sequential: bool, n_keep_tail: int = 0) -> UBatch:
        self.calls.append(("split_equal", n_ubatch, sequential, n_keep_tail))
        return self.inner.split_equal(n_ubatch, sequential, n_keep_tail)  # type: ignore[attr-defined]

    def split_seq(self, n_ubatch: int) -> UBatch:
        self.calls.append(("split_seq", n_ubatch))
        return self.inner.split_seq(n_ubatch)  # type: ignore[attr-defined]

    def methods(self) -> list[tuple[object, ...]]:
        """Distinct split calls, in first-use order (resets dropped)."""
        out: list[tuple[object, ...]] = []
        for c in self.calls:
            if c[0] != "split_reset" and c not in out:
                out.append(c)
        return out


class ScriptedContext:
    def __init__(self, memory: ScriptedMemory, status: int, what: str) -> None:
        self.memory = memory
        self.status = status
        self.what = what
        self.ubatches: list[UBatch] = []

    def get_status(self) -> int:
        return self.status

    def apply(self) -> bool:
        self.memory.log.append(("apply", self.what))
        return True

    def next(self) -> bool:
        return False


class ScriptedMemory:
    """A memory whose statuses follow a script, logging every call the coordinator makes.

    ``batch`` lists the statuses of successive ``init_batch`` calls (the last one repeats);
    ``update(optimize)`` gives the status of an ``init_update``.
    """

    def __init__(self, batch: Sequence[int], update: dict[bool, int] | None = None) -> None:
        self.batch = list(batch)
        self.update = {False: 1, True: 1} if update is None else dict(update)
        self.log: list[tuple[object, ...]] = []
        self.n_batch = 0

    def init_batch(
        self, splitter: object, n_ubatch: int, embd_all: bool = False
    ) -> ScriptedContext:
        self.log.append(("init_batch", n_ubatch, embd_all))
        st = self.batch[min(self.n_batch, len(self.batch) - 1)]
        self.n_batch += 1
        return ScriptedContext(self, st, "batch")

    def init_update(self, optimize: bool = False) -> ScriptedContext:
        self.log.append(("init_update", optimize))
        return ScriptedContext(self, self.update[optimize], f"update({optimize})")

    def init_full(self) -> ScriptedContext:
        return ScriptedContext(self, 0, "full")

    def seq_rm(self, seq_id: int, p0: int = -1, p1: int = -1) -> bool:
        self.log.append(("seq_rm", seq_id, p0, p1))
        return True


# ---------------------------------------------------------------------------- replayable sequences


def _decode_tokens(
    model: ModelCache, seqs: Sequence[int], counts: Sequence[int]
) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """Tokens continuing each sequence from its last position (what llama.cpp's batch
    validation accepts), sequence-major."""
    toks = []
    for s, n in zip(seqs, counts):
        start = model.seq_pos_max(s) + 1
        toks += [(start + k, (s,)) for k in range(n)]
    return tuple(toks)


def apply_op(model: ModelCache, op: Op) -> bool:
    """Run one operation on the model; returns False for a Decode that did not fit."""
    if isinstance(op, Decode):
        sim = model.copy()
        slots = []
        for toks, g in zip(op.tokens, op.groups):
            slot = sim.find_slot(toks, g or 1)
            if slot is None:
                return False
            sim.apply(slot, toks)
            slots.append(slot)
        if not op.rollback:
            for toks, slot in zip(op.tokens, slots):
                model.apply(slot, toks)
        return True
    if isinstance(op, SeqRm):
        model.seq_rm(op.seq_id, op.p0, op.p1)
    elif isinstance(op, SeqCp):
        model.seq_cp(op.seq_id_src, op.seq_id_dst, op.p0, op.p1)
    elif isinstance(op, SeqKeep):
        model.seq_keep(op.seq_id)
    elif isinstance(op, SeqAdd):
        model.seq_add(op.seq_id, op.p0, op.p1, op.delta)
    elif isinstance(op, SeqDiv):
        model.seq_div(op.seq_id, op.p0, op.p1, op.d)
    elif isinstance(op, Update):
        model.update()
    elif isinstance(op, Clear):
        model.clear()
    return True


@st.composite
def op_sequences(draw: st.DrawFn, cfg: ModelConfig, max_ops: int = 12) -> list[Op]:
    """A sequence of operations that can be replayed through llama.cpp's public API: every
    Decode is one ubatch of single-sequence tokens continuing their sequences (sequence-major,
    so it is the ubatch llama.cpp's own split produces with ``n_ubatch >= n_tokens``),
    cross-stream copies use full ranges, and no operation is an error."""
    model = ModelCache(cfg)
    n_seq = cfg.n_seq_max
    ops: list[Op] = []
    for _ in range(draw(st.integers(1, max_ops))):
        kind = draw(
            st.sampled_from(["decode", "decode", "rm", "cp", "keep", "add", "div", "clear"])
        )
        s = draw(st.integers(0, n_seq - 1))
        hi = max([model.seq_pos_max(q) for q in range(n_seq)] + [0]) + 2
        p0, p1 = draw(st.integers(-1, hi)), draw(st.integers(-1, hi + 1))
        op: Op
        if kind == "decode":
            seqs = sorted(draw(st.sets(st.integers(0, n_seq - 1), min_size=1, max_size=n_seq)))
            per = draw(st.integers(1, 3))
            toks = _decode_tokens(model, seqs, [per] * len(seqs))
            op = Decode((toks,), (len(seqs),))
        elif kind == "rm":
            op = SeqRm(draw(st.sampled_from([-1, s])), p0, p1)
        elif kind == "cp":
            dst = draw(st.integers(0, n_seq - 1))
            if cfg.stream_of(s) != cfg.stream_of(dst):
                p0, p1 = -1, -1
            op = SeqCp(s, dst, p0, p1)
        elif kind == "keep":
            op = SeqKeep(s)
        elif kind == "add":
            op = SeqAdd(s, p0, p1, draw(st.integers(-4, 4)))
        elif kind == "div":
            op = SeqDiv(s, p0, p1, draw(st.integers(1, 3)))
        else:
            op = Clear()
        apply_op(model, op)
        ops.append(op)
    return ops


def replay(handle: object, ops: Sequence[Op], n_seq: int) -> list[tuple[object, ...]]:
    """Run ``ops`` on a ``kv.cache`` handle; after each, observe (accepted, [(seq_pos_min,
    seq_pos_max) per sequence]). A llama.cpp replayer produces the same observations with
    ``llama_decode(...) == 0`` and ``llama_memory_seq_pos_min/max``."""
    h: Any = handle
    out: list[tuple[object, ...]] = []
    for op in ops:
        accepted = True
        if isinstance(op, Decode):
            ubs = op.ubatches()
            slots = h.prepare(ubs)
            accepted = slots is not None
            if slots is not None:
                for ub, slot in zip(ubs, slots):
                    h.apply_ubatch(slot, ub)
        elif isinstance(op, SeqRm):
            h.seq_rm(op.seq_id, op.p0, op.p1)
        elif isinstance(op, SeqCp):
            h.seq_cp(op.seq_id_src, op.seq_id_dst, op.p0, op.p1)
        elif isinstance(op, SeqKeep):
            h.seq_keep(op.seq_id)
        elif isinstance(op, SeqAdd):
            h.seq_add(op.seq_id, op.p0, op.p1, op.delta)
        elif isinstance(op, SeqDiv):
            h.seq_div(op.seq_id, op.p0, op.p1, op.d)
        elif isinstance(op, Update):
            h.update()
        elif isinstance(op, Clear):
            h.clear()
        out.append((accepted, [(h.seq_pos_min(s), h.seq_pos_max(s)) for s in range(n_seq)]))
    return out


def model_observations(cfg: ModelConfig, ops: Sequence[Op]) -> list[tuple[object, ...]]:
    model = ModelCache(cfg)
    out: list[tuple[object, ...]] = []
    for op in ops:
        accepted = apply_op(model, op)
        obs = [(model.seq_pos_min(s), model.seq_pos_max(s)) for s in range(cfg.n_seq_max)]
        out.append((accepted, obs))
    return out
