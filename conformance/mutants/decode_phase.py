"""Decode-phase mutants: one deliberate defect each (see tests/meta)."""

from __future__ import annotations

from typing import Any

import numpy as np

from conformance.mutants import Mutant


def _kv_written_twice(target: Any) -> Any:
    """Every ubatch is placed in the memory twice (a second copy of each entry)."""
    from reference_impl.memory.kv import KVBatchContext

    original = KVBatchContext.apply

    def apply(self: KVBatchContext) -> bool:
        ok = original(self)
        ub = self.get_ubatch()
        extra = self.cache.find_slot(ub)
        if extra is not None:
            self.cache.apply_ubatch(extra, ub)
        return ok

    KVBatchContext.apply = apply  # type: ignore[method-assign]
    return target


def _evicts_unlisted_sequences(target: Any) -> Any:
    """Placing a step-like ubatch (one token per sequence) drops the newest entry of every
    other sequence in the cache."""
    from reference_impl.memory.kv import KVBatchContext

    original = KVBatchContext.apply

    def apply(self: KVBatchContext) -> bool:
        ok = original(self)
        ub = self.get_ubatch()
        listed = {int(s) for s in ub.seq_id_unq}
        if ub.n_tokens != len(listed):
            return ok
        cache = self.cache
        for s in range(cache.n_seq_max):
            last = cache.seq_pos_max(s)
            if s not in listed and last >= 0:
                cache.seq_rm(s, last, -1)
        return ok

    KVBatchContext.apply = apply  # type: ignore[method-assign]
    return target


def _batched_attends_everything(target: Any) -> Any:
    """Attention ignores sequence membership: a batched sequence sees its neighbours."""
    from reference_impl.decoder import ubatch_executor

    original = ubatch_executor.stream_mask

    def stream_mask(cache: Any, ub: Any, n_kv: int, causal: bool) -> Any:
        mask, groups = original(cache, ub, n_kv, causal)
        cells = cache.cells[0]
        occupied = np.flatnonzero(cells.pos[:n_kv] >= 0)
        if groups == 1:
            mask = mask.clone()
            pos = np.asarray(ub.pos[: ub.n_tokens])
            for i in range(ub.n_tokens):
                ok = [c for c in occupied if cells.pos[c] <= pos[i]]
                mask[i, [int(c) for c in ok]] = 0.0
        return mask, groups

    ubatch_executor.stream_mask = stream_mask
    return target


def _finished_sequence_fed_again(target: Any) -> Any:
    """A sequence that left the active set still gets its last input fed once more, at its next
    position, in the following step (not flagged as an output, so no row is read for it)."""
    from conformance.mutants.generator import _CtxProxy, _with_proxy
    from reference_impl.batch.types import Batch

    class FeedsFinished(_CtxProxy):
        def __init__(self, ctx: Any) -> None:
            super().__init__(ctx)
            self._fed: dict[int, tuple[int, int]] = {}  # seq -> (token, pos) last fed
            self._stepped: set[int] = set()  # the sequences of the previous decode step

        def decode(self, b: Batch) -> int:
            assert b.token is not None and b.pos is not None and b.seq_id is not None
            seqs = [int(s) for s in b.seq_id[:, 0]]
            toks = [int(t) for t in b.token]
            pos = [int(p) for p in b.pos]
            step_like = b.logits is not None and bool(b.logits.all())
            gone = sorted(self._stepped - set(seqs)) if step_like else []
            self._stepped = set(seqs) if step_like else set()
            if gone:  # the defect: finished sequences ride along once more
                seqs += gone
                toks += [self._fed[s][0] for s in gone]
                pos += [self._fed[s][1] + 1 for s in gone]
                b = Batch.from_lists(
                    toks,
                    pos=pos,
                    seq_ids=[[s] for s in seqs],
                    logits=[1] * (len(seqs) - len(gone)) + [0] * len(gone),
                )
            for s, t, p in zip(seqs, toks, pos):
                self._fed[s] = (t, p)
            return int(self._ctx.decode(b))

    _with_proxy(FeedsFinished)
    return target


