"""Allocating a context's tensors (spec/allocator.md ALLOC-032)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.assertions import raises_code
from conformance.strategies import kernels as ks
from reference_impl.allocator.graph import SIZE_MAX, Tensor
from reference_impl.allocator.planner import BufferType

pytestmark = pytest.mark.requires("allocator.ctx_tensors")


def _t(name: str, size: int, **kw: Any) -> Tensor:
    return Tensor(name, size, **kw)


@pytest.mark.invariant("ALLOC-032")
def test_buffers_split_at_the_maximum_size(target: Any) -> None:
    """Max 16, alignment 8: tensors of 8, 8, 12, 4 and 24 bytes make buffers of 16 (two
    tensors), 16, 8 and 24 (the oversized tensor on its own)."""
    buft = BufferType("dummy", 8, 16)
    tensors = [_t("a", 8), _t("b", 8), _t("c", 12), _t("d", 4), _t("e", 24)]
    got = target.allocator_ctx_tensors(tensors, buft)
    assert got.buffer_sizes == (16, 16, 8, 24)
    assert got.placements == {"a": (0, 0), "b": (0, 8), "c": (1, 0), "d": (2, 0), "e": (3, 0)}
    assert target.allocator_ctx_tensors_size(tensors, buft) == 64
    # alignment 1: a buffer holding a single byte is already non-empty, so it closes too
    tiny = [_t("a", 1), _t("b", 16)]
    got = target.allocator_ctx_tensors(tiny, BufferType("dummy", 1, 16))
    assert got.buffer_sizes == (1, 16) and got.placements == {"a": (0, 0), "b": (1, 0)}


@pytest.mark.invariant("ALLOC-032")
def test_views_and_tensors_with_data(target: Any) -> None:
    buft = BufferType("dummy", 32, SIZE_MAX)
    tensors = [
        _t("w", 40, has_data=True),
        _t("a", 20),
        _t("v", 8, op="VIEW", src=("a",), view_src="a", view_offs=12),
        _t("b", 4),
        _t("wv", 8, op="VIEW", src=("w",), view_src="w", view_offs=8),
    ]
    got = target.allocator_ctx_tensors(tensors, buft)
    assert got.buffer_sizes == (64,)
    assert got.placements == {"w": None, "a": (0, 0), "v": (0, 12), "b": (0, 32), "wv": None}


@pytest.mark.invariant("ALLOC-032")
def test_views_after_an_oversized_tensor_belong_to_no_buffer(target: Any) -> None:
    """Max 16: the 24-byte tensor closes its own buffer when the next tensor comes, and the
    view and the tensor with data after it start a buffer that never gets a byte, so neither is
    placed (ggml never initializes them); every tensor is still listed."""
    buft = BufferType("dummy", 8, 16)
    tensors = [
        _t("a", 24),
        _t("v", 8, op="VIEW", src=("a",), view_src="a", view_offs=8),
        _t("w", 8, has_data=True),
    ]
    got = target.allocator_ctx_tensors(tensors, buft)
    assert got.buffer_sizes == (24,)
    assert got.placements == {"a": (0, 0), "v": None, "w": None}


@pytest.mark.invariant("ALLOC-032")
def test_nothing_to_place_makes_no_buffer(target: Any) -> None:
    buft = BufferType("dummy", 8, 64)
    tensors = [_t("w", 40, has_data=True), _t("v", 8, op="VIEW", src=("w",), view_src="w")]
    assert target.allocator_ctx_tensors(tensors, buft) is None
    assert target.allocator_ctx_tensors([], buft) is None
    assert target.allocator_ctx_tensors_size(tensors, buft) == 0


@pytest.mark.invariant("ALLOC-032")
@settings(max_examples=ks.examples(40))
@given(
    sizes=st.lists(st.integers(1, 100), max_size=12),
    alignment=st.sampled_from([1, 4, 8, 32]),
    max_size=st.sampled_from([16, 64, 100, 256, SIZE_MAX]),
)
def test_packing_rule(target: Any, sizes: list[int], alignment: int, max_size: int) -> None:
    buft = BufferType("dummy", alignment, max_size)
    tensors = [_t(f"t{i}", s) for i, s in enumerate(sizes)]
    got = target.allocator_ctx_tensors(tensors, buft)
    total = target.allocator_ctx_tensors_size(tensors, buft)
    if not sizes:
        assert got is None and total == 0
        return
    want_sizes: list[int] = []
    want: dict[str, tuple[int, int] | None] = {}
    cur = 0
    for t in tensors:
        padded = -(-t.size // alignment) * alignment
        if cur and cur + padded > max_size:
            want_sizes.append(cur)
            cur = 0
        want[t.name] = (len(want_sizes), cur)
        cur += padded
    want_sizes.append(cur)
    assert got.buffer_sizes == tuple(want_sizes)
    assert got.placements == want
    assert total == sum(want_sizes)


@pytest.mark.requires("allocator.errors")
@pytest.mark.invariant("ALLOC-032")
def test_an_allocating_context_is_refused(target: Any) -> None:
    buft = BufferType("dummy", 8, 64)
    with raises_code("ALLOC_CONTEXT_ALLOCATED", field="no_alloc"):
        target.allocator_ctx_tensors([_t("a", 8)], buft, no_alloc=False)
    with raises_code("ALLOC_CONTEXT_ALLOCATED", field="no_alloc"):
        target.allocator_ctx_tensors_size([_t("a", 8)], buft, no_alloc=False)


@pytest.mark.requires("allocator.errors")
@pytest.mark.invariant("ALLOC-003", "ALLOC-032")
@pytest.mark.parametrize("alignment", [0, 3, 12, 24, -8])
def test_context_alignment_must_be_a_power_of_two(target: Any, alignment: int) -> None:
    """The buffer type's alignment is refused even when no tensor needs memory (no buffer
    would be made) and in the size-only form (which makes no buffer at all)."""
    buft = BufferType("dummy", alignment, 64)
    for tensors in ([_t("a", 8), _t("b", 12)], [_t("w", 40, has_data=True)], []):
        with raises_code("ALLOC_ALIGNMENT", field="alignment"):
            target.allocator_ctx_tensors(tensors, buft)
        with raises_code("ALLOC_ALIGNMENT", field="alignment"):
            target.allocator_ctx_tensors_size(tensors, buft)


@pytest.mark.requires("allocator.errors")
@pytest.mark.invariant("ALLOC-032", "ALLOC-014")
def test_a_buffer_may_hold_exactly_size_max_bytes(target: Any) -> None:
    """Alignment 1, no maximum: tensors of SIZE_MAX - 1 and 1 bytes fill one buffer of exactly
    SIZE_MAX bytes, which is still a size_t. A size rounded past SIZE_MAX overflows, and so
    does the size-only total of two buffers (SIZE_MAX and 1 bytes) that each fit."""
    buft = BufferType("byte", 1, SIZE_MAX)
    full = [_t("a", SIZE_MAX - 1), _t("b", 1)]
    assert target.allocator_ctx_tensors_size(full, buft) == SIZE_MAX
    got = target.allocator_ctx_tensors(full, buft)
    assert got.buffer_sizes == (SIZE_MAX,), "a buffer of exactly SIZE_MAX bytes was refused"
    assert got.placements == {"a": (0, 0), "b": (0, SIZE_MAX - 1)}
    with raises_code("ALLOC_OVERFLOW", field="size", what="rounding SIZE_MAX up to 2"):
        target.allocator_ctx_tensors_size([_t("a", SIZE_MAX)], BufferType("two", 2, SIZE_MAX))
    two = [_t("a", SIZE_MAX), _t("b", 1)]
    assert target.allocator_ctx_tensors(two, buft).buffer_sizes == (SIZE_MAX, 1)
    with raises_code("ALLOC_OVERFLOW", field="size", what="a total of SIZE_MAX + 1"):
        target.allocator_ctx_tensors_size(two, buft)
