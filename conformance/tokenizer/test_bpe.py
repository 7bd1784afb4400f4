"""The BPE (``gpt2``) tokenizer over the vocabulary-only BPE fixtures, one per pre type:
goldens, word-boundary rules, an independent HF ``tokenizers`` oracle, pieces, clean-up,
round trips and special-token partitioning."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import gguf
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.assertions import raises_code
from conformance.fixtures.vocabularies import (
    BPE_PRE_ALIASES,
    BPE_PRE_TYPES,
    CONTROL,
    EOT,
    IGNORE_MERGES_PROBE,
    NORMAL,
    PAD,
    SEP,
    USER_DEFINED,
    bpe_vocab,
    write_bpe_gguf,
)
from conformance.strategies.tokenizer import ascii_texts, unicode_texts
from conformance.tokenizer import hf_oracle

pytestmark = pytest.mark.requires("tokenizer.tokenize", "tokenizer.vocab_only")

TOKENS, TYPES, MERGES = bpe_vocab()
EOT_ID, PAD_ID, SEP_ID = TOKENS.index(EOT), TOKENS.index(PAD), TOKENS.index(SEP)
# Pre types whose detokenize leaves spaces alone (llama.cpp turns clean_spaces off for them).
NO_CLEAN = (
    *("deepseek-llm", "deepseek-coder", "qwen2", "gpt-4o", "command-r", "deepseek-v3", "youtu"),
    *("qwen35", "poro-chat", "viking", "tekken", "chameleon", "granite-embed-multi-97m"),
    *("tiny_aya", "superbpe", "bailingmoe", "seed-coder", "ufakzeka", "afmoe", "laguna"),
    "kimi-k2",
)
# Pre types that add BOS by default (the Llama-3 family, Tekken, Chameleon).
ADDS_BOS = ("llama-bpe", "tekken", "chameleon")
# Pre types that emit a word that is a token whole (ignore_merges).
IGNORES_MERGES = ("llama-bpe", "tekken", "youtu", "granite-embed-multi-97m", "minicpm5")

BPE_CORPUS = [
    "",
    " ",
    "  ",
    "   ",
    "\t",
    "\n",
    "\n\n",
    "\n\n\n",
    "\t\n",
    "Hello world",
    " Hello world",
    "Hello World",
    " Hello World!",
    "Hello, world!",
    " this is 🦙.cpp",
    "w048 7tuijk dsdfhu",
    "нещо на Български",
    "ក្រុមហ៊ុនដែលមានចំណោម",
    "🚀 (normal) 😶‍🌫️ (multiple emojis concatenated) ✅ (only emoji that has its own token)",
    "3 33 333 3333 33333 333333 3333333 33333333 333333333",
    "Cửa Việt ied 4 ½ months Äpfel",
    "don't I'm we'RE they've she'll he'd it's DON'T",
    "  leading, trailing  \n\n  x",
    "a ' b 's ? ! . , 't 're",
    "def f(x):\n\treturn x**2  # square\r\n",
    "$+<=>^`|~ 1+1=2",
    "日本語のテキストと한국어",
    "<|sep|>sep<|endoftext|>eot<|pad|>",
    "x<|endoftext|> y <|sep|>",
    " zzzz x\x1ca a\x1c",
]


def _ends(pieces: list[bytes]) -> set[int]:
    out, pos = set(), 0
    for p in pieces:
        pos += len(p)
        out.add(pos)
    return out


def _pieces(target: Any, vocab: Any, ids: list[int]) -> list[bytes]:
    return [target.token_to_piece(vocab, i, True) for i in ids]


@pytest.mark.invariant("TOK-050")
def test_golden_bpe_tokenization(target: Any, bpe_vocab: Any, snapshot: Any) -> None:
    got = {
        f"{text!r} add_special={a} parse_special={p}": target.tokenize(bpe_vocab, text, a, p)
        for text in BPE_CORPUS
        for a in (False, True)
        for p in (False, True)
    }
    assert got == snapshot


# (pre type, text, its words by the pre type's rules in spec/tokenizer.md)
WORDS = [
    ("gpt-2", "Hello world's  12 ab!!\n", ["Hello", " world", "'s", " ", " 12", " ab", "!!", "\n"]),
    ("olmo", "it'S x", ["it", "'", "S", " x"]),  # contractions are case-sensitive here
    ("llama-bpe", "1234567 don'T\n\n  x", ["123", "456", "7", " don", "'T", "\n\n", " ", " x"]),
    ("qwen2", "x1234", ["x", "1", "2", "3", "4"]),
    # an unassigned code point (U+0378) is no letter: here the lead of the letter run after it
    ("llama-bpe", "a\u0378a x\u0378", ["a", "\u0378a", " x", "\u0378"]),
    ("deepseek-coder", "ab12 cd", ["ab", "1", "2", " cd"]),
    # U+001C is not whitespace to llama.cpp (the fixture has a token "\x1ca" to show it)
    ("deepseek-coder", "x\x1ca a\x1c", ["x", "\x1c", "a", " a", "\x1c"]),
    ("gpt-2", "x\x1ca", ["x", "\x1c", "a"]),
    ("deepseek-llm", "héllo 日本語 12345  ", ["h", "é", "llo", " ", "日本語", " ", "12345", "  "]),
    ("starcoder", "a 12345", ["a", " ", "1", "2", "3", "4", "5"]),
    ("refact", "a 12", ["a", " ", "1", "2"]),
    ("command-r", "a 12", ["a", " ", "1", "2"]),
    ("falcon", "x 1234567", ["x", " ", "123", "456", "7"]),
    ("gpt-4o", "HelloWorld ABCdef 12345", ["Hello", "World", " ABCdef", " ", "123", "45"]),
    ("default", "a+b=12345", ["a", "+", "b", "=", "123", "45"]),
    ("mpt", "a  b", ["a", " ", " b"]),
    # whitespace runs in power-of-two pieces before the last space
    ("jais-2", "a       b", ["a", "    ", "  ", " b"]),
    ("jais-2", "a" + " " * 200 + "b", ["a", " " * 128, " " * 64, "    ", "  ", " ", " b"]),
    ("jais-2", "a" + " " * 20 + "b", ["a", " " * 16, "  ", " ", " b"]),  # a 16-space piece
    # marks join letters, one ASCII punctuation mark may lead an ASCII word, kana/Han split off
    (
        "deepseek-v3",
        "(ab x\u0301y $+ 12345日本",
        ["(ab", " x\u0301y", " $+", " ", "123", "45", "日本"],
    ),
    ("youtu", "HelloWorld 한국어ㄱ… 123", ["HelloWorld", " ", "한국어ㄱ", "…", " ", "1", "2", "3"]),
    ("qwen35", "x\u0301y 12 \u0301!", ["x\u0301y", " ", "1", "2", " \u0301", "!"]),
    ("poro-chat", "ab cd, ef!", ["ab", " cd", ",", " ef", "!"]),
    ("viking", "ab12 cd.", ["ab", "1", "2", " cd", "."]),
    ("tekken", "HelloWorld don't 12", ["Hello", "World", " don", "'t", " ", "1", "2"]),
    (
        "chameleon",
        "a<sentinel:3>b IMGIMGABZ  x!?",
        ["a", "<", "sentinel", ":", "3", ">", "b", " ", "IMGIMGABZ", "  ", "x", "!", "?"],
    ),
    ("granite-embed-multi-97m", "Ax\u0301yZ 12345", ["Ax\u0301y", "Z", " ", "123", "45"]),
    ("tiny_aya", "x1234567 ab", ["x", "1", "234", "567", " ab"]),
    ("superbpe", "ab 1234567", ["ab ", "1", "234", "567"]),
    ("bailingmoe", "it'S \n\n x", ["it", "'S", " \n\n", " x"]),
    ("seed-coder", "a!!\n\nb", ["a", "!!", "\n\n", "b"]),
    ("ufakzeka", "don't 12", ["don", "'t", " ", "1", "2"]),  # no contraction rule
    # Thai starts at U+0E40 in AFMoE's Asian class: U+0E17 and U+0E22 are not in it
    ("afmoe", "ab1234 タイ ไทย x", ["ab", "1", "234", " ", "タイ", " ", "ไ", "ทย", " x"]),
    ("laguna", "a b\n\nc", ["a", " b", "\n\n", "c"]),
    ("exaone-moe", "ab cd 12 e", ["ab cd", " ", "1", "2", " e"]),
    ("minicpm5", "x 1234567", ["x", " ", "123", "456", "7"]),
    # Han runs split off; the contraction ends the word; a mark is a lead character, not a letter
    (
        "kimi-k2",
        "中文abc 日本語テキスト Don'T x\u0301y 1234567",
        [
            *("中文", "abc", " ", "日本語", "テキスト", " Don'T", " x", "\u0301y", " "),
            "123",
            "456",
            "7",
        ],
    ),
]


@pytest.mark.invariant("TOK-050")
@pytest.mark.parametrize(
    ("bpe_pre", "text", "words"), WORDS, ids=[w[0] for w in WORDS], indirect=["bpe_pre"]
)
def test_tokens_never_cross_words(
    target: Any, bpe_vocab: Any, bpe_pre: str, text: str, words: list[str]
) -> None:
    """Every word boundary of the pre type's rules is a token boundary."""
    assert "".join(words) == text
    pieces = _pieces(target, bpe_vocab, target.tokenize(bpe_vocab, text, False, False))
    assert b"".join(pieces) == text.encode()
    want = _ends([w.encode() for w in words])
    assert want <= _ends(pieces), (bpe_pre, pieces)


