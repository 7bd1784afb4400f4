"""Load a llama-family GGUF file into :class:`ModelWeights` (hyperparameters + float32 tensors).

Parsing uses the ``gguf`` package (``GGUFReader``); tensors (F32, F16, BF16 and the block
formats of :mod:`reference_impl.model.dequant`) are dequantized to float32 at load. What is read, and
how, follows llama.cpp's llama loader (``llama_model_llama::load_arch_hparams`` /
``load_arch_tensors``):

* ``general.architecture`` must be ``llama``, ``qwen2``, ``qwen2vl``, ``gemma3`` or ``bert``
  (:mod:`reference_impl.model.arch` says what differs; :func:`gemma3_hparams` reads gemma3's
  sliding-window keys, :func:`bert_hparams` the encoder's keys and :func:`bert_tensor_shapes`
  its own tensor set); ``<arch>.*`` keys below;
* ``llama.embedding_length``, ``llama.block_count``, ``llama.feed_forward_length``,
  ``llama.attention.head_count``, ``llama.context_length`` and
  ``llama.attention.layer_norm_rms_epsilon`` are required; ``head_count_kv`` defaults to
  ``head_count``, ``rope.freq_base`` to 10000, ``rope.dimension_count`` to the head size,
  ``attention.key_length`` / ``value_length`` to ``n_embd / n_head``;
* ``n_vocab`` is the length of ``tokenizer.ggml.tokens`` (or ``llama.vocab_size`` for a
  ``no_vocab`` file);
* ``output.weight`` is optional: without it the output projection is ``token_embd`` (tied);
* the architecture's optional tensors (biases, a fused ``attn_qkv``, ``rope_freqs``) are read
  when present, with their shapes checked like the others;
* every other tensor must be present with the expected shape, and no extra tensor may exist.

Loader options, as in ``llama_model_params``: ``vocab_only`` stops after the hyperparameters and
the vocabulary (no tensor is checked or read); ``check_tensors`` refuses a tensor holding a
NaN or Inf value. A split model (``split.count`` > 1) is loaded from its first part
``<prefix>-00001-of-0000N.gguf``; the other parts are found by name and hold tensors only.

Every failure is a :class:`~reference_impl.errors.ModelLoadError` whose ``code`` is one of
``LOAD_ERROR_CODES`` and whose ``field`` names the key or tensor at fault.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from reference_impl.errors import ModelLoadError
from reference_impl.model import dequant
from reference_impl.model.arch import ARCHS, ArchSpec
from reference_impl.spec_links import implements
from reference_impl.tokenizer import SpmVocab, load_vocab

SUPPORTED_ARCHS = tuple(ARCHS)
SUPPORTED_TYPES = tuple(dequant.TYPE_NAMES)

LOAD_ERROR_CODES = (
    "GGUF_FILE_NOT_FOUND",  # the path does not exist or is not a file
    "GGUF_MALFORMED",  # not a GGUF file, a corrupt header or a truncated file
    "GGUF_UNSUPPORTED_ARCH",  # general.architecture is not a supported architecture
    "GGUF_MISSING_KEY",  # a required metadata key is absent
    "GGUF_KEY_TYPE",  # a metadata key has the wrong value type
    "GGUF_INVALID_HPARAM",  # hyperparameters that contradict each other or are out of range
    "GGUF_UNSUPPORTED_FEATURE",  # a feature this reference does not implement
    "GGUF_UNSUPPORTED_TOKENIZER",  # a tokenizer.ggml.model / .pre the reference lacks
    "GGUF_MISSING_TENSOR",  # a required tensor is absent
    "GGUF_UNEXPECTED_TENSOR",  # a tensor the architecture does not use
    "GGUF_UNSUPPORTED_TENSOR_TYPE",  # a tensor stored in a type dequant does not implement
    "GGUF_SHAPE_MISMATCH",  # a tensor whose shape disagrees with the hyperparameters
    "GGUF_TENSOR_NOT_FINITE",  # check_tensors: a NaN/Inf value (or block scale) in a tensor
    "GGUF_SPLIT_MISSING",  # a part of a split model is not a file
    "GGUF_SPLIT_MISMATCH",  # split.* metadata that disagrees with the file name or across parts
    "GGUF_DUPLICATE_TENSOR",  # a tensor name stored twice (in two parts of a split model)
)


@dataclass(frozen=True)
class HParams:
    """Model hyperparameters, llama.cpp names."""

    arch: str
    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_rot: int
    n_ff: int
    rms_eps: float
    rope_freq_base: float
    n_ctx_train: int
    tied_output: bool
    rope_neox: bool = False  # NEOX RoPE pairs (qwen2) instead of NORM's adjacent pairs
    # Interleaved sliding-window attention (gemma3; empty / 0 for the others): which layers
    # attend through the window, its size and type (kv.swa.SWAType), their own RoPE base.
    swa_layers: tuple[bool, ...] = ()
    n_swa: int = 0
    swa_type: int = 0
    rope_freq_base_swa: float = 0.0
    attn_scale: float = 0.0  # the Q·K scale when not 1/sqrt(head_dim) (0: the default)
    logit_softcap: float = 0.0  # final logits -> cap·tanh(logits / cap) (0: none; gemma3)
    # M-RoPE (qwen2vl): pairs per position section (time, height, width, extra); 4 positions
    # per token
    rope_sections: tuple[int, ...] = ()
    n_pos_per_embd: int = 1
    # Encoder-only models (bert): LayerNorm epsilon, attention.causal (the context's default
    # attention type), pooling_type (the context's default pooling; -1 none given), the rows
    # of the token-type table (tokenizer.ggml.token_type_count)
    encoder_only: bool = False
    norm_eps: float = 0.0
    causal_attn: bool = True
    pooling_type: int = -1
    n_token_types: int = 0

    def is_swa(self, il: int) -> bool:
        """Whether layer ``il`` attends through the sliding window."""
        return bool(self.swa_layers) and self.swa_layers[il]

    @property
    def has_swa(self) -> bool:
        return any(self.swa_layers)

    @property
    def n_embd_q(self) -> int:
        return self.n_head * self.head_dim

    @property
    def n_embd_k_gqa(self) -> int:
        return self.n_head_kv * self.head_dim

    @property
    def kq_scale(self) -> float:
        return self.attn_scale or 1.0 / float(np.sqrt(self.head_dim))


@dataclass(frozen=True)
class LayerWeights:
    """One transformer block; matrices are ``[out_features, in_features]`` float32."""

    attn_norm: torch.Tensor
    wq: torch.Tensor
    wk: torch.Tensor
    wv: torch.Tensor
    wo: torch.Tensor
    ffn_norm: torch.Tensor
    ffn_gate: torch.Tensor
    ffn_up: torch.Tensor
    ffn_down: torch.Tensor
    # Optional biases (None when the file has none): ``[out_features]`` float32.
    bq: torch.Tensor | None = None
    bk: torch.Tensor | None = None
    bv: torch.Tensor | None = None
    bo: torch.Tensor | None = None
    ffn_gate_b: torch.Tensor | None = None
    ffn_up_b: torch.Tensor | None = None
    ffn_down_b: torch.Tensor | None = None
    # gemma3's extra norms (None for the others): per-head RMSNorm weights of Q and K
    # ``[head_dim]``, and the RMSNorms after the attention and after the FFN ``[n_embd]``.
    attn_q_norm: torch.Tensor | None = None
    attn_k_norm: torch.Tensor | None = None
    attn_post_norm: torch.Tensor | None = None
    ffn_post_norm: torch.Tensor | None = None


@dataclass(frozen=True)
class ModelWeights:
    """A loaded model: hyperparameters, dequantized tensors and the vocabulary."""

    path: Path
    hparams: HParams
    token_embd: torch.Tensor  # [n_vocab, n_embd]
    output_norm: torch.Tensor  # [n_embd]
    output: torch.Tensor | None  # [n_vocab, n_embd]; None when tied to token_embd
    layers: tuple[LayerWeights, ...]
    vocab: SpmVocab | None
    tensor_types: dict[str, str] = field(default_factory=dict)  # name -> "F32" / "Q4_0" / ...
    metadata: dict[str, Any] = field(default_factory=dict)  # scalar general.* keys
    vocab_only: bool = False  # loaded without tensors: the tensor fields are empty
    files: tuple[Path, ...] = ()  # every file read, the first part of a split model first
    rope_freqs: torch.Tensor | None = None  # [n_rot/2] frequency divisors (llama 3), or None
    # every loaded tensor by GGUF name (the encoder-only forward reads its tensors here)
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def output_weight(self) -> torch.Tensor:
        """The output projection actually used (token_embd when tied)."""
        return self.token_embd if self.output is None else self.output

    @implements("GGUF-004")
    def tensor(self, name: str) -> torch.Tensor:
        """A dequantized tensor by its GGUF name (``output.weight`` resolves tying); KeyError
        for a name the file does not store."""
        if name == "token_embd.weight":
            return self.token_embd
        if name == "output.weight":
            return self.output_weight
        # only stored tensors: a fused attn_qkv file stores no attn_q/attn_k/attn_v weight, so
        # the rows split off it for a layer record are not read back under those names
        if name in self.tensors:
            return self.tensors[name]
        raise KeyError(name)


_LAYER_TENSORS = {
    "attn_norm": "attn_norm",
    "attn_q": "wq",
    "attn_k": "wk",
    "attn_v": "wv",
    "attn_output": "wo",
    "ffn_norm": "ffn_norm",
    "ffn_gate": "ffn_gate",
    "ffn_up": "ffn_up",
    "ffn_down": "ffn_down",
    "attn_q_norm": "attn_q_norm",
    "attn_k_norm": "attn_k_norm",
    "post_attention_norm": "attn_post_norm",
    "post_ffw_norm": "ffn_post_norm",
}

_BIAS_ATTRS = {
    "attn_q": "bq",
    "attn_k": "bk",
    "attn_v": "bv",
    "attn_output": "bo",
    "ffn_gate": "ffn_gate_b",
    "ffn_up": "ffn_up_b",
    "ffn_down": "ffn_down_b",
}

# Known llama-family tensors that this reference does not implement (llama.cpp accepts them
# for some architecture); refused unless the architecture's ArchSpec allows them.
_UNSUPPORTED_TENSORS = (
    "rope_freqs",
    "attn_qkv",
    "ffn_gate_inp",
    "ffn_gate_exps",
    "ffn_up_exps",
    "ffn_down_exps",
    "cls",  # bert's classifier head (RANK pooling)
    "cls_out",
)


def _text(f: Any) -> str:
    """A scalar string value. GGUF strings are bytes that llama.cpp never validates, so one that
    is not UTF-8 reads with U+FFFD instead of failing the load (GGUF-056): a name then simply
    matches no known architecture, pre-type or model family."""
    return bytes(f.parts[f.data[0]]).decode("utf-8", errors="replace")


def _err(code: str, message: str, field_name: str | None) -> ModelLoadError:
    return ModelLoadError(code, message, field=field_name)


# -- metadata ---------------------------------------------------------------------------------

_INT_TYPES = ("UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "UINT64", "INT64")
_FLOAT_TYPES = ("FLOAT32", "FLOAT64")


class _Meta:
    """Typed access to the GGUF key/value section."""

    def __init__(self, reader: Any) -> None:
        self.fields = reader.fields

    @implements("GGUF-009")
    def _field(self, key: str, required: bool) -> Any:
        f = self.fields.get(key)
        if f is None and required:
            raise _err("GGUF_MISSING_KEY", f"required key {key!r} is missing", key)
        return f

    @staticmethod
    def _type_name(f: Any) -> str:
        return str(f.types[0].name) if f.types else "?"

    @implements("GGUF-010")
    def get_int(self, key: str, default: int | None = None) -> int:
        f = self._field(key, default is None)
        if f is None:
            assert default is not None
            return default
        if self._type_name(f) not in _INT_TYPES:
            raise _err(
                "GGUF_KEY_TYPE", f"key {key!r} must be an integer, got {self._type_name(f)}", key
            )
        return int(f.contents())

    @implements("GGUF-010")
    def get_float(self, key: str, default: float | None = None) -> float:
        f = self._field(key, default is None)
        if f is None:
            assert default is not None
            return default
        if self._type_name(f) not in _FLOAT_TYPES:
            raise _err(
                "GGUF_KEY_TYPE", f"key {key!r} must be a float, got {self._type_name(f)}", key
            )
        return float(f.contents())

    @implements("GGUF-010")
    def get_str(self, key: str, default: str | None = None) -> str:
        f = self._field(key, default is None)
        if f is None:
            assert default is not None
            return default
        if self._type_name(f) != "STRING":
            raise _err(
                "GGUF_KEY_TYPE", f"key {key!r} must be a string, got {self._type_name(f)}", key
            )
        return _text(f)

    @implements("GGUF-010")
    def get_bool(self, key: str, default: bool) -> bool:
        f = self._field(key, False)
        if f is None:
            return default
        if self._type_name(f) != "BOOL":
            raise _err(
                "GGUF_KEY_TYPE", f"key {key!r} must be a bool, got {self._type_name(f)}", key
            )
        return bool(f.contents())

    @implements("GGUF-010")
    def get_array(self, key: str, item_types: tuple[str, ...]) -> list[Any] | None:
        f = self._field(key, False)
        if f is None:
            return None
        if self._type_name(f) != "ARRAY" or f.types[-1].name not in item_types:
            raise _err(
                "GGUF_KEY_TYPE", f"key {key!r} must be an array of {'/'.join(item_types)}", key
            )
        return list(f.contents())

    def has(self, key: str) -> bool:
        return key in self.fields


@implements("GGUF-009", "GGUF-016")
def _read_vocab(meta: _Meta) -> tuple[SpmVocab | None, int | None]:
    """(vocabulary or None for no_vocab, its size or None); the tokenizer package reads it."""
    vocab = load_vocab(meta)
    return vocab, None if vocab is None else vocab.n_tokens


@implements("GGUF-001", "GGUF-008", "GGUF-011")
def read_hparams(meta: _Meta, tensor_names: set[str]) -> tuple[HParams, SpmVocab | None]:
    arch = meta.get_str("general.architecture")
    if arch not in SUPPORTED_ARCHS:
        raise _err(
            "GGUF_UNSUPPORTED_ARCH",
            f"architecture {arch!r} is not supported (supported: {', '.join(SUPPORTED_ARCHS)})",
            "general.architecture",
        )
    a = arch
    n_embd = meta.get_int(f"{a}.embedding_length")
    n_layer = meta.get_int(f"{a}.block_count")
    n_ff = meta.get_int(f"{a}.feed_forward_length")
    n_head = meta.get_int(f"{a}.attention.head_count")
    n_head_kv = meta.get_int(f"{a}.attention.head_count_kv", n_head)
    n_ctx_train = meta.get_int(f"{a}.context_length")
    # qwen2vl (llama.cpp 0.3.36) does not read the epsilon: see mrope_hparams
    # (an encoder-only model has LayerNorms: bert_hparams reads their epsilon)
    rms_eps = meta.get_float(
        f"{a}.attention.layer_norm_rms_epsilon",
        0.0 if ARCHS[arch].mrope or ARCHS[arch].encoder_only else None,
    )
    freq_base = meta.get_float(f"{a}.rope.freq_base", 10000.0)
    for key, val in (
        (f"{a}.embedding_length", n_embd),
        (f"{a}.block_count", n_layer),
        (f"{a}.feed_forward_length", n_ff),
        (f"{a}.attention.head_count", n_head),
        (f"{a}.attention.head_count_kv", n_head_kv),
        (f"{a}.context_length", n_ctx_train),
    ):
        if val <= 0:
            raise _err("GGUF_INVALID_HPARAM", f"{key} must be positive, got {val}", key)
    if n_head % n_head_kv:
        raise _err(
            "GGUF_INVALID_HPARAM",
            f"head_count {n_head} is not a multiple of head_count_kv {n_head_kv}",
            f"{a}.attention.head_count_kv",
        )
    if n_embd % n_head and not meta.has(f"{a}.attention.key_length"):
        raise _err(
            "GGUF_INVALID_HPARAM",
            f"embedding_length {n_embd} is not a multiple of head_count {n_head}",
            f"{a}.attention.head_count",
        )
    head_dim = meta.get_int(f"{a}.attention.key_length", n_embd // n_head)
    head_dim_v = meta.get_int(f"{a}.attention.value_length", head_dim)
    if head_dim_v != head_dim:
        raise _err(
            "GGUF_UNSUPPORTED_FEATURE",
            f"key_length {head_dim} != value_length {head_dim_v}",
            f"{a}.attention.value_length",
        )
    n_rot = meta.get_int(f"{a}.rope.dimension_count", head_dim)
    if n_rot != head_dim:  # the llama graph asserts n_rot == head size
        raise _err(
            "GGUF_INVALID_HPARAM",
            f"rope.dimension_count {n_rot} must equal the head size {head_dim}",
            f"{a}.rope.dimension_count",
        )
    if head_dim % 2:
        raise _err(
            "GGUF_INVALID_HPARAM", f"head size {head_dim} must be even", f"{a}.attention.head_count"
        )
    if meta.get_int(f"{a}.expert_count", 0) > 0:
        raise _err(
            "GGUF_UNSUPPORTED_FEATURE", "mixture-of-experts is not supported", f"{a}.expert_count"
        )
    scaling = meta.get_str(f"{a}.rope.scaling.type", "none")
    if scaling not in ("none", ""):
        raise _err(
            "GGUF_UNSUPPORTED_FEATURE",
            f"rope scaling {scaling!r} is not supported",
            f"{a}.rope.scaling.type",
        )
    if not ARCHS[arch].swa_period and meta.get_float(f"{a}.attention.scale", 0.0) != 0.0:
        raise _err(
            "GGUF_UNSUPPORTED_FEATURE",
            "a custom attention scale is not supported",
            f"{a}.attention.scale",
        )
    vocab, n_tokens = _read_vocab(meta)
    n_vocab = n_tokens if n_tokens is not None else meta.get_int(f"{a}.vocab_size")
    if n_vocab <= 0:
        raise _err("GGUF_INVALID_HPARAM", "the vocabulary is empty", "tokenizer.ggml.tokens")
    hp = HParams(
        arch=arch,
        n_vocab=n_vocab,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim=head_dim,
        n_rot=n_rot,
        n_ff=n_ff,
        rms_eps=rms_eps,
        rope_freq_base=freq_base,
        n_ctx_train=n_ctx_train,
        tied_output="output.weight" not in tensor_names,
        rope_neox=ARCHS[arch].rope_neox,
    )
    if ARCHS[arch].swa_period:
        hp = gemma3_hparams(meta, hp)
    if ARCHS[arch].mrope:
        hp = mrope_hparams(meta, hp)
    if ARCHS[arch].encoder_only:
        hp = bert_hparams(meta, hp)
    return hp, vocab


@implements("GGUF-052")
def bert_hparams(meta: _Meta, hp: HParams) -> HParams:
    """bert's keys, as llama.cpp 0.3.36 reads them: ``attention.layer_norm_epsilon``
    (required), ``attention.causal`` (default true: the context's attention type unless the
    caller sets one), ``pooling_type`` (optional: the context's default pooling) and
    ``tokenizer.ggml.token_type_count`` (required, > 0: the rows of ``token_types``)."""
    from dataclasses import replace

    a = hp.arch
    key = "tokenizer.ggml.token_type_count"
    n_types = meta.get_int(key)
    if n_types <= 0:
        raise _err("GGUF_INVALID_HPARAM", f"{key} must be positive, got {n_types}", key)
    # llama.cpp 0.3.36 sizes bert's Q and O {n_embd, n_embd} and splits Q into heads of
    # key_length: heads that do not tile n_embd refuse the file (shape) or abort the graph
    if hp.n_head * hp.head_dim != hp.n_embd:
        raise _err(
            "GGUF_INVALID_HPARAM",
            f"head_count {hp.n_head} x key_length {hp.head_dim} != embedding_length {hp.n_embd}",
            f"{a}.attention.key_length",
        )
    pooling = meta.get_int(f"{a}.pooling_type", -1)
    if pooling not in (-1, 0, 1, 2, 3, 4):
        raise _err("GGUF_INVALID_HPARAM", f"unknown pooling type {pooling}", f"{a}.pooling_type")
    return replace(
        hp,
        encoder_only=True,
        norm_eps=meta.get_float(f"{a}.attention.layer_norm_epsilon"),
        causal_attn=meta.get_bool(f"{a}.attention.causal", True),
        pooling_type=pooling,
        n_token_types=n_types,
    )


@implements("GGUF-051")
def mrope_hparams(meta: _Meta, hp: HParams) -> HParams:
    """M-RoPE (qwen2vl): ``rope.dimension_sections`` is required, 4 pair counts whose sum is
    positive (llama.cpp's rope cache takes each pair's section modulo that sum); a model with
    it reads 4 positions per token. llama.cpp 0.3.36's qwen2vl loader never reads
    ``attention.layer_norm_rms_epsilon``, so its RMSNorms run with epsilon 0 (measured: the
    key's value, or its absence, does not change the peer's logits); the reference follows."""
    from dataclasses import replace

    key = f"{hp.arch}.rope.dimension_sections"
    sections = meta.get_array(key, _INT_TYPES)
    if sections is None:
        raise _err("GGUF_MISSING_KEY", f"required key {key!r} is missing", key)
    if len(sections) != 4 or min(sections) < 0 or sum(sections) <= 0:
        raise _err(
            "GGUF_INVALID_HPARAM",
            f"{key} must be 4 non-negative pair counts with a positive sum, got {sections}",
            key,
        )
    return replace(hp, rope_sections=tuple(int(x) for x in sections), n_pos_per_embd=4, rms_eps=0.0)


# llama.cpp's gemma3 size by layer count: the 27B model (62 layers) scales Q·K by
# 1/sqrt(n_embd / n_head) instead of 1/sqrt(head_dim).
_GEMMA3_27B_LAYERS = 62


@implements("GGUF-049", "GGUF-050")
def gemma3_hparams(meta: _Meta, hp: HParams) -> HParams:
    """gemma3's hyperparameters beyond llama's, as llama.cpp 0.3.36 reads them: a positive
    ``attention.sliding_window`` turns on STANDARD sliding-window attention for the layers of
    ``attention.sliding_window_pattern`` (a period, default 6, or one flag per layer), whose
    RoPE base is ``rope.freq_base_swa`` (default 10000); without it (or 0) every layer is
    global. ``final_logit_softcapping`` (optional) caps the logits; ``attention.scale`` is not
    read. A window or pattern that cannot be used is refused naming its key."""
    from dataclasses import replace

    from reference_impl.kv.swa import SWAType
    from reference_impl.model.arch import swa_pattern

    a = hp.arch
    spec = ARCHS[a]
    changes: dict[str, Any] = {
        "logit_softcap": meta.get_float(f"{a}.final_logit_softcapping", 0.0),
        "attn_scale": (
            1.0 / float(np.sqrt(hp.n_embd // hp.n_head))
            if hp.n_layer == _GEMMA3_27B_LAYERS
            else 0.0
        ),
    }
    key = f"{a}.attention.sliding_window"
    n_swa = meta.get_int(key, 0)
    if n_swa < 0:
        raise _err("GGUF_INVALID_HPARAM", f"{key} must be >= 0, got {n_swa}", key)
    if n_swa > 0:
        pkey = f"{a}.attention.sliding_window_pattern"
        field = meta.fields.get(pkey)
        if field is not None and field.types and field.types[0].name == "ARRAY":
            flags = meta.get_array(pkey, (*_INT_TYPES, "BOOL")) or []
            if len(flags) != hp.n_layer:
                raise _err(
                    "GGUF_INVALID_HPARAM",
                    f"{pkey} has {len(flags)} values, expected one per layer ({hp.n_layer})",
                    pkey,
                )
            layers = tuple(bool(f) for f in flags)
        else:
            period = meta.get_int(pkey, spec.swa_period)
            layers = swa_pattern(hp.n_layer, period)
        if not any(layers):  # llama.cpp asserts is_swa_any() here (an abort)
            raise _err("GGUF_INVALID_HPARAM", f"{key} is set but {pkey} makes no layer slide", pkey)
        changes.update(
            swa_layers=layers,
            n_swa=n_swa,
            swa_type=int(SWAType.STANDARD),
            rope_freq_base_swa=meta.get_float(f"{a}.rope.freq_base_swa", spec.rope_freq_base_swa),
        )
    return replace(hp, **changes)


# -- tensors ----------------------------------------------------------------------------------


@implements("GGUF-013")
def expected_tensor_shapes(hp: HParams) -> dict[str, tuple[int, ...]]:
    """ggml shapes (``ne0`` first) of the tensors a llama model needs; ``output.weight`` is
    included and treated as optional by the loader."""
    if hp.encoder_only:
        return bert_tensor_shapes(hp)
    shapes: dict[str, tuple[int, ...]] = {
        "token_embd.weight": (hp.n_embd, hp.n_vocab),
        "output_norm.weight": (hp.n_embd,),
        "output.weight": (hp.n_embd, hp.n_vocab),
    }
    for i in range(hp.n_layer):
        p = f"blk.{i}."
        shapes[p + "attn_norm.weight"] = (hp.n_embd,)
        shapes[p + "attn_q.weight"] = (hp.n_embd, hp.n_embd_q)
        shapes[p + "attn_k.weight"] = (hp.n_embd, hp.n_embd_k_gqa)
        shapes[p + "attn_v.weight"] = (hp.n_embd, hp.n_embd_k_gqa)
        shapes[p + "attn_output.weight"] = (hp.n_embd_q, hp.n_embd)
        shapes[p + "ffn_norm.weight"] = (hp.n_embd,)
        shapes[p + "ffn_gate.weight"] = (hp.n_embd, hp.n_ff)
        shapes[p + "ffn_up.weight"] = (hp.n_embd, hp.n_ff)
        shapes[p + "ffn_down.weight"] = (hp.n_ff, hp.n_embd)
        for norm in ARCHS[hp.arch].layer_norms:  # gemma3: per-head Q/K norms and post-norms
            size = hp.head_dim if norm in ("attn_q_norm", "attn_k_norm") else hp.n_embd
            shapes[p + norm + ".weight"] = (size,)
    return shapes


@implements("GGUF-052")
def bert_tensor_shapes(hp: HParams) -> dict[str, tuple[int, ...]]:
    """ggml shapes of bert's required tensors: token and position embeddings (``n_ctx_train``
    rows), the embedding LayerNorm, per layer Q/K/V/O, the LayerNorm after the attention, the
    FFN up/down matrices and the LayerNorm after the FFN (every LayerNorm with its bias)."""
    e, kv = hp.n_embd, hp.n_embd_k_gqa
    shapes: dict[str, tuple[int, ...]] = {
        "token_embd.weight": (e, hp.n_vocab),
        "position_embd.weight": (e, hp.n_ctx_train),
        "token_embd_norm.weight": (e,),
        "token_embd_norm.bias": (e,),
    }
    for i in range(hp.n_layer):
        p = f"blk.{i}."
        shapes[p + "attn_q.weight"] = (e, hp.n_embd_q)
        shapes[p + "attn_k.weight"] = (e, kv)
        shapes[p + "attn_v.weight"] = (e, kv)
        shapes[p + "attn_output.weight"] = (hp.n_embd_q, e)
        shapes[p + "ffn_up.weight"] = (e, hp.n_ff)
        shapes[p + "ffn_down.weight"] = (hp.n_ff, e)
        for norm in ("attn_output_norm", "layer_output_norm"):
            shapes[p + norm + ".weight"] = (e,)
            shapes[p + norm + ".bias"] = (e,)
    return shapes


@implements("GGUF-044", "GGUF-046", "GGUF-048")
def optional_tensor_shapes(hp: HParams, spec: ArchSpec) -> dict[str, tuple[int, ...]]:
    """ggml shapes of the optional tensors the architecture accepts: ``rope_freqs.weight``
    (``n_rot/2`` divisors, one tensor for every layer), per-layer biases (the output length of
    their matrix) and the fused ``attn_qkv`` weight and bias."""
    kv = hp.n_embd_k_gqa
    lengths = {
        "attn_q": hp.n_embd_q,
        "attn_k": kv,
        "attn_v": kv,
        "attn_output": hp.n_embd,
        "ffn_gate": hp.n_ff,
        "ffn_up": hp.n_ff,
        "ffn_down": hp.n_embd,
    }
    n_qkv = hp.n_embd_q + 2 * kv
    shapes: dict[str, tuple[int, ...]] = {}
    if spec.encoder_only:  # bert: the token-type table (llama.cpp adds its row 0)
        shapes["token_types.weight"] = (hp.n_embd, hp.n_token_types)
    if spec.rope_freqs:
        shapes["rope_freqs.weight"] = (hp.n_rot // 2,)
    for i in range(hp.n_layer):
        p = f"blk.{i}."
        for b in spec.biases:
            shapes[p + b + ".bias"] = (lengths[b],)
        # every supported architecture takes a fused QKV (llama.cpp's create_tensor_qkv)
        shapes[p + "attn_qkv.weight"] = (hp.n_embd, n_qkv)
        shapes[p + "attn_qkv.bias"] = (n_qkv,)
    return shapes


@implements("GGUF-044")
def plan_tensors(
    hp: HParams, spec: ArchSpec, present: set[str]
) -> tuple[dict[str, tuple[int, ...]], dict[str, tuple[int, ...]], set[str]]:
    """(required shapes, optional shapes, displaced names) for the tensors ``present``. A layer
    with a fused ``attn_qkv.weight`` needs no separate Q/K/V, and then separate Q/K/V weights
    are displaced (llama.cpp does not create them, so it refuses the file), and so are separate
    Q/K/V biases beside an ``attn_qkv.bias``; without that fused bias they stay optional
    (GGUF-057). A layer without the fused weight has no ``attn_qkv.bias``."""
    required = expected_tensor_shapes(hp)
    optional = optional_tensor_shapes(hp, spec)
    displaced: set[str] = set()
    for i in range(hp.n_layer):
        p = f"blk.{i}."
        if p + "attn_qkv.weight" in present:
            kinds = ("weight", "bias") if p + "attn_qkv.bias" in present else ("weight",)
            for m in ("attn_q", "attn_k", "attn_v"):
                for name in (f"{p}{m}.{kind}" for kind in kinds):
                    required.pop(name, None)
                    optional.pop(name, None)
                    displaced.add(name)
        else:
            optional.pop(p + "attn_qkv.bias", None)
    return required, optional, displaced


@implements("GGUF-006", "GGUF-007", "GGUF-045")
def _open(path: Path) -> Any:
    import gguf

    if not path.is_file():
        raise _err("GGUF_FILE_NOT_FOUND", f"no such file: {path}", "path")
    try:
        reader = gguf.GGUFReader(str(path), "r")
    except Exception as exc:  # the gguf reader raises many types for corrupt input
        size = path.stat().st_size
        raise _err(
            "GGUF_MALFORMED",
            f"{path} is not a readable GGUF file ({size} bytes): {type(exc).__name__}: {exc}",
            "path",
        ) from exc
    if reader.byte_order != "I" or not np.little_endian:
        raise _err("GGUF_UNSUPPORTED_FEATURE", "big-endian GGUF files are not supported", "path")
    return reader


# -- split models -----------------------------------------------------------------------------

SPLIT_NAME = re.compile(r"^(?P<prefix>.*)-(?P<no>[0-9]{5})-of-(?P<count>[0-9]{5})\.gguf$")


def split_path(prefix: str, no: int, count: int) -> Path:
    """File of part ``no`` (0-based) of ``count``: ``<prefix>-%05d-of-%05d.gguf``, 1-based."""
    return Path(f"{prefix}-{no + 1:05d}-of-{count:05d}.gguf")


def _split_err(code: str, message: str, field_name: str, part: int) -> ModelLoadError:
    return ModelLoadError(code, message, field=field_name, index=part)


@implements("GGUF-040")
def open_parts(path: Path, reader: Any) -> list[tuple[Path, Any]]:
    """``[(file, reader)]`` of every part of the model whose first file is ``path`` (just
    ``path`` when ``split.count`` is absent or 1). The parts are named after the first one; each
    must carry ``split.no`` = its index and, when present, the same ``split.count``. Errors
    name the key in ``field`` and the part (0-based ``split.no``) in ``index``."""
    meta = _Meta(reader)
    count = meta.get_int("split.count", 1)
    if count <= 1:
        return [(path, reader)]
    if meta.get_int("split.no") != 0:
        raise _split_err(
            "GGUF_SPLIT_MISMATCH",
            f"{path} is part {meta.get_int('split.no')} of a split model; load the first part",
            "split.no",
            0,
        )
    name = SPLIT_NAME.match(path.name)
    if name is None or (int(name["no"]), int(name["count"])) != (1, count):
        raise _split_err(
            "GGUF_SPLIT_MISMATCH",
            f"{path.name} is not named <prefix>-00001-of-{count:05d}.gguf (split.count {count})",
            "path",
            0,
        )
    prefix = str(path.parent / name["prefix"])
    parts = [(path, reader)]
    for no in range(1, count):
        part = split_path(prefix, no, count)
        if not part.is_file():
            raise _split_err(
                "GGUF_SPLIT_MISSING", f"part {no + 1} of {count} is missing: {part}", "path", no
            )
        part_reader = _open(part)
        part_meta = _Meta(part_reader)
        if not part_meta.has("split.no"):
            raise _split_err("GGUF_MISSING_KEY", f"{part} has no split.no key", "split.no", no)
        for key, want in (("split.no", no), ("split.count", count)):
            got = part_meta.get_int(key, want if key == "split.count" else None)
            if got != want:
                raise _split_err(
                    "GGUF_SPLIT_MISMATCH", f"{part} has {key} = {got}, expected {want}", key, no
                )
        parts.append((part, part_reader))
    return parts


@implements("GGUF-040")
def gather_tensors(parts: list[tuple[Path, Any]], meta: _Meta) -> dict[str, Any]:
    """Tensor name -> tensor over every part; a name stored twice is refused, and a split
    model's ``split.tensors.count`` must equal the number of tensors found."""
    tensors: dict[str, Any] = {}
    for no, (part, reader) in enumerate(parts):
        for t in reader.tensors:
            if t.name in tensors:
                raise _split_err(
                    "GGUF_DUPLICATE_TENSOR",
                    f"tensor {t.name!r} is stored twice ({part})",
                    t.name,
                    no,
                )
            tensors[t.name] = t
    if len(parts) > 1:
        want = meta.get_int("split.tensors.count")
        if want != len(tensors):
            raise _split_err(
                "GGUF_SPLIT_MISMATCH",
                f"split.tensors.count is {want} but the {len(parts)} parts hold {len(tensors)}",
                "split.tensors.count",
                0,
            )
    return tensors


