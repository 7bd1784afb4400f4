"""The vocabulary of a GGUF file (``tokenizer.ggml.*``) and the parts every family shares:
the ``tokenize`` frame (special-token partition, BOS / EOS) around each family's fragment
algorithm, ``token_to_piece`` and ``detokenize``."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Protocol

from reference_impl.errors import EngineError, ModelLoadError
from reference_impl.spec_links import implements

SPACE_ESCAPE = "\u2581"  # '▁'
NULL_ID = -1  # llama.cpp's LLAMA_TOKEN_NULL


class TokenType(IntEnum):
    """GGUF ``tokenizer.ggml.token_type`` values (llama.h ``llama_token_type``)."""

    UNDEFINED = 0
    NORMAL = 1
    UNKNOWN = 2
    CONTROL = 3
    USER_DEFINED = 4
    UNUSED = 5
    BYTE = 6


class TokenizerError(EngineError):
    """Invalid tokenizer input (a token id outside the vocabulary) or an unusable vocabulary."""


@dataclass(frozen=True)
class Vocab:
    """A GGUF vocabulary. The defaults are SPM's (``tokenizer.ggml.model = "llama"``); other
    families set ``model`` and their own fields (``merges``, ``pre`` for BPE)."""

    tokens: tuple[str, ...]
    scores: tuple[float, ...]
    types: tuple[int, ...]
    bos_id: int = 1
    eos_id: int = 2
    unk_id: int = 0
    add_bos: bool = True
    add_eos: bool = False
    add_space_prefix: bool = True
    model: str = "llama"
    pre: str = ""
    merges: tuple[tuple[str, str], ...] = ()
    sep_id: int = NULL_ID
    add_sep: bool = False
    clean_spaces: bool = False
    ignore_merges: bool = False
    lowercase: bool = True  # WPM normalizer
    strip_accents: bool = True  # WPM normalizer
    charsmap: bytes = b""  # UGM: SentencePiece's precompiled_charsmap
    remove_extra_whitespaces: bool = False  # UGM
    # ids of special tokens that swallow the whitespace before (LSTRIP) / after (RSTRIP) them in
    # the partition; llama.cpp sets them from the model's name, pre type or architecture
    lstrip_ids: frozenset[int] = frozenset()
    rstrip_ids: frozenset[int] = frozenset()
    token_to_id: dict[str, int] = field(init=False, repr=False, compare=False)
    merge_ranks: dict[tuple[str, str], int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not (len(self.tokens) == len(self.scores) == len(self.types)):
            raise TokenizerError(
                "TOK_VOCAB_INCONSISTENT",
                f"{len(self.tokens)} tokens, {len(self.scores)} scores, {len(self.types)} types",
                field="tokenizer.ggml.tokens",
            )
        # Later duplicates win, as in llama.cpp's token_to_id map.
        object.__setattr__(self, "token_to_id", {t: i for i, t in enumerate(self.tokens)})
        ranks: dict[tuple[str, str], int] = {}
        for rank, pair in enumerate(self.merges):
            ranks.setdefault(pair, rank)  # a repeated pair keeps its first rank
        object.__setattr__(self, "merge_ranks", ranks)

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)


SpmVocab = Vocab  # the name the SPM-only reference used


class Meta(Protocol):
    """Typed access to GGUF metadata (``reference_impl.model.gguf_loader._Meta``)."""

    def get_str(self, key: str, default: str | None = None) -> str: ...
    def get_int(self, key: str, default: int | None = None) -> int: ...
    def get_bool(self, key: str, default: bool) -> bool: ...
    def get_array(self, key: str, item_types: tuple[str, ...]) -> list[Any] | None: ...


def _load_err(code: str, message: str, key: str, index: int | None = None) -> ModelLoadError:
    return ModelLoadError(code, message, field=key, index=index)


SUPPORTED_MODELS = ("llama", "gpt2", "bert", "t5", "rwkv", "plamo2")


@implements(
    "GGUF-016",
    "TOK-058",
    "TOK-062",
    "TOK-065",
    "TOK-075",
    "TOK-082",
    "TOK-084",
    "TOK-086",
    "TOK-088",
)
def load_vocab(meta: Meta) -> Vocab | None:
    """The vocabulary described by ``tokenizer.ggml.*`` (None for ``no_vocab``), with llama.cpp's
    per-family defaults; malformed or unsupported vocabularies raise :class:`ModelLoadError`
    naming the key (and the index of a bad array entry)."""
    from reference_impl.tokenizer.pretokenize import PRE_TYPES

    model = meta.get_str("tokenizer.ggml.model")
    if model in ("no_vocab", "none"):
        return None
    if model not in SUPPORTED_MODELS:
        raise _load_err(
            "GGUF_UNSUPPORTED_TOKENIZER",
            f"tokenizer.ggml.model {model!r} is not supported "
            f"(supported: {', '.join(SUPPORTED_MODELS)}, no_vocab)",
            "tokenizer.ggml.model",
        )
    tokens = meta.get_array("tokenizer.ggml.tokens", ("STRING",))
    if tokens is None:
        raise _load_err("GGUF_MISSING_KEY", "the token list is missing", "tokenizer.ggml.tokens")
    n = len(tokens)
    scores = meta.get_array("tokenizer.ggml.scores", ("FLOAT32", "INT32"))
    types = meta.get_array("tokenizer.ggml.token_type", ("INT32",))
    for key, arr in (("tokenizer.ggml.scores", scores), ("tokenizer.ggml.token_type", types)):
        if arr is not None and len(arr) < n:
            raise _load_err(
                "GGUF_INVALID_HPARAM", f"{key} has {len(arr)} entries for {n} tokens", key
            )
    common: dict[str, Any] = {
        "tokens": tuple(str(t) for t in tokens),
        "scores": tuple(float(s) for s in scores[:n]) if scores is not None else (0.0,) * n,
        "types": tuple(int(t) for t in types[:n]) if types is not None else (1,) * n,
    }
    if model == "llama":
        defaults: dict[str, Any] = {"bos_id": 1, "eos_id": 2, "unk_id": 0, "add_bos": True}
        defaults |= {"sep_id": NULL_ID, "add_sep": False, "add_space_prefix": True}
        extra: dict[str, Any] = {}
    elif model == "bert":
        defaults = {"bos_id": 101, "eos_id": NULL_ID, "unk_id": 100, "sep_id": 102}
        defaults |= {"add_bos": True, "add_sep": True, "add_space_prefix": False}
        lowercase = meta.get_bool("tokenizer.ggml.normalizer.lowercase", True)
        extra = {
            "model": model,
            "clean_spaces": True,
            "lowercase": lowercase,
            "strip_accents": meta.get_bool("tokenizer.ggml.normalizer.strip_accents", lowercase),
        }
    elif model == "rwkv":
        defaults = {"bos_id": NULL_ID, "eos_id": NULL_ID, "unk_id": NULL_ID, "sep_id": NULL_ID}
        defaults |= {"add_bos": False, "add_sep": False, "add_space_prefix": False}
        extra = {"model": model}
    elif model == "plamo2":
        defaults = {"bos_id": 1, "eos_id": 2, "unk_id": 0, "sep_id": NULL_ID}
        defaults |= {"add_bos": False, "add_sep": False, "add_space_prefix": False}
        extra = {"model": model}
    elif model == "t5":
        defaults = {"bos_id": NULL_ID, "eos_id": 1, "unk_id": 2, "sep_id": NULL_ID}
        defaults |= {"add_bos": False, "add_sep": False, "add_space_prefix": False}
        extra = {
            "model": model,
            "charsmap": _read_charsmap(meta),
            "remove_extra_whitespaces": meta.get_bool(
                "tokenizer.ggml.remove_extra_whitespaces", False
            ),
        }
    else:
        pre_name = meta.get_str("tokenizer.ggml.pre", "")
        pre = PRE_TYPES.get(pre_name)
        if pre is None:
            raise _load_err(
                "GGUF_UNSUPPORTED_TOKENIZER",
                f"BPE pre-tokenizer {pre_name!r} is not supported",
                "tokenizer.ggml.pre",
            )
        defaults = {"bos_id": 11, "eos_id": 11, "unk_id": NULL_ID, "sep_id": NULL_ID}
        defaults |= {"add_bos": pre.add_bos, "add_sep": False, "add_space_prefix": False}
        extra = {
            "model": model,
            "pre": pre_name,
            "merges": _read_merges(meta, common["tokens"]),
            "clean_spaces": pre.clean_spaces,
            "ignore_merges": pre.ignore_merges,
        }
    for name, value in list(defaults.items()):
        if name.endswith("_id") and value >= n:
            defaults[name] = NULL_ID  # a family default outside the vocabulary is unset
    vocab = Vocab(
        **common,
        bos_id=meta.get_int("tokenizer.ggml.bos_token_id", defaults["bos_id"]),
        eos_id=meta.get_int("tokenizer.ggml.eos_token_id", defaults["eos_id"]),
        unk_id=meta.get_int("tokenizer.ggml.unknown_token_id", defaults["unk_id"]),
        sep_id=meta.get_int("tokenizer.ggml.seperator_token_id", defaults["sep_id"]),
        add_bos=meta.get_bool("tokenizer.ggml.add_bos_token", defaults["add_bos"]),
        add_eos=meta.get_bool("tokenizer.ggml.add_eos_token", model == "t5"),
        add_sep=meta.get_bool("tokenizer.ggml.add_sep_token", defaults["add_sep"]),
        add_space_prefix=meta.get_bool(
            "tokenizer.ggml.add_space_prefix", defaults["add_space_prefix"]
        ),
        **extra,
    )
    lstrip, rstrip = strip_attributes(meta, vocab)
    if lstrip or rstrip:
        vocab = dataclasses.replace(vocab, lstrip_ids=lstrip, rstrip_ids=rstrip)
    if model == "plamo2":
        missing = _missing_byte_token(vocab)
        if missing is not None:
            raise _load_err(
                "GGUF_INVALID_HPARAM",
                f"PLaMo-2 needs a BYTE token <0x{missing:02X}> (not at id 0)",
                "tokenizer.ggml.token_type",
            )
    for key, tid in (
        ("tokenizer.ggml.bos_token_id", vocab.bos_id),
        ("tokenizer.ggml.eos_token_id", vocab.eos_id),
    ):
        if tid != NULL_ID and not 0 <= tid < n:
            raise _load_err("GGUF_INVALID_HPARAM", f"{key} = {tid} is outside [0, {n})", key)
    return vocab


C_SPACE = " \t\n\v\f\r"  # C isspace() in the "C" locale: what LSTRIP / RSTRIP remove
# Name rules (substrings): the first that matches wins, as in llama.cpp's if / else-if chain.
_JINA_PRES = ("jina-v2-de", "jina-v2-es", "jina-v2-code")
_JINA_ARCHS = ("nomic-bert-moe", "jina-bert-v3")
_PHI3_NAMES = ("phi-3", "phi3")
_PHI3_KEEP = ("<unk>", "<s>", "<|endoftext|>")  # RSTRIP cleared (they must exist)


@implements("TOK-068")
def strip_attributes(meta: Meta, vocab: Vocab) -> tuple[frozenset[int], frozenset[int]]:
    """(LSTRIP ids, RSTRIP ids) llama.cpp derives after loading: ``<mask>`` LSTRIP for a
    ``jina-v2-*`` pre type or a ``nomic-bert-moe`` / ``jina-bert-v3`` architecture; for a
    ``general.name`` containing ``phi-3`` / ``phi3`` (any case), RSTRIP on every special token
    (CONTROL, USER_DEFINED, UNKNOWN) and on ``</s>``, then cleared on ``<unk>``, ``<s>`` and
    ``<|endoftext|>``, all four of which must be tokens; ``[MASK]`` LSTRIP for a name containing
    ``modern-bert``. A missing mask token only leaves the attribute unset."""
    pre = meta.get_str("tokenizer.ggml.pre", "")
    arch = meta.get_str("general.architecture", "")
    name = meta.get_str("general.name", "").lower()
    ids = vocab.token_to_id
    if any(p in pre for p in _JINA_PRES) or any(a in arch for a in _JINA_ARCHS):
        return (frozenset([ids["<mask>"]]) if "<mask>" in ids else frozenset()), frozenset()
    if any(n in name for n in _PHI3_NAMES):
        for text in ("</s>", *_PHI3_KEEP):
            if text not in ids:
                raise _load_err(
                    "GGUF_INVALID_HPARAM",
                    f"a phi-3 vocabulary (general.name {name!r}) needs the token {text!r}",
                    "tokenizer.ggml.tokens",
                )
        special = (TokenType.CONTROL, TokenType.USER_DEFINED, TokenType.UNKNOWN)
        rstrip = {i for i, t in enumerate(vocab.types) if t in special} | {ids["</s>"]}
        return frozenset(), frozenset(rstrip - {ids[t] for t in _PHI3_KEEP})
    if "modern-bert" in name and "[MASK]" in ids:
        return frozenset([ids["[MASK]"]]), frozenset()
    return frozenset(), frozenset()


@implements("TOK-062")
def _missing_byte_token(vocab: Vocab) -> int | None:
    """The first byte without a ``<0xXX>`` BYTE token (llama.cpp refuses such a vocabulary;
    id 0 counts as unset), or None."""
    seen = [False] * 256
    for i, (text, t) in enumerate(zip(vocab.tokens, vocab.types, strict=True)):
        if t == TokenType.BYTE and i != 0 and len(text) == 6 and text.startswith("<0x"):
            try:
                seen[int(text[3:5], 16)] = True
            except ValueError:
                continue
    missing = [b for b in range(256) if not seen[b]]
    return missing[0] if missing else None


@implements("TOK-062")
def _read_charsmap(meta: Meta) -> bytes:
    """``tokenizer.ggml.precompiled_charsmap``: a u32 trie size, the trie, then strings."""
    key = "tokenizer.ggml.precompiled_charsmap"
    raw = meta.get_array(key, ("UINT8", "INT8"))
    if raw is None:
        return b""
    blob = bytes(int(b) & 0xFF for b in raw)
    if len(blob) < 4 or int.from_bytes(blob[:4], "little") + 4 >= len(blob):
        raise _load_err("GGUF_INVALID_HPARAM", "the charsmap's trie size is out of range", key)
    return blob


@implements("TOK-062")
def _read_merges(meta: Meta, tokens: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``tokenizer.ggml.merges``: ``"left right"`` strings (split at the first space after the
    first character); both sides and their concatenation must be tokens."""
    key = "tokenizer.ggml.merges"
    raw = meta.get_array(key, ("STRING",))
    if raw is None:
        raise _load_err("GGUF_MISSING_KEY", "a BPE vocabulary needs merges", key)
    known = set(tokens)
    merges = []
    for i, entry in enumerate(raw):
        text = str(entry)
        cut = text.find(" ", 1)
        if cut < 0:
            raise _load_err("GGUF_INVALID_HPARAM", f"merge {text!r} has no space", key, i)
        left, right = text[:cut], text[cut + 1 :]
        for part in (left, right, left + right):
            if part not in known:
                raise _load_err(
                    "GGUF_INVALID_HPARAM", f"merge {text!r} names unknown token {part!r}", key, i
                )
        merges.append((left, right))
    return tuple(merges)


