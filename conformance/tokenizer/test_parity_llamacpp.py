"""The target's tokenizer against llama.cpp's (llama_tokenize / token_to_piece / detokenize)
on the same GGUF vocabulary. Skipped, with the reason, when llama_cpp is not importable."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given

from conformance.tokenizer.test_spm import CORPUS, texts, words

pytestmark = [pytest.mark.parity, pytest.mark.requires("model.load", "tokenizer.tokenize")]


@pytest.fixture(scope="module")
def llama_vocab(vocab_path: Path) -> Iterator[Any]:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    from conformance.targets.llamacpp_runtime import LlamaCppModel

    model = LlamaCppModel(vocab_path, vocab_only=True)
    yield model
    model.close()


def _same_tokens(target: Any, model: Any, llama: Any, text: str) -> None:
    for add_special in (False, True):
        for parse_special in (False, True):
            ours = target.tokenize(model, text, add_special, parse_special)
            theirs = llama.tokenize(text, add_special, parse_special)
            assert ours == theirs, (text, add_special, parse_special)
            for remove in (False, True):
                for unparse in (False, True):
                    assert target.detokenize(model, ours, remove, unparse) == llama.detokenize(
                        theirs, remove, unparse
                    ), (text, remove, unparse)


@pytest.mark.invariant("TOK-020")
@pytest.mark.parametrize("text", CORPUS)
def test_corpus_matches_llamacpp(target: Any, tok_model: Any, llama_vocab: Any, text: str) -> None:
    _same_tokens(target, tok_model, llama_vocab, text)


@pytest.mark.invariant("TOK-020")
@given(text=texts | words)
def test_generated_texts_match_llamacpp(
    target: Any, tok_model: Any, llama_vocab: Any, text: str
) -> None:
    _same_tokens(target, tok_model, llama_vocab, text)


@pytest.mark.invariant("TOK-020")
def test_every_piece_matches_llamacpp(target: Any, tok_model: Any, llama_vocab: Any) -> None:
    n_vocab = target.model_info(tok_model)["n_vocab"]
    assert n_vocab == llama_vocab.n_vocab
    for token in range(n_vocab):
        for special in (False, True):
            assert target.token_to_piece(tok_model, token, special) == llama_vocab.token_to_piece(
                token, special
            ), (token, special)
