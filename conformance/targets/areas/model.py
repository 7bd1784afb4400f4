"""Target protocol for the model area: load a GGUF file, run a forward pass, tokenize.

A *model handle* is whatever ``load_model`` returns; the other methods take it back. Every
method is phrased so that an engine exposing only llama.cpp's C API can implement it
(``llama_model_load_from_file``; ``llama_decode`` of one sequence with every logit requested;
``llama_tokenize`` / ``llama_token_to_piece`` / ``llama_detokenize``).

Capabilities:

* ``model.load``: ``load_model(path) -> handle`` (raises on a file it cannot use) and
  ``model_info(handle) -> {"n_vocab", "n_embd", "n_layer", "n_head", "n_head_kv",
  "n_ctx_train"}``;
* ``model.forward``: ``forward_logits(handle, tokens) -> float32 [n_tokens, n_vocab]``: the
  tokens as one sequence at positions ``0..n-1`` from an empty cache, every logit returned;
  raises on a token outside the vocabulary;
* ``model.weights``: ``model_tensor(handle, name) -> float32 ndarray`` -- a tensor as the
  engine computes with it (dequantized; numpy shape = GGUF dims reversed; ``output.weight``
  resolves tying);
* ``model.errors``: failures raise exceptions with the spec's stable ``code`` (``GGUF_*``,
  ``MODEL_*``, ``TOK_*``) and ``field`` / ``index`` attributes.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

CAPABILITIES: dict[str, tuple[str, ...]] = {
    "model.load": ("load_model", "model_info"),
    "model.forward": ("forward_logits",),
    "model.weights": ("model_tensor",),
    "model.errors": ("load_model",),
}


class Reference:
    """The model-area methods of the reference target (``reference_impl.model``)."""

    def load_model(self, path: str | os.PathLike[str]) -> Any:
        # Loaded models are cached per file version: tests load the same fixtures often.
        from reference_impl.model import Model

        p = Path(path).resolve()
        key = None
        if p.is_file():
            st = p.stat()
            key = (str(p), st.st_mtime_ns, st.st_size)
        cache: dict[Any, Any] = self.__dict__.setdefault("_model_cache", {})
        if key is not None and key in cache:
            return cache[key]
        model = Model.from_gguf(p)
        if key is not None:
            cache[key] = model
        return model

    def model_info(self, model: Any) -> dict[str, int]:
        hp = model.hparams
        return {
            "n_vocab": hp.n_vocab,
            "n_embd": hp.n_embd,
            "n_layer": hp.n_layer,
            "n_head": hp.n_head,
            "n_head_kv": hp.n_head_kv,
            "n_ctx_train": hp.n_ctx_train,
        }

    def forward_logits(self, model: Any, tokens: Sequence[int]) -> np.ndarray:
        out: np.ndarray = model.forward(list(tokens)).numpy()
        return out

    def model_tensor(self, model: Any, name: str) -> np.ndarray:
        arr: np.ndarray = model.weights.tensor(name).numpy()
        return arr


class LlamaCpp:
    """The model-area methods over llama.cpp (``conformance.targets.llamacpp_runtime``), for the
    ``llamacpp`` target to mix in: ``model.load``, ``model.forward`` and ``tokenizer.tokenize``
    (llama.cpp exposes neither dequantized weights nor typed error codes).

    A handle is a :class:`~conformance.targets.llamacpp_runtime.LlamaCppModel`; forwards run in
    one context per model (F32 KV cache, ``n_ctx`` grown on demand), cleared before each call.
    """

    LLAMACPP_CAPABILITIES = frozenset({"model.load", "model.forward", "tokenizer.tokenize"})

    def load_model(self, path: str | os.PathLike[str]) -> Any:
        from conformance.targets.llamacpp_runtime import LlamaCppModel

        return LlamaCppModel(path)

    def model_info(self, model: Any) -> dict[str, int]:
        info: dict[str, int] = model.info()
        return info

    def forward_logits(self, model: Any, tokens: Sequence[int]) -> np.ndarray:
        from conformance.targets.llamacpp_runtime import LlamaCppContext

        n = max(1, len(tokens))
        contexts: dict[int, Any] = self.__dict__.setdefault("_llamacpp_contexts", {})
        ctx = contexts.get(id(model))
        if ctx is None or ctx.model is not model or ctx.n_ctx < n:
            size = max(256, 1 << (n - 1).bit_length())
            ctx = LlamaCppContext(model, n_ctx=size, n_batch=size, n_ubatch=size)
            contexts[id(model)] = ctx
        out: np.ndarray = ctx.logits_all(list(tokens))
        return out

    def tokenize(
        self, model: Any, text: str, add_special: bool = True, parse_special: bool = False
    ) -> list[int]:
        ids: list[int] = model.tokenize(text, add_special, parse_special)
        return ids

    def token_to_piece(self, model: Any, token: int, special: bool = False) -> bytes:
        piece: bytes = model.token_to_piece(token, special)
        return piece

    def detokenize(
        self,
        model: Any,
        tokens: Sequence[int],
        remove_special: bool = False,
        unparse_special: bool = False,
    ) -> bytes:
        text: bytes = model.detokenize(tokens, remove_special, unparse_special)
        return text
