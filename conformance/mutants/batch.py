"""Mutants of the batch area: the reference sanitizer/splitter with one deliberate defect each."""

from __future__ import annotations

from typing import Any

import numpy as np

from conformance.mutants import Mutant, replace

SAN = "reference_impl.batch.sanitize"
SPL = "reference_impl.batch.split"


def _gap_accepted(t: Any) -> Any:
    replace(SAN, "check_continuity", lambda view, pmin, pmax: np.zeros(len(view.seqs), dtype=bool))
    return t


def _auto_pos_seed(t: Any) -> Any:
    # continue at seq_pos_max instead of seq_pos_max + 1
    replace(SAN, "next_position", lambda memory, s: max(memory.seq_pos_max(s), 0) if memory else 0)
    return t


def _last_token_default_dropped(t: Any) -> Any:
    import reference_impl.batch.sanitize as mod

    original = mod.resolve_outputs

    def resolve_outputs(logits: Any, n: int, output_all: bool) -> Any:
        if logits is None and not output_all:
            return np.zeros(n, dtype=np.int8), False
        return original(logits, n, output_all)

    replace(SAN, "resolve_outputs", resolve_outputs)
    return t


def _output_all_ignored(t: Any) -> Any:
    import reference_impl.batch.sanitize as mod

    original = mod.resolve_outputs

    def resolve_outputs(logits: Any, n: int, output_all: bool) -> Any:
        if logits is not None:
            return logits, False  # explicit flags kept even when every output is required
        return original(logits, n, output_all)

    replace(SAN, "resolve_outputs", resolve_outputs)
    return t


def _memory_message_mrope_rule(t: Any) -> Any:
    import reference_impl.batch.sanitize as mod

    original = mod._memory_error

    def _memory_error(view: Any, g: int, x: int, y: int, *, mrope: bool, token: bool) -> Any:
        return original(view, g, x, y, mrope=True, token=token)

    replace(SAN, "_memory_error", _memory_error)
    return t


def _decreasing_accepted(t: Any) -> Any:
    replace(SAN, "check_decreasing", lambda view: None)
    return t


def _seq_range_off_by_one(t: Any) -> Any:
    import reference_impl.batch.sanitize as mod

    original = mod.resolve_seq_ids
    replace(
        SAN,
        "resolve_seq_ids",
        lambda sid, nsid, n, n_seq_max: original(sid, nsid, n, n_seq_max + 1),
    )
    return t


def _memory_ignored(t: Any) -> Any:
    import reference_impl.batch.sanitize as mod

    original = mod.check_positions
    replace(
        SAN,
        "check_positions",
        lambda view, pmin, pmax, memory, n_pos, has_token: original(
            view, pmin, pmax, None, n_pos, has_token
        ),
    )
    return t


def _diverged_accepted(t: Any) -> Any:
    replace(SAN, "check_coupled_memory", lambda pairs, memory: None)
    return t


def _result_writable(t: Any) -> Any:
    # the defect: the sanitizer leaves its result's arrays writable
    replace("reference_impl.batch.sanitize", "_readonly", lambda *arrays: None)
    return t


def _mutates_input(t: Any) -> Any:
    original = t.batch_sanitize

    def batch_sanitize(batch: Any, **kw: Any) -> Any:
        try:
            return original(batch, **kw)
        finally:
            if batch.token is not None and batch.token.size and batch.token.flags.writeable:
                batch.token[0] += 1  # "normalizes" the caller's array in place

    t.batch_sanitize = batch_sanitize
    return t


def _out_ids_batch_order(t: Any) -> Any:
    import reference_impl.batch.split as mod

    class Splitter(mod.BatchSplitter):
        @property
        def out_ids_array(self) -> np.ndarray:
            return np.sort(super().out_ids_array)

    replace(SPL, "BatchSplitter", Splitter)
    return t


def _coupled_sequential_allowed(t: Any) -> Any:
    import reference_impl.batch.split as mod

    class Splitter(mod.BatchSplitter):
        def split_equal(self, n_ubatch: int, sequential: bool, n_keep_tail: int = 0) -> Any:
            if self.sb.has_cpl:
                sequential = False
            return super().split_equal(n_ubatch, sequential, n_keep_tail)

    replace(SPL, "BatchSplitter", Splitter)
    return t


