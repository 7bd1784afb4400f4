"""BPE pre-tokenizers: how a text fragment is cut into words before merges.

llama.cpp picks a list of regular expressions per ``tokenizer.ggml.pre`` value and applies them
by successive refinement: the text starts as one segment, each expression runs inside every
current segment and replaces it by its pieces (the gaps between matches and the matches
themselves, empty pieces dropped). Nothing an expression does can look past a segment's end.

Each expression runs one of two ways, and both are reproduced here because their edge cases
differ from a Unicode-aware regex engine:

* **Hand-written scanners** for the GPT-2, Llama-3, Qwen2 and Qwen3.5 expressions and the
  digit-grouping triggers (``\\p{AFMoE_digits}`` and Tiny Aya's ``\\d{1,3}(?=...)``), llama.cpp's
  own code paths, chosen by exact string equality. They classify code points with llama.cpp's
  category table (:mod:`.unicode`), so e.g. an unassigned code point counts as "not a letter,
  number or space".
* **The std::regex fallback** for every other expression. If the expression names a Unicode
  category (``\\p{L}`` ...), each code point is first collapsed to one character: ASCII stays,
  non-ASCII whitespace becomes ``\\v``, a non-ASCII letter/number/punctuation/mark/symbol becomes
  one stand-in character per category and anything else another; the category escapes are
  rewritten into classes of the stand-in plus the category's ASCII members (the letter
  subcategories ``\\p{Lu}`` ``\\p{Ll}`` ``\\p{Lt}`` ``\\p{Lm}`` ``\\p{Lo}`` all mean ``\\p{L}``).
  Otherwise the expression runs on the code points with non-ASCII whitespace turned into ``\\v``. In both
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
# Llama-3's expression with whitespace runs cut into power-of-two lengths (longest first).
JAIS2 = LLAMA3.removesuffix(r"\s+(?!\S)|\s+") + "|".join(
    [*(rf"\s{{{n}}}(?!\S)" for n in (512, 256, 128, 64, 32, 16, 8, 4)), r"\s{1,2}(?!\S)", r"\s{1}"]
)
QWEN35 = (
    CONTRACTIONS_CI
    + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)"
    + r"|\s+"
)
# DeepSeek-V3: an ASCII punctuation mark may lead an ASCII word; letters take their marks.
_DSV3_PUNCT_LEAD = r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+"""
_DSV3_WORD = (
    _DSV3_PUNCT_LEAD
    + "|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)"
    + "|\\s+"
)
_AFMOE_WORD = (
    _DSV3_PUNCT_LEAD
    + r"|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_KANA_HAN = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
# As the 0.3.36 library holds it: the CJK-compatibility range starts at U+8C48 (its source
# spells U+F900 with a character NFC turns into U+8C48), the Thai range at U+0E40.
_AFMOE_ASIAN = (
    "[\u4e00-\u9fff\u3400-\u4dbf\u8c48-\ufaff\u3040-\u309f\u30a0-\u30ff\uff65-\uff9f"
    "\u2f00-\u2fdf\u0e40-\u0e7f\u0e80-\u0eff\u1780-\u17ff\u1000-\u109f\uaa60-\uaa7f"
    "\ua9e0-\ua9ff\uac00-\ud7af\u1100-\u11ff]+"
)
_YOUTU_ASIAN = (
    "[\uac00-\ud7a3\u3131-\u318e]+"
    "|[\uff01\u2026\u201c\u201d\u2018\u2019\u2014\uff1a\uff1b\uff0c\u3001-\u303f\ufe30-\ufe4f]+"
    "|[\u3105-\u312f]+|" + _KANA_HAN
)
_CONTRACTION_OPT = CONTRACTIONS_CI + "?"
# Case-split words written with letter subcategories (Youtu, Tiny Aya); llama.cpp reads each
# subcategory as \p{L}, so both alternatives take any letter.
_CASED_WORD_SUBCATS = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    + _CONTRACTION_OPT
    + r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    + _CONTRACTION_OPT
)
_TAIL_3 = r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_TAIL_1 = r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
TEKKEN = (
    r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+"
    r"|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*" + _TAIL_1
)
_GRANITE_WORD = (
    r"[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))*((?=[\p{L}\p{M}])([^A-Z]))+"
    + _CONTRACTION_OPT
    + r"|[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))+((?=[\p{L}\p{M}])([^A-Z]))*"
    + _CONTRACTION_OPT
    + _TAIL_3
)
TINY_AYA_DIGITS = r"\d{1,3}(?=(?:\d{3})*\b)"
KIMI_K2 = r"\p{Han}+"  # selects llama.cpp's Kimi-K2 scanner, which does the whole split
AFMOE_DIGITS = r"\p{AFMoE_digits}"
_PORO = " ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+"
_BAILING = (
    "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])"
    r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"
)
_SEED_CODER = (
    CONTRACTIONS_CI
    + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Qwen2's expression without the contraction alternative (ufakzeka).
_QWEN2_NO_CONTRACTIONS = QWEN2.removeprefix(CONTRACTIONS_CI + "|")
_EXAONE_MOE = (
    CONTRACTIONS_CI
    + r"|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?"
    + r"|\s*[\r\n]|\s+(?!\S)|\s+"
)
_MINICPM5 = (
    CONTRACTIONS_CI
    + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# pre type -> expressions, in the order llama.cpp applies them (a family is named after its
# first pre type)
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
    "jais-2": (JAIS2,),
    "deepseek-v3": (r"\p{N}{1,3}", _KANA_HAN, _DSV3_WORD),
    "youtu": (_YOUTU_ASIAN, _CASED_WORD_SUBCATS + _TAIL_1),
    "qwen35": (QWEN35,),
    "poro-chat": (_PORO,),
    "viking": (_PORO, r"\p{N}"),
    "tekken": (TEKKEN,),
    "chameleon": (
        "<sentinel:[0-9]+>",
        "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
        "([\\t\\n]|    |  )",
        r"\p{N}",
        r"[\p{P}!-/:-@\[-`{-~]",
        GPT2,
    ),
    "granite-embed-multi-97m": (_GRANITE_WORD,),
    "tiny_aya": (TINY_AYA_DIGITS, _CASED_WORD_SUBCATS + _TAIL_3),
    "superbpe": (r"\p{N}+", r"(?=(\d{3})+(?!\d))"),
    "bailingmoe": (_BAILING,),
    "seed-coder": (_SEED_CODER,),
    "ufakzeka": (_QWEN2_NO_CONTRACTIONS,),
    "afmoe": (AFMOE_DIGITS, _AFMOE_ASIAN, _AFMOE_WORD),
    "laguna": (r"[^\n]+|[\n]+", QWEN2),  # a scanner in llama.cpp; the regex splits alike
    "exaone-moe": (_EXAONE_MOE,),
    "minicpm5": (r"\p{N}{1,3}", _MINICPM5),
    "kimi-k2": (KIMI_K2,),
}


@dataclass(frozen=True)
class PreType:
    """What a ``tokenizer.ggml.pre`` string selects: the expressions and the flags llama.cpp
    sets with them (GGUF keys may still override ``add_bos``)."""

    regexes: tuple[str, ...]
    family: str = ""
    ignore_merges: bool = False
    add_bos: bool = False
    clean_spaces: bool = True


_IGNORE = {"ignore_merges": True}
_NO_CLEAN = {"clean_spaces": False}
_LLAMA3_FLAGS = {"ignore_merges": True, "add_bos": True}

# (tokenizer.ggml.pre names, their expression family (None: each name is its own), flags)
_NAMES: tuple[tuple[tuple[str, ...], str | None, dict[str, bool]], ...] = (
    (("", "default"), "default", {}),
    (
        ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0"),
        "llama3",
        _LLAMA3_FLAGS,
    ),
    (("lfm2", "jina-v5-nano"), "llama3", _LLAMA3_FLAGS),
    (("dbrx", "smaug-bpe", "chatglm-bpe"), "llama3", {}),
    (("glm4", "glm5"), "llama3", _IGNORE),
    (("deepseek-llm",), "deepseek-llm", _NO_CLEAN),
    (("deepseek-coder",), "deepseek-coder", _NO_CLEAN),
    (("falcon",), "falcon", {}),
    (
        ("gpt-2", "phi-2", "mpt", "olmo", "jais", "gigachat", "mellum", "jina-v2-de", "jina-v2-es"),
        "gpt2",
        {},
    ),
    (("jina-es", "jina-de", "a.x-4.0", "modern-bert", "exaone4"), "gpt2", {}),
    (("jina-v1-en", "jina-v2-code", "roberta-bpe"), "gpt2", {}),
    (("trillion", "granite-docling"), "gpt2", _NO_CLEAN),
    (("bloom", "gpt3-finnish"), "poro-chat", {}),
    (("starcoder", "refact", "codeshell", "exaone", "minerva-7b", "mellum2"), "starcoder", {}),
    (("command-r", "smollm"), "starcoder", _NO_CLEAN),
    (("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "hunyuan"), "qwen2", _NO_CLEAN),
    (("solar-open", "grok-2"), "qwen2", _NO_CLEAN),
    (("stablelm2", "megrez"), "qwen2", {}),
    (("gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"), "gpt-4o", _NO_CLEAN),
    (("jais-2", "exaone-moe"), None, {}),
    (("deepseek-v3", "hunyuan-dense", "joyai-llm"), "deepseek-v3", _NO_CLEAN),
    (("qwen35", "poro-chat", "viking", "tiny_aya", "ufakzeka"), None, _NO_CLEAN),
    (("cohere2moe",), "tiny_aya", _NO_CLEAN),
    (("superbpe", "seed-coder", "afmoe", "laguna", "kimi-k2"), None, _NO_CLEAN),
    (("bailingmoe", "bailingmoe2", "llada-moe"), "bailingmoe", _NO_CLEAN),
    (("youtu", "granite-embed-multi-97m"), None, {**_NO_CLEAN, **_IGNORE}),
    (("tekken",), "tekken", {**_NO_CLEAN, **_LLAMA3_FLAGS}),
    (("chameleon",), "chameleon", {**_NO_CLEAN, "add_bos": True}),
    (("minicpm5",), "minicpm5", _IGNORE),
)


@implements("TOK-050", "TOK-058", "TOK-074")
def _pre_types() -> dict[str, PreType]:
    """tokenizer.ggml.pre strings -> expressions and flags, as llama_vocab::impl::load maps them
    (0.3.36: every name here loads there); "" is the missing key."""
    out: dict[str, PreType] = {}
    for names, family, flags in _NAMES:
        for name in names:
            fam = family or name
            out[name] = PreType(PRE_REGEXES[fam], fam, **flags)
    return out


PRE_TYPES: dict[str, PreType] = _pre_types()


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
def _scan_llama3_like(digits: int, marks: bool = False) -> Scanner:
    """Llama-3's expression (``digits`` = 3), Qwen2's (``digits`` = 1) or Qwen3.5's (Qwen2's
    with combining marks counted with letters: ``marks``)."""
    word = uni.LETTER | (uni.MARK if marks else 0)
    not_other = uni.WHITESPACE | uni.NUMBER | word

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
            if c not in (0x0D, 0x0A) and not f & uni.NUMBER and (f | fl(pos + 1)) & word:
                pos += 1
                while fl(pos) & word:
                    pos += 1
                out.append(pos - start)
                continue
            if f & uni.NUMBER:  # \p{N}{1,3} (or \p{N}): digits in fixed-size chunks
                while fl(pos) & uni.NUMBER:
                    chunk = pos
                    while pos - chunk < digits and fl(pos) & uni.NUMBER:
                        pos += 1
                    out.append(pos - chunk)
                continue
            # ' ?[^\s\p{L}\p{N}]+[\r\n]*'
            f2 = fl(pos + 1) if c == 0x20 else f
            if not f2 & not_other:
                pos += c == 0x20
                while True:
                    g = fl(pos)
                    if not g or g & not_other:
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


@implements("TOK-050")
def scan_digit_groups(cps: Sequence[int], ini: int, end: int) -> list[int]:
    """llama.cpp's AFMoE digit splitter (also run for Tiny Aya's ``\\d{1,3}(?=(?:\\d{3})*\\b)``):
    each run of \\p{N} code points is cut into groups of three from the right. The text before a
    run is not a piece of its own: it joins the run's first group (the next expression splits
    it off again in both pre types); text after the last run is one piece."""
    out: list[int] = []
    prev = pos = ini
    while pos < end:
        if not uni.flags(cps[pos]) & uni.NUMBER:
            pos += 1
            continue
        run = pos
        while pos < end and uni.flags(cps[pos]) & uni.NUMBER:
            pos += 1
        cut = run + (pos - run) % 3
        cuts = ([cut] if cut > run else []) + list(range(cut + 3, pos + 1, 3))
        for c in cuts:
            if c > prev:
                out.append(c - prev)
                prev = c
    if prev < end:
        out.append(end - prev)
    return out


# Han as llama.cpp's unicode_cpt_is_han has it: the CJK unified ideographs (extensions A-F) and
# the compatibility ideographs.
_HAN = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0x2CEB0, 0x2EBEF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def _is_han(cpt: int) -> bool:
    return any(lo <= cpt <= hi for lo, hi in _HAN)


@implements("TOK-050")
def scan_kimi_k2(cps: Sequence[int], ini: int, end: int) -> list[int]:
    """llama.cpp's Kimi-K2 scanner: Han runs; a letter word (non-Han letters, marks not
    included) with one optional leading character that is no letter, number, \\r or \\n and an
    optional case-insensitive contraction at its end; digits in groups of three; then
    Llama-3's other-run and whitespace rules."""

    def fl(i: int) -> int:
        return uni.flags(cps[i]) if ini <= i < end else 0

    def cp(i: int) -> int:
        return cps[i] if ini <= i < end else -1

    def letter(i: int) -> bool:
        return bool(fl(i) & uni.LETTER) and not _is_han(cps[i])

    out: list[int] = []
    prev = ini

    def add(stop: int) -> None:
        nonlocal prev
        if stop > prev:
            out.append(stop - prev)
        prev = stop

    pos = ini
    while pos < end:
        c, f = cps[pos], fl(pos)
        if _is_han(c):
            while ini <= pos < end and _is_han(cps[pos]):
                pos += 1
            add(pos)
            continue
        lead = c not in (0x0D, 0x0A) and not f & (uni.LETTER | uni.NUMBER)
        if letter(pos) or (lead and letter(pos + 1)):
            pos += lead
            while letter(pos):
                pos += 1
            if cp(pos) == ord("'") and pos + 1 < end:
                nxt = chr(uni.to_lower(cps[pos + 1]))
                if nxt in "stmd":
                    pos += 2
                elif pos + 2 < end and nxt + chr(uni.to_lower(cps[pos + 2])) in ("re", "ve", "ll"):
                    pos += 3
            add(pos)
            continue
        if f & uni.NUMBER:  # \p{N}{1,3}
            run = pos
            while fl(pos) & uni.NUMBER:
                pos += 1
                if pos - run >= 3:
                    add(pos)
                    run = pos
            add(pos)
            continue
        f2 = fl(pos + 1) if c == 0x20 else f
        if f2 and not f2 & (uni.WHITESPACE | uni.LETTER | uni.NUMBER):  #  ?[^\s\p{L}\p{N}]+[\r\n]*
            pos += c == 0x20
            while f2 and not f2 & (uni.WHITESPACE | uni.LETTER | uni.NUMBER):
                pos += 1
                f2 = fl(pos)
            while cp(pos) in (0x0D, 0x0A):
                pos += 1
            add(pos)
            continue
        n = 0
        last_nl = -1
        while fl(pos + n) & uni.WHITESPACE:
            if cps[pos + n] in (0x0D, 0x0A):
                last_nl = pos + n + 1
            n += 1
        pos = last_nl if last_nl >= 0 else _whitespace_gpt2(cps, pos, end, fl)
        add(pos)
    return out


_SCANNERS: dict[str, Scanner] = {
    GPT2: scan_gpt2,
    LLAMA3: _scan_llama3_like(3),
    QWEN2: _scan_llama3_like(1),
    QWEN35: _scan_llama3_like(1, marks=True),
    AFMOE_DIGITS: scan_digit_groups,
    TINY_AYA_DIGITS: scan_digit_groups,
    KIMI_K2: scan_kimi_k2,
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
# llama.cpp reads the letter subcategories as the whole letter category
_COLLAPSE |= {rf"\p{{L{sub}}}": _COLLAPSE[r"\p{L}"] for sub in "ultmo"}
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
            esc = regex[i : regex.find("}", i) + 1] if regex.startswith("\\p{", i) else ""
            if esc in _COLLAPSE:
                _, stand_in, members = _COLLAPSE[esc]
                body = re.escape(stand_in) + members
                out.append(body if inside else f"[{body}]")
                i += len(esc)
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
