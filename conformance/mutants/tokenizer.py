"""Tokenizer mutants: one deliberate defect each (see tests/meta)."""

from __future__ import annotations

from typing import Any

from conformance.mutants import Mutant, replace


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

    def _tokenize_fragment(self: Any, text: str, out: list[int]) -> None:
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

    SpmTokenizer._tokenize_fragment = _tokenize_fragment  # type: ignore[method-assign]
    return target


def _unk_instead_of_bytes(target: Any) -> Any:
    from reference_impl.tokenizer import SpmTokenizer

    original = SpmTokenizer._tokenize_fragment

    def _tokenize_fragment(self: Any, text: str, out: list[int]) -> None:
        tmp: list[int] = []
        original(self, text, tmp)
        byte_ids = set(self._byte_ids)
        for t in tmp:
            if t in byte_ids:
                if not out or out[-1] != self.vocab.unk_id:
                    out.append(self.vocab.unk_id)
            else:
                out.append(t)

    SpmTokenizer._tokenize_fragment = _tokenize_fragment  # type: ignore[method-assign]
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
