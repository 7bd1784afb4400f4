"""The decoupled model's attention rules, each checked as a property of the model
(spec/decoupled.md DBA-005, DBA-006, DBA-007, DBA-010, DBA-012, DBA-030)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from conformance.assertions import assert_close, raises_code, unchanged
from conformance.decoupled import _model as M

pytestmark = pytest.mark.requires("decoupled.model")

ATOL = 1e-5  # float32 model values against float64 oracles of magnitude ~1-10
RTOL = 1e-5


# -- DBA-005: the gate -------------------------------------------------------------------------


@pytest.mark.invariant("DBA-005")
def test_gate_is_exactly_one_half_at_initialization(target: Any) -> None:
    model = target.decoupled_model(M.TINY, seed=3)
    toks = M.tokens(2, 10, seed=1)
    for layer in range(M.TINY["n_layer"]):
        parts = model.inspect(toks, layer)
        gate = M.f64(parts["gate"])
        assert gate.shape == (2, 10, M.TINY["n_head"])
        assert np.all(gate == 0.5), f"layer {layer}: gate at init is not exactly 0.5"
        # 2g = 2(1 - g) = 1: the queries are the plain projections (RoPE on q_geo)
        want = M.expected_queries(parts, model.weights(), layer, range(10))
        for name in ("q_sem", "q_geo"):
            assert_close(want[name], parts[name], atol=ATOL, rtol=RTOL, what=f"{layer} {name}")


@pytest.mark.invariant("DBA-005")
def test_gate_scales_q_sem_by_2g_and_q_geo_by_2_minus_2g(target: Any) -> None:
    model = target.decoupled_model(M.TINY, seed=4)
    w = model.weights()
    for layer in range(2):
        pre = f"blocks.{layer}.attn."
        M.perturb(w, {pre + "gate_proj.weight": 0.5, pre + "gate_logit": 1.0}, seed=10 + layer)
    model.load_weights(w)
    toks = M.tokens(2, 9, seed=2)
    for layer in range(2):
        parts = model.inspect(toks, layer)
        want = M.expected_queries(parts, w, layer, range(9))
        g = M.f64(parts["gate"])
        assert g.std() > 0.05, "the perturbed gate should vary"
        for name in ("gate", "q_sem", "q_geo"):
            assert_close(want[name], parts[name], atol=ATOL, rtol=RTOL, what=f"{layer} {name}")


@pytest.mark.invariant("DBA-005")
def test_gate_depends_only_on_the_current_token(target: Any) -> None:
    model = target.decoupled_model(M.TINY, seed=5)
    w = model.weights()
    M.perturb(w, {"blocks.0.attn.gate_proj.weight": 0.5}, seed=3)
    model.load_weights(w)
    base = M.tokens(1, 12, seed=6)
    t = 5
    other = [list(base[0])]
    for i in range(12):
        if i != t:
            other[0][i] = (base[0][i] + 7 + i) % 64  # every other token changed
    g0 = M.f64(model.inspect(base, 0)["gate"])
    g1 = M.f64(model.inspect(other, 0)["gate"])
    assert np.array_equal(g0[:, t], g1[:, t]), "the gate of token t saw other tokens"
    assert not np.allclose(g0[:, t + 1], g1[:, t + 1]), "changed tokens should change their gate"


# -- DBA-006: the temperature ------------------------------------------------------------------


@pytest.mark.invariant("DBA-006")
def test_temperature_multiplies_both_query_parts_clamped_to_8(target: Any) -> None:
    model = target.decoupled_model(M.TINY, seed=7)
    w = model.weights()
    # head 0 inside the clamp, head 1 below -8 (clamped): exp(2.5) and exp(-8)
    w["blocks.0.attn.logit_scale"] = torch.tensor([2.5, -9.5])
    w["blocks.1.attn.logit_scale"] = torch.tensor([-1.25, 8.75])
    for layer in range(2):
        M.perturb(w, {f"blocks.{layer}.attn.gate_proj.weight": 0.5}, seed=20 + layer)
    model.load_weights(w)
    toks = M.tokens(2, 8, seed=3)
    for layer in range(2):
        parts = model.inspect(toks, layer)
        want = M.expected_queries(parts, w, layer, range(8))
        assert_close(want["gate"], parts["gate"], atol=ATOL, rtol=RTOL, what=f"{layer} gate")
        # compared in units of the expected temperature (up to e^8): float32 rounding of the
        # projection grows with it, a wrong temperature or a missing clamp does not shrink
        temp = np.exp(np.clip(M.f64(w[f"blocks.{layer}.attn.logit_scale"]), -8, 8))
        unit = temp[None, :, None, None]
        for name in ("q_sem", "q_geo"):
            got = M.f64(parts[name]) / unit
            assert_close(want[name] / unit, got, atol=ATOL, rtol=RTOL, what=f"{layer} {name}")


# -- DBA-007: RoPE on the geometric path only --------------------------------------------------


@pytest.mark.invariant("DBA-007")
def test_rope_moves_only_the_geometric_logits(target: Any) -> None:
    model = target.decoupled_model(M.TINY, seed=8)
    toks = M.tokens(2, 10, seed=4)
    base = model.inspect(toks, 0)
    permuted = model.inspect(toks, 0, positions=[7, 2, 9, 0, 5, 1, 8, 3, 6, 4])
    shifted = model.inspect(toks, 0, positions=[p + 1000 for p in range(10)])
    # layer 0 sees embeddings only, so positions reach it through RoPE alone
    assert np.array_equal(M.f64(base["sem_logits"]), M.f64(permuted["sem_logits"])), (
        "semantic logits moved with the positions"
    )
    assert np.array_equal(M.f64(base["k_sem"]), M.f64(permuted["k_sem"]))
    moved = np.abs(M.f64(base["geo_logits"]) - M.f64(permuted["geo_logits"])).max()
    assert moved > 1e-2, f"geometric logits did not move with the positions ({moved:.2e})"
    # RoPE is relative: a common shift leaves the geometric logits (within rounding)
    assert_close(base["geo_logits"], shifted["geo_logits"], atol=1e-4, rtol=1e-4, what="shift")


@pytest.mark.invariant("DBA-007")
def test_k_geo_is_rotated_and_k_sem_is_not(target: Any) -> None:
    model = target.decoupled_model(M.TINY, seed=9)
    w = model.weights()
    toks = M.tokens(1, 11, seed=5)
    pos = [3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46]
    for layer in range(2):
        parts = model.inspect(toks, layer, positions=pos)
        x = M.f64(parts["x"])
        pre = f"blocks.{layer}.attn."
        k_sem = M.heads(x @ M.f64(w[pre + "k_sem.weight"]).T, 2)
        k_geo = M.rope(M.heads(x @ M.f64(w[pre + "k_geo.weight"]).T, 2), pos)
        assert_close(k_sem, parts["k_sem"], atol=ATOL, rtol=RTOL, what=f"{layer} k_sem")
        assert_close(k_geo, parts["k_geo"], atol=ATOL, rtol=RTOL, what=f"{layer} k_geo")


def _attention_oracle(parts: dict[str, torch.Tensor], w: dict[str, torch.Tensor]) -> np.ndarray:
    """Layer-0 attention [B, T, d_v] from the layer's q/k/v and its *unrotated* null token."""
    qs, qg, ks, kg, v = (M.f64(parts[n]) for n in ("q_sem", "q_geo", "k_sem", "k_geo", "v"))
    ss, gs = 1 / np.sqrt(qs.shape[-1]), 1 / np.sqrt(qg.shape[-1])
    s = np.einsum("bhtd,bhsd->bhts", qs, ks) * ss + np.einsum("bhtd,bhsd->bhts", qg, kg) * gs
    t = s.shape[-1]
    s = np.where(np.tril(np.ones((t, t), bool)), s, -np.inf)
    ksn, kgn, vn = (M.f64(w["blocks.0.attn." + n]) for n in ("k_sem_null", "k_geo_null", "v_null"))
    s_null = np.einsum("bhtd,hd->bht", qs, ksn) * ss + np.einsum("bhtd,hd->bht", qg, kgn) * gs
    s = np.concatenate([s_null[..., None], s], axis=-1)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    null_v = np.broadcast_to(vn[None, :, None, :], (v.shape[0], vn.shape[0], 1, vn.shape[1]))
    vals = np.concatenate([null_v, v], axis=2)
    out = np.einsum("bhts,bhsd->bhtd", p, vals)
    b, h, t, d = out.shape
    return out.transpose(0, 2, 1, 3).reshape(b, t, h * d)


