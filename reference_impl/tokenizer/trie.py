"""Longest-match regular expressions: a set of keys written as a trie of nested groups.

``re`` tries the alternatives of a group in order and keeps the first that matches, so a plain
``key1|key2|...`` would need the keys longest first and would try them one by one at every
position. Written as a trie, each step goes down one character (the alternatives of a node
start with different characters, so at most one of them can go on); below a node where a key
ends, the empty alternative comes last, so the match stops there only when it cannot go on
(``(?:...|)`` is the greedy ``(?:...)?``, cheaper in ``re``). So
``pattern.match(text, pos)`` gives the longest key that starts ``text[pos:]``, all in C.

Each key character below a key end nests one more group; ``re`` compiles that recursively,
which works for keys of a few hundred characters (400 do, 600 overflow Python's stack).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

_END = ""  # marks "a key ends here" in a node (no key character is the empty string)


def _pattern(node: dict[str, Any]) -> str:
    """The pattern of the keys below ``node``, without the node's own character."""
    children = sorted((item for item in node.items() if item[0] != _END), key=_weight)
    leaf = {_END}  # a child that ends a key and has none below it
    alternatives = [
        re.escape(ch) + _pattern(child) for ch, child in children if child.keys() != leaf
    ]
    single = [re.escape(ch) for ch, child in children if child.keys() == leaf]  # one class
    if single:
        alternatives.append(single[0] if len(single) == 1 else f"[{''.join(single)}]")
    if alternatives and _END in node:
        alternatives.append("")  # a key ends here: the match may stop (tried last: greedy)
    if len(alternatives) < 2:
        return "".join(alternatives)
    return f"(?:{'|'.join(alternatives)})"


def _weight(item: tuple[str, dict[str, Any]]) -> int:
    # The alternatives of a node are disjoint, so their order changes only the speed: the
    # child with more keys below it (likelier to come up) is tried first.
    return -_count(item[1])


def _count(node: dict[str, Any]) -> int:
    return sum(1 if ch == _END else _count(child) for ch, child in node.items())


def longest_match(keys: Iterable[str]) -> str:
    """A pattern whose match at a position is the longest of ``keys`` starting there (the
    empty key is left out; with no keys the pattern never matches)."""
    root: dict[str, Any] = {}
    for key in keys:
        if key:
            node = root
            for ch in key:
                node = node.setdefault(ch, {})
            node[_END] = {}
    return _pattern(root) or "(?!)"


def longest_match_bytes(keys: Iterable[bytes]) -> bytes:
    """:func:`longest_match` for byte-string keys (each byte written as the Latin-1 character
    of the same value, so the pattern encodes back byte for byte)."""
    return longest_match(key.decode("latin-1") for key in keys).encode("latin-1")
