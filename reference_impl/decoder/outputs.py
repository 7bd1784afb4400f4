"""Output handling: buffer reservation, output id mapping, swap tracking and lazy reorder.

After a decode, row ``k`` of the logits/embeddings buffers belongs to the k-th output token in
*emission* order (the order the ubatches produced them, ``out_ids``). Callers address rows by
*batch* index. Like llama.cpp, the mapping is fixed at the end of decode and the physical rows
are put back into batch order lazily, on the first access, by replaying a list of swaps found
by a selection sort over ``out_ids``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from reference_impl.errors import EngineError
from reference_impl.spec_links import implements


class OutputError(EngineError):
    """An invalid output access (bad index, row not requested) or an over-capacity batch."""


@dataclass
class OutputBuffers:
    """Host-side output storage of a context (logits always, embeddings when enabled)."""

    n_vocab: int
    n_embd: int
    n_batch: int
    n_seq_max: int
    embeddings: bool
    n_outputs_limit: int  # cparams.n_outputs_max: a batch may not request more rows

    capacity: int = 0  # rows currently allocated (never shrinks)
    logits: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))
    embd: np.ndarray | None = None
    sampled: np.ndarray = field(
        default_factory=lambda: np.zeros(0, dtype=np.int32)
    )  # per row, -1: none
    output_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    n_outputs: int = 0
    swaps: list[tuple[int, int]] = field(default_factory=list)

    @implements("OUT-003", "OUT-017")
    def __post_init__(self) -> None:
        # output_ids is sized n_batch once and never resized (one slot per batch index).
        self.output_ids = np.full(self.n_batch, -1, dtype=np.int32)

    @implements("OUT-001", "OUT-002", "OUT-003", "OUT-017")
    def reserve(self, n_outputs: int) -> int:
        """Make room for ``n_outputs`` rows (at least n_seq_max); reset the mapping.

        Returns the number of rows available. Buffers only grow; a fresh allocation is zeroed.
        """
        n_rows = max(n_outputs, self.n_seq_max)
        if n_rows > self.n_outputs_limit:
            raise OutputError(
                "OUT_CAPACITY",
                f"batch needs {n_rows} output rows but n_outputs_max is {self.n_outputs_limit}",
                field="logits",
            )
        if n_rows > self.capacity:
            self.logits = np.zeros((n_rows, self.n_vocab), dtype=np.float32)
            self.embd = (
                np.zeros((n_rows, self.n_embd), dtype=np.float32) if self.embeddings else None
            )
            self.sampled = np.full(n_rows, -1, dtype=np.int32)
            self.capacity = n_rows
        self.sampled.fill(-1)
        self.output_ids.fill(-1)
        self.n_outputs = 0
        self.swaps.clear()
        return self.capacity

    @implements("OUT-006", "OUT-010", "OUT-019")
    def finalize(self, out_ids: list[int] | np.ndarray) -> None:
        """Fix the batch-index -> row mapping and record the swaps that restore batch order."""
        order = [int(i) for i in out_ids]
        self.n_outputs = len(order)
        for k, b in enumerate(order):
            self.output_ids[b] = k
        self.swaps = selection_sort_swaps(order)
        if self.swaps:
            self.output_ids.fill(-1)
            for k, b in enumerate(order):  # `order` is now sorted ascending
                self.output_ids[b] = k

    @implements("OUT-008", "OUT-009", "OUT-010", "OUT-034")
    def reorder(self) -> None:
        """Apply pending swaps to every output buffer (called on first access)."""
        for i, j in self.swaps:
            self.logits[[i, j]] = self.logits[[j, i]]
            self.sampled[[i, j]] = self.sampled[[j, i]]
            if self.embd is not None:
                self.embd[[i, j]] = self.embd[[j, i]]
        self.swaps.clear()

    @implements("OUT-022")
    def drop(self) -> None:
        """Nothing readable (after a failed ubatch): no rows, no mapping."""
        self.n_outputs = 0
        self.output_ids.fill(-1)
        self.swaps.clear()

    @implements(
        "OUT-012", "OUT-013", "OUT-014", "OUT-015", "OUT-016", "OUT-017", "OUT-018", "OUT-019"
    )
    def resolve_row(self, i: int) -> int:
        """The buffer row of batch index ``i`` (negative ``i`` counts rows from the end)."""
        if i < 0:
            j = self.n_outputs + i
            if j < 0:
                raise OutputError(
                    "OUT_NEGATIVE_RANGE",
                    f"negative index {i} out of range [0, {self.n_outputs})",
                    index=i,
                )
            return j
        if i >= len(self.output_ids):
            raise OutputError(
                "OUT_INDEX_RANGE", f"index {i} out of range [0, {len(self.output_ids)})", index=i
            )
        j = int(self.output_ids[i])
        if j < 0:
            raise OutputError("OUT_NOT_OUTPUT", f"batch.logits[{i}] != true", index=i)
        if j >= self.n_outputs:
            raise OutputError(
                "OUT_CORRUPT", f"corrupt output buffer (row {j} >= {self.n_outputs})", index=i
            )
        return j


@implements("OUT-007")
def selection_sort_swaps(order: list[int]) -> list[tuple[int, int]]:
    """Sort ``order`` in place by selection sort; return the (i, j) swaps performed.

    An ascending order (the common case: split_simple) records no swap.
    """
    n = len(order)
    swaps: list[tuple[int, int]] = []
    for i in range(n - 1):
        j_min = i
        for j in range(i + 1, n):
            if order[j] < order[j_min]:
                j_min = j
        if j_min != i:
            order[i], order[j_min] = order[j_min], order[i]
            swaps.append((i, j_min))
    return swaps