@pytest.mark.invariant("DBA-007", "DBA-010")
def test_the_null_key_is_not_rotated(target: Any) -> None:
    model = target.decoupled_model(M.NULL, seed=10)
    w = model.weights()
    pre = "blocks.0.attn."
    M.perturb(w, {pre + "k_sem_null": 1.0, pre + "k_geo_null": 2.0, pre + "v_null": 1.0}, seed=4)
    model.load_weights(w)
    toks = M.tokens(2, 9, seed=6)
    pos = [5, 40, 41, 90, 7, 300, 12, 13, 2000]
    parts = model.inspect(toks, 0, positions=pos)
    kgn = M.f64(w[pre + "k_geo_null"])
    gs = 1 / np.sqrt(kgn.shape[-1])
    want_geo = np.einsum("bhtd,hd->bht", M.f64(parts["q_geo"]), kgn) * gs
    assert_close(want_geo, parts["null_geo"], atol=ATOL, rtol=RTOL, what="null geo logit")
    want = _attention_oracle(parts, w)
    assert_close(want, parts["attn"], atol=ATOL, rtol=RTOL, what="attention with a null token")


# -- DBA-010: out_proj exactly once ------------------------------------------------------------


@pytest.mark.invariant("DBA-010")
@pytest.mark.parametrize("config", [M.TINY, M.NULL], ids=["no-null", "null"])
def test_out_proj_runs_once_per_layer_and_token_step(target: Any, config: dict[str, Any]) -> None:
    model = target.decoupled_model(config, seed=11)
    toks = M.tokens(2, 6, seed=7)
    assert model.out_proj_calls(toks) == [1, 1], "prefill: one out_proj call per layer"
    assert model.out_proj_calls(toks, decode=True) == [6, 6], "decode: one per layer and step"


