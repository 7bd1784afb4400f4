"""llama.cpp's Unigram tokenizer (GGUF ``tokenizer.ggml.model = "t5"``, SentencePiece unigram).

Per raw-text fragment, over UTF-8 bytes:

1. **Normalize**, one prefix at a time (a USER_DEFINED token text would pass through as is,
   but the special-token partition leaves none in the text): the longest match in the
   precompiled character map (SentencePiece's ``precompiled_charsmap``: a XOR-compressed
   double-array trie plus NUL-terminated replacement strings) is replaced; otherwise one
   UTF-8 character passes unchanged. In the result each space becomes ``'▁'`` (or is dropped
   with ``remove_extra_whitespaces``), and a run of non-spaces gets a ``'▁'`` in front when it
   is the first one and ``add_space_prefix`` is on, or always with
   ``remove_extra_whitespaces``.
2. **Viterbi** over byte offsets: every NORMAL, USER_DEFINED or UNUSED token starting at a
   character boundary proposes ``best[start] + score`` (0 for USER_DEFINED) for its end, which
   it takes only if strictly better; a character no token covers exactly also proposes UNK with
   the lowest NORMAL score minus 10. The best path is read back from the end, runs of UNK
   collapsed into one.
3. **Specials.** ``add_special`` adds BOS when ``add_bos`` and EOS when ``add_eos`` (on by
   default for this family).
"""

from __future__ import annotations

import math
import re
import struct

import numpy as np

from reference_impl.spec_links import implements
from reference_impl.tokenizer import trie
from reference_impl.tokenizer.vocab import (
    SPACE_ESCAPE,
    BaseTokenizer,
    TokenizerError,
    TokenType,
    Vocab,
)

_ESCAPED_SPACE = SPACE_ESCAPE.encode()
_REPLACEMENT = "\ufffd".encode()  # what llama.cpp writes for a byte it reads no character at
WINDOW = 3  # bytes of text CharsMap.hot_windows looks at
_WORD_START = re.compile(b"(?<!%s)(?=%s)" % (_ESCAPED_SPACE, _ESCAPED_SPACE))  # before '▁'s
_INNER_SPACE = re.compile(b"(?<!%s)(?<=.)%s" % (_ESCAPED_SPACE, _ESCAPED_SPACE), re.DOTALL)


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

    @implements("TOK-079")
    def longest(self, data: bytes, start: int) -> tuple[int, bytes] | None:
        """(bytes consumed, replacement) of the longest map entry that prefixes ``data[start:]``
        (llama.cpp's walk: it stops at a NUL byte, and an index outside the trie fails)."""
        nodes = self.nodes
        if not nodes:
            return None
        best: tuple[int, int] | None = None
        node = _base(nodes[0])
        for pos in range(start, len(data)):
            c = data[pos]
            if c == 0:
                break
            node ^= c
            unit = nodes[node] if node < len(nodes) else _out_of_trie()
            if unit & 0x800000FF != c:  # LCHECK (bit 31 and the label byte)
                break
            node ^= _base(unit)
            if unit >> 8 & 1:  # LEAF: a key ends here, its VALUE in the next unit
                value = nodes[node] if node < len(nodes) else _out_of_trie()
                best = (pos - start + 1, value & 0x7FFFFFFF)
        if best is None:
            return None
        length, offset = best
        end = self.strings.find(b"\0", offset)
        if offset >= len(self.strings) or end < 0:
            raise TokenizerError("TOK_CHARSMAP", "bad replacement in the charsmap", field="text")
        return length, self.strings[offset:end]

    def hot_windows(self) -> np.ndarray:
        """One flag per ``WINDOW`` bytes ``b0 b1 b2`` (index ``b0 << 16 | b1 << 8 | b2``): false
        where :meth:`longest` at a text that starts with them surely returns None (its walk
        stops inside them without a leaf), true where it may find an entry or fail. A NUL
        (or the end of the text, padded with NULs) stops the walk."""
        hot = np.zeros(1 << (8 * WINDOW), dtype=bool)
        if not self.nodes:
            return hot
        nodes = np.array(self.nodes, dtype=np.int64)
        label = np.arange(1, 256, dtype=np.int64)
        prefixes, at = np.zeros(1, dtype=np.int64), _bases(nodes[:1])
        for depth in range(1, WINDOW + 1):
            step = at[:, None] ^ label
            inside = step < len(nodes)
            unit = nodes[np.where(inside, step, 0)]
            found = inside & ((unit & 0x800000FF) == label)
            leaf = found & (unit >> 8 & 1 == 1)
            longer = (prefixes[:, None] << 8) | label
            # a leaf or a step out of the trie decides whatever follows it
            span = 1 << (8 * (WINDOW - depth))
            for prefix in longer[leaf | ~inside].tolist():
                hot[prefix * span : (prefix + 1) * span] = True
            walking = found & ~leaf
            prefixes = longer[walking]
            at = (np.where(inside, step, 0) ^ _bases(unit))[walking]
        hot[prefixes] = True  # walks still going after WINDOW bytes
        return hot


