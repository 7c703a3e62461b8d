"""The executor's client of the coordinator's gRPC API (``lockgate.v1.CoordinatorService``).

:class:`GrpcCoordinatorClient` implements the runtime's
:class:`~lockgate.executor.runtime.coordinator.CoordinatorClient` over a stub: it converts
runtime values to requests and answers back (:mod:`lockgate.executor.convert`), and turns a
failed call into a :class:`~lockgate.executor.runtime.coordinator.CoordinatorCallError`
classified by what the runtime does about it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import grpc

from lockgate.common.grpc_client import error_details
from lockgate.common.model.ids import Generation
from lockgate.executor import convert
from lockgate.executor.runtime.coordinator import CallFailure, CoordinatorCallError
from lockgate.executor.runtime.tasks import TaskView
from lockgate.executor.runtime.values import (
    CheckpointFailureReport,
    ExecutorSettings,
    LeaderStamp,
    MembershipReply,
    PrecommitAnswer,
    PrecommitReport,
    TaskFailureReport,
)
from lockgate.v1 import coordinator_pb2, coordinator_pb2_grpc

_T = TypeVar("_T")
_LOG = logging.getLogger(__name__)

_FAILURES: Mapping[grpc.StatusCode, CallFailure] = {
    grpc.StatusCode.UNAVAILABLE: CallFailure.UNREACHABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED: CallFailure.UNREACHABLE,
    # The leader's 256 concurrent calls were taken: refused before anything ran (a
    # pre-commit report refused so used to be given up, and its checkpoint timed out).
    grpc.StatusCode.RESOURCE_EXHAUSTED: CallFailure.UNREACHABLE,
    grpc.StatusCode.NOT_FOUND: CallFailure.SESSION_GONE,
    grpc.StatusCode.FAILED_PRECONDITION: CallFailure.SESSION_GONE,
}


def _call(call: Callable[[], _T]) -> _T:
    try:
        return call()
    except grpc.RpcError as exc:
        details = error_details(exc)
        raise CoordinatorCallError(
            failure=_FAILURES.get(details.code, CallFailure.REFUSED),
            code=details.code.name,
            message=details.message,
        ) from exc


def _precommit_result(
    result: coordinator_pb2.ReportPrecommitResult,
) -> PrecommitAnswer | CoordinatorCallError:
    """One report's answer of a ReportPrecommits call, a refusal as the error
    ReportPrecommit would have raised."""
    if not result.HasField("refusal"):
        return convert.precommit_result_from_proto(result)
    code = _STATUS_CODES.get(result.refusal.code, grpc.StatusCode.UNKNOWN)
    return CoordinatorCallError(
        failure=_FAILURES.get(code, CallFailure.REFUSED),
        code=code.name,
        message=result.refusal.message,
    )


_STATUS_CODES: Mapping[int, grpc.StatusCode] = {c.value[0]: c for c in grpc.StatusCode}


class GrpcCoordinatorClient:
    """The coordinator's API over a ``CoordinatorServiceStub``, in runtime values."""

    def __init__(self, stub: coordinator_pb2_grpc.CoordinatorServiceStub) -> None:
        self._stub = stub

    def register(self, settings: ExecutorSettings, *, timeout_s: float) -> MembershipReply:
        """RegisterExecutor: a new session (and executor generation) for this process."""
        request = coordinator_pb2.RegisterExecutorRequest(
            request_id=str(uuid.uuid4()),
            executor_id=settings.executor_id,
            address=settings.advertised_address,
            spark_master=settings.spark_master,
            max_tasks=settings.max_tasks,
            version=settings.version,
        )
        response: coordinator_pb2.RegisterExecutorResponse = _call(
            lambda: self._stub.RegisterExecutor(request, timeout=timeout_s)
        )
        return convert.register_reply_from_proto(response)

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
        request = coordinator_pb2.HeartbeatRequest(
            executor_id=executor_id,
            executor_generation=executor_generation,
            task_statuses=[convert.task_view_to_proto(v) for v in statuses],
            highest_leader_epoch_seen=convert.leader_to_proto(highest_leader_seen),
            known_assignment_version=known_assignment_version,
        )
        response: coordinator_pb2.HeartbeatResponse = _call(
            lambda: self._stub.Heartbeat(request, timeout=timeout_s)
        )
        return convert.heartbeat_reply_from_proto(response)

    def deregister(
        self, *, executor_id: str, executor_generation: Generation, timeout_s: float
    ) -> None:
        """DeregisterExecutor: leave the cluster cleanly."""
        request = coordinator_pb2.DeregisterExecutorRequest(
            request_id=str(uuid.uuid4()),
            executor_id=executor_id,
            executor_generation=executor_generation,
        )
        _call(lambda: self._stub.DeregisterExecutor(request, timeout=timeout_s))

    def report_precommit(self, report: PrecommitReport, *, timeout_s: float) -> PrecommitAnswer:
        """ReportPrecommit of one task's checkpoint N."""
        request = convert.precommit_report_to_proto(report)
        response: coordinator_pb2.ReportPrecommitResponse = _call(
            lambda: self._stub.ReportPrecommit(request, timeout=timeout_s)
        )
        return convert.precommit_answer_from_proto(response)

    def report_precommits(
        self, reports: Sequence[PrecommitReport], *, timeout_s: float
    ) -> list[PrecommitAnswer | CoordinatorCallError]:
        """ReportPrecommits: several tasks' pre-commits in one call, answered per report.
        A coordinator without it (UNIMPLEMENTED: an older version during a rolling
        upgrade) gets one ReportPrecommit per report instead."""
        request = convert.precommit_batch_to_proto(reports)
        try:
            response: coordinator_pb2.ReportPrecommitsResponse = _call(
                lambda: self._stub.ReportPrecommits(request, timeout=timeout_s)
            )
        except CoordinatorCallError as exc:
            if exc.code != grpc.StatusCode.UNIMPLEMENTED.name:
                raise
            _LOG.warning(
                "the coordinator has no ReportPrecommits (an older version): sending %d"
                " ReportPrecommit calls instead",
                len(reports),
            )
            return [self._report_one(r, timeout_s=timeout_s) for r in reports]
        if len(response.results) != len(reports):
            raise CoordinatorCallError(
                failure=CallFailure.UNREACHABLE,
                code=grpc.StatusCode.INTERNAL.name,
                message=f"{len(response.results)} answers to {len(reports)} reports",
            )
        return [_precommit_result(r) for r in response.results]

    def _report_one(
        self, report: PrecommitReport, *, timeout_s: float
    ) -> PrecommitAnswer | CoordinatorCallError:
        try:
            return self.report_precommit(report, timeout_s=timeout_s)
        except CoordinatorCallError as exc:
            return exc

    def report_checkpoint_failure(
        self, report: CheckpointFailureReport, *, timeout_s: float
    ) -> None:
        """ReportCheckpointFailure of one task's checkpoint N."""
        request = convert.checkpoint_failure_report_to_proto(report)
        _call(lambda: self._stub.ReportCheckpointFailure(request, timeout=timeout_s))

    def report_task_failure(self, report: TaskFailureReport, *, timeout_s: float) -> None:
        """ReportTaskFailure of a task that failed outside a checkpoint."""
        request = convert.task_failure_report_to_proto(report)
        _call(lambda: self._stub.ReportTaskFailure(request, timeout=timeout_s))


__all__ = ["GrpcCoordinatorClient"]
