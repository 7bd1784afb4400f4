"""Target protocol of the batch area: the sanitizer and the splitter.

Capabilities and the methods they require:

* ``batch.sanitize`` -- ``batch_sanitize(batch, *, n_vocab, n_seq_max, memory=None,
  output_all=False, n_pos_per_embd=1)``: returns a *sanitized batch* or raises
  ``reference_impl.errors.BatchError`` (codes of spec/batch.md). ``batch`` is a
  ``reference_impl.batch.Batch``; ``memory`` any object with ``seq_pos_min(s)`` /
  ``seq_pos_max(s)``. The sanitized batch exposes ``batch`` (a Batch with every field filled:
  pos, n_seq_id, seq_id padded with -1, logits 0/1), ``n_tokens``, ``n_outputs``,
  ``seq_pos_min(s)``, ``seq_pos_max(s)``, ``seq_id_unq``, ``seq_idx``, ``has_cpl``,
  ``coupled``, ``generated`` and ``outputs_overridden`` (see ``SanitizedBatch``).
* ``batch.split`` -- ``batch_splitter(sanitized)``: a splitter over a sanitized batch of the same
  target, with ``split_reset()``, ``split_simple(n_ubatch)``, ``split_equal(n_ubatch,
  sequential, n_keep_tail=0)``, ``split_seq(n_ubatch)`` returning ``UBatch`` records, and
  ``n_tokens``, ``n_used``, ``out_ids``, ``last_error``; and ``batch_ubatch_reserve(n_seq_tokens,
  n_seqs, *, n_pos_per_embd=1)`` returning a ``UBatch``.
* ``batch.split_plan`` -- ``batch_split_plan(memory_kind, *, unified, embd_all, n_rs_seq=0)``
  returning a ``SplitPlan`` and ``batch_split_all(splitter, plan, n_ubatch)`` returning the
  ubatches or None.

An engine that only exposes decode (llama.cpp) claims none of these; its batch rules are checked
through decode by the parity session with the same corpus.
"""

from __future__ import annotations

from typing import Any

CAPABILITIES = {
    "batch.sanitize": ("batch_sanitize",),
    "batch.split": ("batch_splitter", "batch_ubatch_reserve"),
    "batch.split_plan": ("batch_split_plan", "batch_split_all"),
}


class Reference:
    """The batch area of the reference target (looked up at call time, so mutants can patch)."""

    def batch_sanitize(
        self,
        batch: Any,
        *,
        n_vocab: int,
        n_seq_max: int,
        memory: Any = None,
        output_all: bool = False,
        n_pos_per_embd: int = 1,
    ) -> Any:
        from reference_impl.batch import sanitize as mod

        return mod.sanitize(
            batch,
            n_vocab=n_vocab,
            n_seq_max=n_seq_max,
            memory=memory,
            output_all=output_all,
            n_pos_per_embd=n_pos_per_embd,
        )

    def batch_splitter(self, sanitized: Any) -> Any:
        from reference_impl.batch import split as mod

        return mod.BatchSplitter(sanitized)

    def batch_ubatch_reserve(
        self, n_seq_tokens: int, n_seqs: int, *, n_pos_per_embd: int = 1
    ) -> Any:
        from reference_impl.batch import split as mod

        return mod.ubatch_reserve(n_seq_tokens, n_seqs, n_pos_per_embd=n_pos_per_embd)

    def batch_split_plan(
        self, memory_kind: str, *, unified: bool, embd_all: bool, n_rs_seq: int = 0
    ) -> Any:
        from reference_impl.batch import split as mod

        return mod.split_plan(memory_kind, unified=unified, embd_all=embd_all, n_rs_seq=n_rs_seq)

    def batch_split_all(self, splitter: Any, plan: Any, n_ubatch: int) -> Any:
        from reference_impl.batch import split as mod

        return mod.split_all(splitter, plan, n_ubatch)