class BaseTokenizer:
    """What every family shares: the special-token partition, pieces and detokenize."""

    def __init__(self, vocab: Vocab) -> None:
        self.vocab = vocab
        special = (TokenType.CONTROL, TokenType.USER_DEFINED, TokenType.UNKNOWN)
        ids = [i for i, t in enumerate(vocab.types) if t in special]
        # Longest text first (llama.cpp's sort is unstable: equal lengths must not overlap).
        self._special_ids = sorted(ids, key=lambda i: -len(vocab.tokens[i].encode()))

    def tokenize(
        self, text: str, add_special: bool = True, parse_special: bool = False
    ) -> list[int]:
        """llama_tokenize: the special-token partition, each raw-text fragment tokenized by the
        family's :meth:`_tokenize_fragment`, framed by :meth:`_head` / :meth:`_tail` when
        ``add_special``."""
        out = self._head() if add_special else []
        for frag in self._partition(text, parse_special):
            if isinstance(frag, int):
                out.append(frag)
            else:
                self._tokenize_fragment(frag, out)
        if add_special:
            out += self._tail()
        return out

    def _tokenize_fragment(self, text: str, out: list[int]) -> None:
        """Append the ids of one raw-text fragment (non-empty, from :meth:`_partition`, so it
        starts the text or follows a special token) to ``out``: the family's algorithm."""
        raise NotImplementedError

    @implements("TOK-002", "TOK-055", "TOK-058")
    def _head(self) -> list[int]:
        """The ids ``add_special`` puts first: BOS when the vocabulary's ``add_bos`` says so."""
        return [self.vocab.bos_id] if self.vocab.add_bos else []

    @implements("TOK-002", "TOK-055")
    def _tail(self) -> list[int]:
        """The ids ``add_special`` puts last: EOS when the vocabulary's ``add_eos`` says so."""
        return [self.vocab.eos_id] if self.vocab.add_eos else []

    @implements("TOK-006", "TOK-061")
    def _partition(self, text: str, parse_special: bool) -> list[str | int]:
        """Split ``text`` on special-token texts; ints are token ids, strings raw text."""
        frags: list[str | int] = [text] if text else []
        skip = (TokenType.CONTROL, TokenType.UNKNOWN)
        for tid in self._special_ids:
            if not parse_special and self.vocab.types[tid] in skip:
                continue
            needle = self.vocab.tokens[tid]
            if not needle:
                continue
            nxt: list[str | int] = []
            for frag in frags:
                if isinstance(frag, int) or needle not in frag:
                    nxt.append(frag)
                    continue
                nxt.extend(self._split_on(frag, needle, tid))
            frags = nxt
        return frags

    @implements("TOK-068")
    def _split_on(self, frag: str, needle: str, tid: int) -> list[str | int]:
        """``frag`` split at each occurrence of ``needle`` (left to right), the token's LSTRIP /
        RSTRIP removing C whitespace from the text before / after it; the search goes on in
        the stripped rest, and emptied pieces are dropped."""
        lstrip, rstrip = tid in self.vocab.lstrip_ids, tid in self.vocab.rstrip_ids
        out: list[str | int] = []
        while (at := frag.find(needle)) >= 0:
            left = frag[:at].rstrip(C_SPACE) if lstrip else frag[:at]
            if left:
                out.append(left)
            out.append(tid)
            frag = frag[at + len(needle) :]
            if rstrip:
                frag = frag.lstrip(C_SPACE)
        if frag:
            out.append(frag)
        return out

    @implements("TOK-010")
    def _check(self, token: int, index: int | None = None) -> None:
        if not 0 <= int(token) < self.vocab.n_tokens:
            raise TokenizerError(
                "TOK_TOKEN_RANGE",
                f"token id {int(token)} is outside the vocabulary [0, {self.vocab.n_tokens})",
                field="token",
                index=index,
            )

    def _normal_piece(self, text: str) -> bytes:
        """The bytes of a NORMAL token (family-specific)."""
        return text.replace(SPACE_ESCAPE, " ").encode()

    @implements("TOK-007", "TOK-081")
    def token_to_piece(self, token: int, special: bool = False, lstrip: int = 0) -> bytes:
        """The bytes of one token (llama_token_to_piece); control/unknown tokens are empty
        unless ``special``; up to ``lstrip`` leading spaces are removed."""
        self._check(token)
        ttype = self.vocab.types[token]
        text = self.vocab.tokens[token]
        if ttype in (TokenType.CONTROL, TokenType.UNKNOWN):
            piece = text.encode() if special else b""
        elif ttype == TokenType.USER_DEFINED:
            piece = text.encode()
        elif ttype == TokenType.BYTE:
            piece = bytes([int(text[3:5], 16)])
        elif ttype == TokenType.NORMAL:
            piece = self._normal_piece(text)
        else:  # undefined / unused types render as nothing, like llama.cpp
            piece = b""
        k = 0
        while k < lstrip and piece[:1] == b" ":
            piece = piece[1:]
            k += 1
        return piece

    @implements("TOK-008", "TOK-009", "TOK-060")
    def detokenize(
        self, tokens: Sequence[int], remove_special: bool = False, unparse_special: bool = False
    ) -> bytes:
        """llama_detokenize: the pieces joined, the leading space of the first piece removed
        when the family prefixes one (unless a removed BOS preceded it), then the family's
        space clean-up."""
        toks = [int(t) for t in tokens]
        for i, t in enumerate(toks):
            self._check(t, i)
        vocab = self.vocab
        remove_space = vocab.add_space_prefix
        if remove_special and vocab.add_bos and toks and toks[0] == vocab.bos_id:
            remove_space = False  # llama.cpp keeps the space after a removed BOS
            toks = toks[1:]
        if remove_special and vocab.add_eos and toks and toks[-1] == vocab.eos_id:
            toks = toks[:-1]
        parts = []
        for t in toks:
            parts.append(self.token_to_piece(t, special=unparse_special, lstrip=int(remove_space)))
            remove_space = False
        text = b"".join(parts)
        return clean_spaces(text) if vocab.clean_spaces else text


