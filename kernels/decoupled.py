"""Decoupled attention decode: one query token per sequence over a :class:`DecoupledKVCache`.

For batch row ``b`` and head ``h`` the logit of key ``t`` is

    s_t = (q_sem·k_sem[t])·sem_scale + (q_geo·k_geo[t])·geo_scale

(defaults ``1/sqrt(d_sem)`` and ``1/sqrt(d_geo)``), the optional null token contributes one
more key ``(k_sem_null, k_geo_null)`` with value ``v_null``, and the output is the softmax-weighted
sum of values; with nothing to attend (empty cache, no null) it is 0.

Paths (see kernels.dispatch): ``streaming`` (torch, the reference: null first, then the
dequantized prefix in blocks, then the exact tail, with an online softmax in fp32),
``triton-1pass`` and ``triton-2pass`` (kernels.decoupled_triton). All paths read the same
values: dequantized codes for ``[0, prefix_len)`` and the fp16 ring for the tail (a float
tensor of a mixed policy keeps no ring: its buffer gives both).
"""

from __future__ import annotations

import math

import torch

from kernels import dispatch
from kernels._triton import INTERPRETER, kernel_device, triton_available, unavailable_reason
from kernels.decoupled_cache import CacheTensor, DecoupledKVCache, NullKV
from reference_impl.errors import KernelError
from reference_impl.spec_links import implements

OP = "decoupled_decode"
STREAM_BLOCK = 64  # tokens per streaming step of the reference


# ---------------------------------------------------------------------------------------------
# Input validation (invalid input raises; an ineligible but valid configuration falls back)
# ---------------------------------------------------------------------------------------------


@implements("KRN-026")
def _check_inputs(
    q_sem: torch.Tensor, q_geo: torch.Tensor, cache: DecoupledKVCache, null: NullKV | None
) -> None:
    d = cache.dims
    want = {
        "q_sem": (q_sem, (cache.batch, d.n_head, d.sem_head_dim)),
        "q_geo": (q_geo, (cache.batch, d.n_head, d.geo_head_dim)),
    }
    for name, (x, shape) in want.items():
        if tuple(x.shape) != shape:
            raise KernelError(
                "KRN_BAD_SHAPE", f"{name} must be {list(shape)}, got {list(x.shape)}", field=name
            )
        if x.dtype not in (torch.float16, torch.float32):
            raise KernelError("KRN_BAD_DTYPE", f"{name} must be fp16 or fp32", field=name)
    if null is None:
        return
    heads = {
        "k_sem_null": (null.k_sem, d.sem_head_dim),
        "k_geo_null": (null.k_geo, d.geo_head_dim),
        "v_null": (null.v, d.v_head_dim),
    }
    for name, (x, hd) in heads.items():
        ok = tuple(x.shape) in ((d.n_head, hd), (cache.batch, d.n_head, hd))
        if not ok:
            raise KernelError(
                "KRN_BAD_SHAPE",
                f"{name} must be [{d.n_head}, {hd}] or [{cache.batch}, {d.n_head}, {hd}], "
                f"got {list(x.shape)}",
                field=name,
            )


@implements("KRN-026")
def _check_devices(
    q_sem: torch.Tensor, q_geo: torch.Tensor, cache: DecoupledKVCache, null: NullKV | None
) -> None:
    """Every path reads the inputs together with the cache's buffers, so an input on another
    device is refused (a fallback could not read it either)."""
    ct = cache.k_sem
    buf = ct.codes if ct.codes is not None else ct.buf
    assert buf is not None
    named = {"q_sem": q_sem, "q_geo": q_geo}
    if null is not None:
        named |= {"k_sem_null": null.k_sem, "k_geo_null": null.k_geo, "v_null": null.v}
    for name, x in named.items():
        if x.device != buf.device:
            raise KernelError(
                "KRN_BAD_DEVICE", f"{name} is on {x.device}, the cache on {buf.device}", field=name
            )


