"""Decoder mutants: one deliberate defect each (see tests/meta).

The native one-token step's own defects (decision D17) are broken *builds* of the same C source
(``DC_MUTANT_*`` defines, compiled into their own cached library); the others patch the Python
around it. DEC-060 .. DEC-063 must catch each against the torch forward.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from conformance.mutants import Mutant, replace


def _outputs_not_reordered(target: Any) -> Any:
    from reference_impl.decoder.outputs import OutputBuffers

    def reorder(self: OutputBuffers) -> None:
        self.swaps.clear()  # rows stay in emission order

    OutputBuffers.reorder = reorder  # type: ignore[method-assign]
    return target


def _mapping_without_sort(target: Any) -> Any:
    """Rows stay in emission order and output_ids points at them: _ith is right, the whole
    buffer (get_logits) is not in batch order."""
    from reference_impl.decoder.outputs import OutputBuffers

    def finalize(self: OutputBuffers, out_ids: Any) -> None:
        order = [int(i) for i in out_ids]
        self.n_outputs = len(order)
        for k, b in enumerate(order):
            self.output_ids[b] = k
        self.swaps = []

    OutputBuffers.finalize = finalize  # type: ignore[method-assign]
    return target


def _mapping_not_rebuilt_after_sort(target: Any) -> Any:
    """The swaps are recorded but output_ids keeps pointing at emission-order rows, so after
    the rows are put in batch order a token reads another token's row."""
    from reference_impl.decoder.outputs import OutputBuffers, selection_sort_swaps

    def finalize(self: OutputBuffers, out_ids: Any) -> None:
        order = [int(i) for i in out_ids]
        self.n_outputs = len(order)
        for k, b in enumerate(order):
            self.output_ids[b] = k
        self.swaps = selection_sort_swaps(order)

    OutputBuffers.finalize = finalize  # type: ignore[method-assign]
    return target


def _negative_index_is_a_batch_index(target: Any) -> Any:
    from reference_impl.decoder.outputs import OutputBuffers

    original = OutputBuffers.resolve_row

    def resolve_row(self: OutputBuffers, i: int) -> int:
        if i < 0:
            i = len(self.output_ids) + i
        return original(self, i)

    OutputBuffers.resolve_row = resolve_row  # type: ignore[method-assign]
    return target


def _no_rollback(target: Any) -> Any:
    from reference_impl.memory import status as mstatus
    from reference_impl.memory.coordinator import MemoryCoordinator

    def ubatch_failed(self: MemoryCoordinator, ubatch: Any, status: Any) -> int:
        return mstatus.ubatch_failure_decode_code(status)

    MemoryCoordinator.ubatch_failed = ubatch_failed  # type: ignore[method-assign]
    return target


def _no_memory_update(target: Any) -> Any:
    from reference_impl.memory.coordinator import MemoryCoordinator

    original = MemoryCoordinator.update

    def update(self: MemoryCoordinator, optimize: bool) -> bool:
        if not optimize:
            return False  # pending shifts are never applied before placing a batch
        return original(self, optimize)

    MemoryCoordinator.update = update  # type: ignore[method-assign]
    return target


def _n_ctx_not_padded(target: Any) -> Any:
    from reference_impl.decoder import params

    replace("reference_impl.decoder.params", "pad", lambda x, n=256: x)
    assert params.pad(300) == 300
    return target


def _plans_never_reused(target: Any) -> Any:
    from reference_impl.decoder.graph import GraphScheduler

    original = GraphScheduler.plan_for

    def plan_for(self: GraphScheduler, *a: Any, **kw: Any) -> Any:
        self.plan = None
        return original(self, *a, **kw)

    GraphScheduler.plan_for = plan_for  # type: ignore[method-assign]
    return target


def _reused_plan_keeps_positions(target: Any) -> Any:
    """A reused plan keeps the positions bound for the ubatch that built it."""
    import dataclasses

    from reference_impl.decoder.graph import GraphScheduler

    original = GraphScheduler.plan_for

    def plan_for(self: GraphScheduler, *a: Any, **kw: Any) -> Any:
        plan, reused = original(self, *a, **kw)
        if not reused:
            return plan, reused
        stale = plan.positions.clone()
        setattr(stale, "copy_", lambda src: stale)  # noqa: B010  binding new positions does nothing
        return dataclasses.replace(plan, positions=stale), reused

    GraphScheduler.plan_for = plan_for  # type: ignore[method-assign]
    return target


