"""Decode-phase semantics (seed 002) checked on generation traces and differential runs."""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise
from typing import Any

import numpy as np
import pytest

from conformance.assertions import assert_nmse, unchanged
from conformance.decoder.helpers import DecodeRecorder, batch, prompt
from reference_impl.generator import GenerationRequest, GenerationResult, Generator

pytestmark = pytest.mark.requires("decoder.logits", "decoder.memory_ops")

F32 = 1e-9  # NMSE bound of the f32 tolerance class (decode_phase.md D1)
PROMPTS = [prompt(5), prompt(8, start=21), prompt(3, start=60), prompt(6, start=99)]
LIMITS = [6, 3, 8, 5]


def generate(
    gen: Generator, prompts: list[list[int]] = PROMPTS, limits: list[int] = LIMITS, **kw: Any
) -> GenerationResult:
    return gen.generate(GenerationRequest(prompts=prompts, max_tokens=limits, use_eos=False, **kw))


def decode_steps(res: GenerationResult) -> list[Any]:
    return [s for s in res.trace if s.phase == "decode"]


@pytest.fixture
def batched(make_gen: Callable[..., Generator]) -> tuple[Generator, GenerationResult]:
    gen = make_gen(n_seq_max=4)
    return gen, generate(gen)


@pytest.mark.invariant("PHASE-001", "PHASE-002", "PHASE-018", "PHASE-019")
def test_one_token_per_active_sequence_fed_back_in_order(
    make_gen: Callable[..., Generator],
) -> None:
    base = make_gen(n_seq_max=4)
    rec = DecodeRecorder(base.ctx)
    res = generate(Generator(rec, n_vocab=base.n_vocab, eos=base.eos))
    prev = next(s for s in res.trace if s.phase == "prefill")
    step_batches = rec.batches[len(prev.calls) :]  # what the decode steps really submitted
    assert len(step_batches) == len(decode_steps(res))
    last_pos = {s: len(PROMPTS[s]) - 1 for s in range(4)}
    left: set[int] = set()
    for st, b in zip(decode_steps(res), step_batches):
        assert sorted(st.chosen) == st.active  # exactly the active sequences, one token each
        assert set(st.active) <= set(prev.active) and not (set(st.active) & left)
        # the decode call: one entry per active sequence, nothing for any other sequence
        assert b.n_seq_id.tolist() == [1] * b.n_tokens
        assert sorted(b.seq_id[:, 0].tolist()) == st.active
        fed = dict(zip(b.seq_id[:, 0].tolist(), zip(b.token.tolist(), b.pos.tolist())))
        for s in st.active:
            assert st.fed[s] == [(prev.chosen[s], last_pos[s] + 1)]
            assert fed[s] == (prev.chosen[s], last_pos[s] + 1), f"step {st.step} seq {s}"
            last_pos[s] += 1
        left |= set(prev.active) - set(st.active)
        for s in set(prev.active) - set(st.active):
            assert s in prev.finished  # leaves exactly after the step that finished it
        prev = st


@pytest.mark.invariant("PHASE-003", "PHASE-004", "PHASE-006")
@pytest.mark.requires("decoder.introspection")
def test_each_step_is_one_call_one_ubatch_all_layers_in_order(
    make_gen: Callable[..., Generator],
) -> None:
    gen = make_gen(n_seq_max=4, trace=True)
    res = generate(gen)
    n_layer = 3
    calls = gen.ctx.trace.calls
    steps = decode_steps(res)
    first_call = calls - len(steps)
    for k, st in enumerate(steps):
        assert len(st.calls) == 1 and st.calls[0]["n_tokens"] == len(st.active)
        kinds = gen.ctx.trace.kinds(first_call + k)
        assert kinds.count("apply") == 1  # one ubatch
        layers = [
            e.data["layer"] for e in gen.ctx.trace.of_call(first_call + k) if e.kind == "kv_write"
        ]
        assert layers == list(range(n_layer))
        assert kinds[-1] == "done" and kinds.index("done") > max(
            i for i, x in enumerate(kinds) if x == "kv_write"
        )


