"""llama.cpp's Unigram tokenizer (GGUF ``tokenizer.ggml.model = "t5"``, SentencePiece unigram).

Per raw-text fragment, over UTF-8 bytes:

1. **Normalize**, one prefix at a time: the longest USER_DEFINED token text passes through
   as is; otherwise the longest match in the precompiled character map (SentencePiece's
   ``precompiled_charsmap``: a XOR-compressed double-array trie plus NUL-terminated
   replacement strings) is replaced; otherwise one UTF-8 character passes unchanged. In the
   result each space becomes ``'▁'`` (or is dropped with ``remove_extra_whitespaces``), and a
   run of non-spaces gets a ``'▁'`` in front when it is the first one and
   ``add_space_prefix`` is on, or always with ``remove_extra_whitespaces``.
2. **Viterbi** over byte offsets: every NORMAL, USER_DEFINED or UNUSED token starting at a
   character boundary proposes ``best[start] + score`` (0 for USER_DEFINED) for its end, which
   it takes only if strictly better; a character no token covers exactly also proposes UNK with
   the lowest NORMAL score minus 10. The best path is read back from the end, runs of UNK
   collapsed into one.
3. **Specials.** ``add_special`` adds BOS when ``add_bos`` and EOS when ``add_eos`` (on by
   default for this family).
"""

from __future__ import annotations

import struct

import numpy as np

from reference_impl.spec_links import implements
from reference_impl.tokenizer.vocab import (
    SPACE_ESCAPE,
    BaseTokenizer,
    TokenizerError,
    TokenType,
    Vocab,
)

_ESCAPED_SPACE = SPACE_ESCAPE.encode()


class CharsMap:
    """SentencePiece's precompiled character map: ``u32 trie size`` + the trie as u32 entries
    (BASE in bits 10..30, shifted by 8 when bit 9 is set; LCHECK in bits 0..7 and 31; LEAF in
    bit 8; a leaf's VALUE in bits 0..30 is an offset into the replacement strings)."""

    def __init__(self, blob: bytes) -> None:
        if not blob:
            self.nodes: tuple[int, ...] = ()
            self.strings = b""
            return
        (size,) = struct.unpack_from("<I", blob, 0)
        self.nodes = struct.unpack_from(f"<{size // 4}I", blob, 4)
        self.strings = blob[4 + size :]

    def _node(self, i: int) -> int:
        if i >= len(self.nodes):
            raise TokenizerError("TOK_CHARSMAP", "index out of the charsmap trie", field="text")
        return self.nodes[i]

    def _base(self, i: int) -> int:
        e = self._node(i)
        return (e >> 10) << ((e & (1 << 9)) >> 6)

    def longest(self, data: bytes, start: int) -> tuple[int, bytes] | None:
        """(bytes consumed, replacement) of the longest map entry that prefixes ``data[start:]``."""
        if not self.nodes:
            return None
        best: tuple[int, int] | None = None
        node = self._base(0)
        for pos in range(start, len(data)):
            c = data[pos]
            if c == 0:
                break
            node ^= c
            if self._node(node) & ((1 << 31) | 0xFF) != c:
                break
            leaf = (self._node(node) >> 8) & 1
            node ^= self._base(node)
            if leaf:
                best = (pos - start + 1, self._node(node) & ((1 << 31) - 1))
        if best is None:
            return None
        length, offset = best
        end = self.strings.find(b"\0", offset)
        if offset >= len(self.strings) or end < 0:
            raise TokenizerError("TOK_CHARSMAP", "bad replacement in the charsmap", field="text")
        return length, self.strings[offset:end]


def _utf8_len(lead: int) -> int:
    return (1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4)[lead >> 4]


