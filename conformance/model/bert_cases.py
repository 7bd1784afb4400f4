"""The bert fixture's prompts and context set-up, shared by the model tests of the bert graph
(conformance/model/test_bert.py) and the decoder tests of a context without memory
(conformance/decoder/test_no_memory.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from conformance.gate import cached

NMSE_BAR = 1e-6  # F32 weights: both engines compute the same float32 function
CLS, SEP = 2, 3  # [CLS] and [SEP] in the WordPiece fixture vocabulary
PROMPTS: dict[str, list[int]] = {
    "one": [CLS],
    "short": [CLS, 40, 311, 95, SEP],
    # 48 tokens (of the 64 positions), ids spread over the vocabulary
    "long": [CLS, *((37 * i + 11) % 700 + 5 for i in range(46)), SEP],
}


def bert_context(engine: Any, path: Path | str, **params: Any) -> Any:
    """A context of ``engine`` on the bert file at ``path`` (n_ctx, n_batch, n_ubatch 64)."""
    model = cached(engine, "load_model", str(path))
    return engine.new_context(model, **{"n_ctx": 64, "n_batch": 64, "n_ubatch": 64, **params})


def read(ctx: Any, pooling: str, seqs: Sequence[int], n_tokens: int) -> np.ndarray:
    """Per-token rows in batch order (NONE) or the pooled row of each of ``seqs``."""
    if pooling == "none":
        return np.stack([np.asarray(ctx.get_embeddings_ith(i)) for i in range(n_tokens)])
    return np.stack([np.asarray(ctx.get_embeddings_seq(s)) for s in seqs])
