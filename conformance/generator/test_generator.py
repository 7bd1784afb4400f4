"""The generator: request validation, prefill, decode steps, stop conditions, trace (GEN-*)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from conformance.assertions import assert_nmse, raises_code, unchanged
from conformance.decoder.helpers import DecodeRecorder, memory_view, prompt
from reference_impl.errors import GeneratorError
from reference_impl.generator import GenerationRequest, GenerationResult, Generator, TraceStep

pytestmark = pytest.mark.requires("decoder.logits", "decoder.memory_ops")

N_VOCAB = 508


def run(gen: Generator, **kw: Any) -> GenerationResult:
    return gen.generate(GenerationRequest(**kw))


def steps(res: GenerationResult, phase: str = "decode") -> list[TraceStep]:
    return [s for s in res.trace if s.phase == phase]


@pytest.mark.invariant("GEN-001")
@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"prompts": []}, "GEN_EMPTY_PROMPT"),
        ({"prompts": [[5], []]}, "GEN_EMPTY_PROMPT"),
        ({"prompts": [[5]] * 5}, "GEN_TOO_MANY_PROMPTS"),
        ({"prompts": [[5]], "max_tokens": -1}, "GEN_BAD_LIMIT"),
        ({"prompts": [[5, N_VOCAB]]}, "GEN_TOKEN_RANGE"),
    ],
)
def test_invalid_requests_are_refused_before_any_decode(
    make_gen: Callable[..., Generator], kwargs: dict[str, Any], code: str
) -> None:
    gen = make_gen(n_seq_max=4)
    assert gen.ctx.decode is not None
    where: dict[str, Any] = {"seq_id": 0, "index": 1} if code == "GEN_TOKEN_RANGE" else {}
    with (
        unchanged(lambda: memory_view(gen.ctx), "memory"),
        raises_code(code, exc=GeneratorError, **where),
    ):
        run(gen, **kwargs)


@pytest.mark.invariant("GEN-001")
def test_token_range_bounds(make_gen: Callable[..., Generator]) -> None:
    """The range is ``[0, n_vocab)``: both ends are accepted, one below 0 is refused."""
    gen = make_gen(n_seq_max=1)
    res = run(gen, prompts=[[0, 5, N_VOCAB - 1]], max_tokens=1)
    assert [t for t, _ in steps(res, "prefill")[0].fed[0]] == [0, 5, N_VOCAB - 1]
    with (
        unchanged(lambda: memory_view(gen.ctx), "memory"),
        raises_code("GEN_TOKEN_RANGE", exc=GeneratorError, seq_id=0, index=1),
    ):
        run(gen, prompts=[[5, -1]])


@pytest.mark.invariant("GEN-020")
def test_more_prompts_than_n_ubatch_is_refused(make_gen: Callable[..., Generator]) -> None:
    gen = make_gen(n_seq_max=4, n_ubatch=2)
    from conformance.decoder.helpers import batch

    assert gen.ctx.decode(batch(prompt(3), seqs=[[0]] * 3)) == 0  # memory to leave alone
    rec = DecodeRecorder(gen.ctx)
    spy = Generator(rec, n_vocab=N_VOCAB, eos=gen.eos)
    with (
        unchanged(lambda: memory_view(gen.ctx), "memory"),
        raises_code("GEN_UBATCH_TOO_SMALL", exc=GeneratorError),
    ):
        run(spy, prompts=[[5], [6], [7]])
    assert rec.batches == []  # refused before any decode call
    # exactly n_ubatch prompts fit: every step is one ubatch
    res = run(spy, prompts=[[5], [6]], max_tokens=2, use_eos=False)
    assert res.reasons == {0: "length", 1: "length"}
    assert [len(res.tokens[s]) for s in range(2)] == [2, 2]


@pytest.mark.invariant("GEN-002", "GEN-003", "GEN-004")
def test_prefill_feeds_prompts_from_empty_sequences(make_gen: Callable[..., Generator]) -> None:
    gen = make_gen(n_seq_max=3, n_batch=8, n_ubatch=8)
    from conformance.decoder.helpers import batch

    assert gen.ctx.decode(batch(prompt(5), seqs=[[1]] * 5)) == 0  # leftovers in seq 1
    prompts = [prompt(6), prompt(9, start=11), prompt(3, start=40)]
    res = run(gen, prompts=prompts, max_tokens=2, record_logits=True)
    pre = steps(res, "prefill")[0]
    assert pre.kv_after == {0: (0, 5), 1: (0, 8), 2: (0, 2)}  # seq 1 was cleared first
    fed = [(s, t, p) for s in sorted(pre.fed) for t, p in pre.fed[s]]
    assert fed == [(s, t, p) for s in range(3) for p, t in enumerate(prompts[s])]
    assert [c["n_tokens"] for c in pre.calls] == [8, 8, 2]  # chunks of at most n_batch
    # the first token of each sequence comes from its last prompt token's row (greedy)
    for s in range(3):
        row = np.asarray(pre.logits[s])
        assert pre.chosen[s] == int(np.argmax(row))
    # the prefill logits equal a fresh context's last-token logits for that prompt alone
    alone = make_gen(n_seq_max=1)
    for s in range(3):
        r = run(alone, prompts=[prompts[s]], max_tokens=1)
        assert_nmse(r.trace[0].logits[0], pre.logits[s], 1e-9, f"prefill row of seq {s}")


@pytest.mark.invariant("GEN-005", "GEN-013")
def test_decode_steps_feed_each_active_sequence_its_previous_choice(
    make_gen: Callable[..., Generator],
) -> None:
    base = make_gen(n_seq_max=3)
    rec = DecodeRecorder(base.ctx)
    gen = Generator(rec, n_vocab=N_VOCAB, eos=base.eos)
    prompts = [prompt(4), prompt(7, start=9), prompt(2, start=50)]
    res = run(gen, prompts=prompts, max_tokens=[5, 3, 6])
    prev = steps(res, "prefill")[0]
    assert prev.kv_after == {s: (0, len(prompts[s]) - 1) for s in range(3)}
    step_batches = rec.batches[len(prev.calls) :]  # the decode calls the steps really made
    assert len(step_batches) == len(steps(res))
    pos = {s: len(prompts[s]) - 1 for s in range(3)}
    for st, b in zip(steps(res), step_batches):
        assert st.active == sorted(st.active)
        assert sorted(st.fed) == st.active
        assert len(st.calls) == 1 and st.calls[0]["n_tokens"] == len(st.active)
        # the submitted batch: active sequences ascending, one token each, all flagged
        n = len(st.active)
        assert b.n_tokens == n and b.n_seq_id.tolist() == [1] * n
        assert b.seq_id[:, 0].tolist() == st.active
        assert b.logits is not None and b.logits.tolist() == [1] * n
        assert b.token.tolist() == [prev.chosen[s] for s in st.active]
        assert b.pos.tolist() == [pos[s] + 1 for s in st.active]
        for s in st.active:
            assert st.fed[s] == [(prev.chosen[s], pos[s] + 1)]
            pos[s] += 1
        # the memory around the step: as the previous record left it, then one token further
        # for each active sequence, for every sequence of the request
        assert st.kv_before == prev.kv_after, f"step {st.step}: kv_before"
        assert st.kv_after == {s: (0, pos[s]) for s in range(3)}, f"step {st.step}: kv_after"
        prev = st
    for s in range(3):
        chosen = [st.chosen[s] for st in res.trace if s in st.chosen]
        assert res.tokens[s] == chosen[: len(res.tokens[s])]


@pytest.mark.invariant("GEN-006")
def test_stop_token_finishes_without_being_returned(make_gen: Callable[..., Generator]) -> None:
    gen = make_gen(n_seq_max=1)
    free = run(gen, prompts=[prompt(5)], max_tokens=6)
    stop_at = free.tokens[0][2]
    res = run(gen, prompts=[prompt(5)], max_tokens=6, stop_tokens=[stop_at])
    k = free.tokens[0].index(stop_at)
    assert res.tokens[0] == free.tokens[0][:k]
    assert res.reasons[0] == "stop"
    last = [st for st in res.trace if 0 in st.chosen][-1]
    assert last.chosen[0] == stop_at and last.finished == {0: "stop"}
    fed = [t for st in res.trace for t, _ in st.fed.get(0, [])]
    assert fed.count(stop_at) == prompt(5).count(stop_at) + free.tokens[0][:k].count(stop_at)


@pytest.mark.invariant("GEN-006")
def test_the_models_eos_stops_unless_use_eos_is_false(make_gen: Callable[..., Generator]) -> None:
    """A generator whose end-of-generation token is one the free run selects: it stops there
    with reason "stop" by default, and runs to its limit with ``use_eos=False``."""
    gen = make_gen(n_seq_max=1)
    free = run(gen, prompts=[prompt(5)], max_tokens=6, use_eos=False)
    eos = free.tokens[0][2]
    k = free.tokens[0].index(eos)
    with_eos = Generator(gen.ctx, n_vocab=N_VOCAB, eos=eos)
    res = run(with_eos, prompts=[prompt(5)], max_tokens=6)
    assert res.tokens[0] == free.tokens[0][:k] and res.reasons[0] == "stop"
    off = run(with_eos, prompts=[prompt(5)], max_tokens=6, use_eos=False)
    assert off.tokens[0] == free.tokens[0] and off.reasons[0] == "length"


@pytest.mark.invariant("GEN-007", "GEN-008", "GEN-011")
def test_per_sequence_limits(make_gen: Callable[..., Generator]) -> None:
    gen = make_gen(n_seq_max=3)
    res = run(
        gen,
        prompts=[prompt(3), prompt(3, start=20), prompt(3, start=70)],
        max_tokens=[4, 1, 0],
        use_eos=False,
    )
    assert [len(res.tokens[s]) for s in range(3)] == [4, 1, 0]
    assert res.reasons == {0: "length", 1: "length", 2: "length"}
    assert 2 not in steps(res, "prefill")[0].fed  # max_tokens 0: neither prefilled nor decoded
    d = steps(res)
    assert len(d) == 3  # max(n_sel) - 1 = 4 - 1
    assert [st.active for st in d] == [[0], [0], [0]]
    # the last returned token is never fed back
    fed0 = [t for st in d for t, _ in st.fed[0]]
    assert fed0 == res.tokens[0][:3]


@pytest.mark.invariant("GEN-009")
def test_context_limit_finishes_a_sequence(make_gen: Callable[..., Generator]) -> None:
    gen = make_gen(n_seq_max=2, n_ctx=512, kv_unified=False)  # 256 cells per sequence
    res = run(gen, prompts=[prompt(250), prompt(3)], max_tokens=20, use_eos=False)
    assert res.reasons[0] == "context"
    fed_pos = [p for st in res.trace for _, p in st.fed.get(0, [])]
    assert max(fed_pos) == 255
    # 1 token from prefill + 6 from the steps feeding 250..255; the 7th would go to 256
    assert len(res.tokens[0]) == 7
    assert res.reasons[1] == "length"


@pytest.mark.invariant("GEN-010")
@pytest.mark.requires("decoder.abort")
def test_failed_decode_ends_generation_with_its_code(make_gen: Callable[..., Generator]) -> None:
    gen = make_gen(n_seq_max=1)

    def abort_at_position_5() -> bool:  # the second decode step feeds position 5
        return bool(gen.ctx.seq_pos_max(0) == 5)

    gen.ctx.set_abort_callback(abort_at_position_5)
    with raises_code("GEN_DECODE_FAILED", exc=GeneratorError) as exc:
        run(gen, prompts=[prompt(4)], max_tokens=8)
    assert (exc.value.field, exc.value.index) == ("decode", 2)  # the second decode step
    assert exc.value.decode_code == 2
    assert exc.value.trace is not None and exc.value.trace[-1].phase == "error"
    assert exc.value.trace[-1].calls[-1]["code"] == 2


@pytest.mark.invariant("GEN-010", "GEN-023")
@pytest.mark.requires("decoder.abort")
def test_failed_prefill_ends_generation_with_an_error_record(
    make_gen: Callable[..., Generator],
) -> None:
    """A prefill call that fails: the error names step 0, and the trace is the one prefill
    record turned into the error record, with the failed call in it."""
    gen = make_gen(n_seq_max=2)
    gen.ctx.set_abort_callback(lambda: True)
    with raises_code("GEN_DECODE_FAILED", field="decode", index=0, exc=GeneratorError) as exc:
        run(gen, prompts=[prompt(4), prompt(3, start=9)], max_tokens=4)
    assert exc.value.decode_code == 2
    trace = exc.value.trace
    assert trace is not None
    assert [(s.phase, s.step, s.seq_no) for s in trace] == [("error", 0, 0)]
    assert trace[0].calls == [{"n_tokens": 7, "code": 2}]
    assert trace[0].fed == {
        0: [(t, p) for p, t in enumerate(prompt(4))],
        1: [(t, p) for p, t in enumerate(prompt(3, start=9))],
    }


@pytest.mark.requires("tokenizer.tokenize")
@pytest.mark.invariant("GEN-012", "GEN-016")
def test_trace_schema_order_and_json_round_trip(make_gen: Callable[..., Generator]) -> None:
    gen = make_gen(n_seq_max=2)
    res = run(gen, prompts=["Hello world", prompt(3)], max_tokens=3)
    phases = [s.phase for s in res.trace]
    assert phases[0] == "tokenize" and phases[1] == "prefill" and phases[-1] == "done"
    assert set(phases[2:-1]) == {"decode"}
    seq = [s.seq_no for s in res.trace]
    assert seq == sorted(seq) and len(set(seq)) == len(seq)
    back = GenerationResult.trace_from_json(res.trace_json())
    assert back == res.trace
    # canonical text: keys sorted at every level, so equal traces serialize identically
    # whatever order their dicts were filled in
    text = res.trace_json()
    assert list(json.loads(text)[0]) == sorted(json.loads(text)[0])
    shuffled = [replace(st, kv_before=dict(reversed(st.kv_before.items()))) for st in res.trace]
    assert shuffled == res.trace and any(len(st.kv_before) > 1 for st in shuffled)
    again = GenerationResult(res.tokens, res.reasons, shuffled, res.prompt_tokens)
    assert again.trace_json() == text
    no_str = run(gen, prompts=[prompt(3)], max_tokens=2)
    assert no_str.trace[0].phase == "prefill"


@pytest.mark.invariant("GEN-012", "GEN-013")
def test_trace_step_numbers(make_gen: Callable[..., Generator]) -> None:
    """``step`` is 0 for prefill and ``t = 1, 2, ...`` for the decode steps (§ Trace)."""
    gen = make_gen(n_seq_max=2)
    res = run(gen, prompts=[prompt(3), prompt(4, start=9)], max_tokens=[4, 2], use_eos=False)
    assert [s.step for s in steps(res, "prefill")] == [0]
    assert [s.step for s in steps(res)] == [1, 2, 3]


@pytest.mark.invariant("GEN-014")
def test_generation_is_deterministic(make_gen: Callable[..., Generator]) -> None:
    req = dict(
        prompts=[prompt(5), prompt(4, start=33)],
        max_tokens=6,
        sampler=[["top_k", {"k": 30}], ["dist", {}]],
        seed=7,
    )
    a = run(make_gen(n_seq_max=2), **req)
    b = run(make_gen(n_seq_max=2), **req)
    assert a.tokens == b.tokens and a.reasons == b.reasons
    assert a.trace_json() == b.trace_json()


@pytest.mark.invariant("GEN-015")
def test_each_prompt_has_its_own_seeded_stream(make_gen: Callable[..., Generator]) -> None:
    chain = [["top_k", {"k": 50}], ["temp", {"t": 1.5}], ["dist", {}]]
    both = run(
        make_gen(n_seq_max=2),
        prompts=[prompt(5), prompt(4, start=33)],
        max_tokens=6,
        sampler=chain,
        seed=11,
    )
    second_alone = run(
        make_gen(n_seq_max=1), prompts=[prompt(4, start=33)], max_tokens=6, sampler=chain, seed=12
    )
    assert both.tokens[1] == second_alone.tokens[0]
    other_seed = run(
        make_gen(n_seq_max=1), prompts=[prompt(4, start=33)], max_tokens=6, sampler=chain, seed=13
    )
    assert other_seed.tokens[0] != second_alone.tokens[0]


@pytest.mark.invariant("GEN-015")
def test_the_seed_of_a_later_prompt_wraps_at_2_to_the_32(
    make_gen: Callable[..., Generator],
) -> None:
    """Seed 2^32 - 1: the second prompt's chain is seeded (2^32 - 1 + 1) mod 2^32 = 0."""
    chain = [["top_k", {"k": 50}], ["temp", {"t": 1.5}], ["dist", {}]]
    second = prompt(4, start=33)
    both = run(
        make_gen(n_seq_max=2),
        prompts=[prompt(5), second],
        max_tokens=6,
        sampler=chain,
        seed=2**32 - 1,
    )
    zero = run(make_gen(n_seq_max=1), prompts=[second], max_tokens=6, sampler=chain, seed=0)
    assert both.tokens[1] == zero.tokens[0]