@pytest.mark.invariant("TOK-050")
@pytest.mark.parametrize("bpe_pre", ["llama-bpe", "kimi-k2"], indirect=True)
def test_space_run_after_a_newline_word_keeps_its_last_space(
    target: Any, bpe_vocab: Any, bpe_pre: str
) -> None:
    """A whitespace run with no newline of its own (the newline two words back does not count)
    leaves its last space to the word after it: the ids are those of the words one by one."""
    words = ["\n", "a", "  ", " c"]
    ids = target.tokenize(bpe_vocab, "".join(words), False, False)
    want = [i for w in words for i in target.tokenize(bpe_vocab, w, False, False)]
    assert ids == want, (bpe_pre, ids, want)


# A token spanning a newline and the space after it, built by a merge appended last: only a
# pre type whose words can hold both (GPT-2's whitespace run) reaches it.
NEWLINE_SPACE = "\u010a\u0120"  # 'ĊĠ': "\n " in GPT-2's byte alphabet


def _vocab_with_probes(target: Any, path: Path, pre: str, *probes: str) -> tuple[Any, int]:
    """The fixture vocabulary of ``pre`` plus two-character probe tokens, each built by a merge
    of its two characters appended after the fixture's merges (so it is reached only when both
    characters share a word); returns the loaded vocabulary and the first probe's id."""
    write_bpe_gguf(
        path,
        pre,
        tokens=(*TOKENS, *probes),
        types=(*TYPES, *(NORMAL for _ in probes)),
        merges=(*MERGES, *(" ".join(p) for p in probes)),
    )
    return target.load_vocab(str(path)), len(TOKENS)


