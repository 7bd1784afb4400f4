"""The decoupled attention a decode step computes (spec/decoupled.md DBA-001, DBA-002), on
every decode path the target offers."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch

from conformance.kernels import _cases, _oracle, _tolerance
from conformance.kernels._cases import decode_path, fused_paths
from kernels.decoupled_cache import NullKV

pytestmark = pytest.mark.requires("decoupled.cache", "kernels.decoupled_decode")


@pytest.mark.invariant("DBA-001")
def test_semantic_and_geometric_logits_add_with_their_scales(target: Any) -> None:
    inp = _cases.build_decoupled(_cases.DecoupledCase(length=45, resid=5, seed=13), target)
    for ss, gs in ((0.9, 0.05), (0.0, 1.0 / math.sqrt(32)), (1.0 / math.sqrt(16), 0.0)):
        want = _oracle.decoupled(
            inp.q_sem.double().cpu().numpy(),
            inp.q_geo.double().cpu().numpy(),
            inp.oracle_inputs,
            ss,
            gs,
        )
        for path in [*fused_paths(target), "streaming"]:
            out = decode_path(target, inp, path, 32, sem_scale=ss, geo_scale=gs)
            _tolerance.assert_within(out, want, f"{path} sem_scale={ss} geo_scale={gs}")
    # Defaults: 1/sqrt(per-head dim) of each part.
    for path in [*fused_paths(target), "streaming"]:
        _tolerance.assert_within(
            decode_path(target, inp, path), inp.expected, f"{path} default scales"
        )


@pytest.mark.invariant("DBA-002")
def test_zero_null_is_a_logit_zero_sink(target: Any) -> None:
    inp = _cases.build_decoupled(_cases.DecoupledCase(length=30, seed=17), target)
    h, d = inp.cache.dims.n_head, inp.cache.dims
    null = NullKV(
        *(
            torch.zeros(h, w, device=_cases.DEVICE)
            for w in (d.sem_head_dim, d.geo_head_dim, d.v_head_dim)
        )
    )
    o = inp.oracle_inputs
    s = np.einsum("bhd,bhnd->bhn", inp.q_sem.double().cpu().numpy(), o.k_sem) * inp.sem_scale
    s += np.einsum("bhd,bhnd->bhn", inp.q_geo.double().cpu().numpy(), o.k_geo) * inp.geo_scale
    e = np.exp(s)
    want = np.einsum("bhn,bhnd->bhd", e, o.v) / (1.0 + e.sum(axis=-1))[..., None]
    for path in [*fused_paths(target), "streaming"]:
        _tolerance.assert_within(decode_path(target, inp, path, 32, null=null), want, path)


@pytest.mark.invariant("DBA-002")
@pytest.mark.parametrize("batch", [2, 3])
def test_a_per_head_null_token_is_one_more_key(target: Any, batch: int) -> None:
    """Learned [H, hd] null parameters (broadcast over the batch): head h attends null[h]."""
    case = _cases.DecoupledCase(batch=batch, length=30, resid=4, null="broadcast", seed=19)
    inp = _cases.build_decoupled(case, target)
    assert inp.null is not None and inp.null.k_sem.ndim == 2
    for path in [*fused_paths(target), "streaming"]:
        _tolerance.assert_within(decode_path(target, inp, path, 32), inp.expected, path)
