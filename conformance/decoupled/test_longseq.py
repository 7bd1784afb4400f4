"""The training long-sequence approximation and its drift validator (spec/decoupled.md DBA-008,
DBA-009)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from conformance.assertions import assert_close, raises_code
from conformance.decoupled import _model as M

LONG = {**M.TINY, "mem_block": 8, "local_window": 16, "q_chunk": 8}


@pytest.mark.invariant("DBA-008")
@pytest.mark.requires("decoupled.model")
def test_config_fields_are_explicit(target: Any) -> None:
    cfg = target.decoupled_model({**LONG, "summarizer": "conv"}, seed=0).config
    for key in ("mem_block", "local_window", "q_chunk", "summarizer"):
        assert key in cfg
    assert (cfg["mem_block"], cfg["local_window"], cfg["q_chunk"]) == (8, 16, 8)
    with raises_code("DBA_BAD_CONFIG", field="mem_blok"):
        target.decoupled_model({**LONG, "mem_blok": 8}, seed=0)
    with raises_code("DBA_BAD_CONFIG", field="summarizer"):
        target.decoupled_model({**LONG, "summarizer": "max"}, seed=0)
    # a value of the wrong type names its field: a bool is no number, a number no bool
    for key, value in (("n_layer", True), ("rope_base", "1e4"), ("q_chunk", "8"),
                       ("null_attn", 1), ("summarizer", 0)):  # fmt: skip
        with raises_code("DBA_BAD_CONFIG", field=key):
            target.decoupled_model({**LONG, key: value}, seed=0)
    assert target.decoupled_model({**LONG, "rope_base": 500}, seed=0).config["rope_base"] == 500
    # the approximation's sizes are counts of tokens: 1 is a size (a one-token block, window or
    # chunk), 0 is refused naming the field
    sizes = ("mem_block", "local_window", "q_chunk")
    ones = target.decoupled_model({**LONG, **dict.fromkeys(sizes, 1)}, seed=0)
    assert tuple(ones.config[k] for k in sizes) == (1, 1, 1)
    assert ones.approx_logits(M.tokens(1, 5, seed=1)).shape == (1, 5, LONG["vocab"])
    for key in sizes:
        with raises_code("DBA_BAD_CONFIG", field=key):
            target.decoupled_model({**LONG, key: 0}, seed=0)


@pytest.mark.invariant("DBA-008")
@pytest.mark.requires("decoupled.model")
def test_learned_summarizers_equal_mean_at_initialization(target: Any) -> None:
    toks = M.tokens(2, 40, seed=30)
    mean = target.decoupled_model({**LONG, "summarizer": "mean"}, seed=31).approx_logits(toks)
    exact = target.decoupled_model({**LONG, "summarizer": "mean"}, seed=31).logits(toks)
    assert not torch.allclose(mean, exact), "the approximation should differ from exact attention"
    for kind in ("linear", "conv"):
        model = target.decoupled_model({**LONG, "summarizer": kind}, seed=31)
        assert torch.equal(model.approx_logits(toks), mean), f"{kind} != mean at init"
        w = model.weights()
        w["blocks.0.attn.mem.k.alpha"] = torch.tensor(0.5)
        w["blocks.1.attn.mem.v.alpha"] = torch.tensor(0.5)
        model.load_weights(w)
        moved = (model.approx_logits(toks) - mean).abs().max()
        assert moved > 1e-4, f"{kind}: a learned summarizer had no effect ({float(moved):.2e})"


def _local_checkpoint(target: Any, path: Path) -> None:
    """A model whose attention is local, the case the approximation is made for: every token
    carries the same large component in dims 0..31 (embeddings set there, and neither out_proj
    nor the MLP writes there), q_geo = k_geo read only those dims into the three
    highest-frequency RoPE pairs of each head, so a query's geometric logit depends on the
    distance alone and peaks at the token itself; the gate (sigmoid(-12)) shuts the semantic
    path, so memory tokens get logit ~0."""
    model = target.decoupled_model(LONG, seed=32)
    w = model.weights()
    const = slice(0, 32)
    w["embed.weight"][:, const] = 4.0
    hd = LONG["d_geo"] // LONG["n_head"]
    g = torch.Generator().manual_seed(100)
    for layer in range(LONG["n_layer"]):
        pre = f"blocks.{layer}."
        k = torch.zeros(LONG["d_geo"], LONG["d_model"])
        for row in range(LONG["d_geo"]):
            if row % hd % (hd // 2) < 3:  # pairs 0..2 of rotate-half: dims c and c + hd/2
                k[row, const] = torch.randn(32, generator=g) / 4
        w[pre + "attn.k_geo.weight"] = k
        w[pre + "attn.q_geo.weight"] = k.clone()
        w[pre + "attn.gate_logit"] = torch.full((LONG["n_head"],), -12.0)
        w[pre + "attn.logit_scale"] = torch.full((LONG["n_head"],), 3.0)
        w[pre + "attn.out.weight"][const] = 0.0
        w[pre + "down.weight"][const] = 0.0
    model.load_weights(w)
    model.save(str(path))


DRIFT_ROWS = ("Max-abs logit diff", "NLL exact / approx", "Delta NLL", "PPL ratio", "Drift")


def _drift(target: Any, path: Path, mask: str) -> dict[str, str]:
    argv = ["drift", "--checkpoint", str(path), "--length", "64", "--mask", mask]
    rc, out, err = target.decoupled_runner(argv)
    assert rc == 0, err
    rows = {}
    for line in out.splitlines():
        if line.startswith("  ") and " : " in line:
            key, value = line.strip().split(" : ", 1)
            rows[key.strip()] = value
    # the report printed before the summary: one `<name>: <value>` line per drift row
    report = out.split("Run summary", 1)[0].splitlines()
    assert report == [f"{k}: {rows[k]}" for k in DRIFT_ROWS], out
    return rows


def _figures(rows: dict[str, str]) -> tuple[float, float, float]:
    return (
        float(rows["Max-abs logit diff"].split()[0]),
        float(rows["Delta NLL"].split()[0]),
        float(rows["PPL ratio"].split()[0]),
    )


@pytest.mark.invariant("DBA-009")
@pytest.mark.requires("decoupled.model", "decoupled.runner")
def test_drift_is_within_bounds_with_the_bottom_right_mask_only(
    target: Any, tmp_path: Path
) -> None:
    path = tmp_path / "local.safetensors"
    _local_checkpoint(target, path)
    good = _drift(target, path, "bottom-right")
    max_abs, d_nll, ratio = _figures(good)
    assert max_abs <= 0.1 and abs(d_nll) <= 0.05 and ratio <= 1.05, good
    assert good["Drift"] == "within bounds", good
    # the decoupled project's mask: each later chunk loses its own recent tokens
    bad = _drift(target, path, "upper-left")
    max_abs_bad, d_nll_bad, ratio_bad = _figures(bad)
    assert max_abs_bad > 0.1 or abs(d_nll_bad) > 0.05 or ratio_bad > 1.05, bad
    assert bad["Drift"] == "OUT OF BOUNDS", bad
    # the reported max-abs is the model's: approximation against exact on the same tokens
    model = target.load_decoupled_model(str(path))
    toks = torch.randint(0, 64, (2, 64), generator=torch.Generator().manual_seed(0))
    exact, approx = model.logits(toks), model.approx_logits(toks)
    diff = float((exact - approx).abs().max())
    assert abs(diff - max_abs) <= 1e-6 + 1e-4 * diff, (diff, max_abs)

    def nll(logits: torch.Tensor) -> float:  # next-token NLL, mean over rows and positions
        lp = torch.log_softmax(logits[:, :-1].double(), dim=-1)
        return float(-lp.gather(-1, toks[:, 1:, None]).mean())

    printed = [float(x) for x in good["NLL exact / approx"].split(" / ")]
    want = [nll(exact), nll(approx)]
    assert all(abs(p - w) <= 2e-6 + 1e-5 * abs(w) for p, w in zip(printed, want)), (printed, want)


@pytest.mark.invariant("DBA-009")
@pytest.mark.requires("decoupled.model")
def test_the_first_chunks_are_exact(target: Any) -> None:
    """Chunks starting within local_window of the start attend every earlier token at full
    resolution, so their rows equal exact attention."""
    model = target.decoupled_model(LONG, seed=33)
    toks = M.tokens(2, 40, seed=34)
    exact, approx = model.logits(toks), model.approx_logits(toks)
    n_exact = LONG["local_window"] + LONG["q_chunk"]  # chunks with t0 <= local_window
    assert_close(exact[:, :n_exact], approx[:, :n_exact], atol=1e-5, rtol=1e-5, what="exact part")
    assert (exact[:, n_exact:] - approx[:, n_exact:]).abs().max() > 1e-3


def _summarizer_model(
    target: Any,
    kind: str,
    alpha: float,
    layers: tuple[int, ...],
    kernel: tuple[float, ...] = (0.0, 0.0, 0.0),
    factor: float = 0.0,
) -> Any:
    """The seed-31 model with residual scale ``alpha`` in the k and v summarizers of ``layers``,
    every channel's conv kernel set to ``kernel`` and the linear weight to ``factor``·I."""
    model = target.decoupled_model({**LONG, "summarizer": kind}, seed=31)
    w = model.weights()
    for layer in layers:
        for part in ("k", "v"):
            pre = f"blocks.{layer}.attn.mem.{part}."
            w[pre + "alpha"] = torch.tensor(alpha)
            conv = w[pre + "conv.weight"]  # [hd, 1, 3]
            w[pre + "conv.weight"] = torch.tensor(kernel).expand_as(conv)
            n = w[pre + "linear.weight"].shape[0]
            w[pre + "linear.weight"] = factor * torch.eye(n)
    model.load_weights(w)
    return model