def _embeddings_before_output_norm_gain(target: Any) -> Any:
    """Pooling NONE stores the hidden state without the output norm's gain."""
    from reference_impl.decoder.pooling import PoolingType
    from reference_impl.decoder.ubatch_executor import UBatchExecutor

    original = UBatchExecutor._store_embeddings

    def store(self: Any, ub: Any, hidden: Any, row0: int, n: int) -> Any:
        if self.pooling == PoolingType.NONE:
            hidden = hidden / self.model.output_norm
        return original(self, ub, hidden, row0, n)

    UBatchExecutor._store_embeddings = store  # type: ignore[method-assign]
    return target


def _mean_over_ubatch(target: Any) -> Any:
    """MEAN pooling divides by the ubatch's token count, not the sequence's."""
    from reference_impl.decoder import pooling

    def pool_mean(hidden: np.ndarray, ub: Any) -> dict[int, np.ndarray]:
        out = {}
        for s in (int(x) for x in ub.seq_id_unq):
            rows = [i for i in range(ub.n_tokens) if s in ub.seq_ids_of(i)]
            out[s] = (hidden[rows].astype(np.float64).sum(axis=0) / ub.n_tokens).astype(np.float32)
        return out

    pooling.POOLERS[pooling.PoolingType.MEAN] = pool_mean
    return target


def _cls_ties_take_the_last(target: Any) -> Any:
    from reference_impl.decoder import pooling

    pooling.POOLERS[pooling.PoolingType.CLS] = lambda h, ub: {
        s: h[i].astype(np.float32) for s, i in sorted(_rows(ub, lambda p, best: p <= best).items())
    }
    return target


def _rows(ub: Any, better: Any) -> dict[int, int]:
    best: dict[int, int] = {}
    row: dict[int, int] = {}
    for i in range(ub.n_tokens):
        p = ub.pos_of(i)
        for s in ub.seq_ids_of(i):
            if s not in best or better(p, best[s]):
                best[s], row[s] = p, i
    return row


def _outputs_dropped_before_validation(target: Any) -> Any:
    from reference_impl.decoder.context import Context

    original = Context._sanitize  # the decode flow's first step

    def _sanitize(self: Context, batch: Any) -> Any:
        self.outputs.n_outputs = 0
        self.outputs.output_ids.fill(-1)
        return original(self, batch)

    Context._sanitize = _sanitize  # type: ignore[method-assign]
    return target


def _triton_backend_falls_back(target: Any) -> Any:
    """The fused attention backend quietly runs the torch path."""
    from kernels import decode_attention

    original = decode_attention.gqa_decode

    def gqa_decode(*args: Any, **kw: Any) -> Any:
        kw["path"] = "torch"
        return original(*args, **kw)

    replace("kernels.decode_attention", "gqa_decode", gqa_decode)
    return target


def _sampled_not_reordered(target: Any) -> Any:
    from reference_impl.decoder.outputs import OutputBuffers

    def reorder(self: OutputBuffers) -> None:
        for i, j in self.swaps:
            self.logits[[i, j]] = self.logits[[j, i]]
            if self.embd is not None:
                self.embd[[i, j]] = self.embd[[j, i]]
        self.swaps.clear()

    OutputBuffers.reorder = reorder  # type: ignore[method-assign]
    return target


def _no_seq_output_limit(target: Any) -> Any:
    from reference_impl.decoder.context import Context

    Context._seq_output_limit_error = lambda self, sb: None  # type: ignore[method-assign]
    return target


def _chain_reads_last_row(target: Any) -> Any:
    """A sequence's chain samples the ubatch's last output row instead of its own token's."""
    from reference_impl.decoder.context import Context

    def _sample_rows(self: Context, ub: Any, rows: np.ndarray, row0: int) -> None:
        for k, r in enumerate(rows):
            for s in ub.seq_ids_of(int(r)):
                chain = self.samplers.get(s)
                if chain is not None:
                    last = self.outputs.logits[row0 + len(rows) - 1]
                    self.outputs.sampled[row0 + k] = chain.sample(last)
                    break

    Context._sample_rows = _sample_rows  # type: ignore[method-assign]
    return target


def _reservation_not_rounded(target: Any) -> Any:
    from reference_impl.decoder import context

    original = context.ubatch_reserve
    replace(
        "reference_impl.decoder.context",
        "ubatch_reserve",
        lambda n_seq_tokens, n_seqs, **kw: original(max(1, n_seq_tokens - 1), n_seqs, **kw),
    )
    return target


