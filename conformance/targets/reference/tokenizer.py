"""The tokenizer area of the reference target: :mod:`conformance.protocol.tokenizer` over ``reference_impl``."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any


def _tokenizer(model: Any) -> Any:
    """A vocabulary-only handle is the tokenizer itself; a model hands out its own."""
    from reference_impl.tokenizer import BaseTokenizer

    return model if isinstance(model, BaseTokenizer) else model._tok()


class Reference:
    """The tokenizer methods of the reference target (``reference_impl.tokenizer``)."""

    def tokenize(
        self, model: Any, text: str, add_special: bool = True, parse_special: bool = False
    ) -> list[int]:
        ids: list[int] = _tokenizer(model).tokenize(text, add_special, parse_special)
        return ids

    def token_to_piece(self, model: Any, token: int, special: bool = False) -> bytes:
        piece: bytes = _tokenizer(model).token_to_piece(token, special=special)
        return piece

    def detokenize(
        self,
        model: Any,
        tokens: Sequence[int],
        remove_special: bool = False,
        unparse_special: bool = False,
    ) -> bytes:
        text: bytes = _tokenizer(model).detokenize(tokens, remove_special, unparse_special)
        return text

    def load_vocab(self, path: str | os.PathLike[str]) -> Any:
        from reference_impl.tokenizer import load_vocab_file

        return load_vocab_file(path)

    def vocab_size(self, vocab: Any) -> int:
        return int(_tokenizer(vocab).vocab.n_tokens)