@implements("GGUF-042")
def check_tensor_data(name: str, ggml_type: int, raw: np.ndarray, values: np.ndarray) -> None:
    """``check_tensors``: refuse a tensor whose stored data holds NaN or Inf, naming it and the
    first value at fault (flat index, numpy order).

    The rule is about stored numbers, as llama.cpp's ``ggml_validate_row_data``: float values,
    and the fp16 scale fields of block formats. Every value of a block involves its scales
    (``d·q``, ``d·q + m``, ``d·sc·q − dmin·mn``; inf·0 is NaN) and finite fp16 scales give
    finite values, so for those formats "a dequantized value is NaN/Inf" is the same test.
    MXFP4 differs: its E8M0 byte 0xFF is the NaN scale, while a finite exponent of 254 can
    still overflow float32 once multiplied (llama.cpp accepts that)."""
    if ggml_type == dequant.GGML_MXFP4:
        nan_scale = np.asarray(raw, dtype=np.uint8).reshape(-1, 17)[:, 0] == 0xFF
        bad = np.repeat(nan_scale, dequant.QK)
        what = "blocks with the NaN E8M0 scale 0xFF"
    else:
        bad = ~np.isfinite(values.reshape(-1))
        what = "NaN/Inf values"
    if bad.any():
        first = int(np.argmax(bad))
        raise ModelLoadError(
            "GGUF_TENSOR_NOT_FINITE",
            f"tensor {name!r} holds {what} (first value at fault: {first})",
            field=name,
            index=first,
        )


