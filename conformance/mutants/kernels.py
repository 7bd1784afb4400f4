"""Mutants of the kernels area: the reference with one deliberate defect in a kernel.

Kernel defects swap one ``@triton.jit`` helper (or a whole kernel) inside ``kernels.*``: kernels
look their helpers up through their module when they run (interpreter) or first compile (GPU),
and a mutant is applied in a fresh process before any kernel runs. The replacements are written
out in full here so that each defect is readable on its own.
"""

from __future__ import annotations

from typing import Any

import torch

from conformance.mutants import Mutant, replace
from kernels._triton import tl, triton
from kernels.decoupled_triton import _empty_state, _merge_state, _null_state

NEG_INF = tl.constexpr(float("-inf"))

# --------------------------------------------------------------------------------------------
# Decoupled kernels
# --------------------------------------------------------------------------------------------


@triton.jit
def _online_update_no_rescale(m, d, o, s, v):
    m_new = tl.maximum(m, tl.max(s, axis=0))
    m_safe = tl.where(m_new == NEG_INF, 0.0, m_new)
    p = tl.exp(s - m_safe)
    return (
        m_new,
        d + tl.sum(p, axis=0),
        o + tl.sum(p[:, None] * v, axis=0),
    )  # old state not rescaled


@triton.jit
def _nibble_shift_swapped(g):
    return tl.where((g % 2) == 0, 0, 4).to(tl.uint8)  # even element read from the low nibble


@triton.jit
def _scale_index_per_head(g, h, HD: tl.constexpr, QBLOCK: tl.constexpr):
    return (h * HD) // QBLOCK + g * 0  # the head's first block for every element of the head


@triton.jit
def _seed_null_every_launch(m, d, o, seed, s_null, v_null):
    return _merge_state(m, d, o, s_null, 1.0, v_null)  # ignores `seed`: null once per launch


@triton.jit
def _seed_null_logit_zero(m, d, o, seed, s_null, v_null):
    s = tl.where(seed, s_null * 0.0, NEG_INF)  # the defect: the null enters with logit 0
    return _merge_state(m, d, o, s, tl.where(seed, 1.0, 0.0), v_null * tl.where(seed, 1.0, 0.0))