def _step_feeds_stale_token(target: Any) -> Any:
    """Each decode step feeds every sequence the token it was fed in the previous decode call
    (the last prompt token for the first step) instead of the token just selected."""
    from conformance.mutants.generator import _CtxProxy, _with_proxy
    from reference_impl.batch.types import Batch

    class Stale(_CtxProxy):
        def __init__(self, ctx: Any) -> None:
            super().__init__(ctx)
            self._fed: dict[int, int] = {}

        def decode(self, b: Batch) -> int:
            assert b.token is not None and b.seq_id is not None
            seqs = [int(s) for s in b.seq_id[:, 0]]
            fresh = [int(t) for t in b.token]
            if b.logits is not None and bool(b.logits.all()) and self._fed:
                stale = [self._fed.get(s, t) for s, t in zip(seqs, fresh)]
                b = Batch.from_lists(
                    stale, pos=b.pos, seq_ids=[[s] for s in seqs], logits=[1] * len(stale)
                )
            for s, t in zip(seqs, fresh):
                self._fed[s] = t
            return int(self._ctx.decode(b))

    _with_proxy(Stale)
    return target


def _step_hides_own_entry(from_layer: int) -> Any:
    """In a decode-step ubatch (several sequences, one token each), layers ``>= from_layer``
    attend each token's committed entries but not the entry the step itself just wrote."""

    def apply(target: Any) -> Any:
        from reference_impl.decoder import ubatch_executor
        from reference_impl.model.llama import LlamaForward

        original_mask = ubatch_executor.stream_mask
        original_forward = LlamaForward.forward_ubatch
        hidden: dict[str, Any] = {}

        def stream_mask(cache: Any, ub: Any, n_kv: int, causal: bool) -> Any:
            mask, groups = original_mask(cache, ub, n_kv, causal)
            seqs = [int(x) for x in ub.seq_id[: ub.n_tokens, 0]]
            hidden.clear()
            if groups == 1 and ub.n_tokens > 1 and len(set(seqs)) == ub.n_tokens:
                cells = cache.cells[0]
                own = mask.clone()
                for i, s in enumerate(seqs):
                    mine = [c for c in cells.seq_cells(s) if c < n_kv]
                    at = [c for c in mine if int(cells.pos[c]) == int(ub.pos[i])]
                    own[i, at] = float("-inf")
                hidden["mask"] = own
            return mask, groups

        def forward_ubatch(self: LlamaForward, **kw: Any) -> Any:
            own = hidden.pop("mask", None)
            if own is None:
                return original_forward(self, **kw)
            attn = kw.get("attention") or self.attention
            layer = [0]

            def attention(q: Any, k: Any, v: Any, mask: Any, scale: float) -> Any:
                il = layer[0]
                layer[0] += 1
                if il >= from_layer:  # the caller reads only the attended columns
                    mask = own[:, : mask.shape[-1]].reshape(mask.shape).to(mask.dtype)
                return attn(q, k, v, mask, scale)

            return original_forward(self, **{**kw, "attention": attention})

        ubatch_executor.stream_mask = stream_mask
        LlamaForward.forward_ubatch = forward_ubatch  # type: ignore[method-assign]
        return target

    return apply


def _pos_max_lags_one_call(target: Any) -> Any:
    """The memory view's ``seq_pos_max`` is a snapshot refreshed when a decode call starts, so
    after a call it still reports the positions from before that call."""
    from reference_impl.decoder.context import Context

    original_decode = Context.decode
    original_pos_max = Context.seq_pos_max
    snapshots: dict[int, dict[int, int]] = {}

    def decode(self: Context, batch: Any) -> int:
        snapshots[id(self)] = {
            s: original_pos_max(self, s) for s in range(self.n_seq_max())
        }  # the defect: refreshed before the call, not at its commit
        return original_decode(self, batch)

    def seq_pos_max(self: Context, seq_id: int) -> int:
        snap = snapshots.get(id(self))
        if snap is not None and seq_id in snap:
            return snap[seq_id]
        return original_pos_max(self, seq_id)

    Context.decode = decode  # type: ignore[method-assign]
    Context.seq_pos_max = seq_pos_max  # type: ignore[method-assign]
    return target


