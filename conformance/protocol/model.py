"""Protocol of the model area (spec/model.md): load a GGUF file, run a forward pass, read weights.

Every method is phrased so that an engine exposing only llama.cpp's C API can implement it
(``llama_model_load_from_file``; ``llama_decode`` of one sequence with every logit requested).
A model handle is whatever ``load_model`` returns: the suite only passes it back to the target.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from conformance.protocol import capability, role


@role("model")
class ModelHandle(Protocol):
    """An opaque loaded model (the suite never reads it, only hands it back)."""


class LoadsModels(Protocol):
    """Shared by every capability that starts from a GGUF file."""

    def load_model(self, path: str | os.PathLike[str]) -> ModelHandle:
        """Load the file; raise on a file the engine cannot use."""
        ...

    def model_info(self, model: Any) -> Mapping[str, int]:
        """``n_vocab``, ``n_embd``, ``n_layer``, ``n_head``, ``n_head_kv``, ``n_ctx_train``
        and ``eos`` (the end-of-generation token id, -1 if none)."""
        ...


class Forward(LoadsModels, Protocol):
    def forward_logits(self, model: Any, tokens: Sequence[int]) -> np.ndarray:
        """float32 ``[n_tokens, n_vocab]``: the tokens as one sequence at positions
        ``0..n-1`` from an empty cache, every logit returned; raises on a token outside the
        vocabulary."""
        ...


class Weights(LoadsModels, Protocol):
    def model_tensor(self, model: Any, name: str) -> np.ndarray:
        """A tensor as the engine computes with it: float32, dequantized, numpy shape = the
        GGUF dims reversed; ``output.weight`` resolves tying."""
        ...


class VocabOnly(LoadsModels, Protocol):
    def load_model_vocab_only(self, path: str | os.PathLike[str]) -> ModelHandle:
        """llama_model_params.vocab_only: the vocabulary, no tensor read or checked. The
        tokenizer methods and ``vocab_info`` accept the handle (``model_info`` need not:
        llama.cpp 0.3.36 leaves a vocab-only model's hyperparameters unset)."""
        ...

    def vocab_info(self, model: Any) -> Mapping[str, int]:
        """``n_vocab``, ``bos`` and ``eos`` of a model, full or vocab-only."""
        ...


class CheckTensors(LoadsModels, Protocol):
    def load_model_checked(self, path: str | os.PathLike[str]) -> ModelHandle:
        """llama_model_params.check_tensors: as ``load_model``, and refuse a file whose tensor
        data holds NaN or Inf (for block formats: a NaN/Inf scale)."""
        ...


class Errors(LoadsModels, Protocol):
    """``load_model`` refuses a bad file with an exception carrying the spec's stable
    ``code`` (``GGUF_*``, ``MODEL_*``) and ``field`` / ``index`` attributes."""


class Gemma3(LoadsModels, Protocol):
    """The ``gemma3`` architecture (spec/model.md GGUF-049, GGUF-050): its files load, and
    ``forward_logits`` and the decode contexts of such a model compute gemma3's graph, with
    interleaved sliding-window attention (spec/decoder.md DEC-065). An engine without it skips
    the gemma3 checks."""


class Qwen2VL(LoadsModels, Protocol):
    """The ``qwen2vl`` architecture (spec/model.md GGUF-051): M-RoPE with 4 positions per
    token (``n_pos_per_embd`` 4). Its files load, ``forward_logits`` computes its graph, and
    the decode contexts of such a model take batches with 4 position planes (the M-RoPE cases
    of the batch corpus). An engine without it skips those checks."""


class Bert(LoadsModels, Protocol):
    """The ``bert`` architecture (spec/model.md GGUF-052): an encoder-only model (learned
    positions, token-type row 0, post-LayerNorm blocks with biases, GELU FFN, no output head).
    Its files load, and the contexts of such a model have no memory: ``decode`` encodes
    (spec/decoder.md DEC-048) and the embeddings, per token or pooled, are bert's. An engine
    without it skips the bert checks."""


CAPABILITIES = (
    capability("model.load", LoadsModels, "load a GGUF file and report its sizes"),
    capability("model.forward", Forward, "full-sequence logits of one token sequence"),
    capability("model.weights", Weights, "the engine's dequantized tensors by GGUF name"),
    capability("model.errors", Errors, "load failures as typed errors with the spec's codes"),
    capability("model.vocab_only", VocabOnly, "load only the vocabulary, no tensor"),
    capability("model.check_tensors", CheckTensors, "load refusing NaN/Inf tensor data"),
    capability(
        "model.arch.gemma3",
        Gemma3,
        "gemma3 models: interleaved sliding-window attention, per-head Q/K norms, post-norms",
    ),
    capability(
        "model.arch.qwen2vl",
        Qwen2VL,
        "qwen2vl models: M-RoPE, 4 positions per token",
    ),
    capability(
        "model.arch.bert",
        Bert,
        "bert models: encoder-only, learned positions, post-LayerNorm, pooled embeddings",
    ),
)