def _encode_is_causal(target: Any) -> Any:
    from reference_impl.decoder import ubatch_executor

    original = ubatch_executor.encode_mask

    def encode_mask(ub: Any) -> torch.Tensor:
        mask = original(ub)
        n = mask.shape[0]
        return mask + torch.full((n, n), float("-inf")).triu(1)

    replace("reference_impl.decoder.ubatch_executor", "encode_mask", encode_mask)
    return target


def _build(define: str) -> Any:
    def apply(target: Any) -> Any:
        from reference_impl.native import build

        library = build.load((define,))
        if library.lib is None:  # a mutant that cannot be built must not pass as killed
            raise RuntimeError(library.reason)
        replace("reference_impl.native.step", "load", lambda: library)
        return target

    return apply


def _wrong_cell(target: Any) -> Any:
    # The slot's neighbour receives the token's K/V.
    from reference_impl.kv.cache import KVCache

    original = KVCache.single_cell

    def single_cell(self: KVCache, sinfo: Any) -> tuple[int, int] | None:
        cell = original(self, sinfo)
        return None if cell is None else (cell[0], (cell[1] + 1) % self.kv_size)

    KVCache.single_cell = single_cell  # type: ignore[method-assign]
    return target


def _wrap_native_decode_path(change: Any) -> None:
    """Replace Context._native_decode_path by ``change(self, name, step, reason)`` applied to
    the original's result."""
    from reference_impl.decoder.context import Context

    original = Context._native_decode_path

    def native_decode_path(self: Context, name: str) -> tuple[Any, str]:
        return change(self, name, *original(self, name))

    Context._native_decode_path = native_decode_path  # type: ignore[method-assign]


def _never_native(target: Any) -> Any:
    # "auto" and "native" both run the torch forward, and the context still says "native".
    _wrap_native_decode_path(lambda self, name, step, reason: (None, reason))
    return target


def _fallback_raises(target: Any) -> Any:
    # "auto" refuses to create a context the native step cannot serve (no library, F16 K/V, ...)
    # instead of falling back to the torch forward.
    from reference_impl.errors import DecoderError

    def change(self: Any, name: str, step: Any, reason: str) -> tuple[Any, str]:
        if step is None and name == "auto":
            raise DecoderError("DEC_NATIVE_UNAVAILABLE", reason, field="decode_path")
        return step, reason

    _wrap_native_decode_path(change)
    return target


def _f16_kv_read_raw(target: Any) -> Any:
    # The forward gets the cache's float16 views as they are.
    def kv_reader(cache: Any, streams: tuple[int, ...], n_kv: int) -> Any:
        def read(il: int) -> tuple[torch.Tensor, torch.Tensor]:
            views = [cache.kv_view(il, st, n_kv) for st in streams]
            return torch.cat([k for k, _ in views]), torch.cat([v for _, v in views])

        return read

    replace("reference_impl.decoder.ubatch_executor", "kv_reader", kv_reader)
    return target


def _n_seq_max_cap_255(target: Any) -> Any:
    replace("reference_impl.decoder.params", "LLAMA_MAX_SEQ", 255)
    return target


def _default_n_ubatch_256(target: Any) -> Any:
    from reference_impl.decoder.params import ContextParams

    replace("reference_impl.decoder.context", "ContextParams", lambda: ContextParams(n_ubatch=256))
    return target


def _default_swa_full_off(target: Any) -> Any:
    """The window cache of a sliding-window model holds one window and a ubatch by default."""
    from reference_impl.decoder.params import ContextParams

    replace(
        "reference_impl.decoder.context", "ContextParams", lambda: ContextParams(swa_full=False)
    )
    return target


def _negative_position_is_minus_two(target: Any) -> Any:
    """A batch the KV cache cannot place (a negative position) is reported as a compute
    failure, -2, instead of an invalid batch."""
    from reference_impl.decoder import context as ctx_mod
    from reference_impl.errors import KVCacheError

    original = ctx_mod.Context._prepare_memory

    def prepare(self: Any, splitter: Any) -> Any:
        try:
            return original(self, splitter)
        except ctx_mod._StepFailed as failure:
            if isinstance(failure.error, KVCacheError):
                raise ctx_mod._StepFailed(-2, failure.error) from failure
            raise

    ctx_mod.Context._prepare_memory = prepare  # type: ignore[method-assign]
    return target