def _seq_idx_not_reset(t: Any) -> Any:
    import reference_impl.batch.split as mod

    original = mod.make_ubatch
    stale = np.full(256, -1, dtype=np.int32)

    def make_ubatch(*args: Any, **kwargs: Any) -> Any:
        ub = original(*args, **kwargs)
        present = ub.seq_idx >= 0
        stale[present] = ub.seq_idx[present]  # entries of earlier ubatches are never cleared
        ub.seq_idx[:] = stale
        return ub

    replace(SPL, "make_ubatch", make_ubatch)
    return t


def _keep_tail_ignored(t: Any) -> Any:
    import reference_impl.batch.split as mod

    class Splitter(mod.BatchSplitter):
        def split_equal(self, n_ubatch: int, sequential: bool, n_keep_tail: int = 0) -> Any:
            mod.check_keep_tail(n_ubatch, n_keep_tail)
            return super().split_equal(n_ubatch, sequential, 0)

    replace(SPL, "BatchSplitter", Splitter)
    return t


def _simple_overfills(t: Any) -> Any:
    import reference_impl.batch.split as mod

    class Splitter(mod.BatchSplitter):
        def split_simple(self, n_ubatch: int) -> Any:
            mod.check_n_ubatch(n_ubatch)
            return super().split_simple(n_ubatch + 1)

    replace(SPL, "BatchSplitter", Splitter)
    return t


def _equal_sets_overlap(t: Any) -> Any:
    # choose sets without the overlap test: coupled sets and their members share a ubatch
    import reference_impl.batch.split as mod

    def choose_sets(sp: Any, n_ubatch: int, sequential: bool) -> list[int]:
        live = np.flatnonzero(sp._cursor < sp._set_count)
        return [int(k) for k in live[np.argsort(sp._heads(live), kind="stable")][: n_ubatch + 1]]

    original = mod.choose_sets
    replace(
        SPL,
        "choose_sets",
        lambda sp, u, seq: choose_sets(sp, u, seq) if not seq else original(sp, u, seq),
    )
    return t


def _split_plan_kv_swapped(t: Any) -> Any:
    import reference_impl.batch.split as mod

    original = mod.split_plan

    def split_plan(kind: str, *, unified: bool, embd_all: bool, n_rs_seq: int = 0) -> Any:
        if kind == "kv":
            unified = not unified
        return original(kind, unified=unified, embd_all=embd_all, n_rs_seq=n_rs_seq)

    replace(SPL, "split_plan", split_plan)
    return t


# -- defects that decode alone shows (conformance/batch/test_decode_visible.py) ---------------


def _sanitizer_writes_caller_batch(t: Any) -> Any:
    import reference_impl.batch.sanitize as mod

    original = mod.sanitize

    def sanitize(batch: Any, **kw: Any) -> Any:
        try:
            return original(batch, **kw)
        finally:
            if batch.token is not None and batch.token.size and batch.token.flags.writeable:
                batch.token[-1] = 0  # "normalizes" the caller's array in place

    replace(SAN, "sanitize", sanitize)
    return t


def _duplicate_ids_kept(t: Any) -> Any:
    import reference_impl.batch.sanitize as mod

    original = mod.resolve_seq_ids

    def resolve_seq_ids(sid: Any, nsid: Any, n: int, n_seq_max: int) -> Any:
        out, counts = original(sid, nsid, n, n_seq_max)
        if sid is None or nsid is None or sid.shape[1] == 1:
            return out, counts
        return np.ascontiguousarray(sid, dtype=np.int32), nsid.astype(np.int32)  # [0, 0] stays

    replace(SAN, "resolve_seq_ids", resolve_seq_ids)
    return t


def _overlapping_sets_refused(t: Any) -> Any:
    import reference_impl.batch.sanitize as mod

    original = mod.sanitize

    def sanitize(batch: Any, **kw: Any) -> Any:
        sb = original(batch, **kw)
        sets = [frozenset(sb.batch.seq_ids_of(i)) for i in range(sb.n_tokens)]
        for i, a in enumerate(sets):
            for b in sets[:i]:
                if a != b and a & b:  # llama.cpp's "incompatible sets" check made to fire
                    raise mod.fail(
                        mod.SAN_SEQ_DIVERGED, "incompatible sets", field="seq_id", index=i
                    )
        return sb

    replace(SAN, "sanitize", sanitize)
    return t


