"""Golden tests: the scenarios of llama.cpp's tests/test-batch-alloc.cpp (llama-cpp-python 0.3.36).

Like the C++ test, most batches are embedding batches (row i holds ``[100 i, 100 i + 1]``)
checked with an empty vocabulary, on a mock memory of fixed per-sequence ranges. Scenarios that
exercise llama.cpp's ``llama_batch_ext`` builder API (per-token content types, embedding widths
refused by ``set_token_embd``, MTP context widths) have no counterpart in a ``Batch`` record and
are listed at the end of this file.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from conformance.assertions import raises_code
from conformance.batch.checks import pos0, token_seqs
from conformance.fixtures.batch_corpus import RangeMemory
from reference_impl.batch.types import LLAMA_MAX_SEQ, Batch
from reference_impl.errors import BatchError

pytestmark = pytest.mark.requires("batch.sanitize")


class Builder:
    """test-batch-alloc's batch_builder: embedding entries with position, seqs and output."""

    def __init__(self, n_embd: int = 2) -> None:
        self.n_embd = n_embd
        self.pos: list[list[int]] = []
        self.seqs: list[list[int]] = []
        self.out: list[int] = []

    def add(self, p: int | list[int], seqs: list[int], output: bool) -> Builder:
        self.pos.append([p] if isinstance(p, int) else list(p))
        self.seqs.append(seqs)
        self.out.append(int(output))
        return self

    def batch(self) -> Batch:
        n = len(self.pos)
        embd = 100.0 * np.arange(n, dtype=np.float32)[:, None] + np.arange(self.n_embd)[None, :]
        planes = np.asarray(self.pos, dtype=np.int32).T  # section-major
        b = Batch.from_lists(
            embd=embd, pos=planes[0] if planes.shape[0] == 1 else planes, seq_ids=self.seqs,
            logits=self.out,
        )  # fmt: skip
        return b


def init(target: Any, b: Batch, *, memory: dict[int, tuple[int, int]] | None = None,
         n_seq_max: int = 4, n_vocab: int = 0, output_all: bool = False, n_pos: int = 1) -> Any:  # fmt: skip
    return target.batch_sanitize(
        b,
        n_vocab=n_vocab,
        n_seq_max=n_seq_max,
        memory=None if memory is None else RangeMemory(memory),
        output_all=output_all,
        n_pos_per_embd=n_pos,
    )


def refused(target: Any, code: str, b: Batch, **kw: Any) -> None:
    """init(b) must raise a BatchError with ``code``."""
    with raises_code(code, exc=BatchError):
        init(target, b, **kw)


# ---- init ------------------------------------------------------------------------------------


@pytest.mark.invariant("SAN-002")
def test_rejects_n_seq_max_too_large(target: Any) -> None:
    b = Builder().add(0, [0], True).batch()
    refused(target, "SAN_N_SEQ_MAX", b, n_seq_max=LLAMA_MAX_SEQ + 1)


@pytest.mark.invariant("SAN-004")
def test_rejects_invalid_token(target: Any) -> None:
    pos = np.array([0], np.int32)
    for tok in (0, -1):  # n_vocab 0: every id is out of range
        b = Batch(token=np.array([tok], np.int32), pos=pos, logits=np.array([1], np.int8))
        refused(target, "SAN_TOKEN_RANGE", b)


@pytest.mark.invariant("SAN-006")
def test_rejects_invalid_seq_id(target: Any) -> None:
    for s in (4, -1):
        refused(target, "SAN_SEQ_ID_RANGE", Builder().add(0, [s], True).batch())


@pytest.mark.invariant("SAN-014", "SAN-024")
def test_copies_pos_seq_output(target: Any) -> None:
    bb = Builder()
    for i in range(4):
        bb.add(i, [0], i == 3)
    sb = init(target, bb.batch())
    assert sb.n_tokens == 4 and sb.batch.embd is not None and sb.batch.token is None
    assert list(pos0(sb)) == [0, 1, 2, 3] and token_seqs(sb) == [(0,)] * 4
    assert [float(sb.batch.embd[i, 0]) for i in range(4)] == [0.0, 100.0, 200.0, 300.0]
    assert sb.n_outputs == 1 and list(sb.batch.logits) == [0, 0, 0, 1]
    assert (sb.seq_pos_min(0), sb.seq_pos_max(0), sb.seq_pos_min(1)) == (0, 3, -1)


