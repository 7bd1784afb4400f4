"""Pooled embeddings: a table of poolers, one pure function per pooling type.

Each pooler maps the hidden states of one ubatch (``[n_tokens, n_embd]``, rows in ubatch order)
to one vector per sequence present in the ubatch (``seq_id_unq``), with llama.cpp's rules:

* MEAN: average over the tokens listing the sequence (every listed sequence, not only the
  first; membership is read on the first token of each group of ``n_seq_tokens``);
* CLS: the token with the smallest position (ties: the first in ubatch order);
* LAST: the token with the largest position (ties: the last in ubatch order);
* RANK has no pooler: no model this reference loads has a classifier head, so a context
  refuses RANK at creation (OUT-028, ``Context._check_params``).

NONE is not a pooler: per-token rows go to the output buffer like logits.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import IntEnum

import numpy as np

from reference_impl.batch.types import UBatch
from reference_impl.spec_links import implements


@implements("OUT-023")
class PoolingType(IntEnum):
    UNSPECIFIED = -1
    NONE = 0
    MEAN = 1
    CLS = 2
    LAST = 3
    RANK = 4


Pooled = dict[int, np.ndarray]


@implements("DEC-057", "OUT-025")
def pool_mean(hidden: np.ndarray, ub: UBatch) -> Pooled:
    sums: dict[int, int] = {}
    step = max(ub.n_seq_tokens, 1)
    for i in range(0, ub.n_tokens, step):
        for s in ub.seq_ids_of(i):
            sums[s] = sums.get(s, 0) + ub.n_seq_tokens
    out: Pooled = {}
    for s in (int(x) for x in ub.seq_id_unq):
        acc = np.zeros(hidden.shape[1], dtype=np.float64)
        for i in range(0, ub.n_tokens, step):
            if s in ub.seq_ids_of(i):
                acc += hidden[i : i + ub.n_seq_tokens].astype(np.float64).sum(axis=0)
        out[s] = (acc / sums[s] if sums.get(s) else acc).astype(np.float32)
    return out


@implements("OUT-026", "OUT-027")
def _target_rows(ub: UBatch, last: bool) -> dict[int, int]:
    target_pos: dict[int, int] = {}
    target_row: dict[int, int] = {}
    for i in range(ub.n_tokens):
        p = ub.pos_of(i)
        for s in ub.seq_ids_of(i):
            if (
                s not in target_pos
                or (last and p >= target_pos[s])
                or (not last and p < target_pos[s])
            ):
                target_pos[s] = p
                target_row[s] = i
    return target_row


@implements("OUT-026")
def pool_cls(hidden: np.ndarray, ub: UBatch) -> Pooled:
    return {
        s: hidden[i].astype(np.float32) for s, i in sorted(_target_rows(ub, last=False).items())
    }


@implements("OUT-027")
def pool_last(hidden: np.ndarray, ub: UBatch) -> Pooled:
    return {s: hidden[i].astype(np.float32) for s, i in sorted(_target_rows(ub, last=True).items())}


POOLERS: dict[PoolingType, Callable[[np.ndarray, UBatch], Pooled]] = {
    PoolingType.MEAN: pool_mean,
    PoolingType.CLS: pool_cls,
    PoolingType.LAST: pool_last,
}
