"""DRY ("don't repeat yourself"): penalise the tokens that would extend a repeated sequence.

The rule of ``llama_sampler_dry_apply`` (llama.cpp src/llama-sampler.cpp; the semantics of
llama-cpp-python 0.3.36, whose DRY has no training-context cap). With ``h`` the last
``n = min(len(history), penalty_last_n)`` accepted tokens:

1. **Restart limit.** Scanning back from the newest token, the first token that ends a
   sequence breaker (a breaker's head token followed, later in time, by its tail tokens)
   ``i`` tokens from the end, matched by the longest tail ``m`` found there, caps every
   repeat length at ``i - m``; without a breaker the cap is ``n``.
2. **Repeat lengths.** For each earlier position, the length of the longest run of tokens
   ending there that equals the run ending at the newest token (a Z-function over the
   reversed window), capped as above.
3. **Candidates.** The token that followed such an earlier run would extend the repeat; each
   token keeps the longest length ``L >= allowed_length`` found for it.
4. **Penalty.** Such a token (unless it is a single-token breaker) loses
   ``multiplier * base ^ (L - allowed_length)`` from its logit, the exponent capped so the
   power stays below FLT_MAX; the array is marked unsorted.

Nothing happens while ``n <= allowed_length`` or when the cap is below ``allowed_length``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from reference_impl.sampling.numerics import Real
from reference_impl.sampling.token_data import TokenDataArray
from reference_impl.spec_links import implements

F32 = np.float32
FLOAT_MAX_LOG = F32(88.7228391)  # ~ logf(FLT_MAX): caps the penalty's exponent


@implements("SMP-080")
def breaker_table(breakers: Sequence[Sequence[int]]) -> dict[int, list[tuple[int, ...]]]:
    """Head token -> the distinct tails of the breakers starting with it (empty breakers are
    skipped, as llama.cpp does)."""
    table: dict[int, list[tuple[int, ...]]] = {}
    for breaker in breakers:
        if len(breaker) == 0:
            continue
        tails = table.setdefault(int(breaker[0]), [])
        tail = tuple(int(t) for t in breaker[1:])
        if tail not in tails:
            tails.append(tail)
    return table


@implements("SMP-080")
def repeat_cap(window: Sequence[int], table: dict[int, list[tuple[int, ...]]]) -> int:
    """Step 1: the longest repeat allowed by the newest sequence breaker in ``window``.

    ``back(i)`` is the token ``i`` places before the newest one. A head at ``back(i)`` matches
    a tail ``t`` when ``back(i - 1 - j) == t[j]`` for every j (the tail follows the head).
    """
    n = len(window)

    def back(i: int) -> int:
        return int(window[n - 1 - i])

    for i in range(n):
        tails = table.get(back(i))
        if tails is None:
            continue
        longest = -1
        for tail in tails:
            if longest < len(tail) <= i and all(back(i - 1 - j) == t for j, t in enumerate(tail)):
                longest = len(tail)
        if longest >= 0:
            return i - longest
    return n


def _z_function(seq: Sequence[int]) -> list[int]:
    """z[k] = length of the longest common prefix of ``seq`` and ``seq[k:]`` (z[0] = 0)."""
    n = len(seq)
    z = [0] * n
    left = right = 0
    for k in range(1, n):
        if k < right:
            z[k] = min(right - k, z[k - left])
        while k + z[k] < n and seq[z[k]] == seq[k + z[k]]:
            z[k] += 1
        if k + z[k] > right:
            left, right = k, k + z[k]
    return z


@implements("SMP-080")
def extension_lengths(window: Sequence[int], cap: int, allowed_length: int) -> dict[int, int]:
    """Steps 2 and 3: token -> the longest repeat (``>= allowed_length``) it would extend.

    In the reversed window, ``z[k]`` is how many tokens ending ``k`` places before the newest
    one repeat the newest tokens; the token one place later in time (``k - 1`` places before
    the newest) would extend that repeat to ``z[k] + 1``.
    """
    reversed_window = [int(t) for t in reversed(window)]
    z = _z_function(reversed_window)
    longest: dict[int, int] = {}
    for k in range(1, len(reversed_window)):
        length = min(z[k], cap)
        if length >= allowed_length:
            token = reversed_window[k - 1]
            longest[token] = max(longest.get(token, 0), length)
    return longest


@implements("SMP-080")
def dry(
    cur: TokenDataArray,
    history: Sequence[int],
    multiplier: Real,
    base: Real,
    allowed_length: int,
    penalty_last_n: int,
    table: dict[int, list[tuple[int, ...]]],
) -> TokenDataArray:
    """Apply the DRY penalty for the accepted ``history`` (oldest first) to ``cur``."""
    mult32, base32 = F32(multiplier), F32(base)
    n = min(len(history), penalty_last_n)
    if n <= allowed_length:
        return cur
    window = list(history[len(history) - n :])
    cap = repeat_cap(window, table)
    if cap < allowed_length:
        return cur
    longest = extension_lengths(window, cap, allowed_length)
    max_exponent = 0
    if base32 > F32(1.000001):
        # FLOAT_MAX_LOG / logf(base) in float, truncated to int
        max_exponent = int(FLOAT_MAX_LOG / F32(np.log(np.float64(base32))))
    logits = cur.logits.copy()
    for row, token in enumerate(cur.ids.tolist()):
        if token not in longest:
            continue
        if () in table.get(token, []):  # a single-token breaker is never penalised
            continue
        exponent = longest[token] - allowed_length
        if max_exponent > 0 and exponent > max_exponent:
            exponent = max_exponent
        # float * std::pow(float, int): computed in double, rounded once to float
        penalty = F32(float(mult32) * float(base32) ** exponent)
        logits[row] = F32(logits[row] - penalty)
    return cur.with_logits(logits, sorted=False)


MAX_BREAKER_BYTES = 40  # a longer breaker string is cut to its first 40 bytes
MAX_TAIL_TOKENS = 20  # a tail (the tokenized rest of a breaker) keeps at most 20 tokens


@implements("SMP-087")
def string_breakers(tokenizer: Any, strings: Sequence[str]) -> list[list[int]]:
    """Breaker strings -> breaker token sequences ``[head, *tail]`` over a vocabulary.

    For each (non-empty, cut to 40 bytes) string ``s`` and every token of the vocabulary, with
    ``w`` the token's text (``detokenize([token])`` with special tokens rendered):

    * ``s`` occurs in ``w``: the token alone is a breaker (an empty tail);
    * otherwise, for every position where ``w`` ends with a prefix of ``s`` (the prefix
      starting at that position and running to the end of ``w``): the token followed by the
      tokenization of the rest of ``s`` (no special tokens, at most 20 tokens) is a breaker.
    """
    out: list[list[int]] = []
    n_tokens = tokenizer.vocab.n_tokens
    texts = [
        tokenizer.detokenize([t], remove_special=False, unparse_special=True)
        for t in range(n_tokens)
    ]
    for string in strings:
        s = string.encode()[:MAX_BREAKER_BYTES]
        if not s:
            continue
        for token, word in enumerate(texts):
            if s in word:
                out.append([token])
                continue
            for pos in range(len(word)):
                overlap = len(word) - pos  # the bytes of w from pos to its end
                if overlap < len(s) and word[pos:] == s[:overlap]:
                    rest = s[overlap:].decode()
                    tail = tokenizer.tokenize(rest, add_special=False, parse_special=False)
                    out.append([token, *tail[:MAX_TAIL_TOKENS]])
    return out
