"""llama.cpp's RWKV "world" tokenizer (GGUF ``tokenizer.ggml.model = "rwkv"``).

Token texts are byte strings written escaped (Python's ``repr(bytes)`` body: ``\\t \\n \\r``,
``\\xHH`` with lower-case hex, ``\\`` before any other character stands for that character).
Each raw-text fragment is covered greedily from the left by the longest token whose unescaped
bytes match; a byte no token starts with becomes UNK. ``add_special`` adds nothing; a piece is
the token's unescaped bytes; detokenize adds and removes no spaces.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import cast

from reference_impl.spec_links import implements
from reference_impl.tokenizer import trie
from reference_impl.tokenizer.vocab import BaseTokenizer, TokenizerError, TokenType, Vocab


@implements("TOK-053", "TOK-085")
def unescape(text: str) -> bytes:
    """The bytes an escaped RWKV token text stands for (hex digits are read as lower case,
    as llama.cpp reads them: an upper-case digit gives a wrong value, not an error)."""
    out = bytearray()
    raw = text.encode()
    i = 0
    while i < len(raw):
        c = raw[i]
        if c != 0x5C or i + 1 >= len(raw):  # not a backslash (a trailing one is dropped)
            if c != 0x5C:
                out.append(c)
            i += 1
            continue
        nxt = raw[i + 1]
        i += 2
        if nxt == ord("x"):
            acc = 0
            for d in raw[i : i + 2]:
                acc = ((acc << 4) + (d - ord("a") + 10 if d >= ord("a") else d - ord("0"))) & 0xFF
            if len(raw[i : i + 2]) == 2:
                out.append(acc)
            i += 2
        else:
            out.append({ord("t"): 9, ord("n"): 10, ord("r"): 13}.get(nxt, nxt))
    return bytes(out)


def _word_cuts(pieces: Iterable[bytes]) -> bytes:
    """Where the greedy match surely has a token boundary, so that the words between can be
    matched alone: before a whitespace byte, unless some token holds it right after the byte
    in front of it (no token can then cross the cut, and the match ends exactly there)."""
    inner = {(p[i - 1], p[i]) for p in pieces for i in range(1, len(p))}
    cuts = []
    for b in b" \n\t\r":
        ahead = b"(?=" + re.escape(bytes([b])) + b")"
        before = [re.escape(bytes([a])) for a in sorted(a for a, c in inner if c == b)]
        cuts.append(b"(?<![" + b"".join(before) + b"])" + ahead if before else ahead)
    return b"|".join(cuts)


@implements("TOK-053", "TOK-071")
class RwkvTokenizer(BaseTokenizer):
    """llama.cpp's RWKV tokenizer over one :class:`Vocab` with ``model = "rwkv"``."""

    def __init__(self, vocab: Vocab) -> None:
        super().__init__(vocab)
        self.pieces: dict[bytes, int] = {}
        for i, text in enumerate(vocab.tokens):
            self.pieces[unescape(text)] = i  # a repeated byte string keeps its last id
        self.firsts = {p[:1] for p in self.pieces if p}
        # At each position: the longest token, else one byte (UNK or an error, see below).
        self._pattern = re.compile(trie.longest_match_bytes(self.pieces) + b"|.", re.DOTALL)
        self._cuts = re.compile(_word_cuts(self.pieces))

    @implements("TOK-053")
    def _head(self) -> list[int]:
        return []  # llama.cpp's RWKV branch adds no BOS / EOS

    def _tail(self) -> list[int]:
        return []

    @implements("TOK-053")
    def _tokenize_fragment(self, text: str, out: list[int]) -> None:
        done: dict[bytes, list[int]] = {}  # words repeat: each distinct one is matched once
        pos = 0
        for word in self._cuts.split(text.encode()):
            ids = done.get(word)
            if ids is None:
                ids = done[word] = self._greedy(word, pos)
            out += ids
            pos += len(word)

    @implements("TOK-053")
    def _greedy(self, data: bytes, offset: int) -> list[int]:
        """The greedy longest match over ``data`` (at ``offset`` in its fragment): the regex
        walks it in C; a match that is not a token is the one-byte fallback."""
        matches = self._pattern.findall(data)
        found = list(map(self.pieces.get, matches))
        if None in found:
            found = [
                self._no_token(matches, k, offset) if t is None else t for k, t in enumerate(found)
            ]
        return cast("list[int]", found)

    @implements("TOK-076")
    def _no_token(self, matches: list[bytes], k: int, offset: int) -> int:
        """The id for ``matches[k]``, a byte no token matched at: UNK when no token starts with
        it; when some longer one does, llama.cpp loops forever (it restarts at offset 0)."""
        if matches[k] not in self.firsts:
            return self.vocab.unk_id
        pos = offset + sum(map(len, matches[:k]))
        raise TokenizerError(
            "TOK_RWKV_NO_TOKEN",
            f"no token matches at byte {pos} (the vocabulary lacks a one-byte token)",
            field="text",
            index=pos,
        )

    @implements("TOK-053", "TOK-080")
    def token_to_piece(self, token: int, special: bool = False, lstrip: int = 0) -> bytes:
        self._check(token)
        if not special and self.vocab.types[token] in (TokenType.CONTROL, TokenType.UNKNOWN):
            return b""
        piece = unescape(self.vocab.tokens[token])
        k = 0
        while k < lstrip and piece[:1] == b" ":
            piece = piece[1:]
            k += 1
        return piece
