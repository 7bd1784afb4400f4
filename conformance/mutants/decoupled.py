"""Mutants of the decoupled area: the decoupled attention call and cache (DBA-001..DBA-004,
DBA-021) and the decoupled model (reference_impl/decoupled, DBA-005..DBA-029), each with one
deliberate defect in a rule of spec/decoupled.md.

Each patch replaces a module-level function or a method of the kernels' Python wrapper, the
cache, or the model, runner and checkpoint code; a mutant runs in its own pytest process, so the
change does not leak.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import torch

from conformance.mutants import Mutant, replace

MODEL = "reference_impl.decoupled.model"
RUNNER = "reference_impl.decoupled.runner"
CKPT = "reference_impl.decoupled.checkpoint"


def _patch(module: str, attr: str, make: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A mutant applying ``module.attr = make(original)``."""

    def apply(target: Any) -> Any:
        import importlib

        original = getattr(importlib.import_module(module), attr)
        replace(module, attr, make(original))
        return target

    return apply


def _patch_method(cls_name: str, method: str, make: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A mutant replacing ``reference_impl.decoupled.model.<cls_name>.<method>``."""

    def apply(target: Any) -> Any:
        from reference_impl.decoupled import model

        cls = getattr(model, cls_name)
        setattr(cls, method, make(getattr(cls, method)))
        return target

    return apply


# -- DBA-001..DBA-004: the attention call and the cache ----------------------------------------


def _empty_cache_built(target: Any) -> Any:
    from kernels.decoupled_cache import DecoupledKVCache

    original = DecoupledKVCache.__init__

    def __init__(self: Any, policy: Any, dims: Any, batch: int, max_len: int, *a: Any) -> None:
        # the defect: a cache asked for no room is built with one slot instead of refused
        original(self, policy, dims, max(batch, 1), max(max_len, 1), *a)

    DecoupledKVCache.__init__ = __init__  # type: ignore[method-assign, assignment]
    return target


def _default_scales_swapped(orig: Any) -> Any:
    def decoupled_decode(q_sem: Any, q_geo: Any, cache: Any, **kwargs: Any) -> Any:
        d = cache.dims  # the defect: each part's default scale from the other part's head dim
        if kwargs.get("sem_scale") is None:
            kwargs["sem_scale"] = 1.0 / d.geo_head_dim**0.5
        if kwargs.get("geo_scale") is None:
            kwargs["geo_scale"] = 1.0 / d.sem_head_dim**0.5
        return orig(q_sem, q_geo, cache, **kwargs)

    return decoupled_decode


def _null_without_geo(orig: Any) -> Any:
    def decoupled_decode(q_sem: Any, q_geo: Any, cache: Any, **kwargs: Any) -> Any:
        from kernels.decoupled_cache import NullKV

        null = kwargs.get("null")
        if null is not None:  # the defect: the null logit loses its geometric part
            kwargs["null"] = NullKV(null.k_sem, torch.zeros_like(null.k_geo), null.v)
        return orig(q_sem, q_geo, cache, **kwargs)

    return decoupled_decode


def _head_major_codes(target: Any) -> Any:
    from kernels import decoupled_cache

    cls = decoupled_cache.CacheTensor
    orig = cls.prepare

    def prepare(self: Any, x: Any) -> Any:
        if x.shape[-1] % 2 == 0:  # the defect: features stored channel-major, not h·hd + c
            b, t, dim = x.shape
            x = x.reshape(b, t, 2, dim // 2).transpose(-1, -2).reshape(b, t, dim)
        return orig(self, x)

    cls.prepare = prepare  # type: ignore[method-assign]
    return target


def _append_not_atomic(target: Any) -> Any:
    from kernels import decoupled_cache

    cls = decoupled_cache.DecoupledKVCache
    orig = cls.append

    def append(self: Any, k_sem: Any, k_geo: Any, v: Any) -> None:
        tensors = (self.k_sem, self.k_geo, self.v)
        n = k_sem.shape[1]
        # the defect: each tensor written as soon as it is quantized, before the next is checked
        for t, x in zip(tensors, (k_sem, k_geo, v)):
            ok = x.ndim == 3 and x.shape[1:] == (n, t.dim) and x.shape[0] == self.batch
            if ok and self.length + n <= self.max_len:
                t.write(self.length, x, t.prepare(x))
        orig(self, k_sem, k_geo, v)

    cls.append = append  # type: ignore[method-assign]
    return target


# -- DBA-005 / DBA-006 -------------------------------------------------------------------------


def _gate_not_2g(_orig: Any) -> Any:
    def scale_queries(q_sem: Any, q_geo: Any, temp: Any, g: Any) -> tuple[Any, Any]:
        t = temp.view(1, -1, 1, 1)
        gh = g.transpose(1, 2).unsqueeze(-1)
        return q_sem * t * gh, q_geo * t * (1.0 - gh)  # the defect: g and 1-g, not 2g, 2(1-g)

    return scale_queries


def _temperature_on_gate(_orig: Any) -> Any:
    def scale_queries(q_sem: Any, q_geo: Any, temp: Any, g: Any) -> tuple[Any, Any]:
        # the defect: the temperature scales the gate's logit instead of the queries
        logit = torch.log(g) - torch.log1p(-g)
        gh = torch.sigmoid(logit * temp.view(1, 1, -1)).transpose(1, 2).unsqueeze(-1)
        return q_sem * (2.0 * gh), q_geo * (2.0 * (1.0 - gh))

    return scale_queries


def _unclamped(_orig: Any) -> Any:
    return lambda logit_scale: torch.exp(logit_scale)  # the defect: no clamp to [-8, 8]


# -- DBA-007 -----------------------------------------------------------------------------------


def _rope_on_sem(orig: Any) -> Any:
    def project(self: Any, x: Any, positions: Any) -> Any:
        from reference_impl.decoupled import model

        p = orig(self, x, positions)
        base = self.cfg.rope_base  # the defect: the semantic path rotated too
        p.q_sem = model.rope(p.q_sem, positions, base)
        p.k_sem = model.rope(p.k_sem, positions, base)
        return p

    return project


def _rotated_null(orig: Any) -> Any:
    def null_kv(self: Any) -> Any:
        from kernels.decoupled_cache import NullKV
        from reference_impl.decoupled import model

        null = orig(self)
        if null is None:
            return None
        # the defect: the null key rotated like a token at position 1
        k_geo = model.rope(null.k_geo.unsqueeze(1), torch.tensor([1]), self.cfg.rope_base)
        return NullKV(null.k_sem, k_geo.squeeze(1), null.v)

    return null_kv


# -- DBA-008 / DBA-009 -------------------------------------------------------------------------


def _summarizer_without_alpha(orig: Any) -> Any:
    def forward(self: Any, blocks: Any, kind: str) -> Any:
        if kind == "linear":  # the defect: the residual is not scaled by alpha (0 at init)
            mean = blocks.mean(dim=3)
            return mean + self.linear(mean)
        return orig(self, blocks, kind)

    return forward


def _conv_circular(orig: Any) -> Any:
    def forward(self: Any, blocks: Any, kind: str) -> Any:
        if kind != "conv":
            return orig(self, blocks, kind)
        mean = blocks.mean(dim=3)
        b, h, n, m, hd = blocks.shape
        seq = blocks.reshape(b * h * n, m, hd).transpose(1, 2)
        # the defect: the block wraps around instead of being padded with zeros
        padded = torch.nn.functional.pad(seq, (1, 1), mode="circular")
        conv = torch.nn.functional.conv1d(padded, self.conv.weight, groups=hd)
        return mean + self.alpha * conv.mean(dim=-1).reshape(b, h, n, hd)

    return forward


def _upper_left(_orig: Any) -> Any:
    def chunk_mask(n_queries: int, n_keys: int, aligned: str = "bottom-right") -> Any:
        i = torch.arange(n_queries)[:, None]
        return torch.arange(n_keys)[None, :] <= i  # the defect: upper-left aligned

    return chunk_mask


# -- DBA-010 -----------------------------------------------------------------------------------


def _out_twice(orig: Any) -> Any:
    def project_out(self: Any, attn: Any) -> Any:
        out = orig(self, attn)
        return self.out(out) if self.cfg.null_attn else out  # the defect: twice with null

    return project_out


# -- DBA-011 / DBA-016 -------------------------------------------------------------------------


def _decode_rope_shifted(orig: Any) -> Any:
    def rope(x: Any, positions: Any, base: float) -> Any:
        shift = 1 if positions.numel() == 1 else 0  # the defect: decode rotates at pos + 1
        return orig(x, positions + shift, base)

    return rope


def _tail_from_ring_only(_orig: Any) -> Any:
    def _tail(cache: Any, ct: Any) -> Any:
        # the defect (issue 14): every tensor's tail is taken from a ring, but a float tensor of a
        # mixed policy keeps none, so its first decode step with a tail raises KRN_NO_RESIDUAL
        return ct.tail(cache.tail_len)

    return _tail


def _ignores_path(orig: Any) -> Any:
    def decoupled_decode(*args: Any, **kwargs: Any) -> Any:
        kwargs["path"] = "streaming"  # the defect: the requested kernel never runs
        return orig(*args, **kwargs)

    return decoupled_decode


# -- DBA-012 -----------------------------------------------------------------------------------


def _no_shape_check(orig: Any) -> Any:
    def check_weights(model: Any, weights: Any) -> None:
        want = model.state_dict()
        for name in want:
            if name not in weights:
                from reference_impl.errors import ModelLoadError

                raise ModelLoadError("DBA_MISSING_TENSOR", name, field=name)
        # the defect: unexpected, mis-shaped and mis-typed tensors are not checked

    return check_weights


# -- DBA-013..015 ------------------------------------------------------------------------------


def _merged_resid(orig: Any) -> Any:
    def resolve_policy(args: argparse.Namespace) -> Any:
        from dataclasses import replace as dc_replace

        policy = orig(args)
        if args.kv_policy is not None and args.kv_resid:  # the defect: a derived field survives
            policy = dc_replace(policy, residual_len=args.kv_resid)
        return policy

    return resolve_policy


def _no_hint(_orig: Any) -> Any:
    return lambda unknown: f"unrecognized arguments: {' '.join(unknown)}"


def _status_ignores_policy(_orig: Any) -> Any:
    def null_attention_status(model: Any, policy: Any) -> str:
        null = model.layers[0].attn.null_kv()  # the defect: eligibility never consulted
        return "Inactive" if null is None else "Active (Fused-capable)"

    return null_attention_status


def _patch_summarizer(target: Any) -> Any:
    from reference_impl.decoupled import longseq

    cls = longseq._Summarizer
    cls.forward = _summarizer_without_alpha(cls.forward)  # type: ignore[method-assign]
    return target


def _patch_conv_circular(target: Any) -> Any:
    from reference_impl.decoupled import longseq

    cls = longseq._Summarizer
    cls.forward = _conv_circular(cls.forward)  # type: ignore[method-assign]
    return target


def _drift_model_with_null(_orig: Any) -> Any:
    def _model(args: argparse.Namespace) -> Any:
        from reference_impl.decoupled import checkpoint
        from reference_impl.decoupled.config import DecoupledConfig
        from reference_impl.decoupled.model import DecoupledLM

        if args.checkpoint:
            return checkpoint.load(args.checkpoint), args.checkpoint
        # the defect: drift builds its random model with --null-attn like the other commands
        cfg = DecoupledConfig(null_attn=args.null_attn == "yes")
        return DecoupledLM(cfg, seed=args.seed), f"random (seed {args.seed})"

    return _model


# -- DBA-021..DBA-024 --------------------------------------------------------------------------


def _bytes_without_v(target: Any) -> Any:
    from kernels import decoupled_cache, quant

    def bytes_per_token(self: Any) -> int:
        d, p = self.dims, self.policy  # the defect: only the keys are counted
        return quant.bytes_per_token(
            p.k_sem.kind, d.sem_dim, p.k_sem.qblock
        ) + quant.bytes_per_token(p.k_geo.kind, d.geo_dim, p.k_geo.qblock)

    decoupled_cache.DecoupledKVCache.bytes_per_token = bytes_per_token  # type: ignore[method-assign]
    return target


def _tokens_clamped(_orig: Any) -> Any:
    def tokens(self: Any, tokens: Any) -> Any:
        t = torch.as_tensor(tokens, dtype=torch.int64)
        # the defect: an id outside the vocabulary is clamped into it instead of refused
        return t.clamp(0, self.cfg.vocab - 1).to(self.device)

    return tokens


def _broken_forgotten(orig: Any) -> Any:
    def _check(self: Any, t: Any) -> None:
        self.broken = ""  # the defect: a step that failed inside the layers is forgotten
        orig(self, t)

    return _check


def _weights_aliased(_orig: Any) -> Any:
    def weights_of(model: Any) -> dict[str, Any]:
        # the defect: the parameters themselves are handed out, not copies
        return {k: v.detach() for k, v in model.state_dict().items()}

    return weights_of


def _short_input_is_a_failed_run(orig: Any) -> Any:
    from reference_impl.decoupled.runner import UsageError
    from reference_impl.errors import EngineError

    def _run(args: Any, out: Any) -> Any:
        try:
            return orig(args, out)
        except UsageError as exc:  # the defect: reported as a failed run (exit 1), not misuse
            raise EngineError("DBA_USAGE", str(exc)) from exc

    return _run


def _session_config_dropped(orig: Any) -> Any:
    def __init__(
        self: Any, model: Any, policy: Any, max_len: int, batch: int = 1, config: Any = None
    ) -> None:
        orig(self, model, policy, max_len, batch, None)  # the defaults, whatever start() was given

    return __init__


def _mlp_gelu(_orig: Any) -> Any:
    def mlp(self: Any, x: torch.Tensor) -> torch.Tensor:
        # the defect: a GELU MLP where the block's is SiLU (DBA-027)
        return x + self.down(torch.nn.functional.gelu(self.up(self.ffn_norm(x))))

    return mlp


def _top_level_abbrev(orig: Any) -> Any:
    def build_parser() -> argparse.ArgumentParser:
        p = orig()
        p.allow_abbrev = True  # the defect: `--he` is taken for --help (DBA-014)
        return p

    return build_parser


def _commands(p: argparse.ArgumentParser) -> Any:
    """The runner parser's subcommand action (its commands and their parsers)."""
    return next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))