@triton.jit
def _reduce_null_per_partition(
    qs_ptr, qg_ptr, ksn_ptr, kgn_ptr, vn_ptr,
    mp_ptr, dp_ptr, op_ptr, m_ptr, d_ptr, o_ptr,
    n_parts, sem_scale, geo_scale,
    s_ksn_b, s_ksn_h, s_ksn_c, s_kgn_b, s_kgn_h, s_kgn_c, s_vn_b, s_vn_h, s_vn_c,
    H: tl.constexpr, DS: tl.constexpr, DG: tl.constexpr, DV: tl.constexpr, HAS_NULL: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    b = row // H
    h = row % H
    dv = tl.arange(0, DV)
    m, d, o = _empty_state(DV)
    q_sem = tl.load(qs_ptr + row * DS + tl.arange(0, DS))
    q_geo = tl.load(qg_ptr + row * DG + tl.arange(0, DG))
    for p in tl.range(0, n_parts):
        slot = row * n_parts + p
        m, d, o = _merge_state(
            m,
            d,
            o,
            tl.load(mp_ptr + slot),
            tl.load(dp_ptr + slot),
            tl.load(op_ptr + slot * DV + dv),
        )
        if HAS_NULL:  # the defect: the null token merged with every partition
            s_null, v_null = _null_state(
                q_sem, q_geo, ksn_ptr, kgn_ptr, vn_ptr, b, h,
                s_ksn_b, s_ksn_h, s_ksn_c, s_kgn_b, s_kgn_h, s_kgn_c, s_vn_b, s_vn_h, s_vn_c,
                sem_scale, geo_scale, DS, DG, DV,
            )  # fmt: skip
            m, d, o = _merge_state(m, d, o, s_null, 1.0, v_null)
    tl.store(m_ptr + row, m)
    tl.store(d_ptr + row, d)
    tl.store(o_ptr + row * DV + dv, o)


def _swap(module: str, attr: str, new: Any) -> Any:
    def apply(target: Any) -> Any:
        replace(module, attr, new)
        return target

    return apply


def _skip_empty_reduce(target: Any) -> Any:
    from kernels import decoupled

    original = decoupled.reduce_partitions

    def reduce_partitions(
        qs: Any, qg: Any, cache: Any, null: Any, parts: Any, n_parts: int, *a: Any
    ) -> Any:
        if n_parts == 0:  # the defect: "nothing to reduce" -- and the null token is lost
            rows = cache.batch * cache.dims.n_head
            return decoupled._state(rows, cache.dims.v_head_dim, qs.device)
        return original(qs, qg, cache, null, parts, n_parts, *a)

    replace("kernels.decoupled", "reduce_partitions", reduce_partitions)
    return target


def _tail_from_quantized(target: Any) -> Any:
    def tail(cache: Any, ct: Any) -> torch.Tensor:
        return ct.stored(cache.prefix_len, cache.length)  # the defect: not the exact fp16 ring

    replace("kernels.decoupled", "_tail", tail)
    return target


def _eligibility_rule_skipped(module: str, words: str) -> Any:
    """A mutant whose ``module.ineligibility`` ignores the rule whose reason contains ``words``."""

    def apply(target: Any) -> Any:
        import importlib

        original = importlib.import_module(module).ineligibility

        def ineligibility(*args: Any) -> str:
            why = original(*args)
            return "" if words in why else why  # the defect: the call goes to the kernels

        replace(module, "ineligibility", ineligibility)
        return target

    return apply


def _decoupled_inputs_unchecked(target: Any) -> Any:
    def check_inputs(*args: Any) -> None:
        return None  # the defect: queries and null tensors go to the paths unchecked

    replace("kernels.decoupled", "_check_inputs", check_inputs)
    return target


def _decoupled_devices_unchecked(target: Any) -> Any:
    def check_devices(*args: Any) -> None:
        return None  # the defect: an input on another device reaches the paths

    replace("kernels.decoupled", "_check_devices", check_devices)
    return target


def _gqa_two_pass_extra_launch(target: Any) -> Any:
    from kernels import dispatch

    original = dispatch.emit

    def emit(record: Any, trace: Any) -> None:
        if record.op == "gqa_decode" and record.path == dispatch.TRITON_2PASS:
            record.detail["launches"] += 1  # the defect: the reduce is counted twice
        original(record, trace)

    replace("kernels.dispatch", "emit", emit)
    return target


def _auto_always_one_pass(target: Any) -> Any:
    from kernels import dispatch

    original = dispatch.choose

    def choose(requested: str, *args: Any) -> tuple[str, str]:
        path, reason = original(requested, *args)
        if requested == "auto" and path == dispatch.TRITON_2PASS:
            return dispatch.TRITON_1PASS, reason  # the defect: the threshold is ignored
        return path, reason

    replace("kernels.dispatch", "choose", choose)
    return target


def _two_pass_counts_nothing(target: Any) -> Any:
    from kernels import decode_attention

    original = decode_attention._two_pass

    def two_pass(*args: Any) -> tuple[torch.Tensor, int]:
        out, _ = original(*args)
        return out, 0  # the defect: the record says no partition ran (as a 1-pass call would)

    replace("kernels.decode_attention", "_two_pass", two_pass)
    return target


def _reference_path_claims_interpreter(target: Any) -> Any:
    import dataclasses

    from kernels import dispatch

    original = dispatch.emit

    def emit(record: Any, trace: Any) -> None:
        # the defect: every record says a kernel ran through the interpreter, torch's included
        original(dataclasses.replace(record, interpreter=True), trace)

    replace("kernels.dispatch", "emit", emit)
    return target


def _null_flag_inverted(target: Any) -> Any:
    import dataclasses

    from kernels import dispatch

    original = dispatch.emit

    def emit(record: Any, trace: Any) -> None:
        if "has_null" in record.detail:
            # the defect: the record says a null token was read when there was none, and back
            detail = {**record.detail, "has_null": 1 - record.detail["has_null"]}
            record = dataclasses.replace(record, detail=detail)
        original(record, trace)

    replace("kernels.dispatch", "emit", emit)
    return target


def _streaming_empty_row_nan(target: Any) -> Any:
    def normalized(o: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        return o / d.unsqueeze(-1)  # the defect: no guard, so nothing to attend gives 0/0 = NaN

    replace("kernels.decoupled", "normalized", normalized)
    return target


# --------------------------------------------------------------------------------------------
# GQA kernels and reference
# --------------------------------------------------------------------------------------------


@triton.jit
def _group_heads_interleaved(kvh, n_head_kv, GROUP: tl.constexpr, GROUP_P2: tl.constexpr):
    return tl.arange(0, GROUP_P2) * n_head_kv + kvh  # query head h reads KV head h % n_head_kv


@triton.jit
def _merge_no_rescale(m, den, acc, m2, den2, acc2):
    return tl.maximum(m, m2), den + den2, acc + acc2  # partitions summed without their max shift


def _gqa_softmax_without_guard(target: Any) -> Any:
    def gqa_decode_torch(q: Any, k: Any, v: Any, mask: Any, scale: float) -> torch.Tensor:
        group = q.shape[1] // k.shape[1]
        kk = k.float().repeat_interleave(group, dim=1)
        vv = v.float().repeat_interleave(group, dim=1)
        s = torch.einsum("thd,jhd->thj", q.float(), kk) * scale + mask.float().unsqueeze(1)
        p = torch.softmax(s, dim=-1)  # the defect: an all -inf row becomes NaN
        return torch.einsum("thj,jhd->thd", p, vv).to(q.dtype)

    replace("kernels.decode_attention", "gqa_decode_torch", gqa_decode_torch)
    return target


def _gqa_record_counts_heads(target: Any) -> Any:
    from kernels import decode_attention

    original = decode_attention.gqa_decode

    def gqa_decode(q: Any, k: Any, v: Any, mask: Any, scale: float, **kw: Any) -> torch.Tensor:
        out = original(q, k, v, mask, scale, **kw)
        if kw.get("trace"):
            kw["trace"][-1].detail["n_tokens"] = q.shape[1]  # the defect: heads, not query rows
        return out

    replace("kernels.decode_attention", "gqa_decode", gqa_decode)
    return target


def _gqa_output_in_cache_dtype(target: Any) -> Any:
    from kernels import decode_attention

    original = decode_attention.gqa_decode

    def gqa_decode(q: Any, k: Any, v: Any, mask: Any, scale: float, **kw: Any) -> torch.Tensor:
        return original(q, k, v, mask, scale, **kw).to(v.dtype)  # the defect: v's dtype, not q's

    replace("kernels.decode_attention", "gqa_decode", gqa_decode)
    return target


# --------------------------------------------------------------------------------------------
# Formats and policy
# --------------------------------------------------------------------------------------------


D = "kernels.decoupled_triton"
G = "kernels.gqa_triton"

MUTANTS = [
    Mutant(
        "krn-reference-path-claims-interpreter",
        "kernels",
        "every dispatch record sets interpreter, also on the torch and streaming paths",
        ("KRN-024",),
        _reference_path_claims_interpreter,
    ),
    Mutant(
        "krn-record-null-flag-inverted",
        "kernels",
        "a decoupled dispatch record's has_null says 1 without a null token and 0 with one",
        ("KRN-024",),
        _null_flag_inverted,
    ),
    Mutant(
        "krn-two-pass-counts-no-partition",
        "kernels",
        "the 2-pass GQA call records 0 partitions and 1 launch, the counts of a 1-pass call",
        ("KRN-024",),
        _two_pass_counts_nothing,
    ),
    Mutant(
        "krn-gqa-record-counts-heads",
        "kernels",
        "a GQA dispatch record's n_tokens gives the query heads instead of the query rows",
        ("KRN-024",),
        _gqa_record_counts_heads,
    ),
    Mutant(
        "krn-streaming-empty-row-nan",
        "kernels",
        "the streaming path divides by the softmax denominator unguarded: nothing to attend is NaN",
        ("KRN-027",),
        _streaming_empty_row_nan,
    ),
    Mutant(
        "krn-gqa-group-limit-skipped",
        "kernels",
        "a GQA call with more than 64 query heads per KV head runs the kernels instead of torch",
        ("KRN-025",),
        _eligibility_rule_skipped("kernels.decode_attention", "group"),
    ),
    Mutant(
        "krn-null-per-partition",
        "kernels",
        "2-pass reduce merges the null token once per partition instead of once",
        ("KRN-014",),
        _swap(D, "reduce_kernel", _reduce_null_per_partition),
    ),
    Mutant(
        "krn-reduce-skipped-without-partitions",
        "kernels",
        "2-pass skips the reduce when there are no partitions, losing the null token",
        ("KRN-014",),
        _skip_empty_reduce,
    ),
    Mutant(
        "krn-null-every-launch",
        "kernels",
        "1-pass seeds the null token on every launch, not only the first",
        ("KRN-013",),
        _swap(D, "_seed_null", _seed_null_every_launch),
    ),
    Mutant(
        "krn-null-logit-ignored",
        "kernels",
        "1-pass seeds the null token with logit 0 instead of its score, so a hopeless null counts",
        ("KRN-018",),
        _swap(D, "_seed_null", _seed_null_logit_zero),
    ),
    Mutant(
        "krn-missing-rescale",
        "kernels",
        "online softmax does not rescale the old state when the running max grows",
        ("KRN-017",),
        _swap(D, "_online_update", _online_update_no_rescale),
    ),
    Mutant(
        "krn-nibble-order-swapped",
        "kernels",
        "the fused kernels read the even q4_0 element from the low nibble",
        ("KRN-011",),
        _swap(D, "_nibble_shift", _nibble_shift_swapped),
    ),
    Mutant(
        "krn-scale-per-head",
        "kernels",
        "the fused kernels apply one scale per head instead of one per 32-element block",
        ("KRN-010",),
        _swap(D, "_scale_index", _scale_index_per_head),
    ),
    Mutant(
        "krn-tail-from-quantized",
        "kernels",
        "the streaming path reads the residual tail from its quantized copy",
        ("KRN-012",),
        _tail_from_quantized,
    ),
    Mutant(
        "krn-ineligible-head-dim-runs",
        "kernels",
        "eligibility forgets the power-of-two head-dim rule, so the kernel is launched anyway",
        ("KRN-021",),
        _eligibility_rule_skipped("kernels.decoupled", "power of two"),
    ),
    Mutant(
        "krn-decoupled-head-dim-limit-skipped",
        "kernels",
        "eligibility forgets the 256 head-dim limit, so a d_v=512 call is launched anyway",
        ("KRN-021",),
        _eligibility_rule_skipped("kernels.decoupled", "exceeds"),
    ),
    Mutant(
        "krn-decoupled-inputs-unchecked",
        "kernels",
        "decoupled decode takes mis-shaped or float64 queries and null tensors without an error",
        ("KRN-026",),
        _decoupled_inputs_unchecked,
    ),
    Mutant(
        "krn-decoupled-devices-unchecked",
        "kernels",
        "a decoupled query or null tensor off the cache's device is not refused with KRN_BAD_DEVICE",
        ("KRN-026",),
        _decoupled_devices_unchecked,
    ),
    Mutant(
        "krn-gqa-two-pass-extra-launch",
        "kernels",
        "a 2-pass GQA record claims one launch more than the partition kernel and reduce it ran",
        ("KRN-024",),
        _gqa_two_pass_extra_launch,
    ),
    Mutant(
        "krn-auto-ignores-threshold",
        "kernels",
        "auto dispatch never picks the 2-pass kernel",
        ("KRN-022",),
        _auto_always_one_pass,
    ),
    Mutant(
        "krn-gqa-head-interleaved",
        "kernels",
        "GQA kernels map query head h to KV head h % n_head_kv instead of h / group",
        ("KRN-002",),
        _swap(G, "_group_heads", _group_heads_interleaved),
    ),
    Mutant(
        "krn-gqa-merge-no-rescale",
        "kernels",
        "GQA 2-pass reduce adds partition states without rescaling to the common max",
        ("KRN-004",),
        _swap(G, "_merge", _merge_no_rescale),
    ),
    Mutant(
        "krn-gqa-masked-row-nan",
        "kernels",
        "the GQA torch path turns a fully masked row into NaN",
        ("KRN-003",),
        _gqa_softmax_without_guard,
    ),
    Mutant(
        "krn-gqa-output-cache-dtype",
        "kernels",
        "GQA decode returns its output in the cache's dtype instead of the query's",
        ("KRN-005",),
        _gqa_output_in_cache_dtype,
    ),
]
