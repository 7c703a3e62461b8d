"""The leader side of the checkpoint protocol (DESIGN.md, two-phase commit), as decisions.

Checkpoint N of a pipeline is TRIGGERED for the set of tasks the pipeline had then; each
task pre-commits it (offset ranges read, sink handles left prepared); when every one of
those tasks has pre-committed, and every earlier checkpoint of the pipeline is COMPLETE
or COMMITTED, the leader writes COMPLETE (the commit point), then commits the handles and
marks it COMMITTED. Because N+1 reads from where N ended, N aborting aborts every later
in-flight checkpoint of the pipeline, and COMPLETE happens in checkpoint order.

The store applies these decisions inside its fenced transactions: it reads a snapshot,
calls a function here (`plan_trigger`, `checkpoints_to_complete`, `plan_abort`,
`first_timed_out`, `restore_states_of`), and writes what it returns. `trigger_due` is
the leader's side of the same rule: which pipelines its trigger loop should try.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace

from lockgate.common.model.handles import TransactionHandle
from lockgate.common.model.ids import (
    CheckpointId,
    ExecutorId,
    Generation,
    LeaderEpoch,
    PipelineId,
    TaskId,
    TransactionalId,
)
from lockgate.common.model.offsets import OffsetRange, TopicPartition
from lockgate.common.model.pipeline_spec import MAX_CONCURRENT_CHECKPOINTS
from lockgate.coordinator.domain.errors import FailedPrecondition
from lockgate.coordinator.domain.pipelines import PipelineRecord, TaskRecord
from lockgate.coordinator.domain.states import (
    CheckpointState,
    TargetState,
    TaskState,
    transition_checkpoint,
)
from lockgate.coordinator.domain.transactional_ids import (
    TRANSACTIONAL_ID_SLOTS,
    choose_slot,
    transactional_id,
)

DEFAULT_MAX_IN_FLIGHT = MAX_CONCURRENT_CHECKPOINTS
"""Checkpoints of one pipeline that may be TRIGGERED or COMPLETE at once (N commits while
N+1 pre-commits): the spec's `checkpoint.max_concurrent`, the one value it accepts. The
store's `trigger_checkpoints` enforces it through `plan_trigger`."""

assert 1 <= DEFAULT_MAX_IN_FLIGHT <= TRANSACTIONAL_ID_SLOTS, "a task needs a slot per checkpoint"


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
    handles: tuple[TransactionHandle, ...]
    backlog_left: bool = False
    """A range stopped at the most records the executor let this checkpoint read (its
    sizing, up to `source.kafka.max_records_per_partition`): records may be left, so the
    next checkpoint need not wait for the interval."""


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
    data_loss_error: str | None = None
    """Set when DATA_LOST: the broker's answer to the commit that failed for good."""
    data_lost_at_ms: int | None = None
    data_loss_resolved: bool = False
    """An operator moved the pipeline past this DATA_LOST checkpoint (restart or reset)."""
    lost_tasks: frozenset[TaskId] = frozenset()
    """The tasks whose transactions the broker aborted (their ranges are lost)."""

    @property
    def blocks_pipeline(self) -> bool:
        """DATA_LOST and not moved past yet: the pipeline is FAILED, nothing triggers."""
        return self.state is CheckpointState.DATA_LOST and not self.data_loss_resolved

    @property
    def task_ids(self) -> frozenset[TaskId]:
        """The tasks that must pre-commit before N can be COMPLETE."""
        return frozenset(t.task_id for t in self.tasks)

    @property
    def in_flight(self) -> bool:
        """TRIGGERED or COMPLETE: holds transactional ids and counts against the limit."""
        return self.state in (CheckpointState.TRIGGERED, CheckpointState.COMPLETE)

    def summary(self) -> CheckpointRecord:
        """This checkpoint without its tasks (and so without what derives from them): what
        the decisions that read only states and times get."""
        return replace(self, tasks=(), precommitted=frozenset(), lost_tasks=frozenset())


@dataclass(frozen=True)
class TaskHandles:
    """A task's sink handles within one checkpoint."""

    task_id: TaskId
    handles: tuple[TransactionHandle, ...]
    executor_id: ExecutorId | None = None
    """The executor the task pre-committed them on: the commit is sent there first."""


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
    """A later checkpoint already took this very id (same slot, same task generation): its
    next producer's `init_transactions` aborted (or will abort) this transaction. Do NOT
    re-initialise the id to abort it; an EndTxn with the stored producer epoch is safe
    (fenced if stale). A later generation's use of the slot is on another id: the old id
    is not reused, and its open transactions are aborted by listing them."""

    @property
    def handle(self) -> TransactionHandle:
        """The transaction as a handle (without producer id and epoch if never reported)."""
        return TransactionHandle(
            TransactionalId(self.transactional_id), self.producer_id, self.producer_epoch
        )

    @property
    def must_be_sent(self) -> bool:
        """Whether an executor must be asked to abort it: not when it has no producer id
        and its slot was reused (re-initialising the ids would abort the later checkpoint's
        transaction, and the later checkpoint's own init_transactions aborted this one)."""
        return self.producer_id is not None or not self.slot_reused


