"""A SentencePiece-style ("spm", GGUF ``tokenizer.ggml.model = "llama"``) tokenizer.

It reproduces llama.cpp's SPM tokenization of a GGUF vocabulary, which is what the suite's
fixture models carry:

* special-token partition first: user-defined tokens always split the text; control and
  unknown tokens only when ``parse_special`` is true (longest token text first);
* every raw-text fragment that follows the start of the text or a special token gets a leading
  space (``add_space_prefix``), then spaces become U+2581 ``'▁'``;
* the fragment is split into UTF-8 characters and adjacent symbols are merged greedily: always
  the pair whose concatenation is a vocabulary token with the highest score, ties going to the
  leftmost pair;
* a final symbol that is not a token falls back to its bytes (``<0xXX>`` tokens);
* BOS is prepended when ``add_special`` and the vocabulary's ``add_bos`` say so.

Pieces and detokenized text are ``bytes`` (byte-fallback tokens may split a UTF-8 character).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum

from reference_impl.errors import EngineError
from reference_impl.spec_links import implements

SPACE_ESCAPE = "\u2581"  # '▁'


class TokenType(IntEnum):
    """GGUF ``tokenizer.ggml.token_type`` values (llama.h ``llama_token_type``)."""

    UNDEFINED = 0
    NORMAL = 1
    UNKNOWN = 2
    CONTROL = 3
    USER_DEFINED = 4
    UNUSED = 5
    BYTE = 6


class TokenizerError(EngineError):
    """Invalid tokenizer input (a token id outside the vocabulary) or an unusable vocabulary."""


@dataclass(frozen=True)
class SpmVocab:
    """The vocabulary part of a GGUF file (``tokenizer.ggml.*``)."""

    tokens: tuple[str, ...]
    scores: tuple[float, ...]
    types: tuple[int, ...]
    bos_id: int = 1
    eos_id: int = 2
    unk_id: int = 0
    add_bos: bool = True
    add_eos: bool = False
    add_space_prefix: bool = True
    token_to_id: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not (len(self.tokens) == len(self.scores) == len(self.types)):
            raise TokenizerError(
                "TOK_VOCAB_INCONSISTENT",
                f"{len(self.tokens)} tokens, {len(self.scores)} scores, {len(self.types)} types",
                field="tokenizer.ggml.tokens",
            )
        # Later duplicates win, as in llama.cpp's token_to_id map.
        object.__setattr__(self, "token_to_id", {t: i for i, t in enumerate(self.tokens)})

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)


@implements("TOK-020")
class SpmTokenizer:
    """llama.cpp's SPM tokenizer over one :class:`SpmVocab`."""

    @implements("TOK-005")
    def __init__(self, vocab: SpmVocab) -> None:
        self.vocab = vocab
        special = (TokenType.CONTROL, TokenType.USER_DEFINED, TokenType.UNKNOWN)
        ids = [i for i, t in enumerate(vocab.types) if t in special]
        # Longest text first (llama.cpp sorts by length; our fixture has no equal-length ties).
        self._special_ids = sorted(ids, key=lambda i: -len(vocab.tokens[i].encode()))
        self._byte_ids: list[int] = []
        for b in range(256):
            tid = vocab.token_to_id.get(f"<0x{b:02X}>")
            if tid is None:
                tid = vocab.token_to_id.get(chr(b)) if b < 128 else None
            self._byte_ids.append(-1 if tid is None else tid)

    # -- tokenize -----------------------------------------------------------------------------

    @implements("TOK-001", "TOK-002", "TOK-003")
    def tokenize(
        self, text: str, add_special: bool = True, parse_special: bool = False
    ) -> list[int]:
        vocab = self.vocab
        out: list[int] = []
        if add_special and vocab.add_bos:
            out.append(vocab.bos_id)
        is_prev_special = True  # the first fragment gets a space prefix too
        for frag in self._partition(text, parse_special):
            if isinstance(frag, int):
                out.append(frag)
                is_prev_special = True
                continue
            if vocab.add_space_prefix and is_prev_special:
                frag = " " + frag
            self._tokenize_fragment(frag.replace(" ", SPACE_ESCAPE), out)
            is_prev_special = False
        if add_special and vocab.add_eos:
            out.append(vocab.eos_id)
        return out

    @implements("TOK-006")
    def _partition(self, text: str, parse_special: bool) -> list[str | int]:
        """Split ``text`` on special-token texts; ints are token ids, strings raw text."""
        frags: list[str | int] = [text] if text else []
        skip = (TokenType.CONTROL, TokenType.UNKNOWN)
        for tid in self._special_ids:
            if not parse_special and self.vocab.types[tid] in skip:
                continue
            needle = self.vocab.tokens[tid]
            nxt: list[str | int] = []
            for frag in frags:
                if isinstance(frag, int) or needle not in frag:
                    nxt.append(frag)
                    continue
                parts = frag.split(needle)
                for k, part in enumerate(parts):
                    if k > 0:
                        nxt.append(tid)
                    if part:
                        nxt.append(part)
            frags = nxt
        return frags

    @implements("TOK-004", "TOK-005")
    def _tokenize_fragment(self, text: str, out: list[int]) -> None:
        # Symbols are the UTF-8 characters of the text, linked as a doubly linked list.
        sym_text = list(text)
        n = len(sym_text)
        prev = [i - 1 for i in range(n)]
        nxt = [i + 1 if i + 1 < n else -1 for i in range(n)]
        alive = [True] * n
        # Max-heap on (score, -left): highest score first, then the leftmost pair.
        heap: list[tuple[float, int, int, str]] = []

        def try_add(left: int, right: int) -> None:
            if left == -1 or right == -1:
                return
            merged = sym_text[left] + sym_text[right]
            tid = self.vocab.token_to_id.get(merged)
            if tid is None or tid >= self.vocab.n_tokens:
                return
            heapq.heappush(heap, (-self.vocab.scores[tid], left, right, merged))

        for i in range(1, n):
            try_add(i - 1, i)
        while heap:
            _, left, right, merged = heapq.heappop(heap)
            # Skip stale pairs: one side already merged away or grown since it was queued.
            if not (alive[left] and alive[right]) or sym_text[left] + sym_text[right] != merged:
                continue
            sym_text[left] = merged
            alive[right] = False
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prev[nxt[right]] = left
            try_add(prev[left], left)
            try_add(left, nxt[left])

        i = 0 if n else -1
        while i != -1:
            piece = sym_text[i]
            tid = self.vocab.token_to_id.get(piece)
            if tid is not None:
                out.append(tid)
            else:
                for b in piece.encode("utf-8"):
                    byte_id = self._byte_ids[b]
                    if byte_id < 0:
                        raise TokenizerError(
                            "TOK_NO_BYTE_TOKEN",
                            f"the vocabulary has no byte-fallback token for byte 0x{b:02X}",
                            field="text",
                        )
                    out.append(byte_id)
            i = nxt[i]

    # -- detokenize ---------------------------------------------------------------------------

    @implements("TOK-010")
    def _check(self, token: int, index: int | None = None) -> None:
        if not 0 <= int(token) < self.vocab.n_tokens:
            raise TokenizerError(
                "TOK_TOKEN_RANGE",
                f"token id {int(token)} is outside the vocabulary [0, {self.vocab.n_tokens})",
                field="token",
                index=index,
            )

    @implements("TOK-007")
    def token_to_piece(self, token: int, special: bool = False, lstrip: int = 0) -> bytes:
        """The bytes of one token (llama_token_to_piece); control/unknown tokens are empty
        unless ``special``; up to ``lstrip`` leading spaces are removed."""
        self._check(token)
        ttype = self.vocab.types[token]
        text = self.vocab.tokens[token]
        if ttype in (TokenType.CONTROL, TokenType.UNKNOWN):
            piece = text.encode() if special else b""
        elif ttype == TokenType.USER_DEFINED:
            piece = text.encode()
        elif ttype == TokenType.BYTE:
            piece = bytes([int(text[3:5], 16)])
        elif ttype == TokenType.NORMAL:
            piece = text.replace(SPACE_ESCAPE, " ").encode()
        else:  # undefined / unused types render as nothing, like llama.cpp
            piece = b""
        k = 0
        while k < lstrip and piece[:1] == b" ":
            piece = piece[1:]
            k += 1
        return piece

    @implements("TOK-008", "TOK-009")
    def detokenize(
        self, tokens: Sequence[int], remove_special: bool = False, unparse_special: bool = False
    ) -> bytes:
        """llama_detokenize for an SPM vocabulary: the pieces joined, the leading space of the
        first piece removed (unless a removed BOS preceded it)."""
        toks = [int(t) for t in tokens]
        for i, t in enumerate(toks):
            self._check(t, i)
        vocab = self.vocab
        remove_space = vocab.add_space_prefix
        if remove_special and vocab.add_bos and toks and toks[0] == vocab.bos_id:
            remove_space = False  # llama.cpp keeps the space after a removed BOS
            toks = toks[1:]
        if remove_special and vocab.add_eos and toks and toks[-1] == vocab.eos_id:
            toks = toks[:-1]
        parts = []
        for t in toks:
            parts.append(self.token_to_piece(t, special=unparse_special, lstrip=int(remove_space)))
            remove_space = False
        return b"".join(parts)
