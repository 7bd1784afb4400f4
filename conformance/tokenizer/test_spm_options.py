"""SPM options (``add_space_prefix``, ``add_bos_token``, ``add_eos_token``,
``remove_extra_whitespaces``) on vocabulary-only copies of the SPM fixture vocabulary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import pytest

from conformance.assertions import raises_code
from conformance.fixtures.cache import finish_gguf
from conformance.fixtures.vocabularies import SPM_OPTIONS, spm_options_path
from conformance.gate import cached

pytestmark = pytest.mark.requires("tokenizer.tokenize", "tokenizer.vocab_only")

BOS, EOS = 1, 2
TEXTS = ["Hello world", " two  spaces ", "a<|sep|>b", "<s>x</s>", "", "line\nbreak"]


def _load(target: Any, name: str) -> Any:
    return cached(target, "load_vocab", str(spm_options_path(name)))


def _pieces(target: Any, vocab: Any, ids: list[int]) -> bytes:
    return b"".join(target.token_to_piece(vocab, i, True) for i in ids)


@pytest.mark.invariant("TOK-055")
def test_no_space_prefix(target: Any) -> None:
    vocab = _load(target, "no-space-prefix")
    ids = target.tokenize(vocab, "Hello world", False, False)
    assert _pieces(target, vocab, ids) == b"Hello world"
    ids = target.tokenize(vocab, "one<|sep|>two", False, False)
    assert _pieces(target, vocab, ids) == b"one<|sep|>two"
    # nothing to remove: a leading space of the text survives detokenize
    ids = target.tokenize(vocab, " x", False, False)
    assert target.detokenize(vocab, ids, False, False) == b" x"


@pytest.mark.invariant("TOK-055")
@pytest.mark.parametrize("text", TEXTS)
def test_add_eos(target: Any, text: str) -> None:
    eos = _load(target, "eos")
    plain = target.tokenize(eos, text, False, False)
    assert target.tokenize(eos, text, True, False) == [BOS, *plain, EOS]
    ids = [BOS, *plain, EOS]
    # remove_special drops BOS (keeping the next piece's space) and the appended EOS
    shown = b"".join(target.token_to_piece(eos, i, False) for i in plain)
    assert target.detokenize(eos, ids, True, False) == shown
    unparsed = b"".join(target.token_to_piece(eos, i, True) for i in plain)
    assert target.detokenize(eos, ids, False, True) == b"<s>" + unparsed + b"</s>"
    no_bos = _load(target, "no-bos-eos")
    assert target.tokenize(no_bos, text, True, False) == [*plain, EOS]


def _write_default_ids(path: Path) -> str:
    """The SPM fixture vocabulary with ``add_eos_token`` on and no BOS / EOS / UNK id keys."""
    from conformance.fixtures.gguf_models import fixture_vocab

    tokens, scores, types = fixture_vocab()
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(list(tokens))
    w.add_token_scores(list(scores))
    w.add_token_types(list(types))
    w.add_bool("tokenizer.ggml.add_eos_token", True)
    finish_gguf(w)
    return str(path)


@pytest.mark.invariant("TOK-084")
def test_spm_default_special_ids(target: Any, tmp_path: Path) -> None:
    """Without the id keys an SPM vocabulary takes BOS 1 and EOS 2: ``add_special`` frames the
    text with them, as in the copy that writes the keys, and they unparse as ``<s>`` / ``</s>``."""
    bare = target.load_vocab(_write_default_ids(tmp_path / "default-ids.gguf"))
    written = _load(target, "eos")
    for text in ("Hello world", ""):
        ids = target.tokenize(bare, text, True, False)
        assert ids == target.tokenize(written, text, True, False), repr(text)
        assert (ids[0], ids[-1]) == (BOS, EOS), repr(text)
        shown = target.detokenize(bare, ids, False, True)
        assert shown == b"<s>" + _pieces(target, bare, ids[1:-1]) + b"</s>", repr(text)


@pytest.mark.invariant("TOK-055")
@pytest.mark.parametrize("text", [*TEXTS, "  many   spaces  ", "\t tab  "])
def test_remove_extra_whitespaces_is_ignored_by_spm(target: Any, text: str) -> None:
    base = _load(target, "eos")  # any variant without the key shares the tokenization
    extra = _load(target, "extra-whitespace")
    assert target.tokenize(extra, text, False, False) == target.tokenize(base, text, False, False)


@pytest.mark.invariant("TOK-067")
@pytest.mark.parametrize("name", list(SPM_OPTIONS))
def test_spm_options_match_peer(target: Any, peer: Any, name: str) -> None:
    from conformance.tokenizer.test_spm import CORPUS

    ours, theirs = _load(target, name), cached(peer, "load_vocab", str(spm_options_path(name)))
    for text in [*CORPUS, *TEXTS]:
        for add_special in (False, True):
            for parse_special in (False, True):
                ids = target.tokenize(ours, text, add_special, parse_special)
                assert ids == peer.tokenize(theirs, text, add_special, parse_special), text
                for remove in (False, True):
                    for unparse in (False, True):
                        assert target.detokenize(ours, ids, remove, unparse) == peer.detokenize(
                            theirs, ids, remove, unparse
                        ), (text, remove, unparse)


# An SPM vocabulary without the <0xXX> byte tokens. It holds U+00C3 'Ã' and U+00A9 '©', the
# Latin-1 characters whose code points are the UTF-8 bytes of 'é' (C3 A9): they are no stand-ins
# for those bytes.
NO_BYTES = ("<unk>", "<s>", "</s>", "\u2581", "a", "\u2581a", "\u00c3", "\u00a9")


def _write_no_bytes(path: Path) -> str:
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(list(NO_BYTES))
    w.add_token_scores([0.0, 0.0, 0.0, -1.0, -2.0, -0.5, -3.0, -3.0])
    w.add_token_types([2, 3, 3, 1, 1, 1, 1, 1])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    finish_gguf(w)
    return str(path)


@pytest.mark.invariant("TOK-078")
@pytest.mark.requires("model.errors")
@pytest.mark.parametrize("text", ["\u00e9", "a\u00e9", "b", "a b"])
def test_missing_byte_token_is_refused(target: Any, tmp_path: Path, text: str) -> None:
    """A character that needs byte fallback where the vocabulary has no ``<0xXX>`` token for a
    byte is refused (llama.cpp's ``token_to_id.at`` throws there); the call changes nothing."""
    vocab = target.load_vocab(_write_no_bytes(tmp_path / "no-bytes.gguf"))
    assert target.tokenize(vocab, "a a", False, False) == [5, 5]
    assert target.tokenize(vocab, "\u00c3\u00a9", False, False) == [3, 6, 7]
    with raises_code("TOK_NO_BYTE_TOKEN", field="text", what=repr(text)):
        target.tokenize(vocab, text, False, False)
    assert target.tokenize(vocab, "a a", True, False) == [1, 5, 5]
