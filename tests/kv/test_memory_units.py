"""Unit tests of memory helpers that the conformance suite reaches only indirectly."""

from __future__ import annotations

import pytest

from conformance.strategies.kv import ubatch_from_lists
from reference_impl.kv.cache import KVCacheConfig
from reference_impl.memory.coordinator import make_memory, rollback_positions


def test_make_memory_rejects_unknown_kinds_and_options() -> None:
    cfg = KVCacheConfig(kv_size=8)
    with pytest.raises(ValueError, match="unknown memory kind"):
        make_memory("paged", cfg)
    with pytest.raises(ValueError, match="unknown options"):
        make_memory("kv", cfg, n_rs_seq=2)
    with pytest.raises(ValueError, match="needs a KVCacheConfig"):
        make_memory("hybrid")
    assert make_memory("recurrent", n_seq_max=3).size == 3


def test_rollback_positions_use_every_sequence() -> None:
    ub = ubatch_from_lists([4, 2, 3], [[1], [1, 0], [0]])
    assert rollback_positions(ub) == {0: 2, 1: 2}
