"""``python -m reference_impl.decoupled``: generate with, score with, or check a decoupled model.

KV settings (DBA-013): ``--kv-quant`` and ``--kv-resid`` *derive* a KV cache policy;
``--kv-policy STRING`` replaces the derived policy as a whole (no field is merged from the
derived one). Every policy goes through :func:`kernels.policy.parse_policy`, the single source
of truth; a string it refuses stops the run before anything is computed or written, with the
parser's error (it names the key). Flags of the decoupled project's per-tensor style
(``--kv-cache-k-sem`` ...) are refused with a hint to use ``--kv-policy`` (DBA-014).

The run summary (DBA-015) states the policy and whether null attention is inactive, active on
the streaming path only, or active with the fused kernels able to run it: a *capability*
computed from the kernels' own eligibility rule for this model, policy and build, not from the
path a step happened to take.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn, TextIO

import torch

from kernels import dispatch
from kernels.decoupled import ineligibility
from kernels.decoupled_cache import DecoupledDims, DecoupledKVCache
from kernels.policy import KVCachePolicy, parse_policy
from reference_impl.decoupled import checkpoint
from reference_impl.decoupled.config import DecoupledConfig
from reference_impl.decoupled.model import DecoupledLM
from reference_impl.errors import EngineError
from reference_impl.spec_links import implements

LEGACY_PREFIX = "--kv-cache-"  # --kv-cache-k-sem, --kv-cache-k-geo, --kv-cache-v, ...
POLICY_HINT = "Use --kv-policy for a unified configuration, e.g. --kv-policy "
FUSED_EXAMPLE = "ksem=q4_0@32,kgeo=q8_0@32,v=q4_0@32,resid=0"
# --kv-quant presets: the kinds of (k_sem, k_geo, v)
PRESETS = {
    "fp32": ("fp32", "fp32", "fp32"),
    "fp16": ("fp16", "fp16", "fp16"),
    "q8_0": ("q8_0", "q8_0", "q8_0"),
    "fused": ("q4_0", "q8_0", "q4_0"),
}
NULL_INACTIVE = "Inactive"
NULL_UNFUSED = "Active (Unfused-only)"
NULL_FUSED = "Active (Fused-capable)"

EPILOG = f"""examples:
  python -m reference_impl.decoupled generate --seed 0 --prompt 1,2,3 --max-new 8
  python -m reference_impl.decoupled score --checkpoint m.safetensors --tokens 5,9,2,7 \\
      --kv-policy {FUSED_EXAMPLE}
  python -m reference_impl.decoupled drift --checkpoint m.safetensors --length 96
"""


class UsageError(Exception):
    """A command line the runner refuses (exit status 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: error: {message}")


def _token_list(text: str) -> list[int]:
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of ints: {text!r}") from exc


@implements("DBA-014", "DBA-031")
def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m reference_impl.decoupled",
        description="Run a decoupled-attention model: generate, score, or measure the "
        "long-sequence approximation's drift.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # an abbreviation must not silently pick a KV flag
    )
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    common = _Parser(add_help=False, allow_abbrev=False)
    src = common.add_argument_group("model")
    src.add_argument("--checkpoint", help="a decoupled-dba safetensors checkpoint")
    src.add_argument("--seed", type=int, default=0, help="random initialization seed (default 0)")
    src.add_argument("--null-attn", choices=("yes", "no"), default="yes",
                     help="random initialization: with a null token (default yes)")  # fmt: skip
    kv = common.add_argument_group("KV cache")
    kv.add_argument("--kv-quant", choices=tuple(PRESETS), default="fused",
                    help="derived policy: cache kinds (default fused = q4_0/q8_0/q4_0)")  # fmt: skip
    kv.add_argument("--kv-resid", type=int, default=0,
                    help="derived policy: exact fp16 residual tokens (default 0)")  # fmt: skip
    kv.add_argument("--kv-policy", metavar="POLICY",
                    help="a full KV policy string; replaces --kv-quant/--kv-resid as a whole, "
                    f"e.g. {FUSED_EXAMPLE}")  # fmt: skip
    kv.add_argument("--decode-path", choices=("auto", "1pass", "2pass", "streaming"),
                    default="auto", help="decode attention path requested (default auto)")  # fmt: skip
    common.add_argument("--summary-json", metavar="PATH", help="also write the summary as JSON")
    gen = sub.add_parser("generate", parents=[common], help="greedy generation",
                         allow_abbrev=False)  # fmt: skip
    gen.add_argument("--prompt", type=_token_list, required=True, help="token ids, e.g. 1,2,3")
    gen.add_argument("--max-new", type=int, default=8, help="tokens to generate (default 8)")
    sc = sub.add_parser("score", parents=[common], help="NLL / perplexity of a token sequence",
                        allow_abbrev=False)  # fmt: skip
    sc.add_argument("--tokens", type=_token_list, required=True, help="token ids, e.g. 1,2,3")
    dr = sub.add_parser("drift", parents=[common], allow_abbrev=False,
                        help="long-sequence approximation vs exact attention")  # fmt: skip
    dr.add_argument("--length", type=int, default=96, help="tokens per sequence (default 96)")
    dr.add_argument("--batch", type=int, default=2, help="sequences (default 2)")
    dr.add_argument("--data-seed", type=int, default=0, help="seed of the random tokens")
    dr.add_argument("--mask", choices=("bottom-right", "upper-left"), default="bottom-right",
                    help="chunk causal mask; upper-left reproduces the decoupled project's "
                    "defect (default bottom-right)")  # fmt: skip
    return p


