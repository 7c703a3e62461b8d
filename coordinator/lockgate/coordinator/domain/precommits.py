"""Which pre-commit reports the leader accepts: the checks of DESIGN.md's trust model.

A report is checked against what was asked, before anything of it is stored:
- the checkpoint exists and the task is one it was triggered for;
- the executor's session is current (`check_executor_session`) and the report carries the
  task generation the trigger was sent with;
- the task is still that executor's, in that generation (`check_task_owner`): a zombie
  whose task moved since the trigger is refused, not merely told N aborted;
- a task that already pre-committed N is a retried report: accepted, nothing new stored;
- otherwise N must still be TRIGGERED (an ABORTED one: the executor aborts its handles);
- what the report brings matches what N asked (`check_precommit_content`, INVALID_ARGUMENT
  naming each field that does not): each offset range is of one of the task's own
  partitions, listed once, and starts where the pipeline resumes that partition (the end
  of the last COMPLETE checkpoint, or a reset: what the trigger sent); every Kafka handle
  is on the transactional id N allotted to the task, or one of its write partitions'
  `<allotted>-<k>` ids, and names the pipeline's sink cluster or none (the coordinator
  stores no caller-chosen `bootstrap_servers`: it sends the pipeline's).
  The trigger carries no end offsets (the executor snapshots each partition's end when its
  batch starts), so an end offset is bounded only by its start; checking it against the
  broker's high watermark would put a Kafka call on every report.
The store reads the snapshot (the checkpoints, executor generations and tasks the reports
name) inside its fenced transaction, calls `accept_precommits`, and writes what it returns.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lockgate.common.kafka_slot_transactions import belongs_to_slot
from lockgate.common.model.ids import CheckpointId, ExecutorId, Generation, PipelineId, TaskId
from lockgate.common.model.offsets import TopicPartition
from lockgate.coordinator.domain.checkpoints import CheckpointRecord, Precommit, TaskTrigger
from lockgate.coordinator.domain.errors import (
    FailedPrecondition,
    FieldViolation,
    InvalidArgument,
    NotFound,
)
from lockgate.coordinator.domain.membership import (
    check_executor_session,
    check_generation,
    check_task_owner,
)
from lockgate.coordinator.domain.pipelines import TaskRecord
from lockgate.coordinator.domain.states import CheckpointState

CheckpointKey = tuple[PipelineId, CheckpointId]
#: Why one report was refused (StaleGeneration is a FailedPrecondition).
PrecommitRefusal = NotFound | FailedPrecondition | InvalidArgument


def group_by_checkpoint(precommits: Sequence[Precommit]) -> dict[CheckpointKey, list[Precommit]]:
    """Reports grouped by the checkpoint they pre-commit, in report order within each."""
    groups: dict[CheckpointKey, list[Precommit]] = defaultdict(list)
    for p in precommits:
        groups[(p.pipeline_id, p.checkpoint_id)].append(p)
    return dict(groups)


@dataclass(frozen=True)
class PrecommitSnapshot:
    """What the rules read about a batch of reports (the store reads it inside its fenced
    transaction): `checkpoints` each reported checkpoint (None: it does not exist), with
    the reporting tasks' rows at least; `executor_generations` the current generation of
    each registered executor named; `tasks` each reported task; `resume_offsets` where each
    reported checkpoint starts each partition that has a known start (where the previous
    checkpoint ended; partitions of a pipeline without a complete checkpoint yet start
    where `starting_offsets` resolves, and are absent); `sink_servers` each pipeline's
    sink cluster; `checkpoint_states` the state of each reporting pipeline's checkpoints
    not COMMITTED (the rules do not read it: completing what the reports make ready walks
    it, in the same transaction, so the store reads it once a batch)."""

    checkpoints: Mapping[CheckpointKey, CheckpointRecord | None]
    executor_generations: Mapping[ExecutorId, Generation]
    tasks: Mapping[TaskId, TaskRecord]
    resume_offsets: Mapping[CheckpointKey, Mapping[TopicPartition, int]]
    sink_servers: Mapping[PipelineId, str]
    checkpoint_states: Mapping[PipelineId, Mapping[CheckpointId, CheckpointState]]


def accept_precommits(
    precommits: Sequence[Precommit], snapshot: PrecommitSnapshot
) -> dict[CheckpointKey, tuple[Precommit, ...]]:
    """Check every report against `snapshot`; return the new ones to store, per
    checkpoint (all or nothing). Raises NotFound, StaleGeneration, FailedPrecondition or
    InvalidArgument for the first refused report (checkpoints in order); retried reports
    are left out."""
    accepted: dict[CheckpointKey, tuple[Precommit, ...]] = {}
    for key, group in sorted(group_by_checkpoint(precommits).items()):
        checkpoint = _existing(snapshot.checkpoints, key)
        triggers = {t.task_id: t for t in checkpoint.tasks}
        fresh: dict[TaskId, Precommit] = {}
        for p in group:
            if _is_new(p, checkpoint, triggers, fresh, snapshot):
                fresh[p.task_id] = p
        if fresh:
            accepted[key] = tuple(fresh.values())
    return accepted


def _existing(
    checkpoints: Mapping[CheckpointKey, CheckpointRecord | None], key: CheckpointKey
) -> CheckpointRecord:
    checkpoint = checkpoints.get(key)
    if checkpoint is None:
        pipeline_id, checkpoint_id = key
        raise NotFound(
            f"pipeline {pipeline_id!r} has no checkpoint {checkpoint_id}",
            resource_type="checkpoint",
            resource_name=f"{pipeline_id}/{checkpoint_id}",
        )
    return checkpoint


def _is_new(
    p: Precommit,
    checkpoint: CheckpointRecord,
    triggers: Mapping[TaskId, TaskTrigger],
    fresh: Mapping[TaskId, Precommit],
    snapshot: PrecommitSnapshot,
) -> bool:
    """Check one report of checkpoint N (`triggers`: N's, by task): who reports (the task
    is in N, its executor's session and its assignment are current), then what. False for
    a retried one (N's record or `fresh` has the task's pre-commit already): nothing to
    store."""
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
        current=snapshot.executor_generations.get(p.executor_id),
    )
    check_generation(
        what=f"task {p.task_id} in checkpoint {checkpoint.checkpoint_id}",
        reported=p.task_generation,
        current=trigger.task_generation,
    )
    task = snapshot.tasks.get(p.task_id)
    if task is None:
        raise NotFound(
            f"no task {p.task_id!r}; the pipeline may have been deleted or re-split",
            resource_type="task",
            resource_name=p.task_id,
        )
    # The task must still be that executor's, in that generation: a zombie whose task
    # moved since the trigger is refused, not merely told N aborted.
    check_task_owner(task, p.executor_id, p.task_generation)
    if p.task_id in checkpoint.precommitted or p.task_id in fresh:
        return False
    _check_still_triggered(checkpoint)
    check_precommit_content(
        p,
        allotted=trigger.transactional_id,
        partitions=task.partitions,
        resume_offsets=snapshot.resume_offsets.get((p.pipeline_id, p.checkpoint_id), {}),
        sink_servers=snapshot.sink_servers.get(p.pipeline_id, ""),
    )
    return True


def sort_precommits(
    precommits: Sequence[Precommit], snapshot: PrecommitSnapshot
) -> tuple[dict[CheckpointKey, tuple[Precommit, ...]], dict[int, PrecommitRefusal]]:
    """Check each report on its own, by `accept_precommits`' rules and against the same
    snapshot: the new reports to store, per checkpoint, and the error of
    each refused report by its index. One refused report leaves the others accepted (an
    executor's batch mixes tasks and checkpoints; each report gets its own answer). A
    report repeated within the batch is stored once."""
    accepted: dict[CheckpointKey, dict[TaskId, Precommit]] = defaultdict(dict)
    refused: dict[int, PrecommitRefusal] = {}
    triggers: dict[CheckpointKey, dict[TaskId, TaskTrigger]] = {}  # once per checkpoint
    for index, p in enumerate(precommits):
        key = (p.pipeline_id, p.checkpoint_id)
        try:
            checkpoint = _existing(snapshot.checkpoints, key)
            if key not in triggers:
                triggers[key] = {t.task_id: t for t in checkpoint.tasks}
            # Each report on its own (no `fresh`): a repeat within the batch is checked too.
            new = _is_new(p, checkpoint, triggers[key], {}, snapshot)
        except (NotFound, FailedPrecondition, InvalidArgument) as exc:
            refused[index] = exc
            continue
        if new:
            accepted[key].setdefault(p.task_id, p)
    return {key: tuple(by_task.values()) for key, by_task in accepted.items()}, refused


def _check_still_triggered(checkpoint: CheckpointRecord) -> None:
    """A first report of a task needs N still open."""
    if checkpoint.state is not CheckpointState.TRIGGERED:
        raise FailedPrecondition(
            f"checkpoint {checkpoint.checkpoint_id} of {checkpoint.pipeline_id!r} is "
            f"{checkpoint.state.value}; abort this pre-commit's transactions",
            reason="CHECKPOINT_NOT_TRIGGERED",
        )


def check_precommit_content(
    p: Precommit,
    *,
    allotted: str,
    partitions: Sequence[TopicPartition],
    resume_offsets: Mapping[TopicPartition, int],
    sink_servers: str,
) -> None:
    """Check that a report's ranges and handles are what its trigger asked (see the module
    docstring); InvalidArgument (reason `PRECOMMIT_MISMATCH`) names every field that is not,
    by its ReportPrecommitRequest path."""
    violations = _range_violations(p, partitions, resume_offsets)
    for i, handle in enumerate(p.handles):
        field = f"sink_handles[{i}].kafka"
        # Spark write partition k of the task writes with "<allotted>-<k>".
        if not belongs_to_slot(handle.transactional_id, allotted):
            violations.append(
                FieldViolation(
                    f"{field}.transactional_id",
                    f"{handle.transactional_id!r} is not the id checkpoint "
                    f"{p.checkpoint_id} allotted to task {p.task_id} ({allotted!r}, or "
                    f"{allotted!r}-<write partition>)",
                )
            )
        if handle.bootstrap_servers and handle.bootstrap_servers != sink_servers:
            violations.append(
                FieldViolation(
                    f"{field}.bootstrap_servers",
                    f"{handle.bootstrap_servers!r} is not the pipeline's sink cluster "
                    f"{sink_servers!r}; leave it empty or name that cluster",
                )
            )
    if violations:
        raise InvalidArgument(
            f"pre-commit of task {p.task_id} does not match checkpoint {p.checkpoint_id}'s "
            "trigger: " + "; ".join(f"{v.field}: {v.description}" for v in violations),
            violations=violations,
            reason="PRECOMMIT_MISMATCH",
        )


def _range_violations(
    p: Precommit,
    partitions: Sequence[TopicPartition],
    resume_offsets: Mapping[TopicPartition, int],
) -> list[FieldViolation]:
    own = set(partitions)
    seen: set[TopicPartition] = set()
    violations: list[FieldViolation] = []
    for i, r in enumerate(p.offsets):
        tp = r.topic_partition
        resumes = resume_offsets.get(tp)
        if tp not in own:
            mine = ", ".join(str(o) for o in sorted(own)) or "none"
            violations.append(
                FieldViolation(
                    f"source_ranges[{i}]",
                    f"{tp} is not a partition of task {p.task_id} (its partitions: {mine})",
                )
            )
        elif tp in seen:
            violations.append(FieldViolation(f"source_ranges[{i}]", f"{tp} is reported twice"))
        elif resumes is not None and r.start_offset != resumes:
            violations.append(
                FieldViolation(
                    f"source_ranges[{i}].start_offset",
                    f"is {r.start_offset}, but {tp} resumes at {resumes} (where "
                    "the previous checkpoint ended, as the trigger said)",
                )
            )
        seen.add(tp)
    return violations
