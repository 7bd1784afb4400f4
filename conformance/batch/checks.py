"""Helpers shared by the batch conformance tests: calling the target and checking ubatches."""

from __future__ import annotations

from typing import Any

import numpy as np

from conformance.fixtures.batch_corpus import CorpusCase, build_batch
from conformance.strategies.batch import BatchCase
from reference_impl.batch.types import LLAMA_MAX_SEQ, Batch
from reference_impl.errors import BatchError

MAX_UBATCHES = 10_000  # a split that never runs dry is a defect, not an endless test


def sanitize(target: Any, case: BatchCase | CorpusCase) -> Any:
    if isinstance(case, CorpusCase):
        return target.batch_sanitize(build_batch(case), **case.sanitize_kwargs())
    return target.batch_sanitize(case.batch, **case.kwargs())


def outcome(target: Any, case: BatchCase | CorpusCase) -> Any:
    """The sanitized batch, or the error as ``(code, field, index, seq_id)``."""
    try:
        return sanitize(target, case)
    except BatchError as e:
        return (e.code, e.field, e.index, e.seq_id)


def split(
    splitter: Any, mode: str, n_ubatch: int, sequential: bool = False, n_keep_tail: int = 0
) -> Any:
    if mode == "simple":
        return splitter.split_simple(n_ubatch)
    if mode == "equal":
        return splitter.split_equal(n_ubatch, sequential, n_keep_tail)
    return splitter.split_seq(n_ubatch)


def split_until_empty(
    splitter: Any, mode: str, n_ubatch: int, sequential: bool = False, n_keep_tail: int = 0
) -> list[Any]:
    """split_reset, then ubatches until the first empty one."""
    splitter.split_reset()
    out: list[Any] = []
    for _ in range(MAX_UBATCHES):
        ub = split(splitter, mode, n_ubatch, sequential, n_keep_tail)
        if ub.n_tokens == 0:
            return out
        out.append(ub)
    raise AssertionError(f"split_{mode}({n_ubatch}) never returned an empty ubatch")


def pos0(sb: Any) -> np.ndarray:
    pos = np.asarray(sb.batch.pos)
    return pos if pos.ndim == 1 else pos[0]


def token_seqs(sb: Any) -> list[tuple[int, ...]]:
    b = sb.batch
    return [tuple(int(s) for s in b.seq_id[i, : int(b.n_seq_id[i])]) for i in range(sb.n_tokens)]


def ubatch_seqs(ub: Any, i: int) -> tuple[int, ...]:
    return tuple(int(s) for s in ub.seq_id[i, : int(ub.n_seq_id[i])])


def check_ubatch(ub: Any, sb: Any) -> None:
    """SPL-002/003/004: the structure and contents of one non-empty ubatch."""
    b: Batch = sb.batch
    n = ub.n_tokens
    assert n >= 1
    assert ub.n_seq_tokens * ub.n_seqs == n, (ub.n_seq_tokens, ub.n_seqs, n)
    assert ub.n_pos == sb.n_pos
    idxs = np.asarray(ub.idxs)
    assert idxs.shape == (n,)
    # contents copied from the batch
    if b.token is None:
        assert ub.token is None
    else:
        assert np.array_equal(ub.token, np.asarray(b.token)[idxs])
    if b.embd is None:
        assert ub.embd is None
    else:
        assert np.array_equal(np.asarray(ub.embd).reshape(n, -1), np.asarray(b.embd)[idxs])
    assert np.array_equal(np.asarray(ub.output) != 0, np.asarray(b.logits)[idxs] != 0)
    # seq_id rows are as wide as the ubatch's widest token (not the batch's), padded with -1
    n_seq_id = np.asarray(ub.n_seq_id)
    seq_id = np.asarray(ub.seq_id)
    assert n_seq_id.shape == (n,)
    assert seq_id.shape == (n, int(n_seq_id.max())), f"seq_id shape {seq_id.shape}"
    pad = np.arange(seq_id.shape[1])[None, :] >= n_seq_id[:, None]
    assert (seq_id[pad] == -1).all(), "seq_id padding is not -1"
    seqs = token_seqs(sb)
    for k in range(n):
        assert ubatch_seqs(ub, k) == seqs[int(idxs[k])]
        # the record's accessor, which the memory and the decoder read, says the same
        assert ub.seq_ids_of(k) == seqs[int(idxs[k])], f"seq_ids_of({k})"
    pos = np.asarray(ub.pos)
    assert pos.shape == (n * ub.n_pos,)
    bpos = np.asarray(b.pos)
    for j in range(ub.n_pos):
        want = bpos[idxs] if bpos.ndim == 1 else bpos[j, idxs]
        assert np.array_equal(pos[j * n : (j + 1) * n], want), f"section {j}"
        got = [ub.pos_of(k, j) for k in range(n)]
        assert got == [int(p) for p in want], f"pos_of(., {j})"
    # without a section the accessor reads section 0, the position the memory and decoder use
    assert [ub.pos_of(k) for k in range(n)] == [int(p) for p in pos[:n]], "pos_of(.) default"
    # sequence metadata
    present = sorted({s for k in range(n) for s in ubatch_seqs(ub, k)})
    assert list(np.asarray(ub.seq_id_unq)) == present
    assert ub.n_seqs_unq == len(present)
    seq_idx = np.asarray(ub.seq_idx)
    assert seq_idx.shape == (LLAMA_MAX_SEQ,)
    expect = np.full(LLAMA_MAX_SEQ, -1)
    expect[present] = np.arange(len(present))
    assert np.array_equal(seq_idx, expect)


