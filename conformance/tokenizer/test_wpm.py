"""The WordPiece (``bert``) tokenizer over the vocabulary-only WordPiece fixture: goldens,
normalization and word-piece rules, and HF ``tokenizers``' BERT tokenizer as a second oracle."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.fixtures.cache import finish_gguf
from conformance.fixtures.vocabularies import wpm_vocab, wpm_vocab_path, write_wpm_gguf
from conformance.gate import cached
from conformance.tokenizer import hf_oracle

pytestmark = pytest.mark.requires("tokenizer.tokenize", "tokenizer.vocab_only")

TOKENS, TYPES = wpm_vocab()
CLS, SEP, UNK = TOKENS.index("[CLS]"), TOKENS.index("[SEP]"), TOKENS.index("[UNK]")

WPM_CORPUS = [
    "",
    " ",
    "Hello world",
    "Hello, World!",
    "  The TOKENIZER tokens\tmerge\n\nbytes  ",
    "naïve Café RÉSUMÉ Straße",
    "don't it's we're",
    "x=1+2; y<3 $5 ^_^ `a|b` ~",
    "日本語 中文テキスト 한국어",
    "привет мир γειά λόγος",
    "emoji 🙂 👍🏽 ✨ ½ ² ⅷ",
    "tok✓en a✓ b",
    "[CLS] hello [SEP] [MASK] [UNK]",
    "a\u200bb\x00c\ufffdd\u0301e",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
]


@pytest.fixture(scope="session")
def wpm_path() -> Path:
    return wpm_vocab_path()


@pytest.fixture
def wpm(target: Any, wpm_path: Path) -> Any:
    return cached(target, "load_vocab", str(wpm_path))


def _joined(target: Any, vocab: Any, ids: list[int]) -> bytes:
    return b"".join(target.token_to_piece(vocab, i, True) for i in ids)


@pytest.mark.invariant("TOK-051")
def test_golden_wpm_tokenization(target: Any, wpm: Any, snapshot: Any) -> None:
    got = {
        f"{text!r} add_special={a} parse_special={p}": target.tokenize(wpm, text, a, p)
        for text in WPM_CORPUS
        for a in (False, True)
        for p in (False, True)
    }
    assert got == snapshot


@pytest.mark.invariant("TOK-051")
@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("Hello, World!", " hello , world !"),
        ("naïve Café", " naive cafe"),
        ("x=1+2;", " x = 1 + 2 ;"),
        ("日本語", " 日 本 語"),
        ("a\u200bb\x00c", " abc"),
        ("e\u0301", " e"),
    ],
)
def test_normalize_and_split(target: Any, wpm: Any, text: str, words: str) -> None:
    """Lower case, accents stripped, controls dropped; punctuation, ASCII symbols and CJK
    ideographs are words of their own (each word's pieces start with a space)."""
    ids = target.tokenize(wpm, text, False, False)
    assert UNK not in ids
    assert _joined(target, wpm, ids) == words.encode()


@pytest.mark.invariant("TOK-051")
def test_unknown_word_is_one_unk(target: Any, wpm: Any) -> None:
    assert target.tokenize(wpm, "tok✓en", False, False) == [UNK]
    ids = target.tokenize(wpm, "a✓ b", False, False)
    assert ids[0] == UNK and UNK not in ids[1:]
    assert _joined(target, wpm, ids[1:]) == b" b"


@pytest.mark.invariant("TOK-051")
def test_cls_and_sep(target: Any, wpm: Any) -> None:
    plain = target.tokenize(wpm, "Hello world", False, False)
    assert target.tokenize(wpm, "Hello world", True, False) == [CLS, *plain, SEP]
    assert target.tokenize(wpm, "", True, False) == [CLS, SEP]
    assert target.tokenize(wpm, "", False, False) == []
    ids = target.tokenize(wpm, "Hello, world!", True, False)
    assert target.detokenize(wpm, ids, False, False) == b" hello, world!"
    assert target.detokenize(wpm, ids, False, True) == b"[CLS] hello, world![SEP]"


_ASCII_WORDS = ["a", "Z", "word", "The", "Hello", "TOKENIZER", "tokens", "0", "123", "'s", "'"]
_ASCII_OTHER = [" ", "  ", "\t", "\n", ".", ",", "!", "?", "-", "$", "+", "<", "=", "^", "~"]
_LATIN = ["é", "Ä", "ü", "naïve", "Café"]
wpm_texts = st.lists(st.sampled_from(_ASCII_WORDS + _ASCII_OTHER + _LATIN), max_size=16).map(
    "".join
)


@pytest.mark.invariant("TOK-064")
@given(text=wpm_texts)
def test_matches_hf_bert_tokenizer(target: Any, wpm: Any, wpm_path: Path, text: str) -> None:
    assert target.tokenize(wpm, text, False, False) == hf_oracle.tokenize_wordpiece(
        wpm_path, text
    ), repr(text)


@pytest.mark.invariant("TOK-065")
def test_normalizer_lowercase_key(target: Any, tmp_path: Path, wpm: Any) -> None:
    """``tokenizer.ggml.normalizer.lowercase = false`` keeps case (and accents, whose default
    follows it): the lower-case fixture vocabulary then has no piece for ``H`` or ``é``."""
    path = tmp_path / "cased.gguf"
    write_wpm_gguf(path, lowercase=False)
    cased = target.load_vocab(str(path))
    assert target.tokenize(cased, "Hello hello", False, False) == [
        UNK,
        *target.tokenize(wpm, "hello", False, False),
    ]
    assert target.tokenize(cased, "café", False, False) == [UNK]
    assert UNK not in target.tokenize(wpm, "Hello café", False, False)


def _write_lowercase_only(path: Path) -> str:
    """The WordPiece fixture with lower case on and ``normalizer.strip_accents = false``."""
    w = gguf.GGUFWriter(str(path), "bert")
    w.add_tokenizer_model("bert")
    w.add_token_list(list(TOKENS))
    w.add_token_types(list(TYPES))
    for add, text in (
        (w.add_bos_token_id, "[CLS]"),
        (w.add_sep_token_id, "[SEP]"),
        (w.add_unk_token_id, "[UNK]"),
        (w.add_pad_token_id, "[PAD]"),
    ):
        add(TOKENS.index(text))
    w.add_bool("tokenizer.ggml.normalizer.lowercase", True)
    w.add_bool("tokenizer.ggml.normalizer.strip_accents", False)
    finish_gguf(w)
    return str(path)


@pytest.mark.invariant("TOK-065")
def test_lowercase_without_accent_stripping(target: Any, tmp_path: Path, wpm: Any) -> None:
    """Lower case without accent stripping: ``İ`` (U+0130) becomes ``i`` by the simple mapping
    (no NFD reduction does it here), ``É`` becomes ``é`` and accented letters and combining
    marks stay, so the fixture (built from accent-stripped words) has no piece for them."""
    vocab = target.load_vocab(_write_lowercase_only(tmp_path / "no-strip.gguf"))
    for text, same_as in {"\u0130": "i", "\u0130t IS": "it is", "HELLO": "hello"}.items():
        want = target.tokenize(wpm, same_as, False, False)
        assert UNK not in want
        assert target.tokenize(vocab, text, False, False) == want, text
    for text in ("caf\u00e9", "CAF\u00c9", "cafe\u0301"):
        assert target.tokenize(vocab, text, False, False) == [UNK], text
        assert UNK not in target.tokenize(wpm, text, False, False), text


# (code point, whether it is a CJK ideograph to BERT): the first and last of each block, and
# neighbours outside (U+2B820..2B91F, CJK extension E's head, and extension F, U+2CEB0..,
# are missing from BERT's list; U+F8FF, private use, would be dropped as a control)
CJK_EDGES = [
    *((lo, True) for lo in (0x4E00, 0x3400, 0x20000, 0x2A700, 0x2B740, 0x2B920, 0xF900, 0x2F800)),
    *((hi, True) for hi in (0x9FFF, 0x4DBF, 0x2A6DF, 0x2B73F, 0x2B81F, 0x2CEAF, 0xFAFF, 0x2FA1F)),
    *((cp, False) for cp in (0x33FF, 0x4DC0, 0xA000, 0x2B820, 0x2B91F, 0x2CEB0, 0xFB00)),
    *((cp, False) for cp in (0x1FFFF, 0x2A6E0, 0x2F7FF, 0x2FA20)),
]


@pytest.mark.invariant("TOK-051")
def test_cjk_ranges(target: Any, tmp_path: Path) -> None:
    """A CJK ideograph is a word of its own, so ``a{c}b`` is three words (the ideograph, not in
    the vocabulary, one UNK); any other letter joins ``a`` and ``b`` in one unknown word. Cased
    (no NFD), so that a compatibility ideograph is tested as itself, not as what it decomposes to."""
    path = tmp_path / "cased.gguf"
    write_wpm_gguf(path, lowercase=False)
    cased = target.load_vocab(str(path))
    a, b = (target.tokenize(cased, w, False, False) for w in ("a", "b"))
    assert UNK not in a + b
    bad = []
    for cp, cjk in CJK_EDGES:
        got = target.tokenize(cased, f"a{chr(cp)}b", False, False)
        if got != ([*a, UNK, *b] if cjk else [UNK]):
            bad.append((hex(cp), got))
    assert not bad, (a, b, bad)


# llama.cpp's whitespace set (spec/tokenizer.md, BPE step 2), and the code points on either side
# of each of its ranges, the ASCII separators U+001C..001F Python counts as space, and U+180E.
WHITESPACE = [*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B)]
WHITESPACE += [0x2028, 0x2029, 0x202F, 0x205F, 0x3000]
NOT_WHITESPACE = [0x08, 0x0E, *range(0x1C, 0x20), 0x21, 0x84, 0x86, 0x9F, 0xA1, 0x167F, 0x1681]
NOT_WHITESPACE += [0x180E, 0x1FFF, 0x200B, 0x2027, 0x202A, 0x202E, 0x2030, 0x205E, 0x2060]
NOT_WHITESPACE += [0x2FFF, 0x3001]


@pytest.mark.invariant("TOK-051")
def test_whitespace_set(target: Any, tmp_path: Path) -> None:
    """Exactly llama.cpp's whitespace code points separate words: ``a{w}b`` is the words ``a``
    and ``b``; any other code point is dropped (controls), a word of its own (punctuation) or
    part of the word. Cased, so that no NFD form stands in for the code point."""
    path = tmp_path / "cased.gguf"
    write_wpm_gguf(path, lowercase=False)
    cased = target.load_vocab(str(path))
    two = [*target.tokenize(cased, "a", False, False), *target.tokenize(cased, "b", False, False)]
    assert UNK not in two
    bad = []
    for cp in WHITESPACE + NOT_WHITESPACE:
        got = target.tokenize(cased, f"a{chr(cp)}b", False, False)
        if (got == two) != (cp in WHITESPACE):
            bad.append((hex(cp), got))
    assert not bad, (two, bad)
