"""KQ mask: named scenarios, each checked entry by entry against the brute-force model and
pinned by a snapshot (snapshots/conformance/kv/test_mask.ambr)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pytest

from conformance.kv.helpers import expect_code, place, place_run
from conformance.strategies.kv import (
    MCell,
    ModelCache,
    ModelConfig,
    grouped,
    run_of,
    ubatch_from_lists,
)


@dataclass(frozen=True)
class Scenario:
    """``setup`` fills the cache; ``ubatch`` is then applied and its mask built."""

    config: dict[str, Any]
    setup: Callable[[Any], None]
    tokens: list[tuple[int, list[int]]]  # (pos, seq ids) of the ubatch
    groups: int = 0  # sequence-major groups (multi-stream)
    sections: list[list[int]] | None = None  # 2-D positions (M-RoPE), replaces pos
    causal: bool = True
    alibi: bool = False

    def ubatch(self) -> Any:
        pos: Any = self.sections if self.sections else [p for p, _ in self.tokens]
        return ubatch_from_lists(pos, [s for _, s in self.tokens], n_groups=self.groups or None)


def _nothing(c: Any) -> None:
    pass


def _prefix(seq: int, n: int) -> Callable[[Any], None]:
    return lambda c: place_run(c, seq, 0, n)


def _shared_prefix(c: Any) -> None:
    place_run(c, 0, 0, 3)
    c.seq_cp(0, 1, -1, -1)
    place_run(c, 0, 3, 2)


def _holes(c: Any) -> None:
    place_run(c, 0, 0, 6)
    c.seq_rm(0, 1, 3)
    place_run(c, 1, 0, 2)  # fills cells 1 and 2 (head moved back)


def _two_streams(c: Any) -> None:
    place_run(c, 0, 0, 3)
    place_run(c, 1, 0, 1)


def _mrope(c: Any) -> None:
    # an "image" of 2x2 patches at temporal position 1: (t, y, x, 0)
    place(
        c,
        ubatch_from_lists([[0, 1, 1, 1, 1], [0, 0, 0, 1, 1], [0, 0, 1, 0, 1], [0] * 5], [[0]] * 5),
    )


def _shifted(c: Any) -> None:
    place_run(c, 0, 0, 6)
    c.seq_rm(0, 2, 4)
    c.seq_add(0, 4, -1, -2)  # positions 4, 5 -> 2, 3


SCENARIOS: dict[str, Scenario] = {
    "fresh_prompt": Scenario({"kv_size": 8}, _nothing, [(p, [0]) for p in range(4)]),
    "continuation": Scenario({"kv_size": 8}, _prefix(0, 3), [(3, [0]), (4, [0])]),
    "two_sequences_interleaved": Scenario(
        {"kv_size": 8, "n_seq_max": 2, "unified": True},
        _nothing,
        [(0, [0]), (0, [1]), (1, [0]), (1, [1]), (2, [1])],
    ),
    "shared_prefix": Scenario(
        {"kv_size": 12, "n_seq_max": 2, "unified": True},
        _shared_prefix,
        [(3, [1]), (5, [0]), (4, [1])],
    ),
    "coupled_token_first_seq_only": Scenario(
        {"kv_size": 8, "n_seq_max": 2, "unified": True},
        _prefix(1, 2),
        [(0, [0, 1]), (2, [1, 0])],
    ),
    "holes_reused": Scenario(
        {"kv_size": 8, "n_seq_max": 2, "unified": True}, _holes, [(6, [0]), (2, [1])]
    ),
    "non_causal": Scenario(
        {"kv_size": 8}, _prefix(0, 2), [(2, [0]), (3, [0]), (4, [0])], causal=False
    ),
    "swa_standard": Scenario(
        {"kv_size": 10, "n_swa": 3, "swa_type": 1}, _prefix(0, 4), [(4, [0]), (5, [0]), (6, [0])]
    ),
    "swa_chunked": Scenario(
        {"kv_size": 10, "n_swa": 4, "swa_type": 2}, _prefix(0, 3), [(p, [0]) for p in range(3, 9)]
    ),
    "swa_symmetric_non_causal": Scenario(
        {"kv_size": 8, "n_swa": 4, "swa_type": 3},
        _nothing,
        [(p, [0]) for p in range(6)],
        causal=False,
    ),
    "two_streams": Scenario(
        {"kv_size": 6, "n_seq_max": 2},
        _two_streams,
        [(3, [0]), (4, [0]), (1, [1]), (2, [1])],
        groups=2,
    ),
    "mrope_2d": Scenario(
        {"kv_size": 8, "n_pos_per_embd": 4},
        _mrope,
        [(1, [0]), (1, [0]), (2, [0])],
        sections=[[1, 1, 2], [0, 1, 0], [1, 1, 0], [0, 0, 0]],
    ),
    "alibi": Scenario({"kv_size": 8}, _prefix(0, 3), [(3, [0]), (4, [0])], alibi=True),
    "after_shift": Scenario({"kv_size": 8}, _shifted, [(4, [0])]),
}


def _model_of(target_cache: Any, cfg: dict[str, Any]) -> ModelCache:
    """The brute-force model loaded with the target cache's cells (state snapshot)."""
    m = ModelCache(
        ModelConfig(
            kv_size=cfg["kv_size"],
            n_seq_max=cfg.get("n_seq_max", 1),
            unified=cfg.get("unified", False),
            n_swa=cfg.get("n_swa", 0),
            swa_type=cfg.get("swa_type", 0),
        )
    )
    for st_i, s in enumerate(target_cache.state().streams):
        for i, (p, seqs, ext) in enumerate(zip(s.pos, s.seqs, s.ext)):
            if p != -1:
                m.cells[st_i][i] = MCell(p, set(seqs), p, tuple(ext))
    return m