def _native_refuses_mqa(target: Any) -> Any:
    """The native step is refused for a model with a single K/V head (n_head_kv == 1)."""
    from reference_impl.native import step

    original = step.unsupported

    def unsupported(graph: Any) -> str | None:
        if graph.hparams.n_head_kv == 1:
            return "n_head_kv == 1"
        return original(graph)

    replace("reference_impl.native.step", "unsupported", unsupported)
    return target


def _native_runs_neox(target: Any) -> Any:
    """The native step is accepted for a model with NEOX RoPE (it rotates adjacent pairs)."""
    from reference_impl.native import step

    original = step.unsupported

    def unsupported(graph: Any) -> str | None:
        why = original(graph)
        return None if why is not None and why.startswith("NEOX") else why

    replace("reference_impl.native.step", "unsupported", unsupported)
    return target


def _native_embd_row_as_token_zero(target: Any) -> Any:
    """A one-token ubatch of an embedding row runs natively from token 0's embedding."""
    from reference_impl.native.step import NativeDecodeStep

    original = NativeDecodeStep.__call__

    def call(self: NativeDecodeStep, **kw: Any) -> Any:
        if kw["token"] is None:
            kw = {**kw, "token": 0, "embd": None}
        return original(self, **kw)

    NativeDecodeStep.__call__ = call  # type: ignore[method-assign]
    return target


def _failed_build_leaves_its_output(target: Any) -> Any:
    """A failed compile leaves its partial output in the build cache (no clean-up)."""
    import os
    import subprocess

    from reference_impl.native import build as native_build

    def build(defines: tuple[str, ...] = ()) -> Any:
        cc = native_build._compiler()
        if cc is None:
            raise RuntimeError("no C compiler")
        out_dir = native_build.cache_dir() / native_build._key(cc, defines)
        lib_path = out_dir / "libdc_decode_step.so"
        if lib_path.exists():
            return lib_path
        out_dir.mkdir(parents=True, exist_ok=True)
        tmp = out_dir / f".build-{os.getpid()}.so"
        flags = (*native_build.FLAGS, *(f"-D{d}" for d in defines))
        cmd = [cc, *flags, str(native_build.SOURCE), "-o", str(tmp), "-lm"]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr.strip()}")
        os.replace(tmp, lib_path)
        return lib_path

    replace("reference_impl.native.build", "build", build)
    return target


def _tail_seq_rm_keeps_first_cell(target: Any) -> Any:
    """seq_rm(s, p, -1) removes [p + 1, inf): the next decode continues at p + 1."""
    from reference_impl.decoder.context import Context

    original = Context.seq_rm

    def seq_rm(self: Context, seq_id: int, p0: int = -1, p1: int = -1) -> bool:
        if p1 < 0 and p0 > 0:
            p0 += 1
        return original(self, seq_id, p0, p1)

    Context.seq_rm = seq_rm  # type: ignore[method-assign]
    return target


def _seq_cp_drops_outputs(target: Any) -> Any:
    from reference_impl.decoder.context import Context

    original = Context.seq_cp

    def seq_cp(self: Context, src: int, dst: int, p0: int = -1, p1: int = -1) -> None:
        original(self, src, dst, p0, p1)
        self.outputs.drop()  # the defect: the last decode's outputs become unreadable

    Context.seq_cp = seq_cp  # type: ignore[method-assign]
    return target


def _mean_pooling_needs_divisible_ubatch(target: Any) -> Any:
    """llama.cpp's old failure: the mean-pooling graph of the worst-case reservation needs
    n_tokens to be a multiple of n_seq_max, so such contexts cannot be created."""
    from reference_impl.decoder.context import Context
    from reference_impl.decoder.params import PoolingType
    from reference_impl.errors import DecoderError

    original = Context._reserve_worst_case

    def reserve(self: Context, initial: bool = False) -> None:
        cp = self.cparams
        if cp.pooling == PoolingType.MEAN and min(cp.n_ctx, cp.n_ubatch) % cp.n_seq_max:
            raise DecoderError(
                "DEC_PARAM", "mean pooling: n_tokens % n_seqs != 0", field="n_ubatch"
            )
        original(self, initial)

    Context._reserve_worst_case = reserve  # type: ignore[method-assign]
    return target