def _empty_sequence_starts_at_zero(t: Any) -> Any:
    import reference_impl.batch.sanitize as mod

    original = mod.check_positions

    def check_positions(
        view: Any, pmin: Any, pmax: Any, memory: Any, n_pos: int, tok: bool
    ) -> None:
        original(view, pmin, pmax, memory, n_pos, tok)
        for g, s in enumerate(view.seqs):
            empty = memory is None or memory.seq_pos_max(int(s)) < 0
            if empty and int(pmin[g]) != 0:
                raise mod.fail(mod.SAN_POS_MEMORY, "a new sequence must start at 0", field="pos")

    replace(SAN, "check_positions", check_positions)
    return t


def _token_range_off_by_one(t: Any) -> Any:
    import reference_impl.batch.sanitize as mod

    original = mod.check_token_range
    replace(SAN, "check_token_range", lambda token, n_vocab: original(token, n_vocab + 1))
    return t


def _replace_splitter(cls: Any) -> None:
    """The splitter both for the batch area's own calls and for the decoder, which imported
    the class by name."""
    replace(SPL, "BatchSplitter", cls)
    replace("reference_impl.decoder.context", "BatchSplitter", cls)


def _simple_repeats_last(t: Any) -> Any:
    import reference_impl.batch.split as mod

    class Splitter(mod.BatchSplitter):
        def split_simple(self, n_ubatch: int) -> Any:
            ub = super().split_simple(n_ubatch)
            if ub.n_tokens and int(ub.idxs[0]) > 0 and n_ubatch > 1:
                # the previous ubatch's last token is emitted again at the front
                return self._emit(np.concatenate(([int(ub.idxs[0]) - 1], ub.idxs)), 0, False)
            return ub

    _replace_splitter(Splitter)
    return t


def _later_outputs_dropped(t: Any) -> Any:
    import reference_impl.batch.split as mod

    class Splitter(mod.BatchSplitter):
        def _emit(self, idxs: Any, n_seqs: int, equal_seqs: bool, *a: Any, **kw: Any) -> Any:
            ub = super()._emit(idxs, n_seqs, equal_seqs, *a, **kw)
            if len(self._out_chunks) > 1 and self._out_chunks[-1].size:
                self._out_chunks[-1] = self._out_chunks[-1][1:]  # one output of this ubatch lost
            return ub

    _replace_splitter(Splitter)
    return t


def _filling_keeps_state(t: Any) -> Any:
    import reference_impl.batch.sanitize as mod

    original = mod.auto_positions
    calls = [0]

    def auto_positions(first_seq: Any, memory: Any, n_pos: int, has_token: bool) -> Any:
        calls[0] += 1  # state carried from one batch to the next
        return original(first_seq, memory, n_pos, has_token) + (calls[0] % 2)

    replace(SAN, "auto_positions", auto_positions)
    return t


def _empty_batch_wrong_code(target: Any) -> Any:
    replace("reference_impl.batch.sanitize", "SAN_EMPTY", "SAN_PARAM")
    return target


def _split_clears_emitted_outputs(target: Any) -> Any:
    """The splitter marks emitted outputs as consumed in the sanitized batch itself."""
    from reference_impl.batch.split import BatchSplitter

    original = BatchSplitter._emit

    def _emit(self: BatchSplitter, idxs: Any, *args: Any, **kwargs: Any) -> Any:
        ub = original(self, idxs, *args, **kwargs)
        logits = self.sb.batch.logits
        if logits is not None:
            cleared = np.array(logits)
            cleared[idxs] = 0
            object.__setattr__(self.sb.batch, "logits", cleared)
        return ub

    BatchSplitter._emit = _emit  # type: ignore[method-assign]
    return target


# -- black-box mutants: defects the decode-level tests (test_blackbox_*.py) catch ---------------


def _simple_takes_last_tokens(t: Any) -> Any:
    """split_simple takes the last unused tokens of the batch first."""
    from reference_impl.batch.split import BatchSplitter, check_n_ubatch, empty_ubatch

    def split_simple(self: BatchSplitter, n_ubatch: int) -> Any:
        check_n_ubatch(n_ubatch)
        unused = np.flatnonzero(~self._used)
        if unused.shape[0] == 0:
            return empty_ubatch(self.sb.n_pos)
        idxs = unused[-n_ubatch:]
        return self._emit(idxs, int(idxs.shape[0]), False)

    BatchSplitter.split_simple = split_simple  # type: ignore[method-assign]
    return t