@pytest.mark.invariant("SAN-014")
def test_output_all(target: Any) -> None:
    bb = Builder()
    for i in range(4):
        bb.add(i, [0], False)
    assert init(target, bb.batch(), output_all=True).n_outputs == 4


@pytest.mark.invariant("SAN-014", "SPL-001", "SPL-006")
@pytest.mark.requires("batch.split")
def test_explicit_logits(target: Any) -> None:
    sb = init(target, Builder().add(0, [0], True).add(1, [0], False).add(2, [0], True).batch())
    assert sb.n_outputs == 2
    sp = target.batch_splitter(sb)
    ub = sp.split_simple(10)
    assert ub.n_tokens == 3 and list(ub.output) == [1, 0, 1]
    assert list(sp.out_ids) == [0, 2]


@pytest.mark.invariant("SAN-015", "SAN-024")
def test_pos_after_memory(target: Any) -> None:
    bb = Builder()
    for i in range(3):
        bb.add(10 + i, [0], False)
    sb = init(target, bb.batch(), memory={0: (0, 9)})
    assert (sb.seq_pos_min(0), sb.seq_pos_max(0)) == (10, 12)


@pytest.mark.invariant("SAN-015")
def test_pos_continuity_with_memory(target: Any) -> None:
    mem = {0: (0, 9)}
    init(target, Builder().add(10, [0], False).add(11, [0], True).batch(), memory=mem)
    gap = Builder().add(11, [0], False).add(12, [0], True).batch()
    refused(target, "SAN_POS_MEMORY", gap, memory=mem)
    overlap = Builder().add(9, [0], False).add(10, [0], True).batch()
    refused(target, "SAN_POS_MEMORY", overlap, memory=mem)


@pytest.mark.invariant("SAN-016")
def test_rejects_non_continuous_positions(target: Any) -> None:
    b = Builder().add(0, [0], False).add(1, [0], False).add(3, [0], True).batch()
    refused(target, "SAN_POS_GAP", b)


@pytest.mark.invariant("SAN-019")
def test_rejects_decreasing_positions(target: Any) -> None:
    bb = Builder()
    for p, s in zip([4, 5, 0, 1, 6, 2, 3], [0, 0, 1, 1, 0, 1, 0]):
        bb.add(p, [s], False)
    refused(target, "SAN_POS_DECREASING", bb.batch())


@pytest.mark.invariant("SAN-016")
def test_allows_equal_positions_in_seq(target: Any) -> None:
    init(target, Builder().add(0, [0], False).add(0, [0], False).add(1, [0], True).batch())


@pytest.mark.invariant("SAN-018")
def test_rejects_coupled_diverged_seqs(target: Any) -> None:
    b = Builder().add(6, [0, 1], True).batch()
    refused(target, "SAN_SEQ_DIVERGED", b, memory={0: (0, 5), 1: (2, 5)})
    init(target, b, memory={0: (0, 5), 1: (0, 5)})


# ---- content types ---------------------------------------------------------------------------


@pytest.mark.invariant("SAN-025", "SPL-004")
@pytest.mark.requires("batch.split")
def test_token_and_embd_together(target: Any) -> None:
    b = Batch(
        token=np.array([3], np.int32),
        embd=np.array([[0.0, 1.0]], np.float32),
        pos=np.array([0], np.int32),
        logits=np.array([1], np.int8),
    )
    sb = init(target, b, n_vocab=10)
    assert sb.batch.token is not None and sb.batch.embd is not None
    assert int(sb.batch.token[0]) == 3 and list(sb.batch.embd[0]) == [0.0, 1.0]
    ub = target.batch_splitter(sb).split_simple(1)
    assert ub.token is not None and ub.embd is not None and int(ub.token[0]) == 3


@pytest.mark.invariant("SAN-001")
def test_rejects_neither_token_nor_embd(target: Any) -> None:
    # a Batch without token ids and embeddings has no tokens at all
    refused(target, "SAN_EMPTY", Batch(pos=np.array([0], np.int32)))


@pytest.mark.invariant("SPL-004")
@pytest.mark.requires("batch.split")
def test_encoder_width(target: Any) -> None:
    bb = Builder(n_embd=6).add(0, [0], False).add(1, [0], True)
    sb = init(target, bb.batch())
    ub = target.batch_splitter(sb).split_simple(2)
    embd = np.asarray(ub.embd).reshape(-1)
    assert ub.n_tokens == 2 and float(embd[6]) == 100.0 and float(embd[11]) == 105.0


