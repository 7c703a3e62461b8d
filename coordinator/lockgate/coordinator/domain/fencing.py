"""The fencing tokens a report or a membership call may present stale, and the error that
says which one was stale and what it is now.

The herder decides which token was stale (it reads the current values); the api turns the
error into FAILED_PRECONDITION with a `FencingFailure` detail, so an executor learns what to
do (register again, drop the task, or abort the handles of an old leader's trigger).
"""

from __future__ import annotations

import enum

from lockgate.coordinator.domain.errors import StaleGeneration


class FencingToken(enum.Enum):
    """Which fencing token a caller presented."""

    LEADER_EPOCH = "leader_epoch"
    EXECUTOR_GENERATION = "executor_generation"
    TASK_GENERATION = "task_generation"


class StaleToken(StaleGeneration):
    """A call carried an older fencing token than the current one: nothing was recorded."""

    default_reason = "STALE_FENCING_TOKEN"

    def __init__(
        self, message: str, *, token: FencingToken, subject: str, presented: int, current: int
    ) -> None:
        super().__init__(message)
        self.token = token
        self.subject = subject
        self.presented = presented
        self.current = current
