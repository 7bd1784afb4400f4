"""Decode-step rules seen through the decode calls alone (black-box): what a generation submits
to the context and what the context's memory shows between the calls (``seq_pos_*``), with no
decode trace. The white-box tests of the same rows (test_decode_phase.py) read the trace.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from conformance.decoder.helpers import prompt
from reference_impl.generator import GenerationRequest, Generator

pytestmark = pytest.mark.requires("decoder.logits", "decoder.memory_ops")

PROMPTS = [prompt(5), prompt(8, start=21), prompt(3, start=60), prompt(6, start=99)]
LIMITS = [6, 3, 8, 5]


class WatchingRecorder:
    """A context that records, for every decode call, the batch's (sequence, token, position)
    entries and each sequence's ``(seq_pos_min, seq_pos_max)`` just before the call."""

    def __init__(self, inner: Any, n_seq: int) -> None:
        self._inner = inner
        self._n_seq = n_seq  # sequences 0 .. n_seq - 1 are watched
        self.calls: list[tuple[list[tuple[int, int, int]], dict[int, tuple[int, int]]]] = []

    def decode(self, b: Any) -> int:
        entries = [(int(b.seq_id[i, 0]), int(b.token[i]), int(b.pos[i])) for i in range(b.n_tokens)]
        before = {
            s: (self._inner.seq_pos_min(s), self._inner.seq_pos_max(s)) for s in range(self._n_seq)
        }
        self.calls.append((entries, before))
        return int(self._inner.decode(b))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.mark.invariant("PHASE-003", "PHASE-021")
def test_each_step_is_one_call_that_appends_one_entry_per_sequence(
    make_gen: Callable[..., Generator],
) -> None:
    """One decode call per step carrying exactly one entry per active sequence, each at the
    position right after what the memory holds for it; no entry is ever removed (every
    sequence keeps ``seq_pos_min`` 0) nor fed twice, so positions grow by one per step."""
    base = make_gen(n_seq_max=4)
    rec = WatchingRecorder(base.ctx, 4)
    res = Generator(rec, n_vocab=base.n_vocab, eos=base.eos).generate(
        GenerationRequest(prompts=PROMPTS, max_tokens=LIMITS, use_eos=False)
    )
    steps = [st for st in res.trace if st.phase == "decode"]
    n_prefill = len(rec.calls) - len(steps)
    assert n_prefill >= 1 and steps, "a prefill, then decode steps"
    fed: dict[int, list[int]] = {s: [] for s in range(4)}
    for entries, _ in rec.calls[:n_prefill]:
        for s, _, p in entries:
            fed[s].append(p)
    for k, (st, (entries, before)) in enumerate(zip(steps, rec.calls[n_prefill:], strict=True)):
        assert sorted(s for s, _, _ in entries) == sorted(st.active), f"step {k}: one per seq"
        for s, tok, p in entries:
            assert before[s] == (0, p - 1), f"step {k} seq {s}: memory {before[s]} before pos {p}"
            assert tok == st.fed[s][0][0]
            fed[s].append(p)
    for s in range(4):
        assert fed[s] == list(range(len(fed[s]))), f"seq {s}: positions fed {fed[s]}"
        # every generated token but the last was fed back; the memory kept all of it
        assert len(fed[s]) == len(PROMPTS[s]) + len(res.tokens[s]) - 1
        assert (rec.seq_pos_min(s), rec.seq_pos_max(s)) == (0, len(fed[s]) - 1)
