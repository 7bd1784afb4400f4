"""llama.cpp's PLaMo-2 tokenizer (GGUF ``tokenizer.ggml.model = "plamo2"``).

A raw-text fragment (one leading U+FEFF dropped) is split into code points and segmented by
dynamic programming from the right: ``cost[n] = 0`` and ``cost[i]`` is the least
``cost[i + len(t)] - round(score(t) * 10^4)`` over the tokens ``t`` that start at ``i`` (every
token that is not BYTE and has a finite score of more than -2 * 10^7 units, CONTROL tokens
included), trying longer tokens first and replacing only on a strictly lower cost; the last
option is one unknown code point at ``cost[i + 1] + 10^7``, written out as the BYTE tokens of
its UTF-8 bytes. (llama.cpp finds the
candidates with a suffix automaton; the result is the same.) ``add_special`` adds nothing;
pieces are raw token text (no ``'▁'`` replacement) or a BYTE token's byte.
"""

from __future__ import annotations

import math
import re

import numpy as np

from reference_impl.spec_links import implements
from reference_impl.tokenizer import trie
from reference_impl.tokenizer.vocab import BaseTokenizer, TokenType, Vocab

UNKNOWN_COST = 10_000_000
INVALID_UNITS = -20_000_000  # a token scored at or below this many units is no candidate


def _score_units(score: float) -> int:
    """``std::round(score * 1e4)`` (halves away from zero), with the float32 score widened."""
    x = float(np.float32(score)) * 1e4
    return int(math.copysign(math.floor(abs(x) + 0.5), x))


@implements("TOK-054", "TOK-072")
class Plamo2Tokenizer(BaseTokenizer):
    """llama.cpp's PLaMo-2 tokenizer over one :class:`Vocab` with ``model = "plamo2"``."""

    @implements("TOK-077")
    def __init__(self, vocab: Vocab) -> None:
        super().__init__(vocab)
        self.byte_ids = [-1] * 256
        self.candidates: dict[str, tuple[int, int]] = {}  # text -> (score units, id)
        for i, (text, t) in enumerate(zip(vocab.tokens, vocab.types, strict=True)):
            if t == TokenType.BYTE:
                if len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
                    self.byte_ids[int(text[3:5], 16)] = i
                continue
            if math.isfinite(vocab.scores[i]):
                units = _score_units(vocab.scores[i])
                if units > INVALID_UNITS:  # llama.cpp's INVALID_SCORE: no candidate at or below
                    self.candidates[text] = (units, i)  # last id wins
        self._init_search()

    @implements("TOK-054")
    def _init_search(self) -> None:
        """The candidates starting at a position are the longest one (a trie regex finds it)
        and those of its prefixes that are candidates, listed once per candidate, longest
        first. A character that no candidate holds after its first place never lies inside
        a token, so the best segmentation breaks before it: the text is cut there into
        pieces that are solved alone (costs are integers, so the sums agree exactly)."""
        cands = self.candidates
        self._longest = re.compile(trie.longest_match(cands))
        self._prefixes = {
            text: [(k, *cands[text[:k]]) for k in range(len(text), 0, -1) if text[:k] in cands]
            for text in cands
        }
        inner = sorted({ch for text in cands for ch in text[1:]})
        self._pieces = re.compile(f"(?s:.)[{re.escape(''.join(inner))}]*" if inner else "(?s:.)")

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

    def _encode(self, text: str) -> list[int]:
        n = len(text)
        cost = [1 << 60] * (n + 1)
        cost[n] = 0
        step: list[tuple[int, int]] = [(1, -1)] * (n + 1)  # (length, token id or -1 = bytes)
        for i in range(n - 1, -1, -1):
            hit = self._longest.match(text, i)
            for length, units, tid in self._prefixes[hit[0]] if hit else ():  # longest first
                if cost[i + length] - units < cost[i]:
                    cost[i] = cost[i + length] - units
                    step[i] = (length, tid)
            if cost[i + 1] + UNKNOWN_COST < cost[i]:
                cost[i] = cost[i + 1] + UNKNOWN_COST
                step[i] = (1, -1)
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
