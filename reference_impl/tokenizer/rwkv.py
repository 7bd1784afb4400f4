"""llama.cpp's RWKV "world" tokenizer (GGUF ``tokenizer.ggml.model = "rwkv"``).

Token texts are byte strings written escaped (Python's ``repr(bytes)`` body: ``\\t \\n \\r``,
``\\xHH`` with lower-case hex, ``\\`` before any other character stands for that character).
Each raw-text fragment is covered greedily from the left by the longest token whose unescaped
bytes match; a byte no token starts with becomes UNK. ``add_special`` adds nothing; a piece is
the token's unescaped bytes; detokenize adds and removes no spaces.
"""

from __future__ import annotations

from reference_impl.spec_links import implements
from reference_impl.tokenizer.vocab import BaseTokenizer, TokenizerError, TokenType, Vocab


@implements("TOK-053")
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


@implements("TOK-053", "TOK-071")
class RwkvTokenizer(BaseTokenizer):
    """llama.cpp's RWKV tokenizer over one :class:`Vocab` with ``model = "rwkv"``."""

    def __init__(self, vocab: Vocab) -> None:
        super().__init__(vocab)
        self.pieces: dict[bytes, int] = {}
        for i, text in enumerate(vocab.tokens):
            self.pieces[unescape(text)] = i  # a repeated byte string keeps its last id
        self.max_len = max((len(p) for p in self.pieces), default=0)
        self.firsts = {p[:1] for p in self.pieces if p}

    @implements("TOK-053")
    def tokenize(
        self, text: str, add_special: bool = True, parse_special: bool = False
    ) -> list[int]:
        out: list[int] = []
        for frag in self._partition(text, parse_special):
            if isinstance(frag, int):
                out.append(frag)
                continue
            data = frag.encode()
            pos = 0
            while pos < len(data):
                if data[pos : pos + 1] not in self.firsts:
                    out.append(self.vocab.unk_id)
                    pos += 1
                    continue
                for end in range(min(len(data), pos + self.max_len), pos, -1):
                    tid = self.pieces.get(data[pos:end])
                    if tid is not None:
                        out.append(tid)
                        pos = end
                        break
                else:  # llama.cpp loops forever here (it restarts at offset 0)
                    raise TokenizerError(
                        "TOK_RWKV_NO_TOKEN",
                        f"no token matches at byte {pos} (the vocabulary lacks a one-byte token)",
                        field="text",
                        index=pos,
                    )
        return out

    @implements("TOK-053")
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
