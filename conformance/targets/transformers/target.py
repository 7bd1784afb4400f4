"""The ``transformers`` target: the adapter assembled from its per-area parts."""

from __future__ import annotations

from typing import Any

from conformance.targets.base import Target, TargetLoadError
from conformance.targets.transformers.context import TransformersContext
from conformance.targets.transformers.model import TransformersModel
from conformance.targets.transformers.sampling import TransformersSampling
from conformance.targets.transformers.tokenizer import TransformersTokenizer


class TransformersDecoder:
    """``decoder.*``: contexts over a loaded model (:mod:`.context`)."""

    #: K-shift by re-rotating the cached keys with the model's own RoPE (decoder.shift)
    k_shift = True

    def new_context(self, model: Any, **params: Any) -> TransformersContext:
        return TransformersContext(model, shift=self.k_shift, **params)


MODEL_CAPABILITIES = frozenset({"model.load", "model.forward", "model.weights"})
TOKENIZER_CAPABILITIES = frozenset({"tokenizer.tokenize"})
# the samplers transformers' logits processors can be: no top-n-sigma, no dynamic temperature,
# only the repeat part of llama.cpp's penalties (see DIVERGENCES.md)
SAMPLING_CAPABILITIES = frozenset(
    {"sampling.chain"}
    | {
        f"sampling.{name}"
        for name in (
            "greedy",
            "dist",
            "top_k",
            "top_p",
            "min_p",
            "typical",
            "temp",
            "logit_bias",
            "penalties",
        )
    }
)
# Not claimed, because the adapter borrows the reference's code for them (the verdicts would be
# the reference's): decoder.params (reference_impl.decoder.params.derive), decoder.batch_rules
# (the reference's sanitizer and splitter), decoder.pooling (the reference's poolers); nor
# decoder.kv_dtype, whose F16 storage is the adapter's cache layer, not transformers'.
DECODER_CAPABILITIES = frozenset(
    {
        "decoder.logits",
        "decoder.memory_ops",
        "decoder.embeddings",
        "decoder.non_causal",
        "decoder.abort",
        "decoder.shift",
    }
)


def _engine_version() -> str:
    try:
        import torch

        from conformance.targets.transformers.engine import transformers_version

        return f"transformers {transformers_version()} (torch {torch.__version__})"
    except ImportError as exc:
        raise TargetLoadError(
            "target 'transformers' needs transformers: install the 'transformers' extra "
            "(pip install -e '.[transformers]')"
        ) from exc


class TransformersTarget(
    TransformersModel, TransformersTokenizer, TransformersDecoder, TransformersSampling, Target
):
    """Hugging Face transformers (PyTorch, CPU, float32) behind the adapter protocol."""

    name = "transformers"
    capabilities = (
        MODEL_CAPABILITIES | TOKENIZER_CAPABILITIES | DECODER_CAPABILITIES | SAMPLING_CAPABILITIES
    )

    def __init__(self) -> None:
        self.version = _engine_version()
