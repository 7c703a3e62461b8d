"""Pipelines and tasks as the store returns them (desired state apart from observed)."""

from __future__ import annotations

from dataclasses import dataclass

from lockgate.coordinator.domain.ids import CheckpointId, ExecutorId, Generation, PipelineId, TaskId
from lockgate.coordinator.domain.pipeline_spec import PipelineSpec
from lockgate.coordinator.domain.states import TargetState, TaskState
from lockgate.coordinator.domain.tasks import TopicPartition


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
class PartitionOffset:
    """Where a pipeline resumes reading one source partition."""

    topic: str
    partition: int
    next_offset: int
    checkpoint_id: int | None
    """The COMPLETE checkpoint that set it; None when set by an offset reset."""
