"""Bench: tokenizing a mixed-script text (reference_impl.tokenizer vs llama.cpp's llama_tokenize).

Work is the text's UTF-8 bytes per round (bytes/s); the token count is in ``params``. The text
is :func:`conformance.strategies.tokenizer.mixed_script_text` (ASCII prose with punctuation and
numbers, whitespace runs, CJK, Hangul, Cyrillic, Arabic, emoji, combining marks; fixed seed) of
``DC_BENCH_TOKENIZER_BYTES`` bytes (1 MiB by default). One vocabulary per family: the SPM fixture
vocabulary, the trained BPE fixture with three pre-tokenizer types, WordPiece, unigram, RWKV,
PLaMo-2, and GPT-2's real vocabulary. Specials are neither added nor parsed. A reference round
takes a few hundred ms, so each case times a fixed 3 rounds (``pedantic``), not the harness's
count.

The subject is the reference tokenizer's ``tokenize(text)``. The peer is ``llama_tokenize`` of
llama-cpp-python's ``libllama`` on a ``vocab_only`` load of the same GGUF file, called alone
(the UTF-8 buffer and the output array are made outside the timed call, the ids are read back
after it). Both must give the same ids; that is checked outside the timed function.

Once both sides of a family ran in this session, ``extra_info["ratio"]`` of both cases holds the
reference's median time over llama.cpp's (issue 16's target: at most 10), and the terminal
summary lists the ratio per family.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from conformance.fixtures import vocabularies as vocabs
from conformance.strategies.tokenizer import mixed_script_text
from tools.bench.common import record

AREA = "tokenizer"
TEXT_BYTES = int(os.environ.get("DC_BENCH_TOKENIZER_BYTES", 1 << 20))
ROUNDS = 3  # one subject round takes up to half a second on 1 MiB: few rounds, all timed
HAVE_LLAMA_CPP = importlib.util.find_spec("llama_cpp") is not None


def _spm_path() -> Path:
    from conformance.fixtures.gguf_models import fixture_path

    return Path(fixture_path("mha"))  # every model fixture carries the SPM fixture vocabulary


FAMILIES: dict[str, Callable[[], Path]] = {
    "spm": _spm_path,
    "bpe-gpt-2": lambda: vocabs.bpe_vocab_path("gpt-2"),
    "bpe-llama-bpe": lambda: vocabs.bpe_vocab_path("llama-bpe"),
    "bpe-qwen2": lambda: vocabs.bpe_vocab_path("qwen2"),
    "wpm": vocabs.wpm_vocab_path,
    "ugm": vocabs.ugm_vocab_path,
    "rwkv": vocabs.rwkv_vocab_path,
    "plamo2": vocabs.plamo2_vocab_path,
    "gpt2-real": vocabs.gpt2_vocab_path,
}


@cache
def _text(n_bytes: int) -> str:
    return mixed_script_text(n_bytes)


@cache
def _tokenizer(family: str) -> Any:
    """The reference tokenizer of ``family`` (loading GPT-2's vocabulary takes seconds)."""
    from reference_impl.tokenizer import load_vocab_file

    return load_vocab_file(FAMILIES[family]())


# family -> role -> (median seconds, the case's extra_info), filled as the timed cases end.
_MEDIANS: dict[str, dict[str, tuple[float, dict[str, Any]]]] = {}


class _RatioSummary:
    """Writes the reference / llama.cpp time ratio per family at the end of the session."""

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        rows = [
            (family, sides["subject"][0] / sides["peer"][0])
            for family, sides in _MEDIANS.items()
            if len(sides) == 2
        ]
        if not rows:
            return
        terminalreporter.write_sep("-", "tokenizer: reference time / llama.cpp time (target <= 10)")
        for family, ratio in rows:
            terminalreporter.write_line(f"{family:<16} {ratio:6.1f}x")


@pytest.fixture(scope="module", autouse=True)
def _ratio_summary(request: pytest.FixtureRequest) -> None:
    manager = request.config.pluginmanager
    if not manager.has_plugin("dc-bench-tokenizer-ratios"):
        manager.register(_RatioSummary(), "dc-bench-tokenizer-ratios")


def _note_median(benchmark: Any, family: str, role: str) -> None:
    """Keep this case's median; once both sides have one, store the ratio in both cases."""
    median = getattr(getattr(benchmark, "stats", None), "stats", None)
    median = getattr(median, "median", None)
    if not isinstance(median, float) or median <= 0:
        return  # not timed (--benchmark-disable)
    sides = _MEDIANS.setdefault(family, {})
    sides[role] = (median, benchmark.extra_info)
    if "subject" in sides and "peer" in sides:
        ratio = sides["subject"][0] / sides["peer"][0]
        for _, info in sides.values():
            info["ratio"] = ratio


# The reference's ids per family, kept from the subject case so that a smoke run (each case
# once, untimed) tokenizes the long text once per family on the reference, not twice.
_IDS: dict[str, tuple[int, ...]] = {}


def _reference_ids(family: str) -> tuple[int, ...]:
    if family not in _IDS:
        _IDS[family] = tuple(_tokenizer(family).tokenize(_text(TEXT_BYTES), False, False))
    return _IDS[family]


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("role", ["subject", "peer"])
def test_tokenize(benchmark: Any, role: str, family: str) -> None:
    text = _text(TEXT_BYTES)
    raw = text.encode("utf-8")
    pair = f"tokenizer/tokenize/{family}"
    if role == "subject":
        tok = _tokenizer(family)
        got = benchmark.pedantic(tok.tokenize, (text, False, False), rounds=ROUNDS, iterations=1)
        assert tuple(got) == _IDS.setdefault(family, tuple(got))  # the same on every call
        params = {"family": family, "text_bytes": len(raw), "n_tokens": len(got)}
        record(benchmark, area=AREA, work=len(raw), unit="bytes", params=params, pair=pair)
        _note_median(benchmark, family, role)
        return
    if not HAVE_LLAMA_CPP:
        pytest.skip("llama-cpp-python is not importable (the 'llamacpp' extra)")
    import llama_cpp as lc

    from conformance.targets.llamacpp.runtime import LlamaCppModel

    want = _reference_ids(family)
    params = {"family": family, "text_bytes": len(raw), "n_tokens": len(want)}
    with LlamaCppModel(FAMILIES[family](), vocab_only=True) as model:
        cap = len(raw) + 8
        buf = (lc.llama_token * cap)()
        args = (model._vocab, raw, len(raw), buf, cap, False, False)
        n = benchmark.pedantic(lc.llama_tokenize, args, rounds=ROUNDS, iterations=1)
    assert n == len(want)
    assert tuple(buf[:n]) == want
    record(
        benchmark,
        area=AREA,
        work=len(raw),
        unit="bytes",
        params=params,
        pair=pair,
        role="peer",
        peer="llama.cpp (llama-cpp-python)",
    )
    _note_median(benchmark, family, role)
