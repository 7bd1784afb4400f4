"""BPE pre-tokenizers: how a text fragment is cut into words before merges.

llama.cpp picks a list of regular expressions per ``tokenizer.ggml.pre`` value and applies them
by successive refinement: the text starts as one segment, each expression runs inside every
current segment and replaces it by its pieces (the gaps between matches and the matches
themselves, empty pieces dropped). Nothing an expression does can look past a segment's end.

Each expression runs one of two ways, and both are reproduced here because their edge cases
differ from a Unicode-aware regex engine:

* **Hand-written scanners** for the GPT-2, Llama-3 and Qwen2 expressions (llama.cpp's own code
  paths, chosen by exact string equality). They classify code points with llama.cpp's
  category table (:mod:`.unicode`), so e.g. an unassigned code point counts as "not a letter,
  number or space".
* **The std::regex fallback** for every other expression. If the expression names a Unicode
  category (``\\p{L}`` ...), each code point is first collapsed to one character: ASCII stays,
  non-ASCII whitespace becomes ``\\v``, a non-ASCII letter/number/punctuation/mark/symbol becomes
  one stand-in character per category and anything else another; the category escapes are
  rewritten into classes of the stand-in plus the category's ASCII members. Otherwise the
  expression runs on the code points with non-ASCII whitespace turned into ``\\v``. In both
  cases ``\\s`` means ASCII whitespace only and ``$`` the segment's end (ECMAScript rules).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from reference_impl.spec_links import implements
from reference_impl.tokenizer import unicode as uni

# The expressions, written the way llama.cpp spells them (its custom scanners are chosen by
# exact equality with these strings).
CONTRACTIONS_CI = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
LLAMA3 = (
    CONTRACTIONS_CI
    + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2 = (
    CONTRACTIONS_CI
    + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_GPT4O_WORD = (
    r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+"
    + CONTRACTIONS_CI
    + r"?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*"
    + CONTRACTIONS_CI
    + r"?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Written with escapes: several of these characters change under NFC normalization.
_DEEPSEEK_LLM_LETTERS = (
    "A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293"
    "\u0295-\u02af\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c"
    "\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5"
    "\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77"
    "\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59"
    "\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc"
    "\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107"
    "\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"
    "\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee"
    "\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e"
    "\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a"
    "\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2"
    "\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943"
)
_DEEPSEEK_LLM_PUNCT = "!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002"
_CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"

# pre type -> expressions, in the order llama.cpp applies them
PRE_REGEXES: dict[str, tuple[str, ...]] = {
    "default": (r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"),
    "gpt2": (GPT2,),
    "llama3": (LLAMA3,),
    "qwen2": (QWEN2,),
    "deepseek-llm": (
        "[\r\n]",
        r"\s?[" + _DEEPSEEK_LLM_LETTERS + "]+",
        r"\s?[" + _DEEPSEEK_LLM_PUNCT + "]+",
        r"\s+$",
        _CJK,
        r"\p{N}+",
    ),
    "deepseek-coder": ("[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK, r"\p{N}"),
    "falcon": (r"[\p{P}\$\+<=>\^~\|`]+", GPT2, "[0-9][0-9][0-9]"),
    "starcoder": (r"\p{N}", GPT2),
    "gpt-4o": (_GPT4O_WORD,),
}


@dataclass(frozen=True)
class PreType:
    """What a ``tokenizer.ggml.pre`` string selects: the expressions and the flags llama.cpp
    sets with them (GGUF keys may still override ``add_bos``)."""

    regexes: tuple[str, ...]
    ignore_merges: bool = False
    add_bos: bool = False
    clean_spaces: bool = True


# tokenizer.ggml.pre strings -> (expression family, flags); "" is the missing key.
PRE_TYPES: dict[str, PreType] = {}
for _names, _family, _extra in (
    (("", "default"), "default", {}),
    (
        ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0"),
        "llama3",
        {"ignore_merges": True, "add_bos": True},
    ),
    (("lfm2",), "llama3", {"ignore_merges": True, "add_bos": True}),
    (("dbrx", "smaug-bpe"), "llama3", {}),
    (("deepseek-llm",), "deepseek-llm", {"clean_spaces": False}),
    (("deepseek-coder",), "deepseek-coder", {"clean_spaces": False}),
    (("falcon",), "falcon", {}),
    (
        ("gpt-2", "phi-2", "mpt", "olmo", "jais", "gigachat", "mellum", "jina-v2-de", "jina-v2-es"),
        "gpt2",
        {},
    ),
    (("starcoder", "refact", "codeshell", "exaone"), "starcoder", {}),
    (("command-r", "smollm"), "starcoder", {"clean_spaces": False}),
    (("qwen2", "deepseek-r1-qwen"), "qwen2", {"clean_spaces": False}),
    (("stablelm2",), "qwen2", {}),
    (("gpt-4o", "llama4", "kanana2"), "gpt-4o", {"clean_spaces": False}),
):
    for _name in _names:
        PRE_TYPES[_name] = PreType(PRE_REGEXES[_family], **_extra)


# -- hand-written scanners ----------------------------------------------------------------------

Scanner = Callable[[Sequence[int], int, int], list[int]]


def _contraction(cps: Sequence[int], pos: int, end: int, fold: bool) -> int:
    """Length of a ``'s 't 're 've 'm 'll 'd`` contraction at ``pos`` (0 if none)."""
    if cps[pos] != ord("'") or pos + 1 >= end:
        return 0

    def at(i: int) -> str:
        c = cps[i]
        return chr(uni.to_lower(c) if fold else c)

    if at(pos + 1) in "stmd":
        return 2
    if pos + 2 < end and at(pos + 1) + at(pos + 2) in ("re", "ve", "ll"):
        return 3
    return 0