@implements("TOK-056")
def clean_spaces(text: bytes) -> bytes:
    """llama.cpp's three detokenize clean-up passes (the first byte is always kept):
    a space before ``? ! . ,`` goes; a ``'`` between two spaces loses both; a space before
    ``'s``, ``'m``, ``'re``, ``'ve`` goes (not before ``'t``, ``'d``, ``'ll``)."""
    buf = bytearray(text)
    # pass 1
    out = bytearray(buf[:1])
    for i in range(1, len(buf)):
        if buf[i - 1] == 0x20 and buf[i] in b"?!.,":
            out.pop()
        out.append(buf[i])
    # pass 2: the space after the apostrophe is blanked in place, so it cannot also count as
    # the "space before" of the next character
    buf = out
    out = bytearray(buf[:1])
    i = 1
    while i < len(buf):
        x = buf[i]
        if x == 0x27 and i + 1 < len(buf) and buf[i - 1] == 0x20 and buf[i + 1] == 0x20:
            out.pop()
            i += 1
            buf[i] = 0
        out.append(x)
        i += 1
    # pass 3
    buf = out
    out = bytearray(buf[:1])
    for i in range(1, len(buf)):
        if buf[i - 1] == 0x20 and buf[i] == 0x27 and i + 1 < len(buf):
            nxt = bytes(buf[i + 1 : i + 3])
            if nxt[:1] in (b"s", b"m") or (i + 2 < len(buf) and nxt in (b"re", b"ve")):
                out.pop()
        out.append(buf[i])
    return bytes(out)
