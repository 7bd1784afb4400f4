"""llama.cpp's byte-level BPE tokenizer (GGUF ``tokenizer.ggml.model = "gpt2"``).

Per raw-text fragment (after the special-token partition, with no space prefix):

1. the fragment is cut into words by the pre-tokenizer of ``tokenizer.ggml.pre``
   (:mod:`.pretokenize`);
2. each word's UTF-8 bytes are written in GPT-2's byte alphabet (space -> ``'Ġ'`` ...);
3. with ``ignore_merges`` (Llama-3 pre types) a word that is itself a token is emitted whole;
4. otherwise the word starts as one symbol per character and the adjacent pair with the lowest
   merge rank is merged until no adjacent pair has a rank (ties: the leftmost pair);
5. a final symbol that is a token is emitted; any other (a character of the byte alphabet the
   vocabulary lacks) is dropped, never an UNK.

``add_special`` adds BOS when ``add_bos`` and EOS when ``add_eos``; a BPE vocabulary has no
space prefix, so detokenize removes no space, and ``clean_spaces`` (on for most pre types)
tidies the joined text.
"""

from __future__ import annotations

import heapq

from reference_impl.spec_links import implements
from reference_impl.tokenizer import unicode as uni
from reference_impl.tokenizer.pretokenize import PRE_TYPES, split_words
from reference_impl.tokenizer.vocab import BaseTokenizer, Vocab


@implements("TOK-050", "TOK-063", "TOK-073")
class BpeTokenizer(BaseTokenizer):
    """llama.cpp's BPE tokenizer over one :class:`Vocab` with ``model = "gpt2"``."""

    def __init__(self, vocab: Vocab) -> None:
        super().__init__(vocab)
        self.regexes = PRE_TYPES[vocab.pre].regexes

    @implements("TOK-050", "TOK-057")
    def _tokenize_fragment(self, text: str, out: list[int]) -> None:
        done: dict[str, list[int]] = {}  # words repeat: each distinct one is merged once
        for word in split_words(text, self.regexes):
            ids = done.get(word)
            if ids is None:
                ids = done[word] = []
                self._tokenize_word(uni.byte_encode(word), ids)
            out += ids

    @implements("TOK-050", "TOK-081")
    def _tokenize_word(self, word: str, out: list[int]) -> None:
        ids = self.vocab.token_to_id
        if self.vocab.ignore_merges and word in ids:
            out.append(ids[word])
            return
        for sym in self._merge(word):
            # A symbol that is no token is one character (merges only build tokens: checked
            # at load). llama.cpp then looks each of its UTF-8 bytes up as a one-byte token:
            # an ASCII byte is that same missing character, and no token text is a lone byte
            # >= 0x80, so nothing is found and the character is dropped.
            tid = ids.get(sym)
            if tid is not None:
                out.append(tid)

    def _merge(self, word: str) -> list[str]:
        """Lowest-rank-first merging of adjacent symbols (leftmost pair on equal ranks)."""
        ranks = self.vocab.merge_ranks
        sym = list(word)
        n = len(sym)
        nxt = [i + 1 if i + 1 < n else -1 for i in range(n)]
        prev = [i - 1 for i in range(n)]
        heap: list[tuple[int, int, int, str]] = []

        def push(left: int, right: int) -> None:
            if left < 0 or right < 0:
                return
            rank = ranks.get((sym[left], sym[right]))
            if rank is not None:
                heapq.heappush(heap, (rank, left, right, sym[left] + sym[right]))

        for i in range(1, n):
            push(i - 1, i)
        while heap:
            _, left, right, text = heapq.heappop(heap)
            if not sym[left] or not sym[right] or sym[left] + sym[right] != text:
                continue  # stale: a side was merged away or has grown since
            sym[left] = text
            sym[right] = ""
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prev[nxt[right]] = left
            push(prev[left], left)
            push(left, nxt[left])
        return [s for s in sym if s]

    @implements("TOK-059", "TOK-081")
    def _normal_piece(self, text: str) -> bytes:
        return uni.byte_decode(text)
