"""The splitter as readable per-token loops: the specification of :class:`BatchSplitter`.

The loops follow llama_batch_allocr::split_simple / split_equal / split_seq statement by
statement, with one deliberate difference (spec SPL decision D3): a token already used is never
taken again, where llama.cpp's split_simple and split_equal expansion do not re-check ``used``
(only reachable when split modes are mixed without ``split_reset``). The vectorized splitter must
emit exactly the same ubatches; ``tests/batch`` checks it.
"""

from __future__ import annotations

import numpy as np

from reference_impl.batch.codes import SPL_COUPLED_SEQUENTIAL, fail
from reference_impl.batch.sanitize import SanitizedBatch
from reference_impl.batch.split import (
    check_keep_tail,
    check_n_ubatch,
    empty_ubatch,
    make_ubatch,
)
from reference_impl.batch.types import UBatch
from reference_impl.errors import BatchError
from reference_impl.spec_links import implements


@implements("SPL-005", "SPL-020", "SPL-021")
class ScalarSplitter:
    """Same interface as :class:`reference_impl.batch.split.BatchSplitter`."""

    def __init__(self, sb: SanitizedBatch) -> None:
        self.sb = sb
        n = sb.n_tokens
        self._set: list[frozenset[int]] = [frozenset(sb.seq_ids_of(i)) for i in range(n)]
        self._first_seq: list[int] = [sb.seq_ids_of(i)[0] for i in range(n)]
        # seq_set_map: every distinct set -> its token indices in batch order
        self._set_map: dict[frozenset[int], list[int]] = {}
        for i in range(n):
            self._set_map.setdefault(self._set[i], []).append(i)
        self.last_error: BatchError | None = None
        self.split_reset()

    @implements("SPL-006", "SPL-015")
    def split_reset(self) -> None:
        self._used = [False] * self.sb.n_tokens
        self._n_used = 0
        self._out_ids: list[int] = []
        self.last_error = None

    @property
    def n_tokens(self) -> int:
        return self.sb.n_tokens

    @property
    def n_used(self) -> int:
        return self._n_used

    @property
    def out_ids(self) -> list[int]:
        return list(self._out_ids)

    def _take(self, i: int) -> None:
        assert not self._used[i]
        self._used[i] = True
        self._n_used += 1

    @implements("SPL-006", "SPL-007")
    def _add(self, idxs: list[int], n_seqs: int, equal_seqs: bool) -> UBatch:
        ub = make_ubatch(self.sb, np.asarray(idxs, dtype=np.int32), n_seqs, equal_seqs)
        self._out_ids.extend(i for i in idxs if self.sb.batch.logits[i] != 0)  # type: ignore[index]
        return ub

    @implements("SPL-001")
    def split_simple(self, n_ubatch: int) -> UBatch:
        check_n_ubatch(n_ubatch)
        n = self.sb.n_tokens
        cur = 0
        while cur < n and self._used[cur]:
            cur += 1
        if cur >= n:
            return empty_ubatch(self.sb.n_pos)
        idxs: list[int] = []
        while cur < n and len(idxs) < n_ubatch:
            if not self._used[cur]:
                idxs.append(cur)
                self._take(cur)
            cur += 1
        return self._add(idxs, len(idxs), False)

    @implements("SPL-008", "SPL-009", "SPL-010", "SPL-011", "SPL-012", "SPL-013")
    def split_equal(self, n_ubatch: int, sequential: bool, n_keep_tail: int = 0) -> UBatch:
        check_n_ubatch(n_ubatch)
        check_keep_tail(n_ubatch, n_keep_tail)
        if sequential and self.sb.has_cpl:
            self.last_error = fail(
                SPL_COUPLED_SEQUENTIAL,
                "sequential split is not supported when the batch couples sequences "
                "(a unified KV cache is needed)",
                field="seq_id",
            )
            return empty_ubatch(self.sb.n_pos)

        # choose non-overlapping sequence sets by scanning the unused tokens in batch order
        chosen: list[frozenset[int]] = []
        last_seq = -1
        for i in range(self.sb.n_tokens):
            if self._used[i]:
                continue
            add = all(not (c & self._set[i]) for c in chosen)
            if sequential:
                add = add and (not chosen or self._first_seq[i] == last_seq + 1)
            if add:
                chosen.append(self._set[i])
                last_seq = self._first_seq[i]
                if len(chosen) > n_ubatch:
                    break
        if not chosen:
            return empty_ubatch(self.sb.n_pos)

        # the unused tokens of each chosen set, in batch order
        pending = [[i for i in self._set_map[c] if not self._used[i]] for c in chosen]
        per_set: list[list[int]] = [[] for _ in chosen]
        while all(len(per_set[k]) < len(pending[k]) for k in range(len(chosen))):
            for k in range(len(chosen)):
                per_set[k].append(pending[k][len(per_set[k])])
            if (len(per_set[0]) + 1) * len(chosen) > n_ubatch:
                break

        if n_keep_tail > 0:
            n_keep = 0
            while n_keep < len(chosen):
                left = len(pending[n_keep]) - len(per_set[n_keep])
                if left != 0 and left < n_keep_tail:
                    break
                n_keep += 1
            if n_keep == 0:
                if len(pending[0]) <= n_ubatch:  # finish the set
                    per_set[0] = list(pending[0])
                else:  # cut it so that n_keep_tail tokens remain
                    while len(pending[0]) - len(per_set[0]) < n_keep_tail:
                        per_set[0].pop()
                n_keep = 1
            per_set = per_set[:n_keep]

        idxs = [i for part in per_set for i in part]
        for i in idxs:
            self._take(i)
        return self._add(idxs, len(per_set), True)

    @implements("SPL-014")
    def split_seq(self, n_ubatch: int) -> UBatch:
        check_n_ubatch(n_ubatch)
        n = self.sb.n_tokens
        cur = 0
        while cur < n and self._used[cur]:
            cur += 1
        if cur >= n:
            return empty_ubatch(self.sb.n_pos)
        cur_set = self._set[cur]
        idxs: list[int] = []
        while True:
            idxs.append(cur)
            self._take(cur)
            if len(idxs) >= n_ubatch:
                break
            cur += 1
            while cur < n and (self._used[cur] or not self._set[cur] <= cur_set):
                cur += 1
            if cur == n:
                break
            cur_set = self._set[cur]
        return self._add(idxs, 1, True)
