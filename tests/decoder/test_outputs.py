"""Output buffers: reservation, id mapping, selection-sort swaps and lazy reorder."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from reference_impl.decoder.outputs import OutputBuffers, OutputError, selection_sort_swaps


def buffers(**kw: object) -> OutputBuffers:
    params: dict = dict(
        n_vocab=3, n_embd=2, n_batch=8, n_seq_max=2, embeddings=True, n_outputs_limit=8
    )
    params.update(kw)
    return OutputBuffers(**params)


def test_reserve_keeps_at_least_n_seq_max_rows_and_never_shrinks() -> None:
    ob = buffers(n_seq_max=4)
    assert ob.reserve(1) == 4
    assert ob.reserve(6) == 6
    grown = ob.logits
    assert ob.reserve(2) == 6
    assert ob.logits is grown, "a smaller reserve reallocated the buffers"
    assert (ob.output_ids == -1).all() and ob.n_outputs == 0


def test_reserve_over_the_output_limit_is_an_error() -> None:
    with pytest.raises(OutputError) as exc:
        buffers(n_outputs_limit=3).reserve(5)
    assert exc.value.code == "OUT_CAPACITY"


@pytest.mark.parametrize("perm", list(itertools.permutations(range(4))))
def test_swaps_restore_batch_order(perm: tuple[int, ...]) -> None:
    batch_idx = [1, 3, 4, 6]
    emitted = [batch_idx[p] for p in perm]
    ob = buffers()
    ob.reserve(len(emitted))
    for k, b in enumerate(emitted):  # row k holds the output of batch index b, marked by b
        ob.logits[k] = b
    ob.finalize(emitted)
    ob.reorder()
    for b in batch_idx:
        assert ob.logits[ob.resolve_row(b), 0] == b
    assert ob.swaps == []


def test_ascending_order_records_no_swaps() -> None:
    assert selection_sort_swaps([0, 2, 5]) == []
    assert selection_sort_swaps([2, 0, 1]) == [(0, 1), (1, 2)]


def test_resolve_row_errors() -> None:
    ob = buffers()
    ob.reserve(2)
    ob.finalize([2, 5])
    assert ob.resolve_row(-1) == 1 and ob.resolve_row(-2) == 0
    for i, code in [(-3, "OUT_NEGATIVE_RANGE"), (8, "OUT_INDEX_RANGE"), (0, "OUT_NOT_OUTPUT")]:
        with pytest.raises(OutputError) as exc:
            ob.resolve_row(i)
        assert exc.value.code == code and exc.value.index == i


def test_reorder_moves_embeddings_with_logits() -> None:
    ob = buffers()
    ob.reserve(3)
    emitted = [4, 0, 2]
    for k, b in enumerate(emitted):
        ob.logits[k] = b
        assert ob.embd is not None
        ob.embd[k] = -b
    ob.finalize(emitted)
    ob.reorder()
    assert ob.embd is not None
    assert np.array_equal(ob.logits[:3, 0], [0, 2, 4]) and np.array_equal(
        ob.embd[:3, 0], [0, -2, -4]
    )