@pytest.mark.invariant("GEN-024")
def test_a_request_without_a_seed_uses_seed_zero(make_gen: Callable[..., Generator]) -> None:
    chain = [["top_k", {"k": 50}], ["temp", {"t": 1.5}], ["dist", {}]]
    prompts = [prompt(5), prompt(4, start=33)]
    unseeded = run(make_gen(n_seq_max=2), prompts=prompts, max_tokens=6, sampler=chain)
    zero = run(make_gen(n_seq_max=2), prompts=prompts, max_tokens=6, sampler=chain, seed=0)
    one = run(make_gen(n_seq_max=2), prompts=prompts, max_tokens=6, sampler=chain, seed=1)
    assert unseeded.tokens == zero.tokens
    assert one.tokens != zero.tokens  # the seed shows in these tokens


@pytest.mark.invariant("GEN-025")
def test_a_request_without_max_tokens_returns_sixteen_tokens(
    make_gen: Callable[..., Generator],
) -> None:
    """Without an end-of-generation stop, every sequence runs to the default limit of 16."""
    prompts = [prompt(5), prompt(3, start=33)]
    unlimited = run(make_gen(n_seq_max=2), prompts=prompts, use_eos=False)
    assert unlimited.reasons == {0: "length", 1: "length"}
    assert [len(unlimited.tokens[s]) for s in range(2)] == [16, 16]
    sixteen = run(make_gen(n_seq_max=2), prompts=prompts, max_tokens=16, use_eos=False)
    assert len(steps(unlimited)) == 15  # the 16th token is not fed back (GEN-007)
    assert (unlimited.tokens, unlimited.reasons) == (sixteen.tokens, sixteen.reasons)