def _reserve_ignores_n_seq_max(target: Any) -> Any:
    from reference_impl.decoder.outputs import OutputBuffers

    original = OutputBuffers.reserve

    def reserve(self: OutputBuffers, n_outputs: int) -> int:
        saved, self.n_seq_max = self.n_seq_max, 1  # the defect: exactly n rows (at least 1)
        try:
            return original(self, n_outputs)
        finally:
            self.n_seq_max = saved

    OutputBuffers.reserve = reserve  # type: ignore[method-assign]
    return target


def _pooled_accessor_reorders(target: Any) -> Any:
    from reference_impl.decoder.context import Context

    original = Context.get_embeddings_seq

    def get_embeddings_seq(self: Context, seq_id: int) -> Any:
        self.outputs.reorder()  # the defect: the pooled accessor applies the pending swaps
        return original(self, seq_id)

    Context.get_embeddings_seq = get_embeddings_seq  # type: ignore[method-assign]
    return target


def _reorder_keeps_swaps(target: Any) -> Any:
    from reference_impl.decoder.outputs import OutputBuffers

    original = OutputBuffers.reorder

    def reorder(self: OutputBuffers) -> None:
        pending = list(self.swaps)
        original(self)
        self.swaps[:] = pending  # the defect: applied but still pending, so a second call undoes

    OutputBuffers.reorder = reorder  # type: ignore[method-assign]
    return target


def _invalid_access_drops_outputs(target: Any) -> Any:
    from reference_impl.decoder.context import Context
    from reference_impl.decoder.outputs import OutputError

    original = Context.get_logits_ith

    def get_logits_ith(self: Context, i: int) -> Any:
        try:
            return original(self, i)
        except OutputError:
            self.outputs.drop()  # the defect: the error path resets the output buffer
            raise

    Context.get_logits_ith = get_logits_ith  # type: ignore[method-assign]
    return target


# -- black-box mutants: defects the decode-level tests (test_blackbox_*.py) catch ---------------


def _ubatches_run_in_reverse(target: Any) -> Any:
    """The executor runs a batch's ubatches last first."""
    from reference_impl.memory.kv import KVBatchContext, KVMemory

    original = KVMemory.init_batch

    def init_batch(self: KVMemory, *args: Any, **kw: Any) -> Any:
        ctx = original(self, *args, **kw)
        if isinstance(ctx, KVBatchContext) and len(ctx.ubatches) > 1:
            ctx.ubatches.reverse()
            ctx.sinfos.reverse()
        return ctx

    KVMemory.init_batch = init_batch  # type: ignore[method-assign]
    return target


def _applied_update_keeps_plans(target: Any) -> Any:
    """A memory update that applied work keeps the stored graph plan."""
    from reference_impl.decoder.context import Context

    original = Context._reserve_worst_case

    def _reserve_worst_case(self: Context, initial: bool = False) -> None:
        if initial:
            original(self, initial)

    Context._reserve_worst_case = _reserve_worst_case  # type: ignore[method-assign]
    return target


def _zero_outputs_max_is_n_ubatch(target: Any) -> Any:
    """``n_outputs_max`` 0 means ``n_ubatch`` rows instead of ``n_batch``."""
    import dataclasses

    import reference_impl.decoder.context as mod

    original = mod.derive

    def derive(p: Any, *args: Any, **kw: Any) -> Any:
        d = original(p, *args, **kw)
        if p.n_outputs_max == 0:
            return dataclasses.replace(d, n_outputs_max=d.n_ubatch)
        return d

    replace("reference_impl.decoder.context", "derive", derive)
    return target


def _output_rows_reversed(target: Any) -> Any:
    """A ubatch's output rows are extracted last token first."""
    import reference_impl.decoder.ubatch_executor as mod

    original = mod.output_rows

    def output_rows(ub: Any, all_outputs: bool) -> Any:
        return original(ub, all_outputs)[::-1].copy()

    replace("reference_impl.decoder.ubatch_executor", "output_rows", output_rows)
    return target


def _ubatch_outputs_all_tokens(target: Any) -> Any:
    """Every ubatch is counted as outputting all of its tokens."""
    from reference_impl.decoder.context import Context, UBatchPlan

    def _count_outputs(self: Context, splitter: Any, mctx: Any) -> Any:
        counts = [ub.n_tokens for ub in mctx.ubatches]
        self.trace.add("split", n_ubatches=len(mctx.ubatches), outputs=counts)
        return UBatchPlan(splitter, mctx, counts, splitter.sb.n_outputs == splitter.sb.n_tokens)

    Context._count_outputs = _count_outputs  # type: ignore[method-assign]
    return target


