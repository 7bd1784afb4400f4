"""The KV cache (llama.cpp's ``llama_kv_cache``): streams, slots, apply/restore, sequence ops,
K-shift bookkeeping and the per-layer K/V tensors.

Vocabulary follows llama.cpp:

* **stream**: an independent cell table. ``n_stream = 1`` when the cache is unified (or
  ``n_seq_max == 1``), else ``n_seq_max`` with sequence ``s`` in stream ``s``.
* **slot** (:class:`SlotInfo`): for each stream group of a ubatch, the cells its tokens go to.
  ``find_slot`` computes one without changing anything; ``apply_ubatch`` writes the ubatch there.
* **undo** (:class:`~reference_impl.kv.cells.CellJournal`): what ``apply_ubatch`` returns; passing
  it to ``restore`` puts every touched cell, head and shift flag back exactly. ``prepare`` is
  find_slot + apply for each ubatch followed by restore in reverse order, so it never changes the
  cache (see spec/kv.md, decision D2 on llama.cpp's sliding-window purge).
* **K-shift**: ``seq_add``/``seq_div`` change positions at once and accumulate per-cell pending
  rotations; ``update`` hands them to the decoder's RoPE callback once and clears them.

Bad input raises :class:`~reference_impl.errors.KVCacheError` (codes ``KV_*``) before anything is
modified. Rules that need a decision are called through their modules (``cells``, ``swa``) so
the conformance mutants can swap them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from reference_impl.batch.types import LLAMA_MAX_SEQ, UBatch
from reference_impl.errors import KVCacheError
from reference_impl.kv import cells as kv_cells
from reference_impl.kv import swa
from reference_impl.kv.cells import POS_NONE, CellJournal, KVCells
from reference_impl.spec_links import implements

INT32_MAX = 2**31 - 1
N_KV_PAD = 256  # n_kv is padded to a multiple of this (llama_kv_cache::get_n_kv)

# k_shift_fn(layer, k, shift): rotate the keys of layer ``layer`` in place by the per-cell
# position deltas ``shift`` (int32 [n_stream, kv_size], 0 for empty cells).
KShiftFn = Callable[[int, torch.Tensor, torch.Tensor], None]


@dataclass(frozen=True)
class KVCacheConfig:
    """Shape and rules of one KV cache. ``n_layer = 0`` keeps only the cell bookkeeping."""

    kv_size: int
    n_seq_max: int = 1
    unified: bool = False
    n_swa: int = 0
    swa_type: int = swa.SWAType.NONE
    n_pos_per_embd: int = 1  # 4 for M-RoPE: no K-shift (seq_add/seq_div) possible
    n_layer: int = 0
    n_head_kv: int = 1
    head_dim: int = 1
    dtype: torch.dtype = torch.float32
    device: str = "cpu"

    @implements("KV-022", "KV-027")
    def validate(self) -> None:
        def bad(msg: str, fld: str) -> KVCacheError:
            return KVCacheError("KV_CONFIG", msg, field=fld)

        if self.kv_size <= 0:
            raise bad(f"kv_size must be positive, got {self.kv_size}", "kv_size")
        if not 1 <= self.n_seq_max <= LLAMA_MAX_SEQ:
            raise bad(f"n_seq_max must be in [1, {LLAMA_MAX_SEQ}]", "n_seq_max")
        if self.swa_type not in tuple(swa.SWAType):
            raise bad(f"unknown swa_type {self.swa_type}", "swa_type")
        if self.swa_type != swa.SWAType.NONE and self.n_swa <= 0:
            raise bad("a sliding window needs n_swa > 0", "n_swa")
        if self.n_layer < 0 or self.n_head_kv <= 0 or self.head_dim <= 0:
            raise bad("n_layer >= 0, n_head_kv > 0 and head_dim > 0 are required", "n_layer")
        if self.dtype not in (torch.float32, torch.float16):
            raise bad(f"K/V dtype must be float32 or float16, got {self.dtype}", "dtype")


@dataclass(frozen=True)
class SlotInfo:
    """Where a ubatch goes: group ``g`` (tokens ``g*size .. (g+1)*size``) -> stream ``strm[g]``,
    cells ``idxs[g]``. One group when ``n_stream == 1``, one per unique sequence otherwise."""

    strm: tuple[int, ...]
    idxs: tuple[tuple[int, ...], ...]

    @property
    def n_stream(self) -> int:
        return len(self.strm)

    @property
    def size(self) -> int:
        """Tokens per group."""
        return len(self.idxs[0]) if self.idxs else 0

    def token_cells(self) -> list[tuple[int, int]]:
        """``(stream, cell)`` of every ubatch token, in ubatch order."""
        return [(st, c) for st, idx in zip(self.strm, self.idxs) for c in idx]


def _group_fault(idx: tuple[int, ...], size: int, n_cells: int) -> str | None:
    """Why slot group ``idx`` cannot hold ``size`` rows of a stream of ``n_cells`` cells (as
    "repeated cells or a wrong size" / "a cell outside the stream"), or None; ``size`` >= 1."""
    if len(idx) != size or len(set(idx)) != size:
        return "repeated cells or a wrong size"
    if min(idx) < 0 or max(idx) >= n_cells:
        return "a cell outside the stream"
    return None


@dataclass(frozen=True)
class StreamState:
    """A comparable snapshot of one stream (tests and adapters)."""

    pos: tuple[int, ...]
    seqs: tuple[tuple[int, ...], ...]
    shift: tuple[int, ...]
    ext: tuple[tuple[int, int], ...]
    head: int
    used: int
    has_shift: bool


@dataclass(frozen=True)
class KVState:
    streams: tuple[StreamState, ...]
    pending_copies: tuple[tuple[int, int], ...] = field(default=())


@dataclass(frozen=True)
class UpdateResult:
    copied: tuple[tuple[int, int], ...]  # stream copies performed, (src, dst)
    shifted: bool  # pending K-shifts were consumed


@implements("KV-028")
class KVCache:
    """See the module docstring. Satisfies ``reference_impl.batch.types.MemoryView``."""

    @implements("KV-003", "KV-027")
    def __init__(self, config: KVCacheConfig) -> None:
        self._write_slot: SlotInfo | None = None
        self._write_idx: list[torch.Tensor | slice] = []
        # per layer, the (K, V) destination views of a one-run slot (None: index copies)
        self._write_dst: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        config.validate()
        self.config = config
        self.kv_size = config.kv_size
        self.n_seq_max = config.n_seq_max
        self.n_stream = 1 if config.unified else config.n_seq_max
        self.n_swa = config.n_swa
        self.swa_type = int(config.swa_type)
        # n_stream == 1: every sequence id < LLAMA_MAX_SEQ lives in stream 0; otherwise the
        # mapping is resized to n_stream entries and sequence s lives in stream s.
        if self.n_stream == 1:
            self.seq_to_stream: tuple[int, ...] = (0,) * LLAMA_MAX_SEQ
        else:
            self.seq_to_stream = tuple(range(self.n_stream))
        self.cells = [KVCells(config.kv_size, stream=s) for s in range(self.n_stream)]
        self.heads = [0] * self.n_stream
        self.pending_copies: list[tuple[int, int]] = []
        shape = (self.n_stream, config.kv_size, config.n_head_kv, config.head_dim)
        self.k: list[torch.Tensor] = [
            torch.zeros(shape, dtype=config.dtype, device=config.device)
            for _ in range(config.n_layer)
        ]
        self.v: list[torch.Tensor] = [
            torch.zeros(shape, dtype=config.dtype, device=config.device)
            for _ in range(config.n_layer)
        ]

    # ------------------------------------------------------------------ validation helpers

    @implements("KV-003")
    def _check_seq(self, seq_id: int, *, allow_all: bool = False, fld: str = "seq_id") -> None:
        if allow_all and seq_id == -1:
            return
        if not 0 <= seq_id < len(self.seq_to_stream):
            allowed = "-1 or " if allow_all else ""
            raise KVCacheError(
                "KV_SEQ_ID_RANGE",
                f"sequence id {seq_id} is not {allowed}in [0, {len(self.seq_to_stream)})",
                field=fld,
                seq_id=seq_id,
            )

    def _check_stream(self, stream: int) -> None:
        if not 0 <= stream < self.n_stream:
            raise KVCacheError(
                "KV_STREAM_RANGE",
                f"stream {stream} is not in [0, {self.n_stream})",
                field="stream",
            )

    @implements("KV-020")
    def _check_shiftable(self) -> None:
        if self.config.n_pos_per_embd != 1:
            raise KVCacheError(
                "KV_SHIFT_UNSUPPORTED",
                "position shifts need n_pos_per_embd == 1 (not M-RoPE)",
                field="n_pos_per_embd",
            )

    @implements("KV-004", "KV-012")
    def _check_ubatch(self, ub: UBatch) -> int:
        """Validate a ubatch for this cache; returns the number of stream groups."""
        n = ub.n_tokens
        if n <= 0:
            raise KVCacheError("KV_UBATCH_EMPTY", "a ubatch needs at least one token")
        n_seq_id = np.asarray(ub.n_seq_id[:n])
        seq_id = np.asarray(ub.seq_id[:n]).reshape(n, -1)
        pos = np.asarray(ub.pos[:n])
        bad = np.flatnonzero(n_seq_id < 1)
        if bad.size:
            raise KVCacheError(
                "KV_UBATCH_LAYOUT", "token without a sequence", field="n_seq_id", index=int(bad[0])
            )
        listed = np.arange(seq_id.shape[1])[None, :] < n_seq_id[:, None]
        out_of_range = listed & ((seq_id < 0) | (seq_id >= len(self.seq_to_stream)))
        if out_of_range.any():
            i, j = (int(x[0]) for x in np.nonzero(out_of_range))
            s = int(seq_id[i, j])
            raise KVCacheError(
                "KV_SEQ_ID_RANGE",
                f"sequence id {s} is not in [0, {len(self.seq_to_stream)})",
                field="seq_id",
                index=i,
                seq_id=s,
            )
        bad = np.flatnonzero(pos < 0)
        if bad.size:
            i = int(bad[0])
            raise KVCacheError(
                "KV_POS_RANGE", f"negative position {int(pos[i])}", field="pos", index=i
            )
        if self.n_stream == 1:
            return 1
        n_groups = ub.n_seqs_unq
        if n_groups <= 0 or n % n_groups:
            raise KVCacheError(
                "KV_UBATCH_LAYOUT",
                f"{n} tokens cannot form {n_groups} equal stream groups",
                field="n_seqs_unq",
            )
        per = n // n_groups
        want = np.repeat(np.asarray(ub.seq_id_unq[:n_groups]), per)
        bad = np.flatnonzero((n_seq_id != 1) | (seq_id[:, 0] != want))
        if bad.size:
            i = int(bad[0])
            raise KVCacheError(
                "KV_UBATCH_LAYOUT",
                "a multi-stream ubatch must be sequence-major with one sequence per token "
                f"(token {i} should be in sequence {int(want[i])} only)",
                field="seq_id",
                index=i,
                seq_id=int(want[i]),
            )
        return n_groups

    # ------------------------------------------------------------------ sizes and views

    def get_size(self) -> int:
        return self.kv_size

    def get_can_shift(self) -> bool:
        return self.config.n_pos_per_embd == 1

    def get_has_shift(self) -> bool:
        return any(c.has_shift for c in self.cells)

    @implements("KV-011")
    def get_n_kv(self, sinfo: SlotInfo) -> int:
        """Columns the attention reads: used cells rounded up to 256, capped at kv_size."""
        result = 0
        for st in sinfo.strm:
            self._check_stream(st)
            cells = self.cells[st]
            padded = -(-cells.used_max_p1() // N_KV_PAD) * N_KV_PAD
            result = max(result, min(cells.size(), max(N_KV_PAD, padded)))
        return result

    def get_used(self) -> int:
        return sum(c.get_used() for c in self.cells)

    # ------------------------------------------------------------------ slots

    @implements("KV-005", "KV-006", "KV-012")
    def find_slot(self, ubatch: UBatch, cont: bool = False) -> SlotInfo | None:
        """Cells for every token of ``ubatch`` (see KV-006/KV-007), or None. Never mutates."""
        n_groups = self._check_ubatch(ubatch)
        n_tokens = ubatch.n_tokens // n_groups
        strm: list[int] = []
        idxs: list[tuple[int, ...]] = []
        for g in range(n_groups):
            stream = self.seq_to_stream[int(ubatch.seq_id_unq[g])]
            cells = self.cells[stream]
            if n_tokens > cells.size():
                return None
            head_cur = self.heads[stream]
            # Plenty of free cells before the head: restart from 0, hoping to fill the cache.
            if head_cur > cells.get_used() + 2 * n_tokens:
                head_cur = 0
            found = (
                self._scan_cont(cells, head_cur, n_tokens)
                if cont
                else self._scan(cells, head_cur, n_tokens)
            )
            if found is None:
                return None
            strm.append(stream)
            idxs.append(tuple(found))
        return SlotInfo(tuple(strm), tuple(idxs))

    @implements("KV-005")
    def _usable_between(self, cells: KVCells, start: int, end: int) -> list[int]:
        """Usable cells in [start, end), ascending: empty, or one sequence past its window."""
        pos = cells.pos[start:end]
        empty = pos == POS_NONE
        if self.swa_type == swa.SWAType.NONE:
            return (np.flatnonzero(empty) + start).tolist()
        usable = empty.copy()
        for j in np.flatnonzero(~empty).tolist():
            m = cells.seq[start + j]
            if m and m & (m - 1) == 0:
                c = m.bit_length() - 1
                if swa.is_masked_swa(
                    self.n_swa, self.swa_type, int(pos[j]), cells.seq_pos_max(c) + 1
                ):
                    usable[j] = True
        return (np.flatnonzero(usable) + start).tolist()

    @implements("KV-005")
    def _scan(self, cells: KVCells, head: int, n: int) -> list[int] | None:
        """The first ``n`` usable cells in ring order from ``head`` (at most size cells tested)."""
        size = cells.size()
        found: list[int] = []
        remaining = size
        start = head
        chunk = max(64, 2 * n)  # scan in growing chunks: cost follows the distance scanned
        while remaining > 0 and len(found) < n:
            end = min(size, start + min(chunk, remaining))
            found.extend(self._usable_between(cells, start, end)[: n - len(found)])
            remaining -= end - start
            start = end if end < size else 0
            chunk *= 2
        return found if len(found) == n else None

    @implements("KV-007")
    def _scan_cont(self, cells: KVCells, head: int, n: int) -> list[int] | None:
        """``n`` contiguous usable cells, windows starting at ``head`` (llama.cpp cont = true)."""
        size = cells.size()
        tested = 0
        found: list[int] = []
        while True:
            if head + n > size:
                tested += size - head
                head = 0
                continue
            for _ in range(n):
                idx = head
                head += 1
                tested += 1
                if self._usable_between(cells, idx, idx + 1):
                    found.append(idx)
                else:
                    break
            if len(found) == n:
                return found
            found.clear()
            if tested >= size:
                return None

    def _open_journal(self) -> CellJournal:
        if any(c.journal is not None for c in self.cells):
            raise RuntimeError("KV cache journal already open")
        j = CellJournal(heads=list(self.heads), has_shift=[c.has_shift for c in self.cells])
        for c in self.cells:
            c.journal = j
        return j

    def _close_journal(self) -> None:
        for c in self.cells:
            c.journal = None

    @implements("DEC-022", "KV-009", "PHASE-011", "PHASE-014", "PHASE-020")
    def apply_ubatch(self, sinfo: SlotInfo, ubatch: UBatch) -> CellJournal:
        """Write ``ubatch`` at ``sinfo`` (KV-009); returns the undo record for :meth:`restore`."""
        self._check_slot(sinfo, ubatch)
        journal = self._open_journal()
        try:
            self._apply(sinfo, ubatch)
        finally:
            self._close_journal()
        return journal

    @implements("KV-004", "KV-012")
    def _check_slot(self, sinfo: SlotInfo, ub: UBatch) -> None:
        n_groups = self._check_ubatch(ub)
        if (
            not sinfo.idxs
            or sinfo.n_stream != n_groups
            or sinfo.n_stream * sinfo.size != ub.n_tokens
        ):
            raise KVCacheError(
                "KV_SLOT_MISMATCH",
                f"slot for {sinfo.n_stream}x{sinfo.size} tokens, ubatch has {ub.n_tokens}",
                field="sinfo",
            )
        for g, st in enumerate(sinfo.strm):
            self._check_stream(st)
            # Every token of the group must live in the group's stream (single stream: all do).
            if self.n_stream > 1:
                seq = int(ub.seq_id_unq[g])
                if self.seq_to_stream[seq] != st:
                    raise KVCacheError(
                        "KV_STREAM_MISMATCH",
                        f"sequence {seq} lives in stream {self.seq_to_stream[seq]}, slot group "
                        f"{g} is in stream {st}",
                        field="seq_id",
                        index=g * sinfo.size,
                        seq_id=seq,
                    )
            cells = self.cells[st]
            idx = sinfo.idxs[g]
            why = _group_fault(idx, sinfo.size, cells.size())
            if why is not None:
                raise KVCacheError("KV_SLOT_MISMATCH", f"group {g} has {why}")
            arr = np.asarray(idx)
            for j in np.flatnonzero(cells.pos[arr] != POS_NONE).tolist():
                if cells.seq_count(idx[j]) != 1:
                    raise KVCacheError(
                        "KV_SLOT_MISMATCH",
                        f"cell {idx[j]} is shared by several sequences and cannot be overwritten",
                        index=g * sinfo.size + j,
                    )

    @implements("KV-009")
    def _apply(self, sinfo: SlotInfo, ub: UBatch) -> None:
        # The largest position overwritten per sequence: those sequences are then purged up to
        # it, so that every sequence keeps all positions between its min and max (llama.h).
        max_rm: dict[int, int] = {}
        n = ub.n_tokens
        is_2d = ub.is_pos_2d()
        size = sinfo.size
        pos = ub.pos.tolist()
        seq_rows = ub.seq_id.tolist()
        n_seq_id = ub.n_seq_id.tolist()
        for g, st in enumerate(sinfo.strm):
            cells = self.cells[st]
            for ii, idx in enumerate(sinfo.idxs[g]):
                i = g * size + ii
                if cells.pos[idx] != POS_NONE:
                    q = cells.seq_get(idx)
                    max_rm[q] = max(max_rm.get(q, -1), int(cells.pos[idx]))
                    cells.rm(idx)
                cells.pos_set(idx, pos[i])
                if is_2d:
                    cells.ext_set(idx, pos[i + 2 * n], pos[i + n])
                for s in seq_rows[i][: n_seq_id[i]]:
                    cells.seq_add(idx, s)
        for q in sorted(max_rm):
            cells = self.cells[self.seq_to_stream[q]]
            p_min = cells.seq_pos_min(q)
            if p_min <= max_rm[q]:
                self._seq_rm_in(self.seq_to_stream[q], q, p_min, max_rm[q] + 1)
        for g, st in enumerate(sinfo.strm):
            self.heads[st] = sinfo.idxs[g][-1] + 1

    @implements("KV-010")
    def restore(self, undo: CellJournal) -> None:
        """Put back every cell, head and shift flag recorded by ``undo`` (KV-010)."""
        for (st, i), state in undo.cells.items():
            self.cells[st].set_state(i, state)
        self.heads[:] = undo.heads
        for c, flag in zip(self.cells, undo.has_shift):
            c.has_shift = flag

    @implements("DEC-023", "KV-008", "KV-012", "MEM-008")
    def prepare(self, ubatches: Sequence[UBatch]) -> list[SlotInfo] | None:
        """A slot per ubatch, each placed as if the earlier ones were applied; None when one
        does not fit. The cache is left exactly as it was (KV-008)."""
        undos: list[CellJournal] = []
        try:
            out: list[SlotInfo] = []
            for ub in ubatches:
                sinfo = self.find_slot(ub)
                if sinfo is None:
                    return None
                out.append(sinfo)
                undos.append(self.apply_ubatch(sinfo, ub))
            return out
        finally:
            for undo in reversed(undos):
                self.restore(undo)

    # ------------------------------------------------------------------ sequence operations

    @staticmethod
    @implements("KV-013")
    def _range(p0: int, p1: int) -> tuple[int, int]:
        """Half-open [p0, p1) with negative bounds meaning 0 and INT32_MAX (itself excluded)."""
        return (0 if p0 < 0 else p0), (INT32_MAX if p1 < 0 else p1)

    def _lower_head(self, stream: int, emptied: list[int]) -> None:
        if emptied:
            self.heads[stream] = min(self.heads[stream], min(emptied))

    @implements("KV-014")
    def _seq_rm_in(self, stream: int, seq_id: int, p0: int, p1: int) -> None:
        cells = self.cells[stream]
        emptied = [
            i
            for i in cells.seq_cells(seq_id)
            if p0 <= int(cells.pos[i]) < p1 and cells.seq_rm(i, seq_id)
        ]
        self._lower_head(stream, emptied)

    @implements("DEC-040", "KV-013", "KV-014")
    def seq_rm(self, seq_id: int, p0: int = -1, p1: int = -1) -> bool:
        """Remove ``seq_id`` (or, for -1, every sequence) from the cells with pos in [p0, p1)."""
        self._check_seq(seq_id, allow_all=True)
        p0, p1 = self._range(p0, p1)
        if p0 >= p1:
            return True
        if seq_id >= 0:
            self._seq_rm_in(self.seq_to_stream[seq_id], seq_id, p0, p1)
            return True
        for st, cells in enumerate(self.cells):
            emptied = cells.cells_in(p0, p1).tolist()
            for i in emptied:
                cells.rm(i)
            self._lower_head(st, emptied)
        return True

    @implements("KV-015", "KV-016", "KV-025", "PHASE-010")
    def seq_cp(self, seq_id_src: int, seq_id_dst: int, p0: int = -1, p1: int = -1) -> None:
        """Let ``seq_id_dst`` see the cells of ``seq_id_src`` in [p0, p1) (KV-015/KV-016)."""
        self._check_seq(seq_id_src, fld="seq_id_src")
        self._check_seq(seq_id_dst, fld="seq_id_dst")
        s0 = self.seq_to_stream[seq_id_src]
        s1 = self.seq_to_stream[seq_id_dst]
        if s0 == s1:
            if seq_id_src == seq_id_dst:
                return
            q0, q1 = self._range(p0, p1)
            cells = self.cells[s0]
            for i in cells.seq_cells(seq_id_src):
                if q0 <= int(cells.pos[i]) < q1:
                    cells.seq_add(i, seq_id_dst)
            return
        if not is_full_range(p0, p1, self.get_size()):
            raise KVCacheError(
                "KV_CROSS_STREAM_PARTIAL",
                f"copying sequence {seq_id_src} (stream {s0}) to {seq_id_dst} (stream {s1}) "
                f"needs the full range, got [{p0}, {p1})",
                field="p0",
                seq_id=seq_id_dst,
            )
        # The K/V rows are copied stream to stream by the next update(); the cell table of
        # the destination becomes a copy of the source sequence's cells, same indices.
        self.pending_copies.append((s0, s1))
        src, dst = self.cells[s0], self.cells[s1]
        dst.reset()
        for i in src.seq_cells(seq_id_src):
            sh = int(src.shift[i])
            dst.pos_set(i, int(src.pos[i]) - sh)
            dst.seq_add(i, seq_id_dst)
            if sh != 0:
                dst.pos_add(i, sh)
            dst.ext_set(i, int(src.ext_x[i]), int(src.ext_y[i]))
        self.heads[s1] = self.heads[s0]

    @implements("KV-017")
    def seq_keep(self, seq_id: int) -> None:
        """Drop every sequence but ``seq_id`` from its stream (KV-017)."""
        self._check_seq(seq_id)
        st = self.seq_to_stream[seq_id]
        cells = self.cells[st]
        emptied = [i for i in cells.used_cells().tolist() if cells.seq_keep(i, seq_id)]
        self._lower_head(st, emptied)

    @implements("KV-013", "KV-018")
    def seq_add(self, seq_id: int, p0: int, p1: int, delta: int) -> None:
        """Move the cells of ``seq_id`` in [p0, p1) by ``delta`` positions (KV-018)."""
        self._check_seq(seq_id)
        self._check_shiftable()
        if delta == 0:
            return
        p0, p1 = self._range(p0, p1)
        if p0 >= p1:
            return
        st = self.seq_to_stream[seq_id]
        cells = self.cells[st]
        emptied = [
            i
            for i in cells.seq_cells(seq_id)
            if p0 <= int(cells.pos[i]) < p1 and cells.pos_add(i, delta)
        ]
        # Restart the slot search at the first freed cell, or from the beginning.
        self.heads[st] = min(emptied) if emptied else 0

    @implements("KV-013", "KV-019")
    def seq_div(self, seq_id: int, p0: int, p1: int, d: int) -> None:
        """Divide the positions of ``seq_id`` in [p0, p1) by ``d``, rounding down (KV-019)."""
        self._check_seq(seq_id)
        self._check_shiftable()
        if d <= 0:
            raise KVCacheError(
                "KV_DIVISOR", f"divisor must be positive, got {d}", field="d", seq_id=seq_id
            )
        if d == 1:
            return
        p0, p1 = self._range(p0, p1)
        if p0 >= p1:
            return
        cells = self.cells[self.seq_to_stream[seq_id]]
        for i in cells.seq_cells(seq_id):
            if p0 <= int(cells.pos[i]) < p1:
                cells.pos_div(i, d)

    def seq_pos_min(self, seq_id: int) -> int:
        self._check_seq(seq_id)
        return self.cells[self.seq_to_stream[seq_id]].seq_pos_min(seq_id)

    def seq_pos_max(self, seq_id: int) -> int:
        self._check_seq(seq_id)
        return self.cells[self.seq_to_stream[seq_id]].seq_pos_max(seq_id)

    @implements("DEC-039", "KV-021")
    def clear(self, data: bool = True) -> None:
        """Empty every cell and reset every head; zero the K/V tensors when ``data``."""
        for c in self.cells:
            c.reset()
        self.heads = [0] * self.n_stream
        if data:
            for t in (*self.k, *self.v):
                t.zero_()

    # ------------------------------------------------------------------ K-shift and copies

    @implements("KV-026")
    def k_shift(self) -> torch.Tensor:
        """Pending rotation per cell, int32 ``[n_stream, kv_size]`` (0 for empty cells)."""
        out = np.stack([np.where(c.pos == POS_NONE, 0, c.shift) for c in self.cells])
        return torch.from_numpy(out.astype(np.int32))

    @implements("DEC-037", "DEC-053", "KV-026")
    def update(self, k_shift_fn: KShiftFn | None = None) -> UpdateResult:
        """Apply pending stream copies, then hand pending K-shifts to ``k_shift_fn`` once
        and clear them (KV-029)."""
        shifted = self.get_has_shift()
        if shifted and not self.get_can_shift():
            raise KVCacheError(
                "KV_SHIFT_UNSUPPORTED", "this cache cannot apply a K-shift (M-RoPE positions)"
            )
        copied = tuple(self.pending_copies)
        for src, dst in copied:
            for t in (*self.k, *self.v):
                t[dst].copy_(t[src])
        self.pending_copies.clear()
        if shifted:
            if k_shift_fn is not None and self.k:
                shift = self.k_shift().to(self.config.device)
                for il, k in enumerate(self.k):
                    k_shift_fn(il, k, shift)
            for c in self.cells:
                c.reset_shift()
        return UpdateResult(copied=copied, shifted=shifted)

    # ------------------------------------------------------------------ K/V storage

    def _check_layer(self, layer: int) -> None:
        if not 0 <= layer < len(self.k):
            raise KVCacheError(
                "KV_LAYER_RANGE", f"layer {layer} is not in [0, {len(self.k)})", field="layer"
            )

    @implements("DEC-064", "KV-027", "PHASE-011", "PHASE-012", "PHASE-014")
    def write_kv(self, layer: int, sinfo: SlotInfo, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store the ubatch rows ``k``/``v`` (``[n_tokens, n_head_kv, head_dim]``) at the slot."""
        self._check_layer(layer)
        if self._write_slot is not sinfo:  # checked and planned once per slot, for all layers
            self._plan_writes(sinfo)
        n = sinfo.n_stream * sinfo.size
        want = (n, self.config.n_head_kv, self.config.head_dim)
        if k.shape != want or v.shape != want:
            raise KVCacheError(
                "KV_SLOT_MISMATCH", f"K/V rows must have shape {want}", field="k", index=None
            )
        if self._write_dst is not None:  # one stream, consecutive cells: two slice copies
            k_dst, v_dst = self._write_dst[layer]
            k_dst.copy_(k)  # copy_ casts to the cache dtype
            v_dst.copy_(v)
            return
        k_all, v_all = self.k[layer], self.v[layer]
        for g, st in enumerate(sinfo.strm):
            idx = self._write_idx[g]
            rows = slice(g * sinfo.size, (g + 1) * sinfo.size)
            if isinstance(idx, slice):
                k_all[st, idx] = k[rows]
                v_all[st, idx] = v[rows]
            else:
                k_all[st].index_copy_(0, idx, k[rows].to(k_all.dtype))
                v_all[st].index_copy_(0, idx, v[rows].to(v_all.dtype))

    def _plan_writes(self, sinfo: SlotInfo) -> None:
        """Per stream group, the slot's cells as a slice (a run of consecutive cells, the
        usual case) or an index tensor; for a single run, the destination views per layer.
        A slot whose cells cannot take the rows (no group, a group count other than the stream
        count, an empty group, groups of unequal size, a repeated cell, a cell outside the
        stream) is refused before anything is written (KV-027)."""
        if not sinfo.size or len(sinfo.idxs) != len(sinfo.strm):
            raise KVCacheError(
                "KV_SLOT_MISMATCH",
                f"{len(sinfo.idxs)} cell groups of {sinfo.size} for {len(sinfo.strm)} streams",
                field="sinfo",
            )
        for g, (st, idx) in enumerate(zip(sinfo.strm, sinfo.idxs)):
            self._check_stream(st)
            why = _group_fault(idx, sinfo.size, self.kv_size)
            if why is not None:
                raise KVCacheError("KV_SLOT_MISMATCH", f"group {g} has {why}", field="sinfo")
        device = self.k[0].device if self.k else None
        self._write_idx = [
            slice(int(ix[0]), int(ix[-1]) + 1)
            if len(ix) and bool(np.all(np.diff(ix) == 1))
            else torch.tensor(ix, dtype=torch.long, device=device)
            for ix in sinfo.idxs
        ]
        self._write_dst = None
        if len(sinfo.strm) == 1 and isinstance(self._write_idx[0], slice):
            st, cells = sinfo.strm[0], self._write_idx[0]
            self._write_dst = [(k[st, cells], v[st, cells]) for k, v in zip(self.k, self.v)]
        self._write_slot = sinfo

    def single_cell(self, sinfo: SlotInfo) -> tuple[int, int] | None:
        """``(stream, cell)`` when the slot is one cell of one stream (a one-token ubatch),
        else None. The native decode step writes that cell of every layer itself."""
        if len(sinfo.strm) != 1 or len(sinfo.idxs[0]) != 1:
            return None
        self._check_stream(sinfo.strm[0])
        return sinfo.strm[0], int(sinfo.idxs[0][0])

    def _check_view(self, stream: int, n_kv: int) -> None:
        self._check_stream(stream)
        if not 0 < n_kv <= self.kv_size:
            raise KVCacheError(
                "KV_N_KV_RANGE", f"n_kv {n_kv} not in (0, {self.kv_size}]", field="n_kv"
            )

    @implements("KV-027")
    def kv_views(self, stream: int, n_kv: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """:meth:`kv_view` of every layer (checked once)."""
        self._check_view(stream, n_kv)
        return [(k[stream, :n_kv], v[stream, :n_kv]) for k, v in zip(self.k, self.v)]

    @implements("KV-027")
    def kv_view(self, layer: int, stream: int, n_kv: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The first ``n_kv`` cells of a stream: views ``[n_kv, n_head_kv, head_dim]``."""
        self._check_layer(layer)
        self._check_view(stream, n_kv)
        return self.k[layer][stream, :n_kv], self.v[layer][stream, :n_kv]

    # ------------------------------------------------------------------ snapshots

    def state(self) -> KVState:
        streams = []
        for st, c in enumerate(self.cells):
            streams.append(
                StreamState(
                    pos=tuple(c.pos.tolist()),
                    seqs=tuple(kv_cells._bits(m) for m in c.seq),
                    shift=tuple(c.shift.tolist()),
                    ext=tuple(zip(c.ext_x.tolist(), c.ext_y.tolist())),
                    head=self.heads[st],
                    used=c.get_used(),
                    has_shift=c.has_shift,
                )
            )
        return KVState(tuple(streams), tuple(self.pending_copies))


@implements("KV-016")
def is_full_range(p0: int, p1: int, size: int) -> bool:
    """A cross-stream copy needs each bound to be <= 0 or >= size - 1 (raw, unnormalised)."""
    return (p0 <= 0 or p0 + 1 >= size) and (p1 <= 0 or p1 + 1 >= size)
