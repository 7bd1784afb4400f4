"""The chunk allocator (spec/allocator.md ALLOC-004..014): hand-built free lists for each
choice rule, and a state machine (allocate / free / reset) checked after every step against a
byte map of each chunk, from which the free list and every choice are derived."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    rule,
    run_state_machine_as_test,
)

from conformance.assertions import raises_code, unchanged
from conformance.strategies import kernels as ks
from reference_impl.allocator.graph import SIZE_MAX

pytestmark = pytest.mark.requires("allocator.chunks")
HALF = SIZE_MAX // 2


def _up(n: int, a: int) -> int:
    return -(-n // a) * a


@pytest.mark.invariant("ALLOC-004", "ALLOC-009")
def test_sizes_round_up_and_chunks_are_capped(target: Any) -> None:
    ca = target.allocator_chunks(8, SIZE_MAX)
    assert ca.alloc(5) == (0, 0)
    assert ca.free_blocks(0) == [(8, HALF - 8)], "5 bytes take 8; an unbounded chunk is SIZE_MAX/2"
    assert ca.alloc(1) == (0, 8)
    ca.free((0, 0), 5)
    assert ca.free_blocks(0) == [(0, 8), (16, HALF - 16)], "a freed 5-byte region frees 8"
    assert ca.chunk_max_sizes() == [16]


@pytest.mark.invariant("ALLOC-005", "ALLOC-008")
def test_new_chunks_and_the_sixteenth(target: Any) -> None:
    ca = target.allocator_chunks(8, 16)
    assert ca.alloc(24) == (0, 0), "an oversized request opens a chunk of its own size"
    assert ca.free_blocks(0) == [] and ca.chunk_max_sizes() == [24]
    assert ca.alloc(8) == (1, 0)
    assert ca.free_blocks(1) == [(8, 8)], "a new chunk holds max(request, max size) bytes"
    for c in range(2, 16):
        ca.alloc(16)
        assert len(ca.chunk_max_sizes()) == c + 1
    assert ca.free_blocks(15) == [(16, HALF - 16)], "the 16th chunk is SIZE_MAX/2 bytes"
    assert ca.alloc(1000) == (15, 16) and len(ca.chunk_max_sizes()) == 16, "no 17th chunk"


def _two_chunks_with_holes(target: Any) -> Any:
    """Chunk 0 with a free non-last 64-byte block, chunk 1 with a free non-last 128-byte one."""
    ca = target.allocator_chunks(8, 256)
    a1, _, a3 = ca.alloc(64), ca.alloc(8), ca.alloc(184)
    b1, _, b3 = ca.alloc(128), ca.alloc(8), ca.alloc(120)
    assert [a1, a3, b1, b3] == [(0, 0), (0, 72), (1, 0), (1, 136)]
    for addr, size in ((a1, 64), (a3, 184), (b1, 128), (b3, 120)):
        ca.free(addr, size)
    assert ca.free_blocks(0) == [(0, 64), (72, 184)]
    assert ca.free_blocks(1) == [(0, 128), (136, 120)]
    return ca


@pytest.mark.invariant("ALLOC-006")
def test_best_fit_restarts_in_every_chunk(target: Any) -> None:
    """Decision D2: the later chunk's 128-byte block wins over chunk 0's better 64-byte one."""
    ca = _two_chunks_with_holes(target)
    assert ca.alloc(32) == (1, 0)


@pytest.mark.invariant("ALLOC-006")
def test_best_fit_ties_go_to_the_higher_offset(target: Any) -> None:
    ca = target.allocator_chunks(8, SIZE_MAX)
    regions = [ca.alloc(32), ca.alloc(8), ca.alloc(32), ca.alloc(8), ca.alloc(48), ca.alloc(8)]
    for i in (0, 2, 4):
        ca.free(regions[i], 48 if i == 4 else 32)
    assert [b[1] for b in ca.free_blocks(0)[:3]] == [32, 32, 48]
    assert ca.alloc(16) == (0, 40), "two 32-byte blocks fit best: the one at the higher offset"


def _last_blocks(target: Any) -> Any:
    """Chunk 0: high-water 112, last block at 96; chunk 1: high-water 64, last block at 64."""
    ca = target.allocator_chunks(8, 128)
    assert ca.alloc(96) == (0, 0)
    a1 = ca.alloc(16)
    ca.free(a1, 16)
    assert ca.alloc(64) == (1, 0)
    assert ca.free_blocks(0) == [(96, 32)] and ca.free_blocks(1) == [(64, 64)]
    assert ca.chunk_max_sizes() == [112, 64]
    return ca


@pytest.mark.invariant("ALLOC-007")
@pytest.mark.parametrize(
    ("size", "where", "why"),
    [
        (16, (0, 96), "chunk 0 fits it within what it already reached (reuse 0)"),
        (8, (0, 96), "least slack among non-negative reuse (chunk 0: 8; chunk 1: -8)"),
        (24, (0, 96), "all grow: the least growth (chunk 0: -8, chunk 1: -24)"),
        (32, (0, 96), "all grow: -16 beats -32"),
        (40, (1, 64), "only chunk 1's last block fits"),
    ],
)
def test_last_block_choice(target: Any, size: int, where: tuple[int, int], why: str) -> None:
    ca = _last_blocks(target)
    assert ca.alloc(size) == where, why


@pytest.mark.invariant("ALLOC-007")
def test_last_block_fit_beats_growth_and_ties_go_low(target: Any) -> None:
    ca = target.allocator_chunks(8, 64)
    assert ca.alloc(32) == (0, 0)
    assert ca.alloc(64) == (1, 0)
    ca.free((1, 0), 64)
    assert ca.alloc(32) == (1, 0), "chunk 1 fits it within its high-water mark; chunk 0 must grow"
    tie = target.allocator_chunks(8, 64)
    assert tie.alloc(64) == (0, 0) and tie.alloc(64) == (1, 0)
    tie.free((1, 0), 64)
    tie.free((0, 0), 64)
    assert tie.alloc(16) == (0, 0), "equal slack (48 in both chunks): the lower chunk"


@pytest.mark.invariant("ALLOC-007")
def test_last_block_reuse_is_a_signed_64_bit_value(target: Any) -> None:
    """A chunk of 2^63 + 64 bytes, freed: its one (last) block holds the whole high-water mark,
    so the slack of a request is 2^63 + 64 - size, taken as an int64. A slack of exactly 2^63
    is INT64_MIN, the search's starting value, which no chunk beats: a new chunk opens."""
    big = 2**63 + 64
    ca = target.allocator_chunks(8, SIZE_MAX)
    assert ca.alloc(big) == (0, 0)
    ca.free((0, 0), big)
    assert ca.free_blocks(0) == [(0, big)] and ca.chunk_max_sizes() == [big]
    assert ca.alloc(64) == (1, 0), "reuse 2^63 wraps to INT64_MIN and never wins"
    assert ca.free_blocks(0) == [(0, big)], "chunk 0 was left alone"
    # chunk 0's slack 2^63 + 8 wraps to INT64_MIN + 8: more growth than chunk 1's 56 bytes
    assert ca.alloc(56) == (1, 64), "an unwrapped slack would be non-negative and win"


