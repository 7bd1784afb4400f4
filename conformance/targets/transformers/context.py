"""A llama_context over transformers: llama_decode's contract on top of per-call forwards.

transformers computes; this module keeps the books llama.cpp keeps and transformers does not
have:

* **batch contract** -- a :class:`~reference_impl.batch.types.Batch` is validated and filled by
  the suite's own sanitizer (``reference_impl.batch.sanitize``: llama_batch_allocr's rules) and
  split into ubatches by its splitter (``split_simple`` for one stream, sequential
  ``split_equal`` for several, as llama.cpp's KV cache asks). These are pure functions of the
  batch; passing the invariants they enforce says nothing about transformers.
* **sizes** -- ``n_ctx``, ``n_ctx_seq``, ``n_batch``, ``n_ubatch``, ``n_seq_max`` and
  ``n_outputs_max`` follow llama.cpp's derivation (``reference_impl.decoder.params.derive``):
  transformers has no such parameters, so the adapter sizes its cache the way llama.cpp would.
* **cells** -- per stream a table of ``kv_size`` cells (position, sequence set), the sequence
  operations on it (llama.cpp's rules), the slot search (lowest free cells) and the KQ mask
  (cell holds the token's first sequence and, when causal, is not after it).

Per ubatch and stream the adapter calls the model's decoder once with ``position_ids``, a 4-D
additive ``attention_mask`` over every cell and a ``Cache`` whose layers write the new K/V rows
at the chosen cells; logits come from the model's output head, embeddings are the decoder's
final-norm hidden states (pooled by the adapter for MEAN / CLS / LAST).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from reference_impl.batch.sanitize import sanitize
from reference_impl.batch.split import BatchSplitter, split_all, split_plan
from reference_impl.batch.types import LLAMA_MAX_SEQ, Batch, UBatch
from reference_impl.decoder.params import AttentionType, ContextParams, derive
from reference_impl.decoder.pooling import POOLERS, PoolingType
from reference_impl.errors import BatchError, EngineError

# Parameters of the reference's Context that only concern its own implementation.
REFERENCE_ONLY = ("graph_reuse", "trace", "attention_backend", "decode_path")


class ContextError(EngineError):
    """An invalid context, decode or memory operation (codes as in the spec: DEC_*, KV_*)."""


class InvalidOutput(EngineError):
    """An output read that llama.cpp answers with NULL (codes OUT_*)."""


class Cells:
    """One stream's cell table: a position per cell (-1: empty) and its sequence set."""

    def __init__(self, kv_size: int, n_seq: int) -> None:
        self.pos = np.full(kv_size, -1, dtype=np.int64)
        self.seq = np.zeros((kv_size, n_seq), dtype=bool)

    def copy(self) -> Cells:
        out = Cells(0, 0)
        out.pos, out.seq = self.pos.copy(), self.seq.copy()
        return out

    def free(self) -> np.ndarray:
        return np.flatnonzero(self.pos < 0)

    def of_seq(self, seq_id: int, p0: int = 0, p1: int = 2**31 - 1) -> np.ndarray:
        return np.flatnonzero(self.seq[:, seq_id] & (self.pos >= p0) & (self.pos < p1))

    def empty(self, cells: np.ndarray) -> None:
        self.pos[cells] = -1
        self.seq[cells] = False

    def drop_emptied(self) -> None:
        self.empty(np.flatnonzero((self.pos >= 0) & ~self.seq.any(axis=1)))

    def pos_min(self, seq_id: int) -> int:
        c = self.of_seq(seq_id)
        return int(self.pos[c].min()) if c.size else -1

    def pos_max(self, seq_id: int) -> int:
        c = self.of_seq(seq_id)
        return int(self.pos[c].max()) if c.size else -1


def _range(p0: int, p1: int) -> tuple[int, int]:
    return (0 if p0 < 0 else p0), (2**31 - 1 if p1 < 0 else p1)