@pytest.mark.invariant("KV-023", "KV-024", "KV-011")
@pytest.mark.requires("kv.cache", "kv.mask")
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_mask_scenario(target: Any, snapshot: Any, name: str) -> None:
    sc = SCENARIOS[name]
    cache = target.new_kv_cache(**sc.config)
    sc.setup(cache)
    ub = sc.ubatch()
    slot = place(cache, ub)
    n_kv = cache.get_n_kv(slot)
    mask = target.kv_mask(cache, ub, n_kv, causal_attn=sc.causal, use_alibi=sc.alibi)
    n_ms = 1 if sc.groups == 0 else sc.groups
    assert tuple(mask.shape) == (n_ms, len(sc.tokens) // n_ms, n_kv)
    assert str(mask.dtype) == "torch.float32"
    ext = None
    if sc.sections:
        ext = [(sc.sections[2][i], sc.sections[1][i]) for i in range(len(sc.tokens))]
    want = _model_of(cache, sc.config).mask(
        [(p, s) for p, s in sc.tokens],
        sc.groups or 1,
        n_kv,
        ext=ext,
        causal=sc.causal,
        alibi=sc.alibi,
    )
    assert mask.tolist() == want
    assert mask == snapshot


@pytest.mark.invariant("KV-024", "KV-011")
@pytest.mark.requires("kv.cache", "kv.mask")
def test_mask_is_padded_to_256_columns(target: Any) -> None:
    cache = target.new_kv_cache(kv_size=600)
    place_run(cache, 0, 0, 250)
    ub = run_of(0, 250, 10)
    slot = place(cache, ub)
    n_kv = cache.get_n_kv(slot)
    assert n_kv == 512  # 260 used cells -> two blocks of 256
    mask = target.kv_mask(cache, ub, n_kv)
    assert tuple(mask.shape) == (1, 10, 512)
    assert bool((mask[0, :, 260:] == float("-inf")).all())
    assert mask[0, 9, :260].tolist() == [0.0] * 260
    cache.seq_rm(0, 255, -1)
    assert cache.get_n_kv(slot) == 256
    assert target.new_kv_cache(kv_size=100).get_n_kv(slot) == 100


@pytest.mark.invariant("KV-002", "KV-011")
@pytest.mark.requires("kv.cache")
def test_n_kv_follows_the_last_used_cell_not_the_count(target: Any) -> None:
    """used counts non-empty cells; n_kv pads the index of the last one + 1: a hole in the
    middle keeps n_kv, removing the tail shrinks it."""
    cache = target.new_kv_cache(kv_size=600)
    slot = place_run(cache, 0, 0, 300)
    used = lambda: cache.state().streams[0].used  # noqa: E731
    assert (used(), cache.get_n_kv(slot)) == (300, 512)
    cache.seq_rm(0, 10, 290)  # cells 10..289 empty; cells 290..299 still used
    assert (used(), cache.get_n_kv(slot)) == (20, 512), "a hole does not move the last used cell"
    cache.seq_rm(0, 295, -1)
    assert (used(), cache.get_n_kv(slot)) == (15, 512), "cell 294 is still the last used one"
    cache.seq_rm(0, 290, -1)  # the last used cell is now 9, far below the removed ones
    assert (used(), cache.get_n_kv(slot)) == (10, 256)
    place_run(cache, 0, 10, 280)  # refills 10..289 (the head moved on), so 289 is the last
    assert (used(), cache.get_n_kv(slot)) == (290, 512)
    cache.clear(data=False)  # no used cell is left, so no last used one either
    slot = place_run(cache, 0, 0, 1)
    assert (used(), cache.get_n_kv(slot)) == (1, 256)


@pytest.mark.invariant("KV-002", "KV-011")
@pytest.mark.requires("kv.cache")
def test_n_kv_after_removing_one_cell_at_the_tail(target: Any) -> None:
    """Cells 0..257 used: emptying cell 256 alone leaves 257 the last used one (n_kv 512);
    emptying cell 257 alone then makes 255 the last used one (n_kv 256)."""
    cache = target.new_kv_cache(kv_size=600)
    slot = place_run(cache, 0, 0, 258)
    assert cache.get_n_kv(slot) == 512
    cache.seq_rm(0, 256, 257)
    assert cache.get_n_kv(slot) == 512, "cell 257 is still the last used one"
    cache.seq_rm(0, 257, -1)
    assert cache.get_n_kv(slot) == 256, "cell 255 is now the last used one"


@pytest.mark.invariant("KV-002", "KV-011", "KV-016")
@pytest.mark.requires("kv.cache")
def test_n_kv_of_a_stream_copy_destination(target: Any) -> None:
    """A cross-stream copy empties the destination stream first: its n_kv then follows the
    copied cells, not the 300 cells it held before."""
    cache = target.new_kv_cache(kv_size=600, n_seq_max=2)
    slot = place_run(cache, 1, 0, 300)
    place_run(cache, 0, 0, 5)
    assert cache.get_n_kv(slot) == 512
    cache.seq_cp(0, 1, -1, -1)
    assert (cache.state().streams[1].used, cache.get_n_kv(slot)) == (5, 256)


@pytest.mark.invariant("KV-024")
@pytest.mark.requires("kv.cache", "kv.mask")
def test_mask_width_is_any_n_kv_up_to_kv_size(target: Any) -> None:
    """One column or all of them: the mask is the same entries cut to n_kv columns."""
    cache = target.new_kv_cache(kv_size=8)
    place_run(cache, 0, 0, 3)
    ub = run_of(0, 3, 2)
    place(cache, ub)
    full = target.kv_mask(cache, ub, 8)
    assert tuple(full.shape) == (1, 2, 8)
    for n_kv in (1, 5):
        mask = target.kv_mask(cache, ub, n_kv)
        assert mask.tolist() == full[:, :, :n_kv].tolist(), f"n_kv {n_kv}"
    for n_kv in (0, 9):
        expect_code(cache, "KV_N_KV_RANGE", target.kv_mask, cache, ub, n_kv, field="n_kv")


@pytest.mark.invariant("KV-024")
@pytest.mark.requires("kv.cache", "kv.mask")
def test_mask_rows_follow_stream_groups(target: Any) -> None:
    cache = target.new_kv_cache(kv_size=8, n_seq_max=3)
    place_run(cache, 2, 0, 2)
    ub = grouped([(0, 0, 2), (2, 2, 2)])
    slot = place(cache, ub)
    assert list(slot.strm) == [0, 2]
    mask = target.kv_mask(cache, ub, cache.get_n_kv(slot))
    inf = float("-inf")
    assert mask[0].tolist() == [[0.0, inf] + [inf] * 6, [0.0, 0.0] + [inf] * 6]
    assert mask[1].tolist() == [[0.0] * 3 + [inf] * 5, [0.0] * 4 + [inf] * 4]


@pytest.mark.invariant("KV-024")
@pytest.mark.requires("kv.cache", "kv.mask")
def test_mask_rejects_ubatch_without_equal_stream_blocks(target: Any) -> None:
    """A multi-stream mask has one block per stream group: a ubatch declaring no group, or
    groups that do not split its tokens evenly, is refused, not divided by."""
    cache = target.new_kv_cache(kv_size=8, n_seq_max=2)
    ub = grouped([(0, 0, 2), (1, 0, 2)])
    place(cache, ub)
    groupless = replace(ub, n_seqs_unq=0)
    expect_code(cache, "KV_UBATCH_LAYOUT", target.kv_mask, cache, groupless, 8, field="n_seqs_unq")
    uneven = ubatch_from_lists([2, 3, 2], [[0], [0], [1]], n_groups=2)
    expect_code(cache, "KV_UBATCH_LAYOUT", target.kv_mask, cache, uneven, 8, field="n_seqs_unq")
