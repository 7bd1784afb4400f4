"""The PLaMo-2 (``plamo2``) tokenizer over a synthetic vocabulary-only vocabulary: goldens,
optimality of the segmentation's cost, pieces and round trips."""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path
from typing import Any

import gguf
import pytest
from hypothesis import given

from conformance.assertions import raises_code
from conformance.fixtures.cache import finish_gguf
from conformance.fixtures.vocabularies import (
    PLAMO2_SPECIALS,
    plamo2_vocab,
    plamo2_vocab_path,
    write_plamo2_gguf,
)
from conformance.gate import cached
from conformance.strategies.tokenizer import unicode_texts
from conformance.tokenizer.space_prefix import assert_keeps_leading_space, assert_strips_first_space

pytestmark = pytest.mark.requires("tokenizer.tokenize", "tokenizer.vocab_only")

TOKENS, SCORES, TYPES = plamo2_vocab()
BYTE = 6
PLAMO2_CORPUS = [
    "",
    " ",
    "Hello world",
    "The tokenizer tokens\n\n\ttab",
    "<|plamo:bos|>x<|plamo:eos|>",
    "\ufeffleading mark",
    "naïve café 日本語 🙂",
    "\ue000 unknown",
]


@pytest.fixture
def plamo2(target: Any) -> Any:
    return cached(target, "load_vocab", str(plamo2_vocab_path()))


def _units(score: float) -> int:
    x = score * 1e4
    return int(math.copysign(math.floor(abs(x) + 0.5), x))


@lru_cache(maxsize=1)
def _costs() -> dict[str, int]:
    return {t: -_units(s) for t, s, k in zip(TOKENS, SCORES, TYPES, strict=True) if k != BYTE}


def _least_cost(text: str) -> int:
    """The least total cost over every segmentation (tokens, or a code point at 10^7)."""
    costs = _costs()
    best = [0] * (len(text) + 1)
    for i in range(len(text) - 1, -1, -1):
        best[i] = best[i + 1] + 10**7
        for j in range(i + 1, len(text) + 1):
            if text[i:j] in costs:
                best[i] = min(best[i], costs[text[i:j]] + best[j])
    return best[0]


def _cost_of(ids: list[int]) -> int:
    costs = _costs()
    total = 0
    for t in ids:
        if TYPES[t] == BYTE:
            total += 10**7 if int(TOKENS[t][3:5], 16) & 0xC0 != 0x80 else 0  # one per code point
        else:
            total += costs[TOKENS[t]]
    return total


@pytest.mark.invariant("TOK-054")
def test_golden_plamo2_tokenization(target: Any, plamo2: Any, snapshot: Any) -> None:
    got = {
        f"{text!r} add_special={a} parse_special={p}": target.tokenize(plamo2, text, a, p)
        for text in PLAMO2_CORPUS
        for a in (False, True)
        for p in (False, True)
    }
    assert got == snapshot


@pytest.mark.invariant("TOK-054")
@given(text=unicode_texts)
def test_least_cost_segmentation(target: Any, plamo2: Any, text: str) -> None:
    """The ids are a segmentation of least cost; add_special adds nothing; pieces give the text
    back (without one leading U+FEFF)."""
    text = text.replace("<|", "<")
    ids = target.tokenize(plamo2, text, False, False)
    body = text[1:] if text.startswith("\ufeff") else text
    assert _cost_of(ids) == _least_cost(body), repr(text)
    assert target.tokenize(plamo2, text, True, False) == ids
    assert target.detokenize(plamo2, ids, False, False) == body.encode()


@pytest.mark.invariant("TOK-054")
def test_control_text_matches_without_parse_special(target: Any, plamo2: Any) -> None:
    bos = TOKENS.index(PLAMO2_SPECIALS[1])
    assert target.tokenize(plamo2, PLAMO2_SPECIALS[1], False, False) == [bos]
    assert target.token_to_piece(plamo2, bos, False) == b""
    assert target.token_to_piece(plamo2, bos, True) == PLAMO2_SPECIALS[1].encode()
    space = TOKENS.index(" ")
    assert target.token_to_piece(plamo2, space, False) == b" "


