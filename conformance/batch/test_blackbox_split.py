"""Splitter rules seen through ``decode`` alone (black-box): what the split into ubatches does to
the logits, the output rows and ``seq_pos_*`` of an engine that exposes no splitter.

The oracle is the target's own full-sequence forward pass (``model.forward``: no KV cache, no
splitter): each output row of a decode must equal the forward row of its sequence's history
(NMSE <= 1e-9, the f32 class of decode_phase.md D1) whatever ``n_ubatch`` is. A ubatch that
carried the wrong tokens, positions or flags, took tokens out of batch order, ran before the one
it follows, or put a sequence in another sequence's KV stream changes some row or some
``seq_pos_*``. The white-box tests of the same rows (test_split.py) check the ubatches
themselves.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from conformance.assertions import assert_nmse, unchanged
from conformance.decoder.helpers import ForwardOracle, batch, histories, invalid, memory_view
from conformance.decoder.helpers import prompt as make_prompt

pytestmark = pytest.mark.requires(
    "decoder.logits", "decoder.batch_rules", "decoder.memory_ops", "model.forward"
)

F32 = 1e-9  # decode_phase.md D1: the f32 tolerance class
MODEL = "gqa"

# Four sequences interleaved, one sequence per token; positions generated (0, 1, ... per sequence)
SEQS = [[0], [1], [0], [0], [2], [1], [3], [0], [2], [2], [1], [0], [3], [1]]
FLAGS = [1, 0, 1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 1, 1]
TOKENS = make_prompt(len(SEQS), start=11, stride=13)
# A history decoded first, so that the sequences of one ubatch sit at different positions
PRIME_SEQS = [[0], [0], [0], [1], [3], [3]]
PRIME = make_prompt(len(PRIME_SEQS), start=70, stride=5)


def _check_rows(
    ctx: Any, oracle: ForwardOracle, flags: list[int], what: str, prime: int = 0
) -> None:
    """Rows of the batch ``TOKENS`` / ``SEQS`` decoded after the first ``prime`` tokens of
    ``PRIME`` / ``PRIME_SEQS``."""
    hist = histories(PRIME[:prime] + TOKENS, PRIME_SEQS[:prime] + SEQS)[prime:]
    assert ctx.n_outputs() == sum(flags), what
    for i, f in enumerate(flags):
        if not f:
            assert invalid(functools.partial(ctx.get_logits_ith, i)), f"{what}: {i} is no output"
            continue
        assert_nmse(oracle.row(hist[i]), np.asarray(ctx.get_logits_ith(i)), F32, f"{what}: row {i}")


def _expected_memory(prime: int = 0) -> dict[int, tuple[int, int]]:
    seqs = PRIME_SEQS[:prime] + SEQS
    return {s: (0, sum(1 for ids in seqs if s in ids) - 1) for s in range(4)}


@pytest.mark.invariant("SPL-001", "SPL-004", "DEC-031", "MEM-009", "OUT-005")
@pytest.mark.parametrize("n_ubatch", [1, 2, 3, 5, 16])
def test_one_stream_split_keeps_batch_order_and_token_data(
    new_ctx: Callable[..., Any], target: Any, load: Callable[[str], Any], n_ubatch: int
) -> None:
    """One KV stream: split_simple takes the next ``n_ubatch`` tokens in batch order; each
    ubatch reaches the cache before it is computed and after the one before it. Taking tokens
    out of order (a later position computed before an earlier one of its sequence), giving a
    ubatch token another token's id, position, sequence or flag, skipping or reordering
    ubatches, all change a row below."""
    oracle = ForwardOracle(target, load(MODEL))
    ctx = new_ctx(MODEL, n_batch=16, n_ubatch=n_ubatch, n_seq_max=4, kv_unified=True)
    assert ctx.decode(batch(TOKENS, seqs=SEQS, out=FLAGS)) == 0
    assert memory_view(ctx) == _expected_memory()
    _check_rows(ctx, oracle, FLAGS, f"n_ubatch {n_ubatch}")


@pytest.mark.invariant("SPL-003", "SPL-008", "KV-004", "KV-006", "KV-024", "OUT-005")
@pytest.mark.parametrize("n_ubatch", [1, 2, 3, 4, 16])
def test_stream_split_places_each_sequence_run_in_its_stream(
    new_ctx: Callable[..., Any], target: Any, load: Callable[[str], Any], n_ubatch: int
) -> None:
    """One KV stream per sequence: split_equal lays a ubatch out set by set, each run the next
    unused tokens of one sequence, the cache places each run in that sequence's stream (its
    ``seq_id_unq`` entry) and the mask gives each run its own stream's block. The sequences
    start at different lengths, so the runs of one ubatch sit at different positions. A run in another sequence's stream, or out of batch order, shows
    as a row that differs from the sequence's own forward pass, or as wrong ``seq_pos_*``."""
    oracle = ForwardOracle(target, load(MODEL))
    ctx = new_ctx(MODEL, n_ctx=1024, n_batch=16, n_ubatch=n_ubatch, n_seq_max=4, kv_unified=False)
    assert ctx.n_ctx_seq() < ctx.n_ctx()  # really one stream per sequence
    p = len(PRIME)
    assert ctx.decode(batch(PRIME, seqs=PRIME_SEQS)) == 0
    assert ctx.decode(batch(TOKENS, seqs=SEQS, out=FLAGS)) == 0
    assert memory_view(ctx) == _expected_memory(p)
    _check_rows(ctx, oracle, FLAGS, f"n_ubatch {n_ubatch}", p)