@implements("TOK-052", "TOK-070")
class UgmTokenizer(BaseTokenizer):
    """llama.cpp's Unigram tokenizer over one :class:`Vocab` with ``model = "t5"``."""

    def __init__(self, vocab: Vocab) -> None:
        super().__init__(vocab)
        self.charsmap = CharsMap(vocab.charsmap)
        kinds = (TokenType.NORMAL, TokenType.USER_DEFINED, TokenType.UNUSED)
        self.pieces: dict[bytes, int] = {}
        for i, (text, t) in enumerate(zip(vocab.tokens, vocab.types, strict=True)):
            if t in kinds:
                self.pieces[text.encode()] = i  # a repeated text keeps its last id
        self.user_defined = sorted(
            (
                vocab.tokens[i].encode()
                for i, t in enumerate(vocab.types)
                if t == TokenType.USER_DEFINED
            ),
            key=len,
            reverse=True,
        )
        self.max_len = max((len(p) for p in self.pieces), default=0)
        normal = [
            np.float32(s)
            for s, t in zip(vocab.scores, vocab.types, strict=True)
            if t == TokenType.NORMAL
        ]
        lowest = min(normal) if normal else np.float32(np.finfo(np.float32).max)
        # computed in float32, as llama.cpp stores it
        self.unk_score = float(np.float32(lowest) - np.float32(10.0))

    @implements("TOK-052", "TOK-069")
    def tokenize(
        self, text: str, add_special: bool = True, parse_special: bool = False
    ) -> list[int]:
        vocab = self.vocab
        out: list[int] = []
        if add_special and vocab.add_bos:
            out.append(vocab.bos_id)
        for frag in self._partition(text, parse_special):
            if isinstance(frag, int):
                out.append(frag)
            else:
                out += self._viterbi(self.normalize(frag.encode()))
        if add_special and vocab.add_eos:
            out.append(vocab.eos_id)
        return out

    def _prefix(self, data: bytes, pos: int) -> tuple[bytes, int]:
        for ud in self.user_defined:
            if data.startswith(ud, pos):
                return ud, len(ud)
        hit = self.charsmap.longest(data, pos)
        if hit is not None:
            return hit[1], hit[0]
        n = min(_utf8_len(data[pos]), len(data) - pos)
        return data[pos : pos + n], n

    @implements("TOK-052")
    def normalize(self, data: bytes) -> bytes:
        vocab = self.vocab
        merge = vocab.remove_extra_whitespaces
        out = bytearray()
        prepended = False
        in_word = False
        pos = 0
        while pos < len(data):
            repl, used = self._prefix(data, pos)
            for c in repl:
                if c != 0x20:
                    if not in_word:
                        in_word = True
                        if (vocab.add_space_prefix and not prepended) or merge:
                            out += _ESCAPED_SPACE
                            prepended = True
                    out.append(c)
                else:
                    in_word = False
                    if not merge:
                        out += _ESCAPED_SPACE
            pos += used
        return bytes(out)

    @implements("TOK-052")
    def _viterbi(self, data: bytes) -> list[int]:
        n = len(data)
        if n == 0:
            return []
        unk = self.vocab.unk_id
        scores, types = self.vocab.scores, self.vocab.types
        # best[end] = (score, start, token)
        best: list[tuple[float, int, int]] = [(-np.inf, 0, unk)] * (n + 1)
        best[0] = (0.0, 0, unk)
        start = 0
        while start < n:
            char_len = min(_utf8_len(data[start]), n - start)
            base = best[start][0]
            exact = False
            for end in range(start + 1, min(n, start + self.max_len) + 1):
                tid = self.pieces.get(data[start:end])
                if tid is None:
                    continue
                exact |= end - start == char_len
                score = base + (0.0 if types[tid] == TokenType.USER_DEFINED else scores[tid])
                if score > best[end][0]:
                    best[end] = (score, start, tid)
            if not exact:
                end = start + char_len
                score = base + self.unk_score
                if score > best[end][0]:
                    best[end] = (score, start, unk)
            start += char_len
        out: list[int] = []
        end = n
        prev_unk = False
        while True:
            _, start, tid = best[end]
            is_unk = tid == unk
            if not (prev_unk and is_unk):
                out.append(tid)
            if start == 0:
                break
            prev_unk = is_unk
            end = start
        return out[::-1]
