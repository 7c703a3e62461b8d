"""The worker task state machine (runtime/tasks.py): explicit moves, permanent errors."""

from __future__ import annotations

import itertools

import pytest

from lockgate.executor.errors import RecordError, RecordLocation, SinkError, TransformError
from lockgate.executor.runtime.tasks import (
    TASK_TRANSITIONS,
    InvalidTaskTransition,
    TaskPhase,
    next_phase,
    task_fails_on,
)


def test_task_state_machine_allows_only_listed_moves() -> None:
    for current, target in itertools.product(TaskPhase, TaskPhase):
        allowed = target is current or target is TaskPhase.STOPPED
        allowed = allowed or target in TASK_TRANSITIONS[current]
        if allowed:
            assert next_phase(current, target) is target
        else:
            with pytest.raises(InvalidTaskTransition):
                next_phase(current, target)
    # A failed task stays failed until a new generation replaces it.
    assert TASK_TRANSITIONS[TaskPhase.FAILED] == frozenset()
    with pytest.raises(InvalidTaskTransition):
        next_phase(TaskPhase.STOPPED, TaskPhase.RUNNING)


def test_permanent_errors_fail_the_task_transient_ones_only_the_checkpoint() -> None:
    assert task_fails_on(RecordError(RecordLocation("t", 0, 5), "not avro"))
    assert task_fails_on(TransformError("transform.sql failed: no column x"))
    assert not task_fails_on(SinkError("broker unreachable"))
    assert not task_fails_on(RuntimeError("spark hiccup"))