def check_empty_ubatch(ub: Any) -> None:
    """SPL-015: the empty ubatch (llama.cpp's value-initialized one) counts nothing, is not
    equal_seqs and every per-token field has no row."""
    counts = (ub.n_tokens, ub.n_seq_tokens, ub.n_seqs, ub.n_seqs_unq)
    assert counts == (0, 0, 0, 0), (
        f"empty ubatch counts (n_tokens, n_seq_tokens, n_seqs, n_seqs_unq) {counts}"
    )
    assert not ub.equal_seqs, "empty ubatch has equal_seqs set (llama.cpp returns it zeroed)"
    for name in ("pos", "n_seq_id", "seq_id", "seq_id_unq", "output", "idxs"):
        rows = np.asarray(getattr(ub, name)).shape[0]
        assert rows == 0, f"empty ubatch field {name} has {rows} rows"
    assert np.array_equal(np.asarray(ub.seq_idx), np.full(LLAMA_MAX_SEQ, -1)), "seq_idx not all -1"


def ints(values: Any) -> str:
    """A compact, diff-friendly rendering of an integer sequence ("0 1 2")."""
    return " ".join(str(int(v)) for v in values)


def seq_rows(rows: list[tuple[int, ...]]) -> str:
    """Sequence sets of consecutive tokens: "0,1 | 1 | 0"."""
    return " | ".join(",".join(str(s) for s in r) for r in rows)


def summarize_ubatch(ub: Any) -> dict[str, Any]:
    """A compact, snapshot-friendly view of a ubatch."""
    return {
        "shape": f"n_tokens={ub.n_tokens} n_seq_tokens={ub.n_seq_tokens} n_seqs={ub.n_seqs} "
        f"n_seqs_unq={ub.n_seqs_unq} equal_seqs={int(bool(ub.equal_seqs))} n_pos={ub.n_pos}",
        "idxs": ints(ub.idxs),
        "pos": ints(ub.pos),
        "seq_id": seq_rows([ubatch_seqs(ub, k) for k in range(ub.n_tokens)]),
        "seq_id_unq": ints(ub.seq_id_unq),
        "output": ints(ub.output),
    }


def input_seqs(batch: Batch) -> list[tuple[int, ...]]:
    """What a batch's sequence fields mean before sanitizing (defaults, duplicates dropped)."""
    n = batch.n_tokens
    if batch.seq_id is None:
        return [(0,)] * n
    seq_id = np.asarray(batch.seq_id).reshape(n, -1)
    counts = np.ones(n, np.int32) if batch.n_seq_id is None else np.asarray(batch.n_seq_id)
    return [tuple(dict.fromkeys(int(s) for s in seq_id[i, : int(counts[i])])) for i in range(n)]


def make_case(
    batch: Batch,
    memory: dict[int, tuple[int, int]] | None,
    like: BatchCase | None = None,
    **params: Any,
) -> BatchCase:
    """A BatchCase for ``batch`` on ``memory``; parameters from ``params``, ``like`` or defaults."""
    base: dict[str, Any] = {"n_vocab": 32, "n_seq_max": 4, "output_all": False, "n_pos_per_embd": 1}
    if like is not None:
        base.update(
            n_vocab=like.n_vocab,
            n_seq_max=like.n_seq_max,
            output_all=like.output_all,
            n_pos_per_embd=like.n_pos_per_embd,
        )
    base.update(params)
    return BatchCase(batch=batch, memory=memory, **base)


def input_pos0(batch: Batch, n_pos_per_embd: int = 1) -> list[int]:
    """Section-0 positions of a batch with explicit positions."""
    assert batch.pos is not None
    pos = np.asarray(batch.pos)
    if pos.ndim == 1 and pos.shape[0] != batch.n_tokens:
        pos = pos.reshape(-1, batch.n_tokens)
    return [int(p) for p in (pos if pos.ndim == 1 else pos[0])]
