"""SPM options (``add_space_prefix``, ``add_bos_token``, ``add_eos_token``,
``remove_extra_whitespaces``) on vocabulary-only copies of the SPM fixture vocabulary."""

from __future__ import annotations

from typing import Any

import pytest

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
