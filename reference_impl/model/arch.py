"""What differs between the llama-family architectures the reference runs.

The llama forward (:mod:`reference_impl.model.llama`) serves llama and qwen2; gemma3 has its own
layer (:mod:`reference_impl.model.gemma3`) on the same building blocks. An :class:`ArchSpec`
says which optional and extra tensors an architecture's files carry, how RoPE pairs dimensions
and which layers slide. Facts from llama.cpp ``src/models/llama.cpp`` / ``qwen2.cpp`` /
``qwen2vl.cpp`` / ``gemma3.cpp`` / ``bert.cpp`` (``load_arch_tensors`` and the graph),
``llama_model_rope_type`` and ``llama_hparams::set_swa_pattern`` (0.3.36). Every one of them
loads Q/K/V through ``llama_model_base::create_tensor_qkv`` (src/llama-model.cpp, 0.3.36): an
optional fused ``attn_qkv`` (with optional bias) in place of Q/K/V, else Q/K/V weights with
optional biases each; so every architecture accepts the fused tensor and Q/K/V biases.

* ``llama``: optional biases on Q, K, V, O and the three FFN matrices, an optional fused
  ``attn_qkv`` (with optional bias) in place of Q/K/V, optional ``rope_freqs`` (llama 3 rope
  factors, one tensor shared by every layer); RoPE in NORM mode (adjacent pairs);
* ``qwen2``: Q, K and V biases, optional fused QKV (no O or FFN bias, no rope factors); RoPE in
  NEOX mode (pairs ``(x[j], x[j + n_rot/2])``);
* ``qwen2vl``: qwen2's tensors; M-RoPE (NEOX pairs): each token has 4 positions (time,
  height, width, extra) and pair ``j`` rotates by the position of the section that
  ``j % sum(sections)`` falls in (``rope.dimension_sections``, 4 counts of pairs);
* ``gemma3``: optional Q/K/V biases or fused QKV (no O or FFN bias); four more RMSNorm weights
  per layer (Q and K per head, applied after the Q/K/V projection and its bias, after the
  attention, after the FFN); NEOX RoPE; interleaved sliding-window attention in a period of 6
  (layers ``il % 6 < 5`` slide, every 6th is global) with base 10000 for the sliding layers;
* ``bert``: encoder-only (:mod:`reference_impl.model.bert`): learned absolute positions, an
  optional token-type table, LayerNorms with biases after the embeddings and after each
  block's attention and FFN, optional Q/K/V/O and FFN biases, optional fused QKV, no RoPE and
  no output head.
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
    # required per-layer norm weights beyond attn_norm / ffn_norm (`blk.N.<name>.weight`)
    layer_norms: tuple[str, ...] = ()
    swa_period: int = 0  # sliding-window layers: il % period < period - 1 (0: none)
    rope_freq_base_swa: float = 0.0  # the RoPE base of the sliding-window layers
    # M-RoPE: 4 positions per token, each rotating the pairs of its `rope.dimension_sections`
    mrope: bool = False
    # encoder-only (bert): its own tensor set and forward, no KV memory (decode encodes)
    encoder_only: bool = False


# gemma3's extra norms: per-head Q and K (head_dim values), after attention and FFN (n_embd).
GEMMA3_NORMS = ("attn_q_norm", "attn_k_norm", "post_attention_norm", "post_ffw_norm")


# bert's optional biases (the LayerNorm biases are required, like their weights).
BERT_BIASES = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_up", "ffn_down")


@implements("GGUF-044", "GGUF-046", "GGUF-049", "GGUF-051", "GGUF-052")
def _table() -> dict[str, ArchSpec]:
    return {
        "llama": ArchSpec("llama", rope_neox=False, biases=BIAS_TENSORS, rope_freqs=True),
        "qwen2": ArchSpec(
            "qwen2",
            rope_neox=True,
            biases=("attn_q", "attn_k", "attn_v"),
            rope_freqs=False,
        ),
        "qwen2vl": ArchSpec(
            "qwen2vl",
            rope_neox=True,
            biases=("attn_q", "attn_k", "attn_v"),
            rope_freqs=False,
            mrope=True,
        ),
        "gemma3": ArchSpec(
            "gemma3",
            rope_neox=True,
            biases=("attn_q", "attn_k", "attn_v"),
            rope_freqs=False,
            layer_norms=GEMMA3_NORMS,
            swa_period=6,
            rope_freq_base_swa=10000.0,
        ),
        "bert": ArchSpec(
            "bert",
            rope_neox=False,
            biases=BERT_BIASES,
            rope_freqs=False,
            encoder_only=True,
        ),
    }


@implements("GGUF-049")
def swa_pattern(n_layer: int, period: int) -> tuple[bool, ...]:
    """Which layers slide: llama.cpp's ``set_swa_pattern(period)`` marks layer ``il`` when
    ``il % period < period - 1`` (the last layer of each period is global); period 0 marks
    every layer."""
    return tuple(period == 0 or il % period < period - 1 for il in range(n_layer))


ARCHS: dict[str, ArchSpec] = _table()