@pytest.mark.invariant("PHASE-005", "PHASE-013")
def test_steps_do_not_overlap_and_commit_one_entry(
    batched: tuple[Generator, GenerationResult],
) -> None:
    _, res = batched
    seq = [s.seq_no for s in res.trace]
    assert seq == sorted(seq)
    steps = [s for s in res.trace if s.phase in ("prefill", "decode")]
    for a, b in pairwise(steps):
        assert a.kv_after == b.kv_before
    for st in decode_steps(res):
        for s in st.active:
            ((_, p),) = st.fed[s]
            assert st.kv_before[s][1] == p - 1 and st.kv_after[s][1] == p


@pytest.mark.invariant("PHASE-007")
def test_selection_reads_the_steps_logits_row(batched: tuple[Generator, GenerationResult]) -> None:
    gen, res = batched
    for st in decode_steps(res):
        for s in st.active:
            row = np.asarray(st.logits[s])
            assert st.chosen[s] == int(np.argmax(row))
    last = decode_steps(res)[-1]
    for k, s in enumerate(last.active):
        assert np.array_equal(
            np.asarray(gen.ctx.get_logits_ith(k)), np.asarray(last.logits[s], dtype=np.float32)
        )


@pytest.mark.invariant("PHASE-008", "PHASE-009", "PHASE-011", "PHASE-020")
def test_each_step_reads_the_full_history_and_adds_one_entry(
    batched: tuple[Generator, GenerationResult], new_ctx: Callable[..., Any]
) -> None:
    _, res = batched
    history = {
        s: [t for t, _ in next(x for x in res.trace if x.phase == "prefill").fed[s]]
        for s in range(4)
    }
    for st in decode_steps(res)[:4]:
        total_before = sum(hi - lo + 1 for lo, hi in st.kv_before.values() if hi >= 0)
        total_after = sum(hi - lo + 1 for lo, hi in st.kv_after.values() if hi >= 0)
        assert total_after == total_before + len(st.active)
        for s in st.active:
            ((tok, p),) = st.fed[s]
            assert st.kv_before[s] == (0, p - 1) and st.kv_after[s] == (0, p)
            history[s].append(tok)
            fresh = new_ctx(n_batch=32)
            assert fresh.decode(batch(history[s])) == 0
            assert_nmse(fresh.get_logits_ith(-1), st.logits[s], F32, f"step {st.step} seq {s}")


@pytest.mark.invariant("PHASE-011", "PHASE-020")
@pytest.mark.requires("decoder.introspection")
def test_each_step_adds_exactly_one_cell_per_active_sequence(
    make_gen: Callable[..., Generator],
) -> None:
    gen = make_gen(n_seq_max=4)
    ctx = gen.ctx
    used: list[int] = []

    class Counting:
        """The context, recording the used cells after every decode."""

        def decode(self, b: Any) -> int:
            code = int(ctx.decode(b))
            used.append(ctx.memory.get_used())
            return code

        def __getattr__(self, name: str) -> Any:
            return getattr(ctx, name)

    gen.ctx = Counting()
    res = generate(gen)
    steps = decode_steps(res)
    n_prefill_calls = len(next(s for s in res.trace if s.phase == "prefill").calls)
    after_steps = used[n_prefill_calls:]
    before = used[n_prefill_calls - 1]
    for st, u in zip(steps, after_steps):
        assert u == before + len(st.active)
        before = u


@pytest.mark.invariant("PHASE-010")
@pytest.mark.requires("decoder.introspection")
def test_attention_never_reads_another_sequences_entries(
    make_gen: Callable[..., Generator],
) -> None:
    from reference_impl.kv import mask as kv_mask

    gen = make_gen(n_seq_max=4, trace=True)
    generate(gen, limits=[3, 3, 3, 3])
    ctx = gen.ctx
    # a step-like ubatch: one token per sequence, positions continuing each sequence
    pos = [ctx.seq_pos_max(s) + 1 for s in range(4)]
    assert ctx.decode(batch(prompt(4), seqs=[[0], [1], [2], [3]], pos=pos)) == 0
    ub_cells = ctx.memory.cells[0]
    from reference_impl.batch import sanitize as san
    from reference_impl.batch.split import BatchSplitter

    sb = san.sanitize(
        batch(prompt(4), seqs=[[0], [1], [2], [3]], pos=[p + 1 for p in pos]),
        n_vocab=508,
        n_seq_max=4,
    )
    ub = BatchSplitter(sb).split_simple(4)
    m = kv_mask.build_kq_mask(ctx.memory, ub, 256)[0].numpy()
    for i in range(4):
        open_cells = set(np.flatnonzero(m[i] == 0).tolist())
        assert open_cells and open_cells <= set(ub_cells.seq_cells(i))


