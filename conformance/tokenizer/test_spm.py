"""The SPM tokenizer over the fixture vocabulary: goldens, rules and an independent oracle."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.assertions import raises_code
from conformance.fixtures.cache import finish_gguf
from conformance.fixtures.gguf_models import USER_DEFINED_TOKEN, fixture_vocab
from conformance.tokenizer import oracle

pytestmark = pytest.mark.requires("model.load", "tokenizer.tokenize")

BOS, EOS, UNK = 1, 2, 0
SEP = fixture_vocab()[0].index(USER_DEFINED_TOKEN)
SPACE = "\u2581"

# Texts for goldens and parity: plain words, merges, spacing, punctuation, digits, non-ASCII
# (byte fallback), emoji, and special-token texts.
CORPUS = [
    "",
    " ",
    "Hello world!",
    "The quick brown fox jumps over the lazy dog.",
    "tokens and tokenizer, tokenization",
    "  two  leading spaces and   three",
    "trailing space ",
    "line one\nline two\ttab",
    "numbers 12, 345 and 2024.",
    "It is what it is, and that is that.",
    "héllo ünïcode — 日本語",
    "emoji 🙂 and 👍🏽",
    "a<|sep|>b",
    "<s>begin</s>end<unk>",
    "<|sep|><|sep|> spaced <|sep|>",
    "UPPER lower MiXeD",
    "'quotes' and \"double\" (parens) [brackets] {braces}",
]


def _ids(tokens: list[str]) -> list[int]:
    vocab = fixture_vocab()[0]
    return [vocab.index(t) for t in tokens]


@pytest.mark.invariant("TOK-001")
def test_golden_tokenization(target: Any, tok_model: Any, snapshot: Any) -> None:
    got = {
        f"{text!r} add_special={a} parse_special={p}": target.tokenize(tok_model, text, a, p)
        for text in CORPUS
        for a in (False, True)
        for p in (False, True)
    }
    assert got == snapshot


@pytest.mark.invariant("TOK-002")
@pytest.mark.parametrize("text", ["Hello world!", "x", "</s>", " "])
def test_bos_added_only_with_add_special(target: Any, tok_model: Any, text: str) -> None:
    with_bos = target.tokenize(tok_model, text, True, False)
    without = target.tokenize(tok_model, text, False, False)
    assert with_bos[0] == BOS
    assert with_bos[1:] == without
    assert BOS not in without
    assert with_bos[-1] != EOS or text == "</s>"
    assert EOS not in target.tokenize(tok_model, text, True, False)


@pytest.mark.invariant("TOK-002")
def test_empty_text(target: Any, tok_model: Any) -> None:
    assert target.tokenize(tok_model, "", True, False) == [BOS]
    assert target.tokenize(tok_model, "", False, False) == []


def _pieces(target: Any, model: Any, ids: list[int]) -> list[bytes]:
    return [target.token_to_piece(model, i, True) for i in ids]


@pytest.mark.invariant("TOK-003")
def test_space_prefix_at_start_and_after_specials(target: Any, tok_model: Any) -> None:
    ids = target.tokenize(tok_model, "world", False, False)
    assert b"".join(_pieces(target, tok_model, ids)) == b" world"
    ids = target.tokenize(tok_model, f"one{USER_DEFINED_TOKEN}two three", False, False)
    k = ids.index(SEP)
    assert b"".join(_pieces(target, tok_model, ids[:k])) == b" one"
    assert b"".join(_pieces(target, tok_model, ids[k + 1 :])) == b" two three"
    # a space inside the text becomes '▁' and starts the next piece; nothing is dropped
    ids = target.tokenize(tok_model, "a  b", False, False)
    assert b"".join(_pieces(target, tok_model, ids)) == b" a  b"


# Text from the characters the vocabulary knows, plus spaces, newlines and a few that it does
# not know (byte fallback), so merges, ties and fallbacks all occur.
_ALPHABET = "abcdefghijklmnopqrstuvwxyzTHEW .,!'\n" + "éü日🙂"
plain_texts = st.text(alphabet=st.sampled_from(_ALPHABET), max_size=40)
# U+2581 in the input is the escaped space itself: it tokenizes fine but detokenizes to " ".
texts = st.text(alphabet=st.sampled_from(_ALPHABET + "\u2581"), max_size=40)
words = st.lists(
    st.sampled_from(
        ["the", "token", "tokens", "is", "that", "ization", "at", "en", "er", "aaa", "ll"]
    ),
    max_size=8,
).map(" ".join)


@pytest.mark.invariant("TOK-004")
@given(text=st.one_of(texts, words))
def test_matches_naive_spm(target: Any, tok_model: Any, vocab_path: Path, text: str) -> None:
    for add_special in (False, True):
        got = target.tokenize(tok_model, text, add_special, False)
        assert got == oracle.tokenize(vocab_path, text, add_special, False), repr(text)


# Pieces with a '▁' right after another character: merges may then cross word starts.
ACROSS_WORDS = (
    ("e" + SPACE, -1.0),
    ("e" + SPACE + "t", -0.5),
    ("s" + SPACE, -1.0),
    ("s" + SPACE + "a", -0.5),
    (SPACE + "the" + SPACE, -0.5),
)


@pytest.mark.invariant("TOK-004")
@pytest.mark.requires("tokenizer.vocab_only")
def test_matches_naive_spm_across_words(target: Any, tmp_path: Path) -> None:
    """The fixture vocabulary plus pieces that span a word start (vocabulary only): merges
    run over the whole fragment, as the naive rule does."""
    tokens, scores, types = fixture_vocab()
    path = tmp_path / "spm-across.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list([*tokens, *(t for t, _ in ACROSS_WORDS)])
    w.add_token_scores([*scores, *(sc for _, sc in ACROSS_WORDS)])
    w.add_token_types([*types, *(1 for _ in ACROSS_WORDS)])
    w.add_bos_token_id(BOS)
    w.add_eos_token_id(EOS)
    w.add_unk_token_id(UNK)
    finish_gguf(w)
    vocab = target.load_vocab(str(path))
    spanning = set(range(len(tokens), len(tokens) + len(ACROSS_WORDS)))
    seen: set[int] = set()
    for text in [*CORPUS, "the state at the end", "is a test; these are the tests"]:
        for add_special in (False, True):
            got = target.tokenize(vocab, text, add_special, False)
            assert got == oracle.tokenize(path, text, add_special, False), repr(text)
            seen |= spanning & set(got)
    assert seen == spanning  # every spanning piece was used


@pytest.mark.invariant("TOK-005")
@pytest.mark.parametrize("char", ["日", "🙂", "é", "\x00", "\x7f"])
def test_byte_fallback(target: Any, tok_model: Any, char: str) -> None:
    ids = target.tokenize(tok_model, f"a{char}", False, False)
    byte_ids = [3 + b for b in char.encode("utf-8")]  # <0x00> is id 3
    assert ids[-len(byte_ids) :] == byte_ids
    assert b"".join(_pieces(target, tok_model, ids)) == f" a{char}".encode()


@pytest.mark.invariant("TOK-006")
def test_special_token_parsing(target: Any, tok_model: Any) -> None:
    parsed = target.tokenize(tok_model, "<s>x</s>", False, True)
    assert parsed[0] == BOS and parsed[-1] == EOS
    plain = target.tokenize(tok_model, "<s>x</s>", False, False)
    assert BOS not in plain and EOS not in plain
    assert b"".join(_pieces(target, tok_model, plain)) == b" <s>x</s>"
    for parse in (False, True):
        ids = target.tokenize(tok_model, f"x{USER_DEFINED_TOKEN}y", False, parse)
        assert ids.count(SEP) == 1
    assert target.tokenize(tok_model, "<unk>", False, True) == [UNK]


@pytest.mark.invariant("TOK-007")
def test_token_to_piece_by_type(target: Any, tok_model: Any) -> None:
    tp = target.token_to_piece
    assert tp(tok_model, BOS, False) == b""
    assert tp(tok_model, BOS, True) == b"<s>"
    assert tp(tok_model, EOS, True) == b"</s>"
    assert tp(tok_model, UNK, False) == b""
    assert tp(tok_model, UNK, True) == b"<unk>"
    assert tp(tok_model, 3 + 0x41, False) == b"A"
    assert tp(tok_model, 3 + 0xE6, False) == b"\xe6"
    assert tp(tok_model, SEP, False) == USER_DEFINED_TOKEN.encode()
    (the,) = _ids([SPACE + "the"])
    assert tp(tok_model, the, False) == b" the"
    (space,) = _ids([SPACE])
    assert tp(tok_model, space, False) == b" "


@pytest.mark.invariant("TOK-008")
@given(text=st.one_of(plain_texts, words))
def test_detokenize_round_trip(target: Any, tok_model: Any, text: str) -> None:
    ids = target.tokenize(tok_model, text, False, False)
    assert target.detokenize(tok_model, ids, False, False) == text.encode("utf-8")


@pytest.mark.invariant("TOK-009")
def test_detokenize_after_bos_keeps_space(target: Any, tok_model: Any) -> None:
    ids = target.tokenize(tok_model, "Hello world", True, False)
    assert ids[0] == BOS
    assert target.detokenize(tok_model, ids, False, False) == b" Hello world"
    assert target.detokenize(tok_model, ids, True, False) == b" Hello world"
    assert target.detokenize(tok_model, ids, False, True) == b"<s> Hello world"
    assert target.detokenize(tok_model, ids[1:], False, False) == b"Hello world"


@pytest.mark.invariant("TOK-010")
@pytest.mark.requires("model.errors")
@pytest.mark.parametrize("bad", [-1, 508, 10**6])
def test_out_of_range_ids(target: Any, tok_model: Any, bad: int) -> None:
    with raises_code("TOK_TOKEN_RANGE", what="token_to_piece"):
        target.token_to_piece(tok_model, bad, False)
    with raises_code("TOK_TOKEN_RANGE", index=2, what="detokenize"):
        target.detokenize(tok_model, [1, 290, bad], False, False)
