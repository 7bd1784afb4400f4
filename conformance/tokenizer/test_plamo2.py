"""The PLaMo-2 (``plamo2``) tokenizer over a synthetic vocabulary-only vocabulary: goldens,
optimality of the segmentation's cost, pieces and round trips."""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given

from conformance.assertions import raises_code
from conformance.fixtures.vocabularies import (
    PLAMO2_SPECIALS,
    plamo2_vocab,
    plamo2_vocab_path,
    write_plamo2_gguf,
)
from conformance.gate import cached
from conformance.strategies.tokenizer import unicode_texts

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


@pytest.mark.invariant("TOK-062")
@pytest.mark.requires("model.errors")
def test_missing_byte_token_refused(target: Any, tmp_path: Path) -> None:
    types = list(TYPES)
    types[TOKENS.index("<0x41>")] = 1  # <0x41> typed NORMAL: byte 0x41 has no BYTE token
    path = tmp_path / "plamo2.gguf"
    write_plamo2_gguf(path, types=tuple(types))
    with raises_code("GGUF_INVALID_HPARAM", field="tokenizer.ggml.token_type"):
        target.load_vocab(str(path))
