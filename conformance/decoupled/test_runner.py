"""The decoupled model's command line (spec/decoupled.md DBA-013, DBA-014, DBA-015, DBA-017,
DBA-020, DBA-025, DBA-028, DBA-029, DBA-030, DBA-031)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from conformance.assertions import assert_close

pytestmark = pytest.mark.requires("decoupled.runner")

SCORE = ["score", "--seed", "1", "--tokens", "3,9,27,17,51,25"]


def _summary(target: Any, tmp_path: Path, *argv: str) -> dict[str, str]:
    path = tmp_path / "summary.json"
    rc, out, err = target.decoupled_runner([*argv, "--summary-json", str(path)])
    assert rc == 0, f"exit {rc}: {err}"
    rows: dict[str, str] = json.loads(path.read_text())
    # the printed table closes stdout and says the same, keys padded to the longest (DBA-029)
    width = max(len(key) for key in rows)
    table = ["Run summary"] + [f"  {key.ljust(width)} : {value}" for key, value in rows.items()]
    printed = out.rstrip("\n").splitlines()[-len(table) :]
    assert printed == table, f"printed summary {printed!r}, expected {table!r}"
    return rows


@pytest.mark.invariant("DBA-013")
def test_kv_policy_replaces_the_derived_policy_as_a_whole(target: Any, tmp_path: Path) -> None:
    derived = _summary(target, tmp_path, *SCORE, "--kv-quant", "fp16", "--kv-resid", "5")
    assert derived["KV Policy"] == "ksem=fp16@32,kgeo=fp16@32,v=fp16@32,resid=5"
    # the override names no resid of 5 and no fp16 key: nothing of the derived policy survives
    given = " KSem=q8_0@16 , kgeo=q8_0, v=fp16,resid=0"
    rows = _summary(
        target, tmp_path, *SCORE, "--kv-quant", "fp16", "--kv-resid", "5", "--kv-policy", given
    )
    assert rows["KV Policy"] == "ksem=q8_0@16,kgeo=q8_0@32,v=fp16@32,resid=0"
    fused = "ksem=q4_0@32,kgeo=q8_0@32,v=q4_0@32,resid=2"
    a = _summary(target, tmp_path, *SCORE, "--kv-quant", "fp32", "--kv-policy", fused)
    b = _summary(target, tmp_path, *SCORE, "--kv-quant", "fused", "--kv-resid", "2")
    assert a == b, "the same policy, given or derived, must give the same run"


@pytest.mark.invariant("DBA-013")
@pytest.mark.parametrize(
    ("policy", "key"),
    [
        ("ksem=q4_0,kgeo=q8_0,v=q4_0,resdi=0", "resdi"),
        ("ksem=q3_k,kgeo=q8_0,v=q4_0,resid=0", "ksem"),
        ("ksem=q4_0,kgeo=q8_0@48,v=q4_0,resid=0", "kgeo"),
        ("ksem=q4_0,kgeo=q8_0,v=q4_0", "resid"),
    ],
)
def test_a_refused_kv_policy_names_the_key_and_changes_nothing(
    target: Any, tmp_path: Path, policy: str, key: str
) -> None:
    path = tmp_path / "summary.json"
    rc, out, err = target.decoupled_runner(
        [*SCORE, "--kv-quant", "fp16", "--kv-policy", policy, "--summary-json", str(path)]
    )
    assert rc == 2, f"exit {rc}"
    assert out == "", "nothing may run after a refused policy"
    assert not path.exists(), "nothing may be written after a refused policy"
    assert "--kv-policy" in err and f"field={key}" in err, err


@pytest.mark.invariant("DBA-014")
@pytest.mark.parametrize("flag", ["--kv-cache-k-sem", "--kv-cache-v", "--kv-cache-residual-len"])
def test_legacy_kv_flags_get_a_kv_policy_hint(target: Any, flag: str) -> None:
    rc, out, err = target.decoupled_runner([*SCORE, flag, "q4_0"])
    assert rc == 2 and out == ""
    assert flag in err and "unrecognized arguments" in err
    assert "Use --kv-policy" in err, err
    rc, out, err = target.decoupled_runner([*SCORE, f"{flag}=q4_0"])
    assert rc == 2 and "Use --kv-policy" in err, err
    # other unknown flags get argparse's message without the hint
    rc, _, err = target.decoupled_runner([*SCORE, "--frobnicate"])
    assert rc == 2 and "--frobnicate" in err and "--kv-policy" not in err, err
    rc, out, _ = target.decoupled_runner(["score", "--help"])
    assert rc == 0 and "--kv-policy" in out


@pytest.mark.invariant("DBA-014")
def test_no_abbreviation_and_no_missing_command(target: Any) -> None:
    # no flag may be abbreviated: the top level's, nor any command's (each is a unique prefix)
    for argv in (
        [*SCORE, "--kv-p", "ksem=fp16,kgeo=fp16,v=fp16,resid=0"],
        ["--he", *SCORE],
        ["generate", "--seed", "1", "--prompt", "4", "--max-n", "1"],
        ["drift", "--seed", "1", "--len", "32", "--batch", "1"],
    ):
        rc, out, err = target.decoupled_runner(argv)
        assert rc == 2 and out == "" and "unrecognized arguments" in err, (argv, rc, err)
    # a command line without a command is a usage error naming what is missing
    rc, out, err = target.decoupled_runner([])
    assert rc == 2 and out == "" and "command" in err, (rc, err)


@pytest.mark.invariant("DBA-015")
@pytest.mark.parametrize(
    ("argv", "status"),
    [
        (["--null-attn", "no"], "Inactive"),
        (["--null-attn", "yes", "--kv-quant", "fused"], "Active (Fused-capable)"),
        # a capability, not the path a step took
        (["--kv-quant", "fused", "--decode-path", "streaming"], "Active (Fused-capable)"),
        (["--kv-quant", "fp16"], "Active (Unfused-only)"),
        (["--kv-policy", "ksem=q4_0@16,kgeo=q8_0,v=q4_0,resid=0"], "Active (Unfused-only)"),
        (["--kv-quant", "fused", "--kv-resid", "64"], "Active (Fused-capable)"),
    ],
)
def test_summary_reports_null_attention_capability(
    target: Any, tmp_path: Path, argv: list[str], status: str
) -> None:
    rows = _summary(target, tmp_path, "generate", "--prompt", "4,8", "--max-new", "1", *argv)
    assert rows["Null Attention"] == status, rows
    assert "KV Policy" in rows


@pytest.mark.invariant("DBA-015")
@pytest.mark.requires("decoupled.model")
def test_summary_reports_null_attention_of_a_one_layer_checkpoint(
    target: Any, tmp_path: Path
) -> None:
    from conformance.decoupled import _model as M

    ckpt = tmp_path / "one_layer.safetensors"
    target.decoupled_model({**M.NULL, "n_layer": 1}, seed=3).save(str(ckpt))
    argv = ["generate", "--checkpoint", str(ckpt), "--prompt", "4,8", "--max-new", "1"]
    rows = _summary(target, tmp_path, *argv)
    assert "n_layer=1" in rows["Model"], rows
    assert rows["Null Attention"] == "Active (Fused-capable)", rows


@pytest.mark.invariant("DBA-013")
def test_generate_given_or_derived_policy_gives_the_same_tokens(target: Any) -> None:
    """generate prints the prompt then --max-new greedy tokens; a policy given with --kv-policy
    and the same policy derived from --kv-quant/--kv-resid give the same tokens."""

    def tokens(*argv: str) -> list[int]:
        rc, out, err = target.decoupled_runner(
            ["generate", "--seed", "1", "--prompt", "4,8", "--max-new", "3", *argv]
        )
        assert rc == 0, f"exit {rc}: {err}"
        line = next(ln for ln in out.splitlines() if ln.startswith("tokens: "))
        return [int(t) for t in line.removeprefix("tokens: ").split(",")]

    derived = tokens("--kv-quant", "fused", "--kv-resid", "2")
    assert derived[:2] == [4, 8] and len(derived) == 5, derived
    assert tokens("--kv-policy", "ksem=q4_0@32,kgeo=q8_0@32,v=q4_0@32,resid=2") == derived


@pytest.mark.invariant("DBA-020")
@pytest.mark.parametrize(
    ("argv", "steps"),
    [
        (SCORE, 5),
        (["score", "--seed", "1", "--tokens", "3,9"], 1),
        (["generate", "--seed", "1", "--prompt", "4,8,15", "--max-new", "2"], 4),
        (["generate", "--seed", "1", "--prompt", "4", "--max-new", "1"], 1),
        # --max-new defaults to 8 (fp32: the cheap streaming path)
        (["generate", "--seed", "1", "--prompt", "4", "--kv-quant", "fp32"], 8),
        ([*SCORE, "--decode-path", "streaming"], 5),
    ],
)
def test_decode_paths_count_one_per_layer_and_step(
    target: Any, tmp_path: Path, argv: list[str], steps: int
) -> None:
    rows = _summary(target, tmp_path, *argv)
    n_layer = int(rows["Model"].split("n_layer=")[1].split()[0])
    taken = rows["Decode paths taken"].split(", ")
    counts = {p.rsplit(" x", 1)[0]: int(p.rsplit(" x", 1)[1]) for p in taken}
    assert list(counts) == sorted(counts), f"paths not sorted by name: {taken}"
    assert sum(counts.values()) == n_layer * steps, (
        f"{rows['Decode paths taken']!r}: {n_layer} layers x {steps} steps expected"
    )
    if "streaming" in argv:
        assert list(counts) == ["streaming"], taken


@pytest.mark.invariant("DBA-017")
@pytest.mark.parametrize("argv", [[], ["--null-attn", "yes"], ["--null-attn", "no"]])
def test_drift_measures_a_model_without_null_token(
    target: Any, tmp_path: Path, argv: list[str]
) -> None:
    rows = _summary(target, tmp_path, "drift", "--length", "32", "--batch", "1", *argv)
    assert rows["Null Attention"] == "Inactive", rows
    assert rows["Drift"] in ("within bounds", "OUT OF BOUNDS"), rows  # the drift was measured


@pytest.mark.invariant("DBA-017")
@pytest.mark.requires("decoupled.model")
def test_drift_refuses_a_checkpoint_with_null_token(target: Any, tmp_path: Path) -> None:
    from conformance.decoupled import _model as M

    ckpt = tmp_path / "null.safetensors"
    target.decoupled_model(M.NULL, seed=3).save(str(ckpt))
    path = tmp_path / "summary.json"
    argv = ["drift", "--checkpoint", str(ckpt), "--length", "32", "--summary-json", str(path)]
    rc, out, err = target.decoupled_runner(argv)
    assert rc == 1, f"exit {rc}: {err}"
    assert "DBA_APPROX_NULL" in err, err
    assert out == "" and not path.exists(), "nothing may be reported for a refused checkpoint"


@pytest.mark.invariant("DBA-025")
@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["generate", "--prompt", "", "--max-new", "1"], "--prompt"),
        (["generate", "--prompt", ",", "--max-new", "1"], "--prompt"),
        (["score", "--tokens", "7"], "--tokens"),
        (["generate", "--max-new", "1"], "--prompt"),  # left out: no token at all
        (["score"], "--tokens"),
    ],
)
def test_too_few_tokens_is_a_usage_error(
    target: Any, tmp_path: Path, argv: list[str], flag: str
) -> None:
    path = tmp_path / "summary.json"
    rc, out, err = target.decoupled_runner([*argv, "--seed", "1", "--summary-json", str(path)])
    assert rc == 2, f"exit {rc}: {err}"
    assert flag in err, err
    assert out == "" and not path.exists(), "nothing may be reported for a run that cannot run"


@pytest.mark.invariant("DBA-028")
@pytest.mark.requires("decoupled.model")
def test_score_reports_the_mean_nll_of_each_next_token(target: Any, tmp_path: Path) -> None:
    """With an fp32 policy decode gives the forward's logits (DBA-016), so the NLL is the
    float64 mean of -log softmax(logits[i - 1])[token i] over i = 1..n-1 of the exact forward."""
    from conformance.decoupled import _model as M

    ckpt = tmp_path / "model.safetensors"
    model = target.decoupled_model(M.TINY, seed=5)
    model.save(str(ckpt))
    toks = [3, 9, 27, 17, 51, 25, 9]
    path = tmp_path / "summary.json"
    argv = ["score", "--checkpoint", str(ckpt), "--tokens", ",".join(map(str, toks))]
    rc, out, err = target.decoupled_runner(
        [*argv, "--kv-quant", "fp32", "--summary-json", str(path)]
    )
    assert rc == 0, f"exit {rc}: {err}"
    lp = torch.log_softmax(model.logits([toks])[0].double(), dim=-1)
    nll = float(-lp[torch.arange(len(toks) - 1), torch.tensor(toks[1:])].mean())
    printed = dict(ln.split(": ", 1) for ln in out.splitlines()[:2])
    assert list(printed) == ["nll", "ppl"], out
    # decode's float32 tolerance moves the NLL by a few 1e-6; printing rounds to 6 decimals
    assert_close(nll, float(printed["nll"]), atol=1e-5, what="printed nll")
    assert_close(math.exp(nll), float(printed["ppl"]), atol=0.0, rtol=2e-5, what="printed ppl")
    assert json.loads(path.read_text())["NLL"] == printed["nll"], "the summary's NLL row"


@pytest.mark.invariant("DBA-030")
@pytest.mark.requires("decoupled.model")
@pytest.mark.parametrize(("null_attn", "config"), [("yes", {"null_attn": True}), ("no", {})])
def test_random_model_is_the_default_config_with_the_seed(
    target: Any, tmp_path: Path, null_attn: str, config: dict[str, Any]
) -> None:
    """Without --checkpoint the runner scores with decoupled_model(default, --seed): an fp32
    policy decodes the forward's logits (DBA-016), so its NLL is that model's (as DBA-028)."""
    toks = [3, 9, 27, 17, 51]
    argv = ["score", "--seed", "4", "--null-attn", null_attn, "--kv-quant", "fp32"]
    rows = _summary(target, tmp_path, *argv, "--tokens", ",".join(map(str, toks)))
    assert "d_model=64 n_layer=2 n_head=2 vocab=64" in rows["Model"], rows
    model = target.decoupled_model(config, seed=4)
    lp = torch.log_softmax(model.logits([toks])[0].double(), dim=-1)
    nll = float(-lp[torch.arange(len(toks) - 1), torch.tensor(toks[1:])].mean())
    assert_close(nll, float(rows["NLL"]), atol=1e-5, what="NLL of the runner's random model")


DEFAULTS = ["--seed", "0", "--null-attn", "yes", "--kv-quant", "fused", "--kv-resid", "0",
            "--decode-path", "auto"]  # fmt: skip


@pytest.mark.invariant("DBA-031")
@pytest.mark.parametrize(
    ("argv", "defaults"),
    [
        (["score", "--tokens", "3,9,27,17"], DEFAULTS),
        (["generate", "--prompt", "4,8", "--max-new", "2"], DEFAULTS),
        (["drift"], [*DEFAULTS, "--length", "96", "--batch", "2", "--data-seed", "0",
                     "--mask", "bottom-right"]),
    ],
    ids=["score", "generate", "drift"],
)  # fmt: skip
def test_a_flag_left_out_acts_as_its_default(
    target: Any, argv: list[str], defaults: list[str]
) -> None:
    rc, implicit, err = target.decoupled_runner(argv)
    assert rc == 0, f"exit {rc}: {err}"
    rc, explicit, err = target.decoupled_runner([*argv, *defaults])
    assert rc == 0, f"exit {rc}: {err}"
    assert implicit == explicit, f"{argv} with no flags differs from {defaults} given"


@pytest.mark.invariant("DBA-029")
def test_summary_json_is_the_printed_rows_in_order(target: Any, tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    argv = ["generate", "--seed", "1", "--prompt", "4,8", "--max-new", "1", "--kv-quant", "fp32"]
    rc, out, err = target.decoupled_runner([*argv, "--summary-json", str(path)])
    assert rc == 0, f"exit {rc}: {err}"
    table = out.split("Run summary\n", 1)[1].splitlines()
    printed = {ln.split(" : ", 1)[0].strip(): ln.split(" : ", 1)[1] for ln in table}
    assert list(printed)[:3] == ["Model", "KV Policy", "Null Attention"], table
    width = max(len(k) for k in printed)  # keys padded to the longest, the table closes stdout
    assert table == [f"  {k.ljust(width)} : {v}" for k, v in printed.items()], table
    body = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in printed.items())
    assert path.read_text(encoding="utf-8") == "{\n" + body + "\n}", path.read_text()