@pytest.mark.invariant("GEN-017")
@pytest.mark.requires("tokenizer.tokenize")
def test_string_prompts_are_tokenized_once_with_bos(
    make_gen: Callable[..., Generator], target: Any, load: Any
) -> None:
    gen = make_gen(n_seq_max=1)
    res = run(gen, prompts=["The quick brown fox"], max_tokens=1)
    expected = target.tokenize(load("gqa"), "The quick brown fox", True, False)
    assert res.prompt_tokens[0] == expected
    assert [t for t, _ in steps(res, "prefill")[0].fed[0]] == expected
    assert [s.phase for s in res.trace].count("tokenize") == 1


@pytest.mark.invariant("GEN-018")
def test_generator_uses_only_the_public_context_api(make_gen: Callable[..., Generator]) -> None:
    gen = make_gen(n_seq_max=2)
    used: list[str] = []
    allowed = {
        "decode",
        "get_logits_ith",
        "seq_rm",
        "seq_pos_min",
        "seq_pos_max",
        "n_seq_max",
        "n_ubatch",
        "n_batch",
        "n_ctx_seq",
    }

    class Spy:
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def __getattr__(self, name: str) -> Any:
            used.append(name)
            return getattr(self._inner, name)

    spy_gen = Generator(Spy(gen.ctx), n_vocab=N_VOCAB, eos=gen.eos)
    res = run(spy_gen, prompts=[prompt(3), prompt(3, start=9)], max_tokens=3)
    assert set(used) <= allowed
    n_decode_calls = sum(len(st.calls) for st in res.trace)
    assert used.count("decode") == n_decode_calls


