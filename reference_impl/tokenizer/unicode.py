"""Unicode facts the tokenizers depend on, as llama.cpp's ``src/unicode.cpp`` defines them.

llama.cpp ships its own tables (Unicode 15.1). Python 3.11's ``unicodedata`` is Unicode 14.0, so
the categories come from ``unicodedata2`` 15.1, which gives the same table. Each code point has
exactly one category bit; an unassigned code point (``Cn``) is UNDEFINED, not CONTROL, and a
position outside the current segment has no bits at all (``0``).
"""

from __future__ import annotations

from functools import lru_cache

import unicodedata2

UNDEFINED = 0x0001
NUMBER = 0x0002
LETTER = 0x0004
SEPARATOR = 0x0008
MARK = 0x0010
PUNCTUATION = 0x0020
SYMBOL = 0x0040
CONTROL = 0x0080
CATEGORIES = 0x00FF
WHITESPACE = 0x0100

# llama.cpp's whitespace set: narrower than str.isspace (no U+001C..U+001F), wider than the
# Z category (tab, newline...).
WHITESPACE_CPTS = frozenset(
    [*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029]
) | {0x202F, 0x205F, 0x3000}

_CATEGORY_BIT = {
    "N": NUMBER,
    "L": LETTER,
    "Z": SEPARATOR,
    "M": MARK,
    "P": PUNCTUATION,
    "S": SYMBOL,
    "C": CONTROL,
}


@lru_cache(maxsize=65536)
def flags(cpt: int) -> int:
    """The category bit of ``cpt`` plus WHITESPACE when it is in llama.cpp's whitespace set.
    ``cpt`` comes from a Python string, so it is at most U+10FFFF (llama.cpp meets larger ones
    only when decoding invalid UTF-8 bytes, which never reach the reference)."""
    cat = unicodedata2.category(chr(cpt))
    bit = UNDEFINED if cat == "Cn" else _CATEGORY_BIT[cat[0]]
    return bit | (WHITESPACE if cpt in WHITESPACE_CPTS else 0)


def _gpt2_byte_table() -> tuple[str, ...]:
    """GPT-2's byte-level alphabet: printable Latin-1 bytes stand for themselves, the other 68
    bytes take the code points from U+0100 upwards in byte order."""
    keep = set(range(0x21, 0x7F)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    table = []
    extra = 0
    for b in range(256):
        if b in keep:
            table.append(chr(b))
        else:
            table.append(chr(0x100 + extra))
            extra += 1
    return tuple(table)


BYTE_TO_CHAR = _gpt2_byte_table()
CHAR_TO_BYTE = {c: b for b, c in enumerate(BYTE_TO_CHAR)}


def byte_encode(text: str) -> str:
    """The UTF-8 bytes of ``text``, each written as its GPT-2 alphabet character."""
    return "".join(BYTE_TO_CHAR[b] for b in text.encode("utf-8"))


def byte_decode(text: str) -> bytes:
    """Inverse of :func:`byte_encode`; a character outside the alphabet becomes llama.cpp's
    ``[UNK_BYTE_0x<hex>…]`` marker (hex of its UTF-8 bytes followed by the whole text)."""
    out = bytearray()
    for ch in text:
        b = CHAR_TO_BYTE.get(ch)
        if b is not None:
            out.append(b)
        else:
            out += b"[UNK_BYTE_0x" + ch.encode("utf-8").hex().encode() + text.encode() + b"]"
    return bytes(out)


def to_lower(cpt: int) -> int:
    """Simple 1:1 lower-case mapping (the only comparisons made are with ASCII letters)."""
    low = chr(cpt).lower()
    return ord(low) if len(low) == 1 else cpt