def _add_tokens(w: gguf.GGUFWriter, extra: tuple[tuple[str, float], ...] = ()) -> None:
    """The tokenizer keys: the four controls, the 256 BYTE tokens, then ``extra`` (NORMAL,
    with their scores) from id 260."""
    w.add_tokenizer_model("plamo2")
    w.add_token_list(
        [*PLAMO2_SPECIALS, *(f"<0x{b:02X}>" for b in range(256)), *(t for t, _ in extra)]
    )
    w.add_token_scores([0.0] * 260 + [sc for _, sc in extra])
    w.add_token_types([3] * 4 + [BYTE] * 256 + [1] * len(extra))


def _write_vocab(
    path: Path, extra: tuple[tuple[str, float], ...], *, space_prefix: bool | None = None
) -> str:
    """A PLaMo-2 vocabulary-only file: the four controls, the 256 BYTE tokens, then ``extra``
    (NORMAL, with their scores), so ids of ``extra`` start at 260; ``space_prefix`` writes
    ``tokenizer.ggml.add_space_prefix``."""
    w = gguf.GGUFWriter(str(path), "plamo2")
    _add_tokens(w, extra)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_pad_token_id(3)
    if space_prefix is not None:
        w.add_add_space_prefix(space_prefix)
    finish_gguf(w)
    return str(path)


def _write_vocab_only_model(path: Path, *, ids: bool) -> str:
    """The PLaMo-2 controls and BYTE tokens in a ``llama`` file with the few hyperparameters a
    vocab-only load may read; ``ids`` writes BOS 2 and EOS 1 (the defaults swapped), otherwise
    no special-id key is written."""
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_block_count(1)
    w.add_feed_forward_length(16)
    w.add_head_count(2)
    w.add_layer_norm_rms_eps(1e-5)
    _add_tokens(w)
    if ids:
        w.add_bos_token_id(2)
        w.add_eos_token_id(1)
    finish_gguf(w)
    return str(path)


@pytest.mark.invariant("TOK-086")
@pytest.mark.requires("model.vocab_only")
def test_default_special_ids(target: Any, tmp_path: Path) -> None:
    """Without id keys a PLaMo-2 vocabulary's BOS is 1 (``<|plamo:bos|>``) and its EOS 2
    (``<|plamo:eos|>``); written keys win. ``add_special`` frames nothing in this family, so
    only ``vocab_info`` shows the ids."""
    bare = target.load_model_vocab_only(_write_vocab_only_model(tmp_path / "bare.gguf", ids=False))
    keyed = target.load_model_vocab_only(_write_vocab_only_model(tmp_path / "keyed.gguf", ids=True))
    got = {name: target.vocab_info(v) for name, v in (("bare", bare), ("keyed", keyed))}
    assert {k: (i["bos"], i["eos"]) for k, i in got.items()} == {"bare": (1, 2), "keyed": (2, 1)}
    assert target.tokenize(bare, "<|plamo:bos|><|plamo:eos|>", False, True) == [1, 2]


def _bytes_of(text: str) -> list[int]:
    return [4 + b for b in text.encode()]


# A token dearer than one unknown code point (10^7): "b" costs 1.5 * 10^7, so "b" is written
# as its byte; "ab" (1.2 * 10^7) then loses to "a" (5000) + that byte (10^7), which only holds
# when the cost after "a" is the unknown cost, not b's. Scores stay above -2000 (TOK-077).
COSTLY = (("a", -0.5), ("b", -1500.0), ("ab", -1200.0))


