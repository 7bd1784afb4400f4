"""The decoder context: seed 000's seven-step decode flow over a model and its KV memory.

``Context.decode(batch)`` returns llama_decode's integer codes and never raises for batch
content (spec/decoder.md D12); the typed error explaining a non-zero code is kept in
``last_error``. ``decode`` reads as seed 000's seven steps (return codes of failures in
brackets):

1. ``_sanitize``: validate and complete the batch, check the size limits [-1]
2-4. ``_prepare_memory``: the memory update (3), then llama.cpp's init_batch, which splits the
   batch into ubatches (2: the split depends on the memory) and plans a slot for each (4), with
   one optimizing retry [1 no slot, -2]; ``_count_outputs``: the output rows of each ubatch (2)
5. ``_reserve_outputs``: output rows, mapping reset [-2]
6. ``_run_ubatches``: per ubatch, the UBatchExecutor's KV apply, compute (plan reuse) and output
   extraction [2 / -2 / -3, the failed ubatch rolled back]
7. ``_finalize``: the row total, then the output mapping, reordered on first read [-3]

A step that fails raises :class:`_StepFailed` with the code and the error; ``decode`` turns it
into its return value. Tests that need the failures a healthy model never produces pass a
:class:`~reference_impl.decoder.faults.FaultInjector` at creation; without one the flow has no
test hooks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np
import torch

from reference_impl.batch import sanitize as batch_sanitize
from reference_impl.batch.sanitize import SanitizedBatch
from reference_impl.batch.split import BatchSplitter, ubatch_reserve
from reference_impl.batch.types import Batch, UBatch
from reference_impl.decoder.graph import GraphScheduler
from reference_impl.decoder.outputs import OutputBuffers, OutputError
from reference_impl.decoder.params import ContextParams, Derived, derive
from reference_impl.decoder.pooling import PoolingType
from reference_impl.decoder.trace import DecodeTrace
from reference_impl.decoder.ubatch_executor import UBatchExecutor, UBatchResult
from reference_impl.errors import BatchError, DecoderError, EngineError, KVCacheError
from reference_impl.kv.cache import KVCache, KVCacheConfig
from reference_impl.memory.base import MemoryContext
from reference_impl.memory.coordinator import MemoryCoordinator, make_memory
from reference_impl.memory.status import ComputeStatus, MemoryStatus, ubatch_failure_decode_code
from reference_impl.model import Model, set_threads
from reference_impl.native import NativeDecodeStep
from reference_impl.spec_links import implements

if TYPE_CHECKING:
    from reference_impl.decoder.faults import FaultInjector


class _StepFailed(Exception):
    """A step ends the decode (or encode) call: it returns ``code``, ``last_error`` is ``error``."""

    def __init__(self, code: int, error: EngineError) -> None:
        super().__init__(code, error)
        self.code = code
        self.error = error


@dataclasses.dataclass(frozen=True)
class UBatchPlan:
    """What steps 5-7 need from steps 1-4: the prepared ubatches and their output rows."""

    splitter: BatchSplitter  # the sanitized batch (.sb) and, once split, out_ids
    mctx: MemoryContext  # the prepared ubatches: get_ubatch / apply / next
    ubatch_outputs: list[int]  # output rows of each ubatch, in the memory's order
    all_outputs: bool  # every token is an output: a ubatch's rows are all its tokens

    @property
    def n_outputs(self) -> int:
        return self.splitter.sb.n_outputs


class Context:
    """A decoding context (llama_context) over a :class:`~reference_impl.model.Model`."""

    @implements("OUT-017")
    def __init__(
        self,
        model: Model,
        params: ContextParams | None = None,
        *,
        faults: FaultInjector | None = None,
        **overrides: Any,
    ) -> None:
        params = dataclasses.replace(params or ContextParams(), **overrides)
        self.model = model
        self.params = params
        self.cparams: Derived = derive(
            params,
            n_ctx_train=model.n_ctx_train,
            # the model's attention type and pooling are the defaults (bert's keys, GGUF-052)
            model_causal=model.hparams.causal_attn,
            model_pooling=(
                PoolingType(model.hparams.pooling_type) if model.hparams.pooling_type >= 0 else None
            ),
        )
        self._check_params()
        if params.n_threads is not None:
            set_threads(params.n_threads)
        hp, cp = model.hparams, self.cparams
        self.memory = self._make_memory()
        self.coordinator = MemoryCoordinator(self.memory)
        self.outputs = OutputBuffers(
            n_vocab=hp.n_vocab,
            n_embd=hp.n_embd,
            n_batch=cp.n_batch,
            n_seq_max=cp.n_seq_max,
            embeddings=cp.embeddings,
            n_outputs_limit=cp.n_outputs_max,
        )
        self.outputs.reserve(0)  # a new context already holds n_seq_max rows (OUT-017)
        self.embd_seq: dict[int, np.ndarray] = {}  # pooled embedding per sequence, last decode
        self.samplers: dict[int, Any] = {}  # sample router: seq_id -> sampler chain
        self._last_seq_sets: list[tuple[int, ...]] = []  # sequences of each token, last batch
        self.last_error: EngineError | None = None
        self.scheduler = GraphScheduler(reuse=params.graph_reuse)
        self.trace = DecodeTrace(enabled=params.trace)
        self._reserve_worst_case(initial=True)
        self.attention, self.kernel_trace = self._attention_backend(params.attention_backend)
        self.native_step, self.native_reason = self._native_decode_path(params.decode_path)
        self.executor = UBatchExecutor(
            model,
            self.memory,
            self.outputs,
            self.scheduler,
            self.trace,
            causal_attn=cp.causal_attn,
            embeddings=cp.embeddings,
            pooling=cp.pooling,
            attention=self.attention,
            native_step=self.native_step,
        )
        self.faults = faults
        if faults is not None:  # tests only: these parts then fail on demand (faults.py)
            faults.attach(self.coordinator, self.outputs, self.executor)

    # ================================================================== public API

    @implements("DEC-010")
    def n_ctx(self) -> int:
        return self.cparams.n_ctx

    @implements("DEC-010")
    def n_ctx_seq(self) -> int:
        return self.cparams.n_ctx_seq

    @implements("DEC-010")
    def n_batch(self) -> int:
        return self.cparams.n_batch

    @implements("DEC-010")
    def n_ubatch(self) -> int:
        return self.cparams.n_ubatch

    @implements("DEC-010")
    def n_seq_max(self) -> int:
        return self.cparams.n_seq_max

    @implements("DEC-010")
    def pooling_type(self) -> PoolingType:
        return self.cparams.pooling

    @implements("DEC-011", "DEC-013", "DEC-022", "PHASE-006")
    def decode(self, batch: Batch) -> int:
        """llama_decode: 0 ok, 1 no KV slot, 2 aborted, -1 invalid batch, -2 / -3 failures.
        A context without memory (encoder-only model) encodes the batch instead (DEC-048)."""
        if self.memory is NO_MEMORY:
            return self._decode_as_encode(batch)
        self._begin_call("decode", batch)
        try:
            sb = self._sanitize(batch)  # 1
            splitter = BatchSplitter(sb)
            mctx = self._prepare_memory(splitter)  # 3, then 2 and 4 (init_batch)
            plan = self._count_outputs(splitter, mctx)  # 2
            self._reserve_outputs(plan.n_outputs)  # 5
            n_rows = self._run_ubatches(plan)  # 6
            self._finalize(plan, n_rows)  # 7
        except _StepFailed as failure:
            return self._end_call(failure)
        return self._end_call()

    @implements("DEC-048")
    def _decode_as_encode(self, batch: Batch) -> int:
        """llama.cpp's decode on a context whose model created no memory: it logs that it
        calls encode() instead and returns encode's result."""
        self.trace.add("decode_as_encode")
        return self.encode(batch)

    @implements("DEC-049")
    def encode(self, batch: Batch) -> int:
        """llama_encode: the whole batch as one non-causal ubatch, every token an output,
        positions from 0 when missing, nothing kept in memory. Returns 0, -1, 2, -2 or -3."""
        self._begin_call("encode", batch)
        try:
            sb = self._sanitize_for_encode(batch)
            ub = BatchSplitter(sb).split_simple(sb.n_tokens)  # one ubatch: all of it
            self._reserve_outputs(sb.n_tokens)
            self._run_encode(ub)
            self._finalize_encode(sb)
        except _StepFailed as failure:
            return self._end_call(failure)
        return self._end_call()

    @implements("DEC-029", "DEC-030")
    def set_abort_callback(self, callback: Callable[[], bool] | None) -> None:
        """llama_set_abort_callback: asked once per ubatch, after its KV apply (and once
        before an encode's compute); True stops the call with 2."""
        self.executor.abort_callback = callback

    # ================================================================== decode flow steps

    @implements("DEC-013", "OUT-011")
    def _begin_call(self, what: str, batch: Batch) -> None:
        if not isinstance(batch, Batch):
            raise TypeError(f"{what} expects a Batch, got {type(batch).__name__}")
        self.trace.begin_call()
        self.last_error = None
        # Finish the previous batch's reorder first, so its rows stay correctly mapped whatever
        # this call does (spec/decoder.md D7).
        self.outputs.reorder()

    @implements("DEC-014")
    def _end_call(self, failure: _StepFailed | None = None) -> int:
        code = 0 if failure is None else failure.code
        if failure is not None:
            self.last_error = failure.error
        self.trace.add("done" if code == 0 else "error", code=code)
        return code

    @implements("DEC-015", "DEC-016", "DEC-017", "DEC-020", "DEC-021")
    def _sanitize(self, batch: Batch) -> SanitizedBatch:
        """Step 1: the batch validated and completed against the memory (positions, sequence
        ids, output flags; every flag on with embeddings), then its sizes checked. Every
        failure returns -1 before anything changes."""
        _require_tokens(batch)
        if batch.embd is not None and (
            batch.embd.ndim != 2 or batch.embd.shape[1] != self.model.n_embd
        ):
            raise _StepFailed(
                -1,
                DecoderError(
                    "DEC_EMBD_WIDTH",
                    f"embedding rows must have {self.model.n_embd} floats, got shape {tuple(batch.embd.shape)}",
                    field="embd",
                ),
            )
        sb = self._run_sanitizer(batch, memory=self.memory, output_all=self.cparams.embeddings)
        self.trace.add("sanitize", n_tokens=sb.n_tokens, n_outputs=sb.n_outputs)
        self._check_sizes(sb)
        return sb

    @implements("DEC-018", "DEC-019", "OUT-004")
    def _check_sizes(self, sb: SanitizedBatch) -> None:
        """The limits llama.cpp asserts on (decisions D1, D2): a -1 here, checked after the
        sanitizer so that an invalid batch reports the sanitizer's code."""
        cp, n_tokens = self.cparams, sb.n_tokens
        if n_tokens > cp.n_batch:
            raise _StepFailed(
                -1,
                DecoderError(
                    "DEC_BATCH_TOO_LARGE",
                    f"n_tokens = {n_tokens} > n_batch = {cp.n_batch}",
                    field="n_tokens",
                ),
            )
        if not cp.causal_attn and n_tokens > cp.n_ubatch:
            raise _StepFailed(
                -1,
                DecoderError(
                    "DEC_UBATCH_TOO_SMALL",
                    f"non-causal attention needs n_ubatch >= n_tokens ({cp.n_ubatch} < {n_tokens})",
                    field="n_tokens",
                ),
            )
        if max(sb.n_outputs, cp.n_seq_max) > cp.n_outputs_max:
            raise _StepFailed(
                -1,
                DecoderError(
                    "DEC_TOO_MANY_OUTPUTS",
                    f"{sb.n_outputs} outputs > n_outputs_max = {cp.n_outputs_max}",
                    field="logits",
                ),
            )
        limit_error = self._seq_output_limit_error(sb)
        if limit_error is not None:
            raise _StepFailed(-1, limit_error)

    @implements("DEC-023", "DEC-024", "DEC-025", "DEC-034", "DEC-036", "DEC-068")
    def _prepare_memory(self, splitter: BatchSplitter) -> MemoryContext:
        """Steps 3, 2 and 4 in one coordinator call, in llama.cpp's order: the memory update
        first (pending K-shifts and stream copies, so the new tokens are placed and attend after
        them), then init_batch, which splits the batch (the split depends on the memory) and
        plans a slot for every ubatch, retrying once after an optimizing update."""
        cp = self.cparams
        try:
            plan = self.coordinator.prepare_batch(splitter, cp.n_ubatch, output_all=cp.embeddings)
        except KVCacheError as err:  # e.g. a negative position: the batch cannot be placed
            raise _StepFailed(-1, err) from err
        for optimize, applied in plan.updates:
            self.trace.add("memory_update", optimize=optimize, applied=applied)
            if applied:
                self._reserve_worst_case()  # the applied work changed what the graphs cover
        self.trace.add("init_batch", status=int(plan.status), retried=plan.retried)
        if plan.status == MemoryStatus.FAILED_PREPARE:
            raise _StepFailed(
                1,
                DecoderError(
                    "DEC_NO_SLOT",
                    f"failed to find a memory slot for a batch of {splitter.sb.n_tokens} tokens",
                ),
            )
        if plan.status != MemoryStatus.SUCCESS or plan.context is None:
            raise _StepFailed(
                -2,
                DecoderError("DEC_MEMORY_STATUS", f"unexpected memory status {plan.status.name}"),
            )
        return plan.context

    @implements("DEC-012")
    def _count_outputs(self, splitter: BatchSplitter, mctx: MemoryContext) -> UBatchPlan:
        """Step 2's output selection: each ubatch yields a row per token when the whole batch
        is output, else a row per flagged token."""
        sb = splitter.sb
        all_outputs = sb.n_outputs == sb.n_tokens
        counts = [
            ub.n_tokens if all_outputs else int(np.count_nonzero(ub.output[: ub.n_tokens]))
            for ub in mctx.ubatches
        ]
        self.trace.add("split", n_ubatches=len(mctx.ubatches), outputs=counts)
        return UBatchPlan(splitter, mctx, counts, all_outputs)

    @implements("DEC-026", "OUT-003", "OUT-021", "OUT-030")
    def _reserve_outputs(self, n_outputs: int) -> None:
        """Step 5: rows for the batch's outputs. From here on the last batch's outputs are gone
        (mapping and pooled embeddings); a call that failed earlier leaves them readable."""
        try:
            rows = self.outputs.reserve(n_outputs)
        except OutputError as err:
            raise _StepFailed(-2, DecoderError("DEC_OUTPUT_RESERVE", str(err))) from err
        self.embd_seq.clear()
        self.trace.add("output_reserve", rows=rows)

    @implements("DEC-027", "DEC-031", "OUT-005", "OUT-029")
    def _run_ubatches(self, plan: UBatchPlan) -> int:
        """Step 6: execute the ubatches in the memory's order, each one's rows after those of
        the ubatches before it; returns the number of rows extracted."""
        mctx, row0 = plan.mctx, 0
        while True:
            ub = mctx.get_ubatch()
            n_outputs = plan.ubatch_outputs[mctx.i_cur]
            result = self.executor.execute(mctx, ub, row0, n_outputs, plan.all_outputs)
            if result.status != ComputeStatus.SUCCESS:
                self._ubatch_failed(ub, result)
            self.embd_seq.update(result.pooled)  # a sequence split over ubatches: the last wins
            self._sample_rows(ub, result.rows, row0)
            row0 += result.n_rows
            if not mctx.next():
                return row0

    @implements("DEC-027", "DEC-028", "OUT-022")
    def _ubatch_failed(self, ub: UBatch, result: UBatchResult) -> NoReturn:
        """A failed ubatch ends the decode: its sequences lose their positions from the first
        one in it (earlier ubatches stay in memory), and no output row is readable."""
        code = self.coordinator.ubatch_failed(ub, result.status)
        self.outputs.drop()
        self.embd_seq.clear()
        raise _StepFailed(code, result.error or DecoderError("DEC_COMPUTE_FAILED", "ubatch failed"))

    @implements("DEC-033", "OUT-006", "OUT-007")
    def _finalize(self, plan: UBatchPlan, n_rows: int) -> None:
        """Step 7: the rows must be the batch's outputs; then out_ids (emission order) become
        output_ids, with the swaps back to batch order left pending until the first read."""
        if n_rows != plan.n_outputs:
            self.outputs.drop()
            raise _StepFailed(
                -3,
                DecoderError("DEC_OUTPUT_COUNT", f"{n_rows} rows for {plan.n_outputs} outputs"),
            )
        out_ids = [int(i) for i in plan.splitter.out_ids]
        self.outputs.finalize(out_ids)
        self._remember_seq_sets(plan.splitter.sb)
        self.trace.add("map_outputs", out_ids=out_ids, swaps=list(self.outputs.swaps))

    # ================================================================== encode flow steps

    @implements("DEC-050")
    def _sanitize_for_encode(self, batch: Batch) -> SanitizedBatch:
        """An encode's batch: no memory to continue positions from, every token an output, and
        all of it in one ubatch."""
        _require_tokens(batch)
        sb = self._run_sanitizer(batch, memory=None, output_all=True)
        _check_position_table(self.model.hparams, sb)
        if sb.n_tokens > self.cparams.n_ubatch:
            raise _StepFailed(
                -1,
                DecoderError(
                    "DEC_UBATCH_TOO_SMALL",
                    f"encode needs n_ubatch >= n_tokens ({self.cparams.n_ubatch} < {sb.n_tokens})",
                    field="n_tokens",
                ),
            )
        return sb

    def _run_encode(self, ub: UBatch) -> None:
        """Compute the encode's ubatch; a failure (abort: 2, compute: -3) leaves no row: the
        output reservation before it already reset the mapping, and only success maps rows."""
        result = self.executor.encode(ub)
        if result.status != ComputeStatus.SUCCESS:
            assert result.error is not None
            raise _StepFailed(ubatch_failure_decode_code(result.status), result.error)
        self.embd_seq.update(result.pooled)

    def _finalize_encode(self, sb: SanitizedBatch) -> None:
        self.outputs.finalize(list(range(sb.n_tokens)))  # row i is batch token i
        self._remember_seq_sets(sb)

    # ------------------------------------------------------------------ shared by both flows

    def _run_sanitizer(self, batch: Batch, **options: Any) -> SanitizedBatch:
        try:
            return batch_sanitize.sanitize(
                batch,
                n_vocab=self.model.n_vocab,
                n_seq_max=self.cparams.n_seq_max,
                n_pos_per_embd=self.model.hparams.n_pos_per_embd,  # 4 with M-RoPE
                **options,
            )
        except BatchError as err:
            raise _StepFailed(-1, err) from err

    def _remember_seq_sets(self, sb: SanitizedBatch) -> None:
        """The sequences of every token of the batch, for the sample router's row lookup."""
        self._last_seq_sets = [tuple(sb.batch.seq_ids_of(i)) for i in range(sb.n_tokens)]

    # ================================================================== sample router

    @implements("OUT-033")
    def set_sampler(self, seq_id: int, chain: Any) -> None:
        """Attach a sampler chain (a ``reference_impl.sampling`` chain description) to a
        sequence, or detach it with None: after each decode, the rows of the flagged tokens
        listing the sequence are sampled (``get_sampled_token_ith``), and a batch may give the
        sequence at most ``n_outputs_max_per_seq`` outputs."""
        if chain is None:
            self.samplers.pop(seq_id, None)
            return
        from reference_impl.sampling import chain as sampling_chain

        self.samplers[seq_id] = sampling_chain.build_chain(chain)

    @implements("OUT-033")
    def _seq_output_limit_error(self, sb: SanitizedBatch) -> DecoderError | None:
        """Part of step 1: a sequence with a sampler gets at most ``n_outputs_max_per_seq``
        outputs per batch, counting every flagged token that lists it."""
        if not self.samplers:
            return None
        limit = self.params.n_outputs_max_per_seq
        counts: dict[int, int] = {}
        flags = np.asarray(sb.batch.logits) != 0
        for i in range(sb.n_tokens):
            if not flags[i]:
                continue
            for s in sb.batch.seq_ids_of(i):
                if s in self.samplers:
                    counts[s] = counts.get(s, 0) + 1
                    if counts[s] > limit:
                        return DecoderError(
                            "DEC_SEQ_OUTPUT_LIMIT",
                            f"sequence {s} has a sampler and more than {limit} output(s) in the batch",
                            field="logits",
                            index=i,
                            seq_id=s,
                        )
        return None

    @implements("SMP-084", "SMP-089")
    def _sample_rows(self, ub: UBatch, rows: np.ndarray, row0: int) -> None:
        """Part of step 6: sample the ubatch's output rows of sequences that have a sampler
        (the first such sequence a token lists): the chain sampled on the row, as on the CPU,
        one draw of its stream per output row."""
        if not self.samplers:
            return
        for k, r in enumerate(rows):
            for s in ub.seq_ids_of(int(r)):
                chain = self.samplers.get(s)
                if chain is not None:
                    self.outputs.sampled[row0 + k] = chain.sample(self.outputs.logits[row0 + k])
                    break

    @implements("OUT-034")
    def get_sampled_token_ith(self, i: int) -> int:
        """The token the sequence's sampler chose for batch token ``i`` in the last decode."""
        self.outputs.reorder()
        tok = int(self.outputs.sampled[self.outputs.resolve_row(i)])
        if tok < 0:
            raise OutputError("OUT_NO_SAMPLE", f"batch token {i} was not sampled", index=i)
        return tok

    @implements("OUT-031", "OUT-032")
    def seq_output_rows(self, seq_id: int) -> list[int]:
        """Output rows (batch order) of the flagged tokens listing ``seq_id``."""
        rows = []
        for i, seqs in enumerate(self._last_seq_sets):
            if seq_id in seqs and self.outputs.output_ids[i] >= 0:
                rows.append(int(self.outputs.output_ids[i]))
        if not rows:
            raise OutputError(
                "OUT_NO_SEQ_ROW", f"sequence {seq_id} has no output row", seq_id=seq_id
            )
        return rows

    # ================================================================== outputs
    # Every per-row read applies the pending swaps first (OUT-008), so rows are in batch order.

    @implements("DEC-052")
    def n_outputs(self) -> int:
        return self.outputs.n_outputs

    @implements("DEC-052")
    def output_ids(self) -> np.ndarray:
        return self.outputs.output_ids.copy()

    @implements("DEC-045")
    def n_reused(self) -> int:
        """Compute plans reused since creation (llama.cpp's perf counter ``n_reused``)."""
        return self.scheduler.n_reused

    @implements("OUT-009")
    def reorder_outputs(self) -> None:
        self.outputs.reorder()

    @implements("OUT-008", "OUT-019")
    def get_logits(self) -> np.ndarray:
        """All output rows in batch order: ``[n_outputs, n_vocab]``."""
        self.outputs.reorder()
        return self.outputs.logits[: self.outputs.n_outputs].copy()

    @implements("OUT-008", "OUT-012", "OUT-013", "OUT-014", "OUT-015", "OUT-016")
    def get_logits_ith(self, i: int) -> np.ndarray:
        """Logits of batch token ``i`` (``i < 0``: the ``-i``-th row from the end).

        Raises :class:`~reference_impl.decoder.outputs.OutputError` for an invalid ``i``.
        """
        self.outputs.reorder()
        return self.outputs.logits[self.outputs.resolve_row(i)].copy()

    @implements("OUT-008", "OUT-020")
    def get_embeddings(self) -> np.ndarray:
        self._require_token_embeddings()
        self.outputs.reorder()
        assert self.outputs.embd is not None
        return self.outputs.embd[: self.outputs.n_outputs].copy()

    @implements("OUT-008", "OUT-020", "OUT-024")
    def get_embeddings_ith(self, i: int) -> np.ndarray:
        self._require_token_embeddings()
        self.outputs.reorder()
        assert self.outputs.embd is not None
        return self.outputs.embd[self.outputs.resolve_row(i)].copy()

    @implements("OUT-030")
    def get_embeddings_seq(self, seq_id: int) -> np.ndarray:
        """The pooled embedding of ``seq_id`` from the last decode (pooling MEAN/CLS/LAST)."""
        if self.cparams.pooling == PoolingType.NONE or seq_id not in self.embd_seq:
            raise OutputError(
                "OUT_NO_EMBEDDINGS", f"no pooled embedding for sequence {seq_id}", seq_id=seq_id
            )
        return self.embd_seq[seq_id].copy()

    @implements("OUT-020")
    def _require_token_embeddings(self) -> None:
        if not self.cparams.embeddings or self.cparams.pooling != PoolingType.NONE:
            raise OutputError(
                "OUT_NO_EMBEDDINGS",
                "per-token embeddings need embeddings=True and pooling NONE",
                field="embeddings",
            )

    # ================================================================== memory ops
    # They act on the memory only: the last decode's outputs stay as they are (DEC-041).

    @implements("DEC-038", "DEC-039", "DEC-041")
    def memory_clear(self, data: bool = True) -> None:
        self.memory.clear(data)

    @implements("DEC-038", "DEC-040", "DEC-041")
    def seq_rm(self, seq_id: int, p0: int = -1, p1: int = -1) -> bool:
        return bool(self.memory.seq_rm(seq_id, p0, p1))

    @implements("DEC-038", "DEC-041")
    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None:
        self.memory.seq_cp(src, dst, p0, p1)

    @implements("DEC-038", "DEC-041")
    def seq_keep(self, seq_id: int) -> None:
        self.memory.seq_keep(seq_id)

    @implements("DEC-038", "DEC-041")
    def seq_add(self, seq_id: int, p0: int, p1: int, delta: int) -> None:
        self.memory.seq_add(seq_id, p0, p1, delta)

    @implements("DEC-038", "DEC-041")
    def seq_div(self, seq_id: int, p0: int, p1: int, d: int) -> None:
        self.memory.seq_div(seq_id, p0, p1, d)

    @implements("DEC-038")
    def seq_pos_min(self, seq_id: int) -> int:
        return int(self.memory.seq_pos_min(seq_id))

    @implements("DEC-038")
    def seq_pos_max(self, seq_id: int) -> int:
        return int(self.memory.seq_pos_max(seq_id))

    @implements("DEC-037", "DEC-053", "DEC-054")
    def _k_shift(self, layer: int, k: torch.Tensor, shift: torch.Tensor) -> None:
        """The memory update's K-shift: re-rotate the cached keys of every stream by their
        accumulated position delta (with the layer's RoPE base)."""
        for st in range(k.shape[0]):
            if bool(shift[st].any()):
                shifted = self.model.rope_shift(k[st], shift[st].to(torch.long), layer)
                k[st].copy_(shifted.to(k.dtype))

    # ================================================================== construction

    @implements("DEC-065")
    def _make_memory(self) -> Any:
        """llama.cpp's ``create_memory``: a model with sliding-window layers gets the iSWA
        memory (a full cache for the global layers, a windowed one for the sliding layers,
        ``swa_full`` sizing the latter); an encoder-only model none (``NO_MEMORY``: decode
        encodes, the memory operations act on nothing); any other model one KV cache."""
        hp, cp, params = self.model.hparams, self.cparams, self.params
        if hp.encoder_only:  # llama.cpp's create_memory returns no memory for bert (DEC-048)
            return NO_MEMORY
        config = KVCacheConfig(
            kv_size=cp.n_ctx_seq,
            n_seq_max=cp.n_seq_max,
            unified=cp.kv_unified,
            n_layer=hp.n_layer,
            n_head_kv=hp.n_head_kv,
            head_dim=hp.head_dim,
            dtype=params.kv_dtype,
            n_pos_per_embd=hp.n_pos_per_embd,  # M-RoPE: 2-D cells, no K-shift
        )
        if not hp.has_swa:
            return make_memory("kv", config, k_shift_fn=self._k_shift)
        config = dataclasses.replace(config, n_swa=hp.n_swa, swa_type=hp.swa_type)
        return make_memory(
            "iswa",
            config,
            n_ubatch=cp.n_ubatch,
            swa_full=params.swa_full,
            k_shift_fn=self._k_shift,
        )

    @implements("DEC-059", "OUT-028")
    def _check_params(self) -> None:
        """Parameters the context refuses before it allocates anything."""
        cp, params = self.cparams, self.params
        if cp.pooling == PoolingType.RANK:
            raise DecoderError(
                "DEC_POOLING_UNSUPPORTED",
                "RANK pooling needs a classifier head, which this model does not have",
                field="pooling",
            )
        if params.attention_backend not in ("torch", "triton", "triton-1pass", "triton-2pass"):
            raise DecoderError(
                "DEC_PARAM",
                f"unknown attention backend {params.attention_backend!r}",
                field="attention_backend",
            )
        if cp.n_seq_max > cp.n_outputs_max:
            # llama.cpp aborts here (output_reserve asserts n_seq_max rows <= n_outputs_max)
            raise DecoderError(
                "DEC_N_OUTPUTS_MAX",
                f"n_seq_max = {cp.n_seq_max} exceeds n_outputs_max = {cp.n_outputs_max} "
                "(n_batch unless set): every decode reserves a row per sequence",
                field="n_seq_max",
            )

    @implements("DEC-046", "DEC-047")
    def _reserve_worst_case(self, initial: bool = False) -> None:
        """llama.cpp's graph_reserve: at creation the prompt shape, the generation shape and the
        prompt shape again; after an applied memory update, the prompt shape. Each rounds
        n_tokens up to a multiple of n_seqs and covers the whole cache (n_kv = its size)."""
        cp = self.cparams
        n_tokens_pp = min(cp.n_ctx, cp.n_ubatch)
        shapes = [("pp", n_tokens_pp, min(n_tokens_pp, cp.n_outputs_max))]
        if initial:
            shapes += [
                ("tg", cp.n_seq_max, cp.n_seq_max),
                ("pp", n_tokens_pp, min(n_tokens_pp, cp.n_outputs_max)),
            ]
        for kind, n_tokens, n_outputs in shapes:
            n_seqs = cp.n_seq_max
            n_tokens = -(-n_tokens // n_seqs) * n_seqs
            ub = ubatch_reserve(n_tokens // n_seqs, n_seqs)
            self.scheduler.reserve(
                {
                    "kind": kind,
                    "n_tokens": ub.n_tokens,
                    "n_seq_tokens": ub.n_seq_tokens,
                    "n_seqs": ub.n_seqs,
                    "n_outputs": n_outputs,
                    # without memory, attention spans the ubatch itself
                    "n_kv": (
                        ub.n_tokens
                        if self.memory is NO_MEMORY
                        else getattr(self.memory, "base", self.memory).kv_size
                    ),
                }
            )

    @implements("DEC-058")
    def _attention_backend(self, name: str) -> tuple[Any, list[Any]]:
        """The attention function handed to the forward and the list its kernel calls append
        DispatchRecords to. "torch": the model's own attention (None); "triton",
        "triton-1pass", "triton-2pass": the fused GQA decode kernels
        (kernels.decode_attention.gqa_decode, auto / forced path)."""
        kernel_trace: list[Any] = []
        if name == "torch":
            return None, kernel_trace
        from kernels.decode_attention import gqa_decode

        path = {"triton": "auto", "triton-1pass": "1pass", "triton-2pass": "2pass"}[name]

        def attention(
            q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float
        ) -> torch.Tensor:
            out = gqa_decode(q, k, v, mask, scale, path=path, trace=kernel_trace)
            return out.reshape(q.shape[0], -1)

        return attention, kernel_trace

    @implements("DEC-062", "DEC-063")
    def _native_decode_path(self, name: str) -> tuple[NativeDecodeStep | None, str]:
        """The native one-token step this context uses (or None) and why: "native" when it
        runs, else the reason it does not. ``decode_path="native"`` makes a missing one an
        error at creation instead of a silent fallback."""
        if name not in ("auto", "native", "torch"):
            raise DecoderError("DEC_PARAM", f"unknown decode path {name!r}", field="decode_path")
        if name == "torch":
            return None, "decode_path='torch'"
        why: str | None = None
        step = None
        if self.params.attention_backend != "torch":
            why = f"attention backend {self.params.attention_backend!r}"
        elif self.memory is NO_MEMORY:
            why = "no memory (an encoder-only model encodes)"
        elif not isinstance(self.memory, KVCache):
            why = f"{self.memory.kind} memory (the native step reads one KV cache)"
        elif self.memory.config.dtype != torch.float32:
            why = f"K/V dtype {self.params.kv_dtype} (the native step reads float32)"
        else:
            try:  # raises with the reason when the model or the library cannot serve it
                step = self.model.native_step()
            except (RuntimeError, ValueError) as exc:
                why = str(exc)
        if step is None:
            if name == "native":
                raise DecoderError(
                    "DEC_NATIVE_UNAVAILABLE",
                    f"decode_path='native' but the native step cannot run: {why}",
                    field="decode_path",
                )
            return None, str(why)
        return step, "native"


@implements("DEC-066")
class _NoMemory:
    """The memory of a context that has none (encoder-only model): the memory operations
    answer as llama.cpp's ``llama_memory_*`` on a NULL memory (removal succeeds, positions
    are -1, every other operation does nothing)."""

    kind = "none"

    def clear(self, data: bool = True) -> None:
        pass

    def seq_rm(self, seq_id: int, p0: int, p1: int) -> bool:
        return True

    def seq_cp(self, src: int, dst: int, p0: int, p1: int) -> None:
        pass

    def seq_keep(self, seq_id: int) -> None:
        pass

    def seq_add(self, seq_id: int, p0: int, p1: int, delta: int) -> None:
        pass

    def seq_div(self, seq_id: int, p0: int, p1: int, d: int) -> None:
        pass

    def seq_pos_min(self, seq_id: int) -> int:
        return -1

    def seq_pos_max(self, seq_id: int) -> int:
        return -1


NO_MEMORY = _NoMemory()


@implements("DEC-067")
def _check_position_table(hp: Any, sb: SanitizedBatch) -> None:
    """A model with learned absolute positions (bert) has ``n_ctx_train`` of them: a position
    outside ``[0, n_ctx_train)`` is an invalid batch (llama.cpp stops the process on its row
    lookup: decision D1)."""
    if not hp.encoder_only:
        return
    pos = np.asarray(sb.batch.pos, dtype=np.int64).reshape(-1)[: sb.n_tokens]
    bad = np.flatnonzero((pos < 0) | (pos >= hp.n_ctx_train))
    if bad.size:
        i = int(bad[0])
        raise _StepFailed(
            -1,
            DecoderError(
                "DEC_POS_RANGE",
                f"position {int(pos[i])} of token {i} is outside the model's "
                f"{hp.n_ctx_train} learned positions",
                field="pos",
                index=i,
            ),
        )


@implements("DEC-015")
def _require_tokens(batch: Batch) -> None:
    """An empty batch is -1 before anything else runs, and changes nothing."""
    if batch.n_tokens == 0:
        raise _StepFailed(-1, DecoderError("DEC_EMPTY_BATCH", "n_tokens == 0", field="n_tokens"))
