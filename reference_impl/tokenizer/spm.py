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
import re

from reference_impl.spec_links import implements
from reference_impl.tokenizer.vocab import (
    SPACE_ESCAPE,
    BaseTokenizer,
    TokenizerError,
    Vocab,
)

_WORD_START = re.compile(f"(?<!{SPACE_ESCAPE})(?={SPACE_ESCAPE})")  # before a run of '▁'
_INNER_SPACE = re.compile(f"[^{SPACE_ESCAPE}]{SPACE_ESCAPE}")


@implements("TOK-020", "TOK-067")
class SpmTokenizer(BaseTokenizer):
    """llama.cpp's SPM tokenizer over one :class:`Vocab`."""

    @implements("TOK-005", "TOK-078")
    def __init__(self, vocab: Vocab) -> None:
        super().__init__(vocab)
        # Only <0xXX> tokens stand for bytes. llama.cpp's byte_to_token then tries the lone byte
        # as a token text: for an ASCII byte that is the one-character piece just not found,
        # and no UTF-8 token text is a lone byte >= 0x80, so that lookup never finds a token.
        self._byte_ids: list[int] = []
        for b in range(256):
            tid = vocab.token_to_id.get(f"<0x{b:02X}>")
            self._byte_ids.append(-1 if tid is None else tid)
        # No merge crosses a cut before a run of '▁' unless some token holds a '▁' right after
        # another character; without such a token each word merges alone (merges only compare
        # scores and positions inside the word, so the order of its own merges is the same).
        self._per_word = not any(_INNER_SPACE.search(t) for t in vocab.tokens)

    @implements("TOK-001", "TOK-003")
    def _tokenize_fragment(self, text: str, out: list[int]) -> None:
        # Every raw fragment starts the text or follows a special token (the partition never
        # leaves two strings side by side), so each one gets the space prefix.
        if self.vocab.add_space_prefix:
            text = " " + text
        text = text.replace(" ", SPACE_ESCAPE)
        if not self._per_word:
            self._merge_symbols(text, out)
            return
        done: dict[str, list[int]] = {}  # words repeat: each distinct one is merged once
        for word in _WORD_START.split(text):
            ids = done.get(word)
            if ids is None:
                ids = done[word] = []
                self._merge_symbols(word, ids)
            out += ids

    @implements("TOK-004", "TOK-005", "TOK-078")
    def _merge_symbols(self, text: str, out: list[int]) -> None:
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