@pytest.mark.invariant("TOK-050")
@pytest.mark.parametrize("pre", ["gpt-2", "llama-bpe", "qwen2", "qwen35", "kimi-k2"])
def test_newline_run_ends_at_its_last_newline(target: Any, tmp_path: Path, pre: str) -> None:
    """``\\s*[\\r\\n]+`` of the Llama-3 family (and Kimi-K2): a whitespace run ends after its
    last newline, so a newline followed by spaces and text is a word alone; GPT-2's
    ``\\s+(?!\\S)`` keeps it with the first space (the control that shows the probe token is
    reachable)."""
    vocab, probe = _vocab_with_probes(target, tmp_path / "nl.gguf", pre, NEWLINE_SPACE)
    assert target.token_to_piece(vocab, probe, True) == b"\n "
    cases = {  # text -> its words by the Llama-3 expressions
        "\n  x": ["\n", " ", " x"],
        "a\n \t b": ["a", "\n", " \t", " b"],
        "\n  ": ["\n", "  "],
        "\r\n \n  y": ["\r\n \n", " ", " y"],
    }
    if pre == "gpt-2":
        assert target.tokenize(vocab, "\n  x", False, False)[0] == probe
        return
    for text, words in cases.items():
        ids = target.tokenize(vocab, text, False, False)
        want = [i for w in words for i in target.tokenize(vocab, w, False, False)]
        assert ids == want, (pre, text)
        assert probe not in ids, (pre, text)


# Tokens joining a control character to the letter after it, built by merges appended last:
# "\x0bx" (vertical tab, a valid lead of ``[^\r\n\p{L}\p{N}]?\p{L}+``), "\nx" and "\rx" (no lead).
LEAD_PROBES = ("\u010b", "\u010a", "\u010d")  # 'ċ', 'Ċ', 'č': bytes 0x0B, 0x0A, 0x0D


