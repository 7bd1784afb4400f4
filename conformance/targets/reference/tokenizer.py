"""The tokenizer area of the reference target: :mod:`conformance.protocol.tokenizer` over ``reference_impl``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class Reference:
    """The tokenizer methods of the reference target (``reference_impl.tokenizer``)."""

    def tokenize(
        self, model: Any, text: str, add_special: bool = True, parse_special: bool = False
    ) -> list[int]:
        ids: list[int] = model.tokenize(text, add_bos=add_special, parse_special=parse_special)
        return ids

    def token_to_piece(self, model: Any, token: int, special: bool = False) -> bytes:
        piece: bytes = model.token_to_piece(token, special=special)
        return piece

    def detokenize(
        self,
        model: Any,
        tokens: Sequence[int],
        remove_special: bool = False,
        unparse_special: bool = False,
    ) -> bytes:
        text: bytes = model.detokenize_bytes(tokens, remove_special, unparse_special)
        return text
