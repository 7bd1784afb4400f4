"""The tokenizer area over the tokenizer transformers builds from the GGUF vocabulary.

* ``tokenize``: ``tokenizer.encode(text, add_special_tokens=add_special,
  split_special_tokens=not parse_special)``: the special tokens (``<s>``, ``</s>``, ``<unk>``)
  are matched in the text only with ``parse_special``; user-defined tokens always are, as in
  llama.cpp.
* ``detokenize``: ``tokenizer.decode(ids, skip_special_tokens=not unparse_special)`` as UTF-8;
  ``remove_special`` first drops a leading BOS / trailing EOS when the tokenizer adds them
  (``add_bos_token`` / ``add_eos_token``, llama.cpp's rule).
* ``token_to_piece``: transformers has no call that renders one token as bytes (``decode`` of
  one id strips the leading space and turns a lone byte token into U+FFFD), so the adapter
  renders the engine's vocabulary entry (``convert_ids_to_tokens``): ``▁`` is a space, ``<0xNN>``
  the byte, special tokens empty unless ``special``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from reference_impl.errors import EngineError

SPACE = "\u2581"
_BYTE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


class TokenizerError(EngineError):
    """A token id the vocabulary does not have."""


def _check_id(engine: Any, token: int, index: int | None = None) -> int:
    if not 0 <= int(token) < engine.n_vocab:
        raise TokenizerError(
            "TOK_TOKEN_RANGE",
            f"token {token} is not in [0, {engine.n_vocab})",
            field="token",
            index=index,
        )
    return int(token)


class TransformersTokenizer:
    """``tokenizer.tokenize`` over :class:`~conformance.targets.transformers.engine.HFModel`."""

    def tokenize(
        self, model: Any, text: str, add_special: bool = True, parse_special: bool = False
    ) -> list[int]:
        ids = model.tokenizer.encode(
            text, add_special_tokens=add_special, split_special_tokens=not parse_special
        )
        return [int(i) for i in ids]

    def token_to_piece(self, model: Any, token: int, special: bool = False) -> bytes:
        token = _check_id(model, token)
        tok = model.tokenizer
        piece = tok.convert_ids_to_tokens(token)
        if token in set(tok.all_special_ids):
            return piece.encode("utf-8") if special else b""
        m = _BYTE.fullmatch(piece)
        if m is not None:
            return bytes([int(m.group(1), 16)])
        out: bytes = piece.replace(SPACE, " ").encode("utf-8")
        return out

    def detokenize(
        self,
        model: Any,
        tokens: Sequence[int],
        remove_special: bool = False,
        unparse_special: bool = False,
    ) -> bytes:
        ids = [_check_id(model, t, i) for i, t in enumerate(tokens)]
        tok = model.tokenizer
        if remove_special:
            if ids and getattr(tok, "add_bos_token", False) and ids[0] == tok.bos_token_id:
                ids = ids[1:]
            if ids and getattr(tok, "add_eos_token", False) and ids[-1] == tok.eos_token_id:
                ids = ids[:-1]
        text: str = tok.decode(ids, skip_special_tokens=not unparse_special)
        return text.encode("utf-8")