@implements("KRN-021")
def ineligibility(
    q_sem: torch.Tensor,
    cache: DecoupledKVCache,
    null: NullKV | None,
    config: dispatch.DispatchConfig,
) -> str:
    """The first reason the fused kernels cannot run this call, or '' (spec KRN-021)."""
    if not triton_available():
        return unavailable_reason()
    if not cache.policy.is_fused_layout():
        return (
            f"cache policy {cache.policy.short()} is not the fused layout "
            "ksem=q4_0@32,kgeo=q8_0@32,v=q4_0@32"
        )
    d = cache.dims
    for name, hd in (("d_sem", d.sem_head_dim), ("d_geo", d.geo_head_dim), ("d_v", d.v_head_dim)):
        if not dispatch.is_pow2(hd) or hd < 2:
            return f"head dim {name}={hd} is not a power of two >= 2"
        if hd > config.max_head_dim:
            return f"head dim {name}={hd} exceeds {config.max_head_dim}"
    dev = kernel_device()
    tensors = [q_sem, cache.k_sem.codes, cache.k_geo.codes, cache.v.codes]
    if null is not None:
        tensors += [null.k_sem, null.k_geo, null.v]
    if any(t is not None and t.device.type != dev for t in tensors):
        return f"tensors must be on {dev} for the Triton kernels"
    for ct in (cache.k_sem, cache.k_geo, cache.v):
        assert ct.codes is not None and ct.scales is not None
        if ct.codes.stride(-1) != 1 or ct.scales.stride(-1) != 1:
            return "quantized buffers must be contiguous along the feature dim"
        if ct.ring is not None and ct.ring.stride(-1) != 1:
            return "the residual ring must be contiguous along the feature dim"
    return ""


# ---------------------------------------------------------------------------------------------
# The torch streaming reference
# ---------------------------------------------------------------------------------------------


def _heads(x: torch.Tensor, n_head: int) -> torch.Tensor:
    """[B, n, H*hd] -> [B, H, n, hd]."""
    b, n, _ = x.shape
    return x.reshape(b, n, n_head, -1).transpose(1, 2)


