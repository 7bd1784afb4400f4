"""The ubatch executor: place one ubatch in the KV cache, compute it, extract its outputs.

Order (seed 000 §Components; llama.cpp ``process_ubatch``): apply the ubatch to the memory, get
a compute plan (reuse or build + allocate), bind the inputs (positions, output rows, KQ mask),
run the forward, then copy the output rows into the context's buffers. A failure of any step is
reported as a :class:`~reference_impl.memory.status.ComputeStatus`; the caller rolls the memory
back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from reference_impl.batch.types import UBatch
from reference_impl.decoder.pooling import POOLERS, PoolingType
from reference_impl.errors import DecoderError, EngineError
from reference_impl.kv import mask as kv_mask
from reference_impl.memory.status import ComputeStatus

if TYPE_CHECKING:
    from reference_impl.decoder.context import Context
    from reference_impl.native import NativeDecodeStep


@dataclass
class UBatchResult:
    status: ComputeStatus
    n_rows: int = 0  # output rows extracted
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # ubatch rows
    error: EngineError | None = None
    pooled: dict[int, np.ndarray] = field(default_factory=dict)


def output_rows(ub: UBatch, all_outputs: bool) -> np.ndarray:
    """Ubatch rows that produce outputs, in ubatch order."""
    if all_outputs:
        return np.arange(ub.n_tokens, dtype=np.int64)
    return np.flatnonzero(np.asarray(ub.output[: ub.n_tokens]) != 0).astype(np.int64)


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


def execute_ubatch(
    ctx: Context, mctx: Any, ub: UBatch, all_outputs: bool, row0: int
) -> UBatchResult:
    tr = ctx.trace
    cache = ctx.memory
    cp = ctx.cparams
    if not mctx.apply():
        return UBatchResult(
            ComputeStatus.FAILED, error=DecoderError("DEC_COMPUTE_FAILED", "memory apply failed")
        )
    sinfo = mctx.sinfo
    n_kv = mctx.n_kv
    tr.add("apply", n_tokens=ub.n_tokens, n_kv=n_kv, cells=sinfo.token_cells())
    if ctx.abort_callback is not None and ctx.abort_callback():
        tr.add("abort")
        return UBatchResult(
            ComputeStatus.ABORTED,
            error=DecoderError("DEC_ABORTED", "aborted by the abort callback"),
        )
    fault = ctx._faults.pop(ctx._n_ubatches_run, None)
    rows = output_rows(ub, all_outputs)
    try:
        mask, n_groups = stream_mask(cache, ub, n_kv, cp.causal_attn)
        plan, reused = ctx.scheduler.plan_for(ub, len(rows), n_kv, mask.shape[1], cp.embeddings)
        tr.add("plan", reused=reused)
        if not reused:
            tr.add("alloc")
        if fault == ComputeStatus.ALLOC_FAILED:
            raise _Injected(ComputeStatus.ALLOC_FAILED)
        plan.positions.copy_(torch.from_numpy(np.asarray(ub.pos[: ub.n_tokens], dtype=np.int64)))
        plan.output_rows.copy_(torch.from_numpy(rows))
        plan.kq_mask.copy_(mask)
        if n_groups == 1:  # skip the padded columns no token attends to
            n_read = attended_columns(mask)
            kq_mask = plan.kq_mask[:, :n_read]
        else:  # block-diagonal over the streams: every group keeps its n_kv columns
            n_read, kq_mask = n_kv, plan.kq_mask
        tr.add("bind")
        if fault == ComputeStatus.FAILED:
            raise _Injected(ComputeStatus.FAILED)

        native = ctx.native_step if ub.n_tokens == 1 and n_groups == 1 else None
        cell = cache.single_cell(sinfo) if native is not None else None
        if native is not None and cell is not None:
            hidden = native_compute(ctx, native, ub, cell, kq_mask, row0, n_logits=len(rows))
            tr.add("compute", n_groups=n_groups, path="native")
        else:
            hidden = torch_compute(ctx, ub, sinfo, plan, kq_mask, n_read, rows)
            logits = ctx.model.logits_from_hidden(hidden) if len(rows) else hidden[:0]
            tr.add("compute", n_groups=n_groups, path="torch")
            if len(rows):
                ctx.outputs.logits[row0 : row0 + len(rows)] = logits.numpy()
    except _Injected as inj:
        return UBatchResult(
            inj.status, error=DecoderError(_FAULT_CODES[inj.status], "injected failure")
        )
    except Exception as exc:  # a failed compute is a status, never an escape from decode
        return UBatchResult(
            ComputeStatus.FAILED,
            error=DecoderError(
                "DEC_COMPUTE_FAILED", f"compute failed: {type(exc).__name__}: {exc}"
            ),
        )
    n = len(rows)
    out = ctx.outputs
    result = UBatchResult(ComputeStatus.SUCCESS, n_rows=n, rows=rows)
    if cp.embeddings and n:
        h = hidden.numpy()
        if cp.pooling == PoolingType.NONE:
            assert out.embd is not None
            out.embd[row0 : row0 + n] = h
        else:
            # Every token is an output when embeddings are on, so `h` is in ubatch order.
            result.pooled = POOLERS[cp.pooling](h, ub)
    tr.add("extract", rows=n)
    return result


def torch_compute(
    ctx: Context,
    ub: UBatch,
    sinfo: Any,
    plan: Any,
    kq_mask: torch.Tensor,
    n_read: int,
    rows: np.ndarray,
) -> torch.Tensor:
    """The torch forward of the ubatch; returns the normalized hidden states of its output
    rows (every row when all are outputs)."""
    tr = ctx.trace
    cache = ctx.memory

    def write(il: int, k: torch.Tensor, v: torch.Tensor) -> None:
        tr.add("kv_write", layer=il)
        cache.write_kv(il, sinfo, k, v)

    return ctx.model.forward_ubatch(
        # A batch with token ids and embedding rows decodes from the token ids, as llama.cpp
        # does (its graph takes the token path whenever the ubatch has token ids).
        tokens=ub.token[: ub.n_tokens] if ub.token is not None else None,
        embd=ub.embd[: ub.n_tokens] if ub.embd is not None and ub.token is None else None,
        positions=plan.positions.numpy(),
        kv_write=write,
        kv_read=kv_reader(cache, sinfo.strm, n_read),
        kq_mask=kq_mask,
        # every row an output (as in one-token decode): no row selection at the last layer
        output_rows=plan.output_rows if len(rows) < ub.n_tokens else None,
        return_hidden=True,
        attention=ctx.attention,
    )


def native_compute(
    ctx: Context,
    native: NativeDecodeStep,
    ub: UBatch,
    cell: tuple[int, int],
    kq_mask: torch.Tensor,
    row0: int,
    n_logits: int,
) -> torch.Tensor:
    """The native one-token step: K/V written at ``cell`` (stream, index) of every layer, the
    logits straight into the output buffer's row ``row0`` when the token is an output."""
    tr = ctx.trace
    cache = ctx.memory
    # the torch forward's own range check (BatchError MODEL_TOKEN_RANGE)
    token = None if ub.token is None else int(ctx.model.graph.token_ids(ub.token[:1])[0])
    hidden = native(
        token=token,
        embd=None if ub.embd is None or token is not None else ub.embd[0],
        position=int(ub.pos[0]),
        k_cache=cache.k,
        v_cache=cache.v,
        stream=cell[0],
        cell=cell[1],
        mask=kq_mask,
        logits=ctx.outputs.logits[row0] if n_logits else None,
        n_threads=torch.get_num_threads(),
    )
    for il in range(len(cache.k)):  # written by the step, in layer order
        tr.add("kv_write", layer=il, path="native")
    # the step reuses its hidden buffer: a copy when it outlives the step (embeddings, pooling)
    return hidden.clone() if ctx.cparams.embeddings else hidden