@pytest.mark.invariant("TOK-054")
def test_unknown_code_point_beats_a_costlier_token(target: Any, tmp_path: Path) -> None:
    vocab = target.load_vocab(_write_vocab(tmp_path / "plamo2-costly.gguf", COSTLY))
    a, byte_b = 260, _bytes_of("b")[0]
    assert target.tokenize(vocab, "b", False, False) == [byte_b]
    assert target.tokenize(vocab, "ab", False, False) == [a, byte_b]
    assert target.tokenize(vocab, "abab", False, False) == [a, byte_b, a, byte_b]
    assert target.tokenize(vocab, "a", False, False) == [a]


# The unknown cost is exactly 10^7 units: "d" and "cd" cost 10^7 + 1 (score -1000.0001 as a
# float32), one unit more than an unknown code point, so "d" is written as its byte and "cd"
# as "c" (cost 0) and that byte. (A score of exactly -1000, 10^7 units, is TOK-087's case.)
EDGE = (("c", 0.0), ("d", -1000.0001), ("cd", -1000.0001))


@pytest.mark.invariant("TOK-054")
def test_unknown_cost_is_exactly_ten_million(target: Any, tmp_path: Path) -> None:
    vocab = target.load_vocab(_write_vocab(tmp_path / "plamo2-edge.gguf", EDGE))
    c, byte_d = 260, _bytes_of("d")[0]
    got = {t: target.tokenize(vocab, t, False, False) for t in ("d", "cd", "dc", "cdcd")}
    assert got == {
        "d": [byte_d],
        "cd": [c, byte_d],
        "dc": [byte_d, c],
        "cdcd": [c, byte_d, c, byte_d],
    }


# Tokens scored exactly -1000 (10^7 units, the score of llama.cpp's unknown row): c=260, e=261,
# a=262, ab=263, b=264, q=265 ("q", unlike "e" of "<|plamo:eos|>", is in no other token text).
UNKNOWN_SCORED = (
    ("c", 0.0),
    ("e", -1000.0),
    ("a", 0.0),
    ("ab", -1000.0),
    ("b", 0.0),
    ("q", -1000.0),
)


@pytest.mark.invariant("TOK-087")
def test_a_token_scored_minus_1000_ends_its_table_rows(target: Any, tmp_path: Path) -> None:
    """The walk to the entry at "c" stops at e's row, before the empty entry that would give
    the token "c", so "c" before "e" (or before "ab") is an unknown code point; at "ab" the
    candidates stop after "ab" itself (cost 10^7), before "a" (with "b": cost 0). Where the
    token is not in the way, "e" after "c" and "a" before "c" are plain tokens. This holds
    as well for "q", which starts the only token text it appears in."""
    vocab = target.load_vocab(_write_vocab(tmp_path / "plamo2-unknown.gguf", UNKNOWN_SCORED))
    byte_c = _bytes_of("c")
    texts = ("ce", "ab", "cab", "ace", "ec", "eb", "ba", "cc", "cq", "aqc", "qc")
    got = {t: target.tokenize(vocab, t, False, False) for t in texts}
    assert got == {
        "ce": [*byte_c, 261],
        "ab": [263],
        "cab": [*byte_c, 263],
        "ace": [262, *byte_c, 261],
        "ec": [261, 260],
        "eb": [261, 264],
        "ba": [264, 262],
        "cc": [260, 260],
        "cq": [*byte_c, 265],
        "aqc": [*_bytes_of("a"), 265, 260],
        "qc": [265, 260],
    }


@pytest.mark.invariant("TOK-054")
def test_single_code_point_tokens_only(target: Any, tmp_path: Path) -> None:
    """A vocabulary whose only tokens besides the BYTE ones are single code points (no control
    texts either): every code point is a piece of its own, a token or its bytes."""
    path = tmp_path / "plamo2-single.gguf"
    w = gguf.GGUFWriter(str(path), "plamo2")
    w.add_tokenizer_model("plamo2")
    w.add_token_list(["x", *(f"<0x{b:02X}>" for b in range(256)), "a", "b"])
    w.add_token_scores([0.0] * 259)
    w.add_token_types([1] + [BYTE] * 256 + [1, 1])
    finish_gguf(w)
    vocab = target.load_vocab(str(path))
    assert target.tokenize(vocab, "abxz", False, False) == [257, 258, 0, 1 + ord("z")]


