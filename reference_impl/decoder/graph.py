"""The graph scheduler: a compute plan per ubatch shape, reused across same-shape ubatches.

A plan owns the input buffers of one ubatch shape (positions, output-row ids, the KQ mask). A
ubatch reuses the stored plan iff reuse is enabled and it agrees with the plan's ubatch on the
fields llama.cpp's ``llm_graph_params::allow_reuse`` compares (equal-sequence split, token
counts, sequence counts, input kind, output count, ``n_kv``, embeddings, and for equal-sequence
splits the sequence list); otherwise a new plan is built (and its buffers allocated). Reuse
never changes results: a reused plan only re-binds its inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from reference_impl.batch.types import UBatch
from reference_impl.spec_links import implements

PlanKey = tuple[object, ...]


@implements("DEC-043", "DEC-044")
def plan_key(
    ub: UBatch,
    n_outputs: int,
    n_kv: int,
    n_kv_cols: int,
    embeddings: bool,
    swa_shape: tuple[tuple[int, int], ...] = (),
) -> PlanKey:
    return (
        swa_shape,  # iSWA: the window cache's (n_kv, columns), as llama.cpp's iswa input
        ub.equal_seqs,
        ub.n_tokens,
        ub.n_seq_tokens,
        ub.n_seqs,
        ub.n_seqs_unq,
        ub.token is None,
        n_outputs,
        n_kv,
        n_kv_cols,
        embeddings,
        tuple(int(s) for s in ub.seq_id_unq) if ub.equal_seqs else None,
    )


@dataclass
class ComputePlan:
    key: PlanKey
    positions: torch.Tensor  # int64 [n_tokens · n_pos] (M-RoPE: n_pos planes)
    output_rows: torch.Tensor  # int64 [n_outputs]
    kq_mask: torch.Tensor  # float32 [n_tokens, n_kv_cols]


class GraphScheduler:
    def __init__(self, reuse: bool = True) -> None:
        self.reuse = reuse
        self.plan: ComputePlan | None = None
        self.n_built = 0
        self.n_reused = 0
        self.n_reservations = 0
        self.reservations: list[dict[str, object]] = []  # worst-case shapes, in order

    @implements("DEC-043", "DEC-044", "DEC-045")
    def plan_for(
        self,
        ub: UBatch,
        n_outputs: int,
        n_kv: int,
        n_kv_cols: int,
        embeddings: bool,
        swa_shape: tuple[tuple[int, int], ...] = (),
    ) -> tuple[ComputePlan, bool]:
        """The plan for this ubatch and whether it was reused (``swa_shape``: an iSWA
        memory's window cache, ``((n_kv, columns),)``)."""
        key = plan_key(ub, n_outputs, n_kv, n_kv_cols, embeddings, swa_shape)
        if self.reuse and self.plan is not None and self.plan.key == key:
            self.n_reused += 1
            return self.plan, True
        self.plan = ComputePlan(
            key=key,
            positions=torch.empty(ub.n_tokens * ub.n_pos, dtype=torch.long),
            output_rows=torch.empty(n_outputs, dtype=torch.long),
            kq_mask=torch.empty(ub.n_tokens, n_kv_cols, dtype=torch.float32),
        )
        self.n_built += 1
        return self.plan, False

    def reset(self) -> None:
        """Drop the stored plan (after a memory update or a worst-case reservation)."""
        self.plan = None

    @implements("DEC-036", "DEC-047")
    def reserve(self, shape: dict[str, object] | None = None) -> None:
        """A worst-case reservation: record its shape and drop the stored plan."""
        self.n_reservations += 1
        if shape is not None:
            self.reservations.append(shape)
        self.reset()