@pytest.mark.invariant("TOK-050")
@pytest.mark.parametrize("pre", ["llama-bpe", "qwen2", "qwen35"])
def test_letter_run_lead_excludes_only_cr_and_lf(target: Any, tmp_path: Path, pre: str) -> None:
    """In the Llama-3 family a letter run may take one leading character that is not CR, LF,
    a letter or a number: a vertical tab joins the letters after it, a newline never does."""
    probes = (c + "x" for c in LEAD_PROBES)
    vocab, first = _vocab_with_probes(target, tmp_path / "lead.gguf", pre, *probes)
    vt, lf, cr = range(first, first + len(LEAD_PROBES))
    assert [target.token_to_piece(vocab, i, True) for i in (vt, lf, cr)] == [b"\vx", b"\nx", b"\rx"]
    assert target.tokenize(vocab, "a\x0bx", False, False)[-1] == vt
    for text in ("\nx", "a\nx", "\rx", "a \r\nx"):
        ids = target.tokenize(vocab, text, False, False)
        assert lf not in ids and cr not in ids, (pre, text, ids)
        assert _pieces(target, vocab, ids)[-1] == b"x", (pre, text, ids)


# Tokens joining "!" to the line break after it, built by merges appended last: "!\n" and "!\r".
BREAK_PROBES = ("!\u010a", "!\u010d")  # '!Ċ', '!č' in GPT-2's byte alphabet


@pytest.mark.invariant("TOK-050")
@pytest.mark.parametrize("pre", ["gpt-2", "llama-bpe", "qwen2", "qwen35", "kimi-k2"])
def test_other_run_takes_the_line_breaks_after_it(target: Any, tmp_path: Path, pre: str) -> None:
    """`` ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*`` of the Llama-3 family (and Kimi-K2): a run of other
    characters keeps the CRs and LFs right after it in its word, but not a break behind a space
    nor the letter after its breaks; GPT-2's `` ?[^\\s\\p{L}\\p{N}]+`` stops before the break
    (the control)."""
    # "\nx" (reached only if the "\n" and the "x" share a word) after the break probes
    probes = (*BREAK_PROBES, LEAD_PROBES[1] + "x")
    vocab, first = _vocab_with_probes(target, tmp_path / "brk.gguf", pre, *probes)
    lf, cr, nlx = range(first, first + len(probes))
    assert [target.token_to_piece(vocab, i, True) for i in (lf, cr)] == [b"!\n", b"!\r"]
    x = target.tokenize(vocab, "x", False, False)
    for text, probe in (("x!\n", lf), ("x!\r", cr)):
        ids = target.tokenize(vocab, text, False, False)
        if pre == "gpt-2":
            assert probe not in ids, (pre, text, ids)
        else:
            assert ids == [*x, probe], (pre, text, ids)
    ids = target.tokenize(vocab, "x! \n", False, False)
    assert lf not in ids and cr not in ids, (pre, ids)
    for text in ("x?\nx", "x?\n\n\nx"):  # the word ends after its last break, whatever their number
        ids = target.tokenize(vocab, text, False, False)
        assert nlx not in ids, (pre, text, ids)
        assert ids == [*target.tokenize(vocab, text[:-1], False, False), *x], (pre, text, ids)


# A token joining "x" to an apostrophe, built by a merge appended last: it is reached only when
# the apostrophe belongs to the letter word "x" starts.
APOSTROPHE_PROBE = "x'"


@pytest.mark.invariant("TOK-050")
def test_kimi_contraction_ends_the_letter_word(target: Any, tmp_path: Path) -> None:
    """Kimi-K2's letter word ends with an optional case-insensitive contraction (``'s 't 'm 'd
    're 've 'll``) of its own; any other apostrophe, or a contraction cut short by the end of the
    text, starts the next word."""
    vocab, probe = _vocab_with_probes(target, tmp_path / "kimi.gguf", "kimi-k2", APOSTROPHE_PROBE)
    assert target.token_to_piece(vocab, probe, True) == b"x'"
    # upper case: the fixture merges "'" with the lower-case contractions first
    for text in ("x'S", "x'T", "x'M", "x'D", "x'RE", "x'Ve", "x'lL", "x'LL a"):
        assert target.tokenize(vocab, text, False, False)[0] == probe, text
    for text in ("x'ab", "x'r", "x'", "x'a'll"):
        ids = target.tokenize(vocab, text, False, False)
        assert probe not in ids, (text, ids)
        assert _pieces(target, vocab, ids)[0] == b"x", (text, ids)


