"""The named batch corpus is well formed (it is reused by the llama.cpp parity session)."""

from __future__ import annotations

from conformance.fixtures.batch_corpus import CASES, OOV, Accepted, Rejected, build_batch
from reference_impl.batch.codes import SAN_CODES


def test_names_unique_and_enough() -> None:
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))
    assert len(CASES) >= 30


def test_expectations_are_consistent() -> None:
    for c in CASES:
        b = build_batch(c)
        n = b.n_tokens
        assert c.llamacpp in ("same", "differs", "undefined", "unreachable"), c.name
        if isinstance(c.expected, Accepted):
            assert len(c.expected.pos) == len(c.expected.outputs) == n, c.name
            after = c.memory_after()
            for s, (lo, hi) in after.items():
                assert lo <= hi, (c.name, s)
        else:
            assert isinstance(c.expected, Rejected)
            assert c.expected.code in SAN_CODES, c.name
            assert c.expected.index is None or 0 <= c.expected.index < n, c.name


def test_out_of_vocabulary_placeholder() -> None:
    case = next(c for c in CASES if c.tokens is not None and OOV in c.tokens)
    assert int(build_batch(case, n_vocab=1000).token[case.tokens.index(OOV)]) == 1000  # type: ignore[index,union-attr]