@pytest.mark.invariant("DBA-018")
@pytest.mark.requires("decoupled.model")
@pytest.mark.parametrize(
    ("kernel", "layers"),
    [
        ((0.0, 1.0, 0.0), (0, 1)),  # identity: mem_block outputs averaged, any keys
        ((1.0, 0.0, 0.0), (0,)),  # shifts: the zero at one end of the block drops a token
        ((0.0, 0.0, 1.0), (0,)),
        ((0.25, 0.5, 0.25), (0,)),
    ],
)
def test_conv_summary_with_a_nonzero_scale(
    target: Any, kernel: tuple[float, float, float], layers: tuple[int, ...]
) -> None:
    """Tokens repeat within each memory block, so layer 0's keys and values are constant over a
    block and the zero-padded conv mean is ``(w0 + w1 + w2 - (w0 + w2)/mem_block)·mean``: the
    linear summarizer with that factor times the identity must give the same logits."""
    m = LONG["mem_block"]
    per_block = torch.randint(0, 64, (1, 8), generator=torch.Generator().manual_seed(35))
    toks = per_block.repeat_interleave(m, dim=1)  # [1, 64], 8 blocks of one token each
    factor = sum(kernel) - (kernel[0] + kernel[2]) / m
    conv = _summarizer_model(target, "conv", 0.75, layers, kernel=kernel).approx_logits(toks)
    linear = _summarizer_model(target, "linear", 0.75, layers, factor=factor).approx_logits(toks)
    assert_close(linear, conv, atol=1e-5, rtol=1e-5, what=f"conv kernel {kernel} vs linear")
    # the check has teeth: the summaries move the logits far beyond the tolerance
    mean = _summarizer_model(target, "linear", 0.0, layers).approx_logits(toks)
    assert (conv - mean).abs().max() > 0.1
