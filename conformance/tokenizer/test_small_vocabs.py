"""Hand-written vocabularies of a few tokens: BPE without the full byte alphabet (dropped
symbols, pieces of characters outside it, UNUSED / UNDEFINED tokens) and family default
special-token ids beyond the vocabulary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import pytest

from conformance.fixtures.cache import finish_gguf

pytestmark = pytest.mark.requires("tokenizer.tokenize", "tokenizer.vocab_only")

NORMAL, UNKNOWN, CONTROL, UNUSED, UNDEFINED = 1, 2, 3, 5, 0

# A BPE vocabulary of ten tokens with one merge. Of the GPT-2 byte alphabet it holds only
# "a", "b", "Ä" (byte C4) and "Ā" (byte 00): "Ġ" (the space, bytes C4 A0 once mapped) and the
# characters of every other byte are missing. "x中" and U+0080 are NORMAL tokens with
# characters outside the alphabet.
BPE = (
    ("a", NORMAL),
    ("b", NORMAL),
    ("ab", NORMAL),
    ("\u00c4", NORMAL),
    ("\u0080", NORMAL),
    ("x\u4e2d", NORMAL),
    ("zz", UNUSED),
    ("yy", UNDEFINED),
    ("<|endoftext|>", CONTROL),
    ("\u0100", NORMAL),
)
ID = {text: i for i, (text, _) in enumerate(BPE)}


def _write_bpe(path: Path) -> str:
    """No BOS / EOS id keys: the BPE defaults (11) are not below the 10 tokens."""
    w = gguf.GGUFWriter(str(path), "gpt2")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list([t for t, _ in BPE])
    w.add_token_types([k for _, k in BPE])
    w.add_token_merges(["a b"])
    finish_gguf(w)
    return str(path)


@pytest.fixture
def small_bpe(target: Any, tmp_path: Path) -> Any:
    return target.load_vocab(_write_bpe(tmp_path / "bpe-small.gguf"))


@pytest.mark.invariant("TOK-081")
def test_bpe_symbol_without_token_is_dropped(target: Any, small_bpe: Any) -> None:
    """A character of the byte alphabet the vocabulary lacks is dropped: no UNK, and not the
    Latin-1 character "Ä" of the first byte (C4) of "Ġ"."""
    got = {
        text: target.tokenize(small_bpe, text, False, False)
        for text in ("ab a", "\x00", "\u0100", "b\u4e2d ab", " ", "a  b")
    }
    assert got == {
        "ab a": [ID["ab"], ID["a"]],  # " a" -> "Ġ" "a": "Ġ" dropped
        "\x00": [ID["\u0100"]],  # byte 00 is written "Ā"
        "\u0100": [ID["\u00c4"]],  # bytes C4 80: "Ä" and the missing character of 80
        "b\u4e2d ab": [ID["b"], ID["ab"]],  # E4 B8 AD: none of their characters is a token
        " ": [],
        "a  b": [ID["a"], ID["b"]],
    }


@pytest.mark.invariant("TOK-081")
def test_bpe_pieces_outside_the_byte_alphabet(target: Any, small_bpe: Any) -> None:
    """A character outside the byte alphabet renders as ``[UNK_BYTE_0x<hex>`` + the whole
    token text + ``]``; UNUSED and UNDEFINED tokens render nothing, even with ``special``."""
    want = {
        "\u00c4": b"\xc4",
        "\u0080": b"[UNK_BYTE_0xc280\xc2\x80]",
        "x\u4e2d": b"x[UNK_BYTE_0xe4b8adx\xe4\xb8\xad]",
        "zz": b"",
        "yy": b"",
        "\u0100": b"\x00",
    }
    for text, piece in want.items():
        for special in (False, True):
            assert target.token_to_piece(small_bpe, ID[text], special) == piece, (text, special)
    ids = [ID[t] for t in want]
    assert target.detokenize(small_bpe, ids, False, True) == b"".join(want.values())


@pytest.mark.invariant("TOK-082")
def test_bpe_default_ids_beyond_the_vocabulary_are_unset(target: Any, tmp_path: Path) -> None:
    """The vocabulary loads (BOS / EOS would default to 11 of 10 tokens) and ``add_special``
    adds nothing (``gpt-2`` has no ``add_bos``)."""
    small_bpe = target.load_vocab(_write_bpe(tmp_path / "bpe-small.gguf"))
    assert target.vocab_size(small_bpe) == len(BPE)
    assert target.tokenize(small_bpe, "ab", True, False) == [ID["ab"]]
    assert target.detokenize(small_bpe, [ID["ab"]], True, False) == b"ab"


# A WordPiece vocabulary of five tokens without id keys: UNK would default to 100, CLS to
# 101 and SEP to 102. (With add_special llama.cpp asserts that CLS and SEP are set.)
WPM = ("[PAD]", "\u2581a", "b", "[CLS]", "[SEP]")


def _write_wpm(path: Path, tokens: tuple[str, ...], ids: bool = False) -> str:
    """A WordPiece vocabulary (tokens in ``[...]`` CONTROL, the others NORMAL), with the
    UNK / CLS / SEP id keys only when ``ids``."""
    w = gguf.GGUFWriter(str(path), "bert")
    w.add_tokenizer_model("bert")
    w.add_token_list(list(tokens))
    w.add_token_types([CONTROL if t.startswith("[") else NORMAL for t in tokens])
    if ids:
        w.add_unk_token_id(tokens.index("[UNK]"))
        w.add_bos_token_id(tokens.index("[CLS]"))
        w.add_sep_token_id(tokens.index("[SEP]"))
    finish_gguf(w)
    return str(path)


@pytest.mark.invariant("TOK-082")
def test_wpm_default_unk_beyond_the_vocabulary_is_null(target: Any, tmp_path: Path) -> None:
    vocab = target.load_vocab(_write_wpm(tmp_path / "wpm-small.gguf", WPM))
    got = {t: target.tokenize(vocab, t, False, False) for t in ("zz a", "ab", "a b", "abb")}
    assert got == {"zz a": [-1, 1], "ab": [1, 2], "a b": [1, -1], "abb": [1, 2, 2]}


# A WordPiece vocabulary of 104 tokens laid out as BERT's: [UNK] 100, [CLS] 101, [SEP] 102.
WPM_BERT = (
    "[PAD]",
    "\u2581a",
    "b",
    *(f"[unused{i}]" for i in range(3, 100)),
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
)


@pytest.mark.invariant("TOK-088")
def test_wpm_default_special_ids(target: Any, tmp_path: Path) -> None:
    """Without id keys a WordPiece vocabulary takes UNK 100, CLS 101 and SEP 102: the same ids
    as when the keys are written."""
    bare = target.load_vocab(_write_wpm(tmp_path / "wpm-bare.gguf", WPM_BERT))
    written = target.load_vocab(_write_wpm(tmp_path / "wpm-ids.gguf", WPM_BERT, ids=True))
    want = {"zz a": [100, 1], "ab": [1, 2], "a b": [1, 100], "": []}
    for vocab in (bare, written):
        assert {t: target.tokenize(vocab, t, False, False) for t in want} == want
        assert {t: target.tokenize(vocab, t, True, False) for t in want} == {
            t: [101, *ids, 102] for t, ids in want.items()
        }