@pytest.mark.requires("tokenizer.tokenize")
@pytest.mark.invariant("GEN-022")
def test_seq_no_counts_from_zero_in_every_trace(make_gen: Callable[..., Generator]) -> None:
    """A reused generator numbers each new trace ``0, 1, 2, ...`` again, with no gap."""
    gen = make_gen(n_seq_max=2)
    requests: list[dict[str, Any]] = [
        {"prompts": ["Hello world", prompt(3)], "max_tokens": [3, 2], "use_eos": False},
        {"prompts": [prompt(4)], "max_tokens": 4, "use_eos": False},
        {"prompts": [prompt(2)], "max_tokens": 1},
    ]
    for k, req in enumerate(requests):
        res = run(gen, **req)
        seq = [s.seq_no for s in res.trace]
        assert seq == list(range(len(res.trace))), f"request {k}: seq_no {seq}"


@pytest.mark.invariant("GEN-022", "GEN-023")
@pytest.mark.requires("decoder.abort")
def test_numbering_after_a_failed_request(make_gen: Callable[..., Generator]) -> None:
    """The error record carries the failed step's number; the next trace starts at 0 again."""
    gen = make_gen(n_seq_max=1)
    gen.ctx.set_abort_callback(lambda: bool(gen.ctx.seq_pos_max(0) == 5))  # decode step 2
    with raises_code("GEN_DECODE_FAILED", exc=GeneratorError) as exc:
        run(gen, prompts=[prompt(4)], max_tokens=8, use_eos=False)
    trace = exc.value.trace
    assert trace is not None
    assert [(s.phase, s.step, s.seq_no) for s in trace] == [
        ("prefill", 0, 0),
        ("decode", 1, 1),
        ("error", 2, 2),
    ]
    # one decode step (position 4): the callback, still set, does not fire
    res = run(gen, prompts=[prompt(4)], max_tokens=2, use_eos=False)
    assert [(s.phase, s.step, s.seq_no) for s in res.trace] == [
        ("prefill", 0, 0),
        ("decode", 1, 1),
        ("done", 2, 2),
    ]


@pytest.mark.requires("tokenizer.tokenize")
@pytest.mark.invariant("GEN-023")
@pytest.mark.parametrize(("limits", "n_decode"), [([4, 2], 3), ([1, 1], 0), ([2, 6], 5)])
def test_done_follows_the_last_decode_step(
    make_gen: Callable[..., Generator], limits: list[int], n_decode: int
) -> None:
    """tokenize and prefill are step 0, decode steps 1..n, and ``done`` is step n + 1."""
    gen = make_gen(n_seq_max=2)
    res = run(gen, prompts=["Hello world", prompt(4, start=9)], max_tokens=limits, use_eos=False)
    expected = [("tokenize", 0), ("prefill", 0)]
    expected += [("decode", t) for t in range(1, n_decode + 1)] + [("done", n_decode + 1)]
    assert [(s.phase, s.step) for s in res.trace] == expected
