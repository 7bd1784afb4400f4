"""Small helpers shared by the decoder-area tests."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

# The one NMSE of the suite; this name stays for the differential tests that import it here.
from reference_impl.batch.types import Batch

RETURN_CODES = (0, 1, 2, -1, -2, -3)


def batch(
    tokens: Sequence[int],
    *,
    seqs: Sequence[Iterable[int]] | None = None,
    pos: Sequence[int] | None = None,
    out: Sequence[int] | None = None,
    all_out: bool = False,
) -> Batch:
    logits = [1] * len(tokens) if all_out else out
    return Batch.from_lists(list(tokens), pos=pos, seq_ids=seqs, logits=logits)


def invalid(call: Callable[[], Any]) -> bool:
    """True iff the accessor call raises (an invalid output request)."""
    try:
        call()
    except Exception:
        return True
    return False


def memory_view(ctx: Any, seqs: Iterable[int] | None = None) -> dict[int, tuple[int, int]]:
    """``(seq_pos_min, seq_pos_max)`` per sequence; by default every valid sequence id up to 4
    (llama.cpp aborts on a sequence id outside the context's streams)."""
    if seqs is None:
        seqs = range(min(4, ctx.n_seq_max()))
    return {s: (ctx.seq_pos_min(s), ctx.seq_pos_max(s)) for s in seqs}


def prompt(n: int, start: int = 3, stride: int = 7, n_vocab: int = 500) -> list[int]:
    """A deterministic token list (ids spread over the vocabulary, none special)."""
    return [(start + stride * i) % (n_vocab - 3) + 3 for i in range(n)]


class DecodeRecorder:
    """A context that records every batch submitted to it (and passes every call on)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.batches: list[Any] = []

    def decode(self, b: Any) -> int:
        self.batches.append(b)
        return int(self._inner.decode(b))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class ForwardOracle:
    """Expected logits from the target's own full-sequence forward pass (``model.forward``),
    which runs without a KV cache, a sanitizer or a splitter: the row of a token at position
    ``p`` of a sequence whose history is ``tokens[0..p]`` at positions ``0..p``."""

    def __init__(self, target: Any, model: Any) -> None:
        self._target = target
        self._model = model
        self._rows: dict[tuple[int, ...], Any] = {}

    def row(self, history: Sequence[int]) -> Any:
        """Logits of the last token of ``history`` (positions 0..len-1, one sequence)."""
        key = tuple(history)
        if key not in self._rows:
            out = self._target.forward_logits(self._model, list(key))
            for p in range(len(key)):  # causal: every prefix's row comes with it
                self._rows[key[: p + 1]] = out[p]
        return self._rows[key]


def histories(tokens: Sequence[int], seqs: Sequence[Sequence[int]]) -> list[list[int]]:
    """For each batch token of a single-sequence-per-token batch on empty memory (positions
    generated), the token history of its sequence up to and including it."""
    so_far: dict[int, list[int]] = {}
    out = []
    for t, ids in zip(tokens, seqs, strict=True):
        (s,) = set(ids)
        so_far.setdefault(s, []).append(t)
        out.append(list(so_far[s]))
    return out
