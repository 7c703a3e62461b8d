"""gRPC ``ExecutorService``: validate, fence, delegate to the runtime, convert back.

Fencing happens here, before anything reaches the runtime: the leader epoch first (refused
if lower than the highest seen), then the executor registration the call names; only then
does a control call's higher epoch become the new highest. A read (GetExecutorStatus) never
raises it (``fencing.py``). A refused call is logged with a stable line (``refused
leader_epoch=3 highest_seen=4 rpc=CommitCheckpoint``) and answered ``FAILED_PRECONDITION``
with a ``lockgate.v1.FencingFailure`` in the status details, next to the usual ``ErrorInfo``
and ``PreconditionFailure`` (``StaleTokenError``, mapped by the shared interceptor as every
service's is). Other domain errors propagate to the error-mapping interceptor of
``lockgate.common.grpc_server`` (``HandleLostError`` is a ``DataLoss``: ``DATA_LOSS``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

import grpc
from google.protobuf import timestamp_pb2
from opentelemetry import context as otel_context
from opentelemetry import propagate

from lockgate.common.errors import (
    FailedPrecondition,
    InvalidArgument,
    StaleTokenError,
    Unavailable,
)
from lockgate.common.model.handles import TransactionHandle
from lockgate.common.model.ids import Generation, LeaderEpoch
from lockgate.common.model.proto import sink_properties_from_proto
from lockgate.executor.committer import HandleLostError
from lockgate.executor.convert import (
    VERDICT_TO_PROTO,
    handles_from_proto,
    leader_from_proto,
    task_ref_to_proto,
    task_view_to_proto,
)
from lockgate.executor.fencing import check_executor_generation
from lockgate.executor.runtime.values import TaskRef, TriggerTask
from lockgate.executor.worker import Worker
from lockgate.v1 import common_pb2, executor_pb2, executor_pb2_grpc

_LOG = logging.getLogger(__name__)

_T = TypeVar("_T")

#: How long AbortCheckpoint waits for a running batch of the checkpoint when the call has
#: no deadline.
_ABORT_WAIT_DEFAULT_S = 30.0


#: The most triggers one TriggerCheckpoints call may carry (the leader sends fewer).
MAX_TRIGGERS_PER_CALL = 1024


def _required(value: str, field: str, what: str) -> str:
    if not value:
        raise InvalidArgument.for_field(field, f"is required: {what}")
    return value


class ExecutorServicer(executor_pb2_grpc.ExecutorServiceServicer):
    """Serves ``lockgate.v1.ExecutorService`` over a :class:`Worker`."""

    def __init__(
        self,
        runtime: Worker,
        *,
        coordinator_addresses: tuple[str, ...] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._runtime = runtime
        self._coordinator_addresses = coordinator_addresses
        self._clock = clock
        self._started = clock()
        self._start_time = timestamp_pb2.Timestamp()
        self._start_time.GetCurrentTime()

    # -- fencing -------------------------------------------------------------------------

    def _fenced(
        self,
        rpc: str,
        leader_epoch: common_pb2.LeaderEpoch,
        check: Callable[[], _T],
        *,
        control: bool = True,
    ) -> _T:
        """Check the leader epoch, then run ``check``; refuse stale tokens with details.

        Only a ``control`` call (Trigger/Commit/Abort) needs an epoch, and only one whose
        ``check`` passed adopts a higher epoch (``fencing.py``); a read is checked against
        the highest epoch seen and records nothing."""
        presented = LeaderEpoch(leader_epoch.epoch)
        fence = self._runtime.fence
        try:
            if presented > 0:
                fence.check(presented, rpc=rpc)
            elif control:
                raise InvalidArgument.for_field(
                    "leader_epoch.epoch",
                    "is required (>= 1): the calling leader's fencing token",
                )
            result = check()
            if presented > 0 and control:
                fence.observe(presented, leader_id=leader_epoch.leader_id, rpc=rpc)
            return result
        except StaleTokenError as error:
            _LOG.warning(error.log_line())
            raise  # the error interceptor adds its FencingFailure detail

    def _check_registration(self, executor_id: str, executor_generation: int, rpc: str) -> None:
        own_id = self._runtime.settings.executor_id
        if executor_id != own_id:
            raise FailedPrecondition(
                f"{rpc} is for executor {executor_id!r} but this is executor {own_id!r};"
                " the address was reused: look the executor up again",
                reason="WRONG_EXECUTOR",
            )
        registration = self._runtime.registration
        if registration is None:
            raise Unavailable(
                f"executor {own_id} is not registered with the coordinator yet (starting,"
                " or its session was lost); retry",
                retry_after_seconds=1.0,
            )
        check_executor_generation(
            executor_id=own_id,
            current=registration.executor_generation,
            presented=Generation(executor_generation),
            rpc=rpc,
        )

    def _fenced_control(
        self,
        rpc: str,
        request: executor_pb2.TriggerCheckpointRequest
        | executor_pb2.TriggerCheckpointsRequest
        | executor_pb2.CommitCheckpointRequest
        | executor_pb2.AbortCheckpointRequest
        | executor_pb2.NotifyAssignmentRequest,
    ) -> None:
        """Fence a control call: its leader epoch, then the registration it names."""
        self._fenced(
            rpc,
            request.leader_epoch,
            lambda: self._check_registration(request.executor_id, request.executor_generation, rpc),
        )

    # -- RPCs ----------------------------------------------------------------------------

    def TriggerCheckpoint(
        self, request: executor_pb2.TriggerCheckpointRequest, context: grpc.ServicerContext
    ) -> executor_pb2.TriggerCheckpointResponse:
        """Start the pre-commit of checkpoint N on the listed tasks (step 1)."""
        self._fenced_control("TriggerCheckpoint", request)
        return self._trigger(
            request,
            _trigger_tasks(request, field=""),
            leader=request.leader_epoch,
            trace_context=None,
        )

    def TriggerCheckpoints(
        self, request: executor_pb2.TriggerCheckpointsRequest, context: grpc.ServicerContext
    ) -> executor_pb2.TriggerCheckpointsResponse:
        """TriggerCheckpoint for several pipelines in one call: fenced once, checked whole,
        then each trigger run in request order, in its own trace (`trace_context`)."""
        self._fenced_control("TriggerCheckpoints", request)
        if not request.triggers:
            raise InvalidArgument.for_field("triggers", "must list at least one trigger")
        if len(request.triggers) > MAX_TRIGGERS_PER_CALL:
            raise InvalidArgument.for_field(
                "triggers",
                f"lists {len(request.triggers)} triggers, over the limit of"
                f" {MAX_TRIGGERS_PER_CALL}: split them over several calls",
            )
        parsed = []
        for index, trigger in enumerate(request.triggers):
            field = f"triggers[{index}]."
            _unset_or_same(trigger, request, field)
            parsed.append(_trigger_tasks(trigger, field=field))
        return executor_pb2.TriggerCheckpointsResponse(
            responses=[
                self._trigger(
                    trigger,
                    tasks,
                    leader=request.leader_epoch,
                    trace_context=propagate.extract(dict(trigger.trace_context))
                    if trigger.trace_context
                    else None,
                )
                for trigger, tasks in zip(request.triggers, parsed, strict=True)
            ]
        )

    def _trigger(
        self,
        request: executor_pb2.TriggerCheckpointRequest,
        tasks: list[TriggerTask],
        *,
        leader: common_pb2.LeaderEpoch,
        trace_context: otel_context.Context | None,
    ) -> executor_pb2.TriggerCheckpointResponse:
        """Run one trigger whose call was fenced with `leader`; `trace_context`: the
        leader's trigger step to continue (None: the call's own)."""
        results = self._runtime.trigger_checkpoint(
            pipeline_name=request.pipeline_name,
            checkpoint_id=request.checkpoint_id,
            config_version=request.config_version,
            leader_epoch=leader_from_proto(leader),
            tasks=tasks,
            timeout_ms=request.timeout_ms,
            trace_context=trace_context,
        )
        return executor_pb2.TriggerCheckpointResponse(
            results=[
                executor_pb2.TaskTriggerResult(
                    task_id=task_ref_to_proto(r.task),
                    outcome=VERDICT_TO_PROTO[r.verdict],
                    current_task_generation=r.current_generation,
                    reason=r.reason,
                )
                for r in results
            ]
        )

    def _checkpoint_handles(
        self,
        rpc: str,
        request: executor_pb2.CommitCheckpointRequest | executor_pb2.AbortCheckpointRequest,
    ) -> tuple[str, tuple[TransactionHandle, ...]]:
        """Fence a commit or abort call, then its pipeline and handles; InvalidArgument
        names a missing pipeline, a checkpoint id below 1 or an unreadable handle."""
        self._fenced_control(rpc, request)
        pipeline = _required(request.pipeline_name, "pipeline_name", "the pipeline's name")
        if request.checkpoint_id <= 0:
            raise InvalidArgument.for_field("checkpoint_id", "must be >= 1")
        return pipeline, handles_from_proto(request.handles, field_name="handles")

    def CommitCheckpoint(
        self, request: executor_pb2.CommitCheckpointRequest, context: grpc.ServicerContext
    ) -> executor_pb2.CommitCheckpointResponse:
        """Commit a COMPLETE checkpoint's handles (step 4); idempotent, the reply is the ack."""
        rpc = "CommitCheckpoint"
        pipeline, handles = self._checkpoint_handles(rpc, request)
        started = self._clock()
        try:
            count = self._runtime.commit_handles(
                pipeline_name=pipeline,
                checkpoint_id=request.checkpoint_id,
                handles=handles,
                sink_properties=sink_properties_from_proto(request.sink_properties),
            )
        except HandleLostError as exc:
            _LOG.error("%s: %s", rpc, exc.message)
            raise  # DATA_LOSS, through the error interceptor
        return executor_pb2.CommitCheckpointResponse(
            handles_committed=count,
            commit_duration_ms=int((self._clock() - started) * 1000),
        )

    def AbortCheckpoint(
        self, request: executor_pb2.AbortCheckpointRequest, context: grpc.ServicerContext
    ) -> executor_pb2.AbortCheckpointResponse:
        """Abort a checkpoint's handles and cancel this executor's pre-commit of it."""
        rpc = "AbortCheckpoint"
        pipeline, handles = self._checkpoint_handles(rpc, request)
        started = self._clock()
        remaining = context.time_remaining()
        count = self._runtime.abort_checkpoint(
            pipeline_name=pipeline,
            checkpoint_id=request.checkpoint_id,
            handles=handles,
            reason=request.reason,
            sink_properties=sink_properties_from_proto(request.sink_properties),
            # Answer before the caller's deadline, leaving time for the handles' aborts.
            timeout_s=_ABORT_WAIT_DEFAULT_S
            if remaining is None
            else max(0.0, min(_ABORT_WAIT_DEFAULT_S, remaining / 2)),
        )
        return executor_pb2.AbortCheckpointResponse(
            handles_aborted=count,
            abort_duration_ms=int((self._clock() - started) * 1000),
        )

    def NotifyAssignment(
        self, request: executor_pb2.NotifyAssignmentRequest, context: grpc.ServicerContext
    ) -> executor_pb2.NotifyAssignmentResponse:
        """The leader changed this executor's assignment: heartbeat now to read it."""
        self._fenced_control("NotifyAssignment", request)
        self._runtime.assignment_changed()
        return executor_pb2.NotifyAssignmentResponse()

    def GetExecutorStatus(
        self, request: executor_pb2.GetExecutorStatusRequest, context: grpc.ServicerContext
    ) -> executor_pb2.GetExecutorStatusResponse:
        """Identity, highest leader epoch seen and tasks of this executor."""
        self._fenced(
            "GetExecutorStatus",
            request.leader_epoch,
            lambda: None,
            control=False,
        )
        settings = self._runtime.settings
        registration = self._runtime.registration
        highest, leader_id = self._runtime.fence.highest_seen
        return executor_pb2.GetExecutorStatusResponse(
            executor_id=settings.executor_id,
            executor_generation=registration.executor_generation if registration else 0,
            session_id=registration.session_id if registration else "",
            highest_leader_epoch_seen=common_pb2.LeaderEpoch(epoch=highest, leader_id=leader_id),
            tasks=[task_view_to_proto(v) for v in self._runtime.statuses()],
            spark_master=settings.spark_master,
            start_time=self._start_time,
            uptime_ms=int((self._clock() - self._started) * 1000),
            version=settings.version,
            coordinator_addresses=list(self._coordinator_addresses),
        )


