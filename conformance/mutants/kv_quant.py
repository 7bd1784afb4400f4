"""KV quantization mutants (formats and the policy string): one deliberate defect each (see tests/meta)."""

from __future__ import annotations

from typing import Any

import torch

from conformance.mutants import Mutant, replace


def _nibbles_low_first(target: Any) -> Any:
    def pack(u: torch.Tensor) -> torch.Tensor:
        u = u.to(torch.uint8)
        return (u[..., 1::2] << 4) | (u[..., 0::2] & 0xF)  # even element in the low nibble

    def unpack(p: torch.Tensor) -> torch.Tensor:
        p = p.to(torch.uint8)
        return torch.stack((p & 0xF, (p >> 4) & 0xF), dim=-1).reshape(*p.shape[:-1], -1)

    replace("kernels.quant", "pack_nibbles", pack)
    replace("kernels.quant", "unpack_nibbles", unpack)
    return target


def _ggml_q4_adjacent_pairs(target: Any) -> Any:
    from kernels import quant

    original = quant.ggml_quantize

    def ggml_quantize(x: torch.Tensor, qtype: str) -> torch.Tensor:
        out = original(x, qtype)
        if qtype != "Q4_0":
            return out
        blocks = out.reshape(*out.shape[:-1], -1, 18)
        body = blocks[..., 2:]
        lo, hi = body & 0xF, body >> 4
        q = torch.cat((lo, hi), dim=-1)  # element order 0..31
        adjacent = q[..., 0::2] | (q[..., 1::2] << 4)  # the defect: pairs (2i, 2i+1)
        return torch.cat((blocks[..., :2], adjacent), dim=-1).reshape(out.shape)

    replace("kernels.quant", "ggml_quantize", ggml_quantize)
    return target


def _round_by_truncation(target: Any) -> Any:
    replace("kernels.quant", "round_half_away", torch.trunc)
    return target


def _policy_ignores_unknown_keys(target: Any) -> Any:
    from kernels import policy

    original = policy.parse_policy
    known = set(policy._KEYS)

    def parse_policy(text: str) -> Any:
        fields = [
            f
            for f in text.split(",")
            if f.partition("=")[0].strip().lower().replace("_", "") in known
        ]
        return original(",".join(fields) if fields else text)  # the defect: unknown keys dropped

    replace("kernels.policy", "parse_policy", parse_policy)
    return target


def _scales_in_fp32(target: Any) -> Any:
    from kernels import quant

    original = quant.block_scales

    def block_scales(blocks: torch.Tensor, kind: str) -> torch.Tensor:
        return original(blocks, kind).to(torch.float32)  # the defect: 4 bytes per block scale

    replace("kernels.quant", "block_scales", block_scales)
    return target


