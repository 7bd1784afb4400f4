"""Memory statuses, the coordinator's update / prepare_batch transitions (scripted memories),
and the rollback of a failed ubatch (real KV memory)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from conformance.strategies.kv import ScriptedMemory, run_of, ubatch_from_lists

SUCCESS, NO_UPDATE, FAILED_PREPARE, FAILED_COMPUTE = 0, 1, 2, 3
STATUSES = (SUCCESS, NO_UPDATE, FAILED_PREPARE, FAILED_COMPUTE)
ALLOC_FAILED, FAILED, ABORTED = -2, -1, 1


def _combine(s0: int, s1: int) -> int:
    fails = (FAILED_PREPARE, FAILED_COMPUTE)
    if s0 in fails:
        return s0
    if s1 in fails:
        return s1
    return SUCCESS if SUCCESS in (s0, s1) else NO_UPDATE


@pytest.mark.invariant("MEM-001", "MEM-002")
@pytest.mark.requires("memory.status")
@pytest.mark.parametrize(("s0", "s1"), list(itertools.product(STATUSES, STATUSES)))
def test_status_combine_table(target: Any, s0: int, s1: int) -> None:
    assert target.memory_status_combine(s0, s1) == _combine(s0, s1)
    assert target.memory_status_is_fail(s0) is (s0 >= FAILED_PREPARE)


@pytest.mark.invariant("MEM-003")
@pytest.mark.requires("memory.status")
def test_decode_codes(target: Any) -> None:
    assert [target.decode_code_for_init_batch(s) for s in STATUSES] == [0, -2, 1, -2]
    assert [target.decode_code_for_ubatch_failure(s) for s in (ABORTED, ALLOC_FAILED, FAILED)] == [
        2,
        -2,
        -3,
    ]


@pytest.mark.invariant("MEM-006")
@pytest.mark.requires("memory.coordinator")
@pytest.mark.parametrize("status", STATUSES)
@pytest.mark.parametrize("optimize", [False, True])
def test_update_applies_only_on_success(target: Any, status: int, optimize: bool) -> None:
    mem = ScriptedMemory([SUCCESS], {optimize: status, not optimize: NO_UPDATE})
    coord = target.new_memory_coordinator(mem)
    assert coord.update(optimize) is (status == SUCCESS)
    want: list[tuple[str, object]] = [("init_update", optimize)]
    if status == SUCCESS:
        want.append(("apply", f"update({optimize})"))
    assert mem.log == want


# (init_batch statuses in call order, init_update status for optimize=False / True)
#   -> (decode code, retried, expected call log)
TRANSITIONS = [
    pytest.param(
        [SUCCESS],
        (NO_UPDATE, NO_UPDATE),
        0,
        False,
        [("init_update", False), ("init_batch", 8, False)],
        id="success",
    ),
    pytest.param(
        [SUCCESS],
        (SUCCESS, NO_UPDATE),
        0,
        False,
        [("init_update", False), ("apply", "update(False)"), ("init_batch", 8, False)],
        id="pending-update-applied-first",
    ),
    pytest.param(
        [NO_UPDATE],
        (NO_UPDATE, NO_UPDATE),
        -2,
        False,
        [("init_update", False), ("init_batch", 8, False)],
        id="no-update-is-fatal",
    ),
    pytest.param(
        [FAILED_COMPUTE],
        (NO_UPDATE, SUCCESS),
        -2,
        False,
        [("init_update", False), ("init_batch", 8, False)],
        id="failed-compute-not-retried",
    ),
    pytest.param(
        [FAILED_PREPARE],
        (NO_UPDATE, NO_UPDATE),
        1,
        False,
        [("init_update", False), ("init_batch", 8, False), ("init_update", True)],
        id="no-slot-nothing-to-optimize",
    ),
    pytest.param(
        [FAILED_PREPARE],
        (NO_UPDATE, FAILED_PREPARE),
        1,
        False,
        [("init_update", False), ("init_batch", 8, False), ("init_update", True)],
        id="no-slot-optimize-fails",
    ),
    pytest.param(
        [FAILED_PREPARE, SUCCESS],
        (NO_UPDATE, SUCCESS),
        0,
        True,
        [
            ("init_update", False),
            ("init_batch", 8, False),
            ("init_update", True),
            ("apply", "update(True)"),
            ("init_batch", 8, False),
        ],
        id="retry-after-optimize-succeeds",
    ),
    pytest.param(
        [FAILED_PREPARE, FAILED_PREPARE],
        (NO_UPDATE, SUCCESS),
        1,
        True,
        [
            ("init_update", False),
            ("init_batch", 8, False),
            ("init_update", True),
            ("apply", "update(True)"),
            ("init_batch", 8, False),
        ],
        id="retry-is-one-shot",
    ),
    pytest.param(
        [FAILED_PREPARE, FAILED_COMPUTE],
        (NO_UPDATE, SUCCESS),
        -2,
        True,
        [
            ("init_update", False),
            ("init_batch", 8, False),
            ("init_update", True),
            ("apply", "update(True)"),
            ("init_batch", 8, False),
        ],
        id="retry-then-compute-failure",
    ),
]


@pytest.mark.invariant("MEM-010", "MEM-003")
@pytest.mark.requires("memory.coordinator")
@pytest.mark.parametrize(("batch", "update", "code", "retried", "log"), TRANSITIONS)
def test_prepare_batch_transitions(
    target: Any,
    batch: list[int],
    update: tuple[int, int],
    code: int,
    retried: bool,
    log: list[tuple[object, ...]],
) -> None:
    mem = ScriptedMemory(batch, {False: update[0], True: update[1]})
    plan = target.new_memory_coordinator(mem).prepare_batch(object(), 8, False)
    assert (plan.code, bool(plan.retried)) == (code, retried)
    assert (plan.context is not None) is (code == 0)
    assert int(plan.status) == batch[min(len(batch), 2) - 1]
    assert mem.log == log


@pytest.mark.invariant("MEM-010")
@pytest.mark.requires("memory.coordinator")
@pytest.mark.parametrize("output_all", [True, False, None], ids=["true", "false", "left-out"])
def test_prepare_batch_passes_output_all(target: Any, output_all: bool | None) -> None:
    """``init_batch`` gets the ``output_all`` of ``prepare_batch``; left out, it is false."""
    mem = ScriptedMemory([SUCCESS])
    coord = target.new_memory_coordinator(mem)
    if output_all is None:
        coord.prepare_batch(object(), 3)
    else:
        coord.prepare_batch(object(), 3, output_all)
    assert ("init_batch", 3, bool(output_all)) in mem.log


def _decoded(target: Any, ubatches: list[Any], **config: Any) -> tuple[Any, Any]:
    """A KV cache with the ubatches applied one after the other (as a decode would), and a
    coordinator driving it (the rollback needs only ``seq_rm``)."""
    mem = target.new_kv_cache(**config)
    for ub in ubatches:
        slots = mem.prepare([ub])
        assert slots is not None
        mem.apply_ubatch(slots[0], ub)
    return mem, target.new_memory_coordinator(mem)


@pytest.mark.invariant("MEM-011", "MEM-003")
@pytest.mark.requires("kv.cache", "memory.coordinator")
def test_rollback_drops_the_failed_ubatch_only(target: Any) -> None:
    first = ubatch_from_lists([0, 1, 0], [[0], [0], [1]])
    failed = ubatch_from_lists([2, 3, 1], [[0], [0], [1]])
    mem, coord = _decoded(target, [first, failed], kv_size=16, n_seq_max=2, unified=True)
    assert coord.ubatch_failed(failed, FAILED) == -3
    assert [(mem.seq_pos_min(s), mem.seq_pos_max(s)) for s in (0, 1)] == [(0, 1), (0, 0)]


@pytest.mark.invariant("MEM-011")
@pytest.mark.requires("kv.cache", "memory.coordinator")
def test_rollback_covers_every_sequence_of_a_token(target: Any) -> None:
    """Decision D1: the coupled token (seqs 1 and 0) goes for both sequences."""
    first = ubatch_from_lists([0, 0], [[0], [1]])
    failed = ubatch_from_lists([1, 2], [[1, 0], [0]])
    mem, coord = _decoded(target, [first, failed], kv_size=8, n_seq_max=2, unified=True)
    assert coord.rollback_ubatch(failed) == {0: 1, 1: 1}
    assert [mem.seq_pos_max(s) for s in (0, 1)] == [0, 0]  # llama.cpp would leave seq 0 at 1


@pytest.mark.invariant("MEM-011")
@pytest.mark.requires("memory.coordinator")
def test_rollback_calls(target: Any) -> None:
    mem = ScriptedMemory([SUCCESS])
    ub = ubatch_from_lists([7, 5, 6, 9], [[2], [2, 0], [0], [3]])
    code = target.new_memory_coordinator(mem).ubatch_failed(ub, ABORTED)
    assert code == 2
    assert mem.log == [("seq_rm", 0, 5, -1), ("seq_rm", 2, 5, -1), ("seq_rm", 3, 9, -1)]


@pytest.mark.invariant("MEM-011")
@pytest.mark.requires("kv.cache", "memory.coordinator")
def test_rollback_on_streams(target: Any) -> None:
    ok = run_of(1, 0, 2)
    mem, coord = _decoded(target, [ok, run_of(0, 0, 3)], kv_size=8, n_seq_max=2)
    coord.ubatch_failed(run_of(0, 0, 3), ALLOC_FAILED)
    assert [mem.seq_pos_max(s) for s in (0, 1)] == [-1, 1]