@implements("DBA-014")
def legacy_hint(unknown: Sequence[str]) -> str:
    """The message for unrecognized arguments, with the --kv-policy hint for legacy KV flags."""
    msg = f"unrecognized arguments: {' '.join(unknown)}"
    legacy = [a.split("=", 1)[0] for a in unknown if a.startswith(LEGACY_PREFIX)]
    if legacy:
        msg += f"; {', '.join(legacy)} is not supported. {POLICY_HINT}{FUSED_EXAMPLE}"
    return msg


@implements("DBA-013")
def resolve_policy(args: argparse.Namespace) -> KVCachePolicy:
    """The run's policy: ``--kv-policy`` as a whole when given, else the derived one; both
    parsed by parse_policy (which raises KernelError naming the key)."""
    if args.kv_policy is not None:
        return parse_policy(args.kv_policy)
    ks, kg, v = PRESETS[args.kv_quant]
    return parse_policy(f"ksem={ks},kgeo={kg},v={v},resid={args.kv_resid}")


@implements("DBA-015")
def null_attention_status(model: DecoupledLM, policy: KVCachePolicy) -> str:
    """Inactive / Active (Unfused-only) / Active (Fused-capable), from the kernels' eligibility
    rule evaluated on this model's dims and null token, this policy and this build."""
    null = model.layers[0].attn.null_kv()
    if null is None:
        return NULL_INACTIVE
    cfg = model.cfg
    dims = DecoupledDims(cfg.n_head, cfg.sem_head_dim, cfg.geo_head_dim, cfg.v_head_dim)
    probe = DecoupledKVCache(policy, dims, 1, 1, device=model.device)
    q = torch.zeros(1, cfg.n_head, cfg.sem_head_dim, device=model.device)
    why = ineligibility(q, probe, null, dispatch.DEFAULT_CONFIG)
    return NULL_FUSED if not why else NULL_UNFUSED


@dataclass
class Summary:
    rows: list[tuple[str, str]]

    def render(self) -> str:
        width = max(len(k) for k, _ in self.rows)
        lines = ["Run summary"] + [f"  {k.ljust(width)} : {v}" for k, v in self.rows]
        return "\n".join(lines)

    def as_dict(self) -> dict[str, str]:
        return dict(self.rows)


@implements("DBA-017", "DBA-030")
def _model(args: argparse.Namespace) -> tuple[DecoupledLM, str]:
    if args.checkpoint:
        return checkpoint.load(args.checkpoint), args.checkpoint
    cfg = DecoupledConfig(null_attn=args.null_attn == "yes")
    if args.command == "drift":  # the long-sequence approximation has no null token (DBA-017)
        cfg = DecoupledConfig(null_attn=False)
    return DecoupledLM(cfg, seed=args.seed), f"random (seed {args.seed})"