class _Injected(Exception):
    def __init__(self, status: ComputeStatus) -> None:
        self.status = status


_FAULT_CODES = {
    ComputeStatus.ALLOC_FAILED: "DEC_ALLOC_FAILED",
    ComputeStatus.FAILED: "DEC_COMPUTE_FAILED",
}


def encode_ubatch(ctx: Context, ub: UBatch) -> torch.Tensor:
    """The forward of an encode: one ubatch, non-causal, attending within each token's first
    sequence, K/V kept in a scratch buffer (nothing enters the memory). Returns the normalized
    hidden states of every token."""
    seq = np.asarray(ub.seq_id[: ub.n_tokens, 0])
    mask = torch.from_numpy(np.where(seq[:, None] == seq[None, :], 0.0, -np.inf).astype(np.float32))
    scratch: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def write(il: int, k: torch.Tensor, v: torch.Tensor) -> None:
        scratch[il] = (k.clone(), v.clone())

    return ctx.model.forward_ubatch(
        tokens=ub.token[: ub.n_tokens] if ub.token is not None else None,
        embd=ub.embd[: ub.n_tokens] if ub.embd is not None and ub.token is None else None,
        positions=np.asarray(ub.pos[: ub.n_tokens], dtype=np.int64),
        kv_write=write,
        kv_read=lambda il: scratch[il],
        kq_mask=mask,
        return_hidden=True,
        attention=ctx.attention,
    )
