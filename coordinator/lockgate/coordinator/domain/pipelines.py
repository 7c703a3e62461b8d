"""Pipelines and tasks as the store returns them (desired state apart from observed),
and the decisions the store applies to them: config versions, re-splitting, restarts,
who may reset offsets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lockgate.common.model.ids import CheckpointId, ExecutorId, Generation, PipelineId, TaskId
from lockgate.common.model.offsets import TopicPartition
from lockgate.common.model.pipeline_spec import PipelineSpec
from lockgate.coordinator.domain.errors import FailedPrecondition, InvalidArgument
from lockgate.coordinator.domain.states import (
    CheckpointState,
    TargetState,
    TaskState,
    transition_task_state,
)
from lockgate.coordinator.domain.tasks import TaskSplit


@dataclass(frozen=True)
class PipelineRecord:
    """A pipeline: its config (with version) and what the user asked it to do."""

    pipeline_id: PipelineId
    spec: PipelineSpec
    config_version: int
    """Starts at 1, grows by one on each update."""
    target_state: TargetState
    next_checkpoint_id: CheckpointId
    """The id the next triggered checkpoint gets."""
    created_at_ms: int
    updated_at_ms: int


@dataclass(frozen=True)
class PipelinesFingerprint:
    """Aggregates of the pipelines and tasks tables, one cheap read, that change whenever
    what the leader's pass plans from them changes, so an unchanged one lets it skip the
    plan (it still re-plans every few seconds, and in full on taking the lead).

    `pipelines` changes when a pipeline is created, deleted, updated (config version),
    paused, resumed or stopped (its `updated_at_ms`, the count in each target state); `tasks`
    when a task is created, deleted, moved, released or restarted (each bumps its
    generation). Triggers and task state reports change neither.
    """

    pipelines: tuple[int, ...]
    tasks: tuple[int, ...]


@dataclass(frozen=True)
class TaskRecord:
    """A task: its partitions, its assignment, and its last observed state."""

    task_id: TaskId
    pipeline_id: PipelineId
    task_index: int
    partitions: tuple[TopicPartition, ...]
    executor_id: ExecutorId | None
    """The executor it is assigned to; None while unassigned."""
    generation: Generation
    """Grows on every (re)assignment; reports with another generation are refused."""
    state: TaskState
    """Last observed state."""
    state_executor_id: ExecutorId | None
    """Which executor reported `state`..."""
    state_executor_generation: Generation | None
    """...with which executor generation."""
    last_error: str | None
    updated_at_ms: int


@dataclass(frozen=True)
class TasksChanged:
    """Tasks a reassignment or a restart changed, and the in-flight checkpoints it aborted
    (those the changed tasks were in, with the later ones of their pipelines)."""

    tasks: tuple[TaskRecord, ...]
    aborted: tuple[tuple[PipelineId, CheckpointId], ...]


@dataclass(frozen=True)
class PartitionOffset:
    """Where a pipeline resumes reading one source partition."""

    topic: str
    partition: int
    next_offset: int
    checkpoint_id: int | None
    """The COMPLETE checkpoint that set it; None when set by an offset reset."""


def check_config_version(pipeline: PipelineRecord, expected_version: int | None) -> None:
    """Optimistic concurrency for read-modify-write clients: FailedPrecondition unless the
    stored config version is the one the client read (None: no check)."""
    if expected_version is not None and expected_version != pipeline.config_version:
        raise FailedPrecondition(
            f"pipeline {pipeline.pipeline_id!r} is at config version "
            f"{pipeline.config_version}, not {expected_version}; read it again and re-apply "
            "your change",
            reason="CONFIG_VERSION_MISMATCH",
        )


@dataclass(frozen=True)
class TaskSplitPlan:
    """How a pipeline's tasks change to match a new split."""

    removed: tuple[TaskId, ...]
    """Tasks whose index is no longer in the split: deleted."""
    added: tuple[TaskSplit, ...]
    """New indexes: created UNASSIGNED with no executor."""
    changed: tuple[tuple[TaskId, TaskSplit], ...]
    """Tasks whose partitions changed: they keep their executor, their generation grows
    and they become UNASSIGNED until the executor restarts them."""


