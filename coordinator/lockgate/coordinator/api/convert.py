"""Proto <-> domain conversion of the coordinator's resources and reports.

Pure functions (no gRPC context, no store): the api's servicer converts each request with
them, delegates to the herder, and converts the herder's plain values back. Request
fields are validated here by their proto paths (InvalidArgument naming the field).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from google.protobuf import timestamp_pb2

from lockgate.common.errors import FieldViolation, LockgateError, StaleTokenError
from lockgate.common.grpc_server import fencing_failure, status_code_for
from lockgate.common.model.handles import TransactionHandle
from lockgate.common.model.ids import (
    PIPELINE_ID_PATTERN,
    CheckpointId,
    ExecutorId,
    Generation,
    PipelineId,
    TaskId,
)
from lockgate.common.model.offsets import OffsetRange
from lockgate.common.model.proto import (
    handle_from_proto,
    handle_to_proto,
    offset_range_from_proto,
    offset_range_to_proto,
    spec_to_proto,
    task_id_from_proto,
    task_id_to_proto,
)
from lockgate.coordinator.domain.aborts import MissingPrecommit
from lockgate.coordinator.domain.assignment import ExecutorLiveness
from lockgate.coordinator.domain.checkpoints import CheckpointRecord, Precommit, RestoreState
from lockgate.coordinator.domain.data_loss import PipelineHealth
from lockgate.coordinator.domain.errors import InvalidArgument
from lockgate.coordinator.domain.membership import ExecutorRecord
from lockgate.coordinator.domain.pipelines import PartitionOffset, PipelineRecord, TaskRecord
from lockgate.coordinator.domain.replicas import ReplicaLiveness, ReplicaView
from lockgate.coordinator.domain.states import CheckpointState, TargetState, TaskState
from lockgate.coordinator.herder.membership import ExecutorView, TaskAssignment
from lockgate.coordinator.herder.progress import PipelineProgress
from lockgate.v1 import common_pb2, coordinator_pb2

TARGET_STATE_TO_PB: Mapping[TargetState, int] = {
    TargetState.RUNNING: common_pb2.TARGET_STATE_RUNNING,
    TargetState.PAUSED: common_pb2.TARGET_STATE_PAUSED,
    TargetState.STOPPED: common_pb2.TARGET_STATE_STOPPED,
}
TARGET_STATE_FROM_PB: Mapping[int, TargetState] = {v: k for k, v in TARGET_STATE_TO_PB.items()}

TASK_STATE_TO_PB: Mapping[TaskState, int] = {
    TaskState.UNASSIGNED: common_pb2.TASK_STATE_UNASSIGNED,
    TaskState.RUNNING: common_pb2.TASK_STATE_RUNNING,
    TaskState.PAUSED: common_pb2.TASK_STATE_PAUSED,
    TaskState.STOPPED: common_pb2.TASK_STATE_STOPPED,
    TaskState.FAILED: common_pb2.TASK_STATE_FAILED,
    TaskState.RESTARTING: common_pb2.TASK_STATE_RESTARTING,
}
TASK_STATE_FROM_PB: Mapping[int, TaskState] = {v: k for k, v in TASK_STATE_TO_PB.items()}

CHECKPOINT_STATE_TO_PB: Mapping[CheckpointState, int] = {
    CheckpointState.TRIGGERED: common_pb2.CHECKPOINT_STATE_TRIGGERED,
    CheckpointState.COMPLETE: common_pb2.CHECKPOINT_STATE_COMPLETE,
    CheckpointState.COMMITTED: common_pb2.CHECKPOINT_STATE_COMMITTED,
    CheckpointState.ABORTED: common_pb2.CHECKPOINT_STATE_ABORTED,
    CheckpointState.DATA_LOST: common_pb2.CHECKPOINT_STATE_DATA_LOST,
}
CHECKPOINT_STATE_FROM_PB: Mapping[int, CheckpointState] = {
    v: k for k, v in CHECKPOINT_STATE_TO_PB.items()
}

PIPELINE_HEALTH_TO_PB: Mapping[PipelineHealth, int] = {
    PipelineHealth.OK: coordinator_pb2.PIPELINE_HEALTH_OK,
    PipelineHealth.FAILED: coordinator_pb2.PIPELINE_HEALTH_FAILED,
}

_DEFAULT_PAGE = 100
_MAX_PAGE = 1000


def timestamp(ms: int | None) -> timestamp_pb2.Timestamp | None:
    """A Timestamp from milliseconds since the Unix epoch (None stays None)."""
    if ms is None:
        return None
    result = timestamp_pb2.Timestamp()
    result.FromMilliseconds(ms)
    return result


def pipeline_to_proto(record: PipelineRecord) -> common_pb2.Pipeline:
    """The Pipeline resource of a stored pipeline."""
    return common_pb2.Pipeline(
        name=record.pipeline_id,
        spec=spec_to_proto(record.spec),
        config_version=record.config_version,
        target_state=TARGET_STATE_TO_PB[record.target_state],  # type: ignore[arg-type]
        create_time=timestamp(record.created_at_ms),
        update_time=timestamp(record.updated_at_ms),
    )


def task_to_proto(
    record: TaskRecord, *, target_state: TargetState, config_version: int
) -> common_pb2.Task:
    """The Task resource; a released task of a STOPPED pipeline shows as STOPPED."""
    state = record.state
    if target_state is TargetState.STOPPED and record.executor_id is None:
        state = TaskState.STOPPED
    result = common_pb2.Task(
        task_id=task_id_to_proto(record.task_id),
        task_generation=record.generation,
        config_version=config_version,
        source_partitions=[
            common_pb2.TopicPartition(topic=tp.topic, partition=tp.partition)
            for tp in record.partitions
        ],
        executor_id=record.executor_id or "",
        executor_generation=record.state_executor_generation or 0,
        state=TASK_STATE_TO_PB[state],  # type: ignore[arg-type]
        state_change_time=timestamp(record.updated_at_ms),
    )
    if record.last_error:
        result.last_error.CopyFrom(
            common_pb2.TaskError(
                message=record.last_error,
                executor_id=record.state_executor_id or "",
                executor_generation=record.state_executor_generation or 0,
                task_generation=record.generation,
            )
        )
        location = _BAD_RECORD_RE.search(record.last_error)
        if location is not None:
            result.last_error.record.CopyFrom(
                common_pb2.RecordLocation(
                    topic=location["topic"],
                    partition=int(location["partition"]),
                    offset=int(location["offset"]),
                )
            )
    return result


# The store keeps a task's last error as text; a bad record's location is written into it
# as "TOPIC[PARTITION]@OFFSET" (by the executor's RecordError and by ReportTaskFailure),
# from which GetPipelineStatus gives TaskError.record back to clients.
_BAD_RECORD_RE = re.compile(
    r"(?:bad record at |\(record )(?P<topic>[A-Za-z0-9._-]+)\[(?P<partition>\d+)\]@(?P<offset>\d+)"
)


def _duration(start: int | None, end: int | None) -> int:
    return end - start if start is not None and end is not None else 0


def checkpoint_to_proto(
    record: CheckpointRecord,
    *,
    detailed: bool,
    lost_ranges: Sequence[OffsetRange] = (),
    task_ranges: Mapping[TaskId, Sequence[OffsetRange]] | None = None,
) -> common_pb2.Checkpoint:
    """The Checkpoint resource with its timings; `detailed` adds each task's part (with
    its source ranges from `task_ranges`); a DATA_LOST one carries its error and
    `lost_ranges`."""
    end = record.committed_at_ms if record.committed_at_ms is not None else record.aborted_at_ms
    result = common_pb2.Checkpoint(
        pipeline_name=record.pipeline_id,
        checkpoint_id=record.checkpoint_id,
        state=CHECKPOINT_STATE_TO_PB[record.state],  # type: ignore[arg-type]
        leader_epoch=common_pb2.LeaderEpoch(epoch=record.leader_epoch),
        trigger_time=timestamp(record.triggered_at_ms),
        complete_time=timestamp(record.completed_at_ms),
        commit_time=timestamp(record.committed_at_ms),
        abort_time=timestamp(record.aborted_at_ms),
        precommit_duration_ms=_duration(record.triggered_at_ms, record.completed_at_ms),
        commit_duration_ms=_duration(record.completed_at_ms, record.committed_at_ms),
        total_duration_ms=_duration(record.triggered_at_ms, end),
        abort_reason=record.abort_reason or "",
        data_loss_error=record.data_loss_error or "",
        data_loss_time=timestamp(record.data_lost_at_ms),
        lost_ranges=[offset_range_to_proto(r) for r in lost_ranges],
    )
    if detailed:
        for trigger in record.tasks:
            result.tasks.append(
                common_pb2.TaskCheckpoint(
                    task_id=task_id_to_proto(trigger.task_id),
                    task_generation=trigger.task_generation,
                    executor_id=trigger.executor_id or "",
                    state=_task_checkpoint_state(record, trigger.task_id),  # type: ignore[arg-type]
                    source_ranges=[
                        offset_range_to_proto(r)
                        for r in (task_ranges or {}).get(trigger.task_id, ())
                    ],
                )
            )
    return result


def missing_precommit_to_proto(missing: MissingPrecommit) -> common_pb2.TaskCheckpoint:
    """A task that had not pre-committed an aborted checkpoint: FAILED, with why."""
    return common_pb2.TaskCheckpoint(
        task_id=task_id_to_proto(missing.task_id),
        task_generation=missing.task_generation,
        executor_id=missing.executor_id or "",
        state=common_pb2.TASK_CHECKPOINT_STATE_FAILED,
        error=common_pb2.TaskError(
            message=missing.reason,
            checkpoint_id=missing.checkpoint_id,
            executor_id=missing.executor_id or "",
            task_generation=missing.task_generation,
        ),
    )


def _task_checkpoint_state(record: CheckpointRecord, task: TaskId) -> int:
    if record.state is CheckpointState.COMMITTED:
        return common_pb2.TASK_CHECKPOINT_STATE_COMMITTED
    if record.state is CheckpointState.ABORTED:
        return common_pb2.TASK_CHECKPOINT_STATE_ABORTED
    if record.state is CheckpointState.DATA_LOST:
        if task in record.lost_tasks:
            return common_pb2.TASK_CHECKPOINT_STATE_FAILED
        return common_pb2.TASK_CHECKPOINT_STATE_COMMITTED
    if task in record.precommitted:
        return common_pb2.TASK_CHECKPOINT_STATE_PRECOMMITTED
    return common_pb2.TASK_CHECKPOINT_STATE_TRIGGERED


def restore_to_proto(
    restore: RestoreState, *, restored_checkpoint_id: int, servers: str
) -> coordinator_pb2.TaskRestoreState:
    """What a (re)assigned task must finish before its first batch."""
    return coordinator_pb2.TaskRestoreState(
        restored_checkpoint_id=restored_checkpoint_id,
        start_offsets=[
            common_pb2.PartitionOffset(topic=tp.topic, partition=tp.partition, offset=offset)
            for tp, offset in sorted(restore.start_offsets.items())
        ],
        commit_before_start=[
            common_pb2.CheckpointHandles(
                checkpoint_id=pending.checkpoint_id,
                handles=[
                    handle_to_proto(h.on(servers))
                    for task_handles in pending.handles
                    if task_handles.task_id == restore.task_id
                    for h in task_handles.handles
                ],
            )
            for pending in restore.to_commit
        ],
        abort_before_start=[
            handle_to_proto(item.handle.on(servers))
            for item in restore.to_abort
            if item.must_be_sent
        ],
    )


def precommit_from_proto(request: coordinator_pb2.ReportPrecommitRequest) -> Precommit:
    """The domain pre-commit of a ReportPrecommit; InvalidArgument naming each bad field."""
    violations: list[FieldViolation] = []
    if request.checkpoint_id <= 0:
        violations.append(FieldViolation("checkpoint_id", "must be >= 1"))
    if not request.executor_id:
        violations.append(FieldViolation("executor_id", "must name the reporting executor"))
    if not request.task_id.pipeline_name:
        violations.append(FieldViolation("task_id.pipeline_name", "must name the pipeline"))
    ranges: list[OffsetRange] = []
    handles: list[TransactionHandle] = []
    # Every bad range and handle is named at once, not only the first.
    for i, r in enumerate(request.source_ranges):
        try:
            ranges.append(offset_range_from_proto(r, f"source_ranges[{i}]"))
        except InvalidArgument as exc:
            violations.extend(exc.violations)
    for i, h in enumerate(request.sink_handles):
        try:
            handles.append(handle_from_proto(h, f"sink_handles[{i}]", resumable=True))
        except InvalidArgument as exc:
            violations.extend(exc.violations)
    if violations:
        raise InvalidArgument(
            "invalid ReportPrecommit: "
            + "; ".join(f"{v.field}: {v.description}" for v in violations),
            violations=violations,
        )
    return Precommit(
        pipeline_id=PipelineId(request.task_id.pipeline_name),
        checkpoint_id=CheckpointId(request.checkpoint_id),
        task_id=task_id_from_proto(request.task_id, "task_id"),
        task_generation=Generation(request.task_generation),
        executor_id=ExecutorId(request.executor_id),
        executor_generation=Generation(request.executor_generation),
        offsets=tuple(ranges),
        handles=tuple(handles),
        backlog_left=request.backlog_left,
    )


def precommit_batch_from_proto(
    request: coordinator_pb2.ReportPrecommitsRequest,
) -> tuple[list[Precommit], list[int]]:
    """The domain pre-commits of a ReportPrecommits and the leader epoch each answers;
    InvalidArgument naming each bad field as `reports[i].<field>`, and a report of another
    executor than the request's `executor_id` (the one the caller was authorised as)."""
    if not request.executor_id:
        raise InvalidArgument.for_field("executor_id", "must name the reporting executor")
    if not request.reports:
        raise InvalidArgument.for_field("reports", "must hold at least one pre-commit report")
    violations: list[FieldViolation] = []
    precommits: list[Precommit] = []
    for i, report in enumerate(request.reports):
        if report.executor_id != request.executor_id:
            violations.append(
                FieldViolation(
                    f"reports[{i}].executor_id",
                    f"is {report.executor_id!r}; every report of the call must be of executor "
                    f"{request.executor_id!r}",
                )
            )
        try:
            precommits.append(precommit_from_proto(report))
        except InvalidArgument as exc:
            violations.extend(
                FieldViolation(f"reports[{i}].{v.field}", v.description) for v in exc.violations
            )
    if violations:
        raise InvalidArgument(
            "invalid ReportPrecommits: "
            + "; ".join(f"{v.field}: {v.description}" for v in violations),
            violations=violations,
        )
    return precommits, [r.leader_epoch.epoch for r in request.reports]


