"""Tokenizer mutants: one deliberate defect each (see tests/meta)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from conformance.mutants import Mutant, replace


def _vocab_forced(cls_name: str, **fields: Any) -> None:
    """Make tokenizer class ``cls_name`` run with ``fields`` of its vocabulary overridden, as if
    it never read the GGUF keys behind them."""
    from reference_impl import tokenizer

    cls = getattr(tokenizer, cls_name)
    original = cls.__init__

    def __init__(self: Any, vocab: Any) -> None:
        original(self, vocab)
        self.vocab = dataclasses.replace(vocab, **fields)

    cls.__init__ = __init__


def _no_space_prefix(target: Any) -> Any:
    # The SPM default add_space_prefix = true is lost: vocabularies load with it false.
    import dataclasses

    import reference_impl.model.gguf_loader as loader

    original = loader._read_vocab

    def _read_vocab(meta: Any) -> Any:
        vocab, n = original(meta)
        if vocab is not None:
            vocab = dataclasses.replace(vocab, add_space_prefix=False)
        return vocab, n

    replace(loader.__name__, "_read_vocab", _read_vocab)
    return target


def _leftmost_merge_first(target: Any) -> Any:
    # Merge the leftmost mergeable pair instead of the highest-scoring one.
    from reference_impl.tokenizer import SpmTokenizer

    def _merge_symbols(self: Any, text: str, out: list[int]) -> None:
        syms = list(text)
        ids = self.vocab.token_to_id
        merged = True
        while merged:
            merged = False
            for i in range(len(syms) - 1):
                if syms[i] + syms[i + 1] in ids:
                    syms[i : i + 2] = [syms[i] + syms[i + 1]]
                    merged = True
                    break
        for s in syms:
            if s in ids:
                out.append(ids[s])
            else:
                out.extend(self._byte_ids[b] for b in s.encode("utf-8"))

    SpmTokenizer._merge_symbols = _merge_symbols  # type: ignore[method-assign]
    return target


def _unk_instead_of_bytes(target: Any) -> Any:
    from reference_impl.tokenizer import SpmTokenizer

    original = SpmTokenizer._merge_symbols

    def _merge_symbols(self: Any, text: str, out: list[int]) -> None:
        tmp: list[int] = []
        original(self, text, tmp)
        byte_ids = set(self._byte_ids)
        for t in tmp:
            if t in byte_ids:
                if not out or out[-1] != self.vocab.unk_id:
                    out.append(self.vocab.unk_id)
            else:
                out.append(t)

    SpmTokenizer._merge_symbols = _merge_symbols  # type: ignore[method-assign]
    return target


def _detokenize_keeps_first_space(target: Any) -> Any:
    from reference_impl.tokenizer import SpmTokenizer

    def detokenize(
        self: Any, tokens: Any, remove_special: bool = False, unparse_special: bool = False
    ) -> bytes:
        return b"".join(self.token_to_piece(int(t), special=unparse_special) for t in tokens)

    SpmTokenizer.detokenize = detokenize  # type: ignore[method-assign]
    return target


MUTANTS = [
    Mutant(
        "tok-no-space-prefix",
        "tokenizer",
        "the SPM tokenizer does not prefix the first fragment with a space",
        kills=("TOK-001", "TOK-003", "TOK-004"),
        apply=_no_space_prefix,
    ),
    Mutant(
        "tok-leftmost-merge-first",
        "tokenizer",
        "SPM merges the leftmost mergeable pair instead of the highest-scoring one",
        kills=("TOK-001", "TOK-004"),
        apply=_leftmost_merge_first,
    ),
    Mutant(
        "tok-unk-instead-of-bytes",
        "tokenizer",
        "characters outside the vocabulary become <unk> instead of byte tokens",
        kills=("TOK-001", "TOK-005"),
        apply=_unk_instead_of_bytes,
    ),
    Mutant(
        "tok-detokenize-keeps-first-space",
        "tokenizer",
        "detokenize does not remove the space the tokenizer prefixed",
        kills=("TOK-008", "TOK-009"),
        apply=_detokenize_keeps_first_space,
    ),
]


def _spm_latin1_byte_fallback(target: Any) -> Any:
    # A byte without a <0xXX> token falls back to the token of the character with its code
    # point (U+0000..U+00FF) instead of refusing.
    from reference_impl.tokenizer import SpmTokenizer

    original = SpmTokenizer.__init__

    def __init__(self: Any, vocab: Any) -> None:
        original(self, vocab)
        for b, tid in enumerate(self._byte_ids):
            if tid < 0:
                self._byte_ids[b] = vocab.token_to_id.get(chr(b), -1)

    SpmTokenizer.__init__ = __init__  # type: ignore[method-assign]
    return target


MUTANTS += [
    Mutant(
        "tok-spm-latin1-byte-fallback",
        "tokenizer",
        "SPM writes a byte without a <0xXX> token as the Latin-1 character's token",
        kills=("TOK-078",),
        apply=_spm_latin1_byte_fallback,
    ),
]


# -- BPE ----------------------------------------------------------------------------------------


def _merge_rank_off_by_one(target: Any) -> Any:
    # The merge list is read from its second entry: every rank is one too small and the first
    # merge never applies.
    from reference_impl.tokenizer import BpeTokenizer

    original = BpeTokenizer.__init__

    def __init__(self: Any, vocab: Any) -> None:
        original(self, vocab)
        ranks = {pair: i for i, pair in enumerate(vocab.merges[1:])}
        object.__setattr__(self.vocab, "merge_ranks", ranks)

    BpeTokenizer.__init__ = __init__  # type: ignore[method-assign]
    return target


def _llama3_digit_pairs(target: Any) -> Any:
    # Llama-3's \p{N}{1,3} groups digits by two.
    from reference_impl.tokenizer import pretokenize

    pretokenize._SCANNERS[pretokenize.LLAMA3] = pretokenize._scan_llama3_like(2)
    return target


def _gpt2_whitespace_greedy(target: Any) -> Any:
    # \s+(?!\S) lost: a whitespace run keeps its last space instead of leaving it to the next word.
    from reference_impl.tokenizer import pretokenize

    def whitespace(cps: Any, pos: int, end: int, fl: Any) -> int:
        n = 0
        while fl(pos + n) & pretokenize.uni.WHITESPACE:
            n += 1
        return pos + max(n, 1)

    replace(pretokenize.__name__, "_whitespace_gpt2", whitespace)
    return target


def _fallback_unicode_space(target: Any) -> Any:
    # The std::regex fallback compiled with Python's Unicode \s (U+001C..U+001F count as spaces).
    import re

    from reference_impl.tokenizer import pretokenize

    original = pretokenize._compile.__wrapped__

    def _compile(regex: str) -> Any:
        pattern, collapsed = original(regex)
        return re.compile(pattern.pattern), collapsed

    replace(pretokenize.__name__, "_compile", _compile)
    return target


def _no_ignore_merges(target: Any) -> Any:
    # ignore_merges is dropped: Llama-3 words that are tokens are still merged piece by piece.
    _vocab_forced("BpeTokenizer", ignore_merges=False)
    return target


def _no_clean_spaces(target: Any) -> Any:
    # detokenize never cleans spaces.
    from reference_impl.tokenizer import vocab

    replace(vocab.__name__, "clean_spaces", lambda text: text)
    return target


def _bpe_raw_pieces(target: Any) -> Any:
    # BPE pieces are the token text's UTF-8, not the bytes its byte-alphabet characters stand for.
    from reference_impl.tokenizer import BpeTokenizer

    BpeTokenizer._normal_piece = lambda self, text: text.encode()  # type: ignore[method-assign]
    return target


def _always_add_bos(target: Any) -> Any:
    # BPE vocabularies add BOS whatever the pre type says.
    _vocab_forced("BpeTokenizer", add_bos=True)
    return target


def _special_merged_with_text(target: Any) -> Any:
    # parse_special is ignored: control tokens are never split out of the text.
    from reference_impl.tokenizer import BaseTokenizer

    original = BaseTokenizer._partition

    def _partition(self: Any, text: str, parse_special: bool) -> Any:
        return original(self, text, False)

    BaseTokenizer._partition = _partition  # type: ignore[method-assign]
    return target


def _merges_unchecked(target: Any) -> Any:
    # The loader accepts merges that name unknown tokens and a missing merges key.
    from reference_impl.tokenizer import vocab

    def _read_merges(meta: Any, tokens: Any) -> Any:
        raw = meta.get_array("tokenizer.ggml.merges", ("STRING",)) or []
        return tuple(tuple(str(m).split(" ", 1)) for m in raw if " " in str(m))

    replace(vocab.__name__, "_read_merges", _read_merges)
    return target


def _merges_capped_at_int16(target: Any) -> Any:
    # Merge ranks kept in a signed 16-bit field: merges past index 32,767 are lost. Only a real
    # vocabulary (GPT-2's 50,000 merges) has that many; the trained fixtures have about 1,000.
    from reference_impl.tokenizer import BpeTokenizer

    original = BpeTokenizer.__init__

    def __init__(self: Any, vocab: Any) -> None:
        original(self, vocab)
        ranks = {pair: i for i, pair in enumerate(vocab.merges[: 1 << 15])}
        object.__setattr__(self.vocab, "merge_ranks", ranks)

    BpeTokenizer.__init__ = __init__  # type: ignore[method-assign]
    return target


def _dsv3_punct_without_symbols(target: Any) -> Any:
    # DeepSeek-V3's punctuation run ' ?[\p{P}\p{S}]+' loses its symbol class: '$', '+', '=' and
    # non-ASCII symbols no longer join the run (one class off in one expression family).
    from reference_impl.tokenizer import pretokenize

    for name, pre in list(pretokenize.PRE_TYPES.items()):
        if pre.family == "deepseek-v3":
            regexes = tuple(rx.replace(r" ?[\p{P}\p{S}]+", r" ?[\p{P}]+") for rx in pre.regexes)
            assert regexes != pre.regexes
            pretokenize.PRE_TYPES[name] = dataclasses.replace(pre, regexes=regexes)
    return target


def _hunyuan_dense_as_qwen2(target: Any) -> Any:
    # hunyuan-dense and joyai-llm are mapped to Qwen2's expressions, not DeepSeek-V3's (a name
    # filed under the wrong family: the flags stay right).
    from reference_impl.tokenizer import pretokenize

    for name in ("hunyuan-dense", "joyai-llm"):
        pre = pretokenize.PRE_TYPES[name]
        qwen2 = pretokenize.PRE_REGEXES["qwen2"]
        pretokenize.PRE_TYPES[name] = dataclasses.replace(pre, regexes=qwen2, family="qwen2")
    return target


MUTANTS += [
    Mutant(
        "tok-pre-alias-wrong-family",
        "tokenizer",
        "hunyuan-dense and joyai-llm split text with Qwen2's expressions",
        kills=("TOK-074",),
        apply=_hunyuan_dense_as_qwen2,
    ),
    Mutant(
        "tok-dsv3-punct-without-symbols",
        "tokenizer",
        "the DeepSeek-V3 pre-tokenizer's punctuation run leaves out \\p{S}",
        kills=("TOK-050",),
        apply=_dsv3_punct_without_symbols,
    ),
    Mutant(
        "tok-bpe-merges-capped-at-int16",
        "tokenizer",
        "BPE merges past index 32,767 are dropped (a 16-bit rank)",
        kills=("TOK-073",),
        apply=_merges_capped_at_int16,
    ),
    Mutant(
        "tok-bpe-merge-rank-off-by-one",
        "tokenizer",
        "BPE merge ranks are read one entry late (the first merge never applies)",
        kills=("TOK-050", "TOK-057"),
        apply=_merge_rank_off_by_one,
    ),
    Mutant(
        "tok-llama3-digit-pairs",
        "tokenizer",
        "the Llama-3 pre-tokenizer groups digits by two instead of three",
        kills=("TOK-050", "TOK-057"),
        apply=_llama3_digit_pairs,
    ),
    Mutant(
        "tok-gpt2-whitespace-greedy",
        "tokenizer",
        "the GPT-2 pre-tokenizer keeps a whole whitespace run (no \\s+(?!\\S) rule)",
        kills=("TOK-050", "TOK-057"),
        apply=_gpt2_whitespace_greedy,
    ),
    Mutant(
        "tok-fallback-unicode-space",
        "tokenizer",
        "the std::regex fallback treats U+001C..U+001F as whitespace",
        kills=("TOK-050",),
        apply=_fallback_unicode_space,
    ),
    Mutant(
        "tok-bpe-no-ignore-merges",
        "tokenizer",
        "Llama-3 pre types merge words that are tokens instead of emitting them whole",
        kills=("TOK-050",),
        apply=_no_ignore_merges,
    ),
    Mutant(
        "tok-bpe-no-clean-spaces",
        "tokenizer",
        "BPE detokenize does not clean spaces",
        kills=("TOK-056",),
        apply=_no_clean_spaces,
    ),
    Mutant(
        "tok-bpe-raw-pieces",
        "tokenizer",
        "BPE pieces are not mapped back through the byte alphabet",
        kills=("TOK-059", "TOK-060"),
        apply=_bpe_raw_pieces,
    ),
    Mutant(
        "tok-bpe-always-bos",
        "tokenizer",
        "every BPE pre type adds BOS with add_special",
        kills=("TOK-058",),
        apply=_always_add_bos,
    ),
    Mutant(
        "tok-control-not-split",
        "tokenizer",
        "parse_special does not split control tokens out of the text",
        kills=("TOK-061",),
        apply=_special_merged_with_text,
    ),
    Mutant(
        "tok-merges-unchecked",
        "tokenizer",
        "the loader accepts missing merges and merges naming unknown tokens",
        kills=("TOK-062",),
        apply=_merges_unchecked,
    ),
]


# -- WPM ----------------------------------------------------------------------------------------


def _wpm_no_lowercase(target: Any) -> Any:
    # WPM does not lower-case.
    from reference_impl.tokenizer import wpm

    original = wpm.split_words

    def split_words(text: str, lowercase: bool, strip_accents: bool) -> list[str]:
        return original(text, False, strip_accents)

    replace(wpm.__name__, "split_words", split_words)
    return target


def _wpm_partial_unk(target: Any) -> Any:
    # A word with an unmatched position keeps its matched pieces (UNK only for the rest).
    from reference_impl.tokenizer import WpmTokenizer

    def _word_pieces(self: Any, word: str) -> list[int]:
        ids = self.vocab.token_to_id
        out = []
        i = 0
        while i < len(word):
            for j in range(len(word), i, -1):
                if word[i:j] in ids:
                    out.append(ids[word[i:j]])
                    i = j
                    break
            else:
                out.append(self.vocab.unk_id)
                i += 1
        return out

    WpmTokenizer._word_pieces = _word_pieces  # type: ignore[method-assign]
    return target


def _wpm_lowercase_key_ignored(target: Any) -> Any:
    # tokenizer.ggml.normalizer.lowercase is not read.
    _vocab_forced("WpmTokenizer", lowercase=True, strip_accents=True)
    return target


def _wpm_no_compat_ideographs(target: Any) -> Any:
    # The CJK compatibility ideographs (U+F900..FAFF) are not isolated as words.
    from reference_impl.tokenizer import wpm

    ranges = tuple(r for r in wpm._CJK_RANGES if r[0] != 0xF900)
    replace(wpm.__name__, "_CJK_RANGES", ranges)
    return target


MUTANTS += [
    Mutant(
        "tok-wpm-no-lowercase",
        "tokenizer",
        "the WPM normalizer does not lower-case",
        kills=("TOK-051", "TOK-064"),
        apply=_wpm_no_lowercase,
    ),
    Mutant(
        "tok-wpm-partial-unk",
        "tokenizer",
        "a WPM word with an unknown part keeps its known pieces instead of becoming one UNK",
        kills=("TOK-051",),
        apply=_wpm_partial_unk,
    ),
    Mutant(
        "tok-wpm-lowercase-key-ignored",
        "tokenizer",
        "tokenizer.ggml.normalizer.lowercase = false is ignored",
        kills=("TOK-065",),
        apply=_wpm_lowercase_key_ignored,
    ),
    Mutant(
        "tok-wpm-no-compat-ideographs",
        "tokenizer",
        "WPM does not treat CJK compatibility ideographs (U+F900..FAFF) as one-character words",
        kills=("TOK-051",),
        apply=_wpm_no_compat_ideographs,
    ),
]


def _spm_eos_ignored(target: Any) -> Any:
    # tokenizer.ggml.add_eos_token is not honoured by SPM.
    _vocab_forced("SpmTokenizer", add_eos=False)
    return target


MUTANTS += [
    Mutant(
        "tok-spm-eos-ignored",
        "tokenizer",
        "SPM ignores add_eos_token = true",
        kills=("TOK-055",),
        apply=_spm_eos_ignored,
    ),
]


# -- UGM ----------------------------------------------------------------------------------------


def _ugm_no_charsmap(target: Any) -> Any:
    # The precompiled charsmap is ignored (no normalization).
    from reference_impl.tokenizer.ugm import CharsMap

    CharsMap.longest = lambda self, data, start: None  # type: ignore[method-assign]
    return target


def _ugm_ties_to_later(target: Any) -> Any:
    # Viterbi keeps every unknown character as its own UNK (no collapsing of runs).
    from reference_impl.tokenizer import UgmTokenizer

    original = UgmTokenizer._viterbi

    def _viterbi(self: Any, data: bytes) -> list[int]:
        out: list[int] = original(self, data)
        return [t for t in out for _ in range(2 if t == self.vocab.unk_id else 1)]

    UgmTokenizer._viterbi = _viterbi  # type: ignore[method-assign]
    return target


MUTANTS += [
    Mutant(
        "tok-ugm-no-charsmap",
        "tokenizer",
        "UGM ignores the precompiled charsmap",
        kills=("TOK-052", "TOK-069"),
        apply=_ugm_no_charsmap,
    ),
    Mutant(
        "tok-ugm-unk-runs",
        "tokenizer",
        "UGM does not collapse a run of unknown characters into one UNK",
        kills=("TOK-052",),
        apply=_ugm_ties_to_later,
    ),
]


def _ugm_viterbi_per_word(target: Any) -> Any:
    # The Viterbi always runs word by word, so a piece with a '▁' inside never spans words.
    from reference_impl.tokenizer import UgmTokenizer

    original = UgmTokenizer._init_lattice

    def _init_lattice(self: Any) -> None:
        original(self)
        self._per_word = True

    UgmTokenizer._init_lattice = _init_lattice  # type: ignore[method-assign]
    return target


def _ids_when_keys_missing(model: str, ids: dict[str, tuple[str, int]]) -> Callable[[Any], Any]:
    """A mutant that gives a ``model`` vocabulary other default special ids: for each
    ``key: (field, id)``, a file without ``key`` gets ``id`` in ``field``."""

    def apply(target: Any) -> Any:
        import reference_impl.tokenizer as tok

        original = tok.load_vocab

        def load_vocab(meta: Any) -> Any:
            vocab = original(meta)
            if vocab is not None and vocab.model == model:
                for key, (field, value) in ids.items():
                    if meta.get_int(key, -1) < 0:  # the key is missing
                        changes: dict[str, Any] = {field: value}
                        vocab = dataclasses.replace(vocab, **changes)
            return vocab

        replace(tok.__name__, "load_vocab", load_vocab)
        return target

    return apply


# A T5 vocabulary without EOS / UNK id keys takes SPM's defaults (EOS 2, UNK 0).
_t5_spm_default_ids = _ids_when_keys_missing(
    "t5",
    {
        "tokenizer.ggml.eos_token_id": ("eos_id", 2),
        "tokenizer.ggml.unknown_token_id": ("unk_id", 0),
    },
)


MUTANTS += [
    Mutant(
        "tok-ugm-viterbi-per-word",
        "tokenizer",
        "UGM solves each word alone: a piece with a '▁' inside never spans two words",
        kills=("TOK-052",),
        apply=_ugm_viterbi_per_word,
    ),
    Mutant(
        "tok-t5-spm-default-ids",
        "tokenizer",
        "a T5 vocabulary without EOS / UNK id keys takes SPM's defaults instead of EOS 1, UNK 2",
        kills=("TOK-075",),
        apply=_t5_spm_default_ids,
    ),
]


def _ugm_charsmap_unshifted_base(target: Any) -> Any:
    # The charsmap trie's BASE ignores bit 9: a shifted BASE is read as BASE / 256.
    import reference_impl.tokenizer.ugm as ugm

    replace(ugm.__name__, "_base", lambda unit: unit >> 10)
    replace(ugm.__name__, "_bases", lambda units: units >> 10)
    return target


MUTANTS += [
    Mutant(
        "tok-ugm-charsmap-unshifted-base",
        "tokenizer",
        "the UGM charsmap walk ignores bit 9 of a trie unit (BASE shifted by 8)",
        kills=("TOK-079",),
        apply=_ugm_charsmap_unshifted_base,
    ),
]


# -- RWKV ---------------------------------------------------------------------------------------


def _rwkv_shortest_first(target: Any) -> Any:
    # RWKV takes the shortest matching token (one byte) instead of the longest.
    import re

    from reference_impl.tokenizer import RwkvTokenizer

    original = RwkvTokenizer.__init__

    def __init__(self: Any, vocab: Any) -> None:
        original(self, vocab)
        self._pattern = re.compile(b".", re.DOTALL)

    RwkvTokenizer.__init__ = __init__  # type: ignore[method-assign]
    return target


MUTANTS += [
    Mutant(
        "tok-rwkv-shortest-match",
        "tokenizer",
        "RWKV matches one byte at a time instead of the longest token",
        kills=("TOK-053",),
        apply=_rwkv_shortest_first,
    ),
]


def _plamo2_keeps_bom(target: Any) -> Any:
    # PLaMo-2 keeps a leading U+FEFF instead of dropping it.
    from reference_impl.tokenizer import Plamo2Tokenizer

    def _tokenize_fragment(self: Any, text: str, out: list[int]) -> None:
        out += self._encode(text)

    Plamo2Tokenizer._tokenize_fragment = _tokenize_fragment  # type: ignore[method-assign]
    return target


MUTANTS += [
    Mutant(
        "tok-plamo2-keeps-bom",
        "tokenizer",
        "PLaMo-2 does not drop a leading U+FEFF",
        kills=("TOK-054",),
        apply=_plamo2_keeps_bom,
    ),
]


# -- Strip attributes (TOK-068) -----------------------------------------------------------------


def _strip_unicode_space(target: Any) -> Any:
    # LSTRIP / RSTRIP remove Python's (Unicode) whitespace instead of C isspace's six bytes.
    replace("reference_impl.tokenizer.vocab", "C_SPACE", None)  # str.strip(None): Unicode space
    return target


def _phi3_name_case_sensitive(target: Any) -> Any:
    # The model name is matched as written: "Phi-3-mini" is not seen as a phi-3 model.
    import reference_impl.tokenizer.vocab as vocab_mod

    original = vocab_mod.strip_attributes
    names = ("phi-3", "phi3")

    def strip_attributes(meta: Any, vocab: Any) -> Any:
        name = meta.get_str("general.name", "")
        if any(n in name.lower() for n in names) and not any(n in name for n in names):
            return frozenset(), frozenset()
        return original(meta, vocab)

    replace(vocab_mod.__name__, "strip_attributes", strip_attributes)
    return target


MUTANTS += [
    Mutant(
        "tok-strip-unicode-space",
        "tokenizer",
        "LSTRIP / RSTRIP strip Unicode whitespace (U+00A0 ...) instead of C isspace",
        kills=("TOK-068",),
        apply=_strip_unicode_space,
    ),
    Mutant(
        "tok-phi3-name-case-sensitive",
        "tokenizer",
        "the phi-3 name rule ignores names not written in lower case",
        kills=("TOK-068",),
        apply=_phi3_name_case_sensitive,
    ),
]


def _rwkv_dead_end_unk(target: Any) -> Any:
    from reference_impl.tokenizer.rwkv import RwkvTokenizer

    def _no_token(self: Any, matches: list[bytes], k: int, offset: int) -> int:
        return int(self.vocab.unk_id)  # the defect: a dead end (tokens start there) is UNK too

    RwkvTokenizer._no_token = _no_token  # type: ignore[method-assign]
    return target


def _rwkv_unmatched_byte_dropped(target: Any) -> Any:
    from reference_impl.tokenizer.rwkv import RwkvTokenizer

    original = RwkvTokenizer._greedy

    def _greedy(self: Any, data: bytes, offset: int) -> list[int]:
        ids = original(self, data, offset)
        unk = self.vocab.unk_id
        return [t for t in ids if t != unk]  # the defect: a byte no token starts with vanishes

    RwkvTokenizer._greedy = _greedy  # type: ignore[method-assign]
    return target


def _rwkv_hex_case_folded(target: Any) -> Any:
    import re

    from reference_impl.tokenizer import rwkv

    original = rwkv.unescape

    def unescape(text: str) -> bytes:
        # the defect: upper-case hex digits read as their lower-case value, as Python reads them
        return original(re.sub(r"\\x([0-9A-F]{2})", lambda m: "\\x" + m[1].lower(), text))

    replace(rwkv.__name__, "unescape", unescape)
    return target


MUTANTS += [
    Mutant(
        "tok-rwkv-hex-case-folded",
        "tokenizer",
        "RWKV reads an upper-case hex digit of an escaped token text as its lower-case value",
        kills=("TOK-085",),
        apply=_rwkv_hex_case_folded,
    ),
]


MUTANTS += [
    Mutant(
        "tok-rwkv-dead-end-unk",
        "tokenizer",
        "RWKV gives UNK where only longer tokens start with the byte, instead of refusing",
        kills=("TOK-076",),
        apply=_rwkv_dead_end_unk,
    ),
    Mutant(
        "tok-rwkv-unmatched-byte-dropped",
        "tokenizer",
        "RWKV drops a byte that no token starts with instead of writing UNK",
        kills=("TOK-076",),
        apply=_rwkv_unmatched_byte_dropped,
    ),
]


def _plamo2_no_score_floor(target: Any) -> Any:
    replace("reference_impl.tokenizer.plamo2", "INVALID_UNITS", -(1 << 62))  # the defect
    return target


MUTANTS += [
    Mutant(
        "tok-plamo2-no-score-floor",
        "tokenizer",
        "PLaMo-2 keeps tokens scored at or below -2000 as candidates",
        kills=("TOK-077",),
        apply=_plamo2_no_score_floor,
    ),
]


def _plamo2_unknown_row_by_text(target: Any) -> Any:
    # only the empty unknown row ends a walk: a token scored -1000 no longer does
    replace("reference_impl.tokenizer.plamo2", "ends_rows", lambda row: row[0] == "")
    return target


MUTANTS += [
    Mutant(
        "tok-plamo2-minus-1000-token-ends-nothing",
        "tokenizer",
        "PLaMo-2 tells a token scored -1000 from the unknown row (llama.cpp's table does not)",
        kills=("TOK-087",),
        apply=_plamo2_unknown_row_by_text,
    ),
]


# -- Leftover rules: space prefix of RWKV / PLaMo-2, small vocabularies, charsmap edges ----------


def _byte_piece_keeps_space(target: Any) -> Any:
    # A PLaMo-2 BYTE piece is returned before the lstrip: detokenize keeps the space of a
    # leading <0x20> (the reference's former defect).
    from reference_impl.tokenizer import Plamo2Tokenizer

    original = Plamo2Tokenizer.token_to_piece

    def token_to_piece(self: Any, token: int, special: bool = False, lstrip: int = 0) -> bytes:
        text = self.vocab.tokens[token]
        if self.vocab.types[token] == 6 and len(text) == 6 and text.startswith("<0x"):
            lstrip = 0
        return original(self, token, special, lstrip)

    Plamo2Tokenizer.token_to_piece = token_to_piece  # type: ignore[method-assign]
    return target


def _bpe_missing_char_as_latin1(target: Any) -> Any:
    # A symbol that is no token is written as the one-character tokens of its UTF-8 bytes
    # read as Latin-1 ("Ġ" = C4 A0 -> "Ä"), instead of being dropped.
    from reference_impl.tokenizer import BpeTokenizer

    def _tokenize_word(self: Any, word: str, out: list[int]) -> None:
        ids = self.vocab.token_to_id
        if self.vocab.ignore_merges and word in ids:
            out.append(ids[word])
            return
        for sym in self._merge(word):
            if sym in ids:
                out.append(ids[sym])
                continue
            out += [ids[chr(b)] for b in sym.encode("utf-8") if chr(b) in ids]

    BpeTokenizer._tokenize_word = _tokenize_word  # type: ignore[method-assign]
    return target


def _wpm_default_unk_kept(target: Any) -> Any:
    # A WordPiece vocabulary without an unknown_token_id key keeps UNK 100 even when the
    # vocabulary is smaller (llama.cpp unsets it).
    import reference_impl.tokenizer as tok

    original = tok.load_vocab

    def load_vocab(meta: Any) -> Any:
        vocab = original(meta)
        if vocab is not None and vocab.model == "bert" and vocab.unk_id < 0:
            vocab = dataclasses.replace(vocab, unk_id=100)
        return vocab

    replace(tok.__name__, "load_vocab", load_vocab)
    return target


def _ugm_stray_continuation_kept(target: Any) -> Any:
    # Continuation bytes left by a charsmap entry that ended inside a character pass through
    # unchanged instead of becoming U+FFFD.
    from reference_impl.tokenizer import UgmTokenizer

    def _after_entry(self: Any, data: bytes, step: int, parts: list[bytes]) -> int:
        return step

    UgmTokenizer._after_entry = _after_entry  # type: ignore[method-assign]
    return target


MUTANTS += [
    Mutant(
        "tok-plamo2-byte-piece-keeps-space",
        "tokenizer",
        "detokenize with add_space_prefix keeps the space of a leading PLaMo-2 <0x20> piece",
        kills=("TOK-080",),
        apply=_byte_piece_keeps_space,
    ),
    Mutant(
        "tok-bpe-missing-char-as-latin1",
        "tokenizer",
        "a BPE symbol that is no token is written as the Latin-1 tokens of its bytes",
        kills=("TOK-081",),
        apply=_bpe_missing_char_as_latin1,
    ),
    Mutant(
        "tok-wpm-default-unk-kept",
        "tokenizer",
        "a WordPiece vocabulary of fewer than 101 tokens keeps the default UNK id 100",
        kills=("TOK-082",),
        apply=_wpm_default_unk_kept,
    ),
    Mutant(
        "tok-ugm-stray-continuation-kept",
        "tokenizer",
        "UGM passes continuation bytes left by a charsmap entry through instead of U+FFFD",
        kills=("TOK-083",),
        apply=_ugm_stray_continuation_kept,
    ),
]


# An SPM vocabulary without BOS / EOS id keys takes BOS 2 and EOS 1 (the defaults swapped).
_spm_default_ids_swapped = _ids_when_keys_missing(
    "llama",
    {"tokenizer.ggml.bos_token_id": ("bos_id", 2), "tokenizer.ggml.eos_token_id": ("eos_id", 1)},
)


MUTANTS += [
    Mutant(
        "tok-spm-default-ids-swapped",
        "tokenizer",
        "an SPM vocabulary without BOS / EOS id keys takes BOS 2 and EOS 1",
        kills=("TOK-084",),
        apply=_spm_default_ids_swapped,
    ),
]


def _plamo2_default_ids_swapped(target: Any) -> Any:
    """A PLaMo-2 vocabulary without BOS / EOS id keys takes BOS 2 and EOS 1. The model loader
    imported ``load_vocab`` by name, so its binding is replaced as well."""
    _ids_when_keys_missing(
        "plamo2",
        {
            "tokenizer.ggml.bos_token_id": ("bos_id", 2),
            "tokenizer.ggml.eos_token_id": ("eos_id", 1),
        },
    )(target)
    import reference_impl.tokenizer as tok

    replace("reference_impl.model.gguf_loader", "load_vocab", tok.load_vocab)
    return target


MUTANTS += [
    Mutant(
        "tok-plamo2-default-ids-swapped",
        "tokenizer",
        "a PLaMo-2 vocabulary without BOS / EOS id keys takes BOS 2 and EOS 1",
        kills=("TOK-086",),
        apply=_plamo2_default_ids_swapped,
    ),
]


# A WordPiece vocabulary without an UNK id key takes SPM's UNK 0 instead of BERT's 100.
_wpm_spm_default_unk = _ids_when_keys_missing(
    "bert", {"tokenizer.ggml.unknown_token_id": ("unk_id", 0)}
)


MUTANTS += [
    Mutant(
        "tok-wpm-spm-default-unk",
        "tokenizer",
        "a WordPiece vocabulary without an unknown_token_id key takes UNK 0 instead of 100",
        kills=("TOK-088",),
        apply=_wpm_spm_default_unk,
    ),
]
