"""KV cache mutants: the reference with one deliberate defect each (see tests/meta)."""

from __future__ import annotations

from typing import Any

import numpy as np

from conformance.mutants import Mutant, replace


def _prepare_keeps_changes(target: Any) -> Any:
    from reference_impl.kv.cache import KVCache

    def prepare(self: KVCache, ubatches: Any) -> Any:
        out = []
        for ub in ubatches:
            sinfo = self.find_slot(ub)
            if sinfo is None:
                return None
            out.append(sinfo)
            self.apply_ubatch(sinfo, ub)  # never restored
        return out

    KVCache.prepare = prepare  # type: ignore[method-assign]
    return target


def _prepare_restores_slot_cells_only(target: Any) -> Any:
    """llama.cpp's prepare: cells purged outside the slots stay purged (decision D2)."""
    from reference_impl.kv.cache import KVCache

    def prepare(self: KVCache, ubatches: Any) -> Any:
        undos = []
        out = []
        ok = True
        for ub in ubatches:
            sinfo = self.find_slot(ub)
            if sinfo is None:
                ok = False
                break
            out.append(sinfo)
            undo = self.apply_ubatch(sinfo, ub)
            slot_cells = set(sinfo.token_cells())
            undo.cells = {k: v for k, v in undo.cells.items() if k in slot_cells}
            undos.append(undo)
        for undo in reversed(undos):
            self.restore(undo)
        return out if ok else None

    KVCache.prepare = prepare  # type: ignore[method-assign]
    return target


def _seq_add_keeps_negative(target: Any) -> Any:
    from reference_impl.kv.cells import KVCells

    def pos_add(self: KVCells, i: int, d: int) -> bool:
        self._touch(i)
        p_old = int(self.pos[i])
        m = self.seq[i]
        self._index_remove(i, p_old, m)
        p_new = p_old + d
        self.has_shift = True
        if p_new == -1:
            p_new = -2  # keep the cell, even with a negative position
        self.pos[i] = p_new
        self.shift[i] += d
        self._index_add(i, p_new, m)
        return False

    KVCells.pos_add = pos_add  # type: ignore[method-assign]
    return target


def _cross_stream_partial(target: Any) -> Any:
    replace("reference_impl.kv.cache", "is_full_range", lambda p0, p1, size: True)
    return target


def _swa_edge(target: Any) -> Any:
    from reference_impl.kv import swa

    scalar, array = swa.is_masked_swa, swa.is_masked_swa_array

    def is_masked(n_swa: int, swa_type: int, p0: int, p1: int) -> bool:
        if swa_type == swa.SWAType.STANDARD:
            return p1 - p0 > n_swa
        return scalar(n_swa, swa_type, p0, p1)

    def is_masked_array(n_swa: int, swa_type: int, p0: Any, p1: Any) -> Any:
        if swa_type == swa.SWAType.STANDARD:
            return (np.asarray(p1) - np.asarray(p0)) > n_swa
        return array(n_swa, swa_type, p0, p1)

    replace("reference_impl.kv.swa", "is_masked_swa", is_masked)
    replace("reference_impl.kv.swa", "is_masked_swa_array", is_masked_array)
    return target


def _swa_mask_edge(target: Any) -> Any:
    """Only the cache's KQ mask gets the wide window; the forward pass keeps the right one, so
    decode rows differ from it (a public decode API shows the defect)."""
    import types

    from reference_impl.kv import swa

    def is_masked_array(n_swa: int, swa_type: int, p0: Any, p1: Any) -> Any:
        if swa_type == swa.SWAType.STANDARD:
            return (np.asarray(p1) - np.asarray(p0)) > n_swa
        return swa.is_masked_swa_array(n_swa, swa_type, p0, p1)

    shim = types.SimpleNamespace(SWAType=swa.SWAType, is_masked_swa_array=is_masked_array)
    replace("reference_impl.kv.mask", "swa", shim)
    return target


