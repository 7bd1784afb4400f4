"""Stateful property test: random operation sequences against the brute-force model.

Each step is one recorded operation (``conformance.strategies.kv``: Decode, SeqRm, SeqCp, ...),
run on the target's cache and on :class:`ModelCache`; after every step the full cache state
(positions, sequences, shifts, extensions, heads, used counts, shift flags, scheduled copies) and
``seq_pos_min/max`` of every sequence must agree. A Decode step also checks that ``prepare`` is
pure, that the slots equal the model's, that ``get_n_kv`` and (mask variant) the KQ mask match a
direct computation, and, when asked, that restoring the undo records brings back the state.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from conformance import hypothesis_profiles
from conformance.assertions import assert_unchanged
from conformance.kv.helpers import cache_state, expect_code, unchanged_cache
from conformance.strategies.kv import (
    Clear,
    Decode,
    ModelCache,
    ModelConfig,
    Op,
    SeqAdd,
    SeqCp,
    SeqDiv,
    SeqKeep,
    SeqRm,
    Update,
    state_tuple,
)

FAMILIES = {
    # one stream, several sequences sharing cells
    "unified": st.builds(
        ModelConfig,
        kv_size=st.sampled_from([8, 12, 16]),
        n_seq_max=st.integers(1, 3),
        unified=st.just(True),
    ),
    # one stream with a sliding window (cells reused once out of the window)
    "swa": st.builds(
        ModelConfig,
        kv_size=st.sampled_from([4, 6, 8]),
        n_seq_max=st.integers(1, 2),
        unified=st.just(True),
        n_swa=st.integers(1, 5),
        swa_type=st.sampled_from([1, 2, 3]),
    ),
    # one stream per sequence
    "streams": st.builds(
        ModelConfig,
        kv_size=st.sampled_from([6, 8]),
        n_seq_max=st.integers(2, 3),
        unified=st.just(False),
        n_swa=st.sampled_from([0, 3]),
        swa_type=st.sampled_from([0, 1]),
    ).filter(lambda c: (c.n_swa == 0) == (c.swa_type == 0)),
}


class KVMachine(RuleBasedStateMachine):
    target: Any = None
    family = "unified"
    check_mask = False

    def __init__(self) -> None:
        super().__init__()
        self.cache: Any = None
        self.model: ModelCache | None = None
        self.trace: list[dict[str, object]] = []

    # ------------------------------------------------------------------ setup

    @initialize(data=st.data())
    def setup(self, data: st.DataObject) -> None:
        cfg = data.draw(FAMILIES[self.family], label="config")
        self.cfg = cfg
        self.cache = self.target.new_kv_cache(**cfg.as_kwargs())
        self.model = ModelCache(cfg)

    # ------------------------------------------------------------------ helpers

    @property
    def m(self) -> ModelCache:
        assert self.model is not None
        return self.model

    def seqs(self) -> list[int]:
        """Sequence ids worth exercising: the configured ones (+1 on a unified cache)."""
        n = self.cfg.n_seq_max + (1 if self.cfg.n_stream == 1 else 0)
        return list(range(n))

    def check_same(self, what: str) -> None:
        got = state_tuple(self.cache.state())
        want = self.m.state()
        assert got == want, f"{what}: cache state differs from the model\n{self._diff(got, want)}"

    def _diff(self, got: Any, want: Any) -> str:
        names = ("pos", "seqs", "shift", "ext", "head", "used", "has_shift")
        lines = [f"ops: {self.trace[-6:]}"]
        for st_i, (g, w) in enumerate(zip(got[0], want[0])):
            for name, a, b in zip(names, g, w):
                if a != b:
                    lines.append(f"stream {st_i} {name}: got {a} want {b}")
        if got[1] != want[1]:
            lines.append(f"pending copies: got {got[1]} want {want[1]}")
        return "\n".join(lines)

    def record(self, op: Op) -> None:
        self.trace.append(op.as_dict())

    def expect_error(self, code: str, fn: Any, *args: Any) -> None:
        expect_code(self.cache, code, fn, *args)

    def pos_bound(self) -> int:
        return max([self.m.seq_pos_max(s) for s in self.seqs()] + [0]) + 3

    # ------------------------------------------------------------------ decode

    def draw_decode(self, data: st.DataObject) -> Decode:
        next_pos = {s: self.m.seq_pos_max(s) + 1 for s in self.seqs()}
        n_ub = data.draw(st.integers(1, 3), label="n_ubatches")
        tokens, groups = [], []
        for _ in range(n_ub):
            if self.cfg.n_stream > 1:
                k = data.draw(st.integers(1, self.cfg.n_stream), label="n_groups")
                group_seqs = sorted(
                    data.draw(
                        st.sets(st.sampled_from(range(self.cfg.n_stream)), min_size=k, max_size=k)
                    )
                )
                per = data.draw(st.integers(1, 3), label="tokens_per_group")
                toks: list[tuple[int, tuple[int, ...]]] = []
                for s in group_seqs:
                    for _ in range(per):
                        toks.append((next_pos[s], (s,)))
                        next_pos[s] += 1
                tokens.append(tuple(toks))
                groups.append(len(group_seqs))
                continue
            n = data.draw(st.integers(1, 5), label="n_tokens")
            toks = []
            for _ in range(n):
                seqs = tuple(
                    sorted(data.draw(st.sets(st.sampled_from(self.seqs()), min_size=1, max_size=2)))
                )
                if data.draw(st.integers(0, 9), label="jump") == 0:
                    p = data.draw(st.integers(0, 30), label="pos")
                else:
                    p = max(next_pos[s] for s in seqs)
                for s in seqs:
                    next_pos[s] = max(next_pos[s], p + 1)
                toks.append((p, seqs))
            tokens.append(tuple(toks))
            groups.append(0)
        rollback = data.draw(st.booleans(), label="rollback")
        return Decode(tuple(tokens), tuple(groups), rollback)

    @rule(data=st.data())
    def decode(self, data: st.DataObject) -> None:
        op = self.draw_decode(data)
        self.record(op)
        ubatches = op.ubatches()
        sim = self.m.copy()
        want_slots: list[Any] | None = []
        for toks, g in zip(op.tokens, op.groups):
            slot = sim.find_slot(toks, g or 1)
            if slot is None:
                want_slots = None
                break
            assert want_slots is not None
            want_slots.append(slot)
            sim.apply(slot, toks)

        with unchanged_cache(self.cache, "the cache after prepare") as before:
            slots = self.cache.prepare(ubatches)
        got = (
            None
            if slots is None
            else [[(s, list(ix)) for s, ix in zip(sl.strm, sl.idxs)] for sl in slots]
        )
        want = (
            None if want_slots is None else [[(s, list(ix)) for s, ix in sl] for sl in want_slots]
        )
        assert got == want, f"prepare slots {got} != model {want}; ops {self.trace[-6:]}"
        if slots is None:
            return

        saved = self.m.copy()
        undos = []
        for ub, slot, toks, g in zip(ubatches, slots, op.tokens, op.groups):
            undos.append(self.cache.apply_ubatch(slot, ub))
            self.m.apply([(s, list(ix)) for s, ix in zip(slot.strm, slot.idxs)], toks)
            self.check_same("apply_ubatch")
            n_kv = self.cache.get_n_kv(slot)
            assert n_kv == self.m.n_kv(slot.strm), f"n_kv {n_kv} != {self.m.n_kv(slot.strm)}"
            if self.check_mask:
                self.check_kq_mask(ub, toks, g, n_kv)
        if op.rollback:
            for undo in reversed(undos):
                self.cache.restore(undo)
            self.model = saved
            assert_unchanged(before, cache_state(self.cache), "the cache after restore")

    def check_kq_mask(self, ub: Any, toks: Any, groups: int, n_kv: int) -> None:
        for causal in (True, False):
            got = self.target.kv_mask(self.cache, ub, n_kv, causal_attn=causal)
            want = self.m.mask(toks, groups or 1, n_kv, causal=causal)
            assert got.tolist() == want, f"KQ mask (causal={causal}) differs; ops {self.trace[-4:]}"

    # ------------------------------------------------------------------ sequence operations

    def draw_range(self, data: st.DataObject) -> tuple[int, int]:
        hi = self.pos_bound()
        return (
            data.draw(st.integers(-1, hi), label="p0"),
            data.draw(st.integers(-1, hi + 2), label="p1"),
        )

    def invalid_seq(self, data: st.DataObject) -> int:
        return data.draw(st.sampled_from([-2, self.cfg.n_seq_ids(), 1000]), label="bad_seq")

    @rule(data=st.data())
    def seq_rm(self, data: st.DataObject) -> None:
        if data.draw(st.integers(0, 9), label="bad") == 0:
            s = self.invalid_seq(data)
            self.expect_error("KV_SEQ_ID_RANGE", self.cache.seq_rm, s, -1, -1)
            return
        s = data.draw(st.sampled_from([-1, *self.seqs()]), label="seq")
        p0, p1 = self.draw_range(data)
        self.record(SeqRm(s, p0, p1))
        assert self.cache.seq_rm(s, p0, p1) is True
        self.m.seq_rm(s, p0, p1)
        self.check_same("seq_rm")

    @rule(data=st.data())
    def seq_cp(self, data: st.DataObject) -> None:
        src = data.draw(st.sampled_from(self.seqs()), label="src")
        dst = data.draw(st.sampled_from(self.seqs()), label="dst")
        full = self.cfg.n_stream > 1 and data.draw(st.booleans(), label="full")
        p0, p1 = (-1, -1) if full else self.draw_range(data)
        self.record(SeqCp(src, dst, p0, p1))
        try:
            self.m.seq_cp(src, dst, p0, p1)
        except ValueError:
            self.expect_error("KV_CROSS_STREAM_PARTIAL", self.cache.seq_cp, src, dst, p0, p1)
            return
        self.cache.seq_cp(src, dst, p0, p1)
        self.check_same("seq_cp")

    @rule(data=st.data())
    def seq_keep(self, data: st.DataObject) -> None:
        s = data.draw(st.sampled_from(self.seqs()), label="seq")
        self.record(SeqKeep(s))
        self.cache.seq_keep(s)
        self.m.seq_keep(s)
        self.check_same("seq_keep")

    @rule(data=st.data())
    def seq_add(self, data: st.DataObject) -> None:
        s = data.draw(st.sampled_from(self.seqs()), label="seq")
        p0, p1 = self.draw_range(data)
        delta = data.draw(st.integers(-6, 6), label="delta")
        self.record(SeqAdd(s, p0, p1, delta))
        self.cache.seq_add(s, p0, p1, delta)
        self.m.seq_add(s, p0, p1, delta)
        self.check_same("seq_add")

    @rule(data=st.data())
    def seq_div(self, data: st.DataObject) -> None:
        s = data.draw(st.sampled_from(self.seqs()), label="seq")
        p0, p1 = self.draw_range(data)
        d = data.draw(st.integers(-1, 4), label="d")
        if d <= 0:
            self.expect_error("KV_DIVISOR", self.cache.seq_div, s, p0, p1, d)
            return
        self.record(SeqDiv(s, p0, p1, d))
        self.cache.seq_div(s, p0, p1, d)
        self.m.seq_div(s, p0, p1, d)
        self.check_same("seq_div")

    @rule()
    def update(self) -> None:
        self.record(Update())
        res = self.cache.update()
        assert tuple(res.copied) == tuple(self.m.pending)
        assert res.shifted == any(self.m.has_shift)
        self.m.update()
        self.check_same("update")

    @rule()
    def clear(self) -> None:
        self.record(Clear())
        self.cache.clear()
        self.m.clear()
        self.check_same("clear")

    @rule(data=st.data())
    def bad_seq_ids(self, data: st.DataObject) -> None:
        s = self.invalid_seq(data)
        op = data.draw(st.sampled_from(["keep", "add", "div", "cp", "pos_min", "pos_max"]))
        calls = {
            "keep": (self.cache.seq_keep, s),
            "add": (self.cache.seq_add, s, 0, -1, 1),
            "div": (self.cache.seq_div, s, 0, -1, 2),
            "cp": (self.cache.seq_cp, 0, s, -1, -1),
            "pos_min": (self.cache.seq_pos_min, s),
            "pos_max": (self.cache.seq_pos_max, s),
        }
        fn, *args = calls[op]
        self.expect_error("KV_SEQ_ID_RANGE", fn, *args)

    # ------------------------------------------------------------------ invariants

    @invariant()
    def positions_match_cells(self) -> None:
        if self.model is None:
            return
        for s in self.seqs():
            got = (self.cache.seq_pos_min(s), self.cache.seq_pos_max(s))
            want = (self.m.seq_pos_min(s), self.m.seq_pos_max(s))
            assert got == want, f"seq {s}: pos min/max {got} != recomputed {want}"

    @invariant()
    def streams_are_isolated(self) -> None:
        if self.model is None:
            return
        state = self.cache.state()
        for t, stream in enumerate(state.streams):
            assert stream.used == sum(p != -1 for p in stream.pos)
            for seqs in stream.seqs:
                for s in seqs:
                    assert self.cfg.stream_of(s) == t, f"sequence {s} found in stream {t}"


CACHE_INVARIANTS = (
    "KV-001",
    "KV-002",
    "KV-003",
    "KV-004",
    "KV-005",
    "KV-006",
    "KV-008",
    "KV-009",
    "KV-010",
    "KV-011",
    "KV-012",
    "KV-013",
    "KV-014",
    "KV-015",
    "KV-016",
    "KV-017",
    "KV-018",
    "KV-019",
    "KV-021",
    "KV-025",
    "KV-026",
)


def _run(target: Any, family: str, check_mask: bool, steps: int) -> None:
    machine = type(
        f"KVMachine_{family}",
        (KVMachine,),
        {"target": target, "family": family, "check_mask": check_mask},
    )
    phases = settings().phases
    if hypothesis_profiles.selected_profile() == "ci":
        # Bounded CI time: report the failing run as found (its last operations are in the
        # message) instead of shrinking it.
        phases = tuple(p for p in phases if p != Phase.shrink)
    run_state_machine_as_test(
        machine, settings=settings(settings(), stateful_step_count=steps, phases=phases)
    )


@pytest.mark.invariant(*CACHE_INVARIANTS)
@pytest.mark.requires("kv.cache")
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_cache_against_model(target: Any, family: str) -> None:
    _run(target, family, check_mask=False, steps=50 if family == "swa" else 30)


@pytest.mark.invariant("KV-023", "KV-024", "KV-011")
@pytest.mark.requires("kv.cache", "kv.mask")
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_masks_against_model(target: Any, family: str) -> None:
    _run(target, family, check_mask=True, steps=20)