__all__ = ["ExecutorServicer"]


def _trigger_tasks(
    request: executor_pb2.TriggerCheckpointRequest, *, field: str
) -> list[TriggerTask]:
    """A trigger's tasks, checked; `field`: the prefix of its fields' names in errors."""
    pipeline = _required(request.pipeline_name, f"{field}pipeline_name", "the pipeline's name")
    if request.checkpoint_id <= 0:
        raise InvalidArgument.for_field(f"{field}checkpoint_id", "must be >= 1")
    if not request.tasks:
        raise InvalidArgument.for_field(f"{field}tasks", "must list at least one task")
    tasks: list[TriggerTask] = []
    for index, task in enumerate(request.tasks):
        task_field = f"{field}tasks[{index}]"
        if task.task_id.pipeline_name not in ("", pipeline):
            raise InvalidArgument.for_field(
                f"{task_field}.task_id.pipeline_name",
                f"must be {pipeline!r} (the request's pipeline_name) or empty",
            )
        if task.task_generation <= 0:
            raise InvalidArgument.for_field(f"{task_field}.task_generation", "must be >= 1")
        _required(
            task.transactional_id_prefix,
            f"{task_field}.transactional_id_prefix",
            "the leader allocates the transactional.id prefix of the task's writers",
        )
        tasks.append(
            TriggerTask(
                task=TaskRef(pipeline, task.task_id.task_index),
                task_generation=Generation(task.task_generation),
                start_offsets={(p.topic, p.partition): p.offset for p in task.start_offsets},
                transactional_id_prefix=task.transactional_id_prefix,
            )
        )
    return tasks


def _unset_or_same(
    trigger: executor_pb2.TriggerCheckpointRequest,
    call: executor_pb2.TriggerCheckpointsRequest,
    field: str,
) -> None:
    """A trigger of a TriggerCheckpoints call leaves the fencing fields to the call; one it
    sets must match the call's, or the call could carry a trigger fenced by nothing."""
    for name, own, calls in (
        ("leader_epoch", trigger.leader_epoch.epoch, call.leader_epoch.epoch),
        ("executor_id", trigger.executor_id, call.executor_id),
        ("executor_generation", trigger.executor_generation, call.executor_generation),
    ):
        if own and own != calls:
            raise InvalidArgument.for_field(
                f"{field}{name}", f"is {own!r} but the call's is {calls!r}: leave it unset"
            )