def _command_optional(orig: Any) -> Any:
    def build_parser() -> argparse.ArgumentParser:
        p = orig()
        _commands(p).required = False  # the defect: the command may be left out (DBA-014)
        return p

    return build_parser


def _drift_report_without_verdict(target: Any) -> Any:
    from reference_impl.decoupled.drift import DriftReport

    def render(self: DriftReport) -> str:  # the defect: the Drift line is not printed
        return "\n".join(f"{k}: {v}" for k, v in self.rows() if k != "Drift")

    DriftReport.render = render  # type: ignore[method-assign]
    return target


def _unit_sizes_refused(target: Any) -> Any:
    from reference_impl.decoupled.config import DecoupledConfig
    from reference_impl.errors import ModelLoadError

    original = DecoupledConfig.__post_init__

    def __post_init__(self: Any) -> None:
        original(self)
        for name in ("mem_block", "local_window", "q_chunk"):
            if getattr(self, name) < 2:  # the defect: a one-token size is refused (DBA-008)
                raise ModelLoadError("DBA_BAD_CONFIG", f"{name}: must be >= 2", field=name)

    DecoupledConfig.__post_init__ = __post_init__  # type: ignore[method-assign]
    return target


def _scored_one_step_late(orig: Any) -> Any:
    def _decode_all(*args: Any) -> Any:
        seq, logits = orig(*args)
        # the defect: token i is scored with the logits that predicted token i - 1 (DBA-028)
        return seq, logits[:1] + logits[:-1]

    return _decode_all


