"""Why a checkpoint aborted, as status shows it (`domain/aborts.py`, no database)."""

from __future__ import annotations

import dataclasses

from lockgate.common.model.ids import CheckpointId, ExecutorId, Generation, LeaderEpoch, TaskId
from lockgate.coordinator.domain.aborts import missing_precommits, timeout_reason
from lockgate.coordinator.domain.checkpoints import CheckpointRecord, TaskTrigger
from lockgate.coordinator.domain.states import CheckpointState, TaskState
from tests.unit.coordinator.test_checkpoint_decisions import P, task


def checkpoint(
    *,
    precommitted: tuple[int, ...] = (),
    state: CheckpointState = CheckpointState.ABORTED,
    waited_ms: int = 2_000,
) -> CheckpointRecord:
    """Checkpoint 4 of tasks p/0 on e1 and p/1 on e2 (generation 1), aborted after
    `waited_ms`."""
    triggers = tuple(
        TaskTrigger(TaskId(f"p/{i}"), Generation(1), ExecutorId(f"e{i + 1}"), f"lg-p-{i}-0", 0)
        for i in range(2)
    )
    return CheckpointRecord(
        pipeline_id=P,
        checkpoint_id=CheckpointId(4),
        state=state,
        leader_epoch=LeaderEpoch(1),
        tasks=triggers,
        precommitted=frozenset(TaskId(f"p/{i}") for i in precommitted),
        triggered_at_ms=10_000,
        completed_at_ms=None,
        committed_at_ms=None,
        aborted_at_ms=10_000 + waited_ms if state is CheckpointState.ABORTED else None,
        abort_reason="whatever" if state is CheckpointState.ABORTED else None,
    )


def test_a_timeout_names_each_task_that_did_not_report_and_its_executor() -> None:
    assert timeout_reason(checkpoint(precommitted=(0,)), timeout_ms=1_500) == (
        "timed out after 1500 ms (task p/1 on e2: no pre-commit report within 1500 ms)"
    )
    both = timeout_reason(checkpoint(), timeout_ms=1_500)
    assert "task p/0 on e1: no pre-commit report" in both
    assert "task p/1 on e2: no pre-commit report" in both


def test_missing_precommits_are_the_tasks_that_had_not_reported_after_a_timeout() -> None:
    missing = missing_precommits(
        checkpoint(precommitted=(0,), waited_ms=1_600), timeout_ms=1_500, tasks=[task(0), task(1)]
    )
    assert [m.describe() for m in missing] == [
        "task p/1 on e2: no pre-commit report within 1500 ms"
    ]
    assert (missing[0].checkpoint_id, missing[0].task_generation) == (4, 1)


def test_a_failed_task_says_its_error_and_a_stale_failure_does_not() -> None:
    failed = dataclasses.replace(
        task(1), state=TaskState.FAILED, last_error="TransformError: read from `input`"
    )
    missing = missing_precommits(
        checkpoint(precommitted=(0,), waited_ms=300), timeout_ms=1_500, tasks=[task(0), failed]
    )
    assert [m.reason for m in missing] == ["failed: TransformError: read from `input`"]
    # A failure of a later generation is not why generation 1 did not pre-commit.
    later = dataclasses.replace(failed, generation=Generation(2))
    missing = missing_precommits(
        checkpoint(precommitted=(0,), waited_ms=300), timeout_ms=1_500, tasks=[task(0), later]
    )
    assert [m.reason for m in missing] == ["still running when the checkpoint aborted after 300 ms"]


def test_only_an_aborted_checkpoint_has_missing_precommits() -> None:
    for state in (CheckpointState.TRIGGERED, CheckpointState.COMPLETE):
        assert missing_precommits(checkpoint(state=state), timeout_ms=1, tasks=[]) == ()
    assert missing_precommits(checkpoint(precommitted=(0, 1)), timeout_ms=1, tasks=[]) == ()