@pytest.mark.invariant("SPL-018", "MEM-007")
@pytest.mark.parametrize("n_ubatch", [1, 4])
def test_coupled_tokens_split_with_one_stream_and_fail_whole_with_streams(
    new_ctx: Callable[..., Any], target: Any, load: Callable[[str], Any], n_ubatch: int
) -> None:
    """A KV memory splits with split_simple on one stream (a token may list several sequences)
    and with the sequential split_equal on one stream per sequence, which cannot place a token
    of two sequences: the split leaves tokens unplaced, so the memory gets no ubatch at all and
    decode returns 1 with nothing changed — not 0, not a partial placement."""
    oracle = ForwardOracle(target, load(MODEL))
    toks = make_prompt(6, start=5)
    seqs = [[0], [1], [0], [1], [0, 1], [0]]
    pos = [0, 0, 1, 1, 2, 3]  # sequences 0 and 1 are at the same positions when coupled
    one = new_ctx(MODEL, n_batch=16, n_ubatch=n_ubatch, n_seq_max=2, kv_unified=True)
    assert one.decode(batch(toks, seqs=seqs, pos=pos, all_out=True)) == 0
    assert memory_view(one) == {0: (0, 3), 1: (0, 2)}
    # the first four tokens have single-sequence histories
    for i, hist in enumerate([toks[:1], toks[1:2], [toks[0], toks[2]], [toks[1], toks[3]]]):
        assert_nmse(oracle.row(hist), np.asarray(one.get_logits_ith(i)), F32, f"row {i}")

    streams = new_ctx(MODEL, n_ctx=512, n_batch=16, n_ubatch=n_ubatch, n_seq_max=2)
    assert streams.n_ctx_seq() < streams.n_ctx()
    assert streams.decode(batch(toks[:2], seqs=seqs[:2], pos=pos[:2], all_out=True)) == 0
    with unchanged(lambda: memory_view(streams), "seq_pos_min/max"):
        assert streams.decode(batch(toks[2:], seqs=seqs[2:], pos=pos[2:], all_out=True)) == 1
    # nothing of the refused batch reached the cache: sequence 0 continues as if it never came
    assert streams.decode(batch([toks[2]], seqs=[[0]], pos=[1], all_out=True)) == 0
    assert_nmse(oracle.row([toks[0], toks[2]]), np.asarray(streams.get_logits_ith(0)), F32)


# -- ubatch sizes seen through the engine's graph-reuse counter --------------------------------
#
# A ubatch reuses the compute graph of the ubatch just before it exactly when the two agree on
# their shape — token count, sequences, outputs, n_kv (DEC-043, DEC-044). So the reuse counter
# tells how a batch was cut: the same ubatch sizes reuse, another size builds.


