"""LSTRIP / RSTRIP attributes that llama.cpp derives from a vocabulary's model name, pre type or
architecture (TOK-068), over the BPE fixture with ``<s> </s> <unk> <mask> [MASK]`` appended
(:func:`conformance.fixtures.vocabularies.strip_vocab_path`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.assertions import raises_code
from conformance.fixtures.vocabularies import (
    STRIP_EXTRA,
    STRIP_VARIANTS,
    bpe_vocab,
    strip_vocab_path,
    write_strip_gguf,
)
from conformance.gate import cached
from conformance.strategies.tokenizer import unicode_texts
from conformance.tokenizer.test_bpe import _no_specials

pytestmark = pytest.mark.requires("tokenizer.tokenize", "tokenizer.vocab_only")

TOKENS = (*bpe_vocab()[0], *(t for t, _ in STRIP_EXTRA))
SPECIALS = ("<|endoftext|>", "<|pad|>", "<|sep|>", "<s>", "</s>", "<unk>", "<mask>", "[MASK]")
C_SPACE = " \t\n\v\f\r"
# variant -> (LSTRIP texts, RSTRIP texts)
STRIPS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "plain": ((), ()),
    "phi-3": ((), ("<|pad|>", "<|sep|>", "</s>", "<mask>", "[MASK]")),
    "modern-bert": (("[MASK]",), ()),
    "jina-v2-de": (("<mask>",), ()),
    "nomic-bert-moe": (("<mask>",), ()),
    "jina-and-phi-3": (("<mask>",), ()),
}
assert set(STRIPS) == set(STRIP_VARIANTS)

# (variant, text, the tokens' texts with parse_special), as llama.cpp 0.3.36 gives them
CASES = [
    ("plain", "a <|sep|>  b", ["a", "Ġ", "<|sep|>", "Ġ", "Ġ", "b"]),
    ("plain", "x [MASK] y", ["x", "Ġ", "[MASK]", "Ġ", "y"]),  # [MASK] LSTRIP needs the name
    ("phi-3", "a <|sep|>  b", ["a", "Ġ", "<|sep|>", "b"]),
    ("phi-3", "a  <|pad|>\t b", ["a", "ĠĠ", "<|pad|>", "b"]),
    ("phi-3", "a\v<|pad|>\f\r b", ["a", "ċ", "<|pad|>", "b"]),
    ("phi-3", "a\u00a0<|pad|>\u00a0b", ["a", "Â", "ł", "<|pad|>", "Â", "ł", "b"]),  # not C space
    ("phi-3", "x </s> y", ["x", "Ġ", "</s>", "y"]),
    ("phi-3", "x <s> y", ["x", "Ġ", "<s>", "Ġ", "y"]),
    ("phi-3", "x <unk> y", ["x", "Ġ", "<unk>", "Ġ", "y"]),
    ("phi-3", "x <|endoftext|> y", ["x", "Ġ", "<|endoftext|>", "Ġ", "y"]),
    ("phi-3", " \n<|sep|>\n ", ["ĠĊ", "<|sep|>"]),
    ("phi-3", "<|sep|> <|sep|> x", ["<|sep|>", "<|sep|>", "x"]),
    ("modern-bert", "x [MASK] y", ["x", "[MASK]", "Ġ", "y"]),
    ("modern-bert", "x <mask> y", ["x", "Ġ", "<mask>", "Ġ", "y"]),
    ("modern-bert", " \t [MASK]", ["[MASK]"]),
    ("jina-v2-de", "x <mask> y", ["x", "<mask>", "Ġ", "y"]),
    ("jina-v2-de", "x [MASK] y", ["x", "Ġ", "[MASK]", "Ġ", "y"]),
    ("nomic-bert-moe", "x  <mask> y", ["x", "<mask>", "Ġ", "y"]),
    ("jina-and-phi-3", "a <|sep|>  b <mask>", ["a", "Ġ", "<|sep|>", "Ġ", "Ġ", "b", "<mask>"]),
]


@pytest.fixture(params=list(STRIP_VARIANTS))
def strip_variant(request: Any) -> str:
    return str(request.param)


@pytest.fixture
def strip_vocab(target: Any, strip_variant: str) -> Any:
    return cached(target, "load_vocab", str(strip_vocab_path(strip_variant)))


@pytest.mark.invariant("TOK-068")
@pytest.mark.parametrize(
    ("strip_variant", "text", "pieces"),
    CASES,
    ids=[c[0] for c in CASES],
    indirect=["strip_variant"],
)
def test_strip_cases(target: Any, strip_vocab: Any, text: str, pieces: list[str]) -> None:
    got = [TOKENS[i] for i in target.tokenize(strip_vocab, text, False, True)]
    assert got == pieces, repr(text)


@pytest.mark.invariant("TOK-068")
@given(left=unicode_texts, right=unicode_texts, special=st.sampled_from(SPECIALS))
def test_strip_partition_rule(
    target: Any, strip_vocab: Any, strip_variant: str, left: str, right: str, special: str
) -> None:
    """tokenize(a + S + b) = tokenize(a') + [S] + tokenize(b'), a' = a less trailing C space
    when S has LSTRIP, b' = b less leading C space when S has RSTRIP."""
    left, right = _no_specials(left), _no_specials(right)
    lstrip, rstrip = STRIPS[strip_variant]
    a = left.rstrip(C_SPACE) if special in lstrip else left
    b = right.lstrip(C_SPACE) if special in rstrip else right
    want = [
        *target.tokenize(strip_vocab, a, False, True),
        TOKENS.index(special),
        *target.tokenize(strip_vocab, b, False, True),
    ]
    assert target.tokenize(strip_vocab, left + special + right, False, True) == want


@pytest.mark.invariant("TOK-068")
@pytest.mark.requires("model.errors")
@pytest.mark.parametrize("missing", ["</s>", "<unk>", "<s>", "<|endoftext|>"])
def test_phi3_without_its_tokens_refused(target: Any, tmp_path: Path, missing: str) -> None:
    path = tmp_path / "phi3.gguf"
    if missing == "<|endoftext|>":
        # the fixture's end-of-text token: rename it rather than drop it (ids stay dense)
        write_strip_gguf(path, "phi-3", eot_text="<|eot|>")
    else:
        write_strip_gguf(path, "phi-3", drop=(missing,))
    with raises_code("GGUF_INVALID_HPARAM", field="tokenizer.ggml.tokens"):
        target.load_vocab(str(path))