@dataclass(frozen=True)
class RecoveryPlan:
    """What a new leader found to do before triggering anything (DESIGN.md step 5)."""

    aborted: tuple[tuple[PipelineId, CheckpointId], ...]
    """In-flight checkpoints it aborted because it cannot know their outcome."""
    to_commit: tuple[PendingCommit, ...]
    """COMPLETE, not COMMITTED checkpoints, in creation order: commit them again."""
    to_abort: tuple[LingeringTransaction, ...]
    """Transactions of checkpoints that never became COMPLETE: abort them."""


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


@dataclass(frozen=True)
class PrecommitCount:
    """Of the tasks checkpoint N was triggered for: how many, and how many of them have
    pre-committed it (the store counts its `checkpoint_tasks` rows; a report for another
    task is refused before it is stored, so `precommitted` counts a subset of `tasks`)."""

    tasks: int
    precommitted: int


def is_complete(count: PrecommitCount) -> bool:
    """Whether every task checkpoint N was triggered for has pre-committed it (a checkpoint
    triggered for no task never is)."""
    return count.tasks > 0 and count.precommitted >= count.tasks


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
    behind: bool = False,
) -> bool:
    """Whether the leader should trigger the pipeline's next checkpoint now: once its
    interval has passed, or at once when it is `behind` (a pre-commit of its newest
    checkpoint left records unread: `Precommit.backlog_left`), within the in-flight limit
    either way."""
    if in_flight >= max_in_flight:
        return False
    return behind or last_triggered_at_ms is None or now_ms - last_triggered_at_ms >= interval_ms


def commit_order(pending: Iterable[PendingCommit]) -> list[PendingCommit]:
    """Pending commits in the order they must be (re)committed: creation order per pipeline."""
    return sorted(pending, key=lambda p: (p.pipeline_id, p.checkpoint_id))


@dataclass(frozen=True)
class TriggerPlan:
    """What triggering checkpoint N writes: N, and each task's slot and transactional id."""

    pipeline_id: PipelineId
    checkpoint_id: CheckpointId
    tasks: tuple[TaskTrigger, ...]


