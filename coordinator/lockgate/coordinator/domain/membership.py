"""Executor membership: sessions and the generation check that refuses zombies.

Each `register` of an executor id starts a new session and grows its generation by one;
every later report (heartbeat, task status, pre-commit, commit ack) carries the generation
it registered with. A report with an older generation comes from a process that the
cluster already replaced (a zombie: paused, partitioned, or a previous incarnation) and is
refused, so it cannot overwrite what its successor reported. A task's reports are
checked the same way against its assignment (`check_task_owner`).

A heartbeat carries the executor's full assignment only when it changed since the
version the executor holds (`assignment_version`): a heartbeat costs the executor's own
tasks, not the cluster's, and repeats no spec.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from lockgate.common.model.ids import ExecutorId, Generation, TaskId
from lockgate.coordinator.domain.errors import StaleGeneration
from lockgate.coordinator.domain.pipelines import TaskRecord
from lockgate.coordinator.domain.states import TargetState


@dataclass(frozen=True)
class ExecutorRecord:
    """An executor as the store knows it; times are the database's clock."""

    executor_id: ExecutorId
    address: str
    generation: Generation
    registered_at_ms: int
    last_heartbeat_ms: int


def check_generation(*, what: str, reported: Generation, current: Generation) -> None:
    """Refuse a report whose generation is not the current one (StaleGeneration)."""
    if reported != current:
        raise StaleGeneration(
            f"{what} reported generation {reported} but the current generation is {current}: "
            "this process was replaced; register again to get a new generation"
        )


def check_executor_session(
    executor_id: ExecutorId, *, reported: Generation, current: Generation | None
) -> None:
    """Refuse a report of an executor whose session is gone (`current` None: it is not
    registered) or was replaced (StaleGeneration)."""
    if current is None:
        raise StaleGeneration(
            f"executor {executor_id!r} is not registered (its session expired or it "
            "deregistered); register again"
        )
    check_generation(what=f"executor {executor_id}", reported=reported, current=current)


def check_task_owner(
    task: TaskRecord, executor_id: ExecutorId, task_generation: Generation
) -> None:
    """Refuse a report about a task that is no longer that executor's in that generation:
    a zombie whose task moved is told so (StaleGeneration), whatever it reports."""
    if task.executor_id != executor_id:
        raise StaleGeneration(
            f"task {task.task_id} is assigned to {task.executor_id or 'no executor'}, "
            f"not {executor_id}; stop running it"
        )
    check_generation(what=f"task {task.task_id}", reported=task_generation, current=task.generation)


@dataclass(frozen=True)
class AssignedTask:
    """A task of one executor with what of its pipeline an assignment carries."""

    task: TaskRecord
    config_version: int
    target_state: TargetState


#: What makes an executor start a task anew: its id, generation, config version and target
#: state. The assignment's version is a fingerprint of these keys; the leader keeps what it
#: sent each executor by them (`herder/membership.py`, `SentAssignments`).
AssignmentKey = tuple[TaskId, Generation, int, TargetState]


def assignment_key(item: AssignedTask) -> AssignmentKey:
    """The key of one task of an assignment."""
    return (item.task.task_id, item.task.generation, item.config_version, item.target_state)


def assignment_version(tasks: Iterable[AssignedTask]) -> int:
    """The version of an executor's assignment: a fingerprint of each task's id,
    generation, config version and target state, never 0 (0 is "none held").

    A fingerprint, not a counter, so every leader computes the same one from SQL and a new
    leader resends nothing. It leaves out the restore state on purpose: an executor reads
    it only when it starts a task, and it starts one only at a new generation (which
    changes the version). A config change gives every task a new generation too.
    """
    digest = hashlib.blake2b(digest_size=8)
    for task_id, generation, config_version, target_state in sorted(
        map(assignment_key, tasks), key=lambda key: key[0]
    ):
        line = f"{task_id}\x00{generation}\x00{config_version}\x00{target_state.value}\n"
        digest.update(line.encode())
    return int.from_bytes(digest.digest(), "big") >> 1 or 1
