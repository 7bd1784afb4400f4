"""Target protocol for the decoder area: contexts that decode batches (llama_context).

A target loads a model with ``load_model(path)`` (the ``model.load`` capability) and creates
contexts with ``new_context(model, **params)``. Parameter names follow ``llama_context_params``:
``n_ctx``, ``n_batch``, ``n_ubatch``, ``n_seq_max``, ``n_outputs_max``, ``embeddings``,
``pooling`` (int, llama_pooling_type), ``attention_type`` (int), ``kv_unified``, ``n_threads``.
A target may ignore parameters it does not know only if they are reference-specific
(``graph_reuse``, ``trace``, ``kv_dtype``, ``attention_backend``).

The returned context offers, per capability:

* ``decoder.logits``: ``decode(batch: Batch) -> int`` (llama_decode's codes; a
  :class:`~reference_impl.batch.types.Batch` with None fields meaning NULL pointers),
  ``get_logits() -> [n_outputs, n_vocab]`` in batch order, ``get_logits_ith(i)`` (negative ``i``
  counts rows from the end; an invalid ``i`` raises an exception, e.g. the reference's
  ``OutputError``), ``n_outputs()``, and the derived sizes ``n_ctx()``, ``n_ctx_seq()``,
  ``n_batch()``, ``n_ubatch()``, ``n_seq_max()``;
* ``decoder.memory_ops``: ``memory_clear(data)``, ``seq_rm(s, p0, p1) -> bool``,
  ``seq_cp(src, dst, p0, p1)``, ``seq_keep(s)``, ``seq_add(s, p0, p1, delta)``,
  ``seq_div(s, p0, p1, d)``, ``seq_pos_min(s)``, ``seq_pos_max(s)``;
* ``decoder.embeddings``: with ``embeddings=True``: ``get_embeddings_ith(i)`` (pooling NONE) and
  ``get_embeddings_seq(s)`` (pooling MEAN / CLS / LAST), invalid requests raise;
* ``decoder.abort``: ``set_abort_callback(fn)``: ``fn()`` is asked during each ubatch's compute;
  True aborts the decode (return code 2);
* ``decoder.errors``: after a non-zero return, ``last_error`` has the spec's ``code``/``field``/
  ``index``/``seq_id``; invalid output accessors raise errors with OUT_* codes;
* ``decoder.faults``: target methods (the context is created as usual):
  ``inject_failure(ctx, k, status)`` makes the ``k``-th ubatch ``ctx`` computes from now on
  fail with that ``ComputeStatus`` (ALLOC_FAILED or FAILED, as an int); ``inject_fault(ctx,
  kind)`` arms one failure of the flow for the next decode: ``memory_no_update``,
  ``memory_failed_compute`` (unexpected memory status), ``output_reserve`` (the output
  reservation fails), ``output_rows`` (a ubatch extracts one row too few), ``output_total``
  (the decode's row total disagrees with the batch);
* ``decoder.introspection``: ``trace`` (a DecodeTrace when created with ``trace=True``),
  ``scheduler`` (``n_built``/``n_reused``/``n_reservations``), ``outputs`` (capacity,
  ``output_ids``, pending ``swaps``), ``output_ids()``, ``reorder_outputs()``,
  ``seq_output_rows(s)`` (the sample router);
* ``decoder.shift``: ``seq_add`` / ``seq_div`` followed by a decode re-rotate the cached keys
  (K-shift), so logits match a fresh context fed the shifted positions.
"""

from __future__ import annotations

from typing import Any

CAPABILITIES: dict[str, tuple[str, ...]] = {
    "decoder.logits": ("load_model", "new_context"),
    "decoder.memory_ops": ("load_model", "new_context"),
    "decoder.embeddings": ("load_model", "new_context"),
    "decoder.abort": ("load_model", "new_context"),
    "decoder.errors": ("load_model", "new_context"),
    "decoder.faults": ("load_model", "new_context", "inject_failure", "inject_fault"),
    "decoder.introspection": ("load_model", "new_context"),
    "decoder.shift": ("load_model", "new_context"),
}


class Reference:
    """The decoder-area methods of the reference target (``reference_impl.decoder``)."""

    def new_context(self, model: Any, **params: Any) -> Any:
        from reference_impl.decoder import AttentionType, Context, PoolingType
        from reference_impl.decoder.faults import FaultInjector

        if "pooling" in params:
            params["pooling"] = PoolingType(params["pooling"])
        if "attention_type" in params:
            params["attention_type"] = AttentionType(params["attention_type"])
        return Context(model, faults=FaultInjector(), **params)

    # -- decoder.faults: through the FaultInjector each context is created with --------------

    def inject_failure(self, ctx: Any, ubatch: int, status: int) -> None:
        from reference_impl.memory.status import ComputeStatus

        ctx.faults.fail_ubatch(ubatch, ComputeStatus(status))

    def inject_fault(self, ctx: Any, kind: str) -> None:
        ctx.faults.arm(kind)