def _update(
    m: torch.Tensor, d: torch.Tensor, o: torch.Tensor, s: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Online softmax step: s [B,H,n], v [B,H,n,dv] into m [B,H], d [B,H], o [B,H,dv].

    ``n`` >= 1: the streaming reference folds the null token, non-empty prefix blocks and a tail
    only when ``tail_len`` > 0, so no empty block reaches it."""
    m_new = torch.maximum(m, s.amax(dim=-1))
    m_safe = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
    alpha = torch.exp(m - m_safe)
    p = torch.exp(s - m_safe.unsqueeze(-1))
    d = d * alpha + p.sum(dim=-1)
    o = o * alpha.unsqueeze(-1) + torch.einsum("bhn,bhnd->bhd", p, v)
    return m_new, d, o


@implements("DBA-004", "KRN-016")
def _tail(cache: DecoupledKVCache, ct: CacheTensor) -> torch.Tensor:
    """The exact tail of one cache tensor (fp32 ``[B, tail_len, dim]``).

    A policy that mixes float and quantized tensors has a residual, but only its quantized
    tensors keep a ring: a float tensor's buffer already holds the tail as exactly as it stores
    any token, so its rows ``[prefix_len, length)`` are read there (what an all-float policy reads).
    """
    if ct.buf is not None:
        return ct.stored(cache.prefix_len, cache.length)
    return ct.tail(cache.tail_len)


@implements("DBA-001", "DBA-002", "KRN-012", "KRN-027")
def streaming_decode(
    q_sem: torch.Tensor,
    q_geo: torch.Tensor,
    cache: DecoupledKVCache,
    null: NullKV | None,
    sem_scale: float,
    geo_scale: float,
    block: int = STREAM_BLOCK,
) -> torch.Tensor:
    """The reference: fp32 online softmax over null, prefix blocks and tail; ``[B, H, d_v]``."""
    dims = cache.dims
    qs = q_sem.to(torch.float32)
    qg = q_geo.to(torch.float32)
    bsz, n_head = cache.batch, dims.n_head
    dev = q_sem.device
    m = torch.full((bsz, n_head), -math.inf, device=dev)
    d = torch.zeros(bsz, n_head, device=dev)
    o = torch.zeros(bsz, n_head, dims.v_head_dim, device=dev)

    def fold(k_sem: torch.Tensor, k_geo: torch.Tensor, v: torch.Tensor) -> None:
        nonlocal m, d, o
        s = torch.einsum("bhd,bhnd->bhn", qs, k_sem) * sem_scale
        s = s + torch.einsum("bhd,bhnd->bhn", qg, k_geo) * geo_scale
        m, d, o = _update(m, d, o, s, v)

    if null is not None:
        nx = null.expanded(bsz)
        fold(
            nx.k_sem.to(torch.float32).unsqueeze(2),
            nx.k_geo.to(torch.float32).unsqueeze(2),
            nx.v.to(torch.float32).unsqueeze(2),
        )
    for start in range(0, cache.prefix_len, block):
        end = min(start + block, cache.prefix_len)
        fold(
            _heads(cache.k_sem.stored(start, end), n_head),
            _heads(cache.k_geo.stored(start, end), n_head),
            _heads(cache.v.stored(start, end), n_head),
        )
    if cache.tail_len:
        fold(
            _heads(_tail(cache, cache.k_sem), n_head),
            _heads(_tail(cache, cache.k_geo), n_head),
            _heads(_tail(cache, cache.v), n_head),
        )
    return normalized(o, d)


@implements("KRN-027")
def normalized(o: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """The online softmax's last step, ``o / d``, with exact zeros in a row that attended to
    nothing (``d == 0``: an empty cache without a null token, or a null of logit -inf)."""
    return torch.where(d.unsqueeze(-1) > 0, o / d.clamp_min(1e-30).unsqueeze(-1), 0.0)


# ---------------------------------------------------------------------------------------------
# Triton drivers
# ---------------------------------------------------------------------------------------------


@implements("KRN-015")
def _null_args(
    null: NullKV | None, q_sem: torch.Tensor, batch: int
) -> tuple[list[torch.Tensor], list[int]]:
    """Null pointers and their (b, h, c) strides; placeholders (never read) without null."""
    if null is None:
        return [q_sem, q_sem, q_sem], [0] * 9
    nx = null.expanded(batch)
    tensors = [nx.k_sem, nx.k_geo, nx.v]
    strides: list[int] = []
    for t in tensors:
        strides += [t.stride(0), t.stride(1), t.stride(2)]
    return tensors, strides


def _cache_args(cache: DecoupledKVCache) -> tuple[list[torch.Tensor], list[int]]:
    tensors: list[torch.Tensor] = []
    strides: list[int] = []
    for ct in (cache.k_sem, cache.k_geo, cache.v):
        assert ct.codes is not None and ct.scales is not None
        tensors += [ct.codes, ct.scales]
        strides += [
            ct.codes.stride(0),
            ct.codes.stride(1),
            ct.scales.stride(0),
            ct.scales.stride(1),
        ]
    return tensors, strides


@implements("KRN-016", "KRN-027")
def _finalize(
    qs: torch.Tensor,
    qg: torch.Tensor,
    cache: DecoupledKVCache,
    state: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    sem_scale: float,
    geo_scale: float,
    block_n: int,
) -> torch.Tensor:
    from kernels import decoupled_triton as K

    dims = cache.dims
    bsz, n_head = cache.batch, dims.n_head
    out = torch.empty(bsz, n_head, dims.v_head_dim, dtype=torch.float32, device=qs.device)
    n_tail = cache.tail_len
    rings = [ct.ring if ct.ring is not None else qs for ct in (cache.k_sem, cache.k_geo, cache.v)]
    # a tensor without a ring (resid 0) passes qs, 3-D like a ring ([B, H, d_sem], KRN-026);
    # its tail is empty, so the kernel never reads through those strides
    ring_strides = [s for r in rings for s in (r.stride(0), r.stride(1))]
    m, d, o = state
    K.finalize_kernel[(bsz * n_head,)](
        qs, qg, *rings, m, d, o, out,
        n_tail, sem_scale, geo_scale,
        *ring_strides, out.stride(0), out.stride(1),
        H=n_head, DS=dims.sem_head_dim, DG=dims.geo_head_dim, DV=dims.v_head_dim,
        BLOCK_N=block_n,
    )  # fmt: skip
    return out


def _state(rows: int, dv: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    return (
        torch.full((rows,), -math.inf, dtype=torch.float32, device=device),
        torch.zeros(rows, dtype=torch.float32, device=device),
        torch.zeros(rows, dv, dtype=torch.float32, device=device),
    )


@implements("KRN-010", "KRN-013", "KRN-017", "KRN-024")
def one_pass(
    qs: torch.Tensor,
    qg: torch.Tensor,
    cache: DecoupledKVCache,
    null: NullKV | None,
    sem_scale: float,
    geo_scale: float,
    block_n: int,
    chunk: int,
) -> tuple[torch.Tensor, dict[str, int]]:
    """1-pass: one update launch per ``chunk`` prefix tokens (at least one), state carried."""
    from kernels import decoupled_triton as K

    dims = cache.dims
    rows = cache.batch * dims.n_head
    m, d, o = _state(rows, dims.v_head_dim, qs.device)
    null_t, null_s = _null_args(null, qs, cache.batch)
    cache_t, cache_s = _cache_args(cache)
    n_prefix = cache.prefix_len
    starts = list(range(0, n_prefix, chunk))
    if not starts and null is not None:
        starts = [0]  # the launch that seeds the null token must happen even with no prefix
    for start in starts:
        K.update_kernel[(rows,)](
            qs, qg, *null_t, *cache_t, m, d, o,
            start, chunk, n_prefix, sem_scale, geo_scale,
            *null_s, *cache_s,
            H=dims.n_head, DS=dims.sem_head_dim, DG=dims.geo_head_dim, DV=dims.v_head_dim,
            QBLOCK=32, BLOCK_N=block_n, HAS_NULL=null is not None,
        )  # fmt: skip
    out = _finalize(qs, qg, cache, (m, d, o), sem_scale, geo_scale, block_n)
    return out, {"launches": len(starts) + 1, "chunk": chunk, "partitions": 0}


@implements("KRN-011", "KRN-014")
def reduce_partitions(
    qs: torch.Tensor,
    qg: torch.Tensor,
    cache: DecoupledKVCache,
    null: NullKV | None,
    parts: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    n_parts: int,
    sem_scale: float,
    geo_scale: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """2-pass, pass 2: merge ``n_parts`` partition states and the null token (runs for P=0)."""
    from kernels import decoupled_triton as K

    dims = cache.dims
    rows = cache.batch * dims.n_head
    m, d, o = _state(rows, dims.v_head_dim, qs.device)
    null_t, null_s = _null_args(null, qs, cache.batch)
    K.reduce_kernel[(rows,)](
        qs, qg, *null_t, *parts, m, d, o,
        n_parts, sem_scale, geo_scale, *null_s,
        H=dims.n_head, DS=dims.sem_head_dim, DG=dims.geo_head_dim, DV=dims.v_head_dim,
        HAS_NULL=null is not None,
    )  # fmt: skip
    return m, d, o


@implements("KRN-011", "KRN-014", "KRN-017", "KRN-024")
def two_pass(
    qs: torch.Tensor,
    qg: torch.Tensor,
    cache: DecoupledKVCache,
    null: NullKV | None,
    sem_scale: float,
    geo_scale: float,
    block_n: int,
    partition_size: int,
) -> tuple[torch.Tensor, dict[str, int]]:
    """2-pass (split-K): partition kernel over ``P`` partitions, reduce, then the tail."""
    from kernels import decoupled_triton as K

    dims = cache.dims
    rows = cache.batch * dims.n_head
    n_prefix = cache.prefix_len
    n_parts = -(-n_prefix // partition_size)
    dev = qs.device
    mp = torch.empty(rows, max(n_parts, 1), dtype=torch.float32, device=dev)
    dp = torch.empty_like(mp)
    op = torch.empty(rows, max(n_parts, 1), dims.v_head_dim, dtype=torch.float32, device=dev)
    cache_t, cache_s = _cache_args(cache)
    launches = 0
    if n_parts:
        K.partition_kernel[(rows, n_parts)](
            qs, qg, *cache_t, mp, dp, op,
            n_parts, partition_size, n_prefix, sem_scale, geo_scale, *cache_s,
            H=dims.n_head, DS=dims.sem_head_dim, DG=dims.geo_head_dim, DV=dims.v_head_dim,
            QBLOCK=32, BLOCK_N=block_n,
        )  # fmt: skip
        launches += 1
    state = reduce_partitions(qs, qg, cache, null, (mp, dp, op), n_parts, sem_scale, geo_scale)
    out = _finalize(qs, qg, cache, state, sem_scale, geo_scale, block_n)
    return out, {"launches": launches + 2, "partition_size": partition_size, "partitions": n_parts}


# ---------------------------------------------------------------------------------------------
# The public entry point
# ---------------------------------------------------------------------------------------------


@implements("DBA-001", "KRN-018", "KRN-019", "KRN-020", "KRN-024")
def decoupled_decode(
    q_sem: torch.Tensor,
    q_geo: torch.Tensor,
    cache: DecoupledKVCache,
    *,
    null: NullKV | None = None,
    sem_scale: float | None = None,
    geo_scale: float | None = None,
    path: str = "auto",
    partition_size: int | None = None,
    block_n: int | None = None,
    config: dispatch.DispatchConfig | None = None,
    trace: list[dispatch.DispatchRecord] | None = None,
) -> torch.Tensor:
    """Attention output ``[B, H, d_v]`` (dtype of ``q_sem``) for one query token per sequence.

    ``q_sem [B, H, d_sem]`` and ``q_geo [B, H, d_geo]`` are the (already gated and
    temperature-scaled) queries; ``null`` the optional null token. ``path``: auto, 1pass, 2pass
    or streaming. ``partition_size``: tokens per 2-pass partition / per 1-pass launch.
    """
    dispatch.check_request(path)
    cfg = config or dispatch.DEFAULT_CONFIG
    bn = block_n if block_n is not None else cfg.block_n
    ps = partition_size if partition_size is not None else cfg.partition_size
    dispatch.check_tiling(bn, ps)
    _check_inputs(q_sem, q_geo, cache, null)
    _check_devices(q_sem, q_geo, cache, null)
    dims = cache.dims
    ss = sem_scale if sem_scale is not None else 1.0 / math.sqrt(dims.sem_head_dim)
    gs = geo_scale if geo_scale is not None else 1.0 / math.sqrt(dims.geo_head_dim)
    why = "" if path == "streaming" else ineligibility(q_sem, cache, null, cfg)
    chosen, reason = dispatch.choose(path, why, cache.prefix_len, dispatch.STREAMING, cfg)
    detail: dict[str, int] = {
        "prefix_len": cache.prefix_len,
        "tail_len": cache.tail_len,
        "block_n": bn,
        "has_null": int(null is not None),
    }
    if chosen == dispatch.STREAMING:
        out = streaming_decode(q_sem, q_geo, cache, null, ss, gs)
    else:
        qs = q_sem.to(torch.float32).contiguous()
        qg = q_geo.to(torch.float32).contiguous()
        if chosen == dispatch.TRITON_1PASS:
            out, more = one_pass(qs, qg, cache, null, ss, gs, bn, ps)
        else:
            out, more = two_pass(qs, qg, cache, null, ss, gs, bn, ps)
        detail.update(more)
    record = dispatch.DispatchRecord(
        op=OP,
        path=chosen,
        requested=path,
        reason=reason,
        tokens=cache.length,
        interpreter=INTERPRETER and chosen in dispatch.FUSED_PATHS,
        detail=detail,
    )
    dispatch.emit(record, trace)
    return out.to(q_sem.dtype)
