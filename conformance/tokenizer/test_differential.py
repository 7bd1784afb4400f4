"""The target's tokenizer against the peer's (llama.cpp's llama_tokenize / token_to_piece /
detokenize by default) on the same GGUF vocabulary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.fixtures.vocabularies import BPE_FAMILY_PRE_TYPES, BPE_PRE_ALIASES
from conformance.gate import cached
from conformance.strategies.tokenizer import random_texts, unicode_texts
from conformance.tokenizer.test_spm import CORPUS, texts, words

pytestmark = pytest.mark.requires("tokenizer.tokenize")


@pytest.fixture
def peer_model(peer: Any, vocab_path: Path) -> Any:
    return cached(peer, "load_model", str(vocab_path))


def _same_pieces(
    target: Any, ours: Any, peer: Any, theirs: Any, n_ours: int, n_theirs: int
) -> None:
    """Same vocabulary size, and every token's piece equal with and without special pieces."""
    assert n_ours == n_theirs, f"n_vocab: {n_ours} vs the peer's {n_theirs}"
    for token in range(n_ours):
        for special in (False, True):
            assert target.token_to_piece(ours, token, special) == peer.token_to_piece(
                theirs, token, special
            ), (token, special)


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
    n_ours = target.model_info(tok_model)["n_vocab"]
    _same_pieces(
        target, tok_model, peer, peer_model, n_ours, peer.model_info(peer_model)["n_vocab"]
    )


# -- BPE fixtures (vocabulary-only) ------------------------------------------------------------


@pytest.fixture
def peer_bpe_vocab(peer: Any, bpe_path: Path) -> Any:
    return cached(peer, "load_vocab", str(bpe_path))


def _same_vocab_only(target: Any, vocab: Any, peer: Any, peer_vocab: Any, text: str) -> None:
    for add_special in (False, True):
        for parse_special in (False, True):
            ours = target.tokenize(vocab, text, add_special, parse_special)
            theirs = peer.tokenize(peer_vocab, text, add_special, parse_special)
            assert ours == theirs, (text, add_special, parse_special)
    for remove in (False, True):
        for unparse in (False, True):
            assert target.detokenize(vocab, ours, remove, unparse) == peer.detokenize(
                peer_vocab, ours, remove, unparse
            ), (text, remove, unparse)


@pytest.mark.invariant("TOK-063")
@pytest.mark.requires("tokenizer.vocab_only")
def test_bpe_corpus_matches_peer(
    target: Any, bpe_vocab: Any, peer: Any, peer_bpe_vocab: Any
) -> None:
    from conformance.tokenizer.test_bpe import BPE_CORPUS, WORDS

    for text in [*BPE_CORPUS, *(w[1] for w in WORDS)]:
        _same_vocab_only(target, bpe_vocab, peer, peer_bpe_vocab, text)


@pytest.mark.invariant("TOK-063")
@pytest.mark.requires("tokenizer.vocab_only")
@given(text=unicode_texts)
def test_bpe_generated_texts_match_peer(
    target: Any, bpe_vocab: Any, peer: Any, peer_bpe_vocab: Any, text: str
) -> None:
    _same_vocab_only(target, bpe_vocab, peer, peer_bpe_vocab, text)


@pytest.mark.invariant("TOK-063")
@pytest.mark.requires("tokenizer.vocab_only")
def test_bpe_every_piece_matches_peer(
    target: Any, bpe_vocab: Any, peer: Any, peer_bpe_vocab: Any
) -> None:
    _same_pieces(
        target,
        bpe_vocab,
        peer,
        peer_bpe_vocab,
        target.vocab_size(bpe_vocab),
        peer.vocab_size(peer_bpe_vocab),
    )