# ---- compat (llama_batch -> defaults) --------------------------------------------------------


@pytest.mark.invariant("SAN-006", "SAN-014", "SAN-024")
def test_token_batch_explicit_fields(target: Any) -> None:
    b = Batch.from_lists([5, 6, 7], pos=[3, 4, 5], seq_ids=[[1], [1], [1, 2]], logits=[0, 1, 0])
    sb = init(target, b, n_vocab=100)
    assert list(sb.batch.token) == [5, 6, 7] and list(pos0(sb)) == [3, 4, 5]
    assert token_seqs(sb) == [(1,), (1,), (1, 2)]
    assert sb.n_outputs == 1 and sb.batch.embd is None


@pytest.mark.invariant("SAN-008", "SAN-010", "SAN-013")
def test_defaults_for_null_fields(target: Any) -> None:
    sb = init(target, Batch.get_one([5, 6, 7]), n_vocab=100, memory={0: (0, 9)})
    assert list(pos0(sb)) == [10, 11, 12] and token_seqs(sb) == [(0,)] * 3
    assert list(sb.batch.logits) == [0, 0, 1]
    assert (sb.seq_pos_min(0), sb.seq_pos_max(0)) == (10, 12)


@pytest.mark.invariant("SAN-010")
def test_auto_pos_starts_at_zero_without_memory(target: Any) -> None:
    assert list(pos0(init(target, Batch.get_one([5, 6]), n_vocab=100))) == [0, 1]


@pytest.mark.invariant("SAN-010")
def test_auto_pos_is_tracked_per_seq(target: Any) -> None:
    b = Batch.from_lists([5, 6, 7, 8], seq_ids=[[0], [1], [0], [1]])
    sb = init(target, b, n_vocab=100, memory={0: (0, 9)})
    assert list(pos0(sb)) == [10, 0, 11, 1]


@pytest.mark.invariant("SAN-003", "SPL-004")
@pytest.mark.requires("batch.split")
def test_embd_batch_with_mrope_positions(target: Any) -> None:
    flat = np.array([10, 11, 5, 6, 7, 8, 0, 0], np.int32)  # llama_batch layout pos[j*n + i]
    b = Batch(embd=np.array([[0, 1], [100, 101]], np.float32), pos=flat)
    sb = init(target, b, n_pos=4)
    ub = target.batch_splitter(sb).split_simple(2)
    assert list(ub.pos) == [10, 11, 5, 6, 7, 8, 0, 0]


@pytest.mark.invariant("SAN-025")
def test_token_and_embd_both_set(target: Any) -> None:
    b = Batch(
        token=np.array([5, 6], np.int32),
        embd=np.array([[0, 1], [100, 101]], np.float32),
        pos=np.array([3, 4], np.int32),
    )
    sb = init(target, b, n_vocab=100)
    assert list(pos0(sb)) == [3, 4] and sb.batch.token is not None and sb.batch.embd is not None


# ---- split -----------------------------------------------------------------------------------


@pytest.mark.invariant("SPL-001", "SPL-003", "SPL-006", "SPL-015")
@pytest.mark.requires("batch.split")
def test_split_simple_chunks(target: Any) -> None:
    bb = Builder()
    for i in range(5):
        bb.add(i, [0], i == 4)
    sp = target.batch_splitter(init(target, bb.batch()))
    ub = sp.split_simple(2)
    assert ub.n_tokens == 2 and not ub.equal_seqs and ub.n_seqs_unq == 1
    assert int(ub.seq_id_unq[0]) == 0 and int(ub.seq_idx[0]) == 0
    assert list(ub.pos) == [0, 1] and np.asarray(ub.embd).reshape(-1).tolist() == [0, 1, 100, 101]
    ub = sp.split_simple(2)
    assert list(ub.pos) == [2, 3]
    ub = sp.split_simple(2)
    assert ub.n_tokens == 1 and list(ub.pos) == [4] and list(ub.output) == [1]
    assert sp.n_used == 5
    assert sp.split_simple(2).n_tokens == 0
    assert list(sp.out_ids) == [4]


