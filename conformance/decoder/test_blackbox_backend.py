"""Backend-sampler rules seen through ``decode`` alone (black-box): a sequence with a chain
attached (``sampling.backend``, llama.cpp's ``llama_set_sampler``) takes at most one output per
batch, shown as the return code -1 with nothing changed; the sampled tokens follow the batch's
row mapping, shown as each row's token being the greedy choice of that token's own history in
the target's full-sequence forward pass (``model.forward``).

llama.cpp 0.3.36 has no ``n_outputs_max_per_seq``: the limit is 1, the default of OUT-033. The
white-box tests of the same rows (test_flow_failures.py) read the typed error, the reordering
swaps and a limit above 1 (``decoder.sample_router``).

With a chain attached, llama.cpp's ``get_logits_ith`` of a sampled row may return what the
graph's samplers kept (spec/sampling.md, *Backend sampling*), so these tests read logits only
of sequences without a chain, and judge sampled rows by their tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from conformance.assertions import assert_nmse, unchanged
from conformance.decoder.helpers import ForwardOracle, batch, memory_view, prompt

pytestmark = pytest.mark.requires(
    "decoder.logits", "decoder.memory_ops", "sampling.backend", "sampling.greedy", "model.forward"
)

F32 = 1e-9  # decode_phase.md D1: the f32 tolerance class
GREEDY = ["greedy"]
TOKEN_0 = [["logit_bias", {"biases": [[0, 1000.0]]}], "greedy"]  # picks token 0 on any row


def best(row: Any) -> int:
    """The greedy token of a forward row whose two best logits are far enough apart that a
    decode within the f32 bound picks the same one (the test's own premise)."""
    row = np.asarray(row, dtype=np.float64)
    top2 = np.sort(row)[-2:]
    assert top2[1] - top2[0] > 1e-3 * (row.max() - row.min()), "near-tie in the expected row"
    return int(np.argmax(row))


def two_seqs(a: Sequence[int], b: Sequence[int], p: int, out: Sequence[int]) -> Any:
    """Two tokens of sequence 0 (``a``) then two of sequence 1 (``b``), at positions p, p+1."""
    return batch([*a, *b], seqs=[[0], [0], [1], [1]], pos=[p, p + 1, p, p + 1], out=list(out))


@pytest.mark.invariant("OUT-033")
def test_a_sequence_with_a_chain_takes_one_output_per_batch(
    new_ctx: Callable[..., Any], target: Any, load: Callable[[str], Any]
) -> None:
    """Sequence 0 has a greedy chain, sequence 1 none. A batch giving sequence 0 two outputs,
    directly or through a token listing both sequences, returns -1 before anything changes:
    both sequences keep their positions, and the next batch continues them as if the refused
    ones had never come (its rows equal the forward pass of each history). Sequence 1 takes
    any number of outputs, and so does sequence 0 once its chain is detached."""
    oracle = ForwardOracle(target, load("gqa"))
    a, b = prompt(7, start=5, stride=13), prompt(7, start=60, stride=17)
    oracle.row(a), oracle.row(b)  # one forward pass per sequence gives every prefix's row
    ctx = new_ctx(n_batch=16, n_seq_max=2, kv_unified=True)
    target.backend_set_sampler(ctx, 0, GREEDY)
    assert ctx.decode(two_seqs(a[0:2], b[0:2], 0, [0, 1, 1, 1])) == 0
    assert target.backend_sample(ctx, 0, 1) == best(oracle.row(a[:2]))
    view = lambda: memory_view(ctx)  # noqa: E731
    assert view() == {0: (0, 1), 1: (0, 1)}
    refused = {
        "two flagged tokens of sequence 0": two_seqs(a[2:4], b[2:4], 2, [1, 1, 0, 1]),
        "a flagged token of both sequences and one of sequence 0": batch(
            [a[2], a[3], b[3]], seqs=[[0, 1], [0], [1]], pos=[2, 3, 3], out=[1, 1, 0]
        ),
    }
    for what, bad in refused.items():  # the batches themselves are valid: without the chain
        plain = new_ctx(n_batch=16, n_seq_max=2, kv_unified=True)
        assert plain.decode(two_seqs(a[0:2], b[0:2], 0, [0, 1, 1, 1])) == 0
        assert plain.decode(bad) == 0, what
    for what, bad in refused.items():
        with unchanged(view, what):
            assert ctx.decode(bad) == -1, what
    # the next batch continues both histories: nothing of the refused batches stayed
    assert ctx.decode(two_seqs(a[2:4], b[2:4], 2, [0, 1, 1, 1])) == 0
    assert view() == {0: (0, 3), 1: (0, 3)}
    assert target.backend_sample(ctx, 0, 1) == best(oracle.row(a[:4]))
    assert_nmse(oracle.row(b[:3]), np.asarray(ctx.get_logits_ith(2)), F32, "seq 1, pos 2")
    assert_nmse(oracle.row(b[:4]), np.asarray(ctx.get_logits_ith(3)), F32, "seq 1, pos 3")
    # a sequence without a chain is not limited, with or without another one's chain
    assert ctx.decode(batch(b[4:7], seqs=[[1]] * 3, pos=[4, 5, 6], all_out=True)) == 0
    for i in range(3):
        assert_nmse(oracle.row(b[: 5 + i]), np.asarray(ctx.get_logits_ith(i)), F32, f"seq 1 {i}")
    target.backend_set_sampler(ctx, 0, None)
    assert ctx.decode(batch(a[4:7], seqs=[[0]] * 3, pos=[4, 5, 6], all_out=True)) == 0
    assert view() == {0: (0, 6), 1: (0, 6)}
    for i in range(3):
        assert_nmse(oracle.row(a[: 5 + i]), np.asarray(ctx.get_logits_ith(i)), F32, f"seq 0 {i}")


@pytest.mark.invariant("OUT-033")
@pytest.mark.requires("decoder.embeddings")
def test_with_embeddings_every_token_of_a_sampled_sequence_counts(
    new_ctx: Callable[..., Any], target: Any
) -> None:
    """With embeddings on, every token is an output whatever its flag: two tokens of the
    sampled sequence are two outputs (-1, nothing changed), one is fine, and the sequence
    without a chain takes three."""
    ctx = new_ctx(n_batch=16, n_seq_max=2, kv_unified=True, embeddings=True)
    target.backend_set_sampler(ctx, 0, GREEDY)
    toks = prompt(3, start=21)
    view = lambda: memory_view(ctx)  # noqa: E731
    with unchanged(view, "two tokens of the sampled sequence"):
        assert ctx.decode(batch(toks[:2], seqs=[[0], [0]], pos=[0, 1], out=[0, 1])) == -1
    assert ctx.decode(batch(toks[:1], seqs=[[0]], pos=[0], out=[1])) == 0
    assert ctx.decode(batch(toks, seqs=[[1]] * 3, pos=[0, 1, 2], out=[0, 0, 1])) == 0
    assert view() == {0: (0, 0), 1: (0, 2)}


@pytest.mark.invariant("OUT-034")
@pytest.mark.requires("sampling.logit_bias")
def test_sampled_tokens_follow_the_batch_order_of_their_rows(
    new_ctx: Callable[..., Any], target: Any, load: Callable[[str], Any]
) -> None:
    """One KV stream per sequence and 3-token ubatches: split_equal takes one token of each
    sequence per ubatch, so the flagged tokens (batch tokens 2, 3 and 7, at positions 2, 0
    and 1 of sequences 0, 1 and 2) are computed in the order 3, 7, 2. The token sampled for
    each batch token is the greedy choice of that token's own history, and the three
    differ, so a row read in emission order gives another sequence's token. A chain biased to
    token 0 then samples 0 on sequence 1's next row: id 0 is a token, not a missing sample."""
    oracle = ForwardOracle(target, load("gqa"))
    toks = prompt(9, start=31)
    ctx = new_ctx(n_ctx=768, n_batch=16, n_ubatch=3, n_seq_max=3, kv_unified=False)
    for s in range(3):
        target.backend_set_sampler(ctx, s, GREEDY)
    flags = [0, 0, 1, 1, 0, 0, 0, 1, 0]
    seqs = [[i // 3] for i in range(9)]
    assert ctx.decode(batch(toks, seqs=seqs, pos=[i % 3 for i in range(9)], out=flags)) == 0
    want = {i: best(oracle.row(toks[3 * (i // 3) : i + 1])) for i in (2, 3, 7)}
    assert len(set(want.values())) == 3, f"the rows' greedy tokens must differ: {want}"
    for i in (7, 2, 3):  # the first read is not batch token 0's
        assert target.backend_sample(ctx, i // 3, i) == want[i], f"batch token {i}"
    assert memory_view(ctx, range(3)) == {0: (0, 2), 1: (0, 2), 2: (0, 2)}
    # token id 0 is a sampled token like any other, not "nothing sampled"
    target.backend_set_sampler(ctx, 1, TOKEN_0)
    assert ctx.decode(batch(toks[6:7], seqs=[[1]], pos=[3], out=[1])) == 0
    assert target.backend_sample(ctx, 1, 0) == 0