def _ith_accessor_skips_swaps(target: Any) -> Any:
    """get_logits_ith reads the rows as emitted: it does not apply the pending swaps."""
    from reference_impl.decoder.context import Context

    original = Context.get_logits_ith

    def get_logits_ith(self: Context, i: int) -> Any:
        pending = list(self.outputs.swaps)
        self.outputs.swaps.clear()
        try:
            return original(self, i)
        finally:
            self.outputs.swaps[:] = pending

    Context.get_logits_ith = get_logits_ith  # type: ignore[method-assign]
    return target


def _failed_ubatch_keeps_pooled(target: Any) -> Any:
    """A failed ubatch leaves the pooled embeddings of the ubatches before it readable."""
    from reference_impl.decoder.context import Context

    original = Context._ubatch_failed

    def _ubatch_failed(self: Context, ub: Any, result: Any) -> Any:
        kept = dict(self.embd_seq)
        try:
            original(self, ub, result)
        finally:
            self.embd_seq.update(kept)

    Context._ubatch_failed = _ubatch_failed  # type: ignore[method-assign]
    return target


def _empty_encode_reaches_sanitizer(target: Any) -> Any:
    """An empty encode batch is refused by the batch sanitizer (SAN_EMPTY), not DEC_EMPTY_BATCH."""
    from reference_impl.decoder.context import Context

    original = Context._sanitize_for_encode

    def _sanitize_for_encode(self: Context, batch: Any) -> Any:
        if batch.n_tokens == 0:
            self._run_sanitizer(batch, memory=None, output_all=True)
        return original(self, batch)

    Context._sanitize_for_encode = _sanitize_for_encode  # type: ignore[method-assign]
    return target


