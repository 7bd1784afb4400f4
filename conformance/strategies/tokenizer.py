"""Hypothesis strategies for the tokenizer area: text that reaches the edges of pre-tokenizers.

Arbitrary Unicode (any category but surrogates, which UTF-8 cannot carry) is mixed with the
characters tokenizers treat specially: ASCII letters/digits/punctuation, contractions, spaces,
tabs, newline and carriage-return runs, non-ASCII whitespace (NBSP, ideographic space, U+2028),
the C0 separators U+001C..U+001F (whitespace to Python but not to llama.cpp), combining marks,
emoji with modifiers and ZWJ, CJK and Hangul, Greek/Cyrillic letters, non-ASCII digits and
number forms, private-use and unassigned code points.
"""

from __future__ import annotations

import random

from hypothesis import strategies as st

EDGE_PIECES = [
    "a",
    "Z",
    "word",
    "The",
    "0",
    "7",
    "123",
    "4567",
    "'s",
    "'T",
    "'re",
    "'LL",
    "'d",
    "'",
    " ",
    "  ",
    "   ",
    "\t",
    "\n",
    "\n\n",
    "\r\n",
    " \n",
    "\v",
    "\f",
    ".",
    ",",
    "!",
    "?",
    "...",
    "-",
    "_",
    "$",
    "+",
    "<",
    "=",
    ">",
    "^",
    "~",
    "|",
    "`",
    "/",
    "\\",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    '"',
    "#",
    "%",
    "&",
    "*",
    "@",
    ":",
    ";",
    "\u00a0",
    "\u3000",
    "\u2028",
    "\u0085",
    "\u1680",
    "\u200b",
    "\x1c",
    "\x1f",
    "\x00",
    "\x7f",
    "\u0301",
    "e\u0301",
    "\u0915\u094d",
    "é",
    "ü",
    "ß",
    "Ä",
    "ǅ",
    "µ",
    "ſ",
    "İ",
    "🙂",
    "👍🏽",
    "👩\u200d💻",
    "🇺🇳",
    "✨",
    "日本",
    "語",
    "中文",
    "한국어",
    "ひらがな",
    "カタカナ",
    "ｱ",
    "！",
    "。",
    "，",
    "привет",
    "ΓΕΙΑ",
    "λόγος",
    "٣",
    "½",
    "²",
    "Ⅻ",
    "①",
    "€",
    "©",
    "–",
    "…",
    "\ue000",
    "\U000f0000",
    "\u0378",
    "\U000e0001",
    "\ufeff",
    "\ufffd",
]

edge_pieces = st.sampled_from(EDGE_PIECES)
any_char = st.characters(exclude_categories=["Cs"])

# Joined pieces: mostly edge cases, sometimes arbitrary code points.
unicode_texts = st.lists(st.one_of(edge_pieces, edge_pieces, any_char), max_size=24).map("".join)

# ASCII text whose classes every regex engine agrees on (no U+001C..U+001F, no \v \f).
ascii_texts = st.lists(
    st.one_of(
        st.sampled_from(
            [
                "a",
                "Z",
                "word",
                "The",
                "0",
                "123",
                "4567",
                "'s",
                "'T",
                "'re",
                "'ll",
                "'",
                " ",
                "  ",
                "   ",
                "\t",
                "\n",
                "\n\n",
                " \n",
                "\r\n",
                ".",
                ",",
                "!",
                "?",
                "-",
                "$",
                "+",
                "<",
                "=",
                "^",
                "~",
                "|",
                "`",
                "/",
                "(",
                ")",
                "{",
                '"',
                "#",
                "%",
                "@",
                ":",
                "_",
            ]
        ),
        st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=4),
    ),
    max_size=20,
).map("".join)


# -- Plain seeded generators (no hypothesis): cheap bulk input for batch parity and benches ----

_SURROGATES = range(0xD800, 0xE000)


def _random_char(rng: random.Random) -> str:
    """A code point other than a surrogate, mostly from the BMP (where the scripts are)."""
    while True:
        cp = rng.randrange(0x80) if rng.random() < 0.3 else rng.randrange(0x3_0000)
        if rng.random() < 0.05:
            cp = rng.randrange(0x11_0000)
        if cp not in _SURROGATES:
            return chr(cp)


def random_texts(n: int, seed: int, max_pieces: int = 24) -> list[str]:
    """``n`` texts drawn like :data:`unicode_texts` (0..``max_pieces`` pieces, two thirds edge
    pieces, a third arbitrary code points) from ``random.Random(seed)``: the same list on every
    run, thousands per second."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = [
            rng.choice(EDGE_PIECES) if rng.random() < 2 / 3 else _random_char(rng)
            for _ in range(rng.randint(0, max_pieces))
        ]
        out.append("".join(parts))
    return out


_PROSE = (  # noqa: SIM905 (a sentence reads better than a list)
    "the of and to in is that it for on with as was at by this be from or are an not have "
    "model token tokens merge bytes text line Hello World Python Llama don't it's we're I'm"
).split()
_SCRIPTS = (
    "日本語の文章を分割します。 中文文本的分词测试。 한국어 텍스트 토큰화",  # CJK, Hangul
    "привет мир, это проверка токенизатора. Съешь же ещё этих мягких булок",  # Cyrillic
    "مرحبا بالعالم هذا اختبار للمحلل",  # Arabic
    "🙂 👍🏽 🚀 ✨ 👩\u200d💻 🇺🇳",  # emoji, modifiers, ZWJ, flags
    "cafe\u0301 nai\u0308ve re\u0301sume\u0301 \u0915\u094d\u0937 a\u0303\u0323",  # combining
)
_WS = [" ", " ", " ", "  ", "    ", "\t", "\n", "\n\n", " \n", "\r\n", "        "]


def mixed_script_text(n_bytes: int, seed: int = 20261126) -> str:
    """A deterministic text of at least ``n_bytes`` UTF-8 bytes: ASCII prose with punctuation
    and numbers, whitespace runs, and words from CJK, Hangul, Cyrillic, Arabic, emoji and
    combining-mark runs, mixed line by line from ``random.Random(seed)``."""
    rng = random.Random(seed)
    foreign = [w for s in _SCRIPTS for w in s.split()]
    lines: list[str] = []
    size = 0
    while size < n_bytes:
        parts = []
        for _ in range(rng.randint(4, 16)):
            r = rng.random()
            if r < 0.55:
                parts.append(rng.choice(_PROSE) + rng.choice(["", "", "", ",", ".", "!", ":"]))
            elif r < 0.7:
                parts.append(str(rng.randint(0, 10 ** rng.randint(1, 9))))
            else:
                parts.append(rng.choice(foreign))
            parts.append(rng.choice(_WS))
        line = "".join(parts)
        lines.append(line)
        size += len(line.encode("utf-8"))
    return "".join(lines)