# unicode_cpt_is_han's ranges (CJK unified ideographs, extensions A-F, compatibility ideographs)
# by their edges: (code point, whether it is Han), the first and last of each range and the
# neighbours just outside.
HAN_EDGES = [
    *((lo, True) for lo in (0x4E00, 0x3400, 0x20000, 0x2A700, 0x2B740, 0x2B820, 0x2CEB0)),
    *((lo, True) for lo in (0xF900, 0x2F800)),
    *((hi, True) for hi in (0x9FFF, 0x4DBF, 0x2A6DF, 0x2B73F, 0x2B81F, 0x2CEAF, 0x2EBEF)),
    *((hi, True) for hi in (0xFAFF, 0x2FA1F)),
    *((cp, False) for cp in (0x4DFF, 0xA000, 0x33FF, 0x4DC0, 0x1FFFF, 0x2A6E0, 0x2A6FF)),
    *((cp, False) for cp in (0x2EBF0, 0xF8FF, 0xFB00, 0x2F7FF, 0x2FA20)),
]


def _han_probe(cp: int) -> str:
    """A token joining the last UTF-8 byte of ``cp`` to the lead byte 0xE4 of U+4E00, in GPT-2's
    byte alphabet: reached only when the two code points share a word."""
    byte_char = {b: c for c, b in _gpt2_alphabet().items()}
    return byte_char[chr(cp).encode()[-1]] + byte_char[0xE4]


@pytest.mark.invariant("TOK-050")
def test_kimi_han_class_is_unicode_cpt_is_han(target: Any, tmp_path: Path) -> None:
    """Kimi-K2's Han class is ``unicode_cpt_is_han``'s ranges: a Han code point and U+4E00
    after it are one Han run (the probe joining their bytes is reached, the control that shows
    it is reachable), any other code point ends its word before U+4E00; and a Han run ends at
    the first code point after it that is not Han: a run of one Han code point (or three) and
    the hexagram symbol U+4DC0 after it (UTF-8 lead byte 0xE4 too, so the probe of the run's
    last code point would join them) are two words, their ids those of each alone."""
    probes = sorted({_han_probe(cp) for cp, _ in HAN_EDGES})
    vocab, first = _vocab_with_probes(target, tmp_path / "han.gguf", "kimi-k2", *probes)
    bad: list[tuple[object, ...]] = []
    for cp, han in HAN_EDGES:
        probe = first + probes.index(_han_probe(cp))
        ids = target.tokenize(vocab, chr(cp) + "\u4e00", False, False)
        if (probe in ids) != han:
            bad.append((hex(cp), han, ids))
        for run in (chr(cp), "\u4e00\u4e00" + chr(cp)) if han else ():
            ids = target.tokenize(vocab, run + "\u4dc0", False, False)
            want = [i for w in (run, "\u4dc0") for i in target.tokenize(vocab, w, False, False)]
            if ids != want:
                bad.append((hex(cp), run, "U+4DC0", ids, want))
    assert not bad, bad


# A token joining "a" to the lead byte 0xCD ('Í') of U+0378 (unassigned) and of U+0370 (a
# letter), built by a merge appended last: it shows whether the two share a word.
UNASSIGNED_PROBE = "a\u00cd"
# pre type -> the words of "a\u0378a": the unassigned code point is "other" (a lead character
# of a letter run in the Llama-3 family), never a letter.
UNASSIGNED_WORDS = {
    "gpt-2": ["a", "\u0378", "a"],  # hand-written scanners ...
    "llama-bpe": ["a", "\u0378a"],
    "qwen35": ["a", "\u0378a"],
    "kimi-k2": ["a", "\u0378a"],
    "deepseek-coder": ["a", "\u0378", "a"],  # ... and the std::regex path (`\s?\p{L}+`)
}