@pytest.mark.invariant("PHASE-012")
@pytest.mark.requires("decoder.introspection")
def test_cached_kv_equals_a_single_batch_prefill(
    batched: tuple[Generator, GenerationResult], new_ctx: Callable[..., Any]
) -> None:
    gen, res = batched
    ctx = gen.ctx
    for s in (0, 2):
        fed = sorted((p, t) for st in res.trace for t, p in st.fed.get(s, []))
        fresh = new_ctx(n_batch=64)
        assert fresh.decode(batch([t for _, t in fed])) == 0
        cells = ctx.memory.cells[0]
        for layer in range(3):
            got_k, got_v, ref_k, ref_v = [], [], [], []
            for p, _ in fed:
                c = next(c for c in cells.seq_cells(s) if int(cells.pos[c]) == p)
                got_k.append(ctx.memory.k[layer][0, c].numpy())
                got_v.append(ctx.memory.v[layer][0, c].numpy())
                ref_k.append(fresh.memory.k[layer][0, p].numpy())
                ref_v.append(fresh.memory.v[layer][0, p].numpy())
            assert_nmse(np.stack(ref_k), np.stack(got_k), F32, f"K seq {s} layer {layer}")
            assert_nmse(np.stack(ref_v), np.stack(got_v), F32, f"V seq {s} layer {layer}")


def _fed_history(res: GenerationResult, s: int) -> list[int]:
    """The tokens fed for sequence ``s`` over a generation, in position order."""
    return [t for _, t in sorted((p, t) for st in res.trace for t, p in st.fed.get(s, []))]


def _probe(ctx: Any, s: int, token: int) -> np.ndarray:
    """Logits of ``token`` placed after sequence ``s``; the probe is removed again."""
    pos = ctx.seq_pos_max(s) + 1
    assert ctx.decode(batch([token], seqs=[[s]], pos=[pos])) == 0
    row = ctx.get_logits_ith(0).copy()
    assert ctx.seq_rm(s, pos, -1)
    return row


@pytest.mark.invariant("PHASE-012", "PHASE-010")
def test_a_probe_after_generation_reads_what_a_fresh_prefill_would(
    batched: tuple[Generator, GenerationResult], new_ctx: Callable[..., Any]
) -> None:
    """Through decode alone: after a four-sequence generation in one shared cache, one more
    token on sequence ``s`` gets the logits a fresh context gives after prefilling the history
    fed for ``s`` and that token. Stored K/V that differ from a prefill's (PHASE-012) or an entry
    of another sequence in the visible set (PHASE-010) would change them."""
    gen, res = batched
    for s in range(4):
        history = _fed_history(res, s)
        assert len(history) == len(PROMPTS[s]) + LIMITS[s] - 1  # the last pick is never fed
        got = _probe(gen.ctx, s, 11)
        fresh = new_ctx(n_batch=64)
        assert fresh.decode(batch([*history, 11])) == 0
        assert_nmse(fresh.get_logits_ith(-1), got, F32, f"seq {s}")


@pytest.mark.invariant("PHASE-014")
def test_a_step_on_one_sequence_leaves_the_others_readable_as_before(
    make_gen: Callable[..., Generator],
) -> None:
    """Through decode alone: sequences that finished at different steps keep their position
    range, and their next-token logits, across a further step on sequence 3 only."""
    gen = make_gen(n_seq_max=4)
    generate(gen)
    ctx = gen.ctx

    def others() -> dict[int, Any]:
        return {
            s: ((ctx.seq_pos_min(s), ctx.seq_pos_max(s)), _probe(ctx, s, 11).tobytes())
            for s in range(3)
        }

    before = others()
    assert ctx.decode(batch([7], seqs=[[3]], pos=[ctx.seq_pos_max(3) + 1])) == 0
    after = others()
    for s in range(3):
        assert after[s][0] == before[s][0], f"seq {s} positions"
        a, b = (np.frombuffer(x[1], dtype=np.float32) for x in (before[s], after[s]))
        assert_nmse(a, b, F32, f"seq {s} logits")


