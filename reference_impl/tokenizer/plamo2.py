"""llama.cpp's PLaMo-2 tokenizer (GGUF ``tokenizer.ggml.model = "plamo2"``).

A raw-text fragment (one leading U+FEFF dropped) is split into code points and segmented by
dynamic programming from the right: ``cost[n] = 0`` and ``cost[i]`` is the least
``cost[i + len(t)] - round(score(t) * 10^4)`` over the tokens ``t`` that start at ``i`` (every
token that is not BYTE and has a finite score of more than -2 * 10^7 units, CONTROL tokens
included), trying longer tokens first and replacing only on a strictly lower cost; the last
option is one unknown code point at ``cost[i + 1] + 10^7``, written out as the BYTE tokens of
its UTF-8 bytes. ``add_special`` adds nothing; pieces are raw token text (no ``'▁'``
replacement) or a BYTE token's byte.

The candidates come from llama.cpp's suffix table (TOK-087), walked as llama.cpp walks it:
*entries* are the token texts and all their suffixes; the entry at ``i`` extends one of the
entry at ``i + 1``'s *rows* (its prefixes that are entries, longest first, then the empty
one, the unknown row), and the candidates at ``i`` are the rows of the entry at ``i``. The
unknown row is scored -10^7 units, and a token scored exactly that (-1000) is taken for it:
both walks stop at its row. Without such a token the result is a least-cost segmentation.
"""

from __future__ import annotations

import math
import re

import numpy as np

from reference_impl.spec_links import implements
from reference_impl.tokenizer.vocab import BaseTokenizer, TokenType, Vocab

UNKNOWN_COST = 10_000_000
UNKNOWN_UNITS = -UNKNOWN_COST  # the unknown row's score; a token scored so ends a row list
INVALID_UNITS = -20_000_000  # a token scored at or below this many units is no candidate

Row = tuple[str, int, int]  # (prefix of the entry, score units, token id or -1)
UNKNOWN_ROW: Row = ("", UNKNOWN_UNITS, -1)  # one code point, written as its bytes


def ends_rows(row: Row) -> bool:
    """Whether a walk over an entry's rows stops after ``row``: llama.cpp recognises the
    unknown row by its score alone, so a token scored -1000 ends the walk as well."""
    return row[1] == UNKNOWN_UNITS


def _score_units(score: float) -> int:
    """``std::round(score * 1e4)`` (halves away from zero), with the float32 score widened."""
    x = float(np.float32(score)) * 1e4
    return int(math.copysign(math.floor(abs(x) + 0.5), x))


