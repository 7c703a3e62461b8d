"""Why a checkpoint aborted, in the words `pipeline status` and `pipeline checkpoints` show.

A checkpoint aborts when a task fails to pre-commit it or when no pre-commit report comes
within the pipeline's `checkpoint.timeout_ms`. Either way the user needs the task that
held it up, the executor it ran on and why; a bare "timed out" leaves them guessing
(issue 16). These functions decide that from the checkpoint and the tasks' records alone:
the store writes `timeout_reason` as the abort reason of a timed-out checkpoint, and
`herder/pipelines.status` lists `missing_precommits` of the newest aborted one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lockgate.common.model.ids import CheckpointId, ExecutorId, Generation, TaskId
from lockgate.coordinator.domain.checkpoints import CheckpointRecord, TaskTrigger
from lockgate.coordinator.domain.pipelines import TaskRecord
from lockgate.coordinator.domain.states import CheckpointState, TaskState


@dataclass(frozen=True)
class MissingPrecommit:
    """A task of an aborted checkpoint that had not pre-committed it, and why."""

    checkpoint_id: CheckpointId
    task_id: TaskId
    task_generation: Generation
    executor_id: ExecutorId | None
    """The executor the checkpoint was triggered on; None if the task had none."""
    reason: str
    """Why, in words: failed with its error, or no report within the timeout."""

    def describe(self) -> str:
        """`task p/1 on e1: <reason>`, as status and abort reasons print it."""
        return f"task {self.task_id} on {self.executor_id or 'no executor'}: {self.reason}"


def _no_report(timeout_ms: int) -> str:
    return f"no pre-commit report within {timeout_ms} ms"


def _not_precommitted(checkpoint: CheckpointRecord) -> list[TaskTrigger]:
    return [t for t in checkpoint.tasks if t.task_id not in checkpoint.precommitted]


def timeout_reason(checkpoint: CheckpointRecord, *, timeout_ms: int) -> str:
    """The abort reason of a checkpoint that waited longer than `timeout_ms`: the timeout
    and each task that did not report its pre-commit, with its executor."""
    missing = "; ".join(
        f"task {t.task_id} on {t.executor_id or 'no executor'}: {_no_report(timeout_ms)}"
        for t in _not_precommitted(checkpoint)
    )
    reason = f"timed out after {timeout_ms} ms"
    return f"{reason} ({missing})" if missing else reason


def missing_precommits(
    checkpoint: CheckpointRecord, *, timeout_ms: int, tasks: Sequence[TaskRecord]
) -> tuple[MissingPrecommit, ...]:
    """The tasks of ABORTED `checkpoint` that had not pre-committed it, in task order, each
    with why: the task FAILED at the generation the checkpoint ran (its error), the
    checkpoint waited `timeout_ms` or longer (no report in time), or it aborted earlier
    for another reason while the task was still running. Empty unless ABORTED.
    """
    if checkpoint.state is not CheckpointState.ABORTED:
        return ()
    by_id = {t.task_id: t for t in tasks}
    waited = (checkpoint.aborted_at_ms or checkpoint.triggered_at_ms) - checkpoint.triggered_at_ms
    result: list[MissingPrecommit] = []
    for trigger in _not_precommitted(checkpoint):
        task = by_id.get(trigger.task_id)
        if (
            task is not None
            and task.state is TaskState.FAILED
            and task.generation == trigger.task_generation
            and task.last_error
        ):
            reason = f"failed: {task.last_error}"
        elif waited >= timeout_ms:
            reason = _no_report(timeout_ms)
        else:
            reason = f"still running when the checkpoint aborted after {waited} ms"
        result.append(
            MissingPrecommit(
                checkpoint_id=checkpoint.checkpoint_id,
                task_id=trigger.task_id,
                task_generation=trigger.task_generation,
                executor_id=trigger.executor_id,
                reason=reason,
            )
        )
    return tuple(result)
