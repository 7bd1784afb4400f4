"""Explicit examples for the property tests: small batches that each show one rule.

Hypothesis runs explicit examples first, so a broken engine fails on a readable batch at once
(and the mutant meta-tests stay fast: a failing explicit example is not shrunk).
"""

from __future__ import annotations

from conformance.batch.checks import make_case
from conformance.strategies.batch import BatchCase
from reference_impl.batch.types import Batch

_S0 = [[0], [0], [0]]

GET_ONE = make_case(Batch.get_one([1, 2, 3]), None)
AUTO_AFTER_MEMORY = make_case(Batch.get_one([1, 2, 3]), {0: (0, 9)}, pos0=(10, 11, 12))
OUTPUT_ALL_FLAGS = make_case(Batch.from_lists([1, 2, 3], logits=[0, 1, 0]), None, output_all=True)
UNEQUAL = make_case(
    Batch.from_lists(
        [1, 2, 3, 4, 5, 6],
        pos=[0, 1, 2, 3, 0, 1],
        seq_ids=[[0], [0], [0], [0], [1], [1]],
        logits=[0, 0, 0, 1, 0, 1],
    ),
    None,
)
OVERLAPPING_SETS = make_case(
    Batch.from_lists([1, 2, 3], pos=[0, 1, 2], seq_ids=[[0, 1], [0, 1], [0]]), None
)
NARROWS_TO_FIRST_SET = make_case(
    Batch.from_lists([1, 2, 3, 4], pos=[0, 1, 2, 3], seq_ids=[[0], [0], [0, 1], [0]]), None
)
FIVE = make_case(Batch.get_one([1, 2, 3, 4, 5]), None)
# twenty sequences (more sequence sets than the splitter's small-batch path takes); the batch
# opens with sequence 1, so sequence 1 is set 0: once sequence 0 leads the scan, a sequential
# split_equal chains from it into set 0 (split_equal(2, True): [1, 2, 3], then [0, 1], ...)
CHAIN_INTO_FIRST_SET = Batch.from_lists(
    list(range(21)),
    pos=[0, 0, 1] + [0] * 18,
    seq_ids=[[1], [0], [1]] + [[s] for s in range(2, 20)],
)

GAP: tuple[BatchCase, str] = (
    make_case(Batch.from_lists([1, 2, 3], pos=[0, 1, 3], seq_ids=_S0), None),
    "SAN_POS_GAP",
)
DECREASING: tuple[BatchCase, str] = (
    make_case(Batch.from_lists([1, 2, 3], pos=[0, 1, 0], seq_ids=_S0), None),
    "SAN_POS_DECREASING",
)
MEMORY: tuple[BatchCase, str] = (
    make_case(Batch.from_lists([1, 2], pos=[11, 12]), {0: (0, 9)}),
    "SAN_POS_MEMORY",
)
MEMORY_MROPE: tuple[BatchCase, str] = (
    make_case(Batch.from_lists([1, 2], pos=[9, 10]), {0: (0, 9)}, n_pos_per_embd=4),
    "SAN_POS_MEMORY",
)
DIVERGED: tuple[BatchCase, str] = (
    make_case(Batch.from_lists([1], pos=[6], seq_ids=[[0, 1]]), {0: (0, 5), 1: (2, 5)}),
    "SAN_SEQ_DIVERGED",
)
SEQ_RANGE: tuple[BatchCase, str] = (
    make_case(Batch.from_lists([1, 2], pos=[0, 0], seq_ids=[[0], [4]]), None),
    "SAN_SEQ_ID_RANGE",
)
