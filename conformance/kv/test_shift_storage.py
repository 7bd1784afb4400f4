"""K-shift bookkeeping and update(), stream copies of K/V, and the per-layer K/V storage."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from conformance.assertions import raises_code
from conformance.kv.helpers import expect_code, place, place_run, stream
from conformance.strategies.kv import grouped, run_of


@pytest.mark.invariant("KV-025", "KV-026")
@pytest.mark.requires("kv.cache")
def test_shifts_accumulate_and_update_consumes_them_once(target: Any) -> None:
    c = target.new_kv_cache(kv_size=8)
    place_run(c, 0, 0, 6)
    assert stream(c).has_shift is False
    c.seq_add(0, 2, -1, 3)  # 2..5 -> 5..8
    c.seq_add(0, 6, -1, -1)  # 6, 7, 8 (cells 3..5) -> 5, 6, 7
    c.seq_div(0, 5, -1, 2)  # 5, 5, 6, 7 -> 2, 2, 3, 3
    s = stream(c)
    assert s.pos[:6] == (0, 1, 2, 2, 3, 3)
    assert [p - sh for p, sh in zip(s.pos[:6], s.shift[:6])] == [0, 1, 2, 3, 4, 5]
    assert s.has_shift is True
    assert c.k_shift()[0].tolist() == [0, 0, 0, -1, -1, -2, 0, 0]
    seen: list[list[int]] = []
    res = c.update(lambda layer, k, shift: seen.append(shift[0].tolist()))
    assert res.shifted is True and tuple(res.copied) == ()
    assert seen == []  # no layers: bookkeeping only
    s = stream(c)
    assert s.shift == (0,) * 8 and s.has_shift is False and s.pos[:6] == (0, 1, 2, 2, 3, 3)
    res = c.update()
    assert res.shifted is False


@pytest.mark.invariant("KV-026")
@pytest.mark.requires("kv.cache", "kv.storage")
def test_update_hands_shifts_to_the_rotation_callback(target: Any) -> None:
    c = target.new_kv_cache(kv_size=4, n_seq_max=2, n_layer=2, n_head_kv=1, head_dim=2)
    place_run(c, 0, 0, 3)
    c.seq_add(0, 1, -1, 2)
    calls: list[tuple[int, tuple[int, ...], list[list[int]]]] = []

    def rotate(layer: int, k: torch.Tensor, shift: torch.Tensor) -> None:
        calls.append((layer, tuple(k.shape), shift.tolist()))

    res = c.update(rotate)
    assert res.shifted is True
    assert calls == [
        (0, (2, 4, 1, 2), [[0, 2, 2, 0], [0, 0, 0, 0]]),
        (1, (2, 4, 1, 2), [[0, 2, 2, 0], [0, 0, 0, 0]]),
    ]
    calls.clear()
    c.update(rotate)
    assert calls == []
    # without a callback the pending shifts are dropped, the keys are left as they are
    c.seq_add(0, -1, -1, 1)
    keys = [k.clone() for k in c.k]
    res = c.update()
    assert res.shifted is True and stream(c).shift == (0,) * 4 and not stream(c).has_shift
    assert all(torch.equal(a, b) for a, b in zip(c.k, keys))


@pytest.mark.invariant("KV-026", "KV-016")
@pytest.mark.requires("kv.cache", "kv.storage")
def test_stream_copy_happens_at_update_before_the_shift(target: Any) -> None:
    c = target.new_kv_cache(kv_size=4, n_seq_max=2, n_layer=1, n_head_kv=1, head_dim=1)
    slot = place(c, run_of(0, 0, 2))
    c.write_kv(0, slot, torch.tensor([[[1.0]], [[2.0]]]), torch.tensor([[[3.0]], [[4.0]]]))
    c.seq_add(0, -1, -1, 1)
    c.seq_cp(0, 1, -1, -1)
    assert c.k[0][1, :2, 0, 0].tolist() == [0.0, 0.0]  # nothing copied yet
    order: list[str] = []

    def rotate(layer: int, k: torch.Tensor, shift: torch.Tensor) -> None:
        order.append(f"shift after copy: {k[1, :2, 0, 0].tolist()}")
        assert shift.tolist() == [[1, 1, 0, 0], [1, 1, 0, 0]]

    res = c.update(rotate)
    assert tuple(res.copied) == ((0, 1),)
    assert order == ["shift after copy: [1.0, 2.0]"]
    assert c.kv_view(0, 1, 2)[1][:, 0, 0].tolist() == [3.0, 4.0]


@pytest.mark.invariant("KV-027")
@pytest.mark.requires("kv.cache", "kv.storage")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_storage_layout_write_and_views(target: Any, dtype: torch.dtype) -> None:
    c = target.new_kv_cache(kv_size=6, n_seq_max=2, n_layer=2, n_head_kv=2, head_dim=3, dtype=dtype)
    for t in (*c.k, *c.v):
        assert tuple(t.shape) == (2, 6, 2, 3) and t.is_contiguous() and t.dtype == dtype
    place_run(c, 1, 0, 1)
    ub = grouped([(0, 0, 2), (1, 1, 2)])
    slot = place(c, ub)
    assert [list(ix) for ix in slot.idxs] == [[0, 1], [1, 2]]
    k = torch.arange(4 * 2 * 3, dtype=torch.float32).reshape(4, 2, 3)
    v = -k
    c.write_kv(1, slot, k, v)
    kv0, vv0 = c.kv_view(1, 0, 2)
    kv1, vv1 = c.kv_view(1, 1, 3)
    assert tuple(kv0.shape) == (2, 2, 3) and tuple(kv1.shape) == (3, 2, 3)
    assert torch.equal(kv0.float(), k[0:2]) and torch.equal(vv0.float(), v[0:2])
    assert torch.equal(kv1[1:3].float(), k[2:4]) and torch.equal(vv1[1:3].float(), v[2:4])
    assert float(kv1[0].abs().sum()) == 0.0  # cell 0 of stream 1 was never written
    for n_kv in (1, 6):  # the bounds of [1, kv_size]
        kn, vn = c.kv_view(1, 0, n_kv)
        assert tuple(kn.shape) == tuple(vn.shape) == (n_kv, 2, 3)
        assert torch.equal(kn[:1].float(), k[:1]) and torch.equal(vn[:1].float(), v[:1])
    assert float(c.k[0].abs().sum()) == 0.0  # other layer untouched
    kv0[0, 0, 0] = 99.0  # a view, not a copy
    assert float(c.k[1][0, 0, 0, 0]) == 99.0
    c.clear(True)
    assert all(float(t.abs().sum()) == 0.0 for t in (*c.k, *c.v))


@pytest.mark.invariant("KV-027")
@pytest.mark.requires("kv.cache", "kv.storage")
@pytest.mark.parametrize(
    ("given", "heads_dim"), [({}, (1, 1)), ({"head_dim": 3}, (1, 3)), ({"n_head_kv": 2}, (2, 1))]
)
def test_storage_defaults(target: Any, given: dict[str, int], heads_dim: tuple[int, int]) -> None:
    """``n_head_kv``, ``head_dim`` and ``dtype`` left out mean 1, 1 and float32 (decision D6)."""
    c = target.new_kv_cache(kv_size=5, n_layer=2, **given)
    for t in (*c.k, *c.v):
        assert (tuple(t.shape), t.dtype) == ((1, 5, *heads_dim), torch.float32), given


@pytest.mark.invariant("KV-027")
@pytest.mark.requires("kv.cache", "kv.storage")
@pytest.mark.parametrize(
    "bad",
    [
        {"n_layer": -1},
        {"n_head_kv": 0},
        {"head_dim": 0},
        {"n_head_kv": -2},
        {"head_dim": -1},
        {"dtype": torch.bfloat16},
        {"dtype": torch.float64},
    ],
)
def test_storage_bad_config(target: Any, bad: dict[str, Any]) -> None:
    """Each bad storage argument alone (the others valid, with layers) is refused."""
    config: dict[str, Any] = {"kv_size": 4, "n_layer": 2, "n_head_kv": 2, "head_dim": 2, **bad}
    with raises_code("KV_CONFIG"):
        target.new_kv_cache(**config)


@pytest.mark.invariant("KV-027")
@pytest.mark.requires("kv.cache", "kv.storage")
def test_storage_bad_arguments(target: Any) -> None:
    c = target.new_kv_cache(kv_size=4, n_layer=2, n_head_kv=1, head_dim=2)
    slot = place(c, run_of(0, 0, 2))
    # a negative layer or stream is out of range, not an index from the end
    for layer in (-1, 2):
        expect_code(c, "KV_LAYER_RANGE", c.kv_view, layer, 0, 2)
    for strm in (-1, 1):
        expect_code(c, "KV_STREAM_RANGE", c.kv_view, 0, strm, 2)
    kv_before = [t.clone() for t in (*c.k, *c.v)]
    for layer in (-1, 2):  # valid slot and rows: only the layer is wrong, nothing is written
        rows = torch.ones(2, 1, 2)
        expect_code(c, "KV_LAYER_RANGE", c.write_kv, layer, slot, rows, rows)
    assert all(torch.equal(a, b) for a, b in zip(kv_before, (*c.k, *c.v)))
    for n_kv in (5, 0, -1):  # outside [1, kv_size], named as kv_mask names it (KV-024)
        expect_code(c, "KV_N_KV_RANGE", c.kv_view, 0, 0, n_kv, field="n_kv")
    expect_code(
        c, "KV_SLOT_MISMATCH", c.write_kv, 0, slot, torch.zeros(3, 1, 2), torch.zeros(3, 1, 2)
    )
    # A slot whose cells cannot take the rows is refused whatever the row count, before any
    # K/V row is written: no group, groups and streams not paired, an empty group, groups of
    # unequal size, a repeated cell, a cell outside the stream.
    make = type(slot)
    malformed = [
        make(strm=(0,), idxs=()),
        make(strm=(), idxs=()),
        make(strm=(), idxs=((2, 3),)),
        make(strm=(0,), idxs=((),)),
        make(strm=(0, 0), idxs=((2, 3), (1,))),
        make(strm=(0,), idxs=((2, 2),)),
        make(strm=(0,), idxs=((3, 4),)),
        make(strm=(0,), idxs=((-1, 2),)),
    ]
    before = [t.clone() for t in c.kv_view(0, 0, 4)]
    for bad in malformed:
        for n in (0, 1, 2, 3):
            rows = torch.ones(n, 1, 2)
            expect_code(c, "KV_SLOT_MISMATCH", c.write_kv, 0, bad, rows, rows)
    assert all(torch.equal(a, b) for a, b in zip(before, c.kv_view(0, 0, 4)))