def _ubatch_positions_rolled(t: Any) -> Any:
    """A ubatch token gets the position of the token before it (the first the last one's)."""
    import dataclasses

    import reference_impl.batch.split as mod

    original = mod.make_ubatch

    def make_ubatch(*args: Any, **kwargs: Any) -> Any:
        ub = original(*args, **kwargs)
        if ub.n_tokens < 2 or ub.n_pos != 1:
            return ub
        return dataclasses.replace(ub, pos=np.roll(ub.pos, 1))

    replace(SPL, "make_ubatch", make_ubatch)
    return t


def _seq_id_unq_descending(t: Any) -> Any:
    """seq_id_unq lists the ubatch's sequences in descending order (seq_idx to match)."""
    import dataclasses

    import reference_impl.batch.split as mod

    original = mod.make_ubatch

    def make_ubatch(*args: Any, **kwargs: Any) -> Any:
        ub = original(*args, **kwargs)
        if ub.n_seqs_unq < 2:
            return ub
        unq = ub.seq_id_unq[::-1].copy()
        idx = np.full_like(ub.seq_idx, -1)
        idx[unq] = np.arange(unq.shape[0], dtype=idx.dtype)
        return dataclasses.replace(ub, seq_id_unq=unq, seq_idx=idx)

    replace(SPL, "make_ubatch", make_ubatch)
    return t


def _equal_split_interleaves_sets(t: Any) -> Any:
    """split_equal lays a ubatch out token by token across its sets, not set by set."""
    from reference_impl.batch.split import BatchSplitter

    original = BatchSplitter._emit

    def _emit(
        self: BatchSplitter, idxs: Any, n_seqs: int, equal_seqs: bool, *args: Any, **kw: Any
    ) -> Any:
        if equal_seqs and n_seqs > 1:
            idxs = np.asarray(idxs).reshape(n_seqs, -1).T.reshape(-1)
        return original(self, idxs, n_seqs, equal_seqs, *args, **kw)

    BatchSplitter._emit = _emit  # type: ignore[method-assign]
    return t


def _unplaced_tokens_fall_back_to_simple(t: Any) -> Any:
    """When a split leaves tokens unplaced, split_all splits again with split_simple instead of
    failing."""
    import reference_impl.batch.split as mod

    original = mod.split_all

    def split_all(splitter: Any, plan: Any, n_ubatch: int) -> Any:
        out = original(splitter, plan, n_ubatch)
        if out is None:
            simple = mod.split_plan("kv", unified=True, embd_all=False)
            return original(splitter, simple, n_ubatch)
        return out

    replace(SPL, "split_all", split_all)
    return t


def _sequential_sets_in_any_order(t: Any) -> Any:
    """The sequential split_equal takes any non-overlapping next set, not only id + 1."""
    import reference_impl.batch.split as mod

    original = mod.choose_sets

    def choose_sets(splitter: Any, n_ubatch: int, sequential: bool) -> Any:
        return original(splitter, n_ubatch, False)

    replace(SPL, "choose_sets", choose_sets)
    return t


def _equal_split_at_most_n_ubatch_sets(t: Any) -> Any:
    """split_equal stops at n_ubatch sets (no ubatch of n_ubatch + 1 one-token sets)."""
    import reference_impl.batch.split as mod

    original = mod.choose_sets

    def choose_sets(splitter: Any, n_ubatch: int, sequential: bool) -> Any:
        return list(original(splitter, n_ubatch, sequential))[:n_ubatch]

    replace(SPL, "choose_sets", choose_sets)
    return t


def _mrope_missing_positions_repeat_section_zero(t: Any) -> Any:
    """An M-RoPE embedding batch without positions gets section 0 in every section."""
    import reference_impl.batch.sanitize as mod

    original = mod.auto_positions

    def auto_positions(first_seq: Any, memory: Any, n_pos: int, has_token: bool) -> Any:
        pos = original(first_seq, memory, n_pos, has_token)
        if pos.ndim == 2:
            pos = np.tile(pos[0], (pos.shape[0], 1))
        return pos

    replace(SAN, "auto_positions", auto_positions)
    return t


def _wide_int_fields_rejected(t: Any) -> Any:
    """Integer fields must already be int32: int64 token ids or a flat seq_id are SAN_SHAPE."""
    import reference_impl.batch.fields as mod
    from reference_impl.batch.codes import SAN_SHAPE, fail

    original = mod.normalize_fields

    def normalize_fields(batch: Any, n_pos_per_embd: int) -> Any:
        for name in ("token", "pos", "seq_id", "n_seq_id"):
            value = getattr(batch, name)
            if value is not None and np.asarray(value).dtype != np.int32:
                raise fail(SAN_SHAPE, f"{name} must be int32", field=name)
        return original(batch, n_pos_per_embd)

    replace("reference_impl.batch.fields", "normalize_fields", normalize_fields)
    return t


