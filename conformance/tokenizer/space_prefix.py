"""Checks of the ``add_space_prefix`` key on the families whose default is off (RWKV, PLaMo-2):
the key changes nothing when tokenizing and removes one leading space of the first piece when
detokenizing. Shared by their test files so both families are held to the same check."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

FLAGS = [(remove, unparse) for remove in (False, True) for unparse in (False, True)]


def assert_detokenizes_to(target: Any, vocab: Any, ids: list[int], want: bytes, text: str) -> None:
    """``ids`` detokenize to ``want`` under every (remove_special, unparse_special) pair."""
    for remove_special, unparse_special in FLAGS:
        got = target.detokenize(vocab, ids, remove_special, unparse_special)
        assert got == want, (
            f"detokenize of {text!r} (ids {ids}) with remove_special={remove_special} "
            f"unparse_special={unparse_special}: got {got!r}, want {want!r}"
        )


def assert_keeps_leading_space(target: Any, vocab: Any, texts: Iterable[str]) -> None:
    """Without the key (family default off) a text comes back whole, leading space included."""
    for text in texts:
        ids = target.tokenize(vocab, text, False, False)
        assert_detokenizes_to(target, vocab, ids, text.encode(), text)


def assert_strips_first_space(target: Any, vocab: Any, plain: Any, texts: Iterable[str]) -> None:
    """``vocab`` (key true) tokenizes each text as ``plain`` (no key) does, and detokenizing
    drops exactly one leading space of the first piece."""
    for text in texts:
        ids = target.tokenize(vocab, text, False, False)
        assert ids == target.tokenize(plain, text, False, False), (
            f"add_space_prefix changed the tokens of {text!r}"
        )
        want = text.encode()[1:] if text.startswith(" ") else text.encode()
        assert_detokenizes_to(target, vocab, ids, want, text)
