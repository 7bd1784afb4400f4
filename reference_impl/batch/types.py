"""Batch records: the llama_batch input and the llama_ubatch produced by the splitter.

Arrays are numpy; fields follow llama.cpp's names so the spec, the reference and the llama.cpp
adapter share one vocabulary.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

LLAMA_MAX_SEQ = 256  # llama-cparams.h


class MemoryView(Protocol):
    """What the sanitizer reads from the memory: per-sequence position bounds (-1 if empty)."""

    def seq_pos_min(self, seq_id: int) -> int: ...

    def seq_pos_max(self, seq_id: int) -> int: ...


@dataclass(frozen=True, eq=False)
class Batch:
    """The decode input (llama_batch). Exactly one of ``token``/``embd`` is normally set.

    * ``token``: int32 ``[n]``; ``embd``: float32 ``[n, n_embd]``.
    * ``pos``: int32 ``[n]``, or ``[n_pos, n]`` (section-major) for M-RoPE embedding batches;
      ``None`` means "continue each sequence from the memory".
    * ``n_seq_id``: int32 ``[n]`` and ``seq_id``: int32 ``[n, k]`` (row i holds
      ``seq_id[i, :n_seq_id[i]]``; padding is -1). ``None`` means every token is in sequence 0.
    * ``logits``: int8 ``[n]`` output flags; ``None`` means "last token only" (all tokens when
      every output is required).
    """

    token: np.ndarray | None = None
    embd: np.ndarray | None = None
    pos: np.ndarray | None = None
    n_seq_id: np.ndarray | None = None
    seq_id: np.ndarray | None = None
    logits: np.ndarray | None = None

    @property
    def n_tokens(self) -> int:
        """Rows of ``token`` (else ``embd``), 0 with neither. A 0-d array counts as one row so
        that the sanitizer reaches its shape check (SAN_SHAPE) instead of failing here."""
        for arr in (self.token, self.embd):
            if arr is not None:
                shape = np.shape(arr)
                return int(shape[0]) if shape else 1
        return 0

    def seq_ids_of(self, i: int) -> tuple[int, ...]:
        """The sequence ids of token ``i`` of a sanitized batch (``SanitizedBatch.batch``, whose
        ``seq_id`` and ``n_seq_id`` are always filled; a raw batch's defaults are the
        sanitizer's business)."""
        assert self.seq_id is not None and self.n_seq_id is not None, "not a sanitized batch"
        return tuple(int(s) for s in self.seq_id[i, : int(self.n_seq_id[i])])

    @classmethod
    def get_one(cls, tokens: Sequence[int]) -> Batch:
        """llama_batch_get_one: tokens only; positions, sequences and outputs by default."""
        return cls(token=np.asarray(tokens, dtype=np.int32))

    @classmethod
    def from_lists(
        cls,
        tokens: Sequence[int] | None = None,
        *,
        embd: np.ndarray | Sequence[Sequence[float]] | None = None,
        pos: Sequence[int] | Sequence[Sequence[int]] | np.ndarray | None = None,
        seq_ids: Sequence[Iterable[int]] | None = None,
        logits: Sequence[int | bool] | None = None,
    ) -> Batch:
        """Build a batch from plain Python lists (``seq_ids[i]`` is token i's sequence list)."""
        token_arr = None if tokens is None else np.asarray(tokens, dtype=np.int32)
        embd_arr = None if embd is None else np.asarray(embd, dtype=np.float32)
        pos_arr = None if pos is None else np.asarray(pos, dtype=np.int32)
        n_seq_id = seq_id = None
        if seq_ids is not None:
            rows = [list(r) for r in seq_ids]
            width = max((len(r) for r in rows), default=1) or 1
            seq_id = np.full((len(rows), width), -1, dtype=np.int32)
            for i, r in enumerate(rows):
                seq_id[i, : len(r)] = r
            n_seq_id = np.asarray([len(r) for r in rows], dtype=np.int32)
        logit_arr = (
            None if logits is None else np.asarray([1 if v else 0 for v in logits], dtype=np.int8)
        )
        return cls(
            token=token_arr,
            embd=embd_arr,
            pos=pos_arr,
            n_seq_id=n_seq_id,
            seq_id=seq_id,
            logits=logit_arr,
        )


@dataclass(frozen=True, eq=False)
class UBatch:
    """One micro-batch (llama_ubatch): a self-contained copy of some batch tokens.

    ``pos`` is section-major, ``pos[j * n_tokens + i]``. ``seq_idx`` has LLAMA_MAX_SEQ entries:
    the index of a sequence in ``seq_id_unq``, or -1. ``idxs`` (not in llama.cpp) records the
    batch index of each token, which output mapping and tests need.
    """

    equal_seqs: bool
    n_tokens: int
    n_seq_tokens: int
    n_seqs: int
    n_seqs_unq: int
    n_pos: int
    token: np.ndarray | None
    embd: np.ndarray | None
    pos: np.ndarray
    n_seq_id: np.ndarray
    seq_id: np.ndarray
    seq_id_unq: np.ndarray
    seq_idx: np.ndarray
    output: np.ndarray
    idxs: np.ndarray

    def is_pos_2d(self) -> bool:
        return self.n_pos >= 3

    def seq_ids_of(self, i: int) -> tuple[int, ...]:
        return tuple(int(s) for s in self.seq_id[i, : int(self.n_seq_id[i])])

    def pos_of(self, i: int, section: int = 0) -> int:
        return int(self.pos[section * self.n_tokens + i])
