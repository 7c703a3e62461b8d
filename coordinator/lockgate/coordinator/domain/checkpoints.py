"""The leader side of the checkpoint protocol (DESIGN.md, two-phase commit), as decisions.

Checkpoint N of a pipeline is TRIGGERED for the set of tasks the pipeline had then; each
task pre-commits it (offset ranges read, sink handles left prepared); when every one of
those tasks has pre-committed, and every earlier checkpoint of the pipeline is COMPLETE
or COMMITTED, the leader writes COMPLETE (the commit point), then commits the handles and
marks it COMMITTED. Because N+1 reads from where N ended, N aborting aborts every later
in-flight checkpoint of the pipeline, and COMPLETE happens in checkpoint order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from lockgate.coordinator.domain.ids import (
    CheckpointId,
    ExecutorId,
    Generation,
    LeaderEpoch,
    PipelineId,
    TaskId,
)
from lockgate.coordinator.domain.states import CheckpointState
from lockgate.coordinator.domain.tasks import TopicPartition

DEFAULT_MAX_IN_FLIGHT = 2
"""Checkpoints of one pipeline that may be TRIGGERED or COMPLETE at once (N commits while
N+1 pre-commits). Must stay below the transactional id pool size."""


@dataclass(frozen=True)
class OffsetRange:
    """Records `[start_offset, end_offset)` of one source partition read by a pre-commit."""

    topic: str
    partition: int
    start_offset: int
    end_offset: int
    """Exclusive: the next offset to read, i.e. what a restored task starts from."""

    @property
    def topic_partition(self) -> TopicPartition:
        """The partition this range belongs to."""
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True)
class SinkHandle:
    """A prepared sink transaction a pre-commit left open (for Kafka: what EndTxn needs)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    kind: str = "kafka"


@dataclass(frozen=True)
class Precommit:
    """One task's pre-commit of one checkpoint, stamped with who reported it."""

    pipeline_id: PipelineId
    checkpoint_id: CheckpointId
    task_id: TaskId
    task_generation: Generation
    executor_id: ExecutorId
    executor_generation: Generation
    offsets: tuple[OffsetRange, ...]
    handles: tuple[SinkHandle, ...]


@dataclass(frozen=True)
class TaskTrigger:
    """What one task is asked to do for checkpoint N: which slot's id to write with."""

    task_id: TaskId
    task_generation: Generation
    executor_id: ExecutorId | None
    transactional_id: str
    slot: int


@dataclass(frozen=True)
class CheckpointRecord:
    """Checkpoint N of a pipeline with its timings (database clock, milliseconds)."""

    pipeline_id: PipelineId
    checkpoint_id: CheckpointId
    state: CheckpointState
    leader_epoch: LeaderEpoch
    """The epoch of the leader that triggered it."""
    tasks: tuple[TaskTrigger, ...]
    precommitted: frozenset[TaskId]
    triggered_at_ms: int
    completed_at_ms: int | None
    committed_at_ms: int | None
    aborted_at_ms: int | None
    abort_reason: str | None

    @property
    def task_ids(self) -> frozenset[TaskId]:
        """The tasks that must pre-commit before N can be COMPLETE."""
        return frozenset(t.task_id for t in self.tasks)

    @property
    def in_flight(self) -> bool:
        """TRIGGERED or COMPLETE: holds transactional ids and counts against the limit."""
        return self.state in (CheckpointState.TRIGGERED, CheckpointState.COMPLETE)


@dataclass(frozen=True)
class TaskHandles:
    """A task's sink handles within one checkpoint."""

    task_id: TaskId
    handles: tuple[SinkHandle, ...]


@dataclass(frozen=True)
class PendingCommit:
    """A COMPLETE, not yet COMMITTED checkpoint: its handles must be committed (again)."""

    pipeline_id: PipelineId
    checkpoint_id: CheckpointId
    handles: tuple[TaskHandles, ...]