@pytest.mark.invariant("ALLOC-010")
@pytest.mark.parametrize(
    ("frees", "blocks"),
    [
        ((1,), [(8, 8), (32, HALF - 32)]),
        ((1, 2), [(8, 16), (32, HALF - 32)]),  # joins the block that ends where it starts
        ((2, 1), [(8, 16), (32, HALF - 32)]),  # joins the block that starts where it ends
        ((1, 3), [(8, 8), (24, HALF - 24)]),  # grows the tail down; no touching neighbour
        ((1, 3, 2), [(8, HALF - 8)]),  # fills the gap: both neighbours become one block
        ((0, 2, 3), [(0, 8), (16, HALF - 16)]),  # joins a block and the tail behind it
        ((0, 2), [(0, 8), (16, 8), (32, HALF - 32)]),  # no neighbour: inserted in order
        ((2, 0), [(0, 8), (16, 8), (32, HALF - 32)]),
    ],
)
def test_freeing_merges_neighbours(
    target: Any, frees: tuple[int, ...], blocks: list[tuple[int, int]]
) -> None:
    """Regions r0..r3 = [0,8) [8,16) [16,24) [24,32) live, the free tail from 32."""
    ca = target.allocator_chunks(8, SIZE_MAX)
    regions = [ca.alloc(8) for _ in range(5)]
    ca.free(regions[4], 8)
    assert ca.free_blocks(0) == [(32, HALF - 32)]
    for k in frees:
        ca.free(regions[k], 8)
    got = ca.free_blocks(0)
    assert got == blocks, f"after freeing regions {frees}: blocks {got}, expected {blocks}"


