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

from reference_impl.spec_links import implements
from reference_impl.tokenizer.vocab import (
    SPACE_ESCAPE,
    BaseTokenizer,
    TokenizerError,
    Vocab,
)


@implements("TOK-020", "TOK-067")
class SpmTokenizer(BaseTokenizer):
    """llama.cpp's SPM tokenizer over one :class:`Vocab`."""

    @implements("TOK-005")
    def __init__(self, vocab: Vocab) -> None:
        super().__init__(vocab)
        self._byte_ids: list[int] = []
        for b in range(256):
            tid = vocab.token_to_id.get(f"<0x{b:02X}>")
            if tid is None:
                tid = vocab.token_to_id.get(chr(b)) if b < 128 else None
            self._byte_ids.append(-1 if tid is None else tid)

    @implements("TOK-001", "TOK-002", "TOK-003", "TOK-055")
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
