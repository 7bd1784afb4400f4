"""A template adapter: the starting point for plugging an engine into the suite.

Copy this file into your project, replace every ``NotImplementedError`` with a call into your
engine, and list in ``capabilities`` exactly what you implemented (docs/ADAPTERS.md describes every
capability; ``python -m conformance.protocol`` prints the contract). As shipped it claims the
decode core, loads, and passes the suite's validation, so a run against it reaches every test of
those capabilities (they fail with ``NotImplementedError`` until filled in)::

    python3 -m nox -s conformance -- --target conformance.targets.template:make_target

The ``TYPE_CHECKING`` block at the end makes mypy check the adapter against the Protocols of the
capabilities it claims: keep it in your copy and extend it when you claim more.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from reference_impl.batch.types import Batch


class TemplateModel:
    """Your engine's loaded model. The suite never reads it: it only hands it back to you."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        raise NotImplementedError("load the GGUF file with your engine (llama_model_load)")


class TemplateContext:
    """Your engine's decode context (llama_context)."""

    def __init__(self, model: TemplateModel, **params: Any) -> None:
        # params follow llama_context_params: n_ctx, n_batch, n_ubatch, n_seq_max, kv_unified,
        # n_outputs_max, n_threads (a hint). Only parameters of capabilities you claim arrive.
        raise NotImplementedError("create a context (llama_init_from_model)")

    # -- decoder.logits: sizes, decode, outputs ---------------------------------------------
    def n_ctx(self) -> int:
        raise NotImplementedError

    def n_ctx_seq(self) -> int:
        raise NotImplementedError

    def n_batch(self) -> int:
        raise NotImplementedError

    def n_ubatch(self) -> int:
        raise NotImplementedError

    def n_seq_max(self) -> int:
        raise NotImplementedError

    def decode(self, batch: Batch) -> int:
        """llama_decode: 0 ok, 1 no memory slot, 2 aborted, -1 invalid batch, -2/-3 failures.
        ``batch`` fields that are None mean NULL pointers (your engine's defaults)."""
        raise NotImplementedError

    def get_logits(self) -> np.ndarray:
        raise NotImplementedError("[n_outputs, n_vocab] float32, batch order")

    def get_logits_ith(self, i: int) -> np.ndarray:
        raise NotImplementedError("row of batch token i (negative i: from the end); raise if none")

    def n_outputs(self) -> int:
        raise NotImplementedError

    # -- decoder.memory_ops ------------------------------------------------------------------
    def memory_clear(self, data: bool = True) -> None:
        raise NotImplementedError

    def seq_rm(self, seq_id: int, p0: int = -1, p1: int = -1) -> bool:
        raise NotImplementedError

    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None:
        raise NotImplementedError

    def seq_keep(self, seq_id: int) -> None:
        raise NotImplementedError

    def seq_add(self, seq_id: int, p0: int, p1: int, delta: int) -> None:
        raise NotImplementedError

    def seq_div(self, seq_id: int, p0: int, p1: int, d: int) -> None:
        raise NotImplementedError

    def seq_pos_min(self, seq_id: int) -> int:
        raise NotImplementedError

    def seq_pos_max(self, seq_id: int) -> int:
        raise NotImplementedError


class TemplateTarget:
    name = "template"
    version = "0.0.0"  # your engine's version or commit: it goes into the report
    capabilities = frozenset({"model.load", "decoder.logits", "decoder.memory_ops"})

    def load_model(self, path: str | os.PathLike[str]) -> TemplateModel:
        return TemplateModel(path)

    def model_info(self, model: Any) -> Mapping[str, int]:
        raise NotImplementedError(
            "n_vocab, n_embd, n_layer, n_head, n_head_kv, n_ctx_train, eos (-1 if none)"
        )

    def new_context(self, model: Any, **params: Any) -> TemplateContext:
        return TemplateContext(model, **params)


def make_target() -> TemplateTarget:
    return TemplateTarget()


if TYPE_CHECKING:
    from conformance.protocol import decoder
    from conformance.protocol import model as model_protocol

    def _conforms(t: TemplateTarget) -> None:
        _load: model_protocol.LoadsModels = t
        _logits: decoder.Logits = t
        _memory: decoder.MemoryOps = t