# A few texts that tell the expression families apart (digit groups, marks, scripts, runs).
ALIAS_TEXTS = [
    "1234567 ab12 x1 12345678 ½²③",
    "x\u0301y \u0915\u094d\u0937 a'S b'LL 'd 'Re",
    "!!\n\n  x\r\n\t y" + " " * 9 + "z",
    "日本語テキスト한국어ㄱㄴ…“” ไทย",
    "HelloWorld ABCdef $+<=> <sentinel:12> IMGIMGABCZ",
]


@pytest.mark.invariant("TOK-074")
@pytest.mark.requires("tokenizer.vocab_only")
@pytest.mark.parametrize("pre", sorted(BPE_PRE_ALIASES))
def test_bpe_alias_matches_peer(target: Any, peer: Any, pre: str) -> None:
    """Every other pre-type name llama.cpp accepts and the target runs loads on both sides and
    tokenizes a corpus the same way (a handful of texts: the expressions are those of a pre
    type with a fixture, which the batches prove)."""
    from conformance.fixtures.vocabularies import bpe_vocab_path
    from conformance.tokenizer.test_bpe import BPE_CORPUS

    path = str(bpe_vocab_path(pre))
    ours, theirs = cached(target, "load_vocab", path), cached(peer, "load_vocab", path)
    for text in [*BPE_CORPUS, *ALIAS_TEXTS]:
        _same_vocab_only(target, ours, peer, theirs, text)


# -- WordPiece fixture (vocabulary-only) -------------------------------------------------------


@pytest.fixture
def wpm_pair(target: Any, peer: Any) -> tuple[Any, Any]:
    from conformance.fixtures.vocabularies import wpm_vocab_path

    path = str(wpm_vocab_path())
    return cached(target, "load_vocab", path), cached(peer, "load_vocab", path)


@pytest.mark.invariant("TOK-066")
@pytest.mark.requires("tokenizer.vocab_only")
def test_wpm_corpus_matches_peer(target: Any, peer: Any, wpm_pair: tuple[Any, Any]) -> None:
    from conformance.tokenizer.test_wpm import WPM_CORPUS

    for text in WPM_CORPUS:
        _same_vocab_only(target, wpm_pair[0], peer, wpm_pair[1], text)


@pytest.mark.invariant("TOK-066")
@pytest.mark.requires("tokenizer.vocab_only")
@given(text=unicode_texts)
def test_wpm_generated_texts_match_peer(
    target: Any, peer: Any, wpm_pair: tuple[Any, Any], text: str
) -> None:
    _same_vocab_only(target, wpm_pair[0], peer, wpm_pair[1], text)


@pytest.mark.invariant("TOK-066")
@pytest.mark.requires("tokenizer.vocab_only")
def test_wpm_every_piece_matches_peer(target: Any, peer: Any, wpm_pair: tuple[Any, Any]) -> None:
    ours, theirs = wpm_pair
    _same_pieces(target, ours, peer, theirs, target.vocab_size(ours), peer.vocab_size(theirs))


# -- Unigram fixtures (vocabulary-only) --------------------------------------------------------


@pytest.fixture(params=["ugm", "ugm-raw"])
def ugm_pair(request: Any, target: Any, peer: Any) -> tuple[Any, Any]:
    from conformance.fixtures.vocabularies import ugm_vocab_path

    path = str(ugm_vocab_path(request.param))
    return cached(target, "load_vocab", path), cached(peer, "load_vocab", path)


@pytest.mark.invariant("TOK-070")
@pytest.mark.requires("tokenizer.vocab_only")
def test_ugm_corpus_matches_peer(target: Any, peer: Any, ugm_pair: tuple[Any, Any]) -> None:
    from conformance.tokenizer.test_ugm import UGM_CORPUS

    for text in UGM_CORPUS:
        _same_vocab_only(target, ugm_pair[0], peer, ugm_pair[1], text)


@pytest.mark.invariant("TOK-070")
@pytest.mark.requires("tokenizer.vocab_only")
@given(text=unicode_texts)
def test_ugm_generated_texts_match_peer(
    target: Any, peer: Any, ugm_pair: tuple[Any, Any], text: str
) -> None:
    _same_vocab_only(target, ugm_pair[0], peer, ugm_pair[1], text)