@pytest.mark.invariant("SPL-015")
@pytest.mark.requires("batch.split")
def test_split_reset_allows_resplit(target: Any) -> None:
    bb = Builder()
    for i in range(3):
        bb.add(i, [0], i == 2)
    sp = target.batch_splitter(init(target, bb.batch()))
    while sp.split_simple(1).n_tokens > 0:
        pass
    assert sp.n_used == 3
    sp.split_reset()
    assert sp.n_used == 0
    assert sp.split_simple(10).n_tokens == 3


@pytest.mark.invariant("SPL-008", "SPL-010")
@pytest.mark.requires("batch.split")
def test_split_equal_unequal_lengths(target: Any) -> None:
    bb = Builder()
    for i in range(4):
        bb.add(i, [0], i == 3)
    for i in range(2):
        bb.add(i, [1], i == 1)
    sp = target.batch_splitter(init(target, bb.batch()))
    ub = sp.split_equal(8, False, 0)
    assert ub.equal_seqs and (ub.n_tokens, ub.n_seq_tokens, ub.n_seqs, ub.n_seqs_unq) == (
        4,
        2,
        2,
        2,
    )
    assert [int(ub.seq_id[i, 0]) for i in range(4)] == [0, 0, 1, 1] and list(ub.pos) == [0, 1, 0, 1]
    ub = sp.split_equal(8, False, 0)
    assert (ub.n_tokens, ub.n_seqs) == (2, 1) and list(ub.pos) == [2, 3]
    assert sp.split_equal(8, False, 0).n_tokens == 0
    assert sp.n_used == 6


@pytest.mark.invariant("SPL-011", "SPL-003")
@pytest.mark.requires("batch.split")
def test_split_equal_coupled(target: Any) -> None:
    sp = target.batch_splitter(
        init(target, Builder().add(0, [0, 1], False).add(1, [0, 1], True).batch())
    )
    assert sp.split_equal(4, True, 0).n_tokens == 0
    ub = sp.split_equal(4, False, 0)
    assert (ub.n_tokens, ub.n_seqs, ub.n_seqs_unq) == (2, 1, 2)
    assert int(ub.n_seq_id[0]) == 2 and (int(ub.seq_idx[0]), int(ub.seq_idx[1])) == (0, 1)


@pytest.mark.invariant("SPL-014")
@pytest.mark.requires("batch.split")
def test_split_seq_per_sequence(target: Any) -> None:
    bb = Builder()
    for s in range(3):
        bb.add(0, [s], False).add(1, [s], True)
    sp = target.batch_splitter(init(target, bb.batch()))
    for s in range(3):
        ub = sp.split_seq(8)
        assert (ub.n_tokens, ub.n_seqs) == (2, 1)
        assert int(ub.seq_id[0, 0]) == s and int(ub.seq_id_unq[0]) == s
    assert sp.split_seq(8).n_tokens == 0 and sp.n_used == 6


@pytest.mark.invariant("SPL-016")
@pytest.mark.requires("batch.split")
def test_ubatch_reserve(target: Any) -> None:
    ub = target.batch_ubatch_reserve(3, 2)
    assert (ub.n_tokens, ub.n_seq_tokens, ub.n_seqs, ub.n_seqs_unq) == (6, 3, 2, 2)
    assert ub.equal_seqs and list(ub.seq_id_unq) == [0, 1]
    assert ub.token is not None and ub.embd is None


# ---- keep_tail -------------------------------------------------------------------------------


def _keep_tail_batch(target: Any, lengths: list[int], n_seq_max: int = 4) -> Any:
    bb = Builder()
    for s, n in enumerate(lengths):
        for i in range(n):
            bb.add(i, [s], i == n - 1)
    return target.batch_splitter(init(target, bb.batch(), n_seq_max=n_seq_max))


@pytest.mark.invariant("SPL-012", "SPL-013")
@pytest.mark.requires("batch.split")
def test_keep_tail_noop_when_seqs_complete(target: Any) -> None:
    sp = _keep_tail_batch(target, [2, 2])
    ub = sp.split_equal(4, False, 2)
    assert (ub.n_tokens, ub.n_seqs, ub.n_seq_tokens) == (4, 2, 2)
    assert sp.split_equal(4, False, 2).n_tokens == 0