def _restore_keeps_head(target: Any) -> Any:
    from reference_impl.kv.cache import KVCache

    original = KVCache.restore

    def restore(self: KVCache, undo: Any) -> None:
        heads = list(self.heads)
        original(self, undo)
        self.heads[:] = heads

    KVCache.restore = restore  # type: ignore[method-assign]
    return target


def _seq_keep_leaves_shared(target: Any) -> Any:
    from reference_impl.kv.cells import KVCells

    def seq_keep(self: KVCells, i: int, s: int) -> bool:
        m = self.seq[i]
        if (m >> s) & 1:
            return False  # other sequences stay in the shared cell
        if m:
            self.rm(i)
            return True
        return False

    KVCells.seq_keep = seq_keep  # type: ignore[method-assign]
    return target


def _seq_div_llama_sign(target: Any) -> Any:
    replace("reference_impl.kv.cells", "shift_delta_div", lambda p_old, p_new: p_old - p_new)
    return target


def _n_kv_unpadded(target: Any) -> Any:
    from reference_impl.kv.cache import KVCache

    def get_n_kv(self: KVCache, sinfo: Any) -> int:
        return max(self.cells[st].used_max_p1() for st in sinfo.strm)

    KVCache.get_n_kv = get_n_kv  # type: ignore[method-assign]
    return target


def _mask_causal_edge(target: Any) -> Any:
    """A query no longer sees its own position (p0 == p1 masked)."""
    from reference_impl.kv import mask

    original = mask.build_kq_mask

    def build(cache: Any, ubatch: Any, n_kv: int, **kw: Any) -> Any:
        out = original(cache, ubatch, n_kv, **kw)
        if not kw.get("causal_attn", True):
            return out
        n = ubatch.n_tokens
        rows = out.reshape(n, n_kv)
        for i in range(n):
            q = int(ubatch.seq_id[i, 0])
            cells = cache.cells[cache.seq_to_stream[q]]
            same = np.flatnonzero(cells.pos[:n_kv] == ubatch.pos[i])
            rows[i, same.tolist()] = float("-inf")
        return out

    replace("reference_impl.kv.mask", "build_kq_mask", build)
    return target


def _seq_rm_keeps_head(target: Any) -> Any:
    from reference_impl.kv.cache import KVCache

    original = KVCache.seq_rm

    def seq_rm(self: KVCache, seq_id: int, p0: int = -1, p1: int = -1) -> bool:
        heads = list(self.heads)
        out = original(self, seq_id, p0, p1)
        self.heads[:] = heads
        return out

    KVCache.seq_rm = seq_rm  # type: ignore[method-assign]
    return target


def _no_head_restart(target: Any) -> Any:
    """find_slot always scans from the head (llama.cpp restarts at 0 when the head is far)."""
    from reference_impl.kv.cache import KVCache

    original = KVCache.find_slot

    def find_slot(self: KVCache, ubatch: Any, cont: bool = False) -> Any:
        saved = [c.get_used for c in self.cells]
        for c in self.cells:
            c.get_used = lambda: 1 << 30  # type: ignore[method-assign]
        try:
            return original(self, ubatch, cont)
        finally:
            for c, f in zip(self.cells, saved):
                c.get_used = f  # type: ignore[method-assign]

    KVCache.find_slot = find_slot  # type: ignore[method-assign]
    return target


def _n_kv_from_used_count(target: Any) -> Any:
    """get_n_kv pads the number of used cells instead of the last used cell's index + 1."""
    from reference_impl.kv.cells import KVCells

    KVCells.used_max_p1 = lambda self: self.get_used()  # type: ignore[method-assign]
    return target


