"""A second, independent BPE oracle: HF ``tokenizers`` built from a BPE fixture's GGUF file.

The pre-tokenizer is the pre type's regex list in the spelling of the models' own
``tokenizer.json`` (``(?i:...)``, ``\\p{Lu}``...), each applied as an isolated split, then the
byte-level alphabet; the model is HF's BPE over the same tokens and merges. HF's regex engine is
Unicode-aware, unlike llama.cpp's std::regex fallback, so the two agree only on ASCII text
(spec/tokenizer.md, decision "HF tokenizers as a second oracle"). Special tokens are not
registered: the oracle is used on text without them, with ``add_special = False``.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Any

import gguf

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3_TAIL = r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_LLAMA3 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}" + _LLAMA3_TAIL
_QWEN2 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}" + _LLAMA3_TAIL
_CASED = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]"
_LOWER = r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
_C = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
_GPT4O = (
    rf"[^\r\n\p{{L}}\p{{N}}]?{_CASED}*{_LOWER}+{_C}|[^\r\n\p{{L}}\p{{N}}]?{_CASED}+{_LOWER}*{_C}"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"

HF_PRE = {
    "default": (r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", "[0-9][0-9][0-9]"),
    "gpt-2": (_GPT2,),
    "olmo": (_GPT2,),
    "mpt": (_GPT2,),
    "llama-bpe": (_LLAMA3,),
    "qwen2": (_QWEN2,),
    "deepseek-llm": ("[\r\n]", r"\s?[A-Za-z]+", r"\s?[!-/:-~]+", r"\s+$", _CJK, r"\p{N}+"),
    "deepseek-coder": ("[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK, r"\p{N}"),
    "falcon": (r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, "[0-9][0-9][0-9]"),
    "starcoder": (r"\p{N}", _GPT2),
    "refact": (r"\p{N}", _GPT2),
    "command-r": (r"\p{N}", _GPT2),
    "gpt-4o": (_GPT4O,),
}
IGNORE_MERGES = ("llama-bpe",)


@lru_cache(maxsize=32)
def hf_tokenizer(path: str | os.PathLike[str], pre: str) -> Any:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    r = gguf.GGUFReader(str(path))

    def strings(key: str) -> list[str]:
        f = r.get_field(key)
        assert f is not None, key
        return [str(x) for x in f.contents()]

    tokens = strings("tokenizer.ggml.tokens")
    merges: list[tuple[str, str]] = []
    for m in strings("tokenizer.ggml.merges"):
        left, right = m.split(" ", 1)
        merges.append((left, right))
    model = models.BPE(
        {t: i for i, t in enumerate(tokens)}, merges, ignore_merges=pre in IGNORE_MERGES
    )
    tok = Tokenizer(model)
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(rx), "isolated") for rx in HF_PRE[pre]]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    tok.decoder = decoders.ByteLevel()
    return tok


def tokenize(path: str | os.PathLike[str], pre: str, text: str) -> list[int]:
    ids: list[int] = hf_tokenizer(str(path), pre).encode(text, add_special_tokens=False).ids
    return ids


@lru_cache(maxsize=4)
def hf_wordpiece(path: str | os.PathLike[str]) -> Any:
    """HF's BERT tokenizer (BertNormalizer, BertPreTokenizer, WordPiece) over a WordPiece
    fixture, its GGUF form turned back into ``##`` pieces."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    r = gguf.GGUFReader(str(path))
    tokens_f, types_f = (
        r.get_field("tokenizer.ggml.tokens"),
        r.get_field("tokenizer.ggml.token_type"),
    )
    assert tokens_f is not None and types_f is not None
    vocab = {}
    for i, (text, ttype) in enumerate(zip(tokens_f.contents(), types_f.contents(), strict=True)):
        text = str(text)
        if int(ttype) != 1:
            vocab[text] = i
        elif text.startswith("\u2581"):
            vocab[text[1:]] = i
        else:
            vocab["##" + text] = i
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=10**6))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return tok


def tokenize_wordpiece(path: str | os.PathLike[str], text: str) -> list[int]:
    ids: list[int] = hf_wordpiece(str(path)).encode(text, add_special_tokens=False).ids
    return ids