@implements("TOK-050")
def scan_gpt2(cps: Sequence[int], ini: int, end: int) -> list[int]:
    """GPT-2's expression over ``cps[ini:end]``; returns the word lengths."""

    def fl(i: int) -> int:
        return uni.flags(cps[i]) if ini <= i < end else 0

    out: list[int] = []
    pos = ini
    while pos < end:
        start = pos
        n = _contraction(cps, pos, end, fold=False)
        if n:
            pos += n
            out.append(n)
            continue
        space = cps[pos] == 0x20
        f2 = fl(pos + 1) if space else fl(pos)
        for cls in (uni.LETTER, uni.NUMBER):
            if f2 & cls:
                pos += space
                while fl(pos) & cls:
                    pos += 1
                break
        else:
            if f2 and not f2 & (uni.WHITESPACE | uni.LETTER | uni.NUMBER):
                pos += space
                while True:
                    f = fl(pos)
                    if not f or f & (uni.WHITESPACE | uni.LETTER | uni.NUMBER):
                        break
                    pos += 1
            else:
                pos = _whitespace_gpt2(cps, pos, end, fl)
        out.append(pos - start)
    return out


def _whitespace_gpt2(cps: Sequence[int], pos: int, end: int, fl: Callable[[int], int]) -> int:
    """``\\s+(?!\\S)`` then ``\\s+``: a run of 2+ spaces followed by more text leaves its last
    space to the next word; otherwise one code point."""
    n = 0
    while fl(pos + n) & uni.WHITESPACE:
        n += 1
    if n > 1 and pos + n < end:
        return pos + n - 1
    return pos + max(n, 1)


@implements("TOK-050")
def _scan_llama3_like(digits: int | None) -> Scanner:
    """Llama-3's expression (``digits`` = 3) or Qwen2's (``digits`` = 1)."""

    def scan(cps: Sequence[int], ini: int, end: int) -> list[int]:
        def fl(i: int) -> int:
            return uni.flags(cps[i]) if ini <= i < end else 0

        def cp(i: int) -> int:
            return cps[i] if ini <= i < end else -1

        out: list[int] = []
        pos = ini
        while pos < end:
            start = pos
            c, f = cps[pos], fl(pos)
            n = _contraction(cps, pos, end, fold=True)
            if n:
                out.append(n)
                pos += n
                continue
            # [^\r\n\p{L}\p{N}]?\p{L}+ : one optional non-letter lead, then letters
            if c not in (0x0D, 0x0A) and not f & uni.NUMBER and (f | fl(pos + 1)) & uni.LETTER:
                pos += 1
                while fl(pos) & uni.LETTER:
                    pos += 1
                out.append(pos - start)
                continue
            if f & uni.NUMBER:  # \p{N}{1,3} (or \p{N}): digits in fixed-size chunks
                assert digits is not None
                while fl(pos) & uni.NUMBER:
                    chunk = pos
                    while pos - chunk < digits and fl(pos) & uni.NUMBER:
                        pos += 1
                    out.append(pos - chunk)
                continue
            # ' ?[^\s\p{L}\p{N}]+[\r\n]*'
            f2 = fl(pos + 1) if c == 0x20 else f
            if not f2 & (uni.WHITESPACE | uni.LETTER | uni.NUMBER):
                pos += c == 0x20
                while True:
                    g = fl(pos)
                    if not g or g & (uni.WHITESPACE | uni.LETTER | uni.NUMBER):
                        break
                    pos += 1
                while cp(pos) in (0x0D, 0x0A):
                    pos += 1
                out.append(pos - start)
                continue
            # \s*[\r\n]+ : a whitespace run containing a newline ends after its last \r or \n
            n = 0
            last_nl = -1
            while fl(pos + n) & uni.WHITESPACE:
                if cps[pos + n] in (0x0D, 0x0A):
                    last_nl = pos + n + 1
                n += 1
            if last_nl >= 0:
                pos = last_nl
            else:
                pos = _whitespace_gpt2(cps, pos, end, fl)
            out.append(pos - start)
        return out

    return scan