MUTANTS = [
    Mutant(
        "dec-sampled-not-reordered",
        "decoder",
        "sampled tokens are left in emission order when the rows are reordered",
        ("OUT-034",),
        _sampled_not_reordered,
        black_box=True,
    ),
    Mutant(
        "dec-no-seq-output-limit",
        "decoder",
        "sequences with a sampler get any number of outputs",
        ("OUT-033",),
        _no_seq_output_limit,
        black_box=True,
    ),
    Mutant(
        "dec-chain-reads-last-row",
        "decoder",
        "a sequence's backend chain samples the ubatch's last output row, not its token's",
        ("OUT-032",),
        _chain_reads_last_row,
        black_box=True,
    ),
    Mutant(
        "dec-reservation-not-rounded",
        "decoder",
        "worst-case reservations round n_tokens down instead of up to a multiple of n_seqs",
        ("DEC-047",),
        _reservation_not_rounded,
    ),
    Mutant(
        "dec-encode-causal",
        "decoder",
        "encode attends causally",
        ("DEC-049",),
        _encode_is_causal,
        black_box=True,
    ),
    Mutant(
        "dec-triton-backend-falls-back",
        "decoder",
        "the Triton attention backend silently runs the torch path",
        ("DEC-058",),
        _triton_backend_falls_back,
    ),
    Mutant(
        "dec-outputs-not-reordered",
        "decoder",
        "pending swaps are dropped instead of applied, so rows stay in emission order",
        ("OUT-010", "OUT-005"),
        _outputs_not_reordered,
    ),
    Mutant(
        "dec-mapping-without-sort",
        "decoder",
        "the output mapping points at emission-order rows and records no swaps",
        ("OUT-007", "OUT-010"),
        _mapping_without_sort,
    ),
    Mutant(
        "dec-mapping-not-rebuilt-after-sort",
        "decoder",
        "output_ids keeps the emission-order rows while the rows are sorted into batch order",
        ("OUT-006",),
        _mapping_not_rebuilt_after_sort,
        black_box=True,
    ),
    Mutant(
        "dec-negative-index-as-batch-index",
        "decoder",
        "get_logits_ith(-k) resolves batch index n_batch-k instead of the k-th row from the end",
        ("OUT-013",),
        _negative_index_is_a_batch_index,
    ),
    Mutant(
        "dec-no-rollback",
        "decoder",
        "a failed ubatch leaves its tokens in memory",
        ("DEC-027", "DEC-028", "DEC-029"),
        _no_rollback,
        black_box=True,
    ),
    Mutant(
        "dec-no-memory-update",
        "decoder",
        "decode places the batch without applying pending K-shifts",
        ("DEC-034", "DEC-035", "DEC-037"),
        _no_memory_update,
    ),
    Mutant(
        "dec-n-ctx-not-padded",
        "decoder",
        "n_ctx and n_ctx_seq are not rounded up to 256",
        ("DEC-002", "DEC-007"),
        _n_ctx_not_padded,
    ),
    Mutant(
        "dec-plans-never-reused",
        "decoder",
        "every ubatch builds a new compute plan",
        ("DEC-043", "DEC-044"),
        _plans_never_reused,
        black_box=True,
    ),
    Mutant(
        "dec-embeddings-without-norm-gain",
        "decoder",
        "pooling NONE exposes the hidden state before the output norm's gain",
        ("OUT-024",),
        _embeddings_before_output_norm_gain,
        black_box=True,
    ),
    Mutant(
        "dec-reused-plan-keeps-positions",
        "decoder",
        "a reused compute plan keeps the positions of the ubatch that built it",
        ("DEC-045",),
        _reused_plan_keeps_positions,
        black_box=True,
    ),
    Mutant(
        "dec-mean-over-ubatch",
        "decoder",
        "MEAN pooling divides by the ubatch's token count",
        ("OUT-025",),
        _mean_over_ubatch,
    ),
    Mutant(
        "dec-cls-ties-take-last",
        "decoder",
        "CLS pooling breaks position ties towards the last token",
        ("OUT-026",),
        _cls_ties_take_the_last,
    ),
    Mutant(
        "dec-outputs-dropped-early",
        "decoder",
        "a decode forgets the previous outputs before validating the batch",
        ("OUT-021", "DEC-016"),
        _outputs_dropped_before_validation,
    ),
    Mutant(
        "native-rope-split-halves",
        "decoder",
        "the native step rotates (x[j], x[j + d/2]) pairs (NEOX) instead of adjacent pairs",
        ("DEC-060",),
        _build("DC_MUTANT_ROPE_HALVES"),
    ),
    Mutant(
        "native-mask-ignored",
        "decoder",
        "the native step attends every cell up to n_kv, ignoring the KQ mask",
        ("DEC-060",),
        _build("DC_MUTANT_MASK_IGNORED"),
    ),
    Mutant(
        "native-gqa-heads-tiled",
        "decoder",
        "the native step maps query head h to KV head h % n_head_kv",
        ("DEC-060",),
        _build("DC_MUTANT_GQA_TILED"),
    ),
    Mutant(
        "native-kv-not-written",
        "decoder",
        "the native step attends without storing the token's K/V in the cache",
        ("DEC-060", "DEC-061"),
        _build("DC_MUTANT_KV_NOT_WRITTEN"),
    ),
    Mutant(
        "native-wrong-cell",
        "decoder",
        "the native step writes the token's K/V into the cell after the slot",
        ("DEC-061",),
        _wrong_cell,
    ),
    Mutant(
        "native-never-runs",
        "decoder",
        "one-token ubatches silently run the torch forward while the context reports native",
        ("DEC-060", "DEC-062"),
        _never_native,
    ),
    Mutant(
        "native-fallback-raises",
        "decoder",
        "an 'auto' context without the native library fails at creation instead of falling back",
        ("DEC-063",),
        _fallback_raises,
    ),
    Mutant(
        "dec-f16-kv-read-raw",
        "decoder",
        "the torch forward reads a float16 K/V cache without converting it to float32",
        ("DEC-064",),
        _f16_kv_read_raw,
        black_box=True,
    ),
    Mutant(
        "dec-n-seq-max-cap-255",
        "decoder",
        "a context refuses n_seq_max = 256 (the cap is off by one)",
        ("DEC-001",),
        _n_seq_max_cap_255,
    ),
    Mutant(
        "dec-default-n-ubatch-256",
        "decoder",
        "the default n_ubatch is 256 instead of 512",
        ("DEC-009",),
        _default_n_ubatch_256,
    ),
    Mutant(
        "dec-default-swa-full-off",
        "decoder",
        "swa_full defaults to False: a sliding-window model's window cache holds one window",
        ("DEC-009",),
        _default_swa_full_off,
    ),
    Mutant(
        "dec-negative-position-minus-two",
        "decoder",
        "a negative position refused by the KV cache makes decode return -2, not -1",
        ("DEC-068",),
        _negative_position_is_minus_two,
    ),
    Mutant(
        "native-refuses-mqa",
        "decoder",
        "the native step refuses a model with one K/V head (multi-query attention)",
        ("DEC-060",),
        _native_refuses_mqa,
    ),
    Mutant(
        "dec-tail-seq-rm-keeps-first-cell",
        "decoder",
        "seq_rm(s, p, -1) keeps the cell at p, so the next decode continues at p + 1",
        ("DEC-040",),
        _tail_seq_rm_keeps_first_cell,
        black_box=True,
    ),
    Mutant(
        "dec-seq-cp-drops-outputs",
        "decoder",
        "seq_cp makes the last decode's outputs unreadable",
        ("DEC-041",),
        _seq_cp_drops_outputs,
        black_box=True,
    ),
    Mutant(
        "dec-mean-pooling-needs-divisible-ubatch",
        "decoder",
        "a MEAN-pooling context whose n_ubatch is not a multiple of n_seq_max cannot be created",
        ("DEC-057",),
        _mean_pooling_needs_divisible_ubatch,
    ),
    Mutant(
        "out-reserve-ignores-n-seq-max",
        "decoder",
        "output reservation provides n rows instead of max(n, n_seq_max)",
        ("OUT-001",),
        _reserve_ignores_n_seq_max,
    ),
    Mutant(
        "out-pooled-accessor-reorders",
        "decoder",
        "get_embeddings_seq applies the pending output swaps",
        ("OUT-008",),
        _pooled_accessor_reorders,
    ),
    Mutant(
        "out-reorder-keeps-swaps",
        "decoder",
        "reorder applies the swaps but leaves them pending, so the next call undoes them",
        ("OUT-009",),
        _reorder_keeps_swaps,
    ),
    Mutant(
        "out-invalid-access-drops-outputs",
        "decoder",
        "an invalid get_logits_ith call leaves no readable output",
        ("OUT-018",),
        _invalid_access_drops_outputs,
        black_box=True,
    ),
    Mutant(
        "dec-ubatches-reversed",
        "decoder",
        "the executor runs a batch's ubatches last first",
        ("DEC-031",),
        _ubatches_run_in_reverse,
        black_box=True,
    ),
    Mutant(
        "dec-update-keeps-plans",
        "decoder",
        "a memory update that applied work keeps the stored graph plan",
        ("DEC-036",),
        _applied_update_keeps_plans,
        black_box=True,
    ),
    Mutant(
        "dec-zero-outputs-max-is-n-ubatch",
        "decoder",
        "n_outputs_max 0 means n_ubatch rows instead of n_batch",
        ("DEC-006",),
        _zero_outputs_max_is_n_ubatch,
        black_box=True,
    ),
    Mutant(
        "out-rows-extracted-reversed",
        "decoder",
        "a ubatch's output rows are extracted last token first",
        ("OUT-005",),
        _output_rows_reversed,
        black_box=True,
    ),
    Mutant(
        "dec-ubatch-outputs-all-tokens",
        "decoder",
        "every ubatch is counted as outputting all of its tokens",
        ("DEC-012",),
        _ubatch_outputs_all_tokens,
        black_box=True,
    ),
    Mutant(
        "out-ith-skips-swaps",
        "decoder",
        "get_logits_ith reads rows in emission order, leaving the swaps to get_logits",
        ("OUT-008",),
        _ith_accessor_skips_swaps,
        black_box=True,
    ),
    Mutant(
        "native-runs-neox-rope",
        "decoder",
        "the native step is used for a NEOX-RoPE model (qwen2), rotating adjacent pairs",
        ("DEC-062",),
        _native_runs_neox,
    ),
    Mutant(
        "native-embd-row-as-token-zero",
        "decoder",
        "a one-token ubatch of an embedding row runs natively from token 0's embedding",
        ("DEC-060",),
        _native_embd_row_as_token_zero,
    ),
    Mutant(
        "native-failed-build-leaves-output",
        "decoder",
        "a compiler that fails after writing its output leaves that file in the build cache",
        ("DEC-063",),
        _failed_build_leaves_its_output,
    ),
    Mutant(
        "dec-failed-ubatch-keeps-pooled",
        "decoder",
        "a failed ubatch leaves the pooled embeddings of the ubatches before it readable",
        ("OUT-022",),
        _failed_ubatch_keeps_pooled,
    ),
    Mutant(
        "dec-empty-encode-sanitizer-code",
        "decoder",
        "an empty encode batch is refused with the sanitizer's SAN_EMPTY, not DEC_EMPTY_BATCH",
        ("DEC-015",),
        _empty_encode_reaches_sanitizer,
    ),
]
