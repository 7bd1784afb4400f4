"""llama.cpp's tokenizers over GGUF vocabularies (spec/tokenizer.md).

* :mod:`.vocab`: the vocabulary (:class:`Vocab`, loaded by :func:`load_vocab`) and what every
  family shares (the tokenize frame with the special-token partition, pieces, detokenize);
* :mod:`.spm`: SentencePiece-style (``tokenizer.ggml.model = "llama"``);
* :mod:`.bpe` with :mod:`.pretokenize` and :mod:`.unicode`: byte-level BPE (``"gpt2"``);
* :mod:`.wpm`: WordPiece (``"bert"``);
* :mod:`.ugm`: Unigram (``"t5"``);
* :mod:`.rwkv`: RWKV "world" (``"rwkv"``);
* :mod:`.plamo2`: PLaMo-2 (``"plamo2"``);
* :mod:`.trie`: longest-match regular expressions over a vocabulary (RWKV, UGM, PLaMo-2).

Pieces and detokenized text are ``bytes`` (a byte token may be half of a UTF-8 character).
"""

from __future__ import annotations

import os

from reference_impl.tokenizer.bpe import BpeTokenizer
from reference_impl.tokenizer.plamo2 import Plamo2Tokenizer
from reference_impl.tokenizer.rwkv import RwkvTokenizer
from reference_impl.tokenizer.spm import SpmTokenizer
from reference_impl.tokenizer.ugm import UgmTokenizer
from reference_impl.tokenizer.vocab import (
    SPACE_ESCAPE,
    BaseTokenizer,
    SpmVocab,
    TokenizerError,
    TokenType,
    Vocab,
    load_vocab,
)
from reference_impl.tokenizer.wpm import WpmTokenizer

__all__ = [
    "SPACE_ESCAPE",
    "BaseTokenizer",
    "BpeTokenizer",
    "Plamo2Tokenizer",
    "RwkvTokenizer",
    "SpmTokenizer",
    "SpmVocab",
    "TokenType",
    "TokenizerError",
    "UgmTokenizer",
    "Vocab",
    "WpmTokenizer",
    "load_vocab",
    "load_vocab_file",
    "make_tokenizer",
]


def make_tokenizer(vocab: Vocab) -> BaseTokenizer:
    """The tokenizer of the vocabulary's family."""
    if vocab.model == "gpt2":
        return BpeTokenizer(vocab)
    if vocab.model == "bert":
        return WpmTokenizer(vocab)
    if vocab.model == "t5":
        return UgmTokenizer(vocab)
    if vocab.model == "rwkv":
        return RwkvTokenizer(vocab)
    if vocab.model == "plamo2":
        return Plamo2Tokenizer(vocab)
    return SpmTokenizer(vocab)


def load_vocab_file(path: str | os.PathLike[str]) -> BaseTokenizer:
    """The tokenizer of a GGUF file's vocabulary alone (tensors are not read), like llama.cpp's
    ``vocab_only`` load; a file without a vocabulary fails with ``TOK_NO_VOCAB``."""
    from reference_impl.tokenizer.gguf_meta import GgufMeta

    vocab = load_vocab(GgufMeta(path))
    if vocab is None:
        raise TokenizerError("TOK_NO_VOCAB", "this file has no vocabulary", field="tokenizer")
    return make_tokenizer(vocab)