@implements("TOK-054", "TOK-072")
class Plamo2Tokenizer(BaseTokenizer):
    """llama.cpp's PLaMo-2 tokenizer over one :class:`Vocab` with ``model = "plamo2"``."""

    @implements("TOK-077", "TOK-087")
    def __init__(self, vocab: Vocab) -> None:
        super().__init__(vocab)
        self.byte_ids = [-1] * 256
        # entry text -> (score units, token id): tokens (last id wins; a non-finite score is
        # no candidate), then their suffixes that are not tokens (no candidate, id -1)
        self.entries: dict[str, tuple[int, int]] = {}
        for i, (text, t) in enumerate(zip(vocab.tokens, vocab.types, strict=True)):
            if t == TokenType.BYTE:
                if len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
                    self.byte_ids[int(text[3:5], 16)] = i
                continue
            score = vocab.scores[i]
            self.entries[text] = (
                _score_units(score) if math.isfinite(score) else INVALID_UNITS,
                i,
            )
            for k in range(1, len(text)):
                self.entries.setdefault(text[k:], (INVALID_UNITS, -1))
        self._rows_of: dict[str, list[Row]] = {"": [UNKNOWN_ROW]}
        self._init_pieces()

    def _init_pieces(self) -> None:
        """Fragments are cut before each code point ``x`` that no entry holds after its first
        place and that starts no token scored -1000: no entry spans the cut and the walk
        reaches the empty row past it, so each piece is solved alone with the same result
        (costs are integers, so the sums agree exactly)."""
        keep = {ch for text in self.entries for ch in text[1:]}
        keep |= {text[0] for text, (u, _) in self.entries.items() if u == UNKNOWN_UNITS}
        inner = f"[{re.escape(''.join(sorted(keep)))}]*" if keep else ""  # "[]" is no class
        self._pieces = re.compile(f"(?s:.){inner}")

    def _rows(self, entry: str) -> list[Row]:
        """An entry's prefixes that are entries, longest first, then the unknown row."""
        rows = self._rows_of.get(entry)
        if rows is None:
            rows = [
                (entry[:k], *self.entries[entry[:k]])
                for k in range(len(entry), 0, -1)
                if entry[:k] in self.entries
            ]
            rows = self._rows_of[entry] = [*rows, UNKNOWN_ROW]
        return rows

    @implements("TOK-087")
    def _entry_before(self, c: str, entry: str) -> str:
        """The entry at the code point ``c`` whose next position holds ``entry``: the first
        ``c + prefix`` over ``entry``'s rows that is an entry; a row scored -10^7 units (the
        unknown row, or a token scored -1000 taken for it) ends the search with none."""
        for row in self._rows(entry):
            if c + row[0] in self.entries:
                return c + row[0]
            if ends_rows(row):
                break
        return ""

    @implements("TOK-054")
    def _head(self) -> list[int]:
        return []  # llama.cpp's PLaMo-2 branch adds no BOS / EOS

    def _tail(self) -> list[int]:
        return []

    @implements("TOK-054")
    def _tokenize_fragment(self, text: str, out: list[int]) -> None:
        done: dict[str, list[int]] = {}  # pieces repeat: each distinct one is solved once
        for piece in self._pieces.findall(text[1:] if text.startswith("\ufeff") else text):
            ids = done.get(piece)
            if ids is None:
                ids = done[piece] = self._encode(piece)
            out += ids

    @implements("TOK-087")
    def _encode(self, text: str) -> list[int]:
        n = len(text)
        cost = [1 << 60] * (n + 1)
        cost[n] = 0
        step: list[tuple[int, int]] = [(1, -1)] * (n + 1)  # (length, token id or -1 = bytes)
        entry = ""
        for i in range(n - 1, -1, -1):
            entry = self._entry_before(text[i], entry)
            for row in self._rows(entry):  # longest first, the unknown row last
                prefix, units, tid = row
                length = len(prefix) or 1
                if units > INVALID_UNITS and cost[i + length] - units < cost[i]:
                    cost[i] = cost[i + length] - units
                    step[i] = (length, tid)
                if ends_rows(row):
                    break
        out: list[int] = []
        i = 0
        while i < n:
            length, tid = step[i]
            if tid >= 0:
                out.append(tid)
            else:
                out += [self.byte_ids[b] for b in text[i].encode("utf-8")]
            i += length
        return out

    @implements("TOK-054", "TOK-080")
    def token_to_piece(self, token: int, special: bool = False, lstrip: int = 0) -> bytes:
        """A BYTE token's byte; any other token's raw text (CONTROL/UNKNOWN only with
        ``special``), with up to ``lstrip`` leading spaces removed (from a BYTE token's space
        too: llama.cpp strips the cached piece, whatever the token's type)."""
        self._check(token)
        ttype, text = self.vocab.types[token], self.vocab.tokens[token]
        if ttype in (TokenType.CONTROL, TokenType.UNKNOWN) and not special:
            return b""
        if ttype == TokenType.BYTE and len(text) == 6 and text.startswith("<0x"):
            piece = bytes([int(text[3:5], 16)])
        else:
            piece = text.encode()
        k = 0
        while k < lstrip and piece[:1] == b" ":
            piece = piece[1:]
            k += 1
        return piece