def precommit_result_to_proto(
    result: CheckpointRecord | LockgateError,
) -> coordinator_pb2.ReportPrecommitResult:
    """One report's answer in a ReportPrecommitsResponse: its checkpoint's state, or the
    refusal ReportPrecommit would have failed with."""
    if isinstance(result, CheckpointRecord):
        return coordinator_pb2.ReportPrecommitResult(
            checkpoint_state=CHECKPOINT_STATE_TO_PB[result.state]  # type: ignore[arg-type]
        )
    refusal = coordinator_pb2.ReportRefusal(
        code=status_code_for(result).value[0],
        message=result.message,
        reason=result.reason,
    )
    if isinstance(result, StaleTokenError):
        refusal.fencing_failure.CopyFrom(fencing_failure(result))
    if isinstance(result, InvalidArgument):
        refusal.field_violations.extend(
            common_pb2.FieldViolation(field=v.field, description=v.description)
            for v in result.violations
        )
    return coordinator_pb2.ReportPrecommitResult(refusal=refusal)


def page_size(value: int, field_path: str = "page_size") -> int:
    """A request's page size: 0 means the default, larger values are capped."""
    if value < 0:
        raise InvalidArgument.for_field(field_path, f"must be >= 0, got {value}")
    return min(value or _DEFAULT_PAGE, _MAX_PAGE)