@implements("DBA-020")
def _paths(counter: Counter[str]) -> str:
    return ", ".join(f"{p} x{n}" for p, n in sorted(counter.items())) or "-"


@implements("DBA-020")
def _decode_all(
    model: DecoupledLM,
    policy: KVCachePolicy,
    tokens: list[int],
    n_new: int,
    path: str,
    paths: Counter[str],
) -> tuple[list[int], list[torch.Tensor]]:
    """Teacher-force ``tokens`` then generate ``n_new`` greedily; every step's logits."""
    sess = model.session(policy, max_len=len(tokens) + n_new, batch=1)
    seq, logits = list(tokens), []
    for i in range(len(tokens) + n_new - 1):
        out, records = sess.step([seq[i]], path=path)
        paths.update(r.path for r in records)
        logits.append(out[0])
        if i + 1 >= len(seq):
            seq.append(int(out[0].argmax()))
    return seq, logits


@implements("DBA-025", "DBA-028")
def _run(args: argparse.Namespace, out: TextIO) -> Summary:
    policy = resolve_policy(args)  # before anything else: a bad policy changes nothing
    model, source = _model(args)
    cfg = model.cfg
    rows = [
        ("Model", f"{checkpoint.ARCHITECTURE} d_model={cfg.d_model} n_layer={cfg.n_layer} "
         f"n_head={cfg.n_head} vocab={cfg.vocab} ({source})"),
        ("KV Policy", policy.short()),
        ("Null Attention", null_attention_status(model, policy)),
    ]  # fmt: skip
    paths: Counter[str] = Counter()
    if args.command == "generate":
        if not args.prompt:
            raise UsageError("generate: error: --prompt needs at least one token")
        seq, _ = _decode_all(model, policy, args.prompt, args.max_new, args.decode_path, paths)
        print(f"tokens: {','.join(map(str, seq))}", file=out)
        rows.append(("Decode paths taken", _paths(paths)))
    elif args.command == "score":
        if len(args.tokens) < 2:
            raise UsageError("score: error: --tokens needs at least two tokens")
        _, logits = _decode_all(model, policy, args.tokens, 0, args.decode_path, paths)
        lp = torch.log_softmax(torch.stack(logits).double(), dim=-1)
        target = torch.tensor(args.tokens[1:], device=lp.device)
        nll = float(-lp.gather(1, target[:, None]).mean())
        print(f"nll: {nll:.6f}\nppl: {math.exp(nll):.6f}", file=out)
        rows += [("Decode paths taken", _paths(paths)), ("NLL", f"{nll:.6f}")]
    else:
        from reference_impl.decoupled import drift

        report = drift.measure(model, args.length, args.batch, args.data_seed, args.mask)
        print(report.render(), file=out)
        rows += [(k, v) for k, v in report.rows()]
    return Summary(rows)


@implements("DBA-029")
def main(argv: Sequence[str] | None = None, out: TextIO | None = None,
         err: TextIO | None = None) -> int:  # fmt: skip
    """Run the CLI; returns the exit status (0 ok, 1 failed run, 2 bad command line)."""
    out = out or sys.stdout
    err = err or sys.stderr
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args, unknown = parser.parse_known_args(argv)
        if unknown:
            parser.error(legacy_hint(unknown))
    except UsageError as exc:
        print(parser.format_usage().rstrip(), file=err)
        print(exc, file=err)
        return 2
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    try:
        summary = _run(args, out)
    except UsageError as exc:
        print(exc, file=err)
        return 2
    except EngineError as exc:
        flag = "--kv-policy" if args.kv_policy is not None and exc.code.startswith("QNT_") else ""
        print(f"error: {flag + ': ' if flag else ''}{exc}", file=err)
        return 2 if flag else 1
    print(summary.render(), file=out)
    if args.summary_json:
        with open(args.summary_json, "w", encoding="utf-8") as f:
            json.dump(summary.as_dict(), f, indent=2)
    return 0
