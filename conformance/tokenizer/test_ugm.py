"""The Unigram (``t5``) tokenizer over vocabulary-only fixtures made from a SentencePiece
unigram model: goldens, normalization and space rules, and SentencePiece itself as a second
oracle."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import gguf
import pytest
from hypothesis import given

from conformance.assertions import raises_code
from conformance.fixtures.cache import finish_gguf
from conformance.fixtures.vocabularies import (
    NORMAL,
    UGM_USER_DEFINED,
    UGM_VARIANTS,
    ugm_model,
    ugm_model_proto,
    ugm_vocab_path,
    write_ugm_gguf,
)
from conformance.gate import cached
from conformance.strategies.tokenizer import unicode_texts

pytestmark = pytest.mark.requires("tokenizer.tokenize", "tokenizer.vocab_only")

PIECES = ugm_model()[0]
PAD, EOS, UNK = 0, 1, 2
SEP = PIECES.index(UGM_USER_DEFINED)

UGM_CORPUS = [
    "",
    " ",
    "Hello world",
    "  Hello   world  ",
    "The tokenizer\tmerges\n\nbytes",
    "ﬁne ① ＡＢＣ ｱｲｳ ㍿",
    "naïve café",
    "日本語 中文 한국어",
    "emoji 🙂 👍🏽",
    "x<sep>y </s> <unk>",
    "a\u200bb\x00c\ufeffd",
    "\ue000\U000f0000 unknown",
]


@pytest.fixture(params=list(UGM_VARIANTS))
def ugm(request: Any, target: Any) -> Any:
    return cached(target, "load_vocab", str(ugm_vocab_path(request.param)))


def _text(target: Any, vocab: Any, ids: list[int]) -> bytes:
    return b"".join(target.token_to_piece(vocab, i, True) for i in ids)


@pytest.mark.invariant("TOK-052")
def test_golden_ugm_tokenization(target: Any, ugm: Any, snapshot: Any) -> None:
    got = {
        f"{text!r} add_special={a} parse_special={p}": target.tokenize(ugm, text, a, p)
        for text in UGM_CORPUS
        for a in (False, True)
        for p in (False, True)
    }
    assert got == snapshot


@pytest.mark.invariant("TOK-052")
def test_space_rules(target: Any) -> None:
    """SentencePiece's defaults (dummy prefix, extra whitespace removed): one space before
    every word, none at the ends; with both off every space stays and none is added."""
    merged = cached(target, "load_vocab", str(ugm_vocab_path("ugm")))
    raw = cached(target, "load_vocab", str(ugm_vocab_path("ugm-raw")))
    text = "  Hello   world  "
    assert _text(target, merged, target.tokenize(merged, text, False, False)) == b" Hello world"
    assert _text(target, raw, target.tokenize(raw, text, False, False)) == text.encode()
    assert _text(target, raw, target.tokenize(raw, "ab c", False, False)) == b"ab c"


@pytest.mark.invariant("TOK-052")
def test_charsmap_normalization(target: Any) -> None:
    """nmt_nfkc folds compatibility forms: the ligature ﬁ, circled ①, full-width letters.
    "न" only starts longer keys (with a nukta): it passes unchanged, and folding goes on after
    it."""
    vocab = cached(target, "load_vocab", str(ugm_vocab_path("ugm")))
    ids = target.tokenize(vocab, "ﬁ ① ａｂ", False, False)
    assert _text(target, vocab, ids) == b" fi 1 ab"
    ids = target.tokenize(vocab, "\u0928\uff41 \u0928", False, False)
    assert ids == target.tokenize(vocab, "\u0928a \u0928", False, False)
    assert _text(target, vocab, ids) in (" \u0928a \u0928".encode(), b" <unk>a <unk>")


@pytest.mark.invariant("TOK-052")
def test_eos_and_unk(target: Any, ugm: Any) -> None:
    plain = target.tokenize(ugm, "Hello", False, False)
    assert target.tokenize(ugm, "Hello", True, False) == [*plain, EOS]
    assert target.tokenize(ugm, "", True, False) == [EOS]
    # unknown characters in a row collapse into one UNK
    ids = target.tokenize(ugm, "\ue000\ue001\ue002", False, False)
    assert ids.count(UNK) == 1
    assert target.tokenize(ugm, f"a{UGM_USER_DEFINED}b", False, False).count(SEP) == 1


@pytest.mark.invariant("TOK-069")
@given(text=unicode_texts)
def test_matches_sentencepiece(target: Any, text: str) -> None:
    import sentencepiece as spm

    vocab = cached(target, "load_vocab", str(ugm_vocab_path("ugm")))
    sp = spm.SentencePieceProcessor(model_proto=ugm_model_proto())
    text = text.replace("<", "(")  # no special-token texts
    assert target.tokenize(vocab, text, False, False) == sp.encode(text), repr(text)


@pytest.mark.invariant("TOK-062")
@pytest.mark.requires("model.errors")
@pytest.mark.parametrize(
    "blob",
    [
        b"\x01\x00",
        b"\x08\x00\x00\x00\x00\x00\x00\x00",
        b"\x04\x00\x00\x00\x00\x00\x00\x00",
    ],
)
def test_malformed_charsmap_refused(target: Any, tmp_path: Path, blob: bytes) -> None:
    """Shorter than its 4-byte size field, or a trie that leaves no room for strings: one
    longer than the rest of the blob, or one that ends exactly at the blob's end (size + 4 ==
    length: no byte left for a string)."""
    path = tmp_path / "charsmap.gguf"
    write_ugm_gguf(path, charsmap=blob)
    with raises_code("GGUF_INVALID_HPARAM", field="tokenizer.ggml.precompiled_charsmap"):
        target.load_vocab(str(path))


def _shifted_base_charsmap() -> bytes:
    """A hand-built charsmap: "Q" -> "hello", "QZ" -> "world". The root's and Q's BASE (512,
    1536) are written in the shifted form (BASE / 256 in bits 10..30, bit 9 set), which
    SentencePiece's builder uses only for tries of over 2^21 units; Z's (1) plainly."""
    leaf, shifted = 1 << 8, 1 << 9
    units = [0] * 2048

    def unit(base: int, label: int = 0, is_leaf: bool = False, shift: bool = False) -> int:
        field = base >> 8 if shift else base
        assert not shift or base % 256 == 0
        return field << 10 | (shifted if shift else 0) | (leaf if is_leaf else 0) | label

    q, z = ord("Q"), ord("Z")
    units[0] = unit(512, shift=True)  # root: children at 512 ^ byte
    at_q = 512 ^ q
    units[at_q] = unit(1536, q, is_leaf=True, shift=True)
    units[at_q ^ 1536] = 0  # Q's VALUE: offset of "hello"
    at_z = at_q ^ 1536 ^ z
    units[at_z] = unit(1, z, is_leaf=True)
    units[at_z ^ 1] = 6  # QZ's VALUE: offset of "world"
    assert len({0, at_q, at_q ^ 1536, at_z, at_z ^ 1}) == 5
    trie = struct.pack(f"<{len(units)}I", *units)
    return struct.pack("<I", len(trie)) + trie + b"hello\0world\0"


@pytest.mark.invariant("TOK-079")
def test_charsmap_shifted_base(target: Any, tmp_path: Path) -> None:
    """Trie units with bit 9 set hold BASE / 256: the walk finds the keys through them."""
    path = tmp_path / "shifted.gguf"
    write_ugm_gguf(path, charsmap=_shifted_base_charsmap())
    vocab = target.load_vocab(str(path))
    for text, normalized in {
        "Q": "hello",
        "QQ": "hellohello",
        "xQZy QZQ": "xworldy worldhello",
        "a Q b": "a hello b",
    }.items():
        ids = target.tokenize(vocab, text, False, False)
        assert _text(target, vocab, ids) == b" " + normalized.encode(), text
        assert ids == target.tokenize(vocab, normalized, False, False), text


def _chain_charsmap(key: bytes, value: bytes) -> bytes:
    """A hand-built charsmap holding one key -> value: a chain of inner nodes (plain BASE
    256 * depth), only the last of them a leaf."""
    units = [0] * 4096
    at = 0
    for depth, byte in enumerate(key, start=1):
        base = 256 * depth
        units[at] |= base << 10
        at ^= base ^ byte
        assert units[at] == 0
        units[at] = byte
    units[at] |= 1 << 8 | 1 << 10  # leaf; its VALUE (offset 0 of the strings) sits at at ^ 1
    assert units[at ^ 1] == 0
    trie = struct.pack(f"<{len(units)}I", *units)
    return struct.pack("<I", len(trie)) + trie + value + b"\0"


@pytest.mark.invariant("TOK-052", "TOK-079")
def test_charsmap_key_longer_than_three_bytes(target: Any, tmp_path: Path) -> None:
    """The longest match walks the trie as far as the text goes: a 5-byte key whose first
    bytes are no key themselves is still found, and its prefixes are left alone."""
    path = tmp_path / "long.gguf"
    write_ugm_gguf(path, charsmap=_chain_charsmap(b"wxyzv", b"hello"))
    vocab = target.load_vocab(str(path))
    for text, normalized in {
        "wxyzv": "hello",
        "awxyzvb wxyzvwxyzv": "ahellob hellohello",
        "wxyz wxy": "wxyz wxy",
    }.items():
        ids = target.tokenize(vocab, text, False, False)
        assert _text(target, vocab, ids) == b" " + normalized.encode(), text
        assert ids == target.tokenize(vocab, normalized, False, False), text


def _write_ugm(
    path: Path,
    extra: tuple[tuple[str, float], ...] = (),
    *,
    special_ids: bool = True,
    remove_extra: bool = True,
    charsmap: bytes | None = None,
    extra_type: int = NORMAL,
) -> None:
    """The SentencePiece-default unigram fixture with ``extra`` (piece, score) appended (typed
    ``extra_type``), and without the EOS / UNK id keys unless ``special_ids``; ``remove_extra``
    writes ``remove_extra_whitespaces``. No charsmap (identity normalization) unless
    ``charsmap``: the model's 240,000 int8 entries take seconds to read, and these texts need
    none."""
    pieces, scores, types, _ = ugm_model()
    w = gguf.GGUFWriter(str(path), "t5")
    w.add_tokenizer_model("t5")
    w.add_token_list([*pieces, *(p for p, _ in extra)])
    w.add_token_scores([*scores, *(sc for _, sc in extra)])
    w.add_token_types([*types, *(extra_type for _ in extra)])
    w.add_add_space_prefix(True)
    w.add_remove_extra_whitespaces(remove_extra)
    if charsmap is not None:
        w.add_precompiled_charsmap(charsmap)
    if special_ids:
        w.add_eos_token_id(EOS)
        w.add_unk_token_id(UNK)
    finish_gguf(w)


@pytest.mark.invariant("TOK-052")
def test_piece_across_words(target: Any, tmp_path: Path) -> None:
    """The Viterbi runs over the whole fragment, not word by word: a piece with a ``'▁'``
    inside (score 0, above any split's negative sum) spans two words."""
    path = tmp_path / "span.gguf"
    _write_ugm(path, (("\u2581Hello\u2581world", 0.0),))
    vocab = target.load_vocab(str(path))
    span = len(PIECES)
    assert target.tokenize(vocab, "Hello world", False, False) == [span]
    head = target.tokenize(vocab, "say", False, False)
    assert target.tokenize(vocab, "say Hello world", False, False) == [*head, span]
    # extra whitespace is removed first: the spaces between the words are one '▁'
    assert target.tokenize(vocab, "  Hello   world ", False, False) == [span]


@pytest.mark.invariant("TOK-052")
def test_path_scores_add_up_over_the_fragment(target: Any, tmp_path: Path) -> None:
    """A path's score is the double-precision sum of its piece scores from the start of the
    fragment, and a path replaces the best one at a position only when its sum is greater: after
    a piece scored 2**60, the sums of ``'▁a'`` (-20) and of ``'▁'`` + ``'a'`` (about -14.2)
    round to the same double, so the first to reach the position (the piece) stays, where the
    word alone takes the two pieces."""
    path = tmp_path / "rounding.gguf"
    _write_ugm(path, (("\u2581zzz", 2.0**60), ("\u2581a", -20.0)))
    vocab = target.load_vocab(str(path))
    zzz, space_a = len(PIECES), len(PIECES) + 1
    alone = target.tokenize(vocab, "a", False, False)
    assert alone == [PIECES.index("\u2581"), PIECES.index("a")], alone
    assert target.tokenize(vocab, "zzz", False, False) == [zzz]
    for text in ("zzz a", "zzz  a"):
        assert target.tokenize(vocab, text, False, False) == [zzz, space_a], text


@pytest.mark.invariant("TOK-075")
def test_t5_default_special_ids(target: Any, tmp_path: Path) -> None:
    """Without ``tokenizer.ggml.eos_token_id`` / ``unknown_token_id`` a T5 vocabulary takes
    EOS 1 and UNK 2 (and no BOS): the same ids as the fixture that writes them."""
    _write_ugm(tmp_path / "noids.gguf", special_ids=False)
    _write_ugm(tmp_path / "ids.gguf")
    bare = target.load_vocab(str(tmp_path / "noids.gguf"))
    written = target.load_vocab(str(tmp_path / "ids.gguf"))
    for text in ("Hello", "a\ue000\ue001b", "\ue000", ""):
        ids = target.tokenize(bare, text, True, False)
        assert ids == target.tokenize(written, text, True, False), repr(text)
        assert ids[-1] == EOS, repr(text)
    assert UNK in target.tokenize(bare, "a\ue000b", False, False)


@pytest.mark.invariant("TOK-052")
def test_unk_covers_one_character(target: Any, tmp_path: Path) -> None:
    """Without a charsmap nothing is normalized away: each ASCII character is one character
    of the Viterbi, and one no piece covers (every control character, the capitals the
    fixture lacks) is one UNK, as are characters of 2, 3 and 4 UTF-8 bytes no piece covers;
    the path goes on at the next character ("b", a piece)."""
    path = tmp_path / "plain.gguf"
    _write_ugm(path)
    vocab = target.load_vocab(str(path))
    wide = ["\u0100", "\u07ff", "\u0800", "\u9fa0", "\uffef", "\U0001f9ff", "\U0010fffd"]
    assert not any(ch in piece for ch in wide for piece in PIECES)
    for ch in [*(chr(c) for c in range(1, 128) if c != ord(" ")), *wide]:
        text = f"a{ch}b"
        ids = target.tokenize(vocab, text, False, False)
        middle = ch.encode() if ch in PIECES else b"<unk>"
        assert _text(target, vocab, ids) == b" a" + middle + b"b", repr(text)


UNUSED = 5  # llama_token_type LLAMA_TOKEN_TYPE_UNUSED


@pytest.mark.invariant("TOK-052")
def test_low_scored_piece_beats_unk(target: Any, tmp_path: Path) -> None:
    """UNK stands in only for a character no piece covers: an UNUSED token (a piece, though its
    score does not set UNK's) covering one character exactly is taken even when scored far below
    UNK's score (the lowest NORMAL score minus 10)."""
    path = tmp_path / "unused.gguf"
    _write_ugm(path, (("\ue000", -1000.0),), extra_type=UNUSED)
    vocab = target.load_vocab(str(path))
    unused = len(PIECES)
    ids = target.tokenize(vocab, "a\ue000b", False, False)
    assert ids == [*target.tokenize(vocab, "a", False, False), unused, PIECES.index("b")], ids


@pytest.mark.invariant("TOK-052")
def test_space_prefix_alone(target: Any, tmp_path: Path) -> None:
    """``add_space_prefix`` without ``remove_extra_whitespaces``: every space stays a ``'▁'``
    and one more goes right before the first word (after any leading spaces), none when there
    is no word; detokenize then removes one leading space and gives the text back."""
    path = tmp_path / "prefix.gguf"
    _write_ugm(path, remove_extra=False)
    vocab = target.load_vocab(str(path))
    for text, normalized in {
        "  Hello  world ": "   Hello  world ",
        "Hello world": " Hello world",
        "   ": "   ",
        " a": "  a",
    }.items():
        ids = target.tokenize(vocab, text, False, False)
        assert UNK not in ids, text
        assert _text(target, vocab, ids) == normalized.encode(), text
        assert target.detokenize(vocab, ids, False, False) == normalized.encode()[1:], text


def _byte_key_charsmap(entries: dict[int, bytes], size: int = 512) -> bytes:
    """A hand-built charsmap whose keys are single bytes (``entries``: byte -> replacement):
    the root's BASE is 256, each key's unit sits at 256 ^ byte with BASE 1, its VALUE at
    256 ^ byte ^ 1; ``size`` trie units."""
    units = [0] * size
    units[0] = 256 << 10
    strings = b""
    for byte, replacement in entries.items():
        at = 256 ^ byte
        units[at] = 1 << 10 | 1 << 8 | byte  # BASE 1, LEAF, label
        units[at ^ 1] = len(strings)
        strings += replacement + b"\0"
    trie = struct.pack(f"<{len(units)}I", *units)
    return struct.pack("<I", len(trie)) + trie + strings


@pytest.mark.invariant("TOK-083")
def test_entry_ending_inside_a_character(target: Any, tmp_path: Path) -> None:
    """Keys that are lead bytes (C3 of "é", E4 of "中", C4 of "Ā" and "Ŀ") leave continuation
    bytes behind: each becomes U+FFFD unless a key starts there (AD of "中" -> "Y"), so the text
    tokenizes as the normalized text does (a U+FFFD piece is added to the vocabulary). The
    continuation bytes run from 80 ("Ā": C4 80) to BF ("Ŀ": C4 BF)."""
    path = tmp_path / "lead-keys.gguf"
    charsmap = _byte_key_charsmap({0xC3: b"E", 0xE4: b"X", 0xAD: b"Y", 0xC4: b"Z"})
    _write_ugm(path, (("\ufffd", -1.0),), remove_extra=False, charsmap=charsmap)
    vocab = target.load_vocab(str(path))
    replacement = len(PIECES)
    for text, normalized in {
        "\u00e9": "E\ufffd",
        "a\u00e9b": "aE\ufffdb",
        "\u4e2d": "X\ufffdY",
        "\u00e9 \u4e2d x": "E\ufffd X\ufffdY x",
        "\u0100": "Z\ufffd",
        "a\u013fb": "aZ\ufffdb",
    }.items():
        ids = target.tokenize(vocab, text, False, False)
        assert replacement in ids, text
        assert ids == target.tokenize(vocab, normalized, False, False), text


@pytest.mark.invariant("TOK-083")
def test_replacement_that_is_not_utf8(target: Any, tmp_path: Path) -> None:
    """``Q`` -> the lone byte C3: the Viterbi reads a two-byte character from it, so the first
    byte of the next ``'▁'`` joins its UNK, and so do that ``'▁'``'s other bytes: the words
    are not solved one by one. A lone continuation byte (80 to BF, from R, V, X, Z) is a
    one-byte character there: its UNK ends before the next character."""
    path = tmp_path / "bad-replacement.gguf"
    lone = {ord("R"): b"\x80", ord("V"): b"\x9f", ord("X"): b"\xa5", ord("Z"): b"\xbf"}
    _write_ugm(path, charsmap=_byte_key_charsmap({ord("Q"): b"\xc3", **lone}))
    vocab = target.load_vocab(str(path))
    for text, want in {
        "Hello Q world": b" Hello <unk>world",
        "Q x": b" <unk>x",
        "aQb": b" a<unk>",
        **{f"a{chr(key)}b": b" a<unk>b" for key in lone},
    }.items():
        ids = target.tokenize(vocab, text, False, False)
        assert _text(target, vocab, ids) == want, text


# 378 trie units: the root's step for "z" (256 ^ 0x7A) is the first index past the trie, that
# for "y" (256 ^ 0x79) its last unit (not a child: LCHECK 0)
_SHORT_TRIE = 256 ^ ord("z")


def _write_short_trie(tmp_path: Path) -> Any:
    path = tmp_path / "short-trie.gguf"
    _write_ugm(path, charsmap=_byte_key_charsmap({ord("Q"): b"hello"}, size=_SHORT_TRIE))
    return path


@pytest.mark.invariant("TOK-079")
def test_trie_a_step_can_leave(target: Any, tmp_path: Path) -> None:
    """A trie whose walk for some bytes steps to its end or past it loads, and texts whose walks
    stay inside (bytes below "z", the first to step out) normalize as usual."""
    vocab = target.load_vocab(str(_write_short_trie(tmp_path)))
    for text, normalized in {"Q": "hello", "a Qy b": "a helloy b", "y": "y"}.items():
        ids = target.tokenize(vocab, text, False, False)
        assert _text(target, vocab, ids) == b" " + normalized.encode(), text
        assert ids == target.tokenize(vocab, normalized, False, False), text


@pytest.mark.invariant("TOK-079")
@pytest.mark.requires("model.errors")
def test_trie_step_out_refused(target: Any, tmp_path: Path) -> None:
    """A text whose walk steps to the index right past the trie ("z") or further ("~", "é") is
    refused, as llama.cpp's ``get_node`` throws there; llama.cpp fails the whole call: not run
    against it."""
    vocab = target.load_vocab(str(_write_short_trie(tmp_path)))
    for text in ("z", "Q yz", "~", "\u00e9"):
        with raises_code("TOK_CHARSMAP", field="text"):
            target.tokenize(vocab, text, False, False)
