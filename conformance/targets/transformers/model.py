"""The model area over transformers: ``model.load``, ``model.forward``, ``model.weights``."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from conformance.targets.transformers.engine import HFModel


class TransformersModel:
    """Model handles are :class:`HFModel` objects, one per file version (loading converts the
    whole GGUF file, the slow part of most tests)."""

    def load_model(self, path: str | os.PathLike[str]) -> HFModel:
        p = Path(path).resolve()
        cache: dict[Any, HFModel] = self.__dict__.setdefault("_hf_models", {})
        key = None
        if p.is_file():
            st = p.stat()
            key = (str(p), st.st_mtime_ns, st.st_size)
            if key in cache:
                return cache[key]
        model = HFModel(p)
        if key is not None:
            cache[key] = model
        return model

    def model_info(self, model: HFModel) -> dict[str, int]:
        return model.info()

    def forward_logits(self, model: HFModel, tokens: Sequence[int]) -> np.ndarray:
        bad = [t for t in tokens if not 0 <= int(t) < model.n_vocab]
        if bad:  # torch's embedding lookup would also refuse, with an IndexError
            raise IndexError(f"token {bad[0]} is not in [0, {model.n_vocab})")
        return model.logits(tokens)

    def model_tensor(self, model: HFModel, name: str) -> np.ndarray:
        return model.tensor(name)