def _reuses(ctx: Any, b: Any) -> int:
    before = ctx.n_reused()
    assert ctx.decode(b) == 0
    return int(ctx.n_reused() - before)


@pytest.mark.invariant("SPL-001")
@pytest.mark.requires("decoder.graph_reuse")
@pytest.mark.parametrize(
    ("n_tokens", "n_ubatch", "reuses"),
    [(10, 3, 2), (9, 4, 1), (8, 4, 1), (7, 2, 2), (5, 8, 0)],
    ids=["3-3-3-1", "4-4-1", "4-4", "2-2-2-1", "5"],
)
def test_split_simple_cuts_n_ubatch_tokens_at_a_time(
    new_ctx: Callable[..., Any], n_tokens: int, n_ubatch: int, reuses: int
) -> None:
    """One stream, every token an output: ubatches of exactly ``n_ubatch`` tokens and a shorter
    last one; each full ubatch after the first reuses the graph (one more or one fewer token
    per ubatch would change the count)."""
    ctx = new_ctx(MODEL, n_batch=16, n_ubatch=n_ubatch, kv_unified=True)
    assert _reuses(ctx, batch(make_prompt(n_tokens), all_out=True)) == reuses


@pytest.mark.invariant("DEC-012")
@pytest.mark.requires("decoder.graph_reuse")
@pytest.mark.parametrize(
    ("flags", "reuses"),
    [
        ([1, 0, 1, 0, 0, 1, 0, 1, 1, 1, 0, 0], 2),  # 2, 2, 2 outputs per ubatch
        ([1, 0, 1, 0, 1, 1, 1, 0, 0, 0, 1, 1], 0),  # 2, 3, 2
        ([0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 1], 1),  # 1, 1, 3: only the second reuses
    ],
    ids=["2-2-2", "2-3-2", "1-1-3"],
)
def test_each_ubatch_outputs_its_flagged_tokens(
    new_ctx: Callable[..., Any], flags: list[int], reuses: int
) -> None:
    """Three ubatches of 4 tokens: a ubatch's output count is the number of its flagged tokens,
    and a ubatch reuses the graph before it only when that count is the same."""
    ctx = new_ctx(MODEL, n_batch=16, n_ubatch=4, kv_unified=True)
    assert _reuses(ctx, batch(make_prompt(12), out=flags)) == reuses
    assert ctx.n_outputs() == sum(flags)


@pytest.mark.invariant("SPL-009", "SPL-010")
@pytest.mark.requires("decoder.graph_reuse")
@pytest.mark.parametrize(
    ("order", "n_ubatch", "reuses"),
    [
        ([0, 1, 2], 2, [0, 1, 1]),  # three pending sets, n_ubatch 2: one ubatch of 3 tokens
        ([0, 1, 2], 1, [0, 0, 0]),  # ... n_ubatch 1: 2 tokens, then 1
        ([1, 0, 2], 8, [0, 0, 0]),  # sequential sets: {1, 2} then {0}
        ([0, 1, 2], 8, [0, 1, 1]),  # ... {0, 1, 2} at once
    ],
    ids=["u2-three-sets", "u1-two-then-one", "u8-1-2-then-0", "u8-0-1-2"],
)
def test_stream_split_chooses_consecutive_sets_up_to_n_ubatch_plus_one(
    new_ctx: Callable[..., Any], order: list[int], n_ubatch: int, reuses: list[int]
) -> None:
    """One KV stream per sequence, one token per sequence per decode: split_equal adds sets in
    batch order while each next sequence id is the previous one plus 1, and stops once more than
    ``n_ubatch`` sets are chosen, so a decode is one ubatch (its shape repeats: reuse from the
    second decode on) or two of different sizes (never reused)."""
    ctx = new_ctx(MODEL, n_ctx=768, n_batch=8, n_ubatch=n_ubatch, n_seq_max=3, kv_unified=False)
    got = [
        _reuses(ctx, batch(make_prompt(3, start=5 + k), seqs=[[s] for s in order], pos=[k] * 3))
        for k in range(3)
    ]
    assert got == reuses
    assert memory_view(ctx, range(3)) == {s: (0, 2) for s in range(3)}