_SCANNERS: dict[str, Scanner] = {
    GPT2: scan_gpt2,
    LLAMA3: _scan_llama3_like(3),
    QWEN2: _scan_llama3_like(1),
}


# -- the std::regex fallback --------------------------------------------------------------------

# category escape -> (stand-in character, the category's ASCII members as class syntax)
_COLLAPSE = {
    r"\p{N}": (uni.NUMBER, "\xd1", "0-9"),
    r"\p{L}": (uni.LETTER, "\xd2", "A-Za-z"),
    r"\p{P}": (uni.PUNCTUATION, "\xd3", r"!-#%-*,-/:-;?-@\[-\]_\{\}"),
    r"\p{M}": (uni.MARK, "\xd4", ""),
    r"\p{S}": (uni.SYMBOL, "\xd5", r"\$\+<->\^`\|~"),
}
_STAND_IN = {bit: ch for bit, ch, _ in _COLLAPSE.values()}
_OTHER = "\xd0"


def _collapse_char(cpt: int) -> str:
    if cpt < 0x80:
        return chr(cpt)
    f = uni.flags(cpt)
    if f & uni.WHITESPACE:
        return "\x0b"
    return _STAND_IN.get(f & uni.CATEGORIES, _OTHER)


def _plain_char(cpt: int) -> str:
    return "\x0b" if cpt >= 0x80 and uni.flags(cpt) & uni.WHITESPACE else chr(cpt)


@lru_cache(maxsize=64)
def _compile(regex: str) -> tuple[re.Pattern[str], bool]:
    """(Python pattern, whether it runs on collapsed text)."""
    collapsed = any(esc in regex for esc in _COLLAPSE)
    out = []
    inside = False
    i = 0
    while i < len(regex):
        ch = regex[i]
        if ch == "\\" and i + 1 < len(regex):
            esc = regex[i : i + 5]
            if esc in _COLLAPSE:
                _, stand_in, members = _COLLAPSE[esc]
                body = re.escape(stand_in) + members
                out.append(body if inside else f"[{body}]")
                i += 5
                continue
            out.append(regex[i : i + 2])
            i += 2
            continue
        if ch == "[":
            inside = True
        elif ch == "]":
            inside = False
        elif ch == "$" and not inside:
            ch = r"\Z"  # ECMAScript '$' (no multiline): only the end of the segment
        out.append(ch)
        i += 1
    return re.compile("".join(out), re.ASCII), collapsed


def _regex_split(regex: str) -> Scanner:
    pattern, collapsed = _compile(regex)
    to_char = _collapse_char if collapsed else _plain_char

    def scan(cps: Sequence[int], ini: int, end: int) -> list[int]:
        seg = "".join(to_char(c) for c in cps[ini:end])
        out: list[int] = []
        prev = 0
        for m in pattern.finditer(seg):
            if m.start() > prev:
                out.append(m.start() - prev)
            out.append(m.end() - m.start())
            prev = m.end()
        if prev < len(seg):
            out.append(len(seg) - prev)
        return [n for n in out if n > 0]

    return scan


def scanner(regex: str) -> Scanner:
    return _SCANNERS.get(regex) or _regex_split(regex)


@implements("TOK-050")
def split_words(text: str, regexes: Sequence[str]) -> list[str]:
    """The words of ``text`` after every expression of the pre type, in order."""
    cps = [ord(c) for c in text]
    lengths = [len(cps)] if cps else []
    for regex in regexes:
        scan = scanner(regex)
        refined: list[int] = []
        start = 0
        for n in lengths:
            refined += scan(cps, start, start + n)
            start += n
        lengths = refined
    words = []
    start = 0
    for n in lengths:
        words.append(text[start : start + n])
        start += n
    return words