@dataclass(frozen=True)
class LingeringTransaction:
    """A task's transaction in a checkpoint that never became COMPLETE: it must be aborted.

    A reported pre-commit gives one entry per handle, on the handle's own id
    (`<slot id>-<k>` for Spark write partition k). `producer_id`/`producer_epoch` are None
    when the task never reported its pre-commit; `transactional_id` is then the slot's id
    and the executor ends every transaction open on its ids with `init_transactions`.
    """

    pipeline_id: PipelineId
    checkpoint_id: CheckpointId
    checkpoint_state: CheckpointState
    task_id: TaskId
    transactional_id: str
    producer_id: int | None
    producer_epoch: int | None
    slot_reused: bool = False
    """A later checkpoint already took this id's slot: its next producer's
    `init_transactions` aborted (or will abort) this transaction. Do NOT re-initialise the
    id to abort it; an EndTxn with the stored producer epoch is safe (fenced if stale)."""

    @property
    def must_be_sent(self) -> bool:
        """Whether an executor must be asked to abort it: not when it has no producer id
        and its slot was reused (re-initialising the ids would abort the later checkpoint's
        transaction, and the later checkpoint's own init_transactions aborted this one)."""
        return self.producer_id is not None or not self.slot_reused


@dataclass(frozen=True)
class RestoreState:
    """What a (re)assigned task needs before it reads a record (DESIGN.md step 5)."""

    task_id: TaskId
    task_generation: Generation
    start_offsets: Mapping[TopicPartition, int]
    """Next offset per partition from the last COMPLETE checkpoint or an offset reset;
    partitions absent here start from the pipeline's `starting_offsets`."""
    to_commit: tuple[PendingCommit, ...]
    """COMPLETE but not COMMITTED checkpoints touching this task, oldest first."""
    to_abort: tuple[LingeringTransaction, ...]
    """This task's transactions in checkpoints that never became COMPLETE."""


def is_complete(*, expected: AbstractSet[TaskId], precommitted: AbstractSet[TaskId]) -> bool:
    """Whether every task checkpoint N was triggered for has pre-committed it."""
    return bool(expected) and expected <= precommitted


def completion_blocker(
    checkpoint_id: CheckpointId, states: Mapping[CheckpointId, CheckpointState]
) -> CheckpointId | None:
    """Return the earliest earlier checkpoint still TRIGGERED, if any.

    COMPLETE happens in order: N+1 read from where N ended, so N+1 may become the commit
    point only after N is COMPLETE or COMMITTED; a TRIGGERED one means wait. An earlier
    ABORTED one does not block: aborting N aborts every later in-flight checkpoint in the
    same transaction (`aborts_cascading_from`), so any checkpoint still TRIGGERED after an
    ABORTED one was triggered after that abort and read from the last COMPLETE offsets.
    """
    for other in sorted(states):
        if other >= checkpoint_id:
            break
        if states[other] is CheckpointState.TRIGGERED:
            return other
    return None


def aborts_cascading_from(
    aborted: CheckpointId, states: Mapping[CheckpointId, CheckpointState]
) -> list[CheckpointId]:
    """Return every later checkpoint still TRIGGERED, which must abort with `aborted`.

    Later COMPLETE ones cannot exist (completion is in order) and would not abort anyway.
    """
    return sorted(c for c, s in states.items() if c > aborted and s is CheckpointState.TRIGGERED)


def is_timed_out(*, triggered_at_ms: int, now_ms: int, timeout_ms: int) -> bool:
    """Whether a TRIGGERED checkpoint has waited longer than the pipeline's timeout."""
    return now_ms - triggered_at_ms > timeout_ms


def should_trigger(
    *,
    last_triggered_at_ms: int | None,
    now_ms: int,
    interval_ms: int,
    in_flight: int,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> bool:
    """Whether the leader should trigger the pipeline's next checkpoint now."""
    if in_flight >= max_in_flight:
        return False
    return last_triggered_at_ms is None or now_ms - last_triggered_at_ms >= interval_ms


def commit_order(pending: Iterable[PendingCommit]) -> list[PendingCommit]:
    """Pending commits in the order they must be (re)committed: creation order per pipeline."""
    return sorted(pending, key=lambda p: (p.pipeline_id, p.checkpoint_id))


def next_offsets(ranges: Iterable[OffsetRange]) -> dict[TopicPartition, int]:
    """The restore position after a set of ranges: the highest end offset per partition."""
    result: dict[TopicPartition, int] = {}
    for r in ranges:
        tp = r.topic_partition
        result[tp] = max(result.get(tp, r.end_offset), r.end_offset)
    return result
