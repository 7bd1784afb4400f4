"""llama.cpp's WordPiece tokenizer (GGUF ``tokenizer.ggml.model = "bert"``).

The GGUF form of a BERT vocabulary marks word-initial pieces with a leading ``'▁'`` and stores
continuation pieces without BERT's ``##``. Per raw-text fragment:

1. **Normalize and split.** Code point by code point: with ``strip_accents`` each code point is
   replaced by the first code point of its NFD decomposition; whitespace ends the current word;
   U+0000, U+FFFD and control/format/private-use code points are dropped, and so are combining
   marks with ``strip_accents``; with ``lowercase`` the (simple, one-to-one) lower case is used;
   punctuation, ASCII symbols and CJK ideographs become one-character words.
2. **Word pieces.** Each word, prefixed with ``'▁'``, is covered greedily from the left by the
   longest token at each position; if some position has no token, the whole word becomes UNK.
3. **Specials.** With ``add_special`` the text is framed by BOS (BERT's ``[CLS]``) and SEP.

Pieces render ``'▁'`` as a space; detokenize cleans spaces (``clean_spaces`` is on for WPM).
"""

from __future__ import annotations

import re

import unicodedata2

from reference_impl.spec_links import implements
from reference_impl.tokenizer import unicode as uni
from reference_impl.tokenizer.vocab import SPACE_ESCAPE, BaseTokenizer, Vocab

# CJK ideograph blocks BERT isolates (llama.cpp copies HF's ranges, including the 0x2B920 start).
_CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B920, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def _is_cjk(cpt: int) -> bool:
    return any(lo <= cpt <= hi for lo, hi in _CJK_RANGES)


def _nfd_first(cpt: int) -> int:
    return ord(unicodedata2.normalize("NFD", chr(cpt))[0])


@implements("TOK-065")
def _lower(cpt: int) -> int:
    if cpt == 0x130:  # 'İ': the simple mapping is 'i' (str.lower gives 'i' + U+0307)
        return 0x69
    return uni.to_lower(cpt)


@implements("TOK-051")
def split_words(text: str, lowercase: bool, strip_accents: bool) -> list[str]:
    """BERT's basic tokenization of ``text`` as llama.cpp does it (step 1 above)."""
    words = [""]
    for ch in text:
        cpt = _nfd_first(ord(ch)) if strip_accents else ord(ch)
        f = uni.flags(cpt)
        if f & uni.WHITESPACE:
            if words[-1]:
                words.append("")
            continue
        if cpt in (0, 0xFFFD) or f & uni.CONTROL or (strip_accents and f & uni.MARK):
            continue
        s = chr(_lower(cpt) if lowercase else cpt)
        if f & uni.PUNCTUATION or (cpt < 0x7F and f & uni.SYMBOL) or _is_cjk(cpt):
            if words[-1]:
                words.append("")
            words[-1] = s
            words.append("")
        else:
            words[-1] += s
    if not words[-1]:
        words.pop()
    return words


@implements("TOK-051", "TOK-066")
class WpmTokenizer(BaseTokenizer):
    """llama.cpp's WordPiece tokenizer over one :class:`Vocab` with ``model = "bert"``."""

    def __init__(self, vocab: Vocab) -> None:
        super().__init__(vocab)
        self.max_len = max((len(t) for t in vocab.tokens), default=0)
        # The ASCII whitespace that split_words treats as whitespace (all of it, checked here
        # rather than assumed) splits the text into chunks.
        ascii_space = " \t\n\r\v\f"
        spaces = "".join(
            c for c in ascii_space if split_words(f"a{c}a", False, vocab.strip_accents) == ["a"] * 2
        )
        self._space_run = re.compile(f"[{re.escape(spaces)}]+" if spaces else "(?!)")

    @implements("TOK-051")
    def _head(self) -> list[int]:
        return [self.vocab.bos_id]  # always [CLS] ... [SEP], whatever add_bos / add_sep say

    def _tail(self) -> list[int]:
        return [self.vocab.sep_id]

    @implements("TOK-051", "TOK-064")
    def _tokenize_fragment(self, text: str, out: list[int]) -> None:
        # A whitespace character only ends a word, so the chunks between them tokenize on their
        # own; words repeat in real text, so each distinct chunk is worked out once per call.
        vocab = self.vocab
        done: dict[str, list[int]] = {}
        for chunk in self._space_run.split(text):
            ids = done.get(chunk)
            if ids is None:
                ids = done[chunk] = [
                    tid
                    for word in split_words(chunk, vocab.lowercase, vocab.strip_accents)
                    for tid in self._word_pieces(SPACE_ESCAPE + word)
                ]
            out += ids

    @implements("TOK-051")
    def _word_pieces(self, word: str) -> list[int]:
        """Greedy longest-match pieces of ``word``; ``[unk]`` when some position has none."""
        ids = self.vocab.token_to_id
        out = []
        i = 0
        while i < len(word):
            for j in range(min(len(word), i + self.max_len), i, -1):
                tid = ids.get(word[i:j])
                if tid is not None:
                    out.append(tid)
                    i = j
                    break
            else:
                return [self.vocab.unk_id]
        return out
