"""A naive SPM tokenizer written from the rule in spec/tokenizer.md (the test oracle).

It reads the vocabulary with ``gguf.GGUFReader`` and shares no code with ``reference_impl``.
Each merge step scans every adjacent pair (quadratic, fine for test texts).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache

import gguf

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, BYTE = 1, 2, 3, 4, 6


@dataclass(frozen=True)
class OracleVocab:
    tokens: tuple[str, ...]
    scores: tuple[float, ...]
    types: tuple[int, ...]
    bos: int
    ids: dict[str, int]


@lru_cache(maxsize=8)
def load_vocab(path: str | os.PathLike[str]) -> OracleVocab:
    r = gguf.GGUFReader(str(path))

    def field(key: str) -> list[object]:
        f = r.get_field(key)
        assert f is not None, key
        return list(f.contents())

    tokens = tuple(str(t) for t in field("tokenizer.ggml.tokens"))
    bos_field = r.get_field("tokenizer.ggml.bos_token_id")
    return OracleVocab(
        tokens=tokens,
        scores=tuple(float(s) for s in field("tokenizer.ggml.scores")),  # type: ignore[arg-type]
        types=tuple(int(t) for t in field("tokenizer.ggml.token_type")),  # type: ignore[call-overload]
        bos=int(bos_field.contents()) if bos_field is not None else 1,
        ids={t: i for i, t in enumerate(tokens)},
    )


def _merge(v: OracleVocab, text: str) -> list[int]:
    syms = list(text)
    while True:
        best = None  # (score, position)
        for i in range(len(syms) - 1):
            tid = v.ids.get(syms[i] + syms[i + 1])
            if tid is not None and (best is None or v.scores[tid] > best[0]):
                best = (v.scores[tid], i)
        if best is None:
            break
        i = best[1]
        syms[i : i + 2] = [syms[i] + syms[i + 1]]
    out: list[int] = []
    for s in syms:
        if s in v.ids:
            out.append(v.ids[s])
        else:
            out.extend(v.ids[f"<0x{b:02X}>"] for b in s.encode("utf-8"))
    return out


def tokenize(
    path: str | os.PathLike[str], text: str, add_special: bool = True, parse_special: bool = False
) -> list[int]:
    v = load_vocab(str(path))
    kinds = (CONTROL, USER_DEFINED, UNKNOWN) if parse_special else (USER_DEFINED,)
    specials = sorted(
        (i for i, t in enumerate(v.types) if t in kinds), key=lambda i: -len(v.tokens[i])
    )
    out = [v.bos] if add_special else []
    prev_special = True
    pos = 0
    while pos < len(text):
        # the earliest special-token match; at equal positions the longest token
        hit = None
        for tid in specials:
            at = text.find(v.tokens[tid], pos)
            if at >= 0 and (hit is None or at < hit[0]):
                hit = (at, tid)
        end = hit[0] if hit is not None else len(text)
        if end > pos:
            frag = text[pos:end]
            if prev_special:
                frag = " " + frag
            out.extend(_merge(v, frag.replace(" ", "\u2581")))
            prev_special = False
        if hit is None:
            break
        out.append(hit[1])
        prev_special = True
        pos = hit[0] + len(v.tokens[hit[1]])
    return out
