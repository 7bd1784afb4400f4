"""Quantized KV formats in torch: the decoupled project's per-token blocks and GGML's blocks.

Per-token formats (``q8_0``, ``q4_0``, ``nf4``; spec QNT-001..QNT-008)
    The last dimension of a tensor (one token's flattened all-heads vector, feature index
    ``h*head_dim + c``) is zero-padded to ``pad_dim = ceil(dim/qblock)*qblock`` and cut into
    blocks of ``qblock`` elements. Each block has one fp16 scale. Codes:

    * ``q8_0``: ``Δ = fp16(amax/127)``, ``code = clamp(round(x/Δ), -127, 127)`` stored int8;
    * ``q4_0``: ``Δ = fp16(amax/7)``, ``code = clamp(round(x/Δ), -8, 7) + 8`` stored as 4 bits;
    * ``nf4``: ``Δ = fp16(amax)``, ``code`` = index of the nearest NF4 level to
      ``clamp(x/Δ, -1, 1)`` (ties to the lower level), 4 bits.

    ``round`` is round-half-away-from-zero; Δ is clamped to at least fp16's smallest normal
    (2^-14) so an all-zero block has a usable scale. Quantization divides by the *stored* fp16
    scale, so dequantization (``(code[-8])·Δ``) errs by at most half a step. 4-bit codes are
    packed two per byte with the **even** element in the **high** nibble.

GGML blocks (``Q8_0``, ``Q4_0``; spec QNT-009..QNT-011)
    32 values per block, stored array-of-structs: 2 bytes fp16 ``d`` then the codes.
    ``Q8_0``: ``d = amax/127``, ``q = roundf(x·(1/d))`` (34 bytes). ``Q4_0``: ``d = m/-8`` where
    ``m`` is the signed value of largest magnitude, ``q = min(15, trunc(x·(1/d) + 8.5))``,
    byte ``j = q[j] | q[j+16] << 4`` (18 bytes). These follow ggml-quants.c's reference
    (``quantize_row_q8_0_ref`` / ``quantize_row_q4_0_ref``) and match the ``gguf`` package.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from reference_impl.errors import KernelError
from reference_impl.spec_links import implements

PER_TOKEN_KINDS = ("q8_0", "q4_0", "nf4")
FLOAT_KINDS = ("fp16", "fp32")
ALL_KINDS = FLOAT_KINDS + PER_TOKEN_KINDS
FOUR_BIT_KINDS = ("q4_0", "nf4")

# fp16's smallest normal number: the floor of every per-token scale.
SCALE_FLOOR = 2.0**-14

# The 16 NormalFloat-4 levels of QLoRA / bitsandbytes (a published constant table).
NF4_LEVELS: tuple[float, ...] = (
    -1.0,
    -0.6961928009986877,
    -0.5250730514526367,
    -0.39491748809814453,
    -0.28444138169288635,
    -0.18477343022823334,
    -0.09105003625154495,
    0.0,
    0.07958029955625534,
    0.16093020141124725,
    0.24611230194568634,
    0.33791524171829224,
    0.44070982933044434,
    0.5626170039176941,
    0.7229568362236023,
    1.0,
)


def nf4_levels() -> torch.Tensor:
    return torch.tensor(NF4_LEVELS, dtype=torch.float32)


@implements("QNT-003")
def nf4_midpoints() -> torch.Tensor:
    """The 15 decision thresholds between adjacent NF4 levels (fp32)."""
    lv = nf4_levels()
    return (lv[:-1] + lv[1:]) * 0.5


# ---------------------------------------------------------------------------------------------
# Per-token block formats
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class QuantizedTensor:
    """A tensor quantized along its last dimension in per-token blocks.

    ``codes``: int8 ``[..., pad_dim]`` (q8_0) or uint8 ``[..., pad_dim // 2]`` (q4_0, nf4);
    ``scales``: fp16 ``[..., n_blocks]``. ``dim`` is the logical (unpadded) last dimension.
    """

    kind: str
    qblock: int
    dim: int
    codes: torch.Tensor
    scales: torch.Tensor

    @property
    def pad_dim(self) -> int:
        return padded_dim(self.dim, self.qblock)

    @property
    def n_blocks(self) -> int:
        return self.pad_dim // self.qblock


@implements("QNT-006")
def padded_dim(dim: int, qblock: int) -> int:
    return -(-dim // qblock) * qblock


@implements("QNT-008")
def check_format(kind: str, qblock: int) -> None:
    """Validate a per-token format; raises KernelError(QNT_BAD_KIND / QNT_BAD_BLOCK)."""
    if kind not in PER_TOKEN_KINDS:
        raise KernelError(
            "QNT_BAD_KIND",
            f"unknown quantized kind {kind!r}; expected one of {', '.join(PER_TOKEN_KINDS)}",
            field="kind",
        )
    if not isinstance(qblock, int) or isinstance(qblock, bool) or qblock <= 0:
        raise KernelError("QNT_BAD_BLOCK", f"qblock must be a positive int, got {qblock!r}")
    if kind in FOUR_BIT_KINDS and qblock % 2:
        raise KernelError(
            "QNT_BAD_BLOCK", f"{kind} packs two codes per byte: qblock must be even, got {qblock}"
        )


@implements("QNT-001", "QNT-002")
def round_half_away(x: torch.Tensor) -> torch.Tensor:
    """Round to nearest, ties away from zero (C ``roundf``), elementwise in x's dtype."""
    return torch.sign(x) * torch.floor(torch.abs(x) + 0.5)


@implements("QNT-002", "QNT-005")
def pack_nibbles(u: torch.Tensor) -> torch.Tensor:
    """uint8 codes in [0, 15], last dim even -> bytes; element 2i high nibble, 2i+1 low."""
    if u.shape[-1] % 2:
        raise KernelError("QNT_PACK_ODD", f"cannot pack an odd number ({u.shape[-1]}) of nibbles")
    u = u.to(torch.uint8)
    # No mask on the low nibble: codes outside [0, 15] are a caller's bug and must show in the
    # bytes (a q4_0 offset of -8 instead of +8 wraps to 240..255 and would hide behind & 0xF).
    return (u[..., 0::2] << 4) | u[..., 1::2]


@implements("QNT-005")
def unpack_nibbles(p: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`pack_nibbles`: bytes ``[..., n]`` -> codes ``[..., 2n]``."""
    p = p.to(torch.uint8)
    hi = (p >> 4) & 0xF
    lo = p & 0xF
    return torch.stack((hi, lo), dim=-1).reshape(*p.shape[:-1], p.shape[-1] * 2)


@implements("QNT-006", "QNT-020")
def _blocks(x: torch.Tensor, qblock: int) -> torch.Tensor:
    dim = x.shape[-1]
    pad = padded_dim(dim, qblock) - dim
    x = x.to(torch.float32)
    if pad:
        x = torch.nn.functional.pad(x, (0, pad))
    # Explicit sizes, not -1: a batch of zero rows has no elements to infer a size from.
    return x.reshape(*x.shape[:-1], (dim + pad) // qblock, qblock)


_QMAX = {"q8_0": 127.0, "q4_0": 7.0, "nf4": 1.0}


@implements("QNT-001", "QNT-002", "QNT-003", "QNT-007")
def block_scales(blocks: torch.Tensor, kind: str) -> torch.Tensor:
    """fp16 scale per block: fp16(amax / qmax), floored at 2^-14 (computed in fp32)."""
    amax = blocks.abs().amax(dim=-1)
    scale = (amax / _QMAX[kind]).to(torch.float16)
    return torch.clamp(scale, min=SCALE_FLOOR)


@implements("QNT-001", "QNT-002", "QNT-003", "QNT-008", "QNT-020")
def quantize(x: torch.Tensor, kind: str, qblock: int) -> QuantizedTensor:
    """Quantize ``x`` (float, ``[..., dim]``) along its last dimension; see the module doc."""
    check_format(kind, qblock)
    if not x.dtype.is_floating_point:
        raise KernelError("QNT_BAD_DTYPE", f"quantize needs a float tensor, got {x.dtype}")
    if x.ndim == 0 or x.shape[-1] == 0:
        raise KernelError("QNT_BAD_SHAPE", f"quantize needs a non-empty last dim, got {x.shape}")
    if not bool(torch.isfinite(x).all()):
        raise KernelError("QNT_NON_FINITE", "cannot quantize NaN or infinite values")
    dim = int(x.shape[-1])
    pad = padded_dim(dim, qblock)
    blocks = _blocks(x, qblock)
    scale16 = block_scales(blocks, kind)
    if not bool(torch.isfinite(scale16).all()):
        raise KernelError("QNT_SCALE_OVERFLOW", "a block scale overflows fp16")
    y = blocks / scale16.to(torch.float32).unsqueeze(-1)
    lead = x.shape[:-1]
    if kind == "q8_0":
        codes = torch.clamp(round_half_away(y), -127, 127).to(torch.int8).reshape(*lead, pad)
    elif kind == "q4_0":
        u = (torch.clamp(round_half_away(y), -8, 7) + 8).to(torch.uint8).reshape(*lead, pad)
        codes = pack_nibbles(u)
    else:  # nf4
        y = torch.clamp(y, -1.0, 1.0)
        idx = torch.bucketize(y, nf4_midpoints().to(y.device), right=False).to(torch.uint8)
        codes = pack_nibbles(idx.reshape(*lead, pad))
    return QuantizedTensor(kind, qblock, dim, codes, scale16)


@implements("QNT-021")
def check_quantized(qt: QuantizedTensor) -> None:
    """Refuse codes and scales that ``quantize`` could not have produced for ``qt``'s format:
    a wrong dtype would be read differently by each implementation (uint8 q8_0 codes are
    0..255 to torch but -128..127 to Triton), a wrong width out of step with the scales."""
    want = torch.int8 if qt.kind == "q8_0" else torch.uint8
    if qt.codes.dtype != want:
        raise KernelError(
            "QNT_BAD_DTYPE", f"{qt.kind} codes must be {want}, got {qt.codes.dtype}", field="codes"
        )
    if qt.scales.dtype != torch.float16:
        raise KernelError(
            "QNT_BAD_DTYPE", f"scales must be torch.float16, got {qt.scales.dtype}", field="scales"
        )
    width = qt.pad_dim if qt.kind == "q8_0" else qt.pad_dim // 2
    lead = tuple(qt.codes.shape[:-1])
    if tuple(qt.codes.shape[-1:]) != (width,):  # a 0-d tensor has no last dim: refused too
        raise KernelError(
            "QNT_BAD_SHAPE",
            f"{qt.kind}@{qt.qblock} codes of {qt.dim} values must be [..., {width}], "
            f"got {list(qt.codes.shape)}",
            field="codes",
        )
    if tuple(qt.scales.shape) != (*lead, qt.n_blocks):
        raise KernelError(
            "QNT_BAD_SHAPE",
            f"scales must be {[*lead, qt.n_blocks]}, got {list(qt.scales.shape)}",
            field="scales",
        )


@implements("QNT-003", "QNT-004")
def code_values(qt: QuantizedTensor) -> torch.Tensor:
    """The per-element multiplier of the scale, ``[..., pad_dim]`` fp32 (before scaling)."""
    if qt.kind == "q8_0":
        return qt.codes.to(torch.float32)
    u = unpack_nibbles(qt.codes)
    if qt.kind == "q4_0":
        return u.to(torch.float32) - 8.0
    return nf4_levels().to(u.device)[u.long()]


@implements("QNT-003", "QNT-004", "QNT-006", "QNT-007")
def dequantize(qt: QuantizedTensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``value · scale`` per element, padding dropped: ``[..., dim]`` in ``dtype``."""
    check_quantized(qt)
    vals = code_values(qt)
    lead = vals.shape[:-1]
    vals = vals.reshape(*lead, qt.n_blocks, qt.qblock)
    out = vals * qt.scales.to(torch.float32).unsqueeze(-1)
    return out.reshape(*lead, qt.pad_dim)[..., : qt.dim].to(dtype)


@implements("QNT-019")
def bytes_per_token(kind: str, dim: int, qblock: int) -> int:
    """Storage of one token's vector: fp16 2·dim, fp32 4·dim, q8_0 pad+2·nb, 4-bit pad/2+2·nb."""
    if kind == "fp16":
        return 2 * dim
    if kind == "fp32":
        return 4 * dim
    check_format(kind, qblock)
    pad = padded_dim(dim, qblock)
    nb = pad // qblock
    return (pad if kind == "q8_0" else pad // 2) + 2 * nb


# ---------------------------------------------------------------------------------------------
# GGML block formats (GGUF): array-of-structs bytes
# ---------------------------------------------------------------------------------------------

GGML_BLOCK = 32
GGML_TYPE_SIZE = {"Q8_0": 34, "Q4_0": 18}


@implements("QNT-011")
def _ggml_check(x: torch.Tensor, qtype: str) -> None:
    if qtype not in GGML_TYPE_SIZE:
        raise KernelError(
            "QNT_BAD_KIND", f"unknown GGML type {qtype!r}; expected Q8_0 or Q4_0", field="qtype"
        )
    if x.shape[-1] % GGML_BLOCK:
        raise KernelError(
            "QNT_BAD_SHAPE",
            f"GGML rows must be a multiple of {GGML_BLOCK} values, got {x.shape[-1]}",
        )


def _fp16_bytes(d: torch.Tensor) -> torch.Tensor:
    """fp16 values ``[...]`` -> little-endian bytes ``[..., 2]``."""
    bits = d.to(torch.float16).contiguous().view(torch.int16).to(torch.int32) & 0xFFFF
    return torch.stack((bits & 0xFF, bits >> 8), dim=-1).to(torch.uint8)


def _fp16_from_bytes(b: torch.Tensor) -> torch.Tensor:
    """little-endian bytes ``[..., 2]`` -> fp16 values ``[...]`` as fp32."""
    bits = b[..., 0].to(torch.int32) | (b[..., 1].to(torch.int32) << 8)
    bits = torch.where(bits >= 0x8000, bits - 0x10000, bits).to(torch.int16)
    return bits.view(torch.float16).to(torch.float32)


@implements("QNT-009", "QNT-010", "QNT-011", "QNT-020")
def ggml_quantize(x: torch.Tensor, qtype: str) -> torch.Tensor:
    """Float rows ``[..., n]`` -> GGML block bytes ``[..., n/32 * type_size]`` (uint8)."""
    _ggml_check(x, qtype)
    lead, nb = x.shape[:-1], x.shape[-1] // GGML_BLOCK  # explicit: zero rows have no elements
    blocks = x.to(torch.float32).reshape(*lead, nb, GGML_BLOCK)
    if qtype == "Q8_0":
        d = blocks.abs().amax(dim=-1, keepdim=True) / 127.0
        inv = torch.where(d == 0, torch.zeros_like(d), 1.0 / d)
        q = round_half_away(blocks * inv).to(torch.int8).view(torch.uint8)
        body = q
    else:
        # m: the signed value of largest magnitude (first one on ties), d = m / -8.
        imax = blocks.abs().argmax(dim=-1, keepdim=True)
        m = torch.gather(blocks, -1, imax)
        d = m / -8.0
        inv = torch.where(d == 0, torch.zeros_like(d), 1.0 / d)
        q = torch.clamp(torch.trunc(blocks * inv + 8.5), 0, 15).to(torch.uint8)
        body = q[..., :16] | (q[..., 16:] << 4)
    out = torch.cat((_fp16_bytes(d.squeeze(-1)), body), dim=-1)
    return out.reshape(*lead, nb * GGML_TYPE_SIZE[qtype])


@implements("QNT-009", "QNT-010", "QNT-011", "QNT-020")
def ggml_dequantize(data: torch.Tensor, qtype: str, n: int | None = None) -> torch.Tensor:
    """GGML block bytes ``[..., nbytes]`` -> fp32 values ``[..., n_blocks*32]``."""
    if qtype not in GGML_TYPE_SIZE:
        raise KernelError("QNT_BAD_KIND", f"unknown GGML type {qtype!r}", field="qtype")
    size = GGML_TYPE_SIZE[qtype]
    if data.shape[-1] % size:
        raise KernelError("QNT_BAD_SHAPE", f"{qtype} rows must be a multiple of {size} bytes")
    lead, nb = data.shape[:-1], data.shape[-1] // size  # explicit: zero rows have no elements
    blocks = data.to(torch.uint8).reshape(*lead, nb, size)
    d = _fp16_from_bytes(blocks[..., :2]).unsqueeze(-1)
    body = blocks[..., 2:]
    if qtype == "Q8_0":
        vals = body.view(torch.int8).to(torch.float32)
    else:
        lo = (body & 0xF).to(torch.float32) - 8.0
        hi = (body >> 4).to(torch.float32) - 8.0
        vals = torch.cat((lo, hi), dim=-1)
    out = (vals * d).reshape(*lead, nb * GGML_BLOCK)
    return out if n is None else out[..., :n]
