"""Decoding a decoupled model through the kernels (spec/decoupled.md DBA-011, DBA-016): decode
equals the exact forward on the cache's stored values, and the fused paths equal streaming."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from conformance.decoupled import _model as M
from conformance.kernels import _tolerance

pytestmark = pytest.mark.requires("decoupled.model")

FUSED_PATHS = {"1pass": "triton-1pass", "2pass": "triton-2pass", "streaming": "streaming"}


def _decode(session: Any, toks: list[list[int]], path: str) -> tuple[torch.Tensor, list[str]]:
    """Teacher forcing: logits [B, T, vocab] of every step, and the paths the records name."""
    outs, paths = [], []
    for i in range(len(toks[0])):
        out, records = session.step([row[i] for row in toks], path=path)
        outs.append(out)
        paths += [r.path for r in records]
    return torch.stack(outs, dim=1), paths


def _perturbed(target: Any, config: dict[str, Any], seed: int) -> Any:
    """A model whose gate, temperature and null token are all away from their initial values."""
    model = target.decoupled_model(config, seed=seed)
    w = model.weights()
    for layer in range(config["n_layer"]):
        pre = f"blocks.{layer}.attn."
        names = {pre + "gate_proj.weight": 0.3, pre + "gate_logit": 0.5, pre + "logit_scale": 0.3}
        if config.get("null_attn"):
            names |= {pre + "k_sem_null": 1.0, pre + "k_geo_null": 1.0, pre + "v_null": 1.0}
        M.perturb(w, names, seed=seed * 10 + layer)
    model.load_weights(w)
    return model


# (policy, the policy whose stored values the forward attends, path, the path that must run,
# null token). The fused kernels run under Triton's interpreter on a CPU: one case per kernel.
F0 = M.FUSED.format(resid=0)
MIXED = "ksem=q8_0@32,kgeo=fp16,v=fp32,resid={resid}"
MIXED_TAIL = "ksem=fp16,kgeo=fp16,v=fp32,resid=0"  # what MIXED's tail holds
CASES = [
    (M.FP32, M.FP32, "auto", "streaming", False),  # float cache: not the fused layout
    (M.FP32, M.FP32, "auto", "streaming", True),
    (F0, F0, "streaming", "streaming", False),
    (F0, F0, "streaming", "streaming", True),
    (F0, F0, "auto", "triton-1pass", False),
    (F0, F0, "2pass", "triton-2pass", True),
    # a residual longer than the sequence: every token read from the fp16 ring
    (M.FUSED.format(resid=32), M.FP16, "1pass", "triton-1pass", True),
    # a policy mixing float and quantized tensors (not the fused layout): without a residual
    # each tensor is read as its kind stores it; with one, every token in the tail, the q8_0
    # k_sem comes from its fp16 ring while the float k_geo and v, which keep no ring, come from
    # their buffers (fp16-rounded, exact)
    (MIXED.format(resid=0), MIXED.format(resid=0), "auto", "streaming", False),
    (MIXED.format(resid=12), MIXED_TAIL, "auto", "streaming", True),
]


def _case_id(c: tuple[str, str, str, str, bool]) -> str:
    return f"{c[0].split(',')[0]}-{c[0].rsplit(',', 1)[1]}-{c[2]}-{'null' if c[4] else 'no-null'}"


@pytest.mark.invariant("DBA-016")
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_teacher_forced_decode_equals_the_exact_forward(
    target: Any, case: tuple[str, str, str, str, bool]
) -> None:
    policy, stored, path, ran, null = case
    model = _perturbed(target, M.NULL if null else M.TINY, seed=21)
    toks = M.tokens(2, 8, seed=22)
    session = model.start(policy, max_len=12, batch=2, partition_size=32)
    got, paths = _decode(session, toks, path)
    assert set(paths) == {ran}, f"{policy} {path}: ran {sorted(set(paths))}, expected {ran}"
    want = model.logits(toks, stored=stored)
    _tolerance.assert_within(got, M.f64(want), f"decode {policy} {path} vs forward({stored})")
    if stored == M.FP32:  # an fp32 cache stores keys exactly: the plain forward
        _tolerance.assert_within(got, M.f64(model.logits(toks)), "decode vs plain forward")


@pytest.mark.invariant("DBA-016")
def test_prefill_then_decode_continues_the_sequence(target: Any) -> None:
    model = _perturbed(target, M.NULL, seed=23)
    toks = M.tokens(1, 10, seed=24)
    session = model.start(M.FP32, max_len=10)
    pre = session.prefill([toks[0][:6]])
    assert session.length == 6
    outs = [session.step([t], path="streaming")[0] for t in toks[0][6:]]
    want = M.f64(model.logits(toks))
    _tolerance.assert_within(pre, want[:, :6], "prefill")
    _tolerance.assert_within(torch.stack(outs, dim=1), want[:, 6:], "decode after prefill")


@pytest.mark.invariant("DBA-011")
@pytest.mark.parametrize("config", [M.TINY, M.NULL], ids=["no-null", "null"])
def test_one_decode_step_is_the_same_fused_1pass_2pass_and_streaming(
    target: Any, config: dict[str, Any]
) -> None:
    model = _perturbed(target, config, seed=25)
    prompt = M.tokens(2, 40, seed=26)
    nxt = [7, 51]
    policy = M.FUSED.format(resid=4)  # 36 quantized tokens (two 32-token partitions) + 4 exact
    results = {}
    for path, want_path in FUSED_PATHS.items():
        session = model.start(policy, max_len=48, batch=2, partition_size=32)
        session.prefill(prompt)
        out, records = session.step(nxt, path=path)
        assert len(records) == config["n_layer"]
        for r in records:  # the kernel ran, no silent fallback
            assert r.path == want_path, f"{path}: layer ran {r.path} ({r.reason})"
        results[path] = out
    for path in ("1pass", "2pass"):
        _tolerance.assert_within(results[path], M.f64(results["streaming"]), f"{path} vs streaming")


@pytest.mark.invariant("DBA-026")
def test_a_session_dispatches_by_its_own_threshold_and_partition_size(target: Any) -> None:
    model = target.decoupled_model(M.TINY, seed=27)
    toks = M.tokens(1, 35, seed=28)
    # neither value is the default (4096 keys, 256-token partitions): a session that dropped
    # them would run 1-pass on both steps
    session = model.start(F0, max_len=35, batch=1, partition_size=32, two_pass_min_tokens=35)
    session.prefill([toks[0][:33]])
    ran = []
    for t in toks[0][33:]:  # the steps read 34, then 35 keys
        _, records = session.step([t], path="auto")
        ran.append([(r.path, r.detail.get("partitions")) for r in records])
    want = [[("triton-1pass", 0)] * 2, [("triton-2pass", 2)] * 2]  # ceil(35 / 32) partitions
    assert ran == want, ran