MUTANTS = [
    Mutant(
        "spl-simple-repeats-last",
        "batch",
        "split_simple emits the previous ubatch's last token again",
        kills=("SPL-005", "SPL-020"),
        apply=_simple_repeats_last,
        black_box=True,
    ),
    Mutant(
        "spl-later-outputs-dropped",
        "batch",
        "each ubatch after the first loses one output from out_ids",
        kills=("SPL-007",),
        apply=_later_outputs_dropped,
        black_box=True,
    ),
    Mutant(
        "san-token-range-off-by-one",
        "batch",
        "token id n_vocab is accepted",
        kills=("SAN-004", "DEC-017"),
        apply=_token_range_off_by_one,
        black_box=True,
    ),
    Mutant(
        "san-writes-caller-batch",
        "batch",
        "the sanitizer decode runs writes into the caller's token array",
        kills=("SAN-022",),
        apply=_sanitizer_writes_caller_batch,
        black_box=True,
    ),
    Mutant(
        "san-duplicate-ids-kept",
        "batch",
        "a sequence listed twice by one token stays listed twice (the token counts as coupled)",
        kills=("SAN-009",),
        apply=_duplicate_ids_kept,
        black_box=True,
    ),
    Mutant(
        "san-overlapping-sets-refused",
        "batch",
        "llama.cpp's never-firing 'incompatible sequence sets' check fires",
        kills=("SAN-020",),
        apply=_overlapping_sets_refused,
        black_box=True,
    ),
    Mutant(
        "san-new-sequence-starts-at-zero",
        "batch",
        "a sequence absent from memory must start at position 0",
        kills=("SAN-021",),
        apply=_empty_sequence_starts_at_zero,
        black_box=True,
    ),
    Mutant(
        "san-filling-keeps-state",
        "batch",
        "generated positions depend on how many batches were filled before",
        kills=("SAN-023",),
        apply=_filling_keeps_state,
        black_box=True,
    ),
    Mutant(
        "san-gap-accepted",
        "batch",
        "positions with a gap inside a sequence are accepted",
        kills=("SAN-016", "SAN-027", "SAN-028"),
        apply=_gap_accepted,
        black_box=True,
    ),
    Mutant(
        "san-auto-pos-seed",
        "batch",
        "generated positions continue at the memory's seq_pos_max instead of seq_pos_max + 1",
        kills=("SAN-010",),
        apply=_auto_pos_seed,
    ),
    Mutant(
        "san-last-token-default-dropped",
        "batch",
        "absent output flags give no output instead of the last token",
        kills=("SAN-013", "SAN-027"),
        apply=_last_token_default_dropped,
    ),
    Mutant(
        "san-output-all-ignored",
        "batch",
        "explicit output flags are not overridden when every output is required",
        kills=("SAN-014",),
        apply=_output_all_ignored,
    ),
    Mutant(
        "san-decreasing-accepted",
        "batch",
        "decreasing positions inside a sequence are accepted",
        kills=("SAN-019", "SAN-011"),
        apply=_decreasing_accepted,
    ),
    Mutant(
        "san-seq-range-off-by-one",
        "batch",
        "sequence id n_seq_max is accepted",
        kills=("SAN-006",),
        apply=_seq_range_off_by_one,
    ),
    Mutant(
        "san-memory-ignored",
        "batch",
        "batch positions are not checked against the memory",
        kills=("SAN-015", "SAN-017"),
        apply=_memory_ignored,
        black_box=True,
    ),
    Mutant(
        "san-memory-message-wrong-rule",
        "batch",
        "the SAN_POS_MEMORY message states the M-RoPE rule X < Y for standard positions",
        kills=("SAN-026",),
        apply=_memory_message_mrope_rule,
    ),
    Mutant(
        "san-diverged-accepted",
        "batch",
        "coupled sequences whose memory ranges differ are accepted",
        kills=("SAN-018",),
        apply=_diverged_accepted,
    ),
    Mutant(
        "san-mutates-input",
        "batch",
        "the sanitizer writes into the caller's token array",
        kills=("SAN-022",),
        apply=_mutates_input,
    ),
    Mutant(
        "san-result-writable",
        "batch",
        "the sanitized batch's arrays are writable",
        kills=("SAN-022",),
        apply=_result_writable,
    ),
    Mutant(
        "spl-out-ids-batch-order",
        "batch",
        "out_ids are reported in batch order instead of emission order",
        kills=("SPL-006",),
        apply=_out_ids_batch_order,
    ),
    Mutant(
        "spl-coupled-sequential-allowed",
        "batch",
        "a sequential split_equal accepts coupled sequences",
        kills=("SPL-011",),
        apply=_coupled_sequential_allowed,
    ),
    Mutant(
        "spl-seq-idx-not-reset",
        "batch",
        "seq_idx keeps the entries of earlier ubatches",
        kills=("SPL-003",),
        apply=_seq_idx_not_reset,
    ),
    Mutant(
        "spl-keep-tail-ignored",
        "batch",
        "split_equal ignores n_keep_tail",
        kills=("SPL-012", "SPL-013"),
        apply=_keep_tail_ignored,
    ),
    Mutant(
        "spl-simple-overfills",
        "batch",
        "split_simple emits n_ubatch + 1 tokens",
        kills=("SPL-001",),
        apply=_simple_overfills,
    ),
    Mutant(
        "spl-equal-sets-overlap",
        "batch",
        "split_equal puts overlapping sequence sets in one ubatch",
        kills=("SPL-008", "SPL-009"),
        apply=_equal_sets_overlap,
    ),
    Mutant(
        "spl-plan-kv-swapped",
        "batch",
        "the KV cache uses split_equal with one stream and split_simple with several",
        kills=("SPL-017",),
        apply=_split_plan_kv_swapped,
    ),
    Mutant(
        "san-empty-batch-wrong-code",
        "batch",
        "an empty batch is refused with SAN_PARAM instead of SAN_EMPTY",
        ("SAN-001",),
        _empty_batch_wrong_code,
    ),
    Mutant(
        "spl-clears-emitted-outputs",
        "batch",
        "splitting zeroes the output flags of emitted tokens in the sanitized batch",
        ("SPL-021",),
        _split_clears_emitted_outputs,
    ),
    Mutant(
        "spl-simple-takes-last-first",
        "batch",
        "split_simple takes the last unused tokens of the batch first",
        kills=("SPL-001",),
        apply=_simple_takes_last_tokens,
        black_box=True,
    ),
    Mutant(
        "spl-ubatch-positions-rolled",
        "batch",
        "a ubatch token carries the position of the token before it",
        kills=("SPL-004",),
        apply=_ubatch_positions_rolled,
        black_box=True,
    ),
    Mutant(
        "spl-seq-id-unq-descending",
        "batch",
        "a ubatch lists its sequences in descending order",
        kills=("SPL-003", "KV-004"),
        apply=_seq_id_unq_descending,
        black_box=True,
    ),
    Mutant(
        "spl-equal-interleaves-sets",
        "batch",
        "split_equal lays its ubatch out token by token across the sets",
        kills=("SPL-008",),
        apply=_equal_split_interleaves_sets,
        black_box=True,
    ),
    Mutant(
        "spl-unplaced-falls-back-to-simple",
        "batch",
        "a split that leaves tokens unplaced is redone with split_simple instead of failing",
        kills=("SPL-018",),
        apply=_unplaced_tokens_fall_back_to_simple,
        black_box=True,
    ),
    Mutant(
        "spl-sequential-any-order",
        "batch",
        "the sequential split_equal takes sets whose ids are not consecutive",
        kills=("SPL-009",),
        apply=_sequential_sets_in_any_order,
        black_box=True,
    ),
    Mutant(
        "spl-equal-no-extra-set",
        "batch",
        "split_equal chooses at most n_ubatch sets (llama.cpp takes n_ubatch + 1)",
        kills=("SPL-010",),
        apply=_equal_split_at_most_n_ubatch_sets,
        black_box=True,
    ),
    Mutant(
        "san-mrope-auto-pos-repeated",
        "batch",
        "an M-RoPE embedding batch without positions gets section 0 in every section",
        kills=("SAN-012",),
        apply=_mrope_missing_positions_repeat_section_zero,
        black_box=True,
    ),
    Mutant(
        "san-wide-int-fields-rejected",
        "batch",
        "integer fields of another integer dtype than int32 are rejected with SAN_SHAPE",
        kills=("SAN-003",),
        apply=_wide_int_fields_rejected,
    ),
]
