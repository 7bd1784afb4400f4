"""What differs between the llama-family architectures the reference runs.

One forward (:mod:`reference_impl.model.llama`) serves them all; an :class:`ArchSpec` says which
optional tensors an architecture's files may carry and how RoPE pairs dimensions. Facts from
llama.cpp ``src/models/llama.cpp`` / ``src/models/qwen2.cpp`` (``load_arch_tensors`` and the
graph) and ``llama_model_rope_type`` (0.3.36):

* ``llama``: optional biases on Q, K, V, O and the three FFN matrices, an optional fused
  ``attn_qkv`` (with optional bias) in place of Q/K/V, optional ``rope_freqs`` (llama 3 rope
  factors, one tensor shared by every layer); RoPE in NORM mode (adjacent pairs);
* ``qwen2``: Q, K and V biases (no O or FFN bias, no fused QKV, no rope factors); RoPE in NEOX
  mode (pairs ``(x[j], x[j + n_rot/2])``).
"""

from __future__ import annotations

from dataclasses import dataclass

from reference_impl.spec_links import implements

# Per-layer tensors that may carry a ``.bias``; the value is the bias length by hyperparameter.
BIAS_TENSORS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


@dataclass(frozen=True)
class ArchSpec:
    """The per-architecture differences of the llama-family forward."""

    name: str
    rope_neox: bool  # NEOX pairs (x[j], x[j+n_rot/2]) instead of NORM's (x[2j], x[2j+1])
    biases: tuple[str, ...]  # per-layer tensors whose `.bias` the file may carry
    rope_freqs: bool  # accepts `rope_freqs.weight` (per-pair frequency divisors)
    fused_qkv: bool  # accepts `blk.N.attn_qkv.weight` (+ bias) instead of Q/K/V


@implements("GGUF-044", "GGUF-046")
def _table() -> dict[str, ArchSpec]:
    return {
        "llama": ArchSpec(
            "llama", rope_neox=False, biases=BIAS_TENSORS, rope_freqs=True, fused_qkv=True
        ),
        "qwen2": ArchSpec(
            "qwen2",
            rope_neox=True,
            biases=("attn_q", "attn_k", "attn_v"),
            rope_freqs=False,
            fused_qkv=False,
        ),
    }


ARCHS: dict[str, ArchSpec] = _table()
