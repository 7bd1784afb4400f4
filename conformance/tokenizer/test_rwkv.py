"""The RWKV (``rwkv``) tokenizer over a synthetic vocabulary-only "world" vocabulary: goldens,
greedy longest match against an oracle that unescapes token texts with Python's own parser,
pieces and round trips."""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path
from typing import Any

import gguf
import pytest
from hypothesis import given

from conformance.assertions import raises_code
from conformance.fixtures.cache import finish_gguf
from conformance.fixtures.vocabularies import rwkv_vocab, rwkv_vocab_path
from conformance.gate import cached
from conformance.strategies.tokenizer import unicode_texts
from conformance.tokenizer.space_prefix import assert_keeps_leading_space, assert_strips_first_space

pytestmark = pytest.mark.requires("tokenizer.tokenize", "tokenizer.vocab_only")

RWKV_CORPUS = [
    "",
    " ",
    "Hello world",
    "The tokenizer tokens\n\n\ttab",
    "<s>x</s>",
    "naïve café 日本語 🙂",
    "\\x41 \\n backslash \\",
    "a\x00b\x1cc",
]


@pytest.fixture
def rwkv(target: Any) -> Any:
    return cached(target, "load_vocab", str(rwkv_vocab_path()))


def _literal(body: str) -> bytes:
    """Python's reading of a ``repr(bytes)`` body (it was quoted with ' unless it holds one)."""
    for quote in ("'", '"'):
        try:
            value = ast.literal_eval(f"b{quote}{body}{quote}")
        except SyntaxError:
            continue
        assert isinstance(value, bytes)
        return value
    raise AssertionError(body)


@lru_cache(maxsize=1)
def _oracle_pieces() -> dict[bytes, int]:
    """Token bytes by Python's reading of the ``repr(bytes)`` bodies (last id wins)."""
    return {_literal(t): i for i, t in enumerate(rwkv_vocab())}


def _greedy(text: str) -> list[int]:
    pieces = _oracle_pieces()
    data, out, pos = text.encode(), [], 0
    while pos < len(data):
        end = max(e for e in range(pos + 1, len(data) + 1) if data[pos:e] in pieces)
        out.append(pieces[data[pos:end]])
        pos = end
    return out


@pytest.mark.invariant("TOK-053")
def test_golden_rwkv_tokenization(target: Any, rwkv: Any, snapshot: Any) -> None:
    got = {
        f"{text!r} add_special={a} parse_special={p}": target.tokenize(rwkv, text, a, p)
        for text in RWKV_CORPUS
        for a in (False, True)
        for p in (False, True)
    }
    assert got == snapshot


@pytest.mark.invariant("TOK-053")
@given(text=unicode_texts)
def test_greedy_longest_match(target: Any, rwkv: Any, text: str) -> None:
    """Greedy longest match over the unescaped token bytes (``<s>`` is matched as text too);
    add_special adds nothing; the pieces give the text back."""
    ids = target.tokenize(rwkv, text, False, False)
    assert ids == _greedy(text), repr(text)
    assert target.tokenize(rwkv, text, True, False) == ids
    assert target.detokenize(rwkv, ids, False, True) == text.encode()


@pytest.mark.invariant("TOK-053")
@pytest.mark.parametrize("text", [" ", " Hello world", "  x ", " \t\nnaïve"])
def test_detokenize_keeps_leading_space(target: Any, rwkv: Any, text: str) -> None:
    """RWKV adds no space prefix, so detokenize has none to remove: a text that starts with a
    space comes back whole under every flag combination (the fixture writes no
    ``add_space_prefix`` key: the family default, off, decides)."""
    assert_keeps_leading_space(target, rwkv, (text,))


@pytest.mark.invariant("TOK-053")
def test_rwkv_pieces(target: Any, rwkv: Any) -> None:
    for raw, tid in _oracle_pieces().items():
        if tid == 0:
            assert target.token_to_piece(rwkv, 0, False) == b""
            assert target.token_to_piece(rwkv, 0, True) == b"<s>"
        else:
            assert target.token_to_piece(rwkv, tid, False) == raw


@pytest.mark.invariant("TOK-010")
@pytest.mark.requires("model.errors")
def test_out_of_range_ids(target: Any, rwkv: Any) -> None:
    """RWKV's ``token_to_piece`` and ``detokenize`` refuse an id outside [0, n_vocab): -1 is
    no alias of the last token."""
    n = target.vocab_size(rwkv)
    for bad in (-1, -n, n, 10**6):
        for special in (False, True):
            with raises_code("TOK_TOKEN_RANGE", what="token_to_piece"):
                target.token_to_piece(rwkv, bad, special)
        with raises_code("TOK_TOKEN_RANGE", index=1, what="detokenize"):
            target.detokenize(rwkv, [1, bad], False, False)