def _ggml_dequantize_truncates(target: Any) -> Any:
    from kernels import quant

    original = quant.ggml_dequantize

    def ggml_dequantize(data: torch.Tensor, qtype: str, n: int | None = None) -> torch.Tensor:
        size = quant.GGML_TYPE_SIZE.get(qtype)
        if size is not None:  # the defect: a partial block is dropped instead of refused
            data = data[..., : data.shape[-1] // size * size]
        return original(data, qtype, n)

    replace("kernels.quant", "ggml_dequantize", ggml_dequantize)
    return target


def _cost_omits_scales(target: Any) -> Any:
    from kernels import quant

    original = quant.bytes_per_token

    def bytes_per_token(kind: str, dim: int, qblock: int) -> int:
        if kind in quant.FLOAT_KINDS:
            return original(kind, dim, qblock)
        nb = quant.padded_dim(dim, qblock) // qblock
        return original(kind, dim, qblock) - 2 * nb  # the defect: the fp16 scales are not counted

    replace("kernels.quant", "bytes_per_token", bytes_per_token)
    return target


def _blocks_inferred(target: Any) -> Any:
    from kernels import quant

    def _blocks(x: torch.Tensor, qblock: int) -> torch.Tensor:
        pad = quant.padded_dim(x.shape[-1], qblock) - x.shape[-1]
        x = torch.nn.functional.pad(x.to(torch.float32), (0, pad))
        return x.reshape(*x.shape[:-1], -1, qblock)  # the defect: -1 fails on zero rows

    replace("kernels.quant", "_blocks", _blocks)
    return target


def _codes_dtype_unchecked(target: Any) -> Any:
    from kernels import quant

    original = quant.check_quantized

    def check_quantized(qt: Any) -> None:
        # the defect: codes of any dtype are read (shapes and the scales' dtype still checked)
        want = torch.int8 if qt.kind == "q8_0" else torch.uint8
        original(quant.QuantizedTensor(qt.kind, qt.qblock, qt.dim, qt.codes.to(want), qt.scales))

    replace("kernels.quant", "check_quantized", check_quantized)
    return target


def _block_error_without_range(target: Any) -> Any:
    """The policy's block-size error leaves out which sizes are allowed."""
    from kernels import policy
    from reference_impl.errors import KernelError

    original = policy.parse_policy

    def parse_policy(text: str) -> Any:
        try:
            return original(text)
        except KernelError as e:
            if e.code != "QNT_POLICY_BAD_BLOCK":
                raise
            short = e.message.split(" in [", 1)[0]
            raise KernelError(e.code, short, field=e.field) from None

    replace("kernels.policy", "parse_policy", parse_policy)
    return target


MUTANTS = [
    Mutant(
        "qnt-nibbles-low-first",
        "kv_quant",
        "4-bit packing puts the even element in the low nibble (consistently in pack and unpack)",
        ("QNT-002",),
        _nibbles_low_first,
    ),
    Mutant(
        "qnt-ggml-q4-adjacent-pairs",
        "kv_quant",
        "GGML Q4_0 packs adjacent elements (2i, 2i+1) instead of (j, j+16)",
        ("QNT-010",),
        _ggml_q4_adjacent_pairs,
    ),
    Mutant(
        "qnt-round-by-truncation",
        "kv_quant",
        "per-token quantization truncates instead of rounding half away from zero",
        ("QNT-001", "QNT-004"),
        _round_by_truncation,
    ),
    Mutant(
        "qnt-policy-ignores-unknown-keys",
        "kv_quant",
        "the policy parser silently drops unknown keys",
        ("QNT-018",),
        _policy_ignores_unknown_keys,
    ),
    Mutant(
        "qnt-scales-in-fp32",
        "kv_quant",
        "per-token block scales are stored in fp32, so each block costs 4 bytes of scale, not 2",
        ("QNT-019",),
        _scales_in_fp32,
    ),
    Mutant(
        "qnt-ggml-dequantize-truncates",
        "kv_quant",
        "GGML dequantization silently drops a trailing partial block instead of raising",
        ("QNT-011",),
        _ggml_dequantize_truncates,
    ),
    Mutant(
        "qnt-cost-omits-scales",
        "kv_quant",
        "the reported per-token cost of a quantized kind counts the codes but not the block scales",
        ("QNT-019",),
        _cost_omits_scales,
    ),
    Mutant(
        "qnt-empty-batch-fails",
        "kv_quant",
        "per-token quantization infers the block count from the elements, so zero tokens fail",
        ("QNT-020",),
        _blocks_inferred,
    ),
    Mutant(
        "qnt-codes-dtype-unchecked",
        "kv_quant",
        "dequantization reads codes of any dtype (uint8 q8_0 codes, float codes) without refusing",
        ("QNT-021",),
        _codes_dtype_unchecked,
    ),
    Mutant(
        "qnt-block-error-without-range",
        "kv_quant",
        "the policy's error for a disallowed integer block size does not state the range [2, 256]",
        ("QNT-016",),
        _block_error_without_range,
    ),
]