_INT_TOKEN = re.compile(r"^[0-9]{1,18}$")
_NOT_ISSUED = "is not a token this server returned; pass next_page_token unchanged"


def int_token(token: str, field_path: str = "page_token") -> int | None:
    """The position a numeric page token (ListTasks, ListCheckpoints) names; None for the
    first page. InvalidArgument for anything the server never issues ('²', '-1', '1e9')."""
    if not token:
        return None
    if not _INT_TOKEN.match(token):
        raise InvalidArgument.for_field(field_path, _NOT_ISSUED)
    return int(token)


def name_token(token: str, field_path: str = "page_token") -> str:
    """A ListPipelines page token: the last pipeline name of the previous page, so it has
    a pipeline name's shape; InvalidArgument otherwise."""
    if token and not PIPELINE_ID_PATTERN.match(token):
        raise InvalidArgument.for_field(field_path, _NOT_ISSUED)
    return token


def require(value: str, field_path: str, what: str) -> str:
    if not value:
        raise InvalidArgument.for_field(field_path, f"must be set to {what}")
    return value


def session_id(executor: ExecutorRecord) -> str:
    """The opaque session id of a registration (unique because the generation is)."""
    return f"{executor.executor_id}-g{executor.generation}-{executor.registered_at_ms}"


def coordinator_member_to_proto(view: ReplicaView) -> common_pb2.CoordinatorMember:
    """A coordinator replica: its address, role, liveness and last-seen time."""
    return common_pb2.CoordinatorMember(
        coordinator_id=view.record.coordinator_id,
        address=view.record.address,
        is_leader=view.is_leader,
        state=(
            common_pb2.COORDINATOR_STATE_ALIVE
            if view.liveness is ReplicaLiveness.ALIVE
            else common_pb2.COORDINATOR_STATE_MISSING
        ),
        last_seen_time=timestamp(view.record.last_seen_ms),
    )