def _seq_div_rounds_up(target: Any) -> Any:
    from reference_impl.kv.cells import KVCells, shift_delta_div

    def pos_div(self: KVCells, i: int, d: int) -> None:
        self._touch(i)
        p_old = int(self.pos[i])
        m = self.seq[i]
        self._index_remove(i, p_old, m)
        p_new = -(-p_old // d)  # the defect: rounds up
        self.pos[i] = p_new
        self.shift[i] += shift_delta_div(p_old, p_new)
        self._index_add(i, p_new, m)
        self.has_shift = True

    KVCells.pos_div = pos_div  # type: ignore[method-assign]
    return target


# -- black-box mutants: defects the decode-level tests (test_blackbox_cache.py) catch -----------


def _slot_needs_contiguous_cells(target: Any) -> Any:
    """find_slot only accepts a contiguous run of usable cells."""
    from reference_impl.kv.cache import KVCache

    original = KVCache.find_slot

    def find_slot(self: KVCache, ubatch: Any, cont: bool = False) -> Any:
        return original(self, ubatch, True)

    KVCache.find_slot = find_slot  # type: ignore[method-assign]
    return target


def _prepare_without_simulation(target: Any) -> Any:
    """prepare finds every ubatch's slot on the cache as it is, ignoring the earlier ubatches."""
    from reference_impl.kv.cache import KVCache

    def prepare(self: KVCache, ubatches: Any) -> Any:
        out = [self.find_slot(ub) for ub in ubatches]
        return None if any(s is None for s in out) else out

    KVCache.prepare = prepare  # type: ignore[method-assign]
    return target


def _restore_skips_cells(target: Any) -> Any:
    """Restoring an undo record puts back heads and shift flags but not the cells."""
    from reference_impl.kv.cache import KVCache

    def restore(self: KVCache, undo: Any) -> None:
        self.heads[:] = undo.heads
        for c, flag in zip(self.cells, undo.has_shift):
            c.has_shift = flag

    KVCache.restore = restore  # type: ignore[method-assign]
    return target


def _streams_share_stream_zero(target: Any) -> Any:
    """With one stream per sequence, every sequence is mapped to stream 0."""
    from reference_impl.kv.cache import KVCache

    original = KVCache.__init__

    def __init__(self: KVCache, config: Any) -> None:
        original(self, config)
        if self.n_stream > 1:
            self.seq_to_stream = (0,) * len(self.seq_to_stream)

    KVCache.__init__ = __init__  # type: ignore[method-assign]
    return target


def _cell_keeps_first_sequence_only(target: Any) -> Any:
    """A token listing several sequences gives its cell only the first of them."""
    import dataclasses

    from reference_impl.kv.cache import KVCache

    original = KVCache.apply_ubatch

    def apply_ubatch(self: KVCache, sinfo: Any, ubatch: Any) -> Any:
        ones = np.ones_like(ubatch.n_seq_id)
        return original(self, sinfo, dataclasses.replace(ubatch, n_seq_id=ones))

    KVCache.apply_ubatch = apply_ubatch  # type: ignore[method-assign]
    return target


def _mask_blocks_reversed(target: Any) -> Any:
    """A multi-stream ubatch's mask gives token block ``g`` the mask of the last-but-g group."""
    import reference_impl.kv.mask as mod

    original = mod.build_kq_mask

    def build_kq_mask(*args: Any, **kw: Any) -> Any:
        m = original(*args, **kw)
        return m.flip(0) if m.shape[0] > 1 else m

    replace("reference_impl.kv.mask", "build_kq_mask", build_kq_mask)
    return target


def _restore_keeps_shift_flag(target: Any) -> Any:
    """Restoring an undo record leaves the shift flags as they are now."""
    from reference_impl.kv.cache import KVCache

    original = KVCache.restore

    def restore(self: KVCache, undo: Any) -> None:
        flags = [c.has_shift for c in self.cells]
        original(self, undo)
        for c, flag in zip(self.cells, flags):
            c.has_shift = flag

    KVCache.restore = restore  # type: ignore[method-assign]
    return target


def _cont_skips_end_window(target: Any) -> Any:
    """The contiguous search restarts at cell 0 when a window would end at the last cell."""
    from reference_impl.kv.cache import KVCache

    def scan_cont(self: KVCache, cells: Any, head: int, n: int) -> list[int] | None:
        size = cells.size()
        tested = 0
        while tested < size:
            if head + n >= size:  # the defect: >= instead of >
                tested += size - head
                head = 0
                continue
            window = list(range(head, head + n))
            bad = [i for i in window if not self._usable_between(cells, i, i + 1)]
            if not bad:
                return window
            tested += bad[0] - head + 1
            head = bad[0] + 1
        return None

    KVCache._scan_cont = scan_cont  # type: ignore[method-assign]
    return target


def _cont_wrap_counts_whole_cache(target: Any) -> Any:
    """The contiguous search counts a restart at cell 0 as the whole cache tested, so it gives
    up after the first window from 0 fails."""
    from reference_impl.kv.cache import KVCache

    def scan_cont(self: KVCache, cells: Any, head: int, n: int) -> list[int] | None:
        size = cells.size()
        tested = 0
        while True:
            if head + n > size:
                tested += size  # the defect: size instead of the size - head cells skipped
                head = 0
                continue
            window = list(range(head, head + n))
            bad = [i for i in window if not self._usable_between(cells, i, i + 1)]
            if not bad:
                return window
            tested += bad[0] - head + 1
            head = bad[0] + 1
            if tested >= size:
                return None

    KVCache._scan_cont = scan_cont  # type: ignore[method-assign]
    return target


def _shared_cell_error_names_cell(target: Any) -> Any:
    """The shared-cell slot error's index is the cell id, not the token index."""
    from reference_impl.errors import KVCacheError
    from reference_impl.kv.cache import KVCache

    original = KVCache._check_slot

    def check_slot(self: KVCache, sinfo: Any, ub: Any) -> None:
        try:
            original(self, sinfo, ub)
        except KVCacheError as e:
            if e.code == "KV_SLOT_MISMATCH" and e.index is not None:
                e.index = int(sinfo.idxs[e.index // sinfo.size][e.index % sinfo.size])
            raise

    KVCache._check_slot = check_slot  # type: ignore[method-assign]
    return target


def _seq_rm_range_message_drops_minus_one(target: Any) -> Any:
    """seq_rm's KV_SEQ_ID_RANGE message leaves -1 out of the accepted ids."""
    from reference_impl.kv.cache import KVCache

    original = KVCache._check_seq

    def check_seq(
        self: KVCache, seq_id: int, *, allow_all: bool = False, fld: str = "seq_id"
    ) -> None:
        if allow_all and seq_id == -1:
            return
        original(self, seq_id, fld=fld)  # the message of a call that does not accept -1

    KVCache._check_seq = check_seq  # type: ignore[method-assign]
    return target


MUTANTS = [
    Mutant(
        "kv-prepare-mutates",
        "kv",
        "prepare applies the ubatches for real and never restores the cells",
        ("KV-008", "MEM-008"),
        _prepare_keeps_changes,
    ),
    Mutant(
        "kv-prepare-purge-leaks",
        "kv",
        "prepare restores only the slot cells, so sliding-window purges survive (llama.cpp quirk)",
        ("KV-008",),
        _prepare_restores_slot_cells_only,
    ),
    Mutant(
        "kv-seq-add-keeps-negative",
        "kv",
        "seq_add keeps cells whose new position is negative",
        ("KV-018",),
        _seq_add_keeps_negative,
    ),
    Mutant(
        "kv-cross-stream-partial-copy",
        "kv",
        "seq_cp across streams accepts a partial range",
        ("KV-016",),
        _cross_stream_partial,
    ),
    Mutant(
        "kv-swa-edge-off-by-one",
        "kv",
        "the standard window keeps a key exactly n_swa positions back (> instead of >=)",
        ("KV-022", "KV-005", "KV-023"),
        _swa_edge,
    ),
    Mutant(
        "kv-restore-keeps-head",
        "kv",
        "restoring an applied ubatch leaves the stream heads where the apply put them",
        ("KV-010",),
        _restore_keeps_head,
    ),
    Mutant(
        "kv-seq-keep-leaves-shared",
        "kv",
        "seq_keep leaves the other sequences in cells shared with the kept one",
        ("KV-017",),
        _seq_keep_leaves_shared,
    ),
    Mutant(
        "kv-seq-div-llama-sign",
        "kv",
        "seq_div accumulates old - new into the pending shift (llama.cpp sign)",
        ("KV-019", "KV-025"),
        _seq_div_llama_sign,
    ),
    Mutant(
        "kv-n-kv-unpadded",
        "kv",
        "get_n_kv returns used_max_p1 without padding to 256",
        ("KV-011",),
        _n_kv_unpadded,
        black_box=True,
    ),
    Mutant(
        "kv-mask-causal-edge",
        "kv",
        "the causal mask hides keys at the query's own position",
        ("KV-023",),
        _mask_causal_edge,
        black_box=True,
    ),
    Mutant(
        "kv-seq-rm-keeps-head",
        "kv",
        "seq_rm does not move the head back to the first freed cell",
        ("KV-014",),
        _seq_rm_keeps_head,
    ),
    Mutant(
        "kv-no-head-restart",
        "kv",
        "find_slot never restarts the search at cell 0 when the head is far past the used cells",
        ("KV-005",),
        _no_head_restart,
    ),
    Mutant(
        "kv-n-kv-from-used-count",
        "kv",
        "n_kv is padded from the number of used cells, not from the last used cell",
        ("KV-002",),
        _n_kv_from_used_count,
        black_box=True,
    ),
    Mutant(
        "kv-seq-div-rounds-up",
        "kv",
        "seq_div rounds the divided positions up instead of down",
        ("KV-028",),
        _seq_div_rounds_up,
    ),
    Mutant(
        "kv-slot-contiguous-only",
        "kv",
        "find_slot only accepts a contiguous run of free cells",
        ("KV-005",),
        _slot_needs_contiguous_cells,
        black_box=True,
    ),
    Mutant(
        "kv-prepare-without-simulation",
        "kv",
        "prepare finds each ubatch's slot ignoring the ubatches before it",
        ("KV-008",),
        _prepare_without_simulation,
        black_box=True,
    ),
    Mutant(
        "kv-restore-skips-cells",
        "kv",
        "restoring an undo record leaves the cells as the apply left them",
        ("KV-010",),
        _restore_skips_cells,
        black_box=True,
    ),
    Mutant(
        "kv-streams-share-stream-zero",
        "kv",
        "with one stream per sequence every sequence is placed in stream 0",
        ("KV-006",),
        _streams_share_stream_zero,
        black_box=True,
    ),
    Mutant(
        "kv-cell-first-sequence-only",
        "kv",
        "a token listing several sequences gives its cell only the first one",
        ("KV-009",),
        _cell_keeps_first_sequence_only,
        black_box=True,
    ),
    Mutant(
        "kv-mask-blocks-reversed",
        "kv",
        "a multi-stream ubatch's mask blocks are given to the wrong token groups",
        ("KV-024",),
        _mask_blocks_reversed,
        black_box=True,
    ),
    Mutant(
        "kv-swa-mask-keeps-edge-key",
        "kv",
        "the cache's KQ mask lets a sliding layer read the key exactly n_swa positions back",
        ("KV-022",),
        _swa_mask_edge,
        black_box=True,
    ),
    Mutant(
        "kv-restore-keeps-shift-flag",
        "kv",
        "restoring an undo record keeps the current shift flags instead of the recorded ones",
        ("KV-010",),
        _restore_keeps_shift_flag,
    ),
    Mutant(
        "kv-cont-skips-end-window",
        "kv",
        "the contiguous search skips a window ending exactly at the last cell",
        ("KV-007",),
        _cont_skips_end_window,
    ),
    Mutant(
        "kv-cont-wrap-counts-whole-cache",
        "kv",
        "the contiguous search counts a restart at cell 0 as the whole cache tested",
        ("KV-007",),
        _cont_wrap_counts_whole_cache,
    ),
    Mutant(
        "kv-shared-cell-error-names-cell",
        "kv",
        "the shared-cell slot error's index is the cell id, not the token index",
        ("KV-012",),
        _shared_cell_error_names_cell,
    ),
    Mutant(
        "kv-seq-rm-range-message-drops-minus-one",
        "kv",
        "seq_rm's sequence-id range error does not list -1 among the accepted ids",
        ("KV-003",),
        _seq_rm_range_message_drops_minus_one,
    ),
]