@implements("GGUF-041")
def vocab_only_weights(
    p: Path, hp: HParams, vocab: SpmVocab | None, files: tuple[Path, ...]
) -> ModelWeights:
    """The model a ``vocab_only`` load returns: hyperparameters and vocabulary, no tensors."""
    empty = torch.empty(0, hp.n_embd)
    return ModelWeights(
        path=p,
        hparams=hp,
        token_embd=empty,
        output_norm=torch.empty(0),
        output=None,
        layers=(),
        vocab=vocab,
        vocab_only=True,
        files=files,
    )


def separate_biases_count(biases: Sequence[torch.Tensor | None]) -> bool:
    """Whether separate Q/K/V biases beside a fused ``attn_qkv`` weight are used: all three."""
    return all(b is not None for b in biases)


@implements("GGUF-044", "GGUF-052", "GGUF-057")
def qkv_weights(
    hp: HParams, loaded: dict[str, torch.Tensor], il: int
) -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
    """Block ``il``'s Q, K and V matrices and biases (None: absent), as llama.cpp's
    ``create_tensor_qkv`` takes them for every architecture: a fused ``attn_qkv`` (and its
    bias) is split by rows (Q's ``n_embd_q`` rows first, then K's and V's ``n_embd_k_gqa``).
    Beside a fused weight without a fused bias, separate Q/K/V biases count only as a full
    set: llama.cpp adds them as one concatenated bias, and a partial set is loaded unused.
    Without a fused weight, the separate weights and each bias on its own."""
    p = f"blk.{il}."
    names = [p + m for m in ("attn_q", "attn_k", "attn_v")]
    fused = loaded.get(p + "attn_qkv.weight")
    if fused is None:
        return [loaded[n + ".weight"] for n in names], [loaded.get(n + ".bias") for n in names]
    sizes = [hp.n_embd_q, hp.n_embd_k_gqa, hp.n_embd_k_gqa]
    mats = [m.contiguous() for m in torch.split(fused, sizes, dim=0)]
    fused_bias = loaded.get(p + "attn_qkv.bias")
    if fused_bias is not None:
        return mats, [b.contiguous() for b in torch.split(fused_bias, sizes)]
    biases = [loaded.get(n + ".bias") for n in names]
    return mats, biases if separate_biases_count(biases) else [None, None, None]


