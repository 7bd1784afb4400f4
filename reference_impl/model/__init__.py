"""The reference model: a llama GGUF file, its tokenizer and its forward pass.

``Model`` mirrors the model half of llama.cpp's C API (``llama_model_load_from_file``,
``llama_model_n_*``, ``llama_tokenize`` / ``llama_token_to_piece`` / ``llama_detokenize``);
the decoder's ``Context`` builds on :meth:`Model.forward_ubatch`.

>>> model = Model.from_gguf(path, n_threads=2)  # doctest: +SKIP
>>> ids = model.tokenize("Hello world")          # [1, ...] (BOS first)  # doctest: +SKIP
>>> logits = model.forward(ids)                  # [len(ids), n_vocab]   # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import torch

from reference_impl.errors import BatchError, EngineError
from reference_impl.model import gguf_loader, llama
from reference_impl.model.bert import BertForward
from reference_impl.model.gemma3 import Gemma3Forward
from reference_impl.model.gguf_loader import HParams, ModelWeights
from reference_impl.model.llama import AttentionFn, KVRead, KVWrite, LlamaForward, set_threads
from reference_impl.native import NativeDecodeStep
from reference_impl.spec_links import implements
from reference_impl.tokenizer import BaseTokenizer, make_tokenizer

__all__ = [
    "AttentionFn",
    "HParams",
    "KVRead",
    "KVWrite",
    "LlamaForward",
    "Model",
    "ModelWeights",
    "set_threads",
]


# The forward of each architecture that has its own (the others run the llama forward).
FORWARDS: dict[str, type[llama.LlamaForward]] = {"gemma3": Gemma3Forward, "bert": BertForward}


class Model:
    """A loaded llama-family model. Build it with :meth:`from_gguf`."""

    def __init__(self, weights: ModelWeights, attention: AttentionFn | None = None) -> None:
        self.weights = weights
        self.hparams: HParams = weights.hparams
        forward_class = FORWARDS.get(self.hparams.arch, llama.LlamaForward)
        self.graph = forward_class(weights, attention=attention)
        self.tokenizer = make_tokenizer(weights.vocab) if weights.vocab is not None else None
        self._native: NativeDecodeStep | None = None

    @classmethod
    def from_gguf(
        cls,
        path: str | os.PathLike[str],
        *,
        n_threads: int | None = None,
        attention: AttentionFn | None = None,
        vocab_only: bool = False,
        check_tensors: bool = False,
    ) -> Model:
        """Load a llama GGUF file (tensors of any type in ``dequant.TYPE_NAMES``, as float32).

        ``n_threads`` sets torch's (process-wide) intra-op thread count; ``attention`` swaps
        the attention kernel (default: torch SDPA with native GQA). Raises
        :class:`~reference_impl.errors.ModelLoadError` with a ``GGUF_*`` code naming the key
        or tensor at fault. ``vocab_only`` / ``check_tensors`` are llama_model_params' options:
        load no tensors (the model tokenizes but cannot run) / refuse NaN or Inf tensor data.
        """
        if n_threads is not None:
            set_threads(n_threads)
        weights = gguf_loader.load_gguf(path, vocab_only=vocab_only, check_tensors=check_tensors)
        return cls(weights, attention=attention)

    # -- metadata -----------------------------------------------------------------------------

    @property
    def n_vocab(self) -> int:
        return self.hparams.n_vocab

    @property
    def n_embd(self) -> int:
        return self.hparams.n_embd

    @property
    def n_layer(self) -> int:
        return self.hparams.n_layer

    @property
    def n_ctx_train(self) -> int:
        return self.hparams.n_ctx_train

    @property
    def bos(self) -> int:
        return self._tok().vocab.bos_id

    @property
    def eos(self) -> int:
        return self._tok().vocab.eos_id

    # -- tokenizer ----------------------------------------------------------------------------

    def _tok(self) -> BaseTokenizer:
        if self.tokenizer is None:
            raise EngineError(
                "TOK_NO_VOCAB", "this model has no vocabulary (no_vocab)", field="tokenizer"
            )
        return self.tokenizer

    def tokenize(self, text: str, add_bos: bool = True, parse_special: bool = False) -> list[int]:
        """llama_tokenize: ``add_bos`` is llama.cpp's ``add_special``."""
        return self._tok().tokenize(text, add_special=add_bos, parse_special=parse_special)

    def token_to_piece(self, token: int, special: bool = False) -> bytes:
        return self._tok().token_to_piece(token, special=special)

    def detokenize_bytes(
        self, tokens: Sequence[int], remove_special: bool = False, unparse_special: bool = False
    ) -> bytes:
        return self._tok().detokenize(tokens, remove_special, unparse_special)

    def detokenize(
        self, tokens: Sequence[int], remove_special: bool = False, unparse_special: bool = False
    ) -> str:
        """llama_detokenize as text (invalid UTF-8 from split byte tokens becomes U+FFFD)."""
        return self.detokenize_bytes(tokens, remove_special, unparse_special).decode(
            "utf-8", errors="replace"
        )

    # -- forward ------------------------------------------------------------------------------

    @implements("GGUF-055")
    def forward(
        self, tokens: Sequence[int] | np.ndarray, output_rows: Sequence[int] | None = None
    ) -> torch.Tensor:
        """Full-sequence logits ``[n_rows, n_vocab]`` (positions 0.., causal, no cache). An
        empty sequence is refused, as llama.cpp's decode refuses an empty batch."""
        self._require_tensors()
        if np.asarray(tokens).size == 0:
            raise BatchError("MODEL_INPUT", "a forward needs at least one token", field="token")
        return self.graph.forward(tokens, output_rows)

    def _require_tensors(self) -> None:
        if self.weights.vocab_only:
            raise EngineError(
                "MODEL_VOCAB_ONLY",
                "the model was loaded vocab_only: it has no tensors",
                field="model",
            )

    def forward_ubatch(
        self,
        *,
        positions: torch.Tensor | Sequence[int] | np.ndarray,
        kv_write: KVWrite,
        kv_read: KVRead,
        kq_mask: torch.Tensor,
        tokens: torch.Tensor | Sequence[int] | np.ndarray | None = None,
        embd: torch.Tensor | np.ndarray | None = None,
        output_rows: torch.Tensor | Sequence[int] | np.ndarray | None = None,
        return_hidden: bool = False,
        attention: AttentionFn | None = None,
        kq_mask_swa: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One cached step; see :meth:`LlamaForward.forward_ubatch` (``attention`` overrides
        the model's attention for this call)."""
        self._require_tensors()
        return self.graph.forward_ubatch(
            positions=positions,
            kv_write=kv_write,
            kv_read=kv_read,
            kq_mask=kq_mask,
            tokens=tokens,
            embd=embd,
            output_rows=output_rows,
            return_hidden=return_hidden,
            attention=attention,
            kq_mask_swa=kq_mask_swa,
        )

    def logits_from_hidden(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.graph.logits_from_hidden(hidden)

    def native_step(self) -> NativeDecodeStep:
        """The native one-token decode step over this model's weights (built on first use;
        raises RuntimeError when the library cannot be built, ValueError naming the reason
        when the model is not supported)."""
        if self._native is None:
            if self.weights.vocab_only:  # no tensors to point the C step at (it would crash)
                raise ValueError("the model was loaded vocab_only: it has no tensors")
            if self.graph.attention is not llama.sdpa_attention:
                raise ValueError("the model was built with its own attention function")
            if self.hparams.encoder_only:
                raise ValueError(f"{self.hparams.arch} is an encoder (no cached decode step)")
            self._native = NativeDecodeStep(self.graph)  # checks the rest (native.unsupported)
        return self._native

    def rope_shift(
        self, k: torch.Tensor, delta_positions: Sequence[int] | torch.Tensor, layer: int = 0
    ) -> torch.Tensor:
        """K-shift: keys of ``layer`` re-rotated by per-cell position deltas."""
        return self.graph.rope_shift(k, delta_positions, layer)