@pytest.mark.invariant("TOK-070")
@pytest.mark.requires("tokenizer.vocab_only")
def test_ugm_every_piece_matches_peer(target: Any, peer: Any, ugm_pair: tuple[Any, Any]) -> None:
    ours, theirs = ugm_pair
    _same_pieces(target, ours, peer, theirs, target.vocab_size(ours), peer.vocab_size(theirs))


# -- RWKV fixture (vocabulary-only) ------------------------------------------------------------


@pytest.fixture
def rwkv_pair(target: Any, peer: Any) -> tuple[Any, Any]:
    from conformance.fixtures.vocabularies import rwkv_vocab_path

    path = str(rwkv_vocab_path())
    return cached(target, "load_vocab", path), cached(peer, "load_vocab", path)


@pytest.mark.invariant("TOK-071")
@pytest.mark.requires("tokenizer.vocab_only")
@given(text=unicode_texts)
def test_rwkv_generated_texts_match_peer(
    target: Any, peer: Any, rwkv_pair: tuple[Any, Any], text: str
) -> None:
    _same_vocab_only(target, rwkv_pair[0], peer, rwkv_pair[1], text)


@pytest.mark.invariant("TOK-071")
@pytest.mark.requires("tokenizer.vocab_only")
def test_rwkv_corpus_and_pieces_match_peer(
    target: Any, peer: Any, rwkv_pair: tuple[Any, Any]
) -> None:
    from conformance.tokenizer.test_rwkv import RWKV_CORPUS

    ours, theirs = rwkv_pair
    for text in RWKV_CORPUS:
        _same_vocab_only(target, ours, peer, theirs, text)
    _same_pieces(target, ours, peer, theirs, target.vocab_size(ours), peer.vocab_size(theirs))


# -- PLaMo-2 fixture (vocabulary-only) ---------------------------------------------------------


@pytest.fixture
def plamo2_pair(target: Any, peer: Any) -> tuple[Any, Any]:
    from conformance.fixtures.vocabularies import plamo2_vocab_path

    path = str(plamo2_vocab_path())
    return cached(target, "load_vocab", path), cached(peer, "load_vocab", path)


@pytest.mark.invariant("TOK-072")
@pytest.mark.requires("tokenizer.vocab_only")
@given(text=unicode_texts)
def test_plamo2_generated_texts_match_peer(
    target: Any, peer: Any, plamo2_pair: tuple[Any, Any], text: str
) -> None:
    _same_vocab_only(target, plamo2_pair[0], peer, plamo2_pair[1], text)


@pytest.mark.invariant("TOK-072")
@pytest.mark.requires("tokenizer.vocab_only")
def test_plamo2_corpus_and_pieces_match_peer(
    target: Any, peer: Any, plamo2_pair: tuple[Any, Any]
) -> None:
    from conformance.tokenizer.test_plamo2 import PLAMO2_CORPUS

    ours, theirs = plamo2_pair
    for text in PLAMO2_CORPUS:
        _same_vocab_only(target, ours, peer, theirs, text)
    _same_pieces(target, ours, peer, theirs, target.vocab_size(ours), peer.vocab_size(theirs))


# -- A real vocabulary: GPT-2's (vocabulary-only) ------------------------------------------------


@pytest.fixture
def gpt2_pair(target: Any, peer: Any) -> tuple[Any, Any]:
    from conformance.fixtures.vocabularies import gpt2_vocab_path

    path = str(gpt2_vocab_path())
    return cached(target, "load_vocab", path), cached(peer, "load_vocab", path)


@pytest.mark.invariant("TOK-063", "TOK-073")
@pytest.mark.requires("tokenizer.vocab_only")
def test_gpt2_corpus_matches_peer(target: Any, peer: Any, gpt2_pair: tuple[Any, Any]) -> None:
    from conformance.tokenizer.test_gpt2_vocab import GPT2_CORPUS

    for text in GPT2_CORPUS:
        _same_vocab_only(target, gpt2_pair[0], peer, gpt2_pair[1], text)


