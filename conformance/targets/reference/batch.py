"""The batch area of the reference target: :mod:`conformance.protocol.batch` over ``reference_impl``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reference_impl.batch.sanitize import SanitizedBatch
    from reference_impl.batch.split import BatchSplitter


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
    ) -> SanitizedBatch:
        from reference_impl.batch import sanitize as mod

        return mod.sanitize(
            batch,
            n_vocab=n_vocab,
            n_seq_max=n_seq_max,
            memory=memory,
            output_all=output_all,
            n_pos_per_embd=n_pos_per_embd,
        )

    def batch_splitter(self, sanitized: Any) -> BatchSplitter:
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
