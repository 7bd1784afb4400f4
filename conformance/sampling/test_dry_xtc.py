"""DRY (SMP-080) and XTC (SMP-081): exact small cases and properties."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.fixtures.gguf_models import fixture_path
from conformance.gate import cached
from conformance.sampling.support import candidates, chain_of, describe, from_probs, same_array
from conformance.strategies.sampling import seeds, token_arrays
from reference_impl.sampling.token_data import TokenDataArray

F32 = np.float32
DRY_CAPS = ("sampling.chain", "sampling.dry")
XTC_CAPS = ("sampling.chain", "sampling.xtc")


def dry_entry(**params: Any) -> list[Any]:
    """A DRY chain entry; a parameter given as None is left out (the sampler's default)."""
    merged = {"multiplier": 0.8, "base": 1.75, "allowed_length": 2} | params
    return ["dry", {k: v for k, v in merged.items() if v is not None}]


def after_history(target: Any, spec: Any, history: list[int], cur: TokenDataArray) -> Any:
    with chain_of(target, spec) as handle:
        for token in history:
            target.sampler_accept(handle, token)
        return target.sampler_apply(handle, cur)


def penalty(multiplier: float, base: float, exponent: int) -> np.float32:
    """multiplier * std::pow(base, exponent): float parameters, double power, one rounding."""
    return F32(float(F32(multiplier)) * float(F32(base)) ** exponent)


def penalised(n: int, rows: dict[int, np.float32]) -> np.ndarray:
    """The logits of an all-zero row of ``n`` after subtracting ``rows[token]``."""
    out = np.zeros(n, F32)
    for token, amount in rows.items():
        out[token] = F32(F32(0.0) - amount)
    return out


# (id, params, history, {token: penalty exponent})
DRY_CASES: list[tuple[str, dict[str, Any], list[int], dict[int, int]]] = [
    ("repeat-2", {"penalty_last_n": 20}, [1, 2, 3, 1, 2], {3: 0}),
    ("repeat-3", {"penalty_last_n": 20}, [1, 2, 3, 4, 1, 2, 3], {4: 1}),
    ("too-short", {"penalty_last_n": 20}, [1, 2, 3, 1], {}),
    ("window-keeps-it", {"penalty_last_n": 6}, [1, 2, 3, 9, 1, 2], {3: 0}),
    ("window-drops-it", {"penalty_last_n": 5}, [1, 2, 3, 9, 1, 2], {}),
    ("breaker-newest", {"penalty_last_n": 20, "breakers": [[3]]}, [1, 2, 3, 4, 1, 2, 3], {}),
    (
        "breaker-caps",
        {"penalty_last_n": 20, "allowed_length": 1, "breakers": [[2]]},
        [1, 2, 3, 4, 1, 2, 3],
        {4: 0},
    ),
    (
        "two-token-breaker",
        {"penalty_last_n": 20, "allowed_length": 1, "breakers": [[7, 2]]},
        [1, 2, 3, 4, 1, 7, 2, 3],
        {4: 0},
    ),
    ("single-token-breaker-spared", {"penalty_last_n": 20, "allowed_length": 1, "breakers": [[5]]}, [1, 5, 2, 1], {}),
    ("single-token-breaker-absent", {"penalty_last_n": 20, "allowed_length": 1}, [1, 5, 2, 1], {5: 0}),
    ("longest-wins", {"penalty_last_n": 20, "allowed_length": 1}, [4, 1, 2, 5, 2, 6, 1, 2], {5: 1, 6: 0}),
    # runs of one token: the repeat lengths overlap (the Z-function's box reuse); only the
    # token after a repeat of the newest tokens is penalised, never the one before the run
    ("run-after-pair", {"penalty_last_n": 20, "allowed_length": 1}, [5, 5, 1, 1, 1], {1: 1}),
    ("run-after-other", {"penalty_last_n": 20}, [5, 1, 5, 5, 5], {5: 0}),
    # penalty_last_n left out: the default window of 64 holds the run [1, 2] before 3 only
    # when the history is 64 tokens long
    ("default-window-keeps-it", {"penalty_last_n": None}, [1, 2, 3, *range(100, 159), 1, 2], {3: 0}),
    ("default-window-drops-it", {"penalty_last_n": None}, [1, 2, 3, *range(100, 160), 1, 2], {}),
    # allowed_length left out: the default 2 makes the repeat of 3 cost base^1
    ("default-allowed-length", {"penalty_last_n": 20, "allowed_length": None}, [1, 2, 3, 4, 1, 2, 3], {4: 1}),
    # float(1.000001) is not > 1.000001f: no exponent cap at all (a cap of 1 would give base^1)
    # int(88.7228391 / logf(1e20)) = 1: the cap of 1 holds (an uncapped base^2 is inf)
    ("huge-base-cap-1", {"penalty_last_n": 20, "base": 1e20}, [1, 2, 3, 4, 5, 1, 2, 3, 4], {5: 1}),
    ("base-at-cap-threshold", {"penalty_last_n": 20, "base": 1.000001}, [1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8], {9: 6}),
    # base == 1 exactly still enables DRY (only base < 1 is the empty sampler): 0.8 * 1^1
    ("base-exactly-one", {"penalty_last_n": 20, "base": 1.0}, [1, 2, 3, 4, 1, 2, 3], {4: 1}),
]  # fmt: skip


@pytest.mark.invariant("SMP-080")
@pytest.mark.requires(*DRY_CAPS)
@pytest.mark.parametrize("case", DRY_CASES, ids=[c[0] for c in DRY_CASES])
def test_dry_exact_penalties(target: Any, case: tuple[str, dict[str, Any], list[int], Any]) -> None:
    _, params, history, exponents = case
    entry = dry_entry(**params)
    cur = candidates(np.zeros(10, F32))
    out = after_history(target, [entry], history, cur)
    base, mult = entry[1]["base"], entry[1]["multiplier"]
    expected = penalised(10, {t: penalty(mult, base, e) for t, e in exponents.items()})
    assert np.array_equal(out.ids, cur.ids) and np.array_equal(out.p, cur.p), describe(out)
    assert np.array_equal(out.logits, expected), f"{describe(out)}\nexpected {expected.tolist()}"


@pytest.mark.invariant("SMP-080")
@pytest.mark.requires(*DRY_CAPS)
def test_dry_marks_unsorted_and_caps_the_exponent(target: Any) -> None:
    # 300 equal tokens: repeat length 299 over allowed 0; base 3 caps the exponent at
    # int(88.7228391 / logf(3)) = 80, so the penalty stays finite
    cur = TokenDataArray(np.arange(8, dtype=np.int32), np.zeros(8, F32), np.zeros(8, F32), -1, True)
    entry = dry_entry(base=3.0, allowed_length=0, penalty_last_n=300)
    out = after_history(target, [entry], [5] * 300, cur)
    assert not out.sorted
    assert out.logits[5] == F32(-penalty(0.8, 3.0, 80)) and np.isfinite(out.logits[5])
    assert np.count_nonzero(out.logits) == 1


@pytest.mark.invariant("SMP-080")
@pytest.mark.requires(*DRY_CAPS)
@pytest.mark.parametrize(
    ("params", "history", "untouched"),
    [
        ({}, [4, 4], True),  # n == allowed_length: returns before looking for repeats
        ({}, [4, 4, 4], False),  # n > allowed_length, 4 follows a repeat of 2: penalised
        ({}, [1, 2, 3], False),  # n > allowed_length, nothing repeats: only marked unsorted
        ({"penalty_last_n": 2}, [1, 2, 1, 2, 1], True),  # the window, not the history, counts
        ({"allowed_length": 0}, [], True),
        ({"allowed_length": 0}, [6], False),  # n = 1 > 0, no earlier position: only unsorted
        ({"allowed_length": 3}, [5, 6, 5], True),
        ({"breakers": [[7]]}, [1, 2, 1, 2, 7], True),  # the newest token breaks: cap 0 < 2
        ({"breakers": [[7, 2]]}, [1, 2, 1, 7, 2], True),  # the tail ends at the newest: cap 0
    ],
)
def test_dry_early_returns_leave_the_array(
    target: Any, params: dict[str, Any], history: list[int], untouched: bool
) -> None:
    cur = TokenDataArray(np.arange(8, dtype=np.int32), np.zeros(8, F32), np.zeros(8, F32), -1, True)
    out = after_history(target, [dry_entry(**{"penalty_last_n": 20} | params)], history, cur)
    if untouched:
        assert same_array(out, cur), describe(out)
    else:
        assert not out.sorted and np.array_equal(out.ids, cur.ids), describe(out)


@pytest.mark.invariant("SMP-080", "SMP-011", "SMP-012")
@pytest.mark.requires(*DRY_CAPS)
def test_dry_history_accept_reset_clone(target: Any) -> None:
    cur = candidates(np.zeros(10, F32))
    with chain_of(target, [dry_entry(penalty_last_n=20)]) as handle:
        for token in [1, 2, 3, 1, 2]:
            target.sampler_accept(handle, token)
        twin = target.sampler_clone(handle)
        try:
            assert target.sampler_apply(twin, cur).logits[3] < 0.0
        finally:
            target.sampler_free(twin)
        target.sampler_reset(handle)
        assert np.array_equal(target.sampler_apply(handle, cur).logits, cur.logits)


@pytest.mark.invariant("SMP-080")
@pytest.mark.requires(*DRY_CAPS)
@pytest.mark.parametrize(
    "params",
    [
        {"multiplier": 0.0},
        {"base": 0.99},
        {"penalty_last_n": 0},
        {"penalty_last_n": -1},
        # an enabled DRY with an empty window and a negative allowed_length would mark the
        # array unsorted (n = 0 > allowed_length); the empty sampler keeps it sorted
        {"penalty_last_n": 0, "allowed_length": -1},
    ],
    ids=["multiplier-0", "base-below-1", "last-n-0", "last-n-minus-1", "last-n-0-allowed-minus-1"],
)
def test_dry_disabled_forms(target: Any, params: dict[str, Any]) -> None:
    # a sorted input (all logits equal), so that a sampler that only clears the flag shows
    cur = TokenDataArray(
        np.arange(10, dtype=np.int32), np.zeros(10, F32), np.zeros(10, F32), -1, True
    )
    entry = dry_entry(penalty_last_n=20)
    entry[1] = entry[1] | params
    out = after_history(target, [entry], [1, 2, 3, 1, 2, 3, 1, 2], cur)
    assert same_array(out, cur)


@pytest.mark.invariant("SMP-080")
@pytest.mark.requires(*DRY_CAPS)
@given(
    cur=token_arrays(1, 40, max_scale=3.0),
    history=st.lists(st.integers(0, 6), max_size=60),
    allowed=st.integers(0, 4),
    last_n=st.integers(1, 64),
)
def test_dry_only_lowers_extending_tokens(
    target: Any, cur: TokenDataArray, history: list[int], allowed: int, last_n: int
) -> None:
    out = after_history(
        target, [dry_entry(allowed_length=allowed, penalty_last_n=last_n)], history, cur
    )
    assert np.array_equal(out.ids, cur.ids) and np.array_equal(out.p, cur.p)
    window = set(history[-last_n:])
    changed = out.logits != cur.logits
    assert np.all(out.logits[changed] < cur.logits[changed])
    # a token can only extend a repeat it followed before, inside the window
    assert set(out.ids[changed].tolist()) <= window, describe(out)


# -- DRY breaker strings over the fixture vocabulary (SMP-087) ------------------------------

STRINGS_CAPS = ("sampling.dry_strings", "sampling.dry", "tokenizer.vocab_only")
TEXTS = (
    "the cat sat: the cat sat: the cat",
    'he said "ab" and "ab" and "ab"\nab\nab',
    "*ab* *ab* *ab* er er er the other",
    "xo xo xo xo xo xo xo xo",
    "ka b ka b ka b ka",  # "a" + "▁b": the breaker "ab" as head and tokenized tail
    "la ba la ba la ba la",
)
STRING_SETS: tuple[list[str], ...] = (
    [],
    ["\n", ":", '"', "*"],  # common's default breakers
    ["ab"],
    ["the cat"],
    ["er", "o"],
    ["x" * 50],  # cut to 40 bytes
    [""],  # skipped
)


def fixture_vocab(engine: Any) -> Any:
    return cached(engine, "load_vocab", str(fixture_path("mha")))


def dry_after_text(
    engine: Any, vocab: Any, strings: list[str], text: str, allowed: int
) -> TokenDataArray:
    history = engine.tokenize(vocab, text, add_special=False)
    return dry_after_tokens(engine, vocab, strings, history, allowed)


def dry_after_tokens(
    engine: Any, vocab: Any, strings: list[str], history: list[int], allowed: int
) -> TokenDataArray:
    entry = dry_entry(allowed_length=allowed, penalty_last_n=64, breaker_strings=strings)
    handle = engine.sampler_chain_init_vocab([entry], vocab)
    try:
        for token in history:
            engine.sampler_accept(handle, token)
        out: TokenDataArray = engine.sampler_apply(
            handle, candidates(np.zeros(engine.vocab_size(vocab), F32))
        )
        return out
    finally:
        engine.sampler_free(handle)


@pytest.mark.invariant("SMP-087", "SMP-080")
@pytest.mark.requires(*STRINGS_CAPS)
@pytest.mark.parametrize("strings", STRING_SETS, ids=[repr(s)[:24] for s in STRING_SETS])
@pytest.mark.parametrize("allowed", [0, 1, 2])
def test_dry_breaker_strings_match_peer(
    target: Any, peer: Any, strings: list[str], allowed: int
) -> None:
    mine, theirs = fixture_vocab(target), fixture_vocab(peer)
    for text in TEXTS:
        a = dry_after_text(target, mine, strings, text, allowed)
        b = dry_after_text(peer, theirs, strings, text, allowed)
        assert np.array_equal(a.logits, b.logits), f"{text!r}\n{describe(a)}\n{describe(b)}"


GOLDEN_SETS = dict(
    zip(("none", "common", "ab", "the-cat", "er-o", "long-x", "empty"), STRING_SETS, strict=True)
)


@pytest.mark.invariant("SMP-087", "SMP-080")
@pytest.mark.requires(*STRINGS_CAPS)
@pytest.mark.parametrize("name", list(GOLDEN_SETS))
def test_dry_breaker_strings_golden(target: Any, snapshot: Any, name: str) -> None:
    """The penalised tokens ({id: logit}) after each text, for allowed lengths 0..2, equal the
    golden, which llama-cpp-python 0.3.36 wrote (``--target llamacpp --snapshot-update``): the
    string-to-token rule is checked on a target without a peer at hand."""
    vocab = fixture_vocab(target)
    got: dict[str, dict[int, float]] = {}
    for allowed in (0, 1, 2):
        for i, text in enumerate(TEXTS):
            out = dry_after_text(target, vocab, GOLDEN_SETS[name], text, allowed)
            hit = np.flatnonzero(out.logits != 0.0)
            got[f"allowed {allowed}, text {i}"] = {
                int(out.ids[j]): float(out.logits[j]) for j in hit
            }
    assert got == snapshot


# Token histories [a, H, *T, c, z, a, H, *T, c] of fixture ids: if [H, *T] is a breaker, the
# newest H caps the repeat before z at 1, otherwise z extends a repeat of len(T) + 3. Ids:
# 1 <s>, 2 </s>, 261 "a", 263 "c", 277 "q", 284 "x", 286 "z", 341 "at", 379 "▁b".
GOLDEN_HISTORIES: dict[str, tuple[list[str], list[int]]] = {
    # "at" ends with "t", the start of "the cat" (not at its first byte): H = 341,
    # T = tokenize("he cat") = [260, 336, 380, 341]
    "overlap-inside-token": (["the cat"], [284, 341, 260, 336, 380, 341, 277, 286, 284, 341, 260, 336, 380, 341, 277]),
    # "<s>" and "</s>" contain "s>" only as rendered special tokens: single-token breakers
    "rendered-bos": (["s>"], [284, 1, 277, 286, 284, 1, 277]),
    "rendered-eos": (["s>"], [284, 2, 277, 286, 284, 2, 277]),
    # the tail "<s>" is tokenized as plain text, not as the token <s>: [261, 1] breaks nothing
    "tail-not-special": (["a<s>"], [284, 261, 1, 277, 286, 284, 261, 1, 277]),
    # "q" does not end with "a": [277, 379] (q followed by tokenize("b")) breaks nothing
    "no-overlap-no-head": (["ab"], [284, 277, 379, 263, 286, 284, 277, 379, 263]),
}  # fmt: skip


@pytest.mark.invariant("SMP-087", "SMP-080")
@pytest.mark.requires(*STRINGS_CAPS)
@pytest.mark.parametrize("name", list(GOLDEN_HISTORIES))
def test_dry_breaker_strings_over_token_histories_golden(
    target: Any, snapshot: Any, name: str
) -> None:
    """As the golden above, over crafted token histories (written by llama-cpp-python 0.3.36)."""
    vocab = fixture_vocab(target)
    strings, history = GOLDEN_HISTORIES[name]
    got: dict[str, dict[int, float]] = {}
    for allowed in (0, 1):
        out = dry_after_tokens(target, vocab, strings, history, allowed)
        hit = np.flatnonzero(out.logits != 0.0)
        got[f"allowed {allowed}"] = {int(out.ids[j]): float(out.logits[j]) for j in hit}
    assert got == snapshot


@pytest.mark.invariant("SMP-087", "SMP-080")
@pytest.mark.requires(*STRINGS_CAPS)
def test_dry_breaker_string_is_cut_at_exactly_40_bytes(target: Any) -> None:
    """A 41-byte breaker acts as its first 40 bytes: head "x" (id 284), tail the tokens of
    "generation generation generation genera" (ending in "a"; the 41st byte would make the
    last tail token "at"), in a history [c, x, *tail, q, z, c, x, *tail, q]."""
    vocab = fixture_vocab(target)
    s = "xgeneration generation generation generat"
    assert len(s.encode()) == 41
    tail = target.tokenize(vocab, s[1:40], add_special=False)
    assert len(tail) < 20 and target.tokenize(vocab, s[1:], add_special=False)[:20] != tail
    history = [263, 284, *tail, 277, 286, 263, 284, *tail, 277]
    for allowed in (0, 1):
        plain = dry_after_tokens(target, vocab, [], history, allowed)
        cut = dry_after_tokens(target, vocab, [s[:40]], history, allowed)
        long = dry_after_tokens(target, vocab, [s], history, allowed)
        assert not np.array_equal(cut.logits, plain.logits), describe(cut)  # it breaks
        assert np.array_equal(long.logits, cut.logits), f"{describe(long)}\n{describe(cut)}"


@pytest.mark.invariant("SMP-087")
@pytest.mark.requires(*STRINGS_CAPS)
def test_dry_breaker_string_caps_and_is_spared(target: Any) -> None:
    vocab = fixture_vocab(target)
    text = "ab: ab: ab: ab"
    plain = dry_after_text(target, vocab, [], text, 1)
    broken = dry_after_text(target, vocab, [":"], text, 1)
    assert np.any(plain.logits < 0.0)
    assert np.all(broken.logits >= plain.logits)
    assert not np.array_equal(broken.logits, plain.logits)
    colon = target.tokenize(vocab, ":", add_special=False)[-1]
    assert broken.logits[colon] == 0.0


# -- XTC -----------------------------------------------------------------------------------


def xtc_entry(p: float, t: float, min_keep: int = 0, seed: int = 7) -> list[Any]:
    return ["xtc", {"p": p, "t": t, "min_keep": min_keep, "seed": seed}]


@pytest.mark.invariant("SMP-081")
@pytest.mark.requires(*XTC_CAPS)
@pytest.mark.parametrize(
    ("t", "min_keep", "kept"),
    [
        (0.25, 0, 1),  # every p is exactly 0.25: all at the threshold, the last one survives
        (0.25, 1, 1),
        (0.25, 2, 4),  # 4 - 3 = 1 row left < min_keep: no cut
        (float(np.nextafter(F32(0.25), F32(1.0))), 0, 4),  # none above
        (0.0, 0, 1),  # t = 0: every row is "above", only the last survives
    ],
)
def test_xtc_threshold_boundary(target: Any, t: float, min_keep: int, kept: int) -> None:
    cur = candidates(np.zeros(4, F32))
    out = after_history(target, [xtc_entry(1.0, t, min_keep)], [], cur)
    assert out.size == kept, describe(out)
    assert out.sorted and np.all(out.p == F32(0.25))


@pytest.mark.invariant("SMP-081")
@pytest.mark.requires(*XTC_CAPS)
def test_xtc_draw_of_one_becomes_the_float_below_one(target: Any) -> None:
    # mt19937(508205)'s 36th output is 4294967241 >= 2^32 - 128: as a float it rounds to 2^32,
    # the quotient to 1, and libstdc++ replaces that by the largest float below 1. With p equal
    # to that float every draw is <= p, so all 36 applies cut (a draw left at 1 would skip one).
    below_one = float(np.nextafter(F32(1.0), F32(0.0)))
    cur = candidates(np.zeros(4, F32))
    with chain_of(target, [xtc_entry(below_one, 0.25, seed=508205)]) as handle:
        sizes = [target.sampler_apply(handle, cur).size for _ in range(36)]
    assert sizes == [1] * 36, sizes


@pytest.mark.invariant("SMP-081")
@pytest.mark.requires(*XTC_CAPS)
def test_xtc_keeps_the_least_likely_top_choice(target: Any) -> None:
    cur = from_probs([0.1, 0.4, 0.2, 0.3])
    out = after_history(target, [xtc_entry(1.0, 0.15)], [], cur)
    # sorted: 1 (0.4), 3 (0.3), 2 (0.2), 0 (0.1); 0.4, 0.3, 0.2 are >= 0.15: keep from id 2
    assert out.ids.tolist() == [2, 0], describe(out)


@pytest.mark.invariant("SMP-081")
@pytest.mark.requires(*XTC_CAPS)
@pytest.mark.parametrize(
    "logits",
    [[5.0, -np.inf, -np.inf], [2.0]],
    ids=["one-finite", "single-row"],
)
def test_xtc_leaves_a_sole_choice(target: Any, logits: list[float]) -> None:
    cur = candidates(np.array(logits, F32))
    out = after_history(target, [xtc_entry(1.0, 0.1)], [], cur)
    assert out.ids[0] == 0 and out.size == cur.size


@pytest.mark.invariant("SMP-081")
@pytest.mark.requires(*XTC_CAPS)
@pytest.mark.parametrize(("p", "t"), [(0.0, 0.1), (-1.0, 0.1), (1.0, 0.51)])
def test_xtc_disabled_forms(target: Any, p: float, t: float) -> None:
    cur = candidates(np.zeros(6, F32))
    assert same_array(after_history(target, [xtc_entry(p, t)], [], cur), cur)


@pytest.mark.invariant("SMP-081")
@pytest.mark.requires(*XTC_CAPS)
@pytest.mark.parametrize(
    ("t", "kept"),
    [(0.5, 1), (float(np.nextafter(F32(0.5), F32(1.0))), 2)],
    ids=["half-is-active", "above-half-is-empty"],
)
def test_xtc_threshold_of_one_half_is_still_active(target: Any, t: float, kept: int) -> None:
    # two equal logits: p = 0.5 each, exactly; t = 0.5 keeps XTC (disabled only for t > 0.5),
    # both rows are >= t, so the first is dropped and the last one stays
    cur = candidates(np.zeros(2, F32))
    out = after_history(target, [xtc_entry(1.0, t)], [], cur)
    assert out.size == kept, describe(out)
    assert out.ids.tolist() == [0, 1][2 - kept :], describe(out)


@pytest.mark.invariant("SMP-081")
@pytest.mark.requires(*XTC_CAPS)
def test_xtc_with_p_zero_ignores_a_draw_of_zero(target: Any) -> None:
    # mt19937(500964)'s 5519th output is 0, the only draw that is <= 0: with the smallest
    # positive p XTC cuts at that apply alone, and with p = 0 (the empty sampler) never
    tiny = float(np.nextafter(F32(0.0), F32(1.0)))
    cur = candidates(np.zeros(4, F32))
    for p, cut_at in [(tiny, [5518]), (0.0, [])]:
        with chain_of(target, [xtc_entry(p, 0.25, seed=500964)]) as handle:
            sizes = [target.sampler_apply(handle, cur).size for _ in range(5519)]
        assert [i for i, size in enumerate(sizes) if size != 4] == cut_at, p
        assert sizes[5518] == (1 if cut_at else 4)


@pytest.mark.invariant("SMP-081")
@pytest.mark.requires(*XTC_CAPS, "sampling.top_k")
@given(cur=token_arrays(2, 60, max_scale=3.0), t=st.floats(0.0, 0.5), keep=st.integers(0, 5))
def test_xtc_cut_is_a_suffix_after_the_top_choices(
    target: Any, cur: TokenDataArray, t: float, keep: int
) -> None:
    full = after_history(target, [["top_k", {"k": cur.size}]], [], cur)  # sorted reference
    out = after_history(target, [xtc_entry(1.0, t, keep)], [], cur)
    dropped = full.size - out.size
    assert out.sorted and out.ids.tolist() == full.ids[dropped:].tolist(), describe(out)
    if dropped:
        assert np.all(out.p[:1] >= F32(t)) and out.size >= keep
        assert np.all(full.logits[:dropped] >= out.logits[0])


@pytest.mark.invariant("SMP-081", "SMP-011", "SMP-012")
@pytest.mark.requires(*XTC_CAPS)
@given(seed=seeds(), p=st.floats(0.1, 0.9))
def test_xtc_stream_single_rows_draw_nothing(target: Any, seed: int, p: float) -> None:
    many = candidates(np.linspace(-1.0, 1.0, 12).astype(F32))
    one = candidates(np.array([0.5], F32))
    spec = [xtc_entry(p, 0.05, seed=seed)]
    with chain_of(target, spec) as a, chain_of(target, spec) as b:
        plain = [target.sampler_apply(a, many).size for _ in range(12)]
        mixed = []
        for _ in range(12):
            assert target.sampler_apply(b, one).size == 1
            mixed.append(target.sampler_apply(b, many).size)
        assert plain == mixed
        target.sampler_reset(a)
        assert [target.sampler_apply(a, many).size for _ in range(12)] == plain