@pytest.mark.invariant("DBA-010")
def test_layer_output_is_one_projection_of_the_attention(target: Any) -> None:
    model = target.decoupled_model(M.NULL, seed=12)
    w = model.weights()
    M.perturb(w, {"blocks.1.attn.v_null": 1.0, "blocks.1.attn.k_sem_null": 1.0}, seed=5)
    model.load_weights(w)
    toks = M.tokens(2, 7, seed=8)
    for layer in range(2):
        parts = model.inspect(toks, layer)
        want = M.f64(parts["attn"]) @ M.f64(w[f"blocks.{layer}.attn.out.weight"]).T
        assert_close(want, parts["out"], atol=ATOL, rtol=RTOL, what=f"layer {layer} out")


# -- DBA-027: the blocks around the attention -------------------------------------------------


def _rms(x: np.ndarray, w: torch.Tensor, eps: float) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * M.f64(w)


@pytest.mark.invariant("DBA-027")
def test_forward_is_pre_norm_blocks_with_a_bias_free_silu_mlp(target: Any) -> None:
    """The logits from the embedding, each layer's attention output (``inspect``) and a float64
    oracle of the residual stream, the MLP and the final norm: a bias anywhere shows."""
    model = target.decoupled_model(M.TINY, seed=15)
    w = model.weights()
    M.perturb(w, {f"blocks.{i}.{n}_norm.weight": 0.5 for i in (0, 1) for n in ("attn", "ffn")}, 9)
    model.load_weights(w)
    eps = model.config["norm_eps"]
    toks = M.tokens(2, 5, seed=10)
    h = M.f64(w["embed.weight"])[np.asarray(toks)]
    for i in range(2):
        parts = model.inspect(toks, i)
        assert_close(_rms(h, w[f"blocks.{i}.attn_norm.weight"], eps), parts["x"], atol=ATOL,
                     rtol=RTOL, what=f"layer {i} normed input")  # fmt: skip
        h = h + M.f64(parts["out"])
        u = _rms(h, w[f"blocks.{i}.ffn_norm.weight"], eps) @ M.f64(w[f"blocks.{i}.up.weight"]).T
        h = h + (u * M.sigmoid(u)) @ M.f64(w[f"blocks.{i}.down.weight"]).T
    want = _rms(h, w["final_norm.weight"], eps) @ M.f64(w["lm_head.weight"]).T
    assert_close(want, model.logits(toks), atol=ATOL, rtol=RTOL, what="logits")


# -- DBA-030: the default config ---------------------------------------------------------------


@pytest.mark.invariant("DBA-030")
def test_fields_left_out_of_a_config_take_the_default(target: Any) -> None:
    assert target.decoupled_model({}, seed=0).config == M.DEFAULT
    # the fields given replace their defaults, and only them
    given = {"d_ff": 32, "null_attn": True, "summarizer": "conv"}
    assert target.decoupled_model(given, seed=0).config == {**M.DEFAULT, **given}


