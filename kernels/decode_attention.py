"""Standard GQA decode attention over the reference decoder's KV cache (spec KRN-001..KRN-008).

``gqa_decode(q, k, v, mask, scale)`` computes, for every query token ``t`` and head ``h``,

    out[t, h] = Σ_j softmax_j(scale·(q[t,h]·k[j,kvh]) + mask[t,j]) · v[j, kvh],
    kvh = h // (n_head / n_head_kv)

where ``k``/``v`` are ``[n_kv, n_head_kv, D]`` views of one stream of a per-layer cache
``[n_stream, kv_size, n_head_kv, head_dim]`` (fp32 or fp16) and ``mask [T, n_kv]`` is additive
(0 or -inf, any float accepted). A query row with every cell masked gives 0. Math is fp32; the
output has ``q``'s dtype.

Paths: ``torch`` (the reference, :func:`gqa_decode_torch`), ``triton-1pass`` and
``triton-2pass`` (split-K with ``partition_size`` cells per partition), chosen by
:mod:`kernels.dispatch`.
"""

from __future__ import annotations

import torch

from kernels import dispatch
from kernels._triton import INTERPRETER, kernel_device, triton_available, unavailable_reason
from reference_impl.errors import KernelError
from reference_impl.spec_links import implements

OP = "gqa_decode"
PATHS = ("auto", "1pass", "2pass", "torch")


@implements("KRN-006")
def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> None:
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.ndim != 3:
            raise KernelError(
                "KRN_BAD_SHAPE", f"{name} must be 3-D, got {list(x.shape)}", field=name
            )
        if not x.dtype.is_floating_point:
            raise KernelError("KRN_BAD_DTYPE", f"{name} must be a float tensor", field=name)
    t, n_head, d = q.shape
    n_kv, n_head_kv, dk = k.shape
    if dk != d:
        raise KernelError("KRN_BAD_SHAPE", f"k head dim {dk} != q head dim {d}", field="k")
    if v.shape[0] != n_kv or v.shape[1] != n_head_kv:
        raise KernelError(
            "KRN_BAD_SHAPE", f"v {list(v.shape)} does not match k {list(k.shape)}", field="v"
        )
    if n_head_kv == 0 or n_head % n_head_kv:
        raise KernelError(
            "KRN_BAD_SHAPE",
            f"n_head ({n_head}) must be a multiple of n_head_kv ({n_head_kv})",
            field="k",
        )
    if tuple(mask.shape) != (t, n_kv):
        raise KernelError(
            "KRN_BAD_SHAPE", f"mask must be [{t}, {n_kv}], got {list(mask.shape)}", field="mask"
        )
    if not mask.dtype.is_floating_point:
        raise KernelError("KRN_BAD_DTYPE", "mask must be a float tensor", field="mask")


@implements("KRN-001", "KRN-002", "KRN-003")
def gqa_decode_torch(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float
) -> torch.Tensor:
    """The reference: dense fp32 softmax; fully masked rows give 0. ``[T, n_head, Dv]``."""
    n_head, n_head_kv = q.shape[1], k.shape[1]
    group = n_head // n_head_kv
    kk = k.to(torch.float32).repeat_interleave(group, dim=1)  # [n_kv, n_head, D]
    vv = v.to(torch.float32).repeat_interleave(group, dim=1)
    s = torch.einsum("thd,jhd->thj", q.to(torch.float32), kk) * scale
    s = s + mask.to(torch.float32).unsqueeze(1)
    if s.shape[-1] == 0:
        return torch.zeros(q.shape[0], n_head, v.shape[2], dtype=q.dtype, device=q.device)
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    p = torch.exp(s - m)
    denom = p.sum(dim=-1, keepdim=True)
    out = torch.einsum("thj,jhd->thd", p, vv)
    out = torch.where(denom > 0, out / denom.clamp_min(1e-30), 0.0)
    return out.to(q.dtype)


@implements("KRN-025")
def ineligibility(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor,
    cfg: dispatch.DispatchConfig,
) -> str:
    """The first reason the Triton kernels cannot run this call, or '' (spec KRN-025)."""
    if not triton_available():
        return unavailable_reason()
    ok = (torch.float16, torch.float32)
    for name, x in (("q", q), ("k", k), ("v", v), ("mask", mask)):
        if x.dtype not in ok:
            return f"{name} dtype {x.dtype} is not fp16/fp32"
    if max(q.shape[2], v.shape[2]) > cfg.max_head_dim:
        return f"head dim exceeds {cfg.max_head_dim}"
    if q.shape[1] // k.shape[1] > cfg.max_group:
        return f"GQA group {q.shape[1] // k.shape[1]} exceeds {cfg.max_group}"
    dev = kernel_device()
    if any(x.device.type != dev for x in (q, k, v, mask)):
        return f"tensors must be on {dev} for the Triton kernels"
    return ""