@pytest.mark.invariant("TOK-050")
@pytest.mark.parametrize("pre", sorted(UNASSIGNED_WORDS))
def test_unassigned_code_point_is_no_letter(target: Any, tmp_path: Path, pre: str) -> None:
    """An unassigned code point (Unicode 15.1 ``Cn``) is neither letter, number nor space: it
    ends the letter run before it, so no token joins it to that run; the letter U+0370 in its
    place joins it (the control that shows the probe token is reachable)."""
    vocab, probe = _vocab_with_probes(target, tmp_path / "cn.gguf", pre, UNASSIGNED_PROBE)
    assert target.token_to_piece(vocab, probe, True) == b"a\xcd"
    assert target.tokenize(vocab, "a\u0370", False, False)[0] == probe
    words = UNASSIGNED_WORDS[pre]
    ids = target.tokenize(vocab, "".join(words), False, False)
    want = [i for w in words for i in target.tokenize(vocab, w, False, False)]
    assert ids == want, (pre, ids, want)
    assert probe not in ids, (pre, ids)


# A token joining the last UTF-8 byte 0xB8 ('¸') of U+0378 (unassigned) and of U+2178 (SMALL
# ROMAN NUMERAL NINE, a number) to the digit "1" after it: reached only when the two code points
# share a number run.
UNASSIGNED_DIGIT_PROBE = "\u00b81"


@pytest.mark.invariant("TOK-050")
@pytest.mark.parametrize("pre", ["gpt-2", "llama-bpe", "kimi-k2"])
def test_unassigned_code_point_is_no_number(target: Any, tmp_path: Path, pre: str) -> None:
    """An unassigned code point (Unicode 15.1 ``Cn``) is no number either: a digit after it
    starts a new number run, so no token joins the two; the number U+2178 in its place shares
    the digit's run (the control that shows the probe token is reachable)."""
    vocab, probe = _vocab_with_probes(target, tmp_path / "cn.gguf", pre, UNASSIGNED_DIGIT_PROBE)
    assert target.token_to_piece(vocab, probe, True) == b"\xb81"
    assert probe in target.tokenize(vocab, "\u21781", False, False), pre
    assert probe not in target.tokenize(vocab, "\u03781", False, False), pre


@pytest.mark.invariant("TOK-050")
def test_ignore_merges(target: Any, bpe_vocab: Any, bpe_pre: str) -> None:
    """Llama-3 pre types (and the others with ignore_merges) emit a word that is a token whole,
    even when no merge builds it."""
    probe = TOKENS.index(IGNORE_MERGES_PROBE)
    ids = target.tokenize(bpe_vocab, " zzzz", False, False)
    if bpe_pre in IGNORES_MERGES:
        assert ids == [probe]
    else:
        assert probe not in ids
        assert len(ids) > 1


@pytest.mark.invariant("TOK-057")
@pytest.mark.parametrize("bpe_pre", list(hf_oracle.HF_PRE), indirect=True)
@given(text=ascii_texts)
def test_matches_hf_tokenizers_on_ascii(
    target: Any, bpe_vocab: Any, bpe_path: Path, bpe_pre: str, text: str
) -> None:
    got = target.tokenize(bpe_vocab, text, False, False)
    assert got == hf_oracle.tokenize(bpe_path, bpe_pre, text), repr(text)


@pytest.mark.invariant("TOK-058")
def test_bos_by_pre_type(target: Any, bpe_vocab: Any, bpe_pre: str) -> None:
    plain = target.tokenize(bpe_vocab, "Hello world", False, False)
    special = target.tokenize(bpe_vocab, "Hello world", True, False)
    assert EOT_ID not in plain
    if bpe_pre in ADDS_BOS:
        assert special == [EOT_ID, *plain]
        assert target.tokenize(bpe_vocab, "", True, False) == [EOT_ID]
    else:
        assert special == plain
        assert target.tokenize(bpe_vocab, "", True, False) == []
    assert target.tokenize(bpe_vocab, "", False, False) == []