def _summary_json_sorted(target: Any) -> Any:
    from reference_impl.decoupled.runner import Summary

    def as_dict(self: Summary) -> dict[str, str]:
        return dict(sorted(self.rows))  # the defect: the file's rows sorted by key (DBA-029)

    Summary.as_dict = as_dict  # type: ignore[method-assign]
    return target


def _default_d_ff_doubled(target: Any) -> Any:
    from reference_impl.decoupled.config import DecoupledConfig

    original = DecoupledConfig.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("d_ff", 256)  # the defect: the default MLP width is 256 (DBA-030)
        original(self, *args, **kwargs)

    DecoupledConfig.__init__ = __init__  # type: ignore[method-assign]
    return target


def _drift_default_batch_one(orig: Any) -> Any:
    def build_parser() -> argparse.ArgumentParser:
        p = orig()
        # the defect: drift measures one sequence by default (DBA-031)
        _commands(p).choices["drift"].set_defaults(batch=1)
        return p

    return build_parser


MUTANTS = [
    Mutant(
        "dba-empty-cache-built",
        "decoupled",
        "a decoupled cache of batch or max_len 0 is built with one slot instead of refused",
        ("DBA-019",),
        _empty_cache_built,
    ),
    Mutant(
        "dba-default-scales-swapped",
        "decoupled",
        "the default sem/geo scales use the other part's head dim",
        ("DBA-001",),
        _patch("kernels.decoupled", "decoupled_decode", _default_scales_swapped),
    ),
    Mutant(
        "dba-null-without-geo",
        "decoupled",
        "the null token's logit has no geometric part",
        ("DBA-002",),
        _patch("kernels.decoupled", "decoupled_decode", _null_without_geo),
    ),
    Mutant(
        "dba-cache-channel-major",
        "decoupled",
        "quantized cache rows hold the features channel-major instead of h·hd + c",
        ("DBA-003",),
        _head_major_codes,
    ),
    Mutant(
        "dba-append-not-atomic",
        "decoupled",
        "append writes each tensor as soon as it is quantized, so a failed append leaves a trace",
        ("DBA-004",),
        _append_not_atomic,
    ),
    Mutant(
        "dba-gate-not-2g",
        "decoupled",
        "the gate scales q_sem by g and q_geo by 1-g instead of 2g and 2(1-g)",
        ("DBA-005",),
        _patch(MODEL, "scale_queries", _gate_not_2g),
    ),
    Mutant(
        "dba-temperature-on-gate",
        "decoupled",
        "the learned temperature scales the gate's logit instead of the queries",
        ("DBA-006",),
        _patch(MODEL, "scale_queries", _temperature_on_gate),
    ),
    Mutant(
        "dba-temperature-unclamped",
        "decoupled",
        "the learned temperature is exp(logit_scale) without the clamp to [-8, 8]",
        ("DBA-006",),
        _patch(MODEL, "temperature", _unclamped),
    ),
    Mutant(
        "dba-rope-on-sem",
        "decoupled",
        "RoPE is applied to the semantic queries and keys too",
        ("DBA-007",),
        _patch_method("DecoupledAttention", "project", _rope_on_sem),
    ),
    Mutant(
        "dba-rope-on-null-key",
        "decoupled",
        "the null token's k_geo is rotated (as a token at position 1)",
        ("DBA-007",),
        _patch_method("DecoupledAttention", "null_kv", _rotated_null),
    ),
    Mutant(
        "dba-summarizer-not-mean-at-init",
        "decoupled",
        "the linear memory summarizer adds its residual unscaled, so it is not the mean at init",
        ("DBA-008",),
        _patch_summarizer,
    ),
    Mutant(
        "dba-longseq-upper-left-mask",
        "decoupled",
        "the long-sequence chunks use an upper-left aligned causal mask",
        ("DBA-009",),
        _patch("reference_impl.decoupled.longseq", "chunk_mask", _upper_left),
    ),
    Mutant(
        "dba-out-proj-twice",
        "decoupled",
        "with null attention the output projection is applied twice",
        ("DBA-010",),
        _patch_method("DecoupledAttention", "project_out", _out_twice),
    ),
    Mutant(
        "dba-decode-rope-off-by-one",
        "decoupled",
        "decode rotates the new token at position length + 1, unlike the forward",
        ("DBA-016",),
        _patch(MODEL, "rope", _decode_rope_shifted),
    ),
    Mutant(
        "dba-mixed-policy-tail-from-ring",
        "decoupled",
        "decode reads every tensor's residual tail from a ring, which a float tensor of a policy "
        "mixing float and quantized tensors does not keep",
        ("DBA-004", "DBA-016", "KRN-021"),
        _patch("kernels.decoupled", "_tail", _tail_from_ring_only),
    ),
    Mutant(
        "dba-decode-ignores-path",
        "decoupled",
        "a decode step runs the streaming reference whatever path is requested",
        ("DBA-011",),
        _patch(MODEL, "decoupled_decode", _ignores_path),
    ),
    Mutant(
        "dba-checkpoint-unchecked-shapes",
        "decoupled",
        "loading weights checks only that no tensor is missing",
        ("DBA-012",),
        _patch(CKPT, "check_weights", _no_shape_check),
    ),
    Mutant(
        "dba-kv-policy-merged",
        "decoupled",
        "--kv-policy keeps the derived --kv-resid instead of replacing the policy as a whole",
        ("DBA-013",),
        _patch(RUNNER, "resolve_policy", _merged_resid),
    ),
    Mutant(
        "dba-legacy-flag-no-hint",
        "decoupled",
        "a legacy --kv-cache-* flag is refused without the --kv-policy hint",
        ("DBA-014",),
        _patch(RUNNER, "legacy_hint", _no_hint),
    ),
    Mutant(
        "dba-null-status-ignores-eligibility",
        "decoupled",
        "the summary reports null attention fused-capable without the kernels' eligibility rule",
        ("DBA-015",),
        _patch(RUNNER, "null_attention_status", _status_ignores_policy),
    ),
    Mutant(
        "dba-drift-model-with-null",
        "decoupled",
        "the drift command builds its random model with a null token when --null-attn says yes",
        ("DBA-017",),
        _patch(RUNNER, "_model", _drift_model_with_null),
    ),
    Mutant(
        "dba-conv-summarizer-circular",
        "decoupled",
        "the conv memory summarizer pads each block circularly instead of with zeros",
        ("DBA-018",),
        _patch_conv_circular,
    ),
    Mutant(
        "dba-bytes-per-token-without-v",
        "decoupled",
        "the decoupled cache's bytes per token count the keys' buffers but not v's",
        ("DBA-021",),
        _bytes_without_v,
    ),
    Mutant(
        "dba-token-clamped",
        "decoupled",
        "a token id outside the vocabulary is clamped into it instead of refused",
        ("DBA-022",),
        _patch_method("DecoupledLM", "tokens", _tokens_clamped),
    ),
    Mutant(
        "dba-broken-session-forgotten",
        "decoupled",
        "a session whose step failed inside the layers accepts further steps",
        ("DBA-023",),
        _patch_method("DecodeSession", "_check", _broken_forgotten),
    ),
    Mutant(
        "dba-weights-aliased",
        "decoupled",
        "weights() hands out the model's parameters instead of copies",
        ("DBA-024",),
        _patch(CKPT, "weights_of", _weights_aliased),
    ),
    Mutant(
        "dba-short-input-failed-run",
        "decoupled",
        "an empty --prompt or a one-token --tokens exits 1 as a failed run, not 2 as a usage error",
        ("DBA-025",),
        _patch(RUNNER, "_run", _short_input_is_a_failed_run),
    ),
    Mutant(
        "dba-session-config-dropped",
        "decoupled",
        "a session ignores the threshold and partition size it was started with",
        ("DBA-026",),
        _patch_method("DecodeSession", "__init__", _session_config_dropped),
    ),
    Mutant(
        "dba-mlp-gelu",
        "decoupled",
        "a block's MLP applies GELU instead of SiLU",
        ("DBA-027",),
        _patch_method("Block", "mlp", _mlp_gelu),
    ),
    Mutant(
        "dba-top-level-flag-abbreviated",
        "decoupled",
        "the runner's top-level parser accepts abbreviations, so --he is taken for --help",
        ("DBA-014",),
        _patch(RUNNER, "build_parser", _top_level_abbrev),
    ),
    Mutant(
        "dba-command-optional",
        "decoupled",
        "the runner's command is optional, so a command line without one is not a usage error",
        ("DBA-014",),
        _patch(RUNNER, "build_parser", _command_optional),
    ),
    Mutant(
        "dba-drift-report-without-verdict",
        "decoupled",
        "the drift command's stdout report leaves out its Drift line",
        ("DBA-009",),
        _drift_report_without_verdict,
    ),
    Mutant(
        "dba-unit-sizes-refused",
        "decoupled",
        "a mem_block, local_window or q_chunk of 1 is refused as a bad config",
        ("DBA-008",),
        _unit_sizes_refused,
    ),
    Mutant(
        "dba-score-nll-one-step-late",
        "decoupled",
        "score takes each token's log-likelihood from the logits that predicted the token before",
        ("DBA-028",),
        _patch(RUNNER, "_decode_all", _scored_one_step_late),
    ),
    Mutant(
        "dba-summary-json-sorted",
        "decoupled",
        "--summary-json writes the summary's rows sorted by key, not in the order printed",
        ("DBA-029",),
        _summary_json_sorted,
    ),
    Mutant(
        "dba-default-config-d-ff",
        "decoupled",
        "a config that leaves d_ff out gets an MLP width of 256 instead of the default 128",
        ("DBA-030",),
        _default_d_ff_doubled,
    ),
    Mutant(
        "dba-drift-default-batch-one",
        "decoupled",
        "drift without --batch measures one sequence instead of the default 2",
        ("DBA-031",),
        _patch(RUNNER, "build_parser", _drift_default_batch_one),
    ),
]
