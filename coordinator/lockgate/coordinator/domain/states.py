"""The coordinator's explicit state machines.

Each machine is an enum, a table of allowed transitions, and one function that applies a
transition and refuses every other. Staying in the same state is listed explicitly where
it is allowed, because reports and commits are retried and must be idempotent.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import TypeVar

from lockgate.coordinator.domain.errors import IllegalTransition

_S = TypeVar("_S", bound=enum.Enum)


class TargetState(enum.StrEnum):
    """What the user asked a pipeline to do (Kafka Connect's `TargetState`)."""

    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    STOPPED = "STOPPED"


class TaskState(enum.StrEnum):
    """What a task is observed doing (Kafka Connect's `AbstractStatus.State`)."""

    UNASSIGNED = "UNASSIGNED"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    STOPPED = "STOPPED"
    FAILED = "FAILED"
    RESTARTING = "RESTARTING"


class CheckpointState(enum.StrEnum):
    """Where checkpoint N of a pipeline is in the two-phase commit (DESIGN.md steps 1-5)."""

    TRIGGERED = "TRIGGERED"
    """Asked of the tasks; pre-commits are arriving. May still abort."""
    COMPLETE = "COMPLETE"
    """Every task pre-committed and the leader wrote the commit point. Never aborts."""
    COMMITTED = "COMMITTED"
    """Every sink handle of N acknowledged its commit. Final."""
    ABORTED = "ABORTED"
    """Failed, timed out, or an earlier checkpoint aborted (or lost its data). Final."""
    DATA_LOST = "DATA_LOST"
    """COMPLETE, but the broker aborted some of its transactions before they were
    committed (`transaction.timeout.ms` passed), or an earlier checkpoint's: those records
    never reach the sink. Final; its pipeline triggers nothing until an operator moves
    past it (`domain/data_loss.py`)."""


class LeaseRole(enum.StrEnum):
    """A coordinator replica's role, as its last lease attempt left it."""

    FOLLOWER = "FOLLOWER"
    LEADER = "LEADER"


TARGET_STATE_TRANSITIONS: Mapping[TargetState, frozenset[TargetState]] = {
    # Kafka Connect lets the user move between any two target states; so do we.
    TargetState.RUNNING: frozenset(TargetState),
    TargetState.PAUSED: frozenset(TargetState),
    TargetState.STOPPED: frozenset(TargetState),
}

TASK_STATE_TRANSITIONS: Mapping[TaskState, frozenset[TaskState]] = {
    TaskState.UNASSIGNED: frozenset(
        {
            TaskState.UNASSIGNED,
            TaskState.RUNNING,
            TaskState.PAUSED,
            TaskState.STOPPED,
            TaskState.FAILED,
        }
    ),
    TaskState.RUNNING: frozenset(
        {
            TaskState.RUNNING,
            TaskState.PAUSED,
            TaskState.STOPPED,
            TaskState.FAILED,
            TaskState.RESTARTING,
            TaskState.UNASSIGNED,
        }
    ),
    TaskState.PAUSED: frozenset(
        {
            TaskState.PAUSED,
            TaskState.RUNNING,
            TaskState.STOPPED,
            TaskState.FAILED,
            TaskState.RESTARTING,
            TaskState.UNASSIGNED,
        }
    ),
    TaskState.STOPPED: frozenset(
        {
            TaskState.STOPPED,
            TaskState.RUNNING,
            TaskState.PAUSED,
            TaskState.RESTARTING,
            TaskState.UNASSIGNED,
        }
    ),
    # A failed task only runs again through an explicit restart (or a new assignment):
    # a late RUNNING report from the executor that failed it must not hide the failure.
    TaskState.FAILED: frozenset(
        {TaskState.FAILED, TaskState.RESTARTING, TaskState.STOPPED, TaskState.UNASSIGNED}
    ),
    TaskState.RESTARTING: frozenset(
        {
            TaskState.RESTARTING,
            TaskState.RUNNING,
            TaskState.PAUSED,
            TaskState.STOPPED,
            TaskState.FAILED,
            TaskState.UNASSIGNED,
        }
    ),
}

CHECKPOINT_TRANSITIONS: Mapping[CheckpointState, frozenset[CheckpointState]] = {
    CheckpointState.TRIGGERED: frozenset({CheckpointState.COMPLETE, CheckpointState.ABORTED}),
    # COMPLETE is the commit point: it never aborts; re-marking it is a retried write. It
    # goes DATA_LOST when the broker aborted its transactions first, or when an earlier
    # checkpoint of its pipeline did (committing it would leave a gap before its records).
    CheckpointState.COMPLETE: frozenset(
        {CheckpointState.COMPLETE, CheckpointState.COMMITTED, CheckpointState.DATA_LOST}
    ),
    # Commit is retried until acked, possibly by a new leader: repeating it is a no-op.
    CheckpointState.COMMITTED: frozenset({CheckpointState.COMMITTED}),
    CheckpointState.ABORTED: frozenset({CheckpointState.ABORTED}),
    CheckpointState.DATA_LOST: frozenset({CheckpointState.DATA_LOST}),
}

LEASE_ROLE_TRANSITIONS: Mapping[LeaseRole, frozenset[LeaseRole]] = {
    LeaseRole.FOLLOWER: frozenset({LeaseRole.FOLLOWER, LeaseRole.LEADER}),
    LeaseRole.LEADER: frozenset({LeaseRole.LEADER, LeaseRole.FOLLOWER}),
}


def _apply(machine: str, table: Mapping[_S, frozenset[_S]], current: _S, target: _S) -> _S:
    if target not in table[current]:
        allowed = ", ".join(sorted(str(s.value) for s in table[current])) or "none"
        raise IllegalTransition(
            f"{machine} cannot go from {current.value} to {target.value}; "
            f"allowed from {current.value}: {allowed}"
        )
    return target


def transition_target_state(current: TargetState, target: TargetState) -> TargetState:
    """Apply a user's pause/resume/stop to a pipeline's target state."""
    return _apply("pipeline target state", TARGET_STATE_TRANSITIONS, current, target)


def transition_task_state(current: TaskState, target: TaskState) -> TaskState:
    """Apply an observed task state; IllegalTransition if the table forbids it."""
    return _apply("task state", TASK_STATE_TRANSITIONS, current, target)


def transition_checkpoint(current: CheckpointState, target: CheckpointState) -> CheckpointState:
    """Apply a checkpoint transition; IllegalTransition if the table forbids it.

    In particular COMPLETE -> ABORTED is refused: once the commit point is written the
    checkpoint's transactions must be committed, whatever fails afterwards (or, if the
    broker lost them, the checkpoint is DATA_LOST, never ABORTED).
    """
    return _apply("checkpoint", CHECKPOINT_TRANSITIONS, current, target)


def transition_lease_role(current: LeaseRole, target: LeaseRole) -> LeaseRole:
    """Apply the outcome of a lease attempt to a replica's role."""
    return _apply("lease role", LEASE_ROLE_TRANSITIONS, current, target)