@pytest.mark.invariant("TOK-080")
def test_space_prefix_key_strips_the_first_piece(target: Any, rwkv: Any, tmp_path: Path) -> None:
    """``add_space_prefix = true`` adds no space when tokenizing, but detokenize removes one
    leading space of the first piece (the fixture's two- and three-space tokens keep the
    rest)."""
    tokens = rwkv_vocab()
    path = tmp_path / "rwkv-prefix.gguf"
    w = gguf.GGUFWriter(str(path), "rwkv6")
    w.add_tokenizer_model("rwkv")
    w.add_token_list(list(tokens))
    w.add_token_types([3] + [1] * (len(tokens) - 1))
    w.add_bos_token_id(0)
    w.add_eos_token_id(0)
    w.add_add_space_prefix(True)
    finish_gguf(w)
    vocab = target.load_vocab(str(path))
    two = tokens.index("  ")
    assert target.tokenize(vocab, "  x", False, False)[0] == two
    assert_strips_first_space(target, vocab, rwkv, ("  x", "   ", " Hello world", "Hi ", "x  y"))


# Token texts outside Python's ``repr(bytes)`` form, with the bytes llama.cpp reads from them:
# a hex digit above '9' counts from 'a' even when upper case ("\\x4A" = 4 * 16 + 17 = "Q"), a
# backslash before any other character stands for it, an unfinished "\\x" and a trailing
# backslash add nothing.
ESCAPES = (
    ("<s>", b"<s>"),
    ("e\\", b"e"),
    ("\\q", b"q"),
    ("\\x4A", b"Q"),
    ("\\x6a", b"j"),
    ("\\\\", b"\\"),
    ("\\t", b"\t"),
    ("k\\x6", b"k"),
)


@pytest.mark.invariant("TOK-085")
def test_escaped_token_texts(target: Any, tmp_path: Path) -> None:
    path = tmp_path / "rwkv-escapes.gguf"
    w = gguf.GGUFWriter(str(path), "rwkv6")
    w.add_tokenizer_model("rwkv")
    w.add_token_list([t for t, _ in ESCAPES])
    w.add_token_types([3] + [1] * (len(ESCAPES) - 1))
    w.add_bos_token_id(0)
    w.add_eos_token_id(0)
    finish_gguf(w)
    vocab = target.load_vocab(str(path))
    pieces = [target.token_to_piece(vocab, i, True) for i in range(len(ESCAPES))]
    assert pieces == [raw for _, raw in ESCAPES]
    text = b"".join(raw for _, raw in ESCAPES[1:]).decode()
    assert target.tokenize(vocab, text, False, False) == list(range(1, len(ESCAPES)))


# A vocabulary without the one-byte tokens: no token starts with "x", "z" or NUL; "c" starts
# only "cd"; "é" is one two-byte token.
SPARSE = ("<s>", "a", "b", "ab", "cd", "\\xc3\\xa9")


def _write_sparse(path: Path, unk: int | None) -> str:
    w = gguf.GGUFWriter(str(path), "rwkv6")
    w.add_tokenizer_model("rwkv")
    w.add_token_list(list(SPARSE))
    w.add_token_types([3] + [1] * (len(SPARSE) - 1))
    w.add_bos_token_id(0)
    w.add_eos_token_id(0)
    if unk is not None:
        w.add_unk_token_id(unk)
    finish_gguf(w)
    return str(path)


@pytest.mark.invariant("TOK-076")
@pytest.mark.parametrize("unk", [None, 2])
def test_a_byte_no_token_starts_with_is_unk(target: Any, tmp_path: Path, unk: int | None) -> None:
    vocab = target.load_vocab(_write_sparse(tmp_path / "rwkv-sparse.gguf", unk))
    u = -1 if unk is None else unk  # no unknown_token_id key: RWKV has no UNK (LLAMA_TOKEN_NULL)
    got = {t: target.tokenize(vocab, t, False, False) for t in ("xab", "abx", "zz", "é!", "\x00a")}
    assert got == {"xab": [u, 3], "abx": [3, u], "zz": [u, u], "é!": [5, u], "\x00a": [u, 1]}
    assert target.tokenize(vocab, "cdab", False, False) == [4, 3]


@pytest.mark.invariant("TOK-076")
@pytest.mark.requires("model.errors")
def test_a_byte_only_longer_tokens_start_with_is_refused(target: Any, tmp_path: Path) -> None:
    # llama.cpp emits id 0 and restarts at offset 0 here, forever: not run against it
    vocab = target.load_vocab(_write_sparse(tmp_path / "rwkv-sparse.gguf", 2))
    with raises_code("TOK_RWKV_NO_TOKEN", field="text", index=3):
        target.tokenize(vocab, "abxce", False, False)
