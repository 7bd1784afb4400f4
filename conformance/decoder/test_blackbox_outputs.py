"""Output-capacity rules seen through ``decode`` alone (black-box): how many output rows a batch
may ask for, read back as return codes and rows equal to the target's own forward pass.

The white-box test of DEC-006 (test_outputs.py) also reads the refusal's typed error; llama.cpp
aborts on a batch with more outputs than ``n_outputs_max`` (spec/decoder.md D2), so only the
accepted side is asked here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from conformance.assertions import assert_nmse
from conformance.decoder.helpers import ForwardOracle, batch, prompt

pytestmark = pytest.mark.requires("decoder.logits", "decoder.memory_ops", "model.forward")

F32 = 1e-9  # decode_phase.md D1: the f32 tolerance class


@pytest.mark.invariant("DEC-006")
@pytest.mark.parametrize(
    ("n_outputs_max", "n_batch", "flags"),
    [
        (0, 8, [1] * 8),  # 0 means n_batch rows: every token of a full batch is an output
        (5, 12, [1, 0, 1, 1, 0, 0, 1, 0, 0, 0, 1, 0]),  # exactly the requested count
        (3, 6, [0, 1, 0, 1, 0, 1]),
    ],
    ids=["zero-means-n_batch", "five", "three"],
)
def test_a_batch_may_ask_for_n_outputs_max_rows(
    new_ctx: Callable[..., Any],
    target: Any,
    load: Callable[[str], Any],
    n_outputs_max: int,
    n_batch: int,
    flags: list[int],
) -> None:
    """``n_ubatch`` 4 (below ``n_batch``) so that a limit taken from the ubatch size, or one
    row short, refuses the batch."""
    oracle = ForwardOracle(target, load("gqa"))
    toks = prompt(len(flags), start=13)
    ctx = new_ctx(n_batch=n_batch, n_ubatch=4, n_outputs_max=n_outputs_max)
    assert ctx.decode(batch(toks, out=flags)) == 0
    assert (ctx.seq_pos_min(0), ctx.seq_pos_max(0)) == (0, len(toks) - 1)
    rows = np.asarray(ctx.get_logits())
    assert rows.shape[0] == sum(flags)
    flagged = [i for i, f in enumerate(flags) if f]
    for k, i in enumerate(flagged):
        assert_nmse(oracle.row(toks[: i + 1]), rows[k], F32, f"row {k} (token {i})")
        np.testing.assert_array_equal(np.asarray(ctx.get_logits_ith(i)), rows[k])


@pytest.mark.invariant("OUT-008")
@pytest.mark.parametrize("first", ["ith", "all"])
def test_rows_are_put_in_batch_order_once_whichever_accessor_comes_first(
    new_ctx: Callable[..., Any], target: Any, load: Callable[[str], Any], first: str
) -> None:
    """One KV stream per sequence: split_equal emits sequence by sequence, so the rows come out
    of the ubatches in another order than the batch's and are swapped into batch order on the
    first read. Whichever accessor reads first, every read — later ones, and those after a
    memory operation — sees each token's own row (the forward pass of its sequence)."""
    from conformance.decoder.helpers import histories

    oracle = ForwardOracle(target, load("gqa"))
    seqs = [[0], [1], [0], [2], [1], [2], [0], [2], [1]]
    toks = prompt(len(seqs), start=31)
    ctx = new_ctx(n_ctx=768, n_batch=16, n_ubatch=16, n_seq_max=3, kv_unified=False)
    assert ctx.decode(batch(toks, seqs=seqs, all_out=True)) == 0
    want = [oracle.row(h) for h in histories(toks, seqs)]
    if first == "all":
        rows = np.asarray(ctx.get_logits())
    else:
        rows = np.stack([np.asarray(ctx.get_logits_ith(i)) for i in range(len(toks))])
    for i in range(len(toks)):
        assert_nmse(want[i], rows[i], F32, f"first read, token {i}")
    for _ in range(2):  # the swaps were applied once: reading again changes nothing
        np.testing.assert_array_equal(np.asarray(ctx.get_logits()), rows)
        for i in (0, 4, 8):
            np.testing.assert_array_equal(np.asarray(ctx.get_logits_ith(i)), rows[i])
        assert ctx.seq_pos_max(2) == 2  # a memory operation between reads