@implements("TOK-079")
def _base(unit: int) -> int:
    """BASE of a trie unit: bits 10..31, shifted by 8 when bit 9 is set."""
    return (unit >> 10) << ((unit & (1 << 9)) >> 6)


@implements("TOK-079")
def _bases(units: np.ndarray) -> np.ndarray:
    return (units >> 10) << ((units & (1 << 9)) >> 6)


def _out_of_trie() -> int:
    raise TokenizerError("TOK_CHARSMAP", "index out of the charsmap trie", field="text")


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
        normal = [
            np.float32(s)
            for s, t in zip(vocab.scores, vocab.types, strict=True)
            if t == TokenType.NORMAL
        ]
        lowest = min(normal) if normal else np.float32(np.finfo(np.float32).max)
        # computed in float32, as llama.cpp stores it
        self.unk_score = float(np.float32(lowest) - np.float32(10.0))
        self._init_normalizer()
        self._init_lattice()

    def _init_normalizer(self) -> None:
        # Where a step can be more than one unchanged character: a hot window. Only there
        # does the normalizer walk in Python.
        self._hot = self.charsmap.hot_windows()

    @implements("TOK-052")
    def _init_lattice(self) -> None:
        """The pieces that start at a position are the longest one (a trie regex finds it)
        and those of its prefixes that are pieces: listed once per piece."""
        self._longest = re.compile(trie.longest_match_bytes(self.pieces))
        self._prefixes = {
            piece: [
                (k, self.pieces[piece[:k]], self._score(self.pieces[piece[:k]]))
                for k in range(1, len(piece) + 1)
                if piece[:k] in self.pieces
            ]
            for piece in self.pieces
        }
        # Viterbi word by word: see _words.
        scores = [self.unk_score] + [s for p in self._prefixes.values() for _, _, s in p]
        self._per_word = all(math.isfinite(s) for s in scores) and not any(
            _INNER_SPACE.search(piece) for piece in self.pieces
        )
        nonzero = [s for s in scores if s != 0.0]
        self._max_score = max((abs(s) for s in nonzero), default=0.0)
        self._quantum = min((_lowest_bit(s) for s in nonzero), default=1.0)

    def _score(self, tid: int) -> float:
        return 0.0 if self.vocab.types[tid] == TokenType.USER_DEFINED else self.vocab.scores[tid]

    @implements("TOK-052", "TOK-069")
    def _tokenize_fragment(self, text: str, out: list[int]) -> None:
        data = self.normalize(text.encode())
        done: dict[bytes, list[int]] = {}  # words repeat: each distinct one is solved once
        unk = self.vocab.unk_id
        ids: list[int] = []
        for word in self._words(data):
            got = done.get(word)
            if got is None:
                got = done[word] = self._viterbi(word)
            # a run of UNK collapses across words too
            ids += got[1:] if got and ids and ids[-1] == unk and got[0] == unk else got
        out += ids

    @implements("TOK-083")
    def _words(self, data: bytes) -> list[bytes]:
        """``data`` cut before each run of ``'▁'`` when the Viterbi of the parts gives the
        Viterbi of the whole: no piece has a ``'▁'`` right after another character (so none
        crosses a cut, and every path goes through each cut), the text is UTF-8 (so the
        lattice has a node at each cut), and every sum of scores is exact (each score is a
        multiple of the power of two ``quantum`` and a path of at most ``len(data)`` pieces
        stays under ``2**53 * quantum``), so both ways compare the same numbers, ties too."""
        exact = len(data) * self._max_score <= 2.0**53 * self._quantum
        if not (self._per_word and exact and _is_utf8(data)):
            return [data]
        return _WORD_START.split(data)

    def _prefix(self, data: bytes, pos: int) -> tuple[bytes, int] | None:
        """The step at ``pos`` when it is a charsmap entry: (what it becomes, bytes used); None
        when one character passes unchanged. llama.cpp first lets a user-defined token's text
        pass as is, but the special-token partition has already split every USER_DEFINED text
        out of the fragments (whatever ``parse_special`` says), so none is ever found here."""
        hit = self.charsmap.longest(data, pos)
        if hit is not None:
            return hit[1], hit[0]
        return None

    @implements("TOK-052")
    def normalize(self, data: bytes) -> bytes:
        # Steps go one character at a time except where _prefix matches, which needs a hot
        # window: numpy finds those, Python walks only there.
        padded = np.frombuffer(data + bytes(WINDOW - 1), dtype=np.uint8).astype(np.int64)
        window = padded[: len(data)] << 16 | padded[1 : len(data) + 1] << 8 | padded[2:]
        spots = np.flatnonzero(self._hot[window])
        parts: list[bytes] = []
        copied = 0  # data[:copied] is in parts
        step = 0  # no step starts before this: the end of the last entry (and its U+FFFDs)
        for pos in spots.tolist():
            # steps from a character boundary over UTF-8 text start at no continuation byte
            if pos < step or _is_continuation(data[pos]):
                continue
            hit = self._prefix(data, pos)
            if hit is None:
                continue  # one character passes (its other bytes are continuation bytes)
            parts += (data[copied:pos], hit[0])
            step = self._after_entry(data, pos + hit[1], parts)
            copied = step
        parts.append(data[copied:])
        return self._escape_spaces(b"".join(parts))

    @implements("TOK-083")
    def _after_entry(self, data: bytes, step: int, parts: list[bytes]) -> int:
        """The steps at the continuation bytes an entry that ended inside a character left
        (appended to ``parts``); returns the next character boundary. llama.cpp reads no
        character at a continuation byte: unless an entry starts there, it becomes U+FFFD and
        the step is that one byte."""
        while step < len(data) and _is_continuation(data[step]):
            hit = self._prefix(data, step)
            if hit is None:
                parts.append(_REPLACEMENT)
                step += 1
            else:
                parts.append(hit[0])
                step += hit[1]
        return step

    @implements("TOK-052")
    def _escape_spaces(self, text: bytes) -> bytes:
        """Each space becomes ``'▁'`` and the first word gets one in front (add_space_prefix);
        with remove_extra_whitespaces spaces go and every word gets one in front."""
        if self.vocab.remove_extra_whitespaces:
            return b"".join(_ESCAPED_SPACE + word for word in text.split(b" ") if word)
        out = text.replace(b" ", _ESCAPED_SPACE)
        if self.vocab.add_space_prefix and text.strip(b" "):
            at = (len(text) - len(text.lstrip(b" "))) * len(_ESCAPED_SPACE)
            out = out[:at] + _ESCAPED_SPACE + out[at:]
        return out

    @implements("TOK-052")
    def _viterbi(self, data: bytes) -> list[int]:
        n = len(data)
        if n == 0:
            return []
        unk = self.vocab.unk_id
        # best[end] = (score, start, token)
        best: list[tuple[float, int, int]] = [(-np.inf, 0, unk)] * (n + 1)
        best[0] = (0.0, 0, unk)
        start = 0
        while start < n:
            char_len = min(_utf8_len(data[start]), n - start)
            base = best[start][0]
            exact = False
            hit = self._longest.match(data, start)
            for length, tid, score in self._prefixes[hit[0]] if hit else ():  # shortest first
                exact |= length == char_len
                if base + score > best[start + length][0]:
                    best[start + length] = (base + score, start, tid)
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


def _is_continuation(byte: int) -> bool:
    return 0x80 <= byte <= 0xBF


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


def _lowest_bit(x: float) -> float:
    """The value of the lowest set bit of a finite non-zero float."""
    num, den = abs(x).as_integer_ratio()  # den is a power of two
    return (num & -num) / den