@pytest.mark.invariant("TOK-063", "TOK-073")
@pytest.mark.requires("tokenizer.vocab_only")
@given(text=unicode_texts)
def test_gpt2_generated_texts_match_peer(
    target: Any, peer: Any, gpt2_pair: tuple[Any, Any], text: str
) -> None:
    _same_vocab_only(target, gpt2_pair[0], peer, gpt2_pair[1], text)


@pytest.mark.invariant("TOK-063", "TOK-073")
@pytest.mark.requires("tokenizer.vocab_only")
def test_gpt2_every_piece_matches_peer(target: Any, peer: Any, gpt2_pair: tuple[Any, Any]) -> None:
    ours, theirs = gpt2_pair
    n_vocab = target.vocab_size(ours)
    assert n_vocab == peer.vocab_size(theirs) == 50257
    for token in range(n_vocab):
        for special in (False, True):
            assert target.token_to_piece(ours, token, special) == peer.token_to_piece(
                theirs, token, special
            ), (token, special)


# -- Strip attributes by name (vocabulary-only) ------------------------------------------------


@pytest.fixture(params=["plain", "phi-3", "modern-bert", "jina-v2-de", "nomic-bert-moe"])
def strip_pair(request: Any, target: Any, peer: Any) -> tuple[Any, Any]:
    from conformance.fixtures.vocabularies import strip_vocab_path

    path = str(strip_vocab_path(str(request.param)))
    return cached(target, "load_vocab", path), cached(peer, "load_vocab", path)


@pytest.mark.invariant("TOK-068")
@pytest.mark.requires("tokenizer.vocab_only")
def test_strip_corpus_matches_peer(target: Any, peer: Any, strip_pair: tuple[Any, Any]) -> None:
    from conformance.tokenizer.test_bpe import BPE_CORPUS
    from conformance.tokenizer.test_strip import CASES, SPECIALS

    texts = [*BPE_CORPUS, *(c[1] for c in CASES)]
    texts += [f" \t{s} \n{s}\v\f{s}\r x" for s in SPECIALS]
    for text in texts:
        _same_vocab_only(target, strip_pair[0], peer, strip_pair[1], text)


@pytest.mark.invariant("TOK-068")
@pytest.mark.requires("tokenizer.vocab_only")
@given(
    parts=st.lists(
        st.one_of(
            unicode_texts,
            st.sampled_from(
                ["<|endoftext|>", "<|pad|>", "<|sep|>", "<s>", "</s>", "<unk>", "<mask>", "[MASK]"]
            ),
        ),
        max_size=6,
    )
)
def test_strip_generated_texts_match_peer(
    target: Any, peer: Any, strip_pair: tuple[Any, Any], parts: list[str]
) -> None:
    _same_vocab_only(target, strip_pair[0], peer, strip_pair[1], "".join(parts))


# -- Seeded batches: thousands of generated strings per vocabulary ----------------------------
#
# The hypothesis tests above see a few dozen examples per CI run; these compare a fixed batch of
# plain-random texts (2,000 per vocabulary, 50,000 under the ``thorough`` profile) drawn like
# ``unicode_texts``, cheap enough for every CI run.

BATCH_SEED = 20261126
_FLAGS = ((False, False), (False, True), (True, False), (True, True))


def _batch_size() -> int:
    from conformance.hypothesis_profiles import selected_profile

    return 50_000 if selected_profile() == "thorough" else 2_000


