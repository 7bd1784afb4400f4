"""Protocol of the tokenizer area (spec/tokenizer.md): the model's own vocabulary, as
``llama_tokenize`` / ``llama_token_to_piece`` / ``llama_detokenize`` expose it."""

from __future__ import annotations

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


CAPABILITIES = (
    capability("tokenizer.tokenize", Tokenize, "tokenize, token pieces and detokenize"),
)