def _gpt2_alphabet() -> dict[str, int]:
    """GPT-2's byte alphabet, written from its definition: printable Latin-1 bytes keep their
    code point, the remaining bytes take U+0100, U+0101, ... in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    rest = [b for b in range(256) if b not in printable]
    table = {chr(b): b for b in printable}
    table.update({chr(0x100 + k): b for k, b in enumerate(rest)})
    return table


@pytest.mark.invariant("TOK-059")
@pytest.mark.parametrize("bpe_pre", ["gpt-2"], indirect=True)
def test_bpe_pieces(target: Any, bpe_vocab: Any) -> None:
    alphabet = _gpt2_alphabet()
    n = target.vocab_size(bpe_vocab)
    assert n == len(TOKENS)
    for tid in range(n):
        text, ttype = TOKENS[tid], TYPES[tid]
        if ttype == CONTROL:
            assert target.token_to_piece(bpe_vocab, tid, False) == b"", text
            assert target.token_to_piece(bpe_vocab, tid, True) == text.encode(), text
        elif ttype == USER_DEFINED:
            for special in (False, True):
                assert target.token_to_piece(bpe_vocab, tid, special) == text.encode(), text
        else:
            want = bytes(alphabet[c] for c in text)
            for special in (False, True):
                assert target.token_to_piece(bpe_vocab, tid, special) == want, text


CLEAN = [
    ("Hello , world !", "Hello, world!"),
    ("x  ?", "x ?"),
    ("a . b ,c", "a. b,c"),
    ("said ' hi ' and", "said'hi'and"),
    ("it 's I 'm we 're they 've", "it's I'm we're they've"),
    ("don 't I 'd we 'll", "don 't I 'd we 'll"),
    (" ?x", "?x"),
    ("it 's", "it's"),  # the letter after the apostrophe is the last byte
    ("a' b x 'y", "a' b x 'y"),  # an apostrophe needs a space on both sides to lose them
]


@pytest.mark.invariant("TOK-056")
@pytest.mark.parametrize("bpe_pre", ["gpt-2", "qwen2"], indirect=True)
@pytest.mark.parametrize(("text", "cleaned"), CLEAN)
def test_detokenize_clean_spaces(
    target: Any, bpe_vocab: Any, bpe_pre: str, text: str, cleaned: str
) -> None:
    ids = target.tokenize(bpe_vocab, text, False, False)
    want = text if bpe_pre in NO_CLEAN else cleaned
    assert target.detokenize(bpe_vocab, ids, False, False) == want.encode()


_CLEAN_TRIGGER = re.compile(r" (?=[?!.,'])")


def _no_specials(text: str) -> str:
    while "<|" in text:
        text = text.replace("<|", "<")
    return text


def _no_clean_triggers(text: str) -> str:
    while _CLEAN_TRIGGER.search(text):
        text = _CLEAN_TRIGGER.sub("", text)
    return text


@pytest.mark.invariant("TOK-060")
@given(text=unicode_texts)
def test_bpe_round_trip(target: Any, bpe_vocab: Any, bpe_pre: str, text: str) -> None:
    """Byte-level BPE loses nothing: detokenize gives the text back (minus the spaces
    clean_spaces removes, which the text is kept free of where it is on)."""
    text = _no_specials(text)
    if bpe_pre not in NO_CLEAN:
        text = _no_clean_triggers(text)
    ids = target.tokenize(bpe_vocab, text, False, True)
    assert ids == target.tokenize(bpe_vocab, text, False, True)  # deterministic
    for remove in (False, True):
        assert target.detokenize(bpe_vocab, ids, remove, False) == text.encode(), repr(text)


@pytest.mark.invariant("TOK-061")
@given(
    left=unicode_texts,
    right=unicode_texts,
    special=st.sampled_from([EOT, PAD, SEP]),
    pre=st.sampled_from(["gpt-2", "llama-bpe", "deepseek-llm"]),
)
def test_special_tokens_are_never_split(
    target: Any, left: str, right: str, special: str, pre: str
) -> None:
    from conformance.fixtures.vocabularies import bpe_vocab_path
    from conformance.gate import cached

    vocab = cached(target, "load_vocab", str(bpe_vocab_path(pre)))
    left, right = _no_specials(left), _no_specials(right)
    tid = TOKENS.index(special)
    ids = target.tokenize(vocab, left + special + right, False, True)
    parts = [target.tokenize(vocab, s, False, True) for s in (left, right)]
    assert ids == [*parts[0], tid, *parts[1]]
    plain = target.tokenize(vocab, left + special + right, False, False)
    if special == SEP:  # user-defined: split out whatever parse_special says
        assert plain == ids
    else:  # control: plain text without parse_special
        assert tid not in plain
        assert b"".join(_pieces(target, vocab, plain)) == (left + special + right).encode()


# -- malformed vocabularies ---------------------------------------------------------------------


def _bad_merges() -> tuple[str, ...]:
    return (*MERGES[:5], "Ġ zzzq", *MERGES[5:])


MALFORMED = [
    ("missing-merges", {"omit": ("merges",)}, "GGUF_MISSING_KEY", "tokenizer.ggml.merges", None),
    (
        "unknown-merge-token",
        {"merges": _bad_merges()},
        "GGUF_INVALID_HPARAM",
        "tokenizer.ggml.merges",
        5,
    ),
    ("merge-without-space", {"merges": ("ab",)}, "GGUF_INVALID_HPARAM", "tokenizer.ggml.merges", 0),
    (
        "short-token-types",
        {"types": TYPES[:-1]},
        "GGUF_INVALID_HPARAM",
        "tokenizer.ggml.token_type",
        None,
    ),
    # a flag of another GGUF type: llama.cpp's get_key<bool> throws "has wrong type"
    *(
        (
            f"{key.rsplit('.', 1)[1]}-as-{vtype.name.lower()}",
            {"extra": ((key, value, vtype),)},
            "GGUF_KEY_TYPE",
            key,
            None,
        )
        for key, value, vtype in (
            ("tokenizer.ggml.add_bos_token", 1, gguf.GGUFValueType.UINT8),
            ("tokenizer.ggml.add_eos_token", 0, gguf.GGUFValueType.INT32),
            ("tokenizer.ggml.add_space_prefix", "true", gguf.GGUFValueType.STRING),
        )
    ),
]


@pytest.mark.invariant("TOK-062")
@pytest.mark.requires("model.errors")
@pytest.mark.parametrize(
    ("name", "change", "code", "key", "index"), MALFORMED, ids=[m[0] for m in MALFORMED]
)
def test_malformed_bpe_vocab_refused(
    target: Any,
    tmp_path: Path,
    name: str,
    change: dict[str, Any],
    code: str,
    key: str,
    index: int | None,
) -> None:
    path = tmp_path / f"{name}.gguf"
    write_bpe_gguf(path, "gpt-2", **change)
    with raises_code(code, field=key, index=index, what=name):
        target.load_vocab(str(path))


@pytest.mark.invariant("TOK-062")
@pytest.mark.requires("model.errors")
@pytest.mark.parametrize("pre", ["no-such-pre", "gemma4"])
def test_unknown_pre_type_refused(target: Any, tmp_path: Path, pre: str) -> None:
    path = tmp_path / "pre.gguf"
    write_bpe_gguf(path, pre)
    with raises_code("GGUF_UNSUPPORTED_TOKENIZER", field="tokenizer.ggml.pre"):
        target.load_vocab(str(path))


@pytest.mark.invariant("TOK-074")
@pytest.mark.parametrize("pre", sorted(BPE_PRE_ALIASES))
def test_alias_splits_like_its_family(target: Any, pre: str) -> None:
    """A pre-type name that shares a fixture pre type's expressions loads and gives that pre
    type's ids (flags aside: the ignore-merges probe is left out, BOS and detokenize too)."""
    from conformance.fixtures.vocabularies import bpe_vocab_path
    from conformance.gate import cached

    alias = cached(target, "load_vocab", str(bpe_vocab_path(pre)))
    family = cached(target, "load_vocab", str(bpe_vocab_path(BPE_PRE_ALIASES[pre])))
    for text in BPE_CORPUS:
        if IGNORE_MERGES_PROBE[1:] in text:
            continue
        for parse_special in (False, True):
            want = target.tokenize(family, text, False, parse_special)
            assert target.tokenize(alias, text, False, parse_special) == want, (pre, text)


@pytest.mark.invariant("TOK-058")
def test_missing_pre_is_default(target: Any, tmp_path: Path) -> None:
    """No ``tokenizer.ggml.pre`` key: the default pre type (llama.cpp warns and goes on)."""
    path = tmp_path / "nopre.gguf"
    write_bpe_gguf(path, "default", omit=("pre",))
    from conformance.fixtures.vocabularies import bpe_vocab_path

    nopre = target.load_vocab(str(path))
    default = target.load_vocab(str(bpe_vocab_path("default")))
    for text in BPE_CORPUS:
        assert target.tokenize(nopre, text, True, False) == target.tokenize(
            default, text, True, False
        )


assert set(BPE_PRE_TYPES) >= set(hf_oracle.HF_PRE)
