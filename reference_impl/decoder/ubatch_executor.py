"""The ubatch executor: place one ubatch in the KV cache, compute it, extract its outputs.

Order (seed 000 §Components; llama.cpp ``process_ubatch``): apply the ubatch to the memory,
ask the abort callback, get a compute plan (reuse or build + allocate), bind the inputs
(positions, output rows, KQ mask), run the forward (the native one-token step or the torch
forward), copy the output rows into the output buffers and check how many there were. A failure
of any step is a :class:`~reference_impl.memory.status.ComputeStatus` in the result, with the
error naming it; the decoder rolls the memory back.

:class:`UBatchExecutor` is given everything it touches when the context creates it (model,
memory, output buffers, graph scheduler, trace, attention, native step) and, per call, the
ubatch, its memory context and where its rows go: it never sees the ``Context``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from reference_impl.batch.types import UBatch
from reference_impl.decoder.graph import ComputePlan, GraphScheduler
from reference_impl.decoder.outputs import OutputBuffers
from reference_impl.decoder.pooling import POOLERS, PoolingType
from reference_impl.decoder.trace import DecodeTrace
from reference_impl.errors import DecoderError, EngineError
from reference_impl.kv import mask as kv_mask
from reference_impl.memory.status import ComputeStatus
from reference_impl.spec_links import implements

if TYPE_CHECKING:
    from reference_impl.model import Model
    from reference_impl.native import NativeDecodeStep

# The error code of each failed status (the decode code follows from the status alone).
FAILURE_CODES = {
    ComputeStatus.ABORTED: "DEC_ABORTED",
    ComputeStatus.ALLOC_FAILED: "DEC_ALLOC_FAILED",
    ComputeStatus.FAILED: "DEC_COMPUTE_FAILED",
}


@dataclass
class UBatchResult:
    status: ComputeStatus
    n_rows: int = 0  # output rows extracted
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # ubatch rows
    error: EngineError | None = None
    pooled: dict[int, np.ndarray] = field(default_factory=dict)


def failed(status: ComputeStatus, message: str, code: str | None = None) -> UBatchResult:
    """A failed ubatch: ``status`` and an error with ``code`` (by default the status's)."""
    return UBatchResult(status, error=DecoderError(code or FAILURE_CODES[status], message))


class UBatchExecutor:
    """Runs the ubatches of one context (seed 000's ubatch_executor with its compute
    executor): :meth:`execute` for a decode's ubatch, :meth:`encode` for an encode's."""

    def __init__(
        self,
        model: Model,
        memory: Any,
        outputs: OutputBuffers,
        scheduler: GraphScheduler,
        trace: DecodeTrace,
        *,
        causal_attn: bool,
        embeddings: bool,
        pooling: PoolingType,
        attention: Callable[..., torch.Tensor] | None,
        native_step: NativeDecodeStep | None,
    ) -> None:
        self.model = model
        self.memory = memory
        self.outputs = outputs
        self.scheduler = scheduler
        self.trace = trace
        self.causal_attn = causal_attn
        self.embeddings = embeddings
        self.pooling = pooling
        self.attention = attention  # None: the model's own attention
        self.native_step = native_step  # None: every ubatch runs the torch forward
        self.abort_callback: Callable[[], bool] | None = None

    # -- decode ---------------------------------------------------------------------------------

    @implements("DEC-031", "DEC-042", "DEC-029", "DEC-030")
    def execute(
        self, mctx: Any, ub: UBatch, row0: int, n_outputs: int, all_outputs: bool
    ) -> UBatchResult:
        """Apply ``ub`` (the current ubatch of ``mctx``) to the memory, then compute it unless
        the abort callback says stop; its ``n_outputs`` rows go to output rows ``row0 ...``."""
        if not mctx.apply():
            return failed(ComputeStatus.FAILED, "memory apply failed")
        first = attention_caches(self.memory, mctx)[0][1]  # iSWA: the base cache's slot
        self.trace.add(
            "apply", n_tokens=ub.n_tokens, n_kv=first.n_kv, cells=first.sinfo.token_cells()
        )
        # checked once per ubatch, after its KV apply: the rollback then covers this ubatch too
        if self.abort_callback is not None and self.abort_callback():
            self.trace.add("abort")
            return failed(ComputeStatus.ABORTED, "aborted by the abort callback")
        return self.compute(mctx, ub, row0, n_outputs, all_outputs)

    @implements("DEC-042", "DEC-032")
    def compute(
        self, mctx: Any, ub: UBatch, row0: int, n_outputs: int, all_outputs: bool
    ) -> UBatchResult:
        """Plan, bind, forward and extract an applied ubatch."""
        rows = output_rows(ub, all_outputs)
        try:
            hidden = self._forward(mctx, ub, rows, row0)
        except Exception as exc:  # a failed compute is a status, never an escape from decode
            return failed(ComputeStatus.FAILED, f"compute failed: {type(exc).__name__}: {exc}")
        pooled = self._store_embeddings(ub, hidden, row0, len(rows))
        self.trace.add("extract", rows=len(rows))
        if len(rows) != n_outputs:  # the decoder planned another count for this ubatch
            return failed(
                ComputeStatus.FAILED,
                "extracted rows differ from the expected count",
                code="DEC_OUTPUT_COUNT",
            )
        return UBatchResult(ComputeStatus.SUCCESS, n_rows=len(rows), rows=rows, pooled=pooled)

    @implements("DEC-042", "DEC-060", "DEC-062", "OUT-005")
    def _forward(self, mctx: Any, ub: UBatch, rows: np.ndarray, row0: int) -> torch.Tensor:
        """The compute plan (reused when the shape allows), its inputs, then the forward; the
        logits of output rows land in output rows ``row0 ...``. Returns the hidden states of
        the output rows (the embeddings' source)."""
        caches = attention_caches(self.memory, mctx)
        masks = [stream_mask(cache, ub, bctx.n_kv, self.causal_attn) for cache, bctx in caches]
        (cache, bctx), (mask, n_groups) = caches[0], masks[0]
        sinfo, n_kv = bctx.sinfo, bctx.n_kv
        # an iSWA memory's window cache takes part in the plan's shape (its n_kv and columns)
        swa_shape = tuple((b.n_kv, m.shape[1]) for (_, b), (m, _) in zip(caches[1:], masks[1:]))
        plan, reused = self.scheduler.plan_for(
            ub, len(rows), n_kv, mask.shape[1], self.embeddings, swa_shape
        )
        self.trace.add("plan", reused=reused)
        if not reused:
            self.trace.add("alloc")
        n_pos = ub.n_tokens * ub.n_pos  # M-RoPE: every plane of positions
        plan.positions.copy_(torch.from_numpy(np.asarray(ub.pos[:n_pos], dtype=np.int64)))
        plan.output_rows.copy_(torch.from_numpy(rows))
        plan.kq_mask.copy_(mask)
        reads = []  # (cache, slot, mask over the columns read, columns read) per cache
        for (c, b), (m, groups) in zip(caches, masks):
            m = plan.kq_mask if c is cache else m
            if groups == 1:  # skip the padded columns no token attends to
                n_read = attended_columns(m)
                reads.append(AttentionRead(c, b.sinfo, m[:, :n_read], n_read))
            else:  # block-diagonal over the streams: every group keeps its n_kv columns
                reads.append(AttentionRead(c, b.sinfo, m, b.n_kv))
        self.trace.add("bind")

        # one token in one stream: the native step, when the context has one and a cell is known
        one_cell = self.native_step is not None and ub.n_tokens == 1 and n_groups == 1
        cell = cache.single_cell(sinfo) if one_cell and len(caches) == 1 else None
        if cell is not None:
            hidden = self._forward_native(ub, cell, reads[0].mask, row0, n_logits=len(rows))
            self.trace.add("compute", n_groups=n_groups, path="native")
            return hidden
        hidden = self._forward_torch(ub, plan, reads, rows)
        self.trace.add("compute", n_groups=n_groups, path="torch")
        if len(rows):
            self.outputs.logits[row0 : row0 + len(rows)] = self.model.logits_from_hidden(
                hidden
            ).numpy()
        return hidden

    @implements("PHASE-004", "DEC-065", "DEC-069")
    def _forward_torch(
        self, ub: UBatch, plan: ComputePlan, reads: list[AttentionRead], rows: np.ndarray
    ) -> torch.Tensor:
        """The torch forward of the ubatch; returns the normalized hidden states of its output
        rows (every row when all are outputs). With an iSWA memory (two reads) the model's
        sliding-window layers write and read the window cache, the others the base cache."""
        trace = self.trace
        hp = self.model.hparams
        by_layer = [reads[-1] if hp.is_swa(il) else reads[0] for il in range(hp.n_layer)]
        readers = [kv_reader(r.cache, r.sinfo.strm, r.n_read) for r in reads]
        reader_of = [readers[-1] if hp.is_swa(il) else readers[0] for il in range(hp.n_layer)]

        def write(il: int, k: torch.Tensor, v: torch.Tensor) -> None:
            trace.add("kv_write", layer=il)
            by_layer[il].cache.write_kv(il, by_layer[il].sinfo, k, v)

        def read(il: int) -> tuple[torch.Tensor, torch.Tensor]:
            return reader_of[il](il)

        return self.model.forward_ubatch(
            # A batch with token ids and embedding rows decodes from the token ids, as llama.cpp
            # does (its graph takes the token path whenever the ubatch has token ids).
            tokens=ub.token[: ub.n_tokens] if ub.token is not None else None,
            embd=ub.embd[: ub.n_tokens] if ub.embd is not None and ub.token is None else None,
            positions=plan.positions.numpy(),
            kv_write=write,
            kv_read=read,
            kq_mask=reads[0].mask,
            kq_mask_swa=reads[-1].mask if len(reads) > 1 else None,
            # every row an output (as in one-token decode): no row selection at the last layer
            output_rows=plan.output_rows if len(rows) < ub.n_tokens else None,
            return_hidden=True,
            attention=self.attention,
        )

    @implements("DEC-061", "PHASE-004")
    def _forward_native(
        self, ub: UBatch, cell: tuple[int, int], kq_mask: torch.Tensor, row0: int, n_logits: int
    ) -> torch.Tensor:
        """The native one-token step: K/V written at ``cell`` (stream, index) of every layer, the
        logits straight into output row ``row0`` when the token is an output."""
        assert self.native_step is not None
        cache = self.memory
        # the torch forward's own range check (BatchError MODEL_TOKEN_RANGE)
        token = None if ub.token is None else int(self.model.graph.token_ids(ub.token[:1])[0])
        hidden = self.native_step(
            token=token,
            embd=None if ub.embd is None or token is not None else ub.embd[0],
            position=int(ub.pos[0]),
            k_cache=cache.k,
            v_cache=cache.v,
            stream=cell[0],
            cell=cell[1],
            mask=kq_mask,
            logits=self.outputs.logits[row0] if n_logits else None,
            n_threads=torch.get_num_threads(),
        )
        for il in range(len(cache.k)):  # written by the step, in layer order
            self.trace.add("kv_write", layer=il, path="native")
        # the step reuses its hidden buffer: a copy when it outlives the step (embeddings, pooling)
        return hidden.clone() if self.embeddings else hidden

    @implements("OUT-024")
    def _store_embeddings(
        self, ub: UBatch, hidden: torch.Tensor, row0: int, n: int
    ) -> dict[int, np.ndarray]:
        """Token embeddings into output rows ``row0 ...`` (pooling NONE), or the ubatch's pooled
        embedding per sequence (returned; the decoder keeps the last one of each sequence)."""
        if not self.embeddings or not n:
            return {}
        h = hidden.numpy()
        if self.pooling == PoolingType.NONE:
            assert self.outputs.embd is not None
            self.outputs.embd[row0 : row0 + n] = h
            return {}
        # Every token is an output when embeddings are on, so `h` is in ubatch order.
        return POOLERS[self.pooling](h, ub)

    # -- encode ---------------------------------------------------------------------------------

    @implements("DEC-049")
    def encode(self, ub: UBatch) -> UBatchResult:
        """An encode's only ubatch: non-causal, every token an output at row ``i``, K/V kept in
        a scratch buffer (nothing enters the memory)."""
        if self.abort_callback is not None and self.abort_callback():
            return failed(ComputeStatus.ABORTED, "aborted by the abort callback")
        scratch: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

        def write(il: int, k: torch.Tensor, v: torch.Tensor) -> None:
            scratch[il] = (k.clone(), v.clone())

        try:
            hidden = self.model.forward_ubatch(
                tokens=ub.token[: ub.n_tokens] if ub.token is not None else None,
                embd=ub.embd[: ub.n_tokens] if ub.embd is not None and ub.token is None else None,
                positions=np.asarray(ub.pos[: ub.n_tokens], dtype=np.int64),
                kv_write=write,
                kv_read=lambda il: scratch[il],
                kq_mask=encode_mask(ub),
                return_hidden=True,
                attention=self.attention,
            )
        except Exception as exc:  # a failed compute is a status, never an escape
            return failed(ComputeStatus.FAILED, f"compute failed: {type(exc).__name__}: {exc}")
        n = ub.n_tokens
        self.outputs.logits[:n] = self.model.logits_from_hidden(hidden).numpy()
        pooled = self._store_embeddings(ub, hidden, 0, n)
        return UBatchResult(ComputeStatus.SUCCESS, n_rows=n, rows=np.arange(n), pooled=pooled)


@dataclass(frozen=True)
class AttentionRead:
    """One KV cache as a ubatch's forward uses it: its slot, the KQ mask over the columns
    read, and how many columns (cells) are read."""

    cache: Any
    sinfo: Any
    mask: torch.Tensor
    n_read: int


@implements("DEC-065")
def attention_caches(memory: Any, mctx: Any) -> list[tuple[Any, Any]]:
    """``[(cache, its batch context)]`` the ubatch's attention reads: one KV cache, or an
    iSWA memory's base cache then its window cache."""
    if getattr(memory, "kind", "kv") == "iswa":
        return [(memory.base, mctx.base), (memory.swa, mctx.swa)]
    return [(memory, mctx)]


@implements("OUT-005")
def output_rows(ub: UBatch, all_outputs: bool) -> np.ndarray:
    """Ubatch rows that produce outputs, in ubatch order."""
    if all_outputs:
        return np.arange(ub.n_tokens, dtype=np.int64)
    return np.flatnonzero(np.asarray(ub.output[: ub.n_tokens]) != 0).astype(np.int64)


@implements("DEC-056", "PHASE-010")
def stream_mask(cache: Any, ub: UBatch, n_kv: int, causal: bool) -> tuple[torch.Tensor, int]:
    """The KQ mask as one 2-D additive matrix ``[n_tokens, n_groups * n_kv]``.

    A multi-stream ubatch (one sequence per stream, sequence-major) attends each group to its
    own stream's cells: the per-stream masks are laid out block-diagonally, and the keys of the
    groups are concatenated in the same order (see :func:`kv_reader`).
    """
    m = kv_mask.build_kq_mask(cache, ub, n_kv, causal_attn=causal)  # [n_groups, n_tps, n_kv]
    n_groups = m.shape[0]
    if n_groups == 1:
        return m[0], 1
    full = torch.full((ub.n_tokens, n_groups * n_kv), float("-inf"))
    n_tps = m.shape[1]
    for g in range(n_groups):
        full[g * n_tps : (g + 1) * n_tps, g * n_kv : (g + 1) * n_kv] = m[g]
    return full, n_groups


def attended_columns(mask: torch.Tensor) -> int:
    """Columns up to the last one any token may attend to (at least 1).

    The mask spans n_kv cells, padded like llama.cpp's (to 256); the columns after the last
    finite entry are -inf for every row and add exactly zero weight, so attention skips them.
    At decode sizes this is most of the attention cost (a 10-token cache reads 256 cells)."""
    open_cols = np.flatnonzero(np.isfinite(mask.numpy()).any(axis=0))  # numpy: fewer dispatches
    return int(open_cols[-1]) + 1 if open_cols.size else mask.shape[1]


@implements("DEC-064")
def kv_reader(
    cache: Any, streams: tuple[int, ...], n_kv: int
) -> Callable[[int], tuple[torch.Tensor, torch.Tensor]]:
    if len(streams) == 1 and cache.config.dtype == torch.float32:
        return cache.kv_views(streams[0], n_kv).__getitem__  # every layer's views, made once

    def read(il: int) -> tuple[torch.Tensor, torch.Tensor]:
        # several streams concatenated; an F16 cache read as float32 (the forward's dtype)
        views = [cache.kv_view(il, st, n_kv) for st in streams]
        k = torch.cat([k for k, _ in views])
        v = torch.cat([v for _, v in views])
        return k.to(torch.float32), v.to(torch.float32)

    return read


@implements("DEC-049")
def encode_mask(ub: UBatch) -> torch.Tensor:
    """An encode's KQ mask: every token attends to every token of its first sequence, before
    and after it (non-causal)."""
    seq = np.asarray(ub.seq_id[: ub.n_tokens, 0])
    return torch.from_numpy(np.where(seq[:, None] == seq[None, :], 0.0, -np.inf).astype(np.float32))
