"""The linear allocator (spec/allocator.md ALLOC-001..003, ALLOC-014)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.assertions import raises_code
from conformance.strategies import kernels as ks
from reference_impl.allocator.graph import SIZE_MAX

pytestmark = pytest.mark.requires("allocator.linear")


@pytest.mark.invariant("ALLOC-001")
@pytest.mark.parametrize(
    ("base", "offsets"),
    [(0, [0, 32, 64, 96]), (16, [16, 48, 80, 112]), (64, [0, 32, 64, 96])],
    ids=["aligned-base", "base-16", "base-64"],
)
def test_offsets_are_aligned_addresses(target: Any, base: int, offsets: list[int]) -> None:
    """Alignment 32, tensors of 4, 12, 32 and 20 bytes: ggml aligns base + offset, so a base
    of 16 starts the first tensor 16 bytes in."""
    ta = target.allocator_linear(256, 32, base)
    got = [ta.alloc(f"t{i}", size) for i, size in enumerate((4, 12, 32, 20))]
    assert got == offsets, f"base {base}: offsets {got}, ggml gives {offsets}"
    assert ta.offset == offsets[-1] + 32


@pytest.mark.invariant("ALLOC-001")
def test_an_empty_buffer_has_no_base_to_align(target: Any) -> None:
    """Decision D7: a zero-byte buffer has no memory, so its allocator starts at offset 0."""
    assert target.allocator_linear(0, 32, 16).offset == 0
    assert target.allocator_linear(0, 32, 16).alloc("empty", 0) == 0


@pytest.mark.invariant("ALLOC-001")
@settings(max_examples=ks.examples(40))
@given(
    align=st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128]),
    base=st.integers(0, 4096),
    sizes=st.lists(st.integers(0, 300), max_size=12),
)
def test_successive_tensors_pack_in_order(
    target: Any, align: int, base: int, sizes: list[int]
) -> None:
    start = (-base) % align
    ta = target.allocator_linear(start + sum(-(-s // align) * align for s in sizes), align, base)
    expect = start
    for i, size in enumerate(sizes):
        got = ta.alloc(f"t{i}", size)
        assert got == expect, (
            f"tensor {i} ({size} B, align {align}, base {base}) at {got}, not {expect}"
        )
        assert (base + got) % align == 0
        expect += -(-size // align) * align
    assert ta.offset == expect


@pytest.mark.requires("allocator.errors")
@pytest.mark.invariant("ALLOC-002", "ALLOC-033")
def test_out_of_space_changes_nothing(target: Any) -> None:
    ta = target.allocator_linear(64, 16)
    assert ta.alloc("a", 40) == 0
    with raises_code(
        "ALLOC_OUT_OF_SPACE", field="size", what="17 bytes padded to 32, 16 left"
    ) as raised:
        ta.alloc("wide", 17)
    # the message names the tensor, its padded size (32) and the bytes left (64 - 48 = 16)
    msg = str(raised.value)
    numbers = {int(n) for n in re.findall(r"\d+", msg)}
    assert "wide" in msg and {32, 16} <= numbers, f"ALLOC_OUT_OF_SPACE message {msg!r}"
    assert ta.offset == 48, "a failed allocation moved the offset"
    assert ta.alloc("c", 16) == 48, "the space left is still usable"


BAD_ALIGNMENTS = pytest.mark.parametrize(
    "alignment", [0, 3, 12, 24, -8]
)  # shared by the areas' files


@pytest.mark.requires("allocator.errors")
@pytest.mark.invariant("ALLOC-003")
@BAD_ALIGNMENTS
def test_linear_alignment_must_be_a_power_of_two(target: Any, alignment: int) -> None:
    with raises_code("ALLOC_ALIGNMENT", field="alignment"):
        target.allocator_linear(64, alignment)


@pytest.mark.requires("allocator.errors")
@pytest.mark.invariant("ALLOC-014")
def test_linear_size_overflow(target: Any) -> None:
    ta = target.allocator_linear(SIZE_MAX, 16)
    with raises_code("ALLOC_OVERFLOW", what="SIZE_MAX - 3 rounded up to 16"):
        ta.alloc("huge", SIZE_MAX - 3)
    assert ta.offset == 0
    # a round-up that lands exactly on SIZE_MAX does not overflow: it fills the whole buffer
    whole = target.allocator_linear(SIZE_MAX, 1)
    assert whole.alloc("all", SIZE_MAX) == 0 and whole.offset == SIZE_MAX