def _same_batch(target: Any, ours: Any, peer: Any, theirs: Any) -> None:
    """Tokenize the whole batch on each side (special tokens added and parsed, then neither),
    detokenize every id list on each side with one flag combination per text (cycling through
    all four), and name the first text that differs."""
    texts = random_texts(_batch_size(), BATCH_SEED)
    for add_special, parse_special in (_FLAGS[0], _FLAGS[3]):
        mine = [target.tokenize(ours, t, add_special, parse_special) for t in texts]
        other = [peer.tokenize(theirs, t, add_special, parse_special) for t in texts]
        for i, (text, a, b) in enumerate(zip(texts, mine, other, strict=True)):
            assert a == b, (
                f"text {i} of {len(texts)} tokenizes differently "
                f"(add_special={add_special}, parse_special={parse_special}): {text!r}"
            )
    flags = [_FLAGS[i % 4] for i in range(len(texts))]
    mine_text = [target.detokenize(ours, ids, *f) for ids, f in zip(mine, flags, strict=True)]
    other_text = [peer.detokenize(theirs, ids, *f) for ids, f in zip(mine, flags, strict=True)]
    for i, (text, a, b) in enumerate(zip(texts, mine_text, other_text, strict=True)):
        assert a == b, (
            f"text {i} of {len(texts)} detokenizes differently "
            f"(remove_special, unparse_special={flags[i]}): {text!r}: {a!r} != {b!r}"
        )


@pytest.mark.invariant("TOK-020")
def test_spm_batch_matches_peer(target: Any, tok_model: Any, peer: Any, peer_model: Any) -> None:
    _same_batch(target, tok_model, peer, peer_model)


@pytest.mark.invariant("TOK-067")
@pytest.mark.requires("tokenizer.vocab_only")
@pytest.mark.parametrize("name", ["no-space-prefix", "no-bos-eos", "extra-whitespace"])
def test_spm_options_batch_matches_peer(target: Any, peer: Any, name: str) -> None:
    from conformance.fixtures.vocabularies import spm_options_path

    path = str(spm_options_path(name))
    _same_batch(target, cached(target, "load_vocab", path), peer, cached(peer, "load_vocab", path))


@pytest.mark.invariant("TOK-063")
@pytest.mark.requires("tokenizer.vocab_only")
@pytest.mark.parametrize("bpe_pre", BPE_FAMILY_PRE_TYPES, indirect=True)
def test_bpe_batch_matches_peer(
    target: Any, bpe_vocab: Any, peer: Any, peer_bpe_vocab: Any
) -> None:
    """Once per expression family: pre types that share a family's expressions differ only in
    flags, which the corpus tests cover."""
    _same_batch(target, bpe_vocab, peer, peer_bpe_vocab)


@pytest.mark.invariant("TOK-063", "TOK-073")
@pytest.mark.requires("tokenizer.vocab_only")
def test_gpt2_batch_matches_peer(target: Any, peer: Any, gpt2_pair: tuple[Any, Any]) -> None:
    _same_batch(target, gpt2_pair[0], peer, gpt2_pair[1])


@pytest.mark.invariant("TOK-066")
@pytest.mark.requires("tokenizer.vocab_only")
def test_wpm_batch_matches_peer(target: Any, peer: Any, wpm_pair: tuple[Any, Any]) -> None:
    _same_batch(target, wpm_pair[0], peer, wpm_pair[1])


@pytest.mark.invariant("TOK-070")
@pytest.mark.requires("tokenizer.vocab_only")
def test_ugm_batch_matches_peer(target: Any, peer: Any, ugm_pair: tuple[Any, Any]) -> None:
    _same_batch(target, ugm_pair[0], peer, ugm_pair[1])


@pytest.mark.invariant("TOK-071")
@pytest.mark.requires("tokenizer.vocab_only")
def test_rwkv_batch_matches_peer(target: Any, peer: Any, rwkv_pair: tuple[Any, Any]) -> None:
    _same_batch(target, rwkv_pair[0], peer, rwkv_pair[1])


@pytest.mark.invariant("TOK-072")
@pytest.mark.requires("tokenizer.vocab_only")
def test_plamo2_batch_matches_peer(target: Any, peer: Any, plamo2_pair: tuple[Any, Any]) -> None:
    _same_batch(target, plamo2_pair[0], peer, plamo2_pair[1])