def plan_trigger(
    *,
    pipeline: PipelineRecord,
    tasks: Sequence[TaskRecord],
    states: Mapping[CheckpointId, CheckpointState],
    slot_use: Mapping[int, Mapping[int, CheckpointState | None]],
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> TriggerPlan:
    """Decide whether the pipeline's next checkpoint may start now, and with which slots.

    `states` are the pipeline's checkpoints not yet COMMITTED; `slot_use` maps a task
    index to its slots and the state of the checkpoint that last used each (see
    `transactional_ids.py`). Raises FailedPrecondition when the pipeline is not RUNNING,
    has no tasks, has a task without an executor, already has `max_in_flight`
    checkpoints in flight, or a task has no free slot.
    """
    pipeline_id = pipeline.pipeline_id
    if pipeline.target_state is not TargetState.RUNNING:
        raise FailedPrecondition(
            f"pipeline {pipeline_id!r} is {pipeline.target_state.value}; resume it to "
            "run checkpoints",
            reason="PIPELINE_NOT_RUNNING",
        )
    if not tasks:
        raise FailedPrecondition(f"pipeline {pipeline_id!r} has no tasks yet", reason="NO_TASKS")
    unassigned = [t.task_id for t in tasks if t.executor_id is None]
    if unassigned:
        raise FailedPrecondition(
            f"tasks {unassigned} have no executor yet", reason="TASKS_UNASSIGNED"
        )
    in_flight = sum(
        1 for s in states.values() if s in (CheckpointState.TRIGGERED, CheckpointState.COMPLETE)
    )
    if in_flight >= max_in_flight:
        raise FailedPrecondition(
            f"pipeline {pipeline_id!r} has {in_flight} checkpoints in flight (max {max_in_flight})",
            reason="TOO_MANY_IN_FLIGHT",
        )
    triggers: list[TaskTrigger] = []
    for task in tasks:
        slot = choose_slot(slot_use.get(task.task_index, {}))
        if slot is None:
            raise FailedPrecondition(
                f"task {task.task_id} has no free transactional id slot (all used "
                "by checkpoints not yet committed or aborted)",
                reason="NO_FREE_SLOT",
            )
        triggers.append(
            TaskTrigger(
                task_id=task.task_id,
                task_generation=task.generation,
                executor_id=task.executor_id,
                transactional_id=transactional_id(
                    pipeline.spec.transactional_id_prefix, task.task_index, task.generation, slot
                ),
                slot=slot,
            )
        )
    return TriggerPlan(
        pipeline_id=pipeline_id,
        checkpoint_id=pipeline.next_checkpoint_id,
        tasks=tuple(triggers),
    )


def checkpoints_to_complete(
    start: CheckpointId,
    *,
    states: Mapping[CheckpointId, CheckpointState],
    counts: Mapping[CheckpointId, PrecommitCount],
) -> list[CheckpointId]:
    """Return the checkpoints that become COMPLETE now, from `start` on, in order.

    `states` are the pipeline's checkpoints not yet COMMITTED, `counts` the TRIGGERED
    ones' pre-commits. N completes when every task it was triggered for has pre-committed
    (`is_complete`) and no earlier one is still TRIGGERED (`completion_blocker`);
    completing N may unblock N+1 (all its tasks pre-committed earlier), so the walk goes
    on until one is not ready.
    """
    walked = dict(states)
    done: list[CheckpointId] = []
    current = start
    while walked.get(current) is CheckpointState.TRIGGERED and current in counts:
        if not is_complete(counts[current]) or completion_blocker(current, walked) is not None:
            break
        walked[current] = transition_checkpoint(walked[current], CheckpointState.COMPLETE)
        done.append(current)
        current = CheckpointId(current + 1)
    return done


def committed_on_completion(
    completed: Sequence[CheckpointId],
    *,
    states: Mapping[CheckpointId, CheckpointState],
    with_handles: AbstractSet[CheckpointId],
) -> list[CheckpointId]:
    """Of the checkpoints just written COMPLETE (`checkpoints_to_complete`), those that are
    COMMITTED in the same transaction, in order: the ones with nothing to commit (no task
    left a transaction open: no handle, `with_handles`) while no earlier checkpoint of the
    pipeline waits for its commit. Step 4 would call no executor for them, so a separate
    commit would only write COMMITTED later (an idle pipeline's checkpoints, and every
    checkpoint of `--data-plane none`).

    `states` are the pipeline's checkpoints not yet COMMITTED as read before the
    completion: a COMPLETE one earlier than the first completed here must commit first
    (commits go in order: COMMITTED N+1 before N would leave N's records behind it). The
    first completed checkpoint with handles stops the walk: the ones after it wait for it.
    """
    waiting = [c for c, state in states.items() if state is CheckpointState.COMPLETE]
    done: list[CheckpointId] = []
    for checkpoint_id in sorted(completed):
        if checkpoint_id in with_handles or any(w < checkpoint_id for w in waiting):
            break
        done.append(checkpoint_id)
    return done


def plan_abort(
    checkpoint_id: CheckpointId,
    *,
    current: CheckpointState,
    states: Mapping[CheckpointId, CheckpointState],
) -> list[CheckpointId]:
    """Return the checkpoints aborting N takes down: N and every later TRIGGERED one.

    Empty if N is already ABORTED (aborting is idempotent); IllegalTransition if N is
    COMPLETE or COMMITTED, because the commit point is final.
    """
    if current is CheckpointState.ABORTED:
        return []
    transition_checkpoint(current, CheckpointState.ABORTED)
    return [checkpoint_id, *aborts_cascading_from(checkpoint_id, states)]


def abort_reason(victim: CheckpointId, *, first: CheckpointId, reason: str) -> str:
    """The reason stored on an aborted checkpoint: its own, or the cascade's origin."""
    return reason if victim == first else f"checkpoint {first} aborted ({reason})"


@dataclass(frozen=True)
class TriggeredCheckpoint:
    """A TRIGGERED checkpoint with when it started and its pipeline's timeout."""

    pipeline_id: PipelineId
    checkpoint_id: CheckpointId
    triggered_at_ms: int
    timeout_ms: int


def first_timed_out(
    triggered: Iterable[TriggeredCheckpoint], *, now_ms: int
) -> list[TriggeredCheckpoint]:
    """The earliest timed-out checkpoint of each pipeline (pipeline order): aborting it
    takes the later in-flight ones of its pipeline along (`plan_abort`)."""
    first: dict[PipelineId, TriggeredCheckpoint] = {}
    for c in sorted(triggered, key=lambda c: (c.pipeline_id, c.checkpoint_id)):
        if c.pipeline_id in first:
            continue
        if is_timed_out(triggered_at_ms=c.triggered_at_ms, now_ms=now_ms, timeout_ms=c.timeout_ms):
            first[c.pipeline_id] = c
    return list(first.values())


def next_timeout_at_ms(triggered: Iterable[TriggeredCheckpoint], *, now_ms: int) -> int | None:
    """The database time at which the first of these not yet timed out at `now_ms` times
    out (`is_timed_out` turns true); None if none is left to. The leader's loop sleeps no
    longer than that."""
    later = [
        c.triggered_at_ms + c.timeout_ms + 1
        for c in triggered
        if not is_timed_out(
            triggered_at_ms=c.triggered_at_ms, now_ms=now_ms, timeout_ms=c.timeout_ms
        )
    ]
    return min(later, default=None)


def check_handles_abortable(checkpoint: CheckpointRecord) -> None:
    """Refuse to record aborted transactions of a checkpoint that is not ABORTED."""
    if checkpoint.state is not CheckpointState.ABORTED:
        raise FailedPrecondition(
            f"checkpoint {checkpoint.checkpoint_id} of {checkpoint.pipeline_id!r} is "
            f"{checkpoint.state.value}; only an ABORTED checkpoint's transactions may "
            "be aborted",
            reason="CHECKPOINT_NOT_ABORTED",
        )


def restore_states_of(
    tasks: Sequence[TaskRecord],
    *,
    offsets: Mapping[TopicPartition, int],
    pending: Sequence[PendingCommit],
    lingering: Sequence[LingeringTransaction],
) -> dict[TaskId, RestoreState]:
    """What each task of one pipeline needs before it reads (DESIGN.md step 5).

    `offsets` are the pipeline's restore offsets, `pending` its COMPLETE-not-COMMITTED
    checkpoints (oldest first), `lingering` its transactions of ABORTED checkpoints whose
    abort is not recorded yet. Only ABORTED ones: a TRIGGERED checkpoint whose pre-commit
    of a task was reported by the task's previous process may still become COMPLETE.
    """
    result: dict[TaskId, RestoreState] = {}
    for task in tasks:
        to_commit: list[PendingCommit] = []
        for commit in pending:
            mine = tuple(h for h in commit.handles if h.task_id == task.task_id)
            if mine:
                to_commit.append(replace(commit, handles=mine))
        result[task.task_id] = RestoreState(
            task_id=task.task_id,
            task_generation=task.generation,
            start_offsets={tp: offsets[tp] for tp in task.partitions if tp in offsets},
            to_commit=tuple(to_commit),
            to_abort=tuple(t for t in lingering if t.task_id == task.task_id),
        )
    return result


def trigger_due(
    *,
    pipeline: PipelineRecord,
    tasks: Sequence[TaskRecord],
    live_executors: AbstractSet[ExecutorId],
    recent: Sequence[CheckpointRecord],
    has_lingering: bool,
    now_ms: int,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    behind: bool = False,
) -> bool:
    """Whether the leader's trigger loop should start the pipeline's next checkpoint now.

    Its checkpoints allow it (`checkpoints_allow_trigger`), and it has tasks and each is
    RUNNING on a live executor, as reported by that very executor (a trigger to a task not
    running yet would only time out). `trigger_checkpoints` re-checks what it can inside its
    transaction.
    """
    return (
        bool(tasks)
        and all(
            t.executor_id in live_executors
            and t.state is TaskState.RUNNING
            and t.state_executor_id == t.executor_id
            for t in tasks
        )
        and checkpoints_allow_trigger(
            pipeline=pipeline,
            recent=recent,
            has_lingering=has_lingering,
            now_ms=now_ms,
            max_in_flight=max_in_flight,
            behind=behind,
        )
    )


def checkpoints_allow_trigger(
    *,
    pipeline: PipelineRecord,
    recent: Sequence[CheckpointRecord],
    has_lingering: bool,
    now_ms: int,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    behind: bool = False,
) -> bool:
    """What `trigger_due` asks of everything but the tasks, so a pass need not read the
    tasks of a pipeline its checkpoints hold back. The pipeline is RUNNING; no transaction of
    an aborted checkpoint of it is still to be aborted (the next checkpoint's producers could
    otherwise find them open); none of `recent` (its latest checkpoints, newest first) is
    still TRIGGERED or an unresolved DATA_LOST one (the pipeline is FAILED until an operator
    moves past it; nothing newer can exist); and `should_trigger` agrees (interval unless
    `behind`, in-flight limit)."""
    if pipeline.target_state is not TargetState.RUNNING or has_lingering:
        return False
    if any(c.state is CheckpointState.TRIGGERED or c.blocks_pipeline for c in recent):
        return False
    return should_trigger(
        last_triggered_at_ms=recent[0].triggered_at_ms if recent else None,
        now_ms=now_ms,
        interval_ms=pipeline.spec.checkpoint.interval_ms,
        in_flight=sum(1 for c in recent if c.in_flight),
        max_in_flight=max_in_flight,
        behind=behind,
    )
