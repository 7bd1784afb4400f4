"""Triton pack/unpack of the quantized formats of :mod:`kernels.quant`, bit-exact with torch.

One program per row (a token's vector, or a GGML row). Launches pass ``enable_fp_fusion=False``:
a fused multiply-add (``x·(1/d) + 8.5``) rounds differently from the separate ops of torch,
numpy and ggml's reference, and these kernels must match them bit for bit on a GPU too. Elements are handled as even/odd pairs
``[NB, QB/2]`` so 4-bit codes pack without reshapes; divisions use ``div_rn`` (IEEE
round-to-nearest, as torch/numpy on CPU) so codes and scales match the torch path bit for bit.

Kinds (``KIND`` constexpr): 0 = q8_0, 1 = q4_0, 2 = nf4 (per-token); GGML: ``ggml_*`` kernels.
"""

import math

import torch

from kernels import quant
from kernels._triton import kernel_device, tl, triton
from reference_impl.errors import KernelError
from reference_impl.spec_links import implements

KIND_ID = {"q8_0": 0, "q4_0": 1, "nf4": 2}
QMAX = {"q8_0": 127.0, "q4_0": 7.0, "nf4": 1.0}
SCALE_FLOOR = tl.constexpr(2.0**-14)


@triton.jit
def _round_half_away(y):
    return tl.where(y < 0, -tl.floor(-y + 0.5), tl.floor(y + 0.5))


@triton.jit
def _nf4_index(y, mid_ptr):
    """Index of the nearest NF4 level: the number of midpoints strictly below ``y``."""
    idx = tl.zeros(y.shape, tl.int32)
    for k in tl.static_range(15):
        idx += (y > tl.load(mid_ptr + k)).to(tl.int32)
    return idx