@pytest.mark.invariant("SPL-012", "SPL-013")
@pytest.mark.requires("batch.split")
def test_keep_tail_defers_seq_with_short_remainder(target: Any) -> None:
    sp = _keep_tail_batch(target, [2, 3])
    ub = sp.split_equal(4, True, 2)
    assert (ub.n_tokens, ub.n_seqs, int(ub.seq_id[0, 0]), sp.n_used) == (2, 1, 0, 2)
    ub = sp.split_equal(4, True, 2)
    assert (ub.n_tokens, ub.n_seqs, int(ub.seq_id[0, 0])) == (3, 1, 1)
    assert list(ub.pos) == [0, 1, 2] and sp.n_used == 5
    assert sp.split_equal(4, True, 2).n_tokens == 0


@pytest.mark.invariant("SPL-012", "SPL-013")
@pytest.mark.requires("batch.split")
def test_keep_tail_completes_first_seq_when_all_violate(target: Any) -> None:
    sp = _keep_tail_batch(target, [3, 3])
    ub = sp.split_equal(4, False, 2)
    assert (ub.n_tokens, ub.n_seqs, ub.n_seq_tokens, int(ub.seq_id[0, 0])) == (3, 1, 3, 0)
    assert list(ub.pos) == [0, 1, 2] and sp.n_used == 3
    ub = sp.split_equal(4, False, 2)
    assert (ub.n_tokens, int(ub.seq_id[0, 0]), sp.n_used) == (3, 1, 6)


@pytest.mark.invariant("SPL-012", "SPL-013")
@pytest.mark.requires("batch.split")
def test_keep_tail_truncates_to_preserve_tail(target: Any) -> None:
    sp = _keep_tail_batch(target, [5])
    ub = sp.split_equal(4, False, 2)
    assert (ub.n_tokens, ub.n_seqs, int(ub.pos[2]), sp.n_used) == (3, 1, 2, 3)
    ub = sp.split_equal(4, False, 2)
    assert ub.n_tokens == 2 and list(ub.pos) == [3, 4] and int(ub.output[1]) == 1
    assert sp.n_used == 5


@pytest.mark.invariant("SPL-012", "SPL-013")
@pytest.mark.requires("batch.split")
def test_keep_tail_keeps_full_ubatch_with_sufficient_remainder(target: Any) -> None:
    sp = _keep_tail_batch(target, [6])
    assert sp.split_equal(4, False, 2).n_tokens == 4
    ub = sp.split_equal(4, False, 2)
    assert ub.n_tokens == 2 and list(ub.pos) == [4, 5] and sp.n_used == 6


@pytest.mark.invariant("SPL-012", "SPL-013")
@pytest.mark.requires("batch.split")
def test_keep_tail_multi_seq_prefix_kept(target: Any) -> None:
    sp = _keep_tail_batch(target, [3, 4], n_seq_max=6)
    ub = sp.split_equal(6, True, 2)
    assert (ub.n_tokens, ub.n_seqs, int(ub.seq_id[0, 0]), sp.n_used) == (3, 1, 0, 3)
    ub = sp.split_equal(6, True, 2)
    assert (ub.n_tokens, int(ub.seq_id[0, 0]), sp.n_used) == (4, 1, 7)


# ---- M-RoPE ----------------------------------------------------------------------------------


@pytest.mark.invariant("SPL-002", "SPL-004")
@pytest.mark.requires("batch.split")
def test_mrope_pos_layout_and_split(target: Any) -> None:
    b = Builder().add([10, 5, 7, 0], [0], False).add([11, 6, 8, 0], [0], True).batch()
    ub = target.batch_splitter(init(target, b, n_pos=4)).split_simple(2)
    assert ub.n_tokens == 2 and ub.n_pos == 4 and ub.is_pos_2d()
    assert list(ub.pos) == [10, 11, 5, 6, 7, 8, 0, 0]


@pytest.mark.invariant("SAN-017")
def test_mrope_pos_jump_allowed(target: Any) -> None:
    def attempt(p: int) -> bool:
        b = Builder().add([p, 1, 1, 0], [0], True).batch()
        try:
            init(target, b, n_pos=4, memory={0: (0, 9)})
        except BatchError:
            return False
        return True

    assert attempt(15) and attempt(9) and not attempt(8)


# Not reproduced (no Batch counterpart): content_types/rejects_mixed_content_types (a Batch's
# token and embd arrays cover every token), rejects_embd_size_mismatch, rejects_double_embd,
# rejects_mixing_widths (llama_batch_ext::set_token_embd argument checks), compat/
# embd_row_width_override (covered by test_encoder_width), mtp_embd_width/* (model hparams).