@implements("GGUF-044")
def layer_weights(hp: HParams, loaded: dict[str, torch.Tensor], il: int) -> LayerWeights:
    """Block ``il`` from the loaded tensors, Q/K/V as ``qkv_weights`` gives them."""
    p = f"blk.{il}."
    mats = {
        attr: loaded[p + key + ".weight"]
        for key, attr in _LAYER_TENSORS.items()
        if p + key + ".weight" in loaded
    }
    biases = {
        attr: loaded[p + key + ".bias"]
        for key, attr in _BIAS_ATTRS.items()
        if p + key + ".bias" in loaded
    }
    (wq, wk, wv), qkv_biases = qkv_weights(hp, loaded, il)
    mats.update(wq=wq, wk=wk, wv=wv)
    for attr, b in zip(("bq", "bk", "bv"), qkv_biases, strict=True):
        biases.pop(attr, None)
        if b is not None:
            biases[attr] = b
    return LayerWeights(**mats, **biases)


@implements("GGUF-005", "GGUF-012", "GGUF-013", "GGUF-014", "GGUF-015", "GGUF-056")
def load_gguf(
    path: str | os.PathLike[str], *, vocab_only: bool = False, check_tensors: bool = False
) -> ModelWeights:
    """Read, validate and dequantize a llama GGUF file (the first part of a split model).
    ``vocab_only``: hyperparameters and vocabulary only; ``check_tensors``: refuse NaN/Inf
    tensor data. Raises ModelLoadError."""
    p = Path(path)
    reader = _open(p)
    meta = _Meta(reader)
    split_parts = open_parts(p, reader)
    tensors = gather_tensors(split_parts, meta)
    hp, vocab = read_hparams(meta, set(tensors))
    files = tuple(part for part, _ in split_parts)
    if vocab_only:
        return vocab_only_weights(p, hp, vocab, files)
    spec = ARCHS[hp.arch]
    expected, optional, displaced = plan_tensors(hp, spec, set(tensors))

    for name in tensors:
        if name in expected or name in optional:
            continue
        if name in displaced:
            raise _err(
                "GGUF_UNEXPECTED_TENSOR",
                f"tensor {name!r} is stored alongside the fused attn_qkv of its layer",
                name,
            )
        parts = name.split(".")
        if len(parts) >= 3 and parts[0] == "blk" and parts[2] in _UNSUPPORTED_TENSORS:
            raise _err("GGUF_UNSUPPORTED_FEATURE", f"tensor {name!r} is not supported", name)
        if name.split(".")[0] in _UNSUPPORTED_TENSORS or name.endswith(".bias"):
            raise _err("GGUF_UNSUPPORTED_FEATURE", f"tensor {name!r} is not supported", name)
        raise _err(
            "GGUF_UNEXPECTED_TENSOR", f"tensor {name!r} is not used by a {hp.arch} model", name
        )

    loaded: dict[str, torch.Tensor] = {}
    types: dict[str, str] = {}
    wanted = {**expected, **{n: shape for n, shape in optional.items() if n in tensors}}
    for name, shape in wanted.items():
        t = tensors.get(name)
        if t is None:
            if name == "output.weight":
                continue  # tied to token_embd
            raise _err("GGUF_MISSING_TENSOR", f"required tensor {name!r} is missing", name)
        got = tuple(int(d) for d in t.shape)
        if got != shape:
            raise _err(
                "GGUF_SHAPE_MISMATCH",
                f"tensor {name!r} has shape {list(got)}, expected {list(shape)} (ggml order)",
                name,
            )
        ggml_type = int(t.tensor_type)
        if ggml_type not in SUPPORTED_TYPES:
            raise _err(
                "GGUF_UNSUPPORTED_TENSOR_TYPE",
                f"tensor {name!r} is stored as {t.tensor_type.name}; supported: "
                + ", ".join(dequant.TYPE_NAMES.values()),
                name,
            )
        values = dequant.dequantize(t.data, ggml_type, tuple(reversed(shape)))
        if check_tensors:
            check_tensor_data(name, ggml_type, t.data, values)
        loaded[name] = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32))
        types[name] = dequant.TYPE_NAMES[ggml_type]

    # an encoder-only forward reads its tensors by name (no llama blocks)
    layers = (
        () if hp.encoder_only else tuple(layer_weights(hp, loaded, i) for i in range(hp.n_layer))
    )
    metadata: dict[str, Any] = {}
    # only general.* scalars are decoded: other keys' values are never read (GGUF-056)
    for key, f in reader.fields.items():
        if key.startswith("general.") and f.types and f.types[0].name != "ARRAY":
            if f.types[0].name == "STRING":
                metadata[key] = _text(f)
            else:
                metadata[key] = f.contents()
    return ModelWeights(
        path=p,
        hparams=hp,
        token_embd=loaded["token_embd.weight"],
        output_norm=loaded.get("output_norm.weight", torch.empty(0)),
        output=loaded.get("output.weight"),
        layers=layers,
        vocab=vocab,
        tensor_types=types,
        metadata=metadata,
        files=files,
        rope_freqs=loaded.get("rope_freqs.weight"),
        tensors=loaded,
    )
