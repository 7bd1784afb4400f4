"""Mutants of the model area (GGUF loading, the llama forward).

Each swaps one function of ``reference_impl`` for a subtly wrong one; the conformance tests
named in ``kills`` must fail -- without llama.cpp, against the float64 oracle, the gguf-py
dequantizer, the naive SPM oracle and the goldens.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from conformance.mutants import Mutant, replace


def _rope_split_halves(target: Any) -> Any:
    # NEOX-style rotation: pairs (x[j], x[j + d/2]) instead of llama's adjacent pairs.
    def apply_rope(x: torch.Tensor, rot: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        x0, x1 = x[..., :half], x[..., half:]
        c, s = rot.real, rot.imag
        return x.copy_(torch.cat([x0 * c - x1 * s, x0 * s + x1 * c], dim=-1))  # in place

    replace("reference_impl.model.llama", "apply_rope", apply_rope)
    return target


def _q4_nibbles_swapped(target: Any) -> Any:
    # High nibbles read as the first half of the block, low nibbles as the second.
    def dequantize_q4_0(raw: np.ndarray, n_values: int) -> np.ndarray:
        blocks = np.asarray(raw, dtype=np.uint8).reshape(-1, 18)
        d = np.ascontiguousarray(blocks[:, :2]).view("<f2").astype(np.float32)
        qs = blocks[:, 2:]
        q = np.concatenate([(qs >> 4).astype(np.int8) - 8, (qs & 0xF).astype(np.int8) - 8], 1)
        with np.errstate(invalid="ignore"):
            return (q.astype(np.float32) * d).reshape(-1)

    replace("reference_impl.model.dequant", "dequantize_q4_0", dequantize_q4_0)
    return target


def _tied_output_zeros(target: Any) -> Any:
    def resolve_output(weights: Any) -> torch.Tensor:
        if weights.output is None:
            return torch.zeros_like(weights.token_embd)
        out: torch.Tensor = weights.output
        return out

    replace("reference_impl.model.llama", "resolve_output", resolve_output)
    return target


def _rms_eps_dropped(target: Any) -> Any:
    def rms_normalize(x: torch.Tensor, eps: float) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), None, 0.0)

    def normed_matmul(x: torch.Tensor, w_t: torch.Tensor, eps: float) -> torch.Tensor:
        return torch.mm(rms_normalize(x, eps), w_t)

    replace("reference_impl.model.llama", "rms_normalize", rms_normalize)
    replace("reference_impl.model.llama", "normed_matmul", normed_matmul)
    return target


def _gqa_heads_tiled(target: Any) -> Any:
    # Query head h reads KV head h % n_head_kv instead of h // (n_head / n_head_kv).
    def sdpa_attention(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float
    ) -> torch.Tensor:
        group = q.shape[1] // k.shape[1]
        k = k.repeat(1, group, 1)
        v = v.repeat(1, group, 1)
        out = F.scaled_dot_product_attention(
            q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=mask, scale=scale
        )
        return out.transpose(0, 1).reshape(q.shape[0], -1)

    replace("reference_impl.model.llama", "sdpa_attention", sdpa_attention)
    return target


def _any_architecture(target: Any) -> Any:
    import reference_impl.model.gguf_loader as loader

    class Anything(tuple[str, ...]):
        def __contains__(self, item: object) -> bool:
            return True

    replace(loader.__name__, "SUPPORTED_ARCHS", Anything(("llama",)))
    return target


def _output_always_tied(target: Any) -> Any:
    # The forward projects through token_embd even when the file stores output.weight.
    replace("reference_impl.model.llama", "resolve_output", lambda weights: weights.token_embd)
    return target


MUTANTS = [
    Mutant(
        "model-output-always-tied",
        "model",
        "logits project through token_embd even when output.weight is stored",
        ("GGUF-005",),
        _output_always_tied,
        black_box=True,
    ),
    Mutant(
        "model-rope-split-halves",
        "model",
        "RoPE rotates (x[j], x[j+d/2]) (NEOX) instead of adjacent pairs (x[2j], x[2j+1])",
        kills=("GGUF-020", "GGUF-025"),
        apply=_rope_split_halves,
    ),
    Mutant(
        "model-q4-nibbles-swapped",
        "model",
        "Q4_0 dequantization takes the high nibbles as the first 16 values of a block",
        kills=("GGUF-003", "GGUF-022"),
        apply=_q4_nibbles_swapped,
    ),
    Mutant(
        "model-tied-output-zeros",
        "model",
        "without output.weight the output projection is zeros instead of token_embd",
        kills=("GGUF-021",),
        apply=_tied_output_zeros,
    ),
    Mutant(
        "model-rms-eps-dropped",
        "model",
        "RMSNorm ignores the file's epsilon",
        kills=("GGUF-020",),
        apply=_rms_eps_dropped,
    ),
    Mutant(
        "model-gqa-heads-tiled",
        "model",
        "GQA maps query head h to KV head h % n_head_kv instead of h // group",
        kills=("GGUF-020",),
        apply=_gqa_heads_tiled,
    ),
    Mutant(
        "model-any-architecture",
        "model",
        "the loader accepts any general.architecture",
        kills=("GGUF-008",),
        apply=_any_architecture,
    ),
]
