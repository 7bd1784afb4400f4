"""Hypothesis strategies for batches: valid ones, and invalid ones that break one rule each.

A :class:`BatchCase` is a batch plus everything the sanitizer is called with. ``valid_cases``
builds batches that satisfy every sanitizer rule by construction (many sequences, coupled tokens,
explicit and missing fields, duplicate ids, padded rows, memory states, M-RoPE); ``invalid_cases``
takes a valid case and breaks exactly one rule, returning the error code it must produce.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from conformance.fixtures.batch_corpus import RangeMemory
from reference_impl.batch.types import LLAMA_MAX_SEQ, Batch


@dataclass(frozen=True)
class BatchCase:
    batch: Batch
    memory: Mapping[int, tuple[int, int]] | None
    n_vocab: int
    n_seq_max: int
    output_all: bool = False
    n_pos_per_embd: int = 1
    # what the generator knows about the case (not sanitizer input)
    coupled: bool = False
    first_seqs: tuple[int, ...] = ()  # first listed sequence of each token
    pos0: tuple[int, ...] = ()  # section-0 position of each token (given or to be generated)

    def kwargs(self) -> dict[str, Any]:
        return {
            "n_vocab": self.n_vocab,
            "n_seq_max": self.n_seq_max,
            "memory": None if self.memory is None else RangeMemory(self.memory),
            "output_all": self.output_all,
            "n_pos_per_embd": self.n_pos_per_embd,
        }

    def __repr__(self) -> str:  # readable falsifying examples
        b = self.batch

        def show(a: np.ndarray | None) -> str:
            return "None" if a is None else str(np.asarray(a).tolist())

        return (
            f"BatchCase(token={show(b.token)}, embd={'None' if b.embd is None else b.embd.shape},"
            f" pos={show(b.pos)}, n_seq_id={show(b.n_seq_id)}, seq_id={show(b.seq_id)}, "
            f"logits={show(b.logits)}, memory={self.memory}, n_vocab={self.n_vocab}, "
            f"n_seq_max={self.n_seq_max}, output_all={self.output_all}, "
            f"n_pos_per_embd={self.n_pos_per_embd})"
        )


@st.composite
def memory_ranges(draw: st.DrawFn, seqs: list[int]) -> dict[int, tuple[int, int]]:
    """Per sequence: absent (empty) or a (min, max) range."""
    out: dict[int, tuple[int, int]] = {}
    for s in seqs:
        if draw(st.booleans()):
            lo = draw(st.integers(0, 12))
            out[s] = (lo, lo + draw(st.integers(0, 8)))
    return out


@st.composite
def valid_cases(
    draw: st.DrawFn,
    *,
    max_tokens: int = 24,
    allow_mrope: bool = True,
    allow_coupling: bool = True,
    coupled_memory: bool = False,
    explicit_pos: bool = False,
    force_mrope: bool = False,
) -> BatchCase:
    """A batch every sanitizer rule accepts.

    ``coupled_memory``: the first token couples two or more sequences that the memory holds
    (with more than one position), so a divergence can be introduced.
    """
    n_seq_max = draw(
        st.sampled_from(
            [2, 3, 4, 8, 64, LLAMA_MAX_SEQ]
            if coupled_memory
            else [1, 2, 3, 4, 8, 64, LLAMA_MAX_SEQ]
        )
    )
    n_active = draw(st.integers(2 if coupled_memory else 1, min(n_seq_max, 6)))
    seqs = sorted(
        draw(st.sets(st.integers(0, n_seq_max - 1), min_size=n_active, max_size=n_active))
    )
    n_pos = 4 if force_mrope or (allow_mrope and draw(st.integers(0, 5)) == 0) else 1
    content = draw(st.sampled_from(["token", "token", "token", "embd", "both"]))
    has_token = content != "embd"

    # positions left to the sanitizer: then they must be exactly what it generates
    auto = not (coupled_memory or explicit_pos) and draw(st.integers(0, 2)) == 0

    # sequences that may share tokens share their memory state (else they would diverge)
    groups: list[list[int]] = [[s] for s in seqs]
    if coupled_memory or (allow_coupling and not auto and len(seqs) > 1 and draw(st.booleans())):
        k = draw(st.integers(2, len(seqs)))
        groups = [seqs[:k]] + [[s] for s in seqs[k:]]
    use_memory = coupled_memory or draw(st.booleans())
    memory: dict[int, tuple[int, int]] | None = None
    if use_memory:
        memory = {}
        for k, g in enumerate(groups):
            r = draw(memory_ranges([g[0]]))
            if coupled_memory and k == 0:
                lo = draw(st.integers(0, 8))
                r = {g[0]: (lo, lo + draw(st.integers(1, 6)))}
            for s in g:
                if g[0] in r:
                    memory[s] = r[g[0]]

    def x_of(s: int) -> int:
        return memory[s][1] if memory is not None and s in memory else -1

    # where an empty sequence starts (same for a whole group, so its members can couple)
    start: dict[int, int] = {}
    for g in groups:
        x = x_of(g[0])
        st_pos = x + 1 if x >= 0 or auto else draw(st.integers(0, 6))
        for s in g:
            start[s] = st_pos

    n = draw(st.integers(1, max_tokens))
    last: dict[int, int] = {}
    rows: list[list[int]] = []
    pos0: list[int] = []
    coupled = False
    for t in range(n):
        g = draw(st.sampled_from(groups))
        members = draw(st.lists(st.sampled_from(g), min_size=1, max_size=len(g), unique=True))
        if coupled_memory and t == 0:
            g = groups[0]
            members = draw(st.permutations(g))
        # positions that keep every member continuous and non-decreasing
        allowed: set[int] | None = None
        for s in members:
            opts = {start[s]} if s not in last else {last[s], last[s] + 1}
            if auto and s in last:
                opts = {last[s] + 1}
            elif n_pos > 1 and s in last:
                opts = {last[s] + d for d in range(4)}  # M-RoPE may jump forward
            allowed = opts if allowed is None else allowed & opts
        if not allowed:
            members = members[:1]
            s = members[0]
            allowed = {start[s]} if s not in last else {last[s], last[s] + 1}
        p = draw(st.sampled_from(sorted(allowed)))
        for s in members:
            last[s] = p
        coupled = coupled or len(members) > 1
        rows.append(members)
        pos0.append(p)

    # duplicate ids inside a token, and padding beyond n_seq_id, must be harmless
    dup = draw(st.booleans())
    listed = [[*row, row[0]] if dup and draw(st.booleans()) else list(row) for row in rows]
    width = max(len(row) for row in listed) + draw(st.integers(0, 2))
    pad = draw(st.sampled_from([-1, 0, 999]))
    seq_id = np.full((n, width), pad, dtype=np.int32)
    for i, row in enumerate(listed):
        seq_id[i, : len(row)] = row
    n_seq_id = np.asarray([len(row) for row in listed], dtype=np.int32)

    all_zero = all(row == [0] for row in rows)
    seq_mode = draw(st.sampled_from(["explicit", "no_n_seq_id", "absent"]))
    if seq_mode == "absent" and not all_zero:
        seq_mode = "explicit"
    if seq_mode == "no_n_seq_id" and any(len(r) > 1 for r in listed):
        seq_mode = "explicit"

    token = None
    n_vocab = draw(st.integers(1, 50))
    if has_token:
        token = np.asarray(draw(st.lists(st.integers(0, n_vocab - 1), min_size=n, max_size=n)))
        token = token.astype(np.int32)
    embd = None
    if content != "token":
        # distinct rows ([100 i + k] + offset): contents never matter to the rules, only that
        # a ubatch copies the right rows
        embd_width = draw(st.integers(1, 3))
        offset = draw(st.integers(0, 9))
        embd = (
            100.0 * np.arange(n, dtype=np.float32)[:, None]
            + np.arange(embd_width, dtype=np.float32)[None, :]
            + offset
        )

    # positions: explicit, or left to the sanitizer (then pos0 is what it must generate)
    pos: np.ndarray | None = None if auto else np.asarray(pos0, dtype=np.int32)
    if pos is not None and n_pos > 1 and not has_token:
        planes = [pos0] + [
            draw(st.lists(st.integers(0, 9), min_size=n, max_size=n)) for _ in range(3)
        ]
        pos = np.asarray(planes, dtype=np.int32)
        if draw(st.booleans()):
            pos = pos.reshape(-1)  # flat section-major layout is accepted too

    logits = None
    if draw(st.booleans()):
        logits = np.asarray(
            draw(st.lists(st.sampled_from([0, 0, 1, 2, -1]), min_size=n, max_size=n)), dtype=np.int8
        )

    batch = Batch(
        token=token,
        embd=embd,
        pos=pos,
        n_seq_id=None if seq_mode != "explicit" else n_seq_id,
        seq_id=None if seq_mode == "absent" else seq_id,
        logits=logits,
    )
    return BatchCase(
        batch=batch,
        memory=memory,
        n_vocab=n_vocab,
        n_seq_max=n_seq_max,
        output_all=draw(st.integers(0, 4)) == 0,
        n_pos_per_embd=n_pos,
        coupled=coupled,
        first_seqs=tuple(r[0] for r in rows),
        pos0=tuple(pos0),
    )


MANY_SEQ_MAX = 64  # n_seq_max for many_sequence_batches: above every id it draws


@st.composite
def many_sequence_batches(
    draw: st.DrawFn, *, min_seqs: int = 17, max_seqs: int = 40, allow_coupling: bool = True
) -> Batch:
    """A valid token batch (no memory needed) of many sequences of uneven lengths.

    More sequence sets than ``valid_cases`` makes, so splits run out of some sets while others
    still hold tokens. Ids are mostly consecutive (a few gaps) but assigned in a drawn order, so
    the first-seen sequence is rarely sequence 0; tokens of different sequences interleave in a
    drawn order. With coupling, a few groups of sequences share a prefix (tokens listing every
    member, before the members' own tokens); sanitize with ``n_seq_max=MANY_SEQ_MAX``.
    """
    n = draw(st.integers(min_seqs, max_seqs))
    base = draw(st.integers(0, 8))
    extra = draw(st.integers(0, 4))
    ids = draw(st.sets(st.integers(base, base + n + extra - 1), min_size=n, max_size=n))
    seqs = draw(st.permutations(sorted(ids)))
    lengths = draw(st.lists(st.integers(1, 6), min_size=n, max_size=n))
    # groups of consecutive streams; a group of several shares a prefix
    groups: list[list[int]] = [[k] for k in range(n)]
    if allow_coupling and draw(st.booleans()):
        groups = []
        k = 0
        while k < n:
            size = draw(st.sampled_from([1, 1, 1, 2, 3]))
            groups.append(list(range(k, min(k + size, n))))
            k += size
    streams: list[list[tuple[list[int], int]]] = []  # per group: (sequence ids, position)
    for g in groups:
        shared = draw(st.integers(1, 3)) if len(g) > 1 else 0
        stream = [([seqs[k] for k in g], p) for p in range(shared)]
        own = draw(st.permutations([k for k in g for _ in range(lengths[k])]))
        nxt = {k: shared for k in g}
        for k in own:
            stream.append(([seqs[k]], nxt[k]))
            nxt[k] += 1
        streams.append(stream)
    order = draw(st.permutations([j for j, s in enumerate(streams) for _ in s]))
    at = [0] * len(streams)
    rows: list[tuple[list[int], int]] = []
    for j in order:
        rows.append(streams[j][at[j]])
        at[j] += 1
    width = max(len(r) for r, _ in rows)
    seq_id = np.full((len(rows), width), -1, dtype=np.int32)
    for i, (r, _) in enumerate(rows):
        seq_id[i, : len(r)] = r
    return Batch(
        token=np.arange(len(rows), dtype=np.int32) % 32,
        pos=np.asarray([p for _, p in rows], dtype=np.int32),
        n_seq_id=np.asarray([len(r) for r, _ in rows], dtype=np.int32),
        seq_id=seq_id,
    )


# --------------------------------------------------------------------------------------------
# invalid cases: one rule broken
# --------------------------------------------------------------------------------------------

INVALID_RULES = (
    "SAN_EMPTY",
    "SAN_N_SEQ_MAX",
    "SAN_SHAPE",
    "SAN_TOKEN_RANGE",
    "SAN_N_SEQ_ID",
    "SAN_SEQ_ID_RANGE",
    "SAN_POS_MEMORY",
    "SAN_POS_GAP",
    "SAN_SEQ_DIVERGED",
    "SAN_POS_DECREASING",
)


def _with(case: BatchCase, **fields: Any) -> BatchCase:
    return replace(case, batch=replace(case.batch, **fields))


def _explicit_seqs(case: BatchCase) -> tuple[np.ndarray, np.ndarray]:
    """Explicit seq_id and n_seq_id that mean what the case means."""
    b = case.batch
    n = b.n_tokens
    if b.seq_id is None:
        return np.zeros((n, 1), np.int32), np.ones(n, np.int32)
    n_seq_id = b.n_seq_id if b.n_seq_id is not None else np.ones(n, np.int32)
    return np.array(b.seq_id), np.array(n_seq_id)


def _explicit(case: BatchCase) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Explicit pos (section 0), seq_id and n_seq_id that mean what the case means."""
    b = case.batch
    n = b.n_tokens
    assert b.pos is not None
    pos = np.asarray(b.pos)
    if pos.ndim == 1 and pos.shape[0] != n:
        pos = pos.reshape(-1, n)
    pos0 = pos if pos.ndim == 1 else pos[0]
    return (pos0.copy(), *_explicit_seqs(case))


def _seq_positions(case: BatchCase) -> dict[int, list[int]]:
    pos0, seq_id, n_seq_id = _explicit(case)
    out: dict[int, list[int]] = {}
    for i in range(pos0.shape[0]):
        for s in dict.fromkeys(seq_id[i, : n_seq_id[i]].tolist()):
            out.setdefault(s, []).append(int(pos0[i]))
    return out


def _append_token(case: BatchCase, seq: int, p: int) -> BatchCase:
    """Append one single-sequence token at position ``p`` (standard positions only)."""
    b = case.batch
    pos0, seq_id, n_seq_id = _explicit(case)
    n = pos0.shape[0]
    row = np.full((1, seq_id.shape[1]), -1, dtype=np.int32)
    row[0, 0] = seq
    new_seq_id = np.concatenate([seq_id, row])
    new_n_seq_id = np.concatenate([n_seq_id, [1]]).astype(np.int32)
    token = None if b.token is None else np.concatenate([b.token, [0]]).astype(np.int32)
    embd = (
        None
        if b.embd is None
        else np.concatenate([b.embd, np.zeros((1, b.embd.shape[1]), np.float32)])
    )
    logits = None if b.logits is None else np.concatenate([b.logits, [1]]).astype(np.int8)
    if case.n_pos_per_embd > 1 and b.token is None:
        pos = np.zeros((case.n_pos_per_embd, n + 1), dtype=np.int32)
        pos[:, :n] = np.asarray(b.pos).reshape(case.n_pos_per_embd, n)
        pos[0, n] = p
    else:
        pos = np.concatenate([pos0, [p]]).astype(np.int32)
    return replace(
        case,
        batch=Batch(
            token=token, embd=embd, pos=pos, n_seq_id=new_n_seq_id, seq_id=new_seq_id, logits=logits
        ),
    )


@st.composite
def invalid_cases(
    draw: st.DrawFn, rule: str | None = None, mrope: bool | None = None
) -> tuple[BatchCase, str]:
    """A valid case with exactly one rule broken, and the code the sanitizer must raise.

    ``mrope``: True for M-RoPE cases only, False for standard positions only, None for both.
    """
    rule = rule or draw(st.sampled_from(INVALID_RULES))
    if rule == "SAN_SEQ_DIVERGED":
        case = draw(valid_cases(max_tokens=12, coupled_memory=True))
        seq_id, n_seq_id = _explicit_seqs(case)
        row = list(dict.fromkeys(seq_id[0, : n_seq_id[0]].tolist()))
        s1 = draw(st.sampled_from(row[1:]))
        assert case.memory is not None
        mem = dict(case.memory)
        lo, hi = mem[s1]
        mem[s1] = (lo + 1, hi)  # same end, different start: positions still continue
        return replace(case, memory=mem), rule
    positional = rule in ("SAN_POS_MEMORY", "SAN_POS_GAP", "SAN_POS_DECREASING")
    case = draw(
        valid_cases(
            max_tokens=12,
            explicit_pos=positional,
            allow_mrope=rule != "SAN_POS_GAP" and mrope is not False,
            force_mrope=bool(mrope),
        )
    )
    b = case.batch
    n = b.n_tokens
    if rule == "SAN_EMPTY":
        return replace(case, batch=Batch(token=np.zeros(0, np.int32))), rule
    if rule == "SAN_N_SEQ_MAX":
        return replace(case, n_seq_max=draw(st.sampled_from([0, LLAMA_MAX_SEQ + 1, 1000]))), rule
    if rule == "SAN_SHAPE":
        what = draw(st.sampled_from(["logits", "pos", "n_seq_id", "seq_id"]))
        if what == "logits":
            return _with(case, logits=np.ones(n + 1, np.int8)), rule
        if what == "pos":
            return _with(case, pos=np.zeros(n + 2, np.int32)), rule
        if what == "n_seq_id":
            return _with(
                case, n_seq_id=np.ones(n + 1, np.int32), seq_id=np.zeros((n, 1), np.int32)
            ), rule
        return _with(case, seq_id=np.zeros((n + 1, 1), np.int32)), rule
    if rule == "SAN_TOKEN_RANGE":
        assume(b.token is not None)
        assert b.token is not None
        token = np.array(b.token)
        token[draw(st.integers(0, n - 1))] = draw(
            st.sampled_from([-1, case.n_vocab, case.n_vocab + 7])
        )
        return _with(case, token=token), rule
    if rule == "SAN_N_SEQ_ID":
        seq_id, n_seq_id = _explicit_seqs(case)
        n_seq_id[draw(st.integers(0, n - 1))] = draw(st.sampled_from([0, -1, seq_id.shape[1] + 1]))
        return _with(case, seq_id=seq_id, n_seq_id=n_seq_id), rule
    if rule == "SAN_SEQ_ID_RANGE":
        seq_id, n_seq_id = _explicit_seqs(case)
        i = draw(st.integers(0, n - 1))
        j = draw(st.integers(0, int(n_seq_id[i]) - 1))
        seq_id[i, j] = draw(st.sampled_from([-1, case.n_seq_max, case.n_seq_max + 3]))
        return _with(case, seq_id=seq_id, n_seq_id=n_seq_id), rule
    # position rules: explicit positions
    assert b.pos is not None
    seqpos = _seq_positions(case)
    s = draw(st.sampled_from(sorted(seqpos)))
    ps = seqpos[s]
    mem = dict(case.memory or {})
    if rule == "SAN_POS_MEMORY":
        lo = min(ps)
        if case.n_pos_per_embd > 1:
            x = lo + (0 if b.token is not None else 1) + draw(st.integers(0, 3))
        else:
            x = draw(st.sampled_from([lo, lo + 1, lo - 2, lo + 5]))
        assume(x >= 0)
        old = mem.get(s, (0, 0))
        mem[s] = (min(old[0], x), x)
        # sequences coupled to s must not make the divergence check fire first: it runs later
        return replace(case, memory=mem), rule
    if rule == "SAN_POS_GAP":
        return _append_token(case, s, max(ps) + 2), rule
    if rule == "SAN_POS_DECREASING":
        assume(len(set(ps)) >= 2)
        return _append_token(case, s, min(ps)), rule
    raise ValueError(f"unknown rule {rule}")
