"""What every memory offers the decoder (llama.cpp ``llama_memory_i`` / ``llama_memory_context_i``)
and how ``init_batch`` turns a batch into ubatches.

A memory owns sequence state (KV cells, recurrent states) and answers three requests, each with
a *context* that carries a :class:`~reference_impl.memory.status.MemoryStatus`:

* ``init_batch(splitter, n_ubatch, embd_all)``: split the batch (the split depends on the memory
  kind, :func:`split_choice`), plan where every ubatch goes (``prepare``, which changes nothing)
  and return a context whose ``apply()`` places the current ubatch and ``next()`` moves on;
* ``init_update(optimize)``: pending work (K-shift, stream copies) or ``NO_UPDATE``;
* ``init_full()``: a context describing the whole memory (worst-case graph reservation).

The splitter is the batch area's ``BatchSplitter`` (``split_reset``, ``split_simple``,
``split_equal``, ``split_seq``, ``n_tokens``, ``n_used``); any object with those names works.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from reference_impl.batch.types import UBatch
from reference_impl.memory.status import MemoryStatus


class Splitter(Protocol):
    def split_reset(self) -> None: ...

    def split_simple(self, n_ubatch: int) -> UBatch: ...

    def split_equal(self, n_ubatch: int, sequential: bool, n_keep_tail: int = 0) -> UBatch: ...

    def split_seq(self, n_ubatch: int) -> UBatch: ...


@dataclass(frozen=True)
class SplitChoice:
    """One way of splitting: ``method`` is "simple", "equal" or "seq"."""

    method: str
    sequential: bool = False
    n_keep_tail: int = 0

    def call(self, splitter: Any, n_ubatch: int) -> UBatch:
        if self.method == "simple":
            return splitter.split_simple(n_ubatch)
        if self.method == "equal":
            return splitter.split_equal(n_ubatch, self.sequential, self.n_keep_tail)
        if self.method == "seq":
            return splitter.split_seq(n_ubatch)
        raise ValueError(f"unknown split method {self.method!r}")


MEMORY_KINDS = ("kv", "iswa", "recurrent", "hybrid")


def split_choice(
    kind: str, *, unified: bool, embd_all: bool, n_rs_seq: int = 0
) -> tuple[SplitChoice, ...]:
    """The splits ``init_batch`` tries, in order (llama.cpp's table; reference notes §1.5).

    ``unified`` means the attention cache has one stream. Recurrent states need the last
    ``n_rs_seq + 1`` tokens of each sequence in one ubatch when rollback snapshots are kept.
    """
    tail = n_rs_seq + 1 if n_rs_seq > 0 else 0
    if kind == "kv":
        return (SplitChoice("simple"),) if unified else (SplitChoice("equal", True, 0),)
    if kind == "iswa":
        equal = SplitChoice("equal", not unified, 0)
        return (SplitChoice("simple"), equal) if unified else (equal,)
    if kind == "recurrent":
        return (SplitChoice("seq"),) if embd_all else (SplitChoice("equal", True, tail),)
    if kind == "hybrid":
        return (SplitChoice("seq"),) if embd_all else (SplitChoice("equal", not unified, tail),)
    raise ValueError(f"unknown memory kind {kind!r}; known: {', '.join(MEMORY_KINDS)}")


def _count(splitter: Any, name: str) -> int:
    value = getattr(splitter, name)
    return int(value() if callable(value) else value)


def collect_ubatches(splitter: Any, choice: SplitChoice, n_ubatch: int) -> list[UBatch] | None:
    """Split from the start until an empty ubatch; None when some tokens were not placed."""
    splitter.split_reset()
    out: list[UBatch] = []
    while True:
        ub = choice.call(splitter, n_ubatch)
        if ub.n_tokens == 0:
            break
        out.append(ub)
    if _count(splitter, "n_used") < _count(splitter, "n_tokens"):
        return None
    return out


class MemoryContext:
    """A memory's answer to one request. ``status`` says whether ``apply`` may be used.

    Batch contexts walk their ubatches: ``get_ubatch()`` is the current one, ``apply()`` places
    it in the memory, ``next()`` advances and is False after the last.
    """

    def __init__(self, status: MemoryStatus, ubatches: list[UBatch] | None = None) -> None:
        self.status = status
        self.ubatches: list[UBatch] = ubatches or []
        self.i_cur = 0

    def get_status(self) -> MemoryStatus:
        return self.status

    def get_ubatch(self) -> UBatch:
        self._require_success()
        return self.ubatches[self.i_cur]

    def next(self) -> bool:
        self._require_success()
        self.i_cur += 1
        return self.i_cur < len(self.ubatches)

    def apply(self) -> bool:
        raise NotImplementedError

    def _require_success(self) -> None:
        if self.status != MemoryStatus.SUCCESS:
            raise RuntimeError(f"memory context with status {self.status.name} has no ubatches")


class FailedContext(MemoryContext):
    def __init__(self, status: MemoryStatus = MemoryStatus.FAILED_PREPARE) -> None:
        super().__init__(status)

    def apply(self) -> bool:
        raise RuntimeError(f"cannot apply a memory context with status {self.status.name}")


class NoUpdateContext(MemoryContext):
    def __init__(self) -> None:
        super().__init__(MemoryStatus.NO_UPDATE)

    def apply(self) -> bool:
        return True


def first_success(
    attempts: tuple[SplitChoice, ...],
    splitter: Any,
    n_ubatch: int,
    plan: Callable[[list[UBatch]], MemoryContext | None],
) -> MemoryContext:
    """Try each split in turn; the first whose ubatches all fit gives the context."""
    for choice in attempts:
        ubatches = collect_ubatches(splitter, choice, n_ubatch)
        if ubatches is None:
            continue
        ctx = plan(ubatches)
        if ctx is not None:
            return ctx
    return FailedContext(MemoryStatus.FAILED_PREPARE)