def _last_prompt_joins_late(target: Any) -> Any:
    """The highest-numbered live prompt is held back after prefill and joins at step 2."""
    from reference_impl.generator import Generator

    original = Generator._advance
    held: dict[int, tuple[int, int]] = {}  # generator -> (seq, its prefill selection)

    def _advance(self: Generator, active: Any, nxt: Any, *rest: Any) -> list[int]:
        st = rest[-1]
        still = original(self, active, nxt, *rest)
        if st.phase == "prefill":
            held.pop(id(self), None)
            if len(still) > 1:
                held[id(self)] = (still[-1], nxt[still[-1]])
                return still[:-1]
            return still
        late = held.pop(id(self), None)
        if late is not None:  # the defect: a request joins after the first decode step
            nxt[late[0]] = late[1]
            return sorted([*still, late[0]])
        return still

    Generator._advance = _advance  # type: ignore[method-assign,assignment]
    return target


def _finished_sequence_lingers(target: Any) -> Any:
    """A sequence that meets its stop condition stays in the batch for one more step."""
    from reference_impl.generator import Generator

    original = Generator._advance
    linger: dict[int, set[int]] = {}

    def _advance(self: Generator, active: Any, nxt: Any, *rest: Any) -> list[int]:
        st = rest[-1]
        if st.phase == "prefill":
            linger[id(self)] = set()
        kept = linger.get(id(self), set())
        real = [s for s in active if s not in kept]
        still = original(self, real, nxt, *rest)
        done = [s for s in real if s not in still]
        linger[id(self)] = set(done)
        return sorted([*still, *done])  # the defect: finished sequences leave a step late

    Generator._advance = _advance  # type: ignore[method-assign,assignment]
    return target


def _speculative_redo(target: Any) -> Any:
    """Every decode step first removes each sequence's previous entry and feeds it again with
    the new token (a speculative re-verification), so a position is fed twice."""
    from conformance.mutants.generator import _CtxProxy, _with_proxy
    from reference_impl.batch.types import Batch

    class Redo(_CtxProxy):
        def __init__(self, ctx: Any) -> None:
            super().__init__(ctx)
            self._fed: dict[int, tuple[int, int]] = {}
            self._shift = 0

        def decode(self, b: Batch) -> int:
            assert b.token is not None and b.pos is not None and b.seq_id is not None
            seqs = [int(s) for s in b.seq_id[:, 0]]
            toks = [int(t) for t in b.token]
            pos = [int(p) for p in b.pos]
            flags = [int(f) for f in b.logits] if b.logits is not None else [0] * len(toks)
            redo = [s for s in seqs if s in self._fed] if all(flags) else []
            for s in redo:
                self._ctx.seq_rm(s, self._fed[s][1], -1)
            self._shift = len(redo)
            if redo:
                b = Batch.from_lists(
                    [self._fed[s][0] for s in redo] + toks,
                    pos=[self._fed[s][1] for s in redo] + pos,
                    seq_ids=[[s] for s in redo] + [[s] for s in seqs],
                    logits=[0] * len(redo) + flags,
                )
            for s, t, p in zip(seqs, toks, pos):
                self._fed[s] = (t, p)
            return int(self._ctx.decode(b))

        def get_logits_ith(self, i: int) -> Any:
            return self._ctx.get_logits_ith(i + self._shift if i >= 0 else i)

    _with_proxy(Redo)
    return target


