"""Replayable operation sequences (the ones a llama.cpp differential run uses): the target's
observations after each operation must equal the brute-force model's."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given

from conformance.strategies.kv import ModelConfig, model_observations, op_sequences, replay

CONFIGS = [
    ModelConfig(kv_size=16, n_seq_max=3, unified=True),
    ModelConfig(kv_size=8, n_seq_max=2, unified=False),
    ModelConfig(kv_size=8, n_seq_max=2, unified=True, n_swa=3, swa_type=1),
]


@pytest.mark.invariant("KV-001", "KV-012", "KV-014", "KV-018")
@pytest.mark.requires("kv.cache")
@pytest.mark.parametrize("cfg", CONFIGS, ids=["unified", "streams", "swa"])
def test_replay_matches_model(target: Any, cfg: ModelConfig) -> None:
    @given(ops=op_sequences(cfg))
    def check(ops: Any) -> None:
        cache = target.new_kv_cache(**cfg.as_kwargs())
        got = replay(cache, ops, cfg.n_seq_max)
        want = model_observations(cfg, ops)
        assert len(got) == len(want) == len(ops)
        for i, (g, w) in enumerate(zip(got, want)):
            assert g == w, f"after op {i} {ops[i].as_dict()}: {g} != {w}"

    check()