@pytest.mark.invariant("ALLOC-013")
def test_reset_drops_every_chunk(target: Any) -> None:
    ca = target.allocator_chunks(8, 16)
    for _ in range(3):
        ca.alloc(16)
    ca.reset()
    assert ca.chunk_max_sizes() == []
    assert ca.alloc(8) == (0, 0) and ca.chunk_max_sizes() == [8]


# -- a state machine against a byte map ------------------------------------------------------


@dataclass
class ByteChunk:
    """One chunk as a byte map: ``used[i]`` is 1 while byte ``i`` belongs to a live region.
    Bytes past the map are free up to ``capacity`` (the 16th chunk is 2^63 bytes)."""

    capacity: int
    used: bytearray = field(default_factory=bytearray)
    high: int = 0

    def mark(self, start: int, size: int, value: int) -> None:
        if start + size > len(self.used):
            self.used.extend(b"\0" * (start + size - len(self.used)))
        for i in range(start, start + size):
            assert self.used[i] != value, f"byte {i} {'already live' if value else 'already free'}"
            self.used[i] = value

    def free_runs(self) -> list[tuple[int, int]]:
        """Maximal runs of free bytes: what the free list must be."""
        runs: list[tuple[int, int]] = []
        start = None
        for i, b in enumerate(self.used):
            if not b and start is None:
                start = i
            elif b and start is not None:
                runs.append((start, i - start))
                start = None
        tail = start if start is not None else len(self.used)
        if tail < self.capacity:
            runs.append((tail, self.capacity - tail))
        return runs


@dataclass
class ByteModel:
    """The chunk allocator's rules restated over byte maps: the free list is whatever is not
    live, so the model predicts each address without a free list of its own."""

    alignment: int
    max_size: int
    chunks: list[ByteChunk] = field(default_factory=list)

    def alloc(self, size: int) -> tuple[int, int]:
        size = _up(size, self.alignment)
        best: tuple[int, int] | None = None
        for c, ch in enumerate(self.chunks):  # non-last runs: best fit, restarting per chunk
            fitting = [r for r in ch.free_runs()[:-1] if r[1] >= size]
            if fitting:
                smallest = min(r[1] for r in fitting)
                best = (c, max(r[0] for r in fitting if r[1] == smallest))
        if best is None:  # last runs: least slack within the high-water mark, else least growth
            scored = []
            for c, ch in enumerate(self.chunks):
                runs = ch.free_runs()
                if runs and runs[-1][1] >= size:
                    scored.append((ch.high - runs[-1][0] - size, c, runs[-1][0]))
            fits = [sc for sc in scored if sc[0] >= 0]
            if fits:
                best = min(fits)[1:]
            elif scored:
                most = max(sc[0] for sc in scored)
                best = min(sc for sc in scored if sc[0] == most)[1:]
        if best is None:
            cap = HALF if len(self.chunks) == 15 else max(size, min(self.max_size, HALF))
            self.chunks.append(ByteChunk(cap))
            best = (len(self.chunks) - 1, 0)
        ch = self.chunks[best[0]]
        ch.mark(best[1], size, 1)
        ch.high = max(ch.high, best[1] + size)
        return best

    def free(self, addr: tuple[int, int], size: int) -> None:
        self.chunks[addr[0]].mark(addr[1], _up(size, self.alignment), 0)