@implements("KRN-001", "KRN-002", "KRN-003")
def _one_pass(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float, bn: int
) -> torch.Tensor:
    from kernels import gqa_triton as K

    t, n_head, d = q.shape
    n_kv, n_head_kv, dv = v.shape
    group = n_head // n_head_kv
    out = torch.empty(t, n_head, dv, dtype=torch.float32, device=q.device)
    K.one_pass_kernel[(t, n_head_kv)](
        q, k, v, mask, out, n_kv, n_head_kv, float(scale),
        *q.stride(), *k.stride(), *v.stride(), *mask.stride(), *out.stride(),
        D=d, DV=dv, GROUP=group, GROUP_P2=dispatch.next_pow2(group),
        BLOCK_D=dispatch.next_pow2(d), BLOCK_DV=dispatch.next_pow2(dv), BLOCK_N=bn,
    )  # fmt: skip
    return out


@implements("KRN-001", "KRN-002", "KRN-003", "KRN-004")
def _two_pass(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor,
    scale: float,
    bn: int,
    ps: int,
) -> tuple[torch.Tensor, int]:
    from kernels import gqa_triton as K

    t, n_head, d = q.shape
    n_kv, n_head_kv, dv = v.shape
    group = n_head // n_head_kv
    n_parts = -(-n_kv // ps)
    bdv = dispatch.next_pow2(dv)
    slots = max(n_parts, 1)
    mp = torch.empty(t, n_head, slots, dtype=torch.float32, device=q.device)
    lp = torch.empty_like(mp)
    ap = torch.empty(t, n_head, slots, bdv, dtype=torch.float32, device=q.device)
    if n_parts:
        K.partition_kernel[(t, n_head_kv, n_parts)](
            q, k, v, mask, mp, lp, ap, n_kv, n_head_kv, n_parts, ps, float(scale), n_head,
            *q.stride(), *k.stride(), *v.stride(), *mask.stride(),
            D=d, DV=dv, GROUP=group, GROUP_P2=dispatch.next_pow2(group),
            BLOCK_D=dispatch.next_pow2(d), BLOCK_DV=bdv, BLOCK_N=bn,
        )  # fmt: skip
    out = torch.empty(t, n_head, dv, dtype=torch.float32, device=q.device)
    K.reduce_kernel[(t, n_head)](
        mp, lp, ap, out, n_parts, *out.stride(), N_HEAD=n_head, DV=dv, BLOCK_DV=bdv
    )
    return out, n_parts


@implements("DEC-058", "KRN-001", "KRN-005", "KRN-006", "KRN-020", "KRN-024")
def gqa_decode(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor,
    scale: float,
    *,
    path: str = "auto",
    partition_size: int | None = None,
    block_n: int | None = None,
    config: dispatch.DispatchConfig | None = None,
    trace: list[dispatch.DispatchRecord] | None = None,
) -> torch.Tensor:
    """Decode attention ``[T, n_head, Dv]``; see the module doc. ``path``: auto, 1pass, 2pass
    or torch; the path that ran is appended to ``trace`` (and to any active recording)."""
    if path not in PATHS:
        raise KernelError(
            "KRN_BAD_PATH", f"unknown path {path!r}; expected one of {', '.join(PATHS)}"
        )
    cfg = config or dispatch.DEFAULT_CONFIG
    bn = block_n if block_n is not None else cfg.block_n
    ps = partition_size if partition_size is not None else cfg.partition_size
    dispatch.check_tiling(bn, ps)
    _check(q, k, v, mask)
    n_kv = k.shape[0]
    why = "" if path == "torch" else ineligibility(q, k, v, mask, cfg)
    chosen, reason = dispatch.choose(path, why, n_kv, dispatch.TORCH, cfg)
    detail: dict[str, int] = {"n_tokens": q.shape[0], "block_n": bn}
    if chosen == dispatch.TORCH:
        out = gqa_decode_torch(q, k, v, mask, scale)
    elif chosen == dispatch.TRITON_1PASS:
        out = _one_pass(q, k, v, mask, scale, bn)
        detail.update(launches=1, partitions=0)
    else:
        out, n_parts = _two_pass(q, k, v, mask, scale, bn, ps)
        detail.update(launches=1 + (n_parts > 0), partitions=n_parts, partition_size=ps)
    record = dispatch.DispatchRecord(
        op=OP,
        path=chosen,
        requested=path,
        reason=reason,
        tokens=n_kv,
        interpreter=INTERPRETER and chosen in dispatch.FUSED_PATHS,
        detail=detail,
    )
    dispatch.emit(record, trace)
    return out.to(q.dtype)