def _step_split_in_two_calls(target: Any) -> Any:
    """A decode step of several sequences is submitted as two decode calls (its first token
    alone, then the rest), each a complete batch whose outputs the step then reads."""
    from conformance.mutants.generator import _CtxProxy, _with_proxy
    from reference_impl.batch.types import Batch

    class TwoCalls(_CtxProxy):
        def __init__(self, ctx: Any) -> None:
            super().__init__(ctx)
            self._split = False
            self._first_row: Any = None

        def decode(self, b: Batch) -> int:
            self._split = False
            assert b.token is not None and b.pos is not None and b.seq_id is not None
            n = b.n_tokens
            flags = [int(f) for f in b.logits] if b.logits is not None else [0] * n
            seqs = [int(s) for s in b.seq_id[:, 0]]
            if n < 2 or not all(flags) or len(set(seqs)) != n:
                return int(self._ctx.decode(b))
            toks, pos = [int(t) for t in b.token], [int(p) for p in b.pos]
            first = Batch.from_lists(toks[:1], pos=pos[:1], seq_ids=[seqs[:1]], logits=[1])
            code = int(self._ctx.decode(first))
            self._first_row = np.asarray(self._ctx.get_logits_ith(0)).copy()
            if code != 0:
                return code
            rest = Batch.from_lists(
                toks[1:], pos=pos[1:], seq_ids=[[s] for s in seqs[1:]], logits=[1] * (n - 1)
            )
            self._split = True
            return int(self._ctx.decode(rest))

        def get_logits_ith(self, i: int) -> Any:
            if self._split:
                return self._first_row if i == 0 else self._ctx.get_logits_ith(i - 1)
            return self._ctx.get_logits_ith(i)

    _with_proxy(TwoCalls)
    return target


MUTANTS = [
    Mutant(
        "phase-step-evicts-other-sequences",
        "decode_phase",
        "a decode step drops the newest entry of every sequence it does not list",
        ("PHASE-012", "PHASE-014"),
        _evicts_unlisted_sequences,
        black_box=True,
    ),
    Mutant(
        "dec-kv-written-twice",
        "decode_phase",
        "each ubatch's entries are appended to the KV cache twice",
        ("PHASE-011", "PHASE-020"),
        _kv_written_twice,
    ),
    Mutant(
        "phase-cross-sequence-attention",
        "decode_phase",
        "in a single-stream ubatch, tokens attend every earlier cell, whatever its sequence",
        ("PHASE-015", "PHASE-017", "PHASE-010"),
        _batched_attends_everything,
        black_box=True,
    ),
    Mutant(
        "phase-finished-sequence-fed-again",
        "decode_phase",
        "a sequence that finished still receives its last input once more in the next step",
        ("PHASE-001",),
        _finished_sequence_fed_again,
    ),
    Mutant(
        "phase-step-feeds-stale-token",
        "decode_phase",
        "a decode step feeds each sequence its previous input instead of its newly selected token",
        ("PHASE-002",),
        _step_feeds_stale_token,
    ),
    Mutant(
        "phase-upper-layers-miss-own-entry",
        "decode_phase",
        "in a decode step, layers after the first do not attend the entry the step just wrote",
        ("PHASE-008", "PHASE-009"),
        _step_hides_own_entry(1),
        black_box=True,
    ),
    Mutant(
        "phase-step-misses-own-entry",
        "decode_phase",
        "in a batched decode step, no layer attends the entry the step just wrote",
        ("PHASE-016",),
        _step_hides_own_entry(0),
        black_box=True,
    ),
    Mutant(
        "phase-pos-max-lags-one-call",
        "decode_phase",
        "seq_pos_max reports the positions from before the last decode call",
        ("PHASE-013",),
        _pos_max_lags_one_call,
    ),
    Mutant(
        "phase-prompt-joins-late",
        "decode_phase",
        "the last live prompt joins the batch at the second decode step",
        ("PHASE-018",),
        _last_prompt_joins_late,
    ),
    Mutant(
        "phase-finished-sequence-lingers",
        "decode_phase",
        "a finished sequence leaves the active set one step late",
        ("PHASE-019",),
        _finished_sequence_lingers,
    ),
    Mutant(
        "phase-speculative-redo",
        "decode_phase",
        "each step rolls back and re-feeds every sequence's previous entry with the new token",
        ("PHASE-021",),
        _speculative_redo,
        black_box=True,
    ),
    Mutant(
        "phase-step-in-two-calls",
        "decode_phase",
        "a decode step of several sequences is submitted as two decode calls",
        ("PHASE-003",),
        _step_split_in_two_calls,
        black_box=True,
    ),
]
