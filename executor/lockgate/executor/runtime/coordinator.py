"""What the runtime needs from the coordinator's leader, in plain values.

:class:`CoordinatorClient` is implemented over gRPC by
:class:`lockgate.executor.coordinator_client.GrpcCoordinatorClient`; a failed call raises
:class:`CoordinatorCallError`, classified by what the runtime does about it.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from lockgate.common.model.ids import Generation
from lockgate.executor.runtime.values import (
    CheckpointFailureReport,
    ExecutorSettings,
    LeaderStamp,
    MembershipReply,
    PrecommitAnswer,
    PrecommitReport,
    TaskFailureReport,
)

if TYPE_CHECKING:
    from lockgate.executor.runtime.tasks import TaskView


class CallFailure(enum.Enum):
    """What a failed call to the coordinator means for the caller."""

    #: No answer, or no leader right now (UNAVAILABLE, DEADLINE_EXCEEDED): retry.
    UNREACHABLE = "unreachable"
    #: This executor's session is gone (NOT_FOUND, FAILED_PRECONDITION).
    SESSION_GONE = "session_gone"
    #: Any other refusal (e.g. INVALID_ARGUMENT).
    REFUSED = "refused"


class CoordinatorCallError(Exception):
    """A call to the coordinator failed; ``code`` is the gRPC status code's name."""

    def __init__(self, *, failure: CallFailure, code: str, message: str) -> None:
        super().__init__(f"{code} {message}")
        self.failure = failure
        self.code = code
        self.message = message

    @property
    def retriable(self) -> bool:
        """True if the call may succeed when sent again (nothing answered it)."""
        return self.failure is CallFailure.UNREACHABLE


class CoordinatorClient(Protocol):
    """The coordinator's API as the executor's runtime calls it; every call may raise
    :class:`CoordinatorCallError`."""

    def register(self, settings: ExecutorSettings, *, timeout_s: float) -> MembershipReply:
        """RegisterExecutor: a new session (and executor generation) for this process."""

    def heartbeat(
        self,
        *,
        executor_id: str,
        executor_generation: Generation,
        statuses: Sequence[TaskView],
        highest_leader_seen: LeaderStamp,
        known_assignment_version: int,
        timeout_s: float,
    ) -> MembershipReply:
        """Heartbeat: keep the session, show the tasks, get the assignment back (in full
        unless it is still ``known_assignment_version``)."""

    def deregister(
        self, *, executor_id: str, executor_generation: Generation, timeout_s: float
    ) -> None:
        """DeregisterExecutor: leave the cluster cleanly."""

    def report_precommit(self, report: PrecommitReport, *, timeout_s: float) -> PrecommitAnswer:
        """ReportPrecommit of one task's checkpoint N."""

    def report_precommits(
        self, reports: Sequence[PrecommitReport], *, timeout_s: float
    ) -> list[PrecommitAnswer | CoordinatorCallError]:
        """ReportPrecommits: several tasks' pre-commits in one call, answered per report
        (its answer, or the error ReportPrecommit would have raised for it); raises only
        when the call itself failed (nothing was answered)."""

    def report_checkpoint_failure(
        self, report: CheckpointFailureReport, *, timeout_s: float
    ) -> None:
        """ReportCheckpointFailure of one task's checkpoint N."""

    def report_task_failure(self, report: TaskFailureReport, *, timeout_s: float) -> None:
        """ReportTaskFailure of a task that failed outside a checkpoint."""


__all__ = ["CallFailure", "CoordinatorCallError", "CoordinatorClient"]