def plan_task_split(existing: Sequence[TaskRecord], splits: Sequence[TaskSplit]) -> TaskSplitPlan:
    """Diff a pipeline's tasks against `splits` (from `split_partitions`); unchanged tasks
    are left alone."""
    by_index = {t.task_index: t for t in existing}
    wanted = {s.index: s for s in splits}
    changed: list[tuple[TaskId, TaskSplit]] = []
    added: list[TaskSplit] = []
    for index, split in wanted.items():
        old = by_index.get(index)
        if old is None:
            added.append(split)
        elif old.partitions != tuple(sorted(split.partitions)):
            changed.append((old.task_id, split))
    return TaskSplitPlan(
        removed=tuple(t.task_id for i, t in by_index.items() if i not in wanted),
        added=tuple(added),
        changed=tuple(changed),
    )


def tasks_to_restart(tasks: Sequence[TaskRecord], *, only_failed: bool) -> list[TaskRecord]:
    """The tasks a restart moves to RESTARTING (all, or only FAILED ones); IllegalTransition
    if one of them may not restart."""
    chosen = [t for t in tasks if not only_failed or t.state is TaskState.FAILED]
    for task in chosen:
        transition_task_state(task.state, TaskState.RESTARTING)
    return chosen


def restart_state(state: TaskState) -> TaskState:
    """The state a task shows once restarted with a new generation, until its executor
    runs it: RESTARTING, or UNASSIGNED while no executor has started it yet."""
    if state is TaskState.UNASSIGNED:
        return state
    return transition_task_state(state, TaskState.RESTARTING)


def restarts_for_new_config(tasks: Sequence[TaskRecord]) -> list[tuple[TaskRecord, TaskState]]:
    """Each task of an updated pipeline and the state it restarts in on the new config.

    An executor runs the config it was assigned at a task's generation and refuses a
    trigger for another config version, so a task kept at its generation after an update
    would refuse every later trigger: each task gets a new generation (its executor
    restarts it from the last COMPLETE checkpoint), in `restart_state`.
    """
    return [(t, restart_state(t.state)) for t in tasks]


def check_task_restartable(pipeline: PipelineRecord, task: TaskRecord) -> TaskState:
    """The state a RestartTask leaves `task` in (`restart_state`); FailedPrecondition
    PIPELINE_STOPPED while its pipeline is STOPPED (its tasks are released: nothing would
    run it)."""
    if pipeline.target_state is TargetState.STOPPED:
        raise FailedPrecondition(
            f"pipeline {pipeline.pipeline_id!r} is STOPPED, so task {task.task_id!r} is "
            "released; resume the pipeline (its tasks then start again), then restart the "
            "task if it fails",
            reason="PIPELINE_STOPPED",
        )
    return restart_state(task.state)


def check_reset_offsets(offsets: Mapping[TopicPartition, int] | None) -> None:
    """Refuse a negative offset in an offset reset (InvalidArgument naming the partition)."""
    for tp, offset in (offsets or {}).items():
        if offset < 0:
            raise InvalidArgument.for_field(
                f"offsets[{tp.topic}:{tp.partition}]",
                f"must be >= 0, got {offset}; omit the partition to use starting_offsets",
            )


def check_offsets_resettable(
    pipeline: PipelineRecord, states: Mapping[CheckpointId, CheckpointState]
) -> None:
    """Offsets may be reset only while the pipeline is STOPPED and no checkpoint is in
    flight (as Kafka Connect's offsets API); FailedPrecondition otherwise."""
    if pipeline.target_state is not TargetState.STOPPED:
        raise FailedPrecondition(
            f"pipeline {pipeline.pipeline_id!r} is {pipeline.target_state.value}; stop it "
            "before resetting its offsets",
            reason="PIPELINE_NOT_STOPPED",
        )
    in_flight = [
        c for c, s in states.items() if s in (CheckpointState.TRIGGERED, CheckpointState.COMPLETE)
    ]
    if in_flight:
        raise FailedPrecondition(
            f"pipeline {pipeline.pipeline_id!r} still has checkpoints {sorted(in_flight)} in "
            "flight; wait until they are committed or aborted",
            reason="CHECKPOINTS_IN_FLIGHT",
        )
