"""The worker task state machine and the task board (runtime/tasks.py), no threads started."""

from __future__ import annotations

import itertools

import pytest

from lockgate.common.model.ids import Generation
from lockgate.executor.errors import RecordError, RecordLocation, SinkError, TransformError
from lockgate.executor.runtime.tasks import (
    TASK_TRANSITIONS,
    InvalidTaskTransition,
    TaskBoard,
    TaskPhase,
    next_phase,
    task_error,
    task_fails_on,
)
from lockgate.executor.runtime.values import Assignment, RestorePlan, TaskError, TaskRef


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


def _assignment(index: int, generation: int, *, running: bool = True) -> Assignment:
    return Assignment(
        task=TaskRef("p", index),
        generation=Generation(generation),
        config_version=1,
        spec={"name": "p"},
        source_partitions=(("in", index),),
        restore_offsets={},
        target_running=running,
        max_records_per_partition=0,
        transaction_timeout_ms=0,
        restore=RestorePlan(),
    )


def test_the_board_follows_the_leaders_full_assignment() -> None:
    board = TaskBoard()
    _, started = board.apply([_assignment(0, 1), _assignment(1, 1), _assignment(2, 3)])
    assert [(t.ref.task_index, t.generation) for t in started] == [(0, 1), (1, 1), (2, 3)]
    task0, task1, task2 = started
    assert board.restored(task0) and task0.phase is TaskPhase.RUNNING
    try:
        # 0: same generation, now paused; 1: missing, stopped; 2: a lower generation is a
        # stale answer and changes nothing; 3: new.
        stopped, started = board.apply(
            [_assignment(0, 1, running=False), _assignment(2, 2), _assignment(3, 1)]
        )
        assert stopped == [task1] and [t.ref.task_index for t in started] == [3]
        assert task0.phase is TaskPhase.PAUSED and task0.target_running is False
        assert board.is_current(task2)
        # A higher generation replaces the task: the old one must be stopped.
        stopped, started = board.apply([_assignment(0, 2), _assignment(2, 3), _assignment(3, 1)])
        assert stopped == [task0] and [(t.ref.task_index, t.generation) for t in started] == [
            (0, 2)
        ]
        for task in stopped:
            board.stop(task, why="test")
        assert not board.is_current(task0) and task0.phase is TaskPhase.STOPPED
        assert [v.task.task_index for v in board.statuses()] == [0, 2, 3]
    finally:
        for task in [*board.take_all(), task0, task1]:
            task.queue.shutdown(wait=False)


def test_an_abort_waits_only_for_a_running_batch_of_its_checkpoint() -> None:
    board = TaskBoard()
    _, [task] = board.apply([_assignment(0, 1)])
    try:
        assert board.restored(task)
        assert board.begin_batch(task, 1)
        assert board.cancel_and_wait(pipeline_name="p", checkpoint_id=2, timeout_s=0) == []
        # 2 was cancelled before it started: its batch never begins.
        assert not board.begin_batch(task, 2)
        assert board.cancel_and_wait(pipeline_name="p", checkpoint_id=1, timeout_s=0) == [task.ref]
        board.end_batch(task, 1)
        assert board.cancel_and_wait(pipeline_name="p", checkpoint_id=1, timeout_s=0) == []
    finally:
        task.queue.shutdown(wait=False)


def _error(exc: Exception) -> TaskError:
    return task_error(
        exc, checkpoint_id=1, executor_id="e1", executor_generation=1, task_generation=1
    )


def test_the_board_tells_of_each_phase_change_the_leader_must_hear_of() -> None:
    changes: list[list[TaskPhase]] = []
    board = TaskBoard(on_change=lambda: changes.append([v.phase for v in board.statuses()]))
    _, [task] = board.apply([_assignment(0, 1)])
    try:
        assert changes == []  # a new task is RESTORING: nothing the leader can act on yet
        assert board.restored(task)
        board.apply([_assignment(0, 1)])  # the same assignment again: no change
        board.apply([_assignment(0, 1, running=False)])
        assert board.fail(task, _error(TransformError("no column x")))
        assert changes == [[TaskPhase.RUNNING], [TaskPhase.PAUSED], [TaskPhase.FAILED]]
        assert not board.restored(task)
        board.stop(board.take_all()[0], why="test")
        assert not board.fail(task, _error(SinkError("x")))
        assert len(changes) == 3  # a refused move tells of nothing
    finally:
        task.queue.shutdown(wait=False)
