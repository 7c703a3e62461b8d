"""The gRPC servicer of `lockgate.v1.CoordinatorService`: convert, validate, delegate.

Each RPC converts its request into domain values (`lockgate.common.model.proto` for the
protocol's vocabulary, `api/convert.py` for the coordinator's resources), calls the
`Herder` (reads answer on any replica; leader-only writes raise NotLeader on a follower:
UNAVAILABLE with `lockgate-leader` metadata), and converts the result back. It holds no
rules and never touches the store. Domain errors propagate to the shared error-mapping
interceptor (`lockgate.common.grpc_server`), which answers a stale fencing token
(`StaleTokenError`) with FAILED_PRECONDITION and a `FencingFailure` detail. The verbs
whose request carries a `request_id` (all but the executors' Report* calls, idempotent by
their checkpoint, task and generation) run once per id (`api/idempotency.py`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any, TypeVar

import grpc
from google.protobuf import field_mask_pb2

from lockgate.common.errors import FieldViolation
from lockgate.common.model.ids import CheckpointId, ExecutorId, Generation, PipelineId
from lockgate.common.model.offsets import TopicPartition, record_name
from lockgate.common.model.proto import (
    STARTING_OFFSETS_FROM_PB,
    STARTING_OFFSETS_TO_PB,
    spec_from_proto,
    spec_to_proto,
    spec_violations,
    task_id_from_proto,
    task_id_to_proto,
)
from lockgate.coordinator.api.convert import (
    CHECKPOINT_STATE_FROM_PB,
    CHECKPOINT_STATE_TO_PB,
    PIPELINE_HEALTH_TO_PB,
    TARGET_STATE_FROM_PB,
    TARGET_STATE_TO_PB,
    TASK_STATE_FROM_PB,
    assignments_to_proto,
    checkpoint_to_proto,
    coordinator_member_to_proto,
    executor_to_proto,
    int_token,
    missing_precommit_to_proto,
    name_token,
    page_size,
    partition_offsets_to_proto,
    pipeline_to_proto,
    precommit_batch_from_proto,
    precommit_from_proto,
    precommit_result_to_proto,
    progress_to_proto,
    require,
    session_id,
    task_to_proto,
)
from lockgate.coordinator.api.idempotency import idempotent
from lockgate.coordinator.domain.errors import InvalidArgument
from lockgate.coordinator.domain.pipelines import PipelineRecord
from lockgate.coordinator.domain.states import CheckpointState, TargetState
from lockgate.coordinator.herder import Herder
from lockgate.coordinator.herder.membership import ExecutorAssignment, HeartbeatTaskReport
from lockgate.coordinator.herder.reports import TaskReport
from lockgate.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc

_EXECUTOR_ID = re.compile(r"^[a-zA-Z0-9._-]{1,100}$")
_ADDRESS = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[^\s:\[\]]+):\d{1,5}$")


_Method = TypeVar("_Method", bound=Callable[..., Any])


def leader_only(method: _Method) -> _Method:
    """Answer NotLeader (UNAVAILABLE + `lockgate-leader`) on a follower before reading
    anything: the caller must retry at the leader, whatever the request holds."""

    @functools.wraps(method)
    def wrapper(self: CoordinatorServicer, request: Any, context: grpc.ServicerContext) -> Any:
        self.herder.require_fence()
        return method(self, request, context)

    return wrapper  # type: ignore[return-value]


class CoordinatorServicer(coordinator_pb2_grpc.CoordinatorServiceServicer):
    """CoordinatorService over one replica's `Herder` (see module docstring)."""

    def __init__(self, herder: Herder) -> None:
        self.herder = herder

    # ------------------------------------------------------------------ cluster

    def GetClusterInfo(
        self, request: coordinator_pb2.GetClusterInfoRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.GetClusterInfoResponse:
        """Leader, replicas and executors as this replica reads them from SQL."""
        replicas, lease = self.herder.lease_keeper.replicas()
        response = coordinator_pb2.GetClusterInfoResponse(
            responder_id=self.herder.settings.coordinator_id
        )
        if lease.is_held and lease.holder is not None:
            response.leader_epoch.CopyFrom(
                common_pb2.LeaderEpoch(epoch=lease.leader_epoch, leader_id=lease.holder)
            )
            response.leader_address = lease.holder_address or ""
            response.lease_expire_time.FromMilliseconds(lease.expires_at_ms)
        response.coordinators.extend(coordinator_member_to_proto(r) for r in replicas)
        response.executors.extend(
            executor_to_proto(view) for view in self.herder.membership.list_executors()
        )
        return response

    # ------------------------------------------------------------------ membership

    @leader_only
    @idempotent
    def RegisterExecutor(
        self, request: coordinator_pb2.RegisterExecutorRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.RegisterExecutorResponse:
        """Leader only: a new registration (generation + 1) and the first assignment."""
        violations: list[FieldViolation] = []
        if not _EXECUTOR_ID.match(request.executor_id):
            violations.append(
                FieldViolation(
                    "executor_id",
                    f"{request.executor_id!r} is not 1-100 characters of [a-zA-Z0-9._-]",
                )
            )
        if not _ADDRESS.match(request.address):
            violations.append(
                FieldViolation(
                    "address", f"{request.address!r} is not host:port, e.g. 127.0.0.1:7071"
                )
            )
        if request.max_tasks < 0:
            violations.append(FieldViolation("max_tasks", "must be >= 0 (0 means no limit)"))
        if violations:
            raise InvalidArgument(
                "invalid RegisterExecutor: "
                + "; ".join(f"{v.field}: {v.description}" for v in violations),
                violations=violations,
            )
        answer = self.herder.membership.register_executor(
            executor_id=ExecutorId(request.executor_id), address=request.address
        )
        settings = self.herder.settings
        return coordinator_pb2.RegisterExecutorResponse(
            executor_generation=answer.executor.generation,
            session_id=session_id(answer.executor),
            leader_epoch=_leader_epoch(answer),
            session_timeout_ms=settings.session_timeout_ms,
            heartbeat_interval_ms=settings.heartbeat_interval_ms,
            assignments=assignments_to_proto(answer.tasks),
            assignment_version=answer.version,
        )

    @leader_only
    def Heartbeat(
        self, request: coordinator_pb2.HeartbeatRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.HeartbeatResponse:
        """Leader only: keep the session, record task states, return the assignment."""
        require(request.executor_id, "executor_id", "the executor's id")
        reports: list[HeartbeatTaskReport] = []
        for i, status in enumerate(request.task_statuses):
            state = TASK_STATE_FROM_PB.get(status.state)
            if state is None:
                raise InvalidArgument.for_field(
                    f"task_statuses[{i}].state", "must be set to the task's observed state"
                )
            reports.append(
                HeartbeatTaskReport(
                    task_id=task_id_from_proto(status.task_id, f"task_statuses[{i}].task_id"),
                    task_generation=Generation(status.task_generation),
                    state=state,
                    error=status.last_error.message or None,
                )
            )
        answer = self.herder.membership.heartbeat(
            executor_id=ExecutorId(request.executor_id),
            generation=Generation(request.executor_generation),
            reports=reports,
            highest_leader_epoch_seen=request.highest_leader_epoch_seen.epoch,
            known_assignment_version=request.known_assignment_version,
        )
        settings = self.herder.settings
        return coordinator_pb2.HeartbeatResponse(
            leader_epoch=_leader_epoch(answer),
            session_timeout_ms=settings.session_timeout_ms,
            heartbeat_interval_ms=settings.heartbeat_interval_ms,
            assignments=assignments_to_proto(answer.tasks),
            assignment_version=answer.version,
            assignment_unchanged=answer.unchanged,
        )

    @leader_only
    @idempotent
    def DeregisterExecutor(
        self, request: coordinator_pb2.DeregisterExecutorRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.DeregisterExecutorResponse:
        """Leader only: the executor leaves; its tasks move on the next pass."""
        require(request.executor_id, "executor_id", "the executor's id")
        self.herder.membership.deregister_executor(
            executor_id=ExecutorId(request.executor_id),
            generation=Generation(request.executor_generation),
        )
        return coordinator_pb2.DeregisterExecutorResponse()

    # ------------------------------------------------------------------ pipelines

    @leader_only
    @idempotent
    def CreatePipeline(
        self, request: coordinator_pb2.CreatePipelineRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.CreatePipelineResponse:
        """Leader only: validate, store at config version 1, split into tasks."""
        spec = spec_from_proto(request.spec)
        target = TARGET_STATE_FROM_PB.get(request.initial_target_state, TargetState.RUNNING)
        record = self.herder.pipelines.create(spec=spec, target_state=target)
        return coordinator_pb2.CreatePipelineResponse(pipeline=pipeline_to_proto(record))

    def GetPipeline(
        self, request: coordinator_pb2.GetPipelineRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.GetPipelineResponse:
        """Any replica: one pipeline."""
        name = require(request.name, "name", "the pipeline's name")
        record = self.herder.pipelines.get(PipelineId(name))
        return coordinator_pb2.GetPipelineResponse(pipeline=pipeline_to_proto(record))

    def ListPipelines(
        self, request: coordinator_pb2.ListPipelinesRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.ListPipelinesResponse:
        """Any replica: pipelines ordered by name, a page at a time."""
        records, token = self.herder.pipelines.list_pipelines(
            page_size=page_size(request.page_size), page_token=name_token(request.page_token)
        )
        return coordinator_pb2.ListPipelinesResponse(
            pipelines=[pipeline_to_proto(r) for r in records], next_page_token=token
        )

    @leader_only
    @idempotent
    def UpdatePipeline(
        self, request: coordinator_pb2.UpdatePipelineRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.UpdatePipelineResponse:
        """Leader only: replace the masked fields; config version + 1."""
        name = require(request.name, "name", "the pipeline's name")
        paths = list(request.update_mask.paths)
        if "name" in paths or (request.spec.name and request.spec.name != name):
            raise InvalidArgument.for_field(
                "spec.name", "a pipeline's name cannot change; create a new pipeline instead"
            )
        if paths and not request.update_mask.IsValidForDescriptor(
            common_pb2.PipelineSpec.DESCRIPTOR
        ):
            raise InvalidArgument.for_field(
                "update_mask.paths",
                f"{paths} names a field PipelineSpec does not have; use paths such as "
                "'checkpoint.interval_ms' or 'tasks_max'",
            )
        current = self.herder.pipelines.for_update(
            PipelineId(name), expected_version=request.expected_config_version
        )
        if paths:
            merged = spec_to_proto(current.spec)
            field_mask_pb2.FieldMask(paths=paths).MergeMessage(
                request.spec, merged, replace_message_field=True, replace_repeated_field=True
            )
        else:
            merged = common_pb2.PipelineSpec()
            merged.CopyFrom(request.spec)
        merged.name = name
        record = self.herder.pipelines.update(
            spec=spec_from_proto(merged), expected_version=request.expected_config_version or None
        )
        return coordinator_pb2.UpdatePipelineResponse(pipeline=pipeline_to_proto(record))

    @leader_only
    @idempotent
    def DeletePipeline(
        self, request: coordinator_pb2.DeletePipelineRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.DeletePipelineResponse:
        """Leader only: finish or abort its checkpoints, then remove it."""
        name = require(request.name, "name", "the pipeline's name")
        self.herder.pipelines.delete(PipelineId(name))
        return coordinator_pb2.DeletePipelineResponse()

    def ValidatePipeline(
        self, request: coordinator_pb2.ValidatePipelineRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.ValidatePipelineResponse:
        """Any replica: every violation CreatePipeline would report, without creating."""
        violations = spec_violations(request.spec)
        found = [
            common_pb2.FieldViolation(field=v.field, description=f"{v.description}; fix: {v.fix}")
            for v in violations
        ]
        if not violations:
            found.extend(
                common_pb2.FieldViolation(field=v.field, description=v.description)
                for v in self.herder.pipelines.topic_violations(spec_from_proto(request.spec))
            )
        name_taken = bool(request.spec.name) and self.herder.pipelines.exists(
            PipelineId(request.spec.name)
        )
        return coordinator_pb2.ValidatePipelineResponse(
            valid=not found, violations=found, name_taken=name_taken
        )

    def _target(self, name: str, target: TargetState) -> common_pb2.Pipeline:
        record = self.herder.pipelines.set_target_state(PipelineId(name), target)
        return pipeline_to_proto(record)

    @leader_only
    @idempotent
    def PausePipeline(
        self, request: coordinator_pb2.PausePipelineRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.PausePipelineResponse:
        """Leader only: target PAUSED (the herder refuses it for a STOPPED pipeline)."""
        name = require(request.name, "name", "the pipeline's name")
        return coordinator_pb2.PausePipelineResponse(
            pipeline=self._target(name, TargetState.PAUSED)
        )

    @leader_only
    @idempotent
    def ResumePipeline(
        self, request: coordinator_pb2.ResumePipelineRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.ResumePipelineResponse:
        """Leader only: target RUNNING."""
        name = require(request.name, "name", "the pipeline's name")
        return coordinator_pb2.ResumePipelineResponse(
            pipeline=self._target(name, TargetState.RUNNING)
        )

    @leader_only
    @idempotent
    def StopPipeline(
        self, request: coordinator_pb2.StopPipelineRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.StopPipelineResponse:
        """Leader only: target STOPPED; tasks are released."""
        name = require(request.name, "name", "the pipeline's name")
        return coordinator_pb2.StopPipelineResponse(
            pipeline=self._target(name, TargetState.STOPPED)
        )

    @leader_only
    @idempotent
    def RestartPipeline(
        self, request: coordinator_pb2.RestartPipelineRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.RestartPipelineResponse:
        """Leader only: re-plan the tasks; with include_tasks, new generations; with
        from_checkpoint_id, past the pipeline's DATA_LOST checkpoint."""
        name = require(request.name, "name", "the pipeline's name")
        if request.from_checkpoint_id < 0:
            raise InvalidArgument.for_field(
                "from_checkpoint_id",
                f"must be >= 0, got {request.from_checkpoint_id}; name the DATA_LOST"
                " checkpoint `pipeline status` shows, or 0 for an ordinary restart",
            )
        pipeline, restarted = self.herder.pipelines.restart(
            PipelineId(name),
            include_tasks=request.include_tasks,
            only_failed=request.only_failed,
            from_checkpoint=CheckpointId(request.from_checkpoint_id)
            if request.from_checkpoint_id
            else None,
        )
        return coordinator_pb2.RestartPipelineResponse(
            pipeline=pipeline_to_proto(pipeline),
            restarted_tasks=[task_id_to_proto(t.task_id) for t in restarted],
        )

    def GetPipelineStatus(
        self, request: coordinator_pb2.GetPipelineStatusRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.GetPipelineStatusResponse:
        """Any replica: desired state, each task's observed state, latest checkpoints."""
        name = require(request.name, "name", "the pipeline's name")
        status = self.herder.pipelines.status(PipelineId(name))
        pipeline = status.pipeline
        committed = status.last_committed
        response = coordinator_pb2.GetPipelineStatusResponse(
            name=name,
            target_state=TARGET_STATE_TO_PB[pipeline.target_state],  # type: ignore[arg-type]
            config_version=pipeline.config_version,
            tasks=[
                task_to_proto(
                    t, target_state=pipeline.target_state, config_version=pipeline.config_version
                )
                for t in status.tasks
            ],
            last_complete_checkpoint_id=status.last_complete_checkpoint_id,
            last_committed_checkpoint_id=committed.checkpoint_id if committed else 0,
            in_flight_checkpoint_ids=list(status.in_flight_checkpoint_ids),
        )
        if committed is not None and committed.committed_at_ms is not None:
            response.last_commit_time.FromMilliseconds(committed.committed_at_ms)
        if status.last_aborted is not None:
            response.last_aborted_checkpoint.CopyFrom(
                checkpoint_to_proto(status.last_aborted, detailed=False)
            )
        response.consecutive_aborted_checkpoints = status.aborted_in_a_row
        response.last_abort_missing_tasks.extend(
            missing_precommit_to_proto(m) for m in status.missing_precommits
        )
        response.health = PIPELINE_HEALTH_TO_PB[status.health]  # type: ignore[assignment]
        if status.data_lost is not None:
            response.data_lost_checkpoint.CopyFrom(
                checkpoint_to_proto(
                    status.data_lost, detailed=False, lost_ranges=status.lost_ranges
                )
            )
        response.warnings.extend(status.warnings)
        progress_to_proto(self.herder.progress.status_progress(pipeline), response)
        return response

    # ------------------------------------------------------------------ tasks

    def ListTasks(
        self, request: coordinator_pb2.ListTasksRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.ListTasksResponse:
        """Any replica: tasks by pipeline and index, optionally filtered."""
        size = page_size(request.page_size)
        start = int_token(request.page_token) or 0
        pipeline_id = PipelineId(request.pipeline_name) if request.pipeline_name else None
        tasks = self.herder.pipelines.tasks(
            pipeline_id=pipeline_id, executor_id=request.executor_id
        )
        pipelines: dict[PipelineId, PipelineRecord] = {}
        result: list[common_pb2.Task] = []
        for t in tasks[start : start + size]:
            if t.pipeline_id not in pipelines:
                pipelines[t.pipeline_id] = self.herder.pipelines.get(t.pipeline_id)
            p = pipelines[t.pipeline_id]
            result.append(
                task_to_proto(t, target_state=p.target_state, config_version=p.config_version)
            )
        more = start + size < len(tasks)
        return coordinator_pb2.ListTasksResponse(
            tasks=result, next_page_token=str(start + size) if more else ""
        )

    @leader_only
    @idempotent
    def RestartTask(
        self, request: coordinator_pb2.RestartTaskRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.RestartTaskResponse:
        """Leader only: the task restarts with a new generation, its error cleared."""
        task, pipeline = self.herder.pipelines.restart_task(
            task_id_from_proto(request.task_id, "task_id")
        )
        return coordinator_pb2.RestartTaskResponse(
            task=task_to_proto(
                task, target_state=pipeline.target_state, config_version=pipeline.config_version
            )
        )

    # ------------------------------------------------------------------ offsets

    def GetOffsets(
        self, request: coordinator_pb2.GetOffsetsRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.GetOffsetsResponse:
        """Any replica: where each source partition resumes."""
        name = require(request.pipeline_name, "pipeline_name", "the pipeline's name")
        found = self.herder.pipelines.offsets(PipelineId(name))
        starting = found.pipeline.spec.source.starting_offsets
        return coordinator_pb2.GetOffsetsResponse(
            offsets=partition_offsets_to_proto(found.offsets),
            checkpoint_id=found.restored_checkpoint_id,
            default_position=STARTING_OFFSETS_TO_PB[starting],  # type: ignore[arg-type]
        )

    @leader_only
    @idempotent
    def ResetOffsets(
        self, request: coordinator_pb2.ResetOffsetsRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.ResetOffsetsResponse:
        """Leader only: set where a STOPPED pipeline resumes."""
        name = require(request.pipeline_name, "pipeline_name", "the pipeline's name")
        pipeline_id = PipelineId(name)
        kind = request.WhichOneof("reset")
        if kind is None:
            self.herder.pipelines.get(pipeline_id)  # NOT_FOUND comes first
            raise InvalidArgument.for_field(
                "reset", "set either offsets (explicit per partition) or position"
            )
        if kind == "position":
            resolved = self.herder.pipelines.reset_offsets_to_position(
                pipeline_id, STARTING_OFFSETS_FROM_PB.get(request.position)
            )
            return coordinator_pb2.ResetOffsetsResponse(
                offsets=partition_offsets_to_proto(resolved or []),
                default_position=request.position,
            )
        stored = self.herder.pipelines.reset_offsets(
            pipeline_id,
            [(TopicPartition(o.topic, o.partition), o.offset) for o in request.offsets.offsets],
        )
        return coordinator_pb2.ResetOffsetsResponse(offsets=partition_offsets_to_proto(stored))

    # ------------------------------------------------------------------ checkpoints

    def ListCheckpoints(
        self, request: coordinator_pb2.ListCheckpointsRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.ListCheckpointsResponse:
        """Any replica: checkpoint history, newest first."""
        name = require(request.pipeline_name, "pipeline_name", "the pipeline's name")
        size = page_size(request.page_size)
        before = int_token(request.page_token)
        states: list[CheckpointState] | None = None
        if request.states:
            states = []
            for i, s in enumerate(request.states):
                state = CHECKPOINT_STATE_FROM_PB.get(s)
                if state is None:
                    raise InvalidArgument.for_field(f"states[{i}]", "is not a checkpoint state")
                states.append(state)
        records = self.herder.pipelines.list_checkpoints(
            pipeline_id=PipelineId(name),
            limit=size + 1,
            before=CheckpointId(before) if before is not None else None,
            states=states,
        )
        page = records[:size]
        return coordinator_pb2.ListCheckpointsResponse(
            checkpoints=[checkpoint_to_proto(r, detailed=False) for r in page],
            next_page_token=str(page[-1].checkpoint_id) if len(records) > size else "",
        )

    def GetCheckpoint(
        self, request: coordinator_pb2.GetCheckpointRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.GetCheckpointResponse:
        """Any replica: one checkpoint with each task's part."""
        name = require(request.pipeline_name, "pipeline_name", "the pipeline's name")
        record, ranges = self.herder.pipelines.get_checkpoint_with_ranges(
            pipeline_id=PipelineId(name), checkpoint_id=CheckpointId(request.checkpoint_id)
        )
        return coordinator_pb2.GetCheckpointResponse(
            checkpoint=checkpoint_to_proto(record, detailed=True, task_ranges=ranges)
        )

    # ------------------------------------------------------------------ reports

    @leader_only
    def ReportPrecommit(
        self, request: coordinator_pb2.ReportPrecommitRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.ReportPrecommitResponse:
        """Leader only: a task's pre-commit of N; COMPLETE when it was the last."""
        record = self.herder.reports.report_precommit(
            precommit=precommit_from_proto(request), leader_epoch=request.leader_epoch.epoch
        )
        return coordinator_pb2.ReportPrecommitResponse(
            checkpoint_state=CHECKPOINT_STATE_TO_PB[record.state]  # type: ignore[arg-type]
        )

    @leader_only
    def ReportPrecommits(
        self, request: coordinator_pb2.ReportPrecommitsRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.ReportPrecommitsResponse:
        """Leader only: one executor's pre-commits, one transaction, an answer per report."""
        precommits, leader_epochs = precommit_batch_from_proto(request)
        results = self.herder.reports.report_precommits(
            precommits=precommits, leader_epochs=leader_epochs
        )
        return coordinator_pb2.ReportPrecommitsResponse(
            results=[precommit_result_to_proto(r) for r in results]
        )

    @leader_only
    def ReportCheckpointFailure(
        self,
        request: coordinator_pb2.ReportCheckpointFailureRequest,
        context: grpc.ServicerContext,
    ) -> coordinator_pb2.ReportCheckpointFailureResponse:
        """Leader only: a task could not pre-commit N; N (and later ones) abort."""
        if request.checkpoint_id <= 0:
            raise InvalidArgument.for_field("checkpoint_id", "must be >= 1")
        require(request.executor_id, "executor_id", "the reporting executor's id")
        state = self.herder.reports.report_checkpoint_failure(
            checkpoint_id=CheckpointId(request.checkpoint_id),
            failure=TaskReport(
                task=task_id_from_proto(request.task_id, "task_id"),
                task_generation=Generation(request.task_generation),
                executor_id=ExecutorId(request.executor_id),
                executor_generation=Generation(request.executor_generation),
                error=request.error.message or "pre-commit failed",
            ),
            task_failed=request.task_failed,
            leader_epoch=request.leader_epoch.epoch,
        )
        return coordinator_pb2.ReportCheckpointFailureResponse(
            checkpoint_state=CHECKPOINT_STATE_TO_PB[state]  # type: ignore[arg-type]
        )

    @leader_only
    def ReportTaskFailure(
        self, request: coordinator_pb2.ReportTaskFailureRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.ReportTaskFailureResponse:
        """Leader only: the task goes FAILED with its error until restarted."""
        require(request.executor_id, "executor_id", "the reporting executor's id")
        task = task_id_from_proto(request.task_id, "task_id")
        message = request.error.message or "task failed"
        if request.error.HasField("record"):
            r = request.error.record
            message = f"{message} (record {record_name(r.topic, r.partition, r.offset)})"
        self.herder.reports.report_task_failure(
            TaskReport(
                task=task,
                task_generation=Generation(request.task_generation),
                executor_id=ExecutorId(request.executor_id),
                executor_generation=Generation(request.executor_generation),
                error=message,
            )
        )
        return coordinator_pb2.ReportTaskFailureResponse()


def _leader_epoch(answer: ExecutorAssignment) -> common_pb2.LeaderEpoch:
    return common_pb2.LeaderEpoch(epoch=answer.fence.leader_epoch, leader_id=answer.fence.holder)
