"""The decoder context: seed 000's seven-step decode flow over a model and its KV memory.

``Context.decode(batch)`` returns llama_decode's integer codes and never raises for batch
content (spec/decoder.md D12); the typed error explaining a non-zero code is kept in
``last_error``:

1. sanitize the batch (and check size limits)                         -> -1 on bad input
2. split it into ubatches (memory-dependent) + per-ubatch output counts
3. memory update (pending K-shift / stream copies)
4. prepare the memory for every ubatch (one optimize retry)           -> 1 no slot, -2
5. reserve output buffers, reset the output mapping                   -> -2
6. per ubatch: KV apply, compute (plan reuse), output extraction     -> 2 / -2 / -3 + rollback
7. finalize the output mapping (lazy reorder on first access)         -> 0
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from reference_impl.batch import sanitize as batch_sanitize
from reference_impl.batch.split import BatchSplitter, ubatch_reserve
from reference_impl.batch.types import Batch
from reference_impl.decoder.graph import GraphScheduler
from reference_impl.decoder.outputs import OutputBuffers, OutputError
from reference_impl.decoder.params import ContextParams, Derived, derive
from reference_impl.decoder.pooling import POOLERS, PoolingType
from reference_impl.decoder.trace import DecodeTrace
from reference_impl.decoder.ubatch_executor import encode_ubatch, execute_ubatch
from reference_impl.errors import BatchError, DecoderError, EngineError, KVCacheError
from reference_impl.kv.cache import KVCache, KVCacheConfig
from reference_impl.memory.coordinator import MemoryCoordinator, make_memory
from reference_impl.memory.status import ComputeStatus, MemoryStatus
from reference_impl.model import Model, set_threads
from reference_impl.native import NativeDecodeStep


class Context:
    """A decoding context (llama_context) over a :class:`~reference_impl.model.Model`."""

    def __init__(self, model: Model, params: ContextParams | None = None, **overrides: Any) -> None:
        params = dataclasses.replace(params or ContextParams(), **overrides)
        self.model = model
        self.params = params
        self.cparams: Derived = derive(params, n_ctx_train=model.n_ctx_train)
        if self.cparams.pooling == PoolingType.RANK:
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
        if params.n_threads is not None:
            set_threads(params.n_threads)
        hp = model.hparams
        cp = self.cparams
        self.memory = make_memory(
            "kv",
            KVCacheConfig(
                kv_size=cp.n_ctx_seq,
                n_seq_max=cp.n_seq_max,
                unified=cp.kv_unified,
                n_layer=hp.n_layer,
                n_head_kv=hp.n_head_kv,
                head_dim=hp.head_dim,
                dtype=params.kv_dtype,
            ),
            k_shift_fn=self._k_shift,
        )
        self.coordinator = MemoryCoordinator(self.memory)
        self.outputs = OutputBuffers(
            n_vocab=hp.n_vocab,
            n_embd=hp.n_embd,
            n_batch=cp.n_batch,
            n_seq_max=cp.n_seq_max,
            embeddings=cp.embeddings,
            n_outputs_limit=cp.n_outputs_max,
        )
        if cp.n_seq_max > cp.n_outputs_max:
            # llama.cpp aborts here (output_reserve asserts n_seq_max rows <= n_outputs_max)
            raise DecoderError(
                "DEC_N_OUTPUTS_MAX",
                f"n_seq_max = {cp.n_seq_max} exceeds n_outputs_max = {cp.n_outputs_max} "
                "(n_batch unless set): every decode reserves a row per sequence",
                field="n_seq_max",
            )
        self.outputs.reserve(0)  # a new context already holds n_seq_max rows (OUT-017)
        self.embd_seq: dict[int, np.ndarray] = {}
        self.scheduler = GraphScheduler(reuse=params.graph_reuse)
        self.trace = DecodeTrace(enabled=params.trace)
        self.samplers: dict[int, Any] = {}
        self._faults_once: set[str] = set()
        self._reserve_worst_case(initial=True)
        self.last_error: EngineError | None = None
        self.abort_callback: Callable[[], bool] | None = None
        self._faults: dict[int, ComputeStatus] = {}
        self._n_ubatches_run = 0
        self._last_seq_sets: list[tuple[int, ...]] = []
        self._attention_backend(params.attention_backend)
        self.native_step, self.native_reason = self._native_decode_path(params.decode_path)

    # ------------------------------------------------------------------ derived values

    def n_ctx(self) -> int:
        return self.cparams.n_ctx

    def n_ctx_seq(self) -> int:
        return self.cparams.n_ctx_seq

    def n_batch(self) -> int:
        return self.cparams.n_batch

    def n_ubatch(self) -> int:
        return self.cparams.n_ubatch

    def n_seq_max(self) -> int:
        return self.cparams.n_seq_max

    def pooling_type(self) -> PoolingType:
        return self.cparams.pooling

    # ------------------------------------------------------------------ decode

    def decode(self, batch: Batch) -> int:
        """llama_decode: 0 ok, 1 no KV slot, 2 aborted, -1 invalid batch, -2 / -3 failures."""
        if not isinstance(batch, Batch):
            raise TypeError(f"decode expects a Batch, got {type(batch).__name__}")
        self.trace.begin_call()
        self.last_error = None
        # Finish the previous batch's reorder first, so its rows stay correctly mapped whatever
        # this call does (spec/decoder.md D7).
        self.outputs.reorder()
        code = self._decode(batch)
        self.trace.add("done" if code == 0 else "error", code=code)
        return code

    def _fail(self, code: int, error: EngineError) -> int:
        self.last_error = error
        return code

    def _decode(self, batch: Batch) -> int:
        cp = self.cparams
        n_tokens = batch.n_tokens
        if n_tokens == 0:
            return self._fail(
                -1, DecoderError("DEC_EMPTY_BATCH", "n_tokens == 0", field="n_tokens")
            )
        if batch.embd is not None and (
            batch.embd.ndim != 2 or batch.embd.shape[1] != self.model.n_embd
        ):
            return self._fail(
                -1,
                DecoderError(
                    "DEC_EMBD_WIDTH",
                    f"embedding rows must have {self.model.n_embd} floats, got shape {tuple(batch.embd.shape)}",
                    field="embd",
                ),
            )
        try:
            sb = batch_sanitize.sanitize(
                batch,
                n_vocab=self.model.n_vocab,
                n_seq_max=cp.n_seq_max,
                memory=self.memory,
                output_all=cp.embeddings,
            )
        except BatchError as err:
            return self._fail(-1, err)
        self.trace.add("sanitize", n_tokens=n_tokens, n_outputs=sb.n_outputs)
        if n_tokens > cp.n_batch:
            return self._fail(
                -1,
                DecoderError(
                    "DEC_BATCH_TOO_LARGE",
                    f"n_tokens = {n_tokens} > n_batch = {cp.n_batch}",
                    field="n_tokens",
                ),
            )
        if not cp.causal_attn and n_tokens > cp.n_ubatch:
            return self._fail(
                -1,
                DecoderError(
                    "DEC_UBATCH_TOO_SMALL",
                    f"non-causal attention needs n_ubatch >= n_tokens ({cp.n_ubatch} < {n_tokens})",
                    field="n_tokens",
                ),
            )
        n_outputs_all = sb.n_outputs
        if max(n_outputs_all, cp.n_seq_max) > cp.n_outputs_max:
            return self._fail(
                -1,
                DecoderError(
                    "DEC_TOO_MANY_OUTPUTS",
                    f"{n_outputs_all} outputs > n_outputs_max = {cp.n_outputs_max}",
                    field="logits",
                ),
            )
        limit_error = self._seq_output_limit_error(sb)
        if limit_error is not None:
            return self._fail(-1, limit_error)

        splitter = BatchSplitter(sb)
        try:
            plan = self.coordinator.prepare_batch(splitter, cp.n_ubatch, output_all=cp.embeddings)
        except KVCacheError as err:  # e.g. a negative position: the batch cannot be placed
            return self._fail(-1, err)
        for optimize, applied in plan.updates:
            self.trace.add("memory_update", optimize=optimize, applied=applied)
            if applied:
                self._reserve_worst_case()  # new worst-case graph after applied memory work
        status = plan.status
        for name, faulty in (
            ("no_update", MemoryStatus.NO_UPDATE),
            ("failed_compute", MemoryStatus.FAILED_COMPUTE),
        ):
            if self._take_fault(f"memory_{name}"):
                status = faulty
        self.trace.add("init_batch", status=int(status), retried=plan.retried)
        if status == MemoryStatus.FAILED_PREPARE:
            return self._fail(
                1,
                DecoderError(
                    "DEC_NO_SLOT", f"failed to find a memory slot for a batch of {n_tokens} tokens"
                ),
            )
        if status != MemoryStatus.SUCCESS or plan.context is None:
            return self._fail(
                -2, DecoderError("DEC_MEMORY_STATUS", f"unexpected memory status {status.name}")
            )
        mctx = plan.context
        all_outputs = n_outputs_all == n_tokens
        counts = [
            ub.n_tokens if all_outputs else int(np.count_nonzero(ub.output[: ub.n_tokens]))
            for ub in mctx.ubatches
        ]
        self.trace.add("split", n_ubatches=len(mctx.ubatches), outputs=counts)

        try:
            if self._take_fault("output_reserve"):
                raise OutputError("OUT_CAPACITY", "injected output reservation failure")
            self.outputs.reserve(n_outputs_all)
        except OutputError as err:
            return self._fail(-2, DecoderError("DEC_OUTPUT_RESERVE", str(err)))
        self.embd_seq.clear()
        self.trace.add("output_reserve", rows=self.outputs.capacity)

        code = self._run_ubatches(mctx, counts, all_outputs, n_outputs_all)
        if code != 0:
            return code
        emitted = [int(i) for i in splitter.out_ids]
        self.outputs.finalize(emitted)
        self._last_seq_sets = [tuple(sb.batch.seq_ids_of(i)) for i in range(n_tokens)]
        self.trace.add("map_outputs", out_ids=emitted, swaps=list(self.outputs.swaps))
        return 0

    def _run_ubatches(
        self, mctx: Any, counts: list[int], all_outputs: bool, n_outputs_all: int
    ) -> int:
        """Step 6: execute every ubatch; on a failure roll its sequences back and return the
        decode code (earlier ubatches stay in memory)."""
        row0 = 0
        while True:
            ub = mctx.get_ubatch()
            result = execute_ubatch(self, mctx, ub, all_outputs, row0)
            self._n_ubatches_run += 1
            if result.status == ComputeStatus.SUCCESS and self._take_fault("output_rows"):
                result.n_rows -= 1
            if result.status != ComputeStatus.SUCCESS:
                return self._fail_ubatch(ub, result.status, result.error)
            if result.n_rows != counts[mctx.i_cur]:
                error = DecoderError(
                    "DEC_OUTPUT_COUNT", "extracted rows differ from the expected count"
                )
                return self._fail_ubatch(ub, ComputeStatus.FAILED, error)
            self.embd_seq.update(result.pooled)
            self._sample_rows(ub, result.rows, row0)
            row0 += result.n_rows
            if not mctx.next():
                break
        if self._take_fault("output_total"):
            row0 -= 1
        if row0 != n_outputs_all:
            self.outputs.drop()
            return self._fail(
                -3, DecoderError("DEC_OUTPUT_COUNT", f"{row0} rows for {n_outputs_all} outputs")
            )
        return 0

    def _fail_ubatch(self, ub: Any, status: ComputeStatus, error: EngineError | None) -> int:
        code = self.coordinator.ubatch_failed(ub, status)
        self.outputs.drop()
        self.embd_seq.clear()
        return self._fail(code, error or DecoderError("DEC_COMPUTE_FAILED", "ubatch failed"))

    # ------------------------------------------------------------------ sample router

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

    def _seq_output_limit_error(self, sb: Any) -> DecoderError | None:
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

    def _sample_rows(self, ub: Any, rows: np.ndarray, row0: int) -> None:
        if not self.samplers:
            return
        for k, r in enumerate(rows):
            for s in ub.seq_ids_of(int(r)):
                chain = self.samplers.get(s)
                if chain is not None:
                    self.outputs.sampled[row0 + k] = chain.sample(self.outputs.logits[row0 + k])
                    break

    def get_sampled_token_ith(self, i: int) -> int:
        """The token the sequence's sampler chose for batch token ``i`` in the last decode."""
        self.outputs.reorder()
        tok = int(self.outputs.sampled[self.outputs.resolve_row(i)])
        if tok < 0:
            raise OutputError("OUT_NO_SAMPLE", f"batch token {i} was not sampled", index=i)
        return tok

    # ------------------------------------------------------------------ worst-case graphs

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
                    "n_kv": self.memory.kv_size,
                }
            )

    # ------------------------------------------------------------------ encode

    def encode(self, batch: Batch) -> int:
        """llama_encode: the whole batch as one non-causal ubatch, every token an output,
        positions from 0 when missing, nothing kept in memory. Returns 0, -1, 2, -2 or -3."""
        if not isinstance(batch, Batch):
            raise TypeError(f"encode expects a Batch, got {type(batch).__name__}")
        self.trace.begin_call()
        self.last_error = None
        self.outputs.reorder()
        code = self._encode(batch)
        self.trace.add("done" if code == 0 else "error", code=code)
        return code

    def _encode(self, batch: Batch) -> int:
        cp = self.cparams
        n = batch.n_tokens
        if n == 0:
            return self._fail(
                -1, DecoderError("DEC_EMPTY_BATCH", "n_tokens == 0", field="n_tokens")
            )
        try:
            sb = batch_sanitize.sanitize(
                batch, n_vocab=self.model.n_vocab, n_seq_max=cp.n_seq_max, output_all=True
            )
        except BatchError as err:
            return self._fail(-1, err)
        if n > cp.n_ubatch:
            return self._fail(
                -1,
                DecoderError(
                    "DEC_UBATCH_TOO_SMALL",
                    f"encode needs n_ubatch >= n_tokens ({cp.n_ubatch} < {n})",
                    field="n_tokens",
                ),
            )
        ub = BatchSplitter(sb).split_simple(n)
        try:
            self.outputs.reserve(n)
        except OutputError as err:
            return self._fail(-2, DecoderError("DEC_OUTPUT_RESERVE", str(err)))
        self.embd_seq.clear()
        if self.abort_callback is not None and self.abort_callback():
            self.outputs.drop()
            return self._fail(2, DecoderError("DEC_ABORTED", "aborted by the abort callback"))
        try:
            hidden = encode_ubatch(self, ub)
        except Exception as exc:  # a failed compute is a status, never an escape
            self.outputs.drop()
            return self._fail(
                -3,
                DecoderError("DEC_COMPUTE_FAILED", f"compute failed: {type(exc).__name__}: {exc}"),
            )
        self.outputs.logits[:n] = self.model.logits_from_hidden(hidden).numpy()
        if cp.embeddings:
            h = hidden.numpy()
            if cp.pooling == PoolingType.NONE:
                assert self.outputs.embd is not None
                self.outputs.embd[:n] = h
            else:
                self.embd_seq.update(POOLERS[cp.pooling](h, ub))
        self.outputs.finalize(list(range(n)))
        self._last_seq_sets = [tuple(sb.batch.seq_ids_of(i)) for i in range(n)]
        return 0

    # ------------------------------------------------------------------ outputs

    def n_outputs(self) -> int:
        return self.outputs.n_outputs

    def output_ids(self) -> np.ndarray:
        return self.outputs.output_ids.copy()

    def reorder_outputs(self) -> None:
        self.outputs.reorder()

    def get_logits(self) -> np.ndarray:
        """All output rows in batch order: ``[n_outputs, n_vocab]``."""
        self.outputs.reorder()
        return self.outputs.logits[: self.outputs.n_outputs].copy()

    def get_logits_ith(self, i: int) -> np.ndarray:
        """Logits of batch token ``i`` (``i < 0``: the ``-i``-th row from the end).

        Raises :class:`~reference_impl.decoder.outputs.OutputError` for an invalid ``i``.
        """
        self.outputs.reorder()
        return self.outputs.logits[self.outputs.resolve_row(i)].copy()

    def get_embeddings(self) -> np.ndarray:
        self._require_token_embeddings()
        self.outputs.reorder()
        assert self.outputs.embd is not None
        return self.outputs.embd[: self.outputs.n_outputs].copy()

    def get_embeddings_ith(self, i: int) -> np.ndarray:
        self._require_token_embeddings()
        self.outputs.reorder()
        assert self.outputs.embd is not None
        return self.outputs.embd[self.outputs.resolve_row(i)].copy()

    def get_embeddings_seq(self, seq_id: int) -> np.ndarray:
        """The pooled embedding of ``seq_id`` from the last decode (pooling MEAN/CLS/LAST)."""
        if self.cparams.pooling == PoolingType.NONE or seq_id not in self.embd_seq:
            raise OutputError(
                "OUT_NO_EMBEDDINGS", f"no pooled embedding for sequence {seq_id}", seq_id=seq_id
            )
        return self.embd_seq[seq_id].copy()

    def _require_token_embeddings(self) -> None:
        if not self.cparams.embeddings or self.cparams.pooling != PoolingType.NONE:
            raise OutputError(
                "OUT_NO_EMBEDDINGS",
                "per-token embeddings need embeddings=True and pooling NONE",
                field="embeddings",
            )

    def seq_output_rows(self, seq_id: int) -> list[int]:
        """Sample router: output rows (batch order) of the flagged tokens listing ``seq_id``."""
        rows = []
        for i, seqs in enumerate(self._last_seq_sets):
            if seq_id in seqs and self.outputs.output_ids[i] >= 0:
                rows.append(int(self.outputs.output_ids[i]))
        if not rows:
            raise OutputError(
                "OUT_NO_SEQ_ROW", f"sequence {seq_id} has no output row", seq_id=seq_id
            )
        return rows

    # ------------------------------------------------------------------ memory

    def memory_clear(self, data: bool = True) -> None:
        self.memory.clear(data)

    def seq_rm(self, seq_id: int, p0: int = -1, p1: int = -1) -> bool:
        return bool(self.memory.seq_rm(seq_id, p0, p1))

    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None:
        self.memory.seq_cp(src, dst, p0, p1)

    def seq_keep(self, seq_id: int) -> None:
        self.memory.seq_keep(seq_id)

    def seq_add(self, seq_id: int, p0: int, p1: int, delta: int) -> None:
        self.memory.seq_add(seq_id, p0, p1, delta)

    def seq_div(self, seq_id: int, p0: int, p1: int, d: int) -> None:
        self.memory.seq_div(seq_id, p0, p1, d)

    def seq_pos_min(self, seq_id: int) -> int:
        return int(self.memory.seq_pos_min(seq_id))

    def seq_pos_max(self, seq_id: int) -> int:
        return int(self.memory.seq_pos_max(seq_id))

    # ------------------------------------------------------------------ test hooks

    def set_abort_callback(self, callback: Callable[[], bool] | None) -> None:
        """llama_set_abort_callback: checked once per ubatch, after the KV apply."""
        self.abort_callback = callback

    def inject_failure(self, ubatch: int, status: ComputeStatus) -> None:
        """Make the ``ubatch``-th ubatch computed from now on fail with ``status`` (tests)."""
        if status not in (ComputeStatus.ALLOC_FAILED, ComputeStatus.FAILED):
            raise ValueError("inject ALLOC_FAILED or FAILED (use the abort callback for ABORTED)")
        self._faults[self._n_ubatches_run + ubatch] = status

    FAULTS = (
        "memory_no_update",
        "memory_failed_compute",
        "output_reserve",
        "output_rows",
        "output_total",
    )

    def inject_fault(self, kind: str) -> None:
        """Make the next decode hit one failure of the flow (tests): an unexpected memory status
        (``memory_no_update``, ``memory_failed_compute``), a failed output reservation
        (``output_reserve``), a ubatch extracting one row too few (``output_rows``), or a total
        row count that disagrees with the batch (``output_total``)."""
        if kind not in self.FAULTS:
            raise ValueError(f"unknown fault {kind!r}; one of {', '.join(self.FAULTS)}")
        self._faults_once.add(kind)

    def _take_fault(self, kind: str) -> bool:
        if kind in self._faults_once:
            self._faults_once.discard(kind)
            return True
        return False

    # ------------------------------------------------------------------ internals

    def _k_shift(self, layer: int, k: torch.Tensor, shift: torch.Tensor) -> None:
        for st in range(k.shape[0]):
            if bool(shift[st].any()):
                k[st].copy_(self.model.rope_shift(k[st], shift[st].to(torch.long)).to(k.dtype))

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
        elif not isinstance(self.memory, KVCache) or self.memory.config.dtype != torch.float32:
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

    def _attention_backend(self, name: str) -> None:
        """ "torch": the model's own attention; "triton", "triton-1pass", "triton-2pass": the
        fused GQA decode kernels (kernels.decode_attention.gqa_decode, auto / forced path).
        Every kernel call appends a DispatchRecord to ``kernel_trace``."""
        self.attention: Any = None
        self.kernel_trace: list[Any] = []
        if name == "torch":
            return
        from kernels.decode_attention import gqa_decode

        path = {"triton": "auto", "triton-1pass": "1pass", "triton-2pass": "2pass"}[name]
        trace = self.kernel_trace

        def attention(
            q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float
        ) -> torch.Tensor:
            out = gqa_decode(q, k, v, mask, scale, path=path, trace=trace)
            return out.reshape(q.shape[0], -1)

        self.attention = attention
