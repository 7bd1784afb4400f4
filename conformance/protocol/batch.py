"""Protocol of the batch area (spec/batch.md): the sanitizer and the splitter of
``llama_batch_allocr``, for engines that expose them (llama.cpp's public API does not: its
batch rules show only through ``decode``, see the ``decoder.*`` capabilities).

Batches and ubatches are the records of :mod:`reference_impl.batch.types` (``Batch``, ``UBatch``
with llama_ubatch's fields); bad input raises an exception with the ``SAN_*`` / ``SPL_*`` code
of spec/batch.md.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from conformance.protocol import capability, role
from reference_impl.batch.types import Batch, UBatch


@role("sanitized_batch")
class SanitizedBatch(Protocol):
    """A validated batch with every field filled (``batch``: pos, n_seq_id, seq_id padded
    with -1, logits 0/1) and what the sanitizer learned about it."""

    @property
    def batch(self) -> Batch: ...
    @property
    def n_tokens(self) -> int: ...
    @property
    def n_outputs(self) -> int: ...
    @property
    def n_pos(self) -> int: ...
    @property
    def seq_id_unq(self) -> np.ndarray: ...
    @property
    def seq_idx(self) -> np.ndarray: ...
    @property
    def has_cpl(self) -> bool: ...
    @property
    def coupled(self) -> tuple[tuple[int, int], ...]: ...
    @property
    def generated(self) -> frozenset[str]: ...
    @property
    def outputs_overridden(self) -> bool: ...

    def seq_pos_min(self, seq_id: int) -> int: ...
    def seq_pos_max(self, seq_id: int) -> int: ...


class Sanitize(Protocol):
    def batch_sanitize(
        self,
        batch: Batch,
        *,
        n_vocab: int,
        n_seq_max: int,
        memory: Any = None,
        output_all: bool = False,
        n_pos_per_embd: int = 1,
    ) -> SanitizedBatch:
        """``memory``: any object with ``seq_pos_min(s)`` / ``seq_pos_max(s)``."""
        ...


@role("splitter")
class Splitter(Protocol):
    """``llama_batch_allocr``'s split state over one sanitized batch."""

    @property
    def n_tokens(self) -> int: ...
    @property
    def n_used(self) -> int: ...
    @property
    def out_ids(self) -> list[int]: ...
    @property
    def last_error(self) -> Any: ...

    def split_reset(self) -> None: ...
    def split_simple(self, n_ubatch: int) -> UBatch: ...
    def split_equal(self, n_ubatch: int, sequential: bool, n_keep_tail: int = 0) -> UBatch: ...
    def split_seq(self, n_ubatch: int) -> UBatch: ...


class Split(Protocol):
    def batch_splitter(self, sanitized: Any) -> Splitter:
        """A splitter over a sanitized batch of the same target."""
        ...

    def batch_ubatch_reserve(
        self, n_seq_tokens: int, n_seqs: int, *, n_pos_per_embd: int = 1
    ) -> UBatch: ...


class SplitPlans(Protocol):
    def batch_split_plan(
        self, memory_kind: str, *, unified: bool, embd_all: bool, n_rs_seq: int = 0
    ) -> Any:
        """The split a memory of that kind uses (a record with ``mode``, ``sequential``,
        ``n_keep_tail``, ``fallback``)."""
        ...

    def batch_split_all(self, splitter: Any, plan: Any, n_ubatch: int) -> list[UBatch] | None:
        """All ubatches of the batch under ``plan`` (with its fallback), or None."""
        ...


CAPABILITIES = (
    capability("batch.sanitize", Sanitize, "validate a batch and fill its missing fields"),
    capability("batch.split", Split, "split a sanitized batch into ubatches"),
    capability("batch.split_plan", SplitPlans, "which split each memory kind uses"),
)