def executor_to_proto(view: ExecutorView) -> common_pb2.Executor:
    """The Executor resource: its registration, liveness and tasks."""
    alive = view.liveness is ExecutorLiveness.ALIVE
    executor = view.record
    return common_pb2.Executor(
        executor_id=executor.executor_id,
        address=executor.address,
        executor_generation=executor.generation,
        session_id=session_id(executor),
        state=(common_pb2.EXECUTOR_STATE_ALIVE if alive else common_pb2.EXECUTOR_STATE_EXPIRED),
        tasks=[task_id_to_proto(t) for t in view.tasks],
        register_time=timestamp(executor.registered_at_ms),
        last_heartbeat_time=timestamp(executor.last_heartbeat_ms),
    )


def partition_offsets_to_proto(
    offsets: Iterable[PartitionOffset],
) -> list[common_pb2.PartitionOffset]:
    """Where each source partition resumes."""
    return [
        common_pb2.PartitionOffset(topic=o.topic, partition=o.partition, offset=o.next_offset)
        for o in offsets
    ]


def assignments_to_proto(
    assignments: Iterable[TaskAssignment],
) -> list[coordinator_pb2.TaskAssignment]:
    """The tasks an executor must run, each with its spec and restore state."""
    specs: dict[PipelineId, common_pb2.PipelineSpec] = {}
    result: list[coordinator_pb2.TaskAssignment] = []
    for a in assignments:
        pipeline = a.pipeline
        if pipeline.pipeline_id not in specs:
            specs[pipeline.pipeline_id] = spec_to_proto(pipeline.spec)
        result.append(
            coordinator_pb2.TaskAssignment(
                task_id=task_id_to_proto(a.task.task_id),
                task_generation=a.task.generation,
                config_version=pipeline.config_version,
                pipeline_spec=specs[pipeline.pipeline_id],
                source_partitions=[
                    common_pb2.TopicPartition(topic=tp.topic, partition=tp.partition)
                    for tp in a.task.partitions
                ],
                target_state=TARGET_STATE_TO_PB[pipeline.target_state],  # type: ignore[arg-type]
                restore=restore_to_proto(
                    a.restore,
                    restored_checkpoint_id=a.restored_checkpoint_id,
                    servers=pipeline.spec.sink.bootstrap_servers,
                ),
            )
        )
    return result


def progress_to_proto(
    progress: PipelineProgress, response: coordinator_pb2.GetPipelineStatusResponse
) -> None:
    """Fill the lag, rate and last-commit-age fields of a status response."""
    response.source_lags.extend(
        coordinator_pb2.PartitionLag(
            topic=p.partition.topic, partition=p.partition.partition, lag=p.lag
        )
        for p in progress.lags
    )
    response.total_source_lag = progress.total_lag
    response.source_lag_complete = progress.lag_known
    response.records_per_second = progress.records_per_second
    if progress.last_commit_age_ms is not None:
        response.last_commit_age.FromMilliseconds(progress.last_commit_age_ms)
    response.warnings.extend(progress.warnings)
