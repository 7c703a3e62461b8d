"""Which pre-commit reports the leader accepts: the checks of DESIGN.md's trust model.

A report is checked against what was asked, before anything of it is stored:
- the checkpoint exists and the task is one it was triggered for;
- the executor's session is current (`check_executor_session`) and the report carries the
  task generation the trigger was sent with;
- the task is still that executor's, in that generation (`check_task_owner`): a zombie
  whose task moved since the trigger is refused, not merely told N aborted;
- a task that already pre-committed N is a retried report: accepted, nothing new stored;
- otherwise N must still be TRIGGERED (an ABORTED one: the executor aborts its handles);
- every Kafka handle is on the transactional id N allotted to the task, or one of its
  write partitions' `<allotted>-<k>` ids.
The store reads the snapshot (the checkpoints, executor generations and tasks the reports
name) inside its fenced transaction, calls `accept_precommits`, and writes what it returns.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from lockgate.common.kafka_transactions import belongs_to_slot
from lockgate.common.model.ids import CheckpointId, ExecutorId, Generation, PipelineId, TaskId
from lockgate.coordinator.domain.checkpoints import CheckpointRecord, Precommit, TaskTrigger
from lockgate.coordinator.domain.errors import FailedPrecondition, NotFound
from lockgate.coordinator.domain.membership import (
    check_executor_session,
    check_generation,
    check_task_owner,
)
from lockgate.coordinator.domain.pipelines import TaskRecord
from lockgate.coordinator.domain.states import CheckpointState

CheckpointKey = tuple[PipelineId, CheckpointId]


def group_by_checkpoint(precommits: Sequence[Precommit]) -> dict[CheckpointKey, list[Precommit]]:
    """Reports grouped by the checkpoint they pre-commit, in report order within each."""
    groups: dict[CheckpointKey, list[Precommit]] = defaultdict(list)
    for p in precommits:
        groups[(p.pipeline_id, p.checkpoint_id)].append(p)
    return dict(groups)


def accept_precommits(
    precommits: Sequence[Precommit],
    *,
    checkpoints: Mapping[CheckpointKey, CheckpointRecord | None],
    executor_generations: Mapping[ExecutorId, Generation],
    tasks: Mapping[TaskId, TaskRecord],
) -> dict[CheckpointKey, tuple[Precommit, ...]]:
    """Check every report; return the new ones to store, per checkpoint (all or nothing).

    `checkpoints` holds each reported checkpoint (None: it does not exist),
    `executor_generations` the current generation of each registered executor named,
    `tasks` each reported task. Raises NotFound, StaleGeneration or FailedPrecondition
    for the first refused report (checkpoints in order); retried reports are left out.
    """
    accepted: dict[CheckpointKey, tuple[Precommit, ...]] = {}
    for key, group in sorted(group_by_checkpoint(precommits).items()):
        checkpoint = checkpoints.get(key)
        if checkpoint is None:
            pipeline_id, checkpoint_id = key
            raise NotFound(
                f"pipeline {pipeline_id!r} has no checkpoint {checkpoint_id}",
                resource_type="checkpoint",
                resource_name=f"{pipeline_id}/{checkpoint_id}",
            )
        triggers = {t.task_id: t for t in checkpoint.tasks}
        fresh: dict[TaskId, Precommit] = {}
        for p in group:
            trigger = _check_reporter(p, checkpoint, triggers, executor_generations, tasks)
            if p.task_id in checkpoint.precommitted or p.task_id in fresh:
                continue  # a retried report
            _check_new_precommit(p, checkpoint, trigger)
            fresh[p.task_id] = p
        if fresh:
            accepted[key] = tuple(fresh.values())
    return accepted


def _check_reporter(
    p: Precommit,
    checkpoint: CheckpointRecord,
    triggers: Mapping[TaskId, TaskTrigger],
    executor_generations: Mapping[ExecutorId, Generation],
    tasks: Mapping[TaskId, TaskRecord],
) -> TaskTrigger:
    """Check who reports: the task is in N, its executor's session and its assignment are
    current. Returns what N asked of the task."""
    trigger = triggers.get(p.task_id)
    if trigger is None:
        raise NotFound(
            f"task {p.task_id} is not part of checkpoint {checkpoint.checkpoint_id} of "
            f"{checkpoint.pipeline_id!r}",
            resource_type="checkpoint_task",
            resource_name=p.task_id,
        )
    check_executor_session(
        p.executor_id,
        reported=p.executor_generation,
        current=executor_generations.get(p.executor_id),
    )
    check_generation(
        what=f"task {p.task_id} in checkpoint {checkpoint.checkpoint_id}",
        reported=p.task_generation,
        current=trigger.task_generation,
    )
    task = tasks.get(p.task_id)
    if task is None:
        raise NotFound(
            f"no task {p.task_id!r}; the pipeline may have been deleted or re-split",
            resource_type="task",
            resource_name=p.task_id,
        )
    # The task must still be that executor's, in that generation: a zombie whose task
    # moved since the trigger is refused, not merely told N aborted.
    check_task_owner(task, p.executor_id, p.task_generation)
    return trigger


def _check_new_precommit(p: Precommit, checkpoint: CheckpointRecord, trigger: TaskTrigger) -> None:
    """Check what a first report of the task brings: N still open, its own ids."""
    if checkpoint.state is not CheckpointState.TRIGGERED:
        raise FailedPrecondition(
            f"checkpoint {checkpoint.checkpoint_id} of {checkpoint.pipeline_id!r} is "
            f"{checkpoint.state.value}; abort this pre-commit's transactions",
            reason="CHECKPOINT_NOT_TRIGGERED",
        )
    allotted = trigger.transactional_id
    for handle in p.handles:
        # The allotted id is the task's prefix: its Spark write partition k writes with
        # "<allotted>-<k>" (one producer per write partition).
        if not belongs_to_slot(handle.transactional_id, allotted):
            raise FailedPrecondition(
                f"handle uses transactional id {handle.transactional_id!r} but "
                f"checkpoint {checkpoint.checkpoint_id} allotted {allotted!r} to task "
                f"{p.task_id}",
                reason="WRONG_TRANSACTIONAL_ID",
            )