@triton.jit
def quantize_kernel(
    x_ptr,
    codes_ptr,
    scales_ptr,
    mid_ptr,
    dim,
    n_blocks,
    s_x_r,
    s_c_r,
    s_s_r,
    qmax,
    KIND: tl.constexpr,
    QB: tl.constexpr,
    NB: tl.constexpr,
):
    r = tl.program_id(0).to(tl.int64)
    blk = tl.arange(0, NB)
    bm = blk < n_blocks
    j = tl.arange(0, QB // 2)
    ge = blk[:, None] * QB + 2 * j[None, :]  # even elements [NB, QB/2]
    go = ge + 1
    xe = tl.load(x_ptr + r * s_x_r + ge, mask=ge < dim, other=0.0).to(tl.float32)
    xo = tl.load(x_ptr + r * s_x_r + go, mask=go < dim, other=0.0).to(tl.float32)
    amax = tl.maximum(tl.max(tl.abs(xe), axis=1), tl.max(tl.abs(xo), axis=1))
    scale = tl.math.div_rn(amax, qmax).to(tl.float16).to(tl.float32)
    scale = tl.maximum(scale, SCALE_FLOOR)
    ye = tl.math.div_rn(xe, scale[:, None])
    yo = tl.math.div_rn(xo, scale[:, None])
    if KIND == 0:
        ce = tl.minimum(tl.maximum(_round_half_away(ye), -127.0), 127.0).to(tl.int8)
        co = tl.minimum(tl.maximum(_round_half_away(yo), -127.0), 127.0).to(tl.int8)
        tl.store(codes_ptr + r * s_c_r + ge, ce, mask=bm[:, None])
        tl.store(codes_ptr + r * s_c_r + go, co, mask=bm[:, None])
    else:
        if KIND == 1:
            ue = (tl.minimum(tl.maximum(_round_half_away(ye), -8.0), 7.0) + 8.0).to(tl.int32)
            uo = (tl.minimum(tl.maximum(_round_half_away(yo), -8.0), 7.0) + 8.0).to(tl.int32)
        else:
            ue = _nf4_index(tl.minimum(tl.maximum(ye, -1.0), 1.0), mid_ptr)
            uo = _nf4_index(tl.minimum(tl.maximum(yo, -1.0), 1.0), mid_ptr)
        byte = ((ue << 4) | uo).to(tl.uint8)
        tl.store(
            codes_ptr + r * s_c_r + blk[:, None] * (QB // 2) + j[None, :], byte, mask=bm[:, None]
        )
    tl.store(scales_ptr + r * s_s_r + blk, scale.to(tl.float16), mask=bm)


@triton.jit
def dequantize_kernel(
    codes_ptr,
    scales_ptr,
    lv_ptr,
    out_ptr,
    dim,
    n_blocks,
    s_c_r,
    s_s_r,
    s_o_r,
    KIND: tl.constexpr,
    QB: tl.constexpr,
    NB: tl.constexpr,
):
    r = tl.program_id(0).to(tl.int64)
    blk = tl.arange(0, NB)
    bm = (blk < n_blocks)[:, None]
    j = tl.arange(0, QB // 2)
    ge = blk[:, None] * QB + 2 * j[None, :]
    go = ge + 1
    scale = tl.load(scales_ptr + r * s_s_r + blk, mask=blk < n_blocks, other=0.0).to(tl.float32)[
        :, None
    ]
    if KIND == 0:
        ve = tl.load(codes_ptr + r * s_c_r + ge, mask=bm, other=0).to(tl.int8).to(tl.float32)
        vo = tl.load(codes_ptr + r * s_c_r + go, mask=bm, other=0).to(tl.int8).to(tl.float32)
    else:
        byte = tl.load(
            codes_ptr + r * s_c_r + blk[:, None] * (QB // 2) + j[None, :], mask=bm, other=0
        ).to(tl.uint8)
        ue = (byte >> 4) & 0xF
        uo = byte & 0xF
        if KIND == 1:
            ve = ue.to(tl.float32) - 8.0
            vo = uo.to(tl.float32) - 8.0
        else:
            ve = tl.load(lv_ptr + ue.to(tl.int32))
            vo = tl.load(lv_ptr + uo.to(tl.int32))
    tl.store(out_ptr + r * s_o_r + ge, ve * scale, mask=ge < dim)
    tl.store(out_ptr + r * s_o_r + go, vo * scale, mask=go < dim)


@triton.jit
def _store_fp16_bytes(ptr, d, mask):
    bits = d.to(tl.float16).to(tl.uint16, bitcast=True)
    tl.store(ptr, (bits & 0xFF).to(tl.uint8), mask=mask)
    tl.store(ptr + 1, (bits >> 8).to(tl.uint8), mask=mask)


@triton.jit
def _load_fp16_bytes(ptr, mask):
    lo = tl.load(ptr, mask=mask, other=0).to(tl.uint16)
    hi = tl.load(ptr + 1, mask=mask, other=0).to(tl.uint16)
    return (lo | (hi << 8)).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def ggml_quantize_kernel(
    x_ptr, out_ptr, n_blocks, s_x_r, s_o_r, NB: tl.constexpr, IS_Q8: tl.constexpr
):
    """Rows of n_blocks*32 values -> GGML blocks (Q8_0: 34 bytes, Q4_0: 18 bytes)."""
    r = tl.program_id(0).to(tl.int64)
    blk = tl.arange(0, NB)
    bm = (blk < n_blocks)[:, None]
    j = tl.arange(0, 16)
    lo_idx = blk[:, None] * 32 + j[None, :]  # elements 0..15 of each block
    hi_idx = lo_idx + 16  # elements 16..31
    xl = tl.load(x_ptr + r * s_x_r + lo_idx, mask=bm, other=0.0).to(tl.float32)
    xh = tl.load(x_ptr + r * s_x_r + hi_idx, mask=bm, other=0.0).to(tl.float32)
    if IS_Q8:
        d = tl.math.div_rn(
            tl.maximum(tl.max(tl.abs(xl), axis=1), tl.max(tl.abs(xh), axis=1)), 127.0
        )
        inv = tl.where(
            d == 0.0,
            0.0,
            tl.math.div_rn(tl.full(d.shape, 1.0, tl.float32), tl.where(d == 0.0, 1.0, d)),
        )
        ql = _round_half_away(xl * inv[:, None]).to(tl.int8).to(tl.uint8, bitcast=True)
        qh = _round_half_away(xh * inv[:, None]).to(tl.int8).to(tl.uint8, bitcast=True)
        base = out_ptr + r * s_o_r + blk * 34
        _store_fp16_bytes(base, d, blk < n_blocks)
        tl.store(base[:, None] + 2 + j[None, :], ql, mask=bm)
        tl.store(base[:, None] + 18 + j[None, :], qh, mask=bm)
    else:
        # m: the signed value of largest magnitude (the first one on ties); d = m / -8.
        al = tl.abs(xl)
        ah = tl.abs(xh)
        amax = tl.maximum(tl.max(al, axis=1), tl.max(ah, axis=1))
        big_l = al == amax[:, None]
        big_h = ah == amax[:, None]
        first_l = tl.min(tl.where(big_l, j[None, :], 32), axis=1)
        first_h = tl.min(tl.where(big_h, j[None, :] + 16, 32), axis=1)
        first = tl.minimum(first_l, first_h)
        # A max over one selected value and -inf keeps the sign of a -0.0 (a sum would not).
        m = tl.maximum(
            tl.max(tl.where(j[None, :] == first[:, None], xl, float("-inf")), axis=1),
            tl.max(tl.where(j[None, :] + 16 == first[:, None], xh, float("-inf")), axis=1),
        )
        d = tl.math.div_rn(m, -8.0)
        inv = tl.where(
            d == 0.0,
            0.0,
            tl.math.div_rn(tl.full(d.shape, 1.0, tl.float32), tl.where(d == 0.0, 1.0, d)),
        )
        ql = tl.minimum(tl.maximum(tl.floor(xl * inv[:, None] + 8.5), 0.0), 15.0).to(tl.int32)
        qh = tl.minimum(tl.maximum(tl.floor(xh * inv[:, None] + 8.5), 0.0), 15.0).to(tl.int32)
        base = out_ptr + r * s_o_r + blk * 18
        _store_fp16_bytes(base, d, blk < n_blocks)
        tl.store(base[:, None] + 2 + j[None, :], (ql | (qh << 4)).to(tl.uint8), mask=bm)


@triton.jit
def ggml_dequantize_kernel(
    data_ptr, out_ptr, n_blocks, s_d_r, s_o_r, NB: tl.constexpr, IS_Q8: tl.constexpr
):
    r = tl.program_id(0).to(tl.int64)
    blk = tl.arange(0, NB)
    bv = blk < n_blocks
    bm = bv[:, None]
    j = tl.arange(0, 16)
    lo_idx = blk[:, None] * 32 + j[None, :]
    if IS_Q8:
        base = data_ptr + r * s_d_r + blk * 34
        d = _load_fp16_bytes(base, bv)[:, None]
        ql = (
            tl.load(base[:, None] + 2 + j[None, :], mask=bm, other=0)
            .to(tl.int8, bitcast=True)
            .to(tl.float32)
        )
        qh = (
            tl.load(base[:, None] + 18 + j[None, :], mask=bm, other=0)
            .to(tl.int8, bitcast=True)
            .to(tl.float32)
        )
    else:
        base = data_ptr + r * s_d_r + blk * 18
        d = _load_fp16_bytes(base, bv)[:, None]
        byte = tl.load(base[:, None] + 2 + j[None, :], mask=bm, other=0).to(tl.uint8)
        ql = (byte & 0xF).to(tl.float32) - 8.0
        qh = ((byte >> 4) & 0xF).to(tl.float32) - 8.0
    tl.store(out_ptr + r * s_o_r + lo_idx, ql * d, mask=bm)
    tl.store(out_ptr + r * s_o_r + lo_idx + 16, qh * d, mask=bm)


# ---------------------------------------------------------------------------------------------
# Python wrappers (same signatures and results as kernels.quant)
# ---------------------------------------------------------------------------------------------


@implements("QNT-020")
def _rows(x: torch.Tensor, width: int) -> torch.Tensor:
    """``x`` as contiguous rows on the device the kernels run on (results go back to x's)."""
    # The row count is explicit, not -1: rows of width 0 have no elements to infer it from.
    return x.reshape(math.prod(x.shape[:-1]), width).to(kernel_device()).contiguous()


def _np2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


@implements("QNT-001", "QNT-002", "QNT-003", "QNT-008", "QNT-020")
def quantize(x: torch.Tensor, kind: str, qblock: int) -> quant.QuantizedTensor:
    """Triton twin of :func:`kernels.quant.quantize` (qblock must be a power of two)."""
    quant.check_format(kind, qblock)
    if qblock & (qblock - 1) or qblock < 2:
        raise KernelError(
            "QNT_BAD_BLOCK", f"the Triton quantizer needs a power-of-two qblock, got {qblock}"
        )
    if not x.dtype.is_floating_point:
        raise KernelError("QNT_BAD_DTYPE", f"quantize needs a float tensor, got {x.dtype}")
    if x.ndim == 0 or x.shape[-1] == 0:
        raise KernelError("QNT_BAD_SHAPE", f"quantize needs a non-empty last dim, got {x.shape}")
    if not bool(torch.isfinite(x).all()):
        raise KernelError("QNT_NON_FINITE", "cannot quantize NaN or infinite values")
    dim = int(x.shape[-1])
    lead = tuple(x.shape[:-1])
    rows = _rows(x, dim)
    pad = quant.padded_dim(dim, qblock)
    nb = pad // qblock
    n = rows.shape[0]
    if kind == "q8_0":
        codes = torch.empty(n, pad, dtype=torch.int8, device=rows.device)
    else:
        codes = torch.empty(n, pad // 2, dtype=torch.uint8, device=rows.device)
    scales = torch.empty(n, nb, dtype=torch.float16, device=rows.device)
    mids = quant.nf4_midpoints().to(rows.device)
    if n:
        quantize_kernel[(n,)](
            rows,
            codes,
            scales,
            mids,
            dim,
            nb,
            rows.stride(0),
            codes.stride(0),
            scales.stride(0),
            QMAX[kind],
            KIND=KIND_ID[kind],
            QB=qblock,
            NB=_np2(nb),
            enable_fp_fusion=False,
        )
    return quant.QuantizedTensor(
        kind,
        qblock,
        dim,
        codes.reshape(*lead, codes.shape[-1]).to(x.device),
        scales.reshape(*lead, nb).to(x.device),
    )


@implements("QNT-003", "QNT-004", "QNT-006", "QNT-007")
def dequantize(qt: quant.QuantizedTensor) -> torch.Tensor:
    """Triton twin of :func:`kernels.quant.dequantize` (fp32)."""
    quant.check_quantized(qt)
    lead = tuple(qt.codes.shape[:-1])
    codes = _rows(qt.codes, qt.codes.shape[-1])
    scales = _rows(qt.scales, qt.n_blocks)
    n = codes.shape[0]
    out = torch.empty(n, qt.dim, dtype=torch.float32, device=codes.device)
    levels = quant.nf4_levels().to(codes.device)
    if n:
        dequantize_kernel[(n,)](
            codes,
            scales,
            levels,
            out,
            qt.dim,
            qt.n_blocks,
            codes.stride(0),
            scales.stride(0),
            out.stride(0),
            KIND=KIND_ID[qt.kind],
            QB=qt.qblock,
            NB=_np2(qt.n_blocks),
            enable_fp_fusion=False,
        )
    return out.reshape(*lead, qt.dim).to(qt.codes.device)


@implements("QNT-009", "QNT-010", "QNT-011")
def ggml_quantize(x: torch.Tensor, qtype: str) -> torch.Tensor:
    """Triton twin of :func:`kernels.quant.ggml_quantize`."""
    quant._ggml_check(x, qtype)
    n_vals = int(x.shape[-1])
    lead = tuple(x.shape[:-1])
    rows = _rows(x.to(torch.float32), n_vals)
    nb = n_vals // quant.GGML_BLOCK
    size = quant.GGML_TYPE_SIZE[qtype]
    out = torch.empty(rows.shape[0], nb * size, dtype=torch.uint8, device=rows.device)
    if rows.shape[0] and nb:
        ggml_quantize_kernel[(rows.shape[0],)](
            rows,
            out,
            nb,
            rows.stride(0),
            out.stride(0),
            NB=_np2(nb),
            IS_Q8=qtype == "Q8_0",
            enable_fp_fusion=False,
        )
    return out.reshape(*lead, nb * size).to(x.device)


@implements("QNT-009", "QNT-010", "QNT-011")
def ggml_dequantize(data: torch.Tensor, qtype: str) -> torch.Tensor:
    """Triton twin of :func:`kernels.quant.ggml_dequantize`."""
    if qtype not in quant.GGML_TYPE_SIZE:
        raise KernelError("QNT_BAD_KIND", f"unknown GGML type {qtype!r}", field="qtype")
    size = quant.GGML_TYPE_SIZE[qtype]
    nbytes = int(data.shape[-1])
    if nbytes % size:
        raise KernelError("QNT_BAD_SHAPE", f"{qtype} rows must be a multiple of {size} bytes")
    lead = tuple(data.shape[:-1])
    rows = _rows(data.to(torch.uint8), nbytes)
    nb = nbytes // size
    out = torch.empty(rows.shape[0], nb * quant.GGML_BLOCK, dtype=torch.float32, device=rows.device)
    if rows.shape[0] and nb:
        ggml_dequantize_kernel[(rows.shape[0],)](
            rows,
            out,
            nb,
            rows.stride(0),
            out.stride(0),
            NB=_np2(nb),
            IS_Q8=qtype == "Q8_0",
            enable_fp_fusion=False,
        )
    return out.reshape(*lead, nb * quant.GGML_BLOCK).to(data.device)