@pytest.mark.invariant("TOK-010")
@pytest.mark.requires("model.errors")
def test_out_of_range_ids(target: Any, tmp_path: Path) -> None:
    """PLaMo-2's ``token_to_piece`` and ``detokenize`` refuse an id outside [0, n_vocab)."""
    vocab = target.load_vocab(_write_vocab(tmp_path / "plamo2-range.gguf", (("x", -1.0),)))
    for bad in (-1, 261, 10**6):
        with raises_code("TOK_TOKEN_RANGE", what="token_to_piece"):
            target.token_to_piece(vocab, bad, False)
        with raises_code("TOK_TOKEN_RANGE", index=1, what="detokenize"):
            target.detokenize(vocab, [260, bad], False, False)


@pytest.mark.invariant("TOK-054")
def test_detokenize_keeps_leading_space(target: Any, tmp_path: Path) -> None:
    """Without an ``add_space_prefix`` key PLaMo-2 has no space prefix (the family default is
    off), so detokenize removes no leading space, from a token or from a BYTE piece."""
    vocab = target.load_vocab(_write_vocab(tmp_path / "plamo2-space.gguf", ((" x", -1.0),)))
    assert_keeps_leading_space(target, vocab, (" x", " ", "  x x"))
    assert target.tokenize(vocab, " x", False, False) == [260]


@pytest.mark.invariant("TOK-080")
def test_space_prefix_key_strips_the_first_piece(target: Any, tmp_path: Path) -> None:
    """``add_space_prefix = true`` adds no space when tokenizing, but detokenize removes one
    leading space of the first piece: of a token (a two-space token keeps one) or of the
    ``<0x20>`` BYTE piece."""
    extra = ((" x", -1.0), ("  ", -1.0))
    plain = target.load_vocab(_write_vocab(tmp_path / "plamo2-plain.gguf", extra))
    vocab = target.load_vocab(
        _write_vocab(tmp_path / "plamo2-prefix.gguf", extra, space_prefix=True)
    )
    assert target.tokenize(vocab, "  ", False, False) == [261]
    assert target.tokenize(vocab, " ", False, False) == _bytes_of(" ")
    assert_strips_first_space(target, vocab, plain, (" x", "  ", " ", "  x x", "x ", " \u00e9"))


# Three-character tokens against three unknown code points (3 * 10^7): each is cheaper, but
# llama.cpp drops a token whose score is at or below -2000 (-2 * 10^7 units) from the table.
FLOOR = (("xyz", -2500.0), ("uvw", -2000.0), ("rst", -1999.9999))


@pytest.mark.invariant("TOK-077")
def test_a_token_at_or_below_the_score_floor_is_no_candidate(target: Any, tmp_path: Path) -> None:
    vocab = target.load_vocab(_write_vocab(tmp_path / "plamo2-floor.gguf", FLOOR))
    got = {t: target.tokenize(vocab, t, False, False) for t in ("xyz", "uvw", "rst", "rstuvw")}
    assert got == {
        "xyz": _bytes_of("xyz"),
        "uvw": _bytes_of("uvw"),
        "rst": [262],
        "rstuvw": [262, *_bytes_of("uvw")],
    }


@pytest.mark.invariant("TOK-062")
@pytest.mark.requires("model.errors")
def test_missing_byte_token_refused(target: Any, tmp_path: Path) -> None:
    types = list(TYPES)
    types[TOKENS.index("<0x41>")] = 1  # <0x41> typed NORMAL: byte 0x41 has no BYTE token
    path = tmp_path / "plamo2.gguf"
    write_plamo2_gguf(path, types=tuple(types))
    with raises_code("GGUF_INVALID_HPARAM", field="tokenizer.ggml.token_type"):
        target.load_vocab(str(path))
