"""Small helpers shared by the KV conformance tests (placing tokens, reading cells)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from conformance.assertions import raises_code, unchanged
from conformance.strategies.kv import run_of, state_tuple, ubatch_from_lists


def place(cache: Any, ubatch: Any) -> Any:
    """prepare + apply one ubatch; returns its slot (fails the test when it does not fit)."""
    slots = cache.prepare([ubatch])
    assert slots is not None, "the ubatch should fit"
    cache.apply_ubatch(slots[0], ubatch)
    return slots[0]


def place_run(cache: Any, seq: int, start: int, count: int) -> Any:
    return place(cache, run_of(seq, start, count))


def place_tokens(cache: Any, tokens: list[tuple[int, list[int]]]) -> Any:
    return place(cache, ubatch_from_lists([p for p, _ in tokens], [s for _, s in tokens]))


def cells(cache: Any, stream: int = 0) -> list[tuple[int, tuple[int, ...]]]:
    """(pos, seqs) of every cell of a stream."""
    s = cache.state().streams[stream]
    return [(p, tuple(q)) for p, q in zip(s.pos, s.seqs)]


def stream(cache: Any, stream: int = 0) -> Any:
    return cache.state().streams[stream]


def exts(cache: Any, stream: int = 0) -> list[tuple[int, ...]]:
    """The 2-D (M-RoPE) extension (x, y) of every cell of a stream."""
    return [tuple(int(v) for v in e) for e in cache.state().streams[stream].ext]


_STREAM_FIELDS = ("pos", "seqs", "shift", "ext", "head", "used", "has_shift")


def cache_state(cache: Any) -> dict[str, Any]:
    """``state_tuple`` with names, so that a difference reads ``['streams'][0]['pos'][6]``."""
    state: Any = state_tuple(cache.state())
    streams, pending = state
    return {
        "streams": [dict(zip(_STREAM_FIELDS, s, strict=True)) for s in streams],
        "pending_copies": pending,
    }


def unchanged_cache(cache: Any, what: str = "the cache") -> AbstractContextManager[object]:
    """``unchanged`` over the cache's whole state (cells, heads, flags, pending copies)."""
    return unchanged(lambda: cache_state(cache), what)


def expect_code(cache: Any, code: str, fn: Any, *args: Any, **where: Any) -> Any:
    """``fn(*args)`` must raise an error with ``code`` (and the field / index / seq_id given in
    ``where``) and leave the cache exactly as it was; returns the error."""
    with unchanged_cache(cache, f"{code}: the cache"), raises_code(code, **where) as raised:
        fn(*args)
    return raised.value
