"""The model area of the reference target: :mod:`conformance.protocol.model` over ``reference_impl``."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from reference_impl.model import Model


class Reference:
    """The model-area methods of the reference target (``reference_impl.model``)."""

    def load_model(self, path: str | os.PathLike[str]) -> Model:
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

    def load_model_vocab_only(self, path: str | os.PathLike[str]) -> Model:
        from reference_impl.model import Model

        return Model.from_gguf(Path(path), vocab_only=True)

    def vocab_info(self, model: Any) -> dict[str, int]:
        return {"n_vocab": model.n_vocab, "bos": model.bos, "eos": model.eos}

    def load_model_checked(self, path: str | os.PathLike[str]) -> Model:
        from reference_impl.model import Model

        return Model.from_gguf(Path(path), check_tensors=True)

    def model_info(self, model: Any) -> dict[str, int]:
        hp = model.hparams
        return {
            "n_vocab": hp.n_vocab,
            "n_embd": hp.n_embd,
            "n_layer": hp.n_layer,
            "n_head": hp.n_head,
            "n_head_kv": hp.n_head_kv,
            "n_ctx_train": hp.n_ctx_train,
            "eos": model.eos if model.tokenizer is not None else -1,
        }

    def forward_logits(self, model: Any, tokens: Sequence[int]) -> np.ndarray:
        out: np.ndarray = model.forward(list(tokens)).numpy()
        return out

    def model_tensor(self, model: Any, name: str) -> np.ndarray:
        arr: np.ndarray = model.weights.tensor(name).numpy()
        return arr
