"""A COMPLETE checkpoint the broker lost (issue 14, hole 2): which later checkpoints go with
it, where the pipeline resumes, and which restart moves past it (`domain/data_loss.py`)."""

from __future__ import annotations

import dataclasses

import pytest

from lockgate.common.model.ids import CheckpointId, LeaderEpoch, PipelineId, TaskId
from lockgate.common.model.offsets import TopicPartition
from lockgate.coordinator.domain.checkpoints import CheckpointRecord, trigger_due
from lockgate.coordinator.domain.data_loss import (
    PipelineHealth,
    check_restart_from,
    later_in_flight,
    offsets_after_loss,
    pipeline_health,
)
from lockgate.coordinator.domain.errors import FailedPrecondition
from lockgate.coordinator.domain.states import CheckpointState
from tests.unit.coordinator.test_checkpoint_decisions import pipeline, task

C = CheckpointId
A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
T1, T2 = TaskId("p/0"), TaskId("p/1")


def lost(checkpoint_id: int, *, resolved: bool = False) -> CheckpointRecord:
    return CheckpointRecord(
        pipeline_id=PipelineId("p"),
        checkpoint_id=C(checkpoint_id),
        state=CheckpointState.DATA_LOST,
        leader_epoch=LeaderEpoch(1),
        tasks=(),
        precommitted=frozenset(),
        triggered_at_ms=0,
        completed_at_ms=1,
        committed_at_ms=None,
        aborted_at_ms=None,
        abort_reason=None,
        data_loss_error="PRODUCER_FENCED",
        data_loss_resolved=resolved,
        lost_tasks=frozenset({T1}),
    )


def test_lost_partitions_resume_at_the_lost_start_and_the_others_where_n_ended() -> None:
    offsets = offsets_after_loss(
        ranges_of_lost=[(T1, A0, 10, 20), (T1, A1, 5, 9), (T2, B0, 100, 150)],
        lost_tasks={T1},
        ranges_after=[],
    )
    assert offsets == {A0: 10, A1: 5, B0: 150}


def test_a_later_checkpoint_taken_along_is_read_again_where_n_committed() -> None:
    # N committed b[0] up to 150; N+1 read b[0] 150..170 and a[0] 20..30 but never commits.
    offsets = offsets_after_loss(
        ranges_of_lost=[(T1, A0, 10, 20), (T2, B0, 100, 150)],
        lost_tasks={T1},
        ranges_after=[(A0, 20), (B0, 150)],
    )
    assert offsets == {A0: 10, B0: 150}


def test_later_complete_checkpoints_go_lost_and_triggered_ones_abort() -> None:
    states = {
        C(3): CheckpointState.COMPLETE,
        C(4): CheckpointState.COMPLETE,
        C(5): CheckpointState.TRIGGERED,
        C(2): CheckpointState.ABORTED,
    }
    assert later_in_flight(C(3), states) == ([C(4)], [C(5)])
    assert later_in_flight(C(5), states) == ([], [])


def test_restart_must_name_the_lost_checkpoint() -> None:
    assert check_restart_from(lost(7), C(7), pipeline="p").checkpoint_id == 7
    with pytest.raises(FailedPrecondition, match="--from-checkpoint 7"):
        check_restart_from(lost(7), C(6), pipeline="p")
    with pytest.raises(FailedPrecondition, match="no DATA_LOST checkpoint"):
        check_restart_from(None, C(7), pipeline="p")


def test_an_unresolved_loss_fails_the_pipeline_and_stops_its_triggers() -> None:
    assert pipeline_health(lost(7)) is PipelineHealth.FAILED
    assert pipeline_health(None) is PipelineHealth.OK
    tasks = [dataclasses.replace(task(0), state_executor_id=task(0).executor_id)]
    due = {
        "pipeline": pipeline(),
        "tasks": tasks,
        "live_executors": frozenset({task(0).executor_id}),
        "has_lingering": False,
        "now_ms": 10_000,
    }
    assert not trigger_due(recent=[lost(7)], **due)  # type: ignore[arg-type]
    assert trigger_due(recent=[lost(7, resolved=True)], **due)  # type: ignore[arg-type]


def test_a_summary_keeps_the_loss_and_drops_only_what_derives_from_the_tasks() -> None:
    record = dataclasses.replace(lost(7), precommitted=frozenset({T1, T2}))
    summary = record.summary()
    assert (summary.tasks, summary.precommitted, summary.lost_tasks) == (
        (),
        frozenset(),
        frozenset(),
    )
    task_derived = {"tasks", "precommitted", "lost_tasks"}
    for field in dataclasses.fields(CheckpointRecord):
        if field.name not in task_derived:
            assert getattr(summary, field.name) == getattr(record, field.name), field.name
    assert summary.blocks_pipeline