class ChunkMachine(RuleBasedStateMachine):
    """Allocate, free a live region, reset; after every step the target's free lists and
    high-water marks equal the byte map's."""

    regions = Bundle("regions")

    def __init__(self, target: Any, alignment: int, max_size: int) -> None:
        super().__init__()
        self.ca = target.allocator_chunks(alignment, max_size)
        self.alignment, self.max_size = alignment, max_size
        self.model = ByteModel(alignment, max_size)
        self.epoch = 0  # regions from before a reset are stale

    @rule(target=regions, size=st.integers(1, 96))
    def alloc(self, size: int) -> tuple[int, tuple[int, int], int]:
        want = self.model.alloc(size)
        got = tuple(self.ca.alloc(size))
        assert got == want, f"alloc({size}) at {got}, the rules give {want}"
        return self.epoch, want, size

    @rule(region=consumes(regions))
    def free(self, region: tuple[int, tuple[int, int], int]) -> None:
        epoch, addr, size = region
        if epoch != self.epoch:
            return
        self.ca.free(addr, size)
        self.model.free(addr, size)

    @rule()
    def reset(self) -> None:
        self.ca.reset()
        self.model = ByteModel(self.alignment, self.max_size)
        self.epoch += 1

    @invariant()
    def free_lists_match(self) -> None:
        highs = self.ca.chunk_max_sizes()
        assert highs == [c.high for c in self.model.chunks], f"high-water marks {highs}"
        for c, ch in enumerate(self.model.chunks):
            got = self.ca.free_blocks(c)
            assert got == ch.free_runs(), (
                f"chunk {c}: free blocks {got}, the free bytes form {ch.free_runs()}"
            )


@pytest.mark.invariant("ALLOC-006", "ALLOC-007", "ALLOC-008", "ALLOC-009", "ALLOC-010", "ALLOC-011")
@pytest.mark.parametrize(
    ("alignment", "max_size"),
    [(1, 64), (8, 32), (16, 128), (4, SIZE_MAX)],
    ids=["align-1-max-64", "align-8-max-32", "align-16-max-128", "align-4-unbounded"],
)
def test_state_machine_against_a_byte_map(target: Any, alignment: int, max_size: int) -> None:
    class Machine(ChunkMachine):
        def __init__(self) -> None:
            super().__init__(target, alignment, max_size)

    run_state_machine_as_test(
        Machine, settings=settings(max_examples=ks.examples(60), stateful_step_count=50)
    )


@pytest.mark.requires("allocator.errors")
@pytest.mark.invariant("ALLOC-012", "ALLOC-033")
def test_free_block_limit(target: Any) -> None:
    ca = target.allocator_chunks(8, SIZE_MAX)
    regions = [ca.alloc(8) for _ in range(2 * 256)]
    for k in range(255):
        ca.free(regions[2 * k], 8)
    assert len(ca.free_blocks(0)) == 256, "255 holes and the tail"
    with (
        unchanged(lambda: (ca.free_blocks(0), ca.chunk_max_sizes()), "the chunk allocator"),
        raises_code("ALLOC_TOO_MANY_FREE_BLOCKS", what="the 257th free block"),
    ):
        ca.free(regions[2 * 255], 8)
    ca.free(regions[1], 8)  # merging needs no new block: still fine
    assert len(ca.free_blocks(0)) == 255


@pytest.mark.requires("allocator.errors")
@pytest.mark.invariant("ALLOC-014", "ALLOC-033")
def test_chunk_size_overflow(target: Any) -> None:
    ca = target.allocator_chunks(16, SIZE_MAX)
    ca.alloc(8)
    with unchanged(lambda: (ca.free_blocks(0), ca.chunk_max_sizes()), "the chunk allocator"):
        with raises_code("ALLOC_OVERFLOW", field="size", what="alloc"):
            ca.alloc(SIZE_MAX - 3)
        with raises_code("ALLOC_OVERFLOW", field="size", what="free"):
            ca.free((0, 0), SIZE_MAX)


@pytest.mark.requires("allocator.errors")
@pytest.mark.invariant("ALLOC-003")
@pytest.mark.parametrize("alignment", [0, 3, 12, 24, -8])
def test_chunk_alignment_must_be_a_power_of_two(target: Any, alignment: int) -> None:
    with raises_code("ALLOC_ALIGNMENT", field="alignment"):
        target.allocator_chunks(alignment, 64)


@pytest.mark.requires("allocator.errors")
@pytest.mark.invariant("ALLOC-034")
def test_released_or_missing_chunks_are_refused(target: Any) -> None:
    ca = target.allocator_chunks(8, 64)
    ca.alloc(8)
    for chunk in (1, 3, -1):  # one past the last, far past, and below the first
        with (
            unchanged(lambda: (ca.free_blocks(0), ca.chunk_max_sizes())),
            raises_code("ALLOC_STATE", field="chunk", what=f"a free in chunk {chunk} of 1"),
        ):
            ca.free((chunk, 0), 8)
    ca.release()
    for call in (lambda: ca.alloc(8), lambda: ca.free((0, 0), 8), ca.reset):
        with raises_code("ALLOC_STATE", what="after release"):
            call()