# -- DBA-012: checkpoints ----------------------------------------------------------------------


@pytest.mark.invariant("DBA-012")
@pytest.mark.parametrize("config", [M.TINY, M.NULL], ids=["no-null", "null"])
def test_checkpoint_round_trips_bit_exactly(
    target: Any, tmp_path: Path, config: dict[str, Any]
) -> None:
    model = target.decoupled_model(config, seed=13)
    w = model.weights()
    M.perturb(w, {"blocks.0.attn.gate_proj.weight": 0.3, "blocks.1.attn.logit_scale": 0.7}, 6)
    model.load_weights(w)
    path = str(tmp_path / "m.safetensors")
    model.save(path)
    again = target.load_decoupled_model(path)
    assert again.config == model.config
    w2 = again.weights()
    assert sorted(w2) == sorted(w)
    for name in w:
        assert torch.equal(w[name], w2[name]), f"{name} changed in the round trip"
    toks = M.tokens(1, 8, seed=9)
    assert torch.equal(model.logits(toks), again.logits(toks)), "logits changed"


@pytest.mark.invariant("DBA-012")
def test_bad_weights_are_refused_by_name_and_change_nothing(target: Any) -> None:
    model = target.decoupled_model(M.TINY, seed=14)
    good = model.weights()
    name = "blocks.1.attn.k_geo.weight"
    missing = {k: v for k, v in good.items() if k != name}
    shaped = {**good, name: torch.zeros(8, 64)}
    extra = {**good, "blocks.1.attn.k_geo_null": torch.zeros(2, 16)}
    typed = {**good, name: good[name].double()}
    untyped = {**good, name: good[name].tolist()}  # the right values, but not a tensor
    cases = [
        (missing, "DBA_MISSING_TENSOR", name, None),
        (shaped, "DBA_BAD_SHAPE", name, None),
        (extra, "DBA_UNEXPECTED_TENSOR", "blocks.1.attn.k_geo_null", None),
        (typed, "DBA_BAD_DTYPE", name, "float64"),  # the message names the dtype it got
        (untyped, "DBA_BAD_DTYPE", name, None),
    ]
    for bad, code, field, words in cases:
        bad["blocks.0.attn.q_sem.weight"] = torch.ones(32, 64)  # earlier in order: not written
        with unchanged(model.weights, "weights"), raises_code(code, field=field) as err:
            model.load_weights(bad)
        assert words is None or words in str(err.value), str(err.value)


@pytest.mark.invariant("DBA-012")
def test_bad_checkpoint_files_name_the_tensor(target: Any, tmp_path: Path) -> None:
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    model = target.decoupled_model(M.TINY, seed=15)
    path = tmp_path / "m.safetensors"
    model.save(str(path))
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
    tensors = load_file(str(path))
    name = "blocks.0.attn.v.weight"
    cut = {k: v for k, v in tensors.items() if k != name}
    save_file(cut, str(tmp_path / "missing.safetensors"), metadata=meta)
    with raises_code("DBA_MISSING_TENSOR", field=name):
        target.load_decoupled_model(str(tmp_path / "missing.safetensors"))
    save_file({**tensors, name: torch.zeros(64, 63)}, str(tmp_path / "shape.safetensors"), meta)
    with raises_code("DBA_BAD_SHAPE", field=name):
        target.load_decoupled_model(str(tmp_path / "shape.safetensors"))
    save_file(tensors, str(tmp_path / "arch.safetensors"), {**meta, "architecture": "llama"})
    with raises_code("DBA_BAD_ARCH", field="architecture"):
        target.load_decoupled_model(str(tmp_path / "arch.safetensors"))
    (tmp_path / "junk.safetensors").write_bytes(b"\x00" * 16)
    with raises_code("DBA_BAD_FILE", field="path"):
        target.load_decoupled_model(str(tmp_path / "junk.safetensors"))


@pytest.mark.invariant("DBA-024")
def test_the_weights_handed_out_are_copies(target: Any) -> None:
    model = target.decoupled_model(M.NULL, seed=16)
    toks = M.tokens(1, 6, seed=10)
    before = model.logits(toks)
    w = model.weights()
    for t in w.values():  # edit every returned tensor in place
        t.add_(1.0)
    again = model.weights()
    for name, t in again.items():
        assert torch.equal(t + 1.0, w[name]), f"{name}: the model saw an edit of its copy"
    assert torch.equal(model.logits(toks), before), "logits changed after editing a copy"
