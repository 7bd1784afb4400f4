"""The target's tokenizer against the peer's (llama.cpp's llama_tokenize / token_to_piece /
detokenize by default) on the same GGUF vocabulary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given

from conformance.gate import cached
from conformance.tokenizer.test_spm import CORPUS, texts, words

pytestmark = pytest.mark.requires("tokenizer.tokenize")


@pytest.fixture
def peer_model(peer: Any, vocab_path: Path) -> Any:
    return cached(peer, "load_model", str(vocab_path))


def _same_tokens(target: Any, model: Any, peer: Any, peer_model: Any, text: str) -> None:
    for add_special in (False, True):
        for parse_special in (False, True):
            ours = target.tokenize(model, text, add_special, parse_special)
            theirs = peer.tokenize(peer_model, text, add_special, parse_special)
            assert ours == theirs, (text, add_special, parse_special)
            for remove in (False, True):
                for unparse in (False, True):
                    assert target.detokenize(model, ours, remove, unparse) == peer.detokenize(
                        peer_model, theirs, remove, unparse
                    ), (text, remove, unparse)


@pytest.mark.invariant("TOK-020")
@pytest.mark.parametrize("text", CORPUS)
def test_corpus_matches_peer(
    target: Any, tok_model: Any, peer: Any, peer_model: Any, text: str
) -> None:
    _same_tokens(target, tok_model, peer, peer_model, text)


@pytest.mark.invariant("TOK-020")
@given(text=texts | words)
def test_generated_texts_match_peer(
    target: Any, tok_model: Any, peer: Any, peer_model: Any, text: str
) -> None:
    _same_tokens(target, tok_model, peer, peer_model, text)


@pytest.mark.invariant("TOK-020")
def test_every_piece_matches_peer(target: Any, tok_model: Any, peer: Any, peer_model: Any) -> None:
    n_vocab = target.model_info(tok_model)["n_vocab"]
    assert n_vocab == peer.model_info(peer_model)["n_vocab"]
    for token in range(n_vocab):
        for special in (False, True):
            assert target.token_to_piece(tok_model, token, special) == peer.token_to_piece(
                peer_model, token, special
            ), (token, special)
