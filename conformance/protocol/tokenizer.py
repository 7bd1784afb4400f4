"""Protocol of the tokenizer area (spec/tokenizer.md): the model's own vocabulary, as
``llama_tokenize`` / ``llama_token_to_piece`` / ``llama_detokenize`` expose it."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Protocol

from conformance.protocol import capability
from conformance.protocol.model import LoadsModels, ModelHandle


class Tokenize(LoadsModels, Protocol):
    def tokenize(
        self, model: ModelHandle, text: str, add_special: bool = True, parse_special: bool = False
    ) -> list[int]: ...

    def token_to_piece(self, model: Any, token: int, special: bool = False) -> bytes: ...

    def detokenize(
        self,
        model: Any,
        tokens: Sequence[int],
        remove_special: bool = False,
        unparse_special: bool = False,
    ) -> bytes: ...


class LoadsVocab(Tokenize, Protocol):
    """A GGUF file's vocabulary alone (llama.cpp's ``vocab_only`` load), for vocabulary
    fixtures that carry no tensors. The handle is accepted by the :class:`Tokenize` methods."""

    def load_vocab(self, path: str | os.PathLike[str]) -> Any: ...

    def vocab_size(self, vocab: Any) -> int: ...


CAPABILITIES = (
    capability("tokenizer.tokenize", Tokenize, "tokenize, token pieces and detokenize"),
    capability(
        "tokenizer.vocab_only",
        LoadsVocab,
        "load a vocabulary-only GGUF file (BPE and other families) and tokenize with it",
    ),
)
