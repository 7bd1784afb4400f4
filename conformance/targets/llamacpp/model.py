"""The model and tokenizer areas of the llamacpp target (``llama_model_*``, ``llama_tokenize``,
``llama_token_to_piece``, ``llama_detokenize``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np


class LlamaCppModels:
    """``model.load``, ``model.forward`` and ``tokenizer.tokenize`` over llama.cpp (it exposes
    neither dequantized weights nor typed error codes).

    A handle is a :class:`~conformance.targets.llamacpp.runtime.LlamaCppModel`; forwards run in
    one context per model (F32 KV cache, ``n_ctx`` grown on demand), cleared before each call.
    """

    def load_model(self, path: str | os.PathLike[str]) -> Any:
        from conformance.targets.llamacpp.runtime import LlamaCppModel

        return LlamaCppModel(path)

    def load_model_vocab_only(self, path: str | os.PathLike[str]) -> Any:
        from conformance.targets.llamacpp.runtime import LlamaCppModel

        return LlamaCppModel(path, vocab_only=True)

    def vocab_info(self, model: Any) -> dict[str, int]:
        return {"n_vocab": int(model.n_vocab), "bos": int(model.bos), "eos": int(model.eos)}

    def load_model_checked(self, path: str | os.PathLike[str]) -> Any:
        from conformance.targets.llamacpp.runtime import LlamaCppModel

        return LlamaCppModel(path, check_tensors=True)

    def model_info(self, model: Any) -> dict[str, int]:
        info: dict[str, int] = model.info()
        return info

    def forward_logits(self, model: Any, tokens: Sequence[int]) -> np.ndarray:
        from conformance.targets.llamacpp.runtime import LlamaCppContext

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

    def load_vocab(self, path: str | os.PathLike[str]) -> Any:
        """A ``vocab_only`` llama_model (no tensors read), one per file version."""
        from pathlib import Path

        from conformance.targets.llamacpp.runtime import LlamaCppModel

        p = Path(path).resolve()
        st = p.stat()
        key = (str(p), st.st_mtime_ns, st.st_size)
        cache: dict[Any, Any] = self.__dict__.setdefault("_llamacpp_vocabs", {})
        if key not in cache:
            cache[key] = LlamaCppModel(p, vocab_only=True)
        return cache[key]

    def vocab_size(self, vocab: Any) -> int:
        return int(vocab.n_vocab)

    def detokenize(
        self,
        model: Any,
        tokens: Sequence[int],
        remove_special: bool = False,
        unparse_special: bool = False,
    ) -> bytes:
        text: bytes = model.detokenize(tokens, remove_special, unparse_special)
        return text