@pytest.mark.invariant("PHASE-014", "PHASE-021")
@pytest.mark.requires("decoder.introspection")
def test_finished_sequences_and_history_stay_untouched(make_gen: Callable[..., Generator]) -> None:
    gen = make_gen(n_seq_max=4)
    rec = DecodeRecorder(gen.ctx)
    res = generate(Generator(rec, n_vocab=gen.n_vocab, eos=gen.eos))
    ctx = gen.ctx
    finished_at = {s: max(st.step for st in res.trace if s in st.chosen) for s in range(4)}
    assert len(set(finished_at.values())) > 1
    # replay: every fed position was fed once and they increase by one per step
    for s in range(4):
        ps = [p for st in res.trace for _, p in st.fed.get(s, [])]
        assert ps == list(range(len(ps)))
        # the same for what the decode calls really carried
        sent = [
            int(b.pos[i]) for b in rec.batches for i in range(b.n_tokens) if b.seq_id[i, 0] == s
        ]
        assert sent == ps, f"seq {s}: positions submitted {sent}"

    def others() -> dict[int, Any]:
        """Position range and layer-0 K rows of sequences 0..2."""
        cells = ctx.memory.cells[0]
        return {
            s: ((ctx.seq_pos_min(s), ctx.seq_pos_max(s)), ctx.memory.k[0][0, cells.seq_cells(s)])
            for s in range(3)
        }

    # a further step on sequence 3 only leaves the others' entries bit-identical
    with unchanged(others, "sequences 0..2"):
        assert ctx.decode(batch([7], seqs=[[3]], pos=[ctx.seq_pos_max(3) + 1])) == 0


@pytest.mark.invariant("PHASE-015", "PHASE-016")
def test_a_sequence_decodes_the_same_alone_or_batched(
    make_gen: Callable[..., Generator], batched: tuple[Generator, GenerationResult]
) -> None:
    _, res = batched
    for s in range(4):
        alone = generate(make_gen(n_seq_max=1), prompts=[PROMPTS[s]], limits=[LIMITS[s]])
        assert alone.tokens[0] == res.tokens[s]
        rows_b = [np.asarray(st.logits[s]) for st in res.trace if s in st.logits]
        rows_a = [np.asarray(st.logits[0]) for st in alone.trace if 0 in st.logits]
        assert len(rows_a) == len(rows_b)
        for k, (a, b) in enumerate(zip(rows_a, rows_b)):
            assert_nmse(a, b, F32, f"seq {s} row {k}")


@pytest.mark.invariant("PHASE-017")
def test_batch_composition_does_not_change_a_sequence(
    make_gen: Callable[..., Generator], batched: tuple[Generator, GenerationResult]
) -> None:
    _, res = batched
    order = [3, 1, 0, 2]  # reordered and renumbered: new seq k runs old prompt order[k]
    shuffled = generate(
        make_gen(n_seq_max=4),
        prompts=[PROMPTS[k] for k in order],
        limits=[LIMITS[k] for k in order],
    )
    for new, old in enumerate(order):
        assert shuffled.tokens[new] == res.tokens[old]
    extra = generate(
        make_gen(n_seq_max=4),
        prompts=[PROMPTS[0], prompt(9, start=3), prompt(4, start=7)],
        limits=[LIMITS[0], 4, 4],
    )
    a = [np.asarray(st.logits[0]) for st in res.trace if 0 in st.logits]
    b = [np.asarray(st.logits[0]) for st in extra.trace if 0 in st.logits]
    for k, (x, y) in enumerate(zip(a, b)):
        assert_nmse(x, y, F32, f"seq 0 row {k}")