class TransformersContext:
    """The decoder-area context protocol (``conformance/targets/areas/decoder.py``)."""

    def __init__(self, engine: Any, *, shift: bool = True, **params: Any) -> None:
        for key in REFERENCE_ONLY:
            params.pop(key, None)
        params.pop("n_threads", None)  # torch's thread pool is process-wide: left as it is
        kv_dtype = params.pop("kv_dtype", torch.float32)
        if kv_dtype not in (torch.float32, torch.float16):
            raise ContextError("DEC_PARAM", f"unsupported K/V dtype {kv_dtype}", field="kv_dtype")
        if "pooling" in params:
            params["pooling"] = PoolingType(params["pooling"])
        if "attention_type" in params:
            params["attention_type"] = AttentionType(params["attention_type"])
        cp = derive(ContextParams(**params), n_ctx_train=engine.n_ctx_train)
        if cp.pooling == PoolingType.RANK:
            raise ContextError(
                "DEC_POOLING_UNSUPPORTED",
                "RANK pooling needs a classifier head; a causal LM has none",
                field="pooling",
            )
        if cp.n_seq_max > cp.n_outputs_max:
            raise ContextError(
                "DEC_N_OUTPUTS_MAX",
                f"n_seq_max = {cp.n_seq_max} exceeds n_outputs_max = {cp.n_outputs_max}",
                field="n_seq_max",
            )
        self.engine = engine
        self.cparams = cp
        self._shift = shift
        self._kv_dtype: torch.dtype = kv_dtype
        self._n_stream = 1 if cp.kv_unified else cp.n_seq_max
        self._n_seq_ids = LLAMA_MAX_SEQ if cp.kv_unified else cp.n_seq_max
        self._kv_size = cp.n_ctx_seq
        self._cells = [Cells(self._kv_size, self._n_seq_ids) for _ in range(self._n_stream)]
        self._caches: list[Any] = [None] * self._n_stream
        self._logits = np.zeros((0, engine.n_vocab), dtype=np.float32)
        self._embd = np.zeros((0, engine.n_embd), dtype=np.float32)
        self._output_ids = np.full(cp.n_batch, -1, dtype=np.int64)
        self._n_outputs = 0
        self._embd_seq: dict[int, np.ndarray] = {}
        self._abort: Callable[[], bool] | None = None
        self.last_error: EngineError | None = None

    # -- sizes --------------------------------------------------------------------------------
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

    # -- decode -------------------------------------------------------------------------------
    def decode(self, batch: Batch) -> int:
        """llama_decode: 0 ok, 1 no room in the cells, 2 aborted, -1 invalid batch, -3 compute
        failure. The reason of a non-zero code is ``last_error``."""
        if not isinstance(batch, Batch):
            raise TypeError(f"decode expects a Batch, got {type(batch).__name__}")
        self.last_error = None
        try:
            return self._decode(batch)
        except _Failed as failed:
            self.last_error = failed.error
            return failed.code

    def _decode(self, batch: Batch) -> int:
        cp = self.cparams
        eng = self.engine
        n = batch.n_tokens
        if n == 0:
            raise _Failed(-1, ContextError("DEC_EMPTY_BATCH", "n_tokens == 0", field="n_tokens"))
        if batch.embd is not None and (batch.embd.ndim != 2 or batch.embd.shape[1] != eng.n_embd):
            raise _Failed(
                -1,
                ContextError(
                    "DEC_EMBD_WIDTH",
                    f"embedding rows must have {eng.n_embd} floats",
                    field="embd",
                ),
            )
        try:
            sb = sanitize(
                batch,
                n_vocab=eng.n_vocab,
                n_seq_max=cp.n_seq_max,
                memory=self,
                output_all=cp.embeddings,
            )
        except BatchError as err:
            raise _Failed(-1, err) from None
        if n > cp.n_batch:
            raise _Failed(
                -1,
                ContextError(
                    "DEC_BATCH_TOO_LARGE",
                    f"n_tokens = {n} > n_batch = {cp.n_batch}",
                    field="n_tokens",
                ),
            )
        if not cp.causal_attn and n > cp.n_ubatch:
            raise _Failed(
                -1,
                ContextError(
                    "DEC_UBATCH_TOO_SMALL",
                    f"non-causal attention needs n_ubatch >= n_tokens ({cp.n_ubatch} < {n})",
                    field="n_tokens",
                ),
            )
        if max(sb.n_outputs, cp.n_seq_max) > cp.n_outputs_max:
            raise _Failed(
                -1,
                ContextError(
                    "DEC_TOO_MANY_OUTPUTS",
                    f"{sb.n_outputs} outputs > n_outputs_max = {cp.n_outputs_max}",
                    field="logits",
                ),
            )
        plan = split_plan("kv", unified=self._n_stream == 1, embd_all=cp.embeddings)
        ubatches = split_all(BatchSplitter(sb), plan, cp.n_ubatch)
        if ubatches is None or not self._fits(ubatches):
            raise _Failed(1, ContextError("DEC_NO_SLOT", f"no room in the cells for {n} tokens"))

        # outputs: rows in batch order
        flags = np.asarray(sb.batch.logits) != 0
        out_ids = np.cumsum(flags) - 1
        n_out = int(flags.sum())
        self._output_ids.fill(-1)
        self._output_ids[:n] = np.where(flags, out_ids, -1)
        self._n_outputs = 0
        self._logits = np.zeros((n_out, eng.n_vocab), dtype=np.float32)
        self._embd = np.zeros((n_out if cp.embeddings else 0, eng.n_embd), dtype=np.float32)
        self._embd_seq = {}
        for ub in ubatches:
            self._run_ubatch(ub)
        self._n_outputs = n_out
        return 0

    def _stream_of(self, seq_id: int) -> int:
        return 0 if self._n_stream == 1 else seq_id

    def _fits(self, ubatches: list[UBatch]) -> bool:
        need = np.zeros(self._n_stream, dtype=np.int64)
        for ub in ubatches:
            for s in ub.seq_id[: ub.n_tokens, 0]:
                need[self._stream_of(int(s))] += 1
        return all(int(need[st]) <= self._cells[st].free().size for st in range(self._n_stream))

    def _cache(self, stream: int) -> Any:
        if self._caches[stream] is None:
            self._caches[stream] = self.engine.new_cache(self._kv_size, self._kv_dtype)
        return self._caches[stream]

    def _run_ubatch(self, ub: UBatch) -> None:
        cp = self.cparams
        n = ub.n_tokens
        first = np.asarray(ub.seq_id[:n, 0], dtype=np.int64)
        streams = np.array([self._stream_of(int(s)) for s in first], dtype=np.int64)
        pos = np.asarray(ub.pos[:n], dtype=np.int64)
        before = [c.copy() for c in self._cells]
        placed: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for st in np.unique(streams).tolist():
            rows = np.flatnonzero(streams == st)
            cells = self._cells[st]
            slots = cells.free()[: rows.size]
            cells.pos[slots] = pos[rows]
            for r, c in zip(rows.tolist(), slots.tolist(), strict=True):
                for s in ub.seq_ids_of(r):
                    cells.seq[c, s] = True
            placed[st] = (rows, slots)
        if self._abort is not None and self._abort():
            self._fail_ubatch(ub, before)
            raise _Failed(2, ContextError("DEC_ABORTED", "aborted by the abort callback"))
        try:
            hidden = torch.zeros(n, self.engine.n_embd)
            for st, (rows, slots) in placed.items():
                hidden[torch.from_numpy(rows)] = self._compute(ub, st, rows, slots)
            out_rows = np.flatnonzero(np.asarray(ub.output[:n]) != 0)
            if cp.embeddings:
                out_rows = np.arange(n)
            batch_idx = np.asarray(ub.idxs[:n], dtype=np.int64)[out_rows]
            dest = self._output_ids[batch_idx]
            if out_rows.size:
                h = hidden[torch.from_numpy(out_rows)]
                self._logits[dest] = self.engine.head(h).to(torch.float32).numpy()
        except Exception as exc:  # a failed compute is a return code, never an escape
            self._fail_ubatch(ub, before)
            raise _Failed(
                -3,
                ContextError("DEC_COMPUTE_FAILED", f"compute failed: {type(exc).__name__}: {exc}"),
            ) from None
        if cp.embeddings:
            h_all = hidden.to(torch.float32).numpy()
            if cp.pooling == PoolingType.NONE:
                self._embd[dest] = h_all[out_rows]
            else:
                self._embd_seq.update(POOLERS[cp.pooling](h_all, ub))

    def _fail_ubatch(self, ub: UBatch, before: list[Cells]) -> None:
        """llama.cpp's rollback of a failed ubatch: its sequences lose every position from the
        ubatch's first one on; earlier ubatches stay. The outputs of the batch are dropped."""
        self._cells = before
        n = ub.n_tokens
        pos_min: dict[int, int] = {}
        for r in range(n):
            for s in ub.seq_ids_of(r):
                pos_min[s] = min(pos_min.get(s, 2**31 - 1), int(ub.pos[r]))
        for s, p in pos_min.items():
            self.seq_rm(s, p, -1)
        self._n_outputs = 0
        self._output_ids.fill(-1)
        self._embd_seq = {}

    def _compute(
        self, ub: UBatch, stream: int, rows: np.ndarray, slots: np.ndarray
    ) -> torch.Tensor:
        cells = self._cells[stream]
        pos = np.asarray(ub.pos, dtype=np.int64)[rows]
        first = np.asarray(ub.seq_id[:, 0], dtype=np.int64)[rows]
        open_ = cells.seq[:, first].T.copy()  # [n, kv_size]: the cell holds the first sequence
        if self.cparams.causal_attn:
            open_ &= cells.pos[None, :] <= pos[:, None]
        mask = torch.from_numpy(np.where(open_, 0.0, -np.inf).astype(np.float32))
        tokens = embd = None
        if ub.token is not None:
            tokens = torch.from_numpy(np.asarray(ub.token, dtype=np.int64)[rows])
        else:
            assert ub.embd is not None
            embd = torch.from_numpy(np.asarray(ub.embd, dtype=np.float32)[rows])
        h: torch.Tensor = self.engine.hidden(
            self._cache(stream),
            torch.from_numpy(slots.astype(np.int64)),
            torch.from_numpy(pos),
            mask,
            tokens=tokens,
            embd=embd,
        )
        return h

    # -- outputs ------------------------------------------------------------------------------
    def n_outputs(self) -> int:
        return self._n_outputs

    def _row(self, i: int) -> int:
        if i < 0:
            j = self._n_outputs + i
            if j < 0:
                raise InvalidOutput(
                    "OUT_NEGATIVE_RANGE", f"index {i} out of range [0, {self._n_outputs})", index=i
                )
            return j
        if i >= len(self._output_ids):
            raise InvalidOutput(
                "OUT_INDEX_RANGE", f"index {i} out of range [0, {len(self._output_ids)})", index=i
            )
        j = int(self._output_ids[i])
        if j < 0 or j >= self._n_outputs:
            raise InvalidOutput("OUT_NOT_OUTPUT", f"batch token {i} has no output", index=i)
        return j

    def get_logits(self) -> np.ndarray:
        return self._logits[: self._n_outputs].copy()

    def get_logits_ith(self, i: int) -> np.ndarray:
        return self._logits[self._row(i)].copy()

    def get_embeddings(self) -> np.ndarray:
        self._require_token_embeddings()
        return self._embd[: self._n_outputs].copy()

    def get_embeddings_ith(self, i: int) -> np.ndarray:
        self._require_token_embeddings()
        return self._embd[self._row(i)].copy()

    def get_embeddings_seq(self, seq_id: int) -> np.ndarray:
        if self.cparams.pooling == PoolingType.NONE or seq_id not in self._embd_seq:
            raise InvalidOutput(
                "OUT_NO_EMBEDDINGS", f"no pooled embedding for sequence {seq_id}", seq_id=seq_id
            )
        return self._embd_seq[seq_id].copy()

    def _require_token_embeddings(self) -> None:
        if not self.cparams.embeddings or self.cparams.pooling != PoolingType.NONE:
            raise InvalidOutput(
                "OUT_NO_EMBEDDINGS",
                "per-token embeddings need embeddings=True and pooling NONE",
                field="embeddings",
            )

    # -- memory -------------------------------------------------------------------------------
    def _check_seq(self, seq_id: int, fld: str = "seq_id") -> None:
        if not 0 <= seq_id < self._n_seq_ids:
            raise ContextError(
                "KV_SEQ_ID_RANGE",
                f"sequence id {seq_id} is not in [0, {self._n_seq_ids})",
                field=fld,
                seq_id=seq_id,
            )

    def memory_clear(self, data: bool = True) -> None:
        for cells in self._cells:
            cells.empty(np.arange(cells.pos.size))
        if data:
            for cache in self._caches:
                if cache is not None:
                    for layer in cache.layers:
                        layer.reset()

    def seq_rm(self, seq_id: int, p0: int = -1, p1: int = -1) -> bool:
        if seq_id != -1:
            self._check_seq(seq_id)
        p0, p1 = _range(p0, p1)
        if p0 >= p1:
            return True
        if seq_id == -1:
            for cells in self._cells:
                cells.empty(np.flatnonzero((cells.pos >= p0) & (cells.pos < p1)))
            return True
        cells = self._cells[self._stream_of(seq_id)]
        cells.seq[cells.of_seq(seq_id, p0, p1), seq_id] = False
        cells.drop_emptied()
        return True

    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None:
        self._check_seq(src, "seq_id_src")
        self._check_seq(dst, "seq_id_dst")
        s0, s1 = self._stream_of(src), self._stream_of(dst)
        if s0 == s1:
            if src != dst:
                cells = self._cells[s0]
                cells.seq[cells.of_seq(src, *_range(p0, p1)), dst] = True
            return
        size = self._kv_size
        if not ((p0 <= 0 or p0 + 1 >= size) and (p1 <= 0 or p1 + 1 >= size)):
            raise ContextError(
                "KV_CROSS_STREAM_PARTIAL",
                f"copying sequence {src} to {dst} across streams needs the full range",
                field="p0",
                seq_id=dst,
            )
        # the destination stream becomes a copy of the source sequence's cells, K/V included
        a, b = self._cells[s0], self._cells[s1]
        b.empty(np.arange(b.pos.size))
        c = a.of_seq(src)
        b.pos[c] = a.pos[c]
        b.seq[c, dst] = True
        if self._caches[s0] is not None:
            for la, lb in zip(self._cache(s0).layers, self._cache(s1).layers, strict=True):
                lb.keys.copy_(la.keys)
                lb.values.copy_(la.values)

    def seq_keep(self, seq_id: int) -> None:
        self._check_seq(seq_id)
        cells = self._cells[self._stream_of(seq_id)]
        keep = cells.seq[:, seq_id].copy()
        cells.seq[:] = False
        cells.seq[keep, seq_id] = True
        cells.drop_emptied()

    def seq_add(self, seq_id: int, p0: int, p1: int, delta: int) -> None:
        self._check_seq(seq_id)
        if delta == 0:
            return
        p0, p1 = _range(p0, p1)
        if p0 >= p1:
            return
        st = self._stream_of(seq_id)
        cells = self._cells[st]
        c = cells.of_seq(seq_id, p0, p1)
        new = cells.pos[c] + delta
        cells.empty(c[new < 0])
        moved = c[new >= 0]
        cells.pos[moved] = new[new >= 0]
        self._rotate(st, moved, np.full(moved.size, delta, dtype=np.int64))

    def seq_div(self, seq_id: int, p0: int, p1: int, d: int) -> None:
        self._check_seq(seq_id)
        if d <= 0:
            raise ContextError("KV_DIVISOR", f"divisor must be positive, got {d}", field="d")
        if d == 1:
            return
        p0, p1 = _range(p0, p1)
        if p0 >= p1:
            return
        st = self._stream_of(seq_id)
        cells = self._cells[st]
        c = cells.of_seq(seq_id, p0, p1)
        old = cells.pos[c]
        cells.pos[c] = old // d
        self._rotate(st, c, cells.pos[c] - old)

    def _rotate(self, stream: int, cells: np.ndarray, delta: np.ndarray) -> None:
        keep = delta != 0
        if self._shift and self._caches[stream] is not None and keep.any():
            self.engine.rotate_keys(self._caches[stream], cells[keep], delta[keep])

    def seq_pos_min(self, seq_id: int) -> int:
        self._check_seq(seq_id)
        return self._cells[self._stream_of(seq_id)].pos_min(seq_id)

    def seq_pos_max(self, seq_id: int) -> int:
        self._check_seq(seq_id)
        return self._cells[self._stream_of(seq_id)].pos_max(seq_id)

    # -- abort --------------------------------------------------------------------------------
    def set_abort_callback(self, callback: Callable[[], bool] | None) -> None:
        """Asked once per ubatch, after its cells are placed and before the model runs."""
        self._abort = callback

    def close(self) -> None:
        self._caches = [None] * self._n_stream


class _Failed(Exception):
    def __init__(self, code: int, error: EngineError) -> None:
        super().__init__(str(error))
        self.code = code
        self.error = error
