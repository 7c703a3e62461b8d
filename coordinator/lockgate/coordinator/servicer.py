"""The gRPC servicer of `lockgate.v1.CoordinatorService`: translate, validate, delegate.

Each RPC converts its request into domain values (`spec_from_proto`, ids, states), calls
the store for reads (any replica answers from SQL) or the `Coordinator` for leader-only
writes (a follower raises NotLeader: UNAVAILABLE with `lockgate-leader` metadata), and
converts the result back. Domain errors propagate to the shared error-mapping interceptor
(`lockgate.common.grpc_server`), which owns the error-to-status table; the one exception is
a stale fencing token, answered here with FAILED_PRECONDITION and a `FencingFailure`
detail that the interceptor's table has no room for.

The conversion functions at the top are pure (no gRPC context) and unit-tested alone.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import grpc
from google.protobuf import any_pb2, field_mask_pb2, timestamp_pb2
from google.protobuf.unknown_fields import UnknownFieldSet
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from lockgate.common.errors import (
    ERROR_DOMAIN,
    Aborted,
    FieldViolation,
    LockgateError,
    Unimplemented,
)
from lockgate.coordinator.domain.checkpoints import (
    CheckpointRecord,
    OffsetRange,
    Precommit,
    RestoreState,
    SinkHandle,
)
from lockgate.coordinator.domain.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    NotLeader,
    SpecViolation,
    StaleGeneration,
    invalid_spec,
)
from lockgate.coordinator.domain.ids import (
    CheckpointId,
    ExecutorId,
    Generation,
    PipelineId,
    TaskId,
    split_task_id,
    task_id,
)
from lockgate.coordinator.domain.membership import ExecutorRecord
from lockgate.coordinator.domain.pipeline_spec import (
    Delivery,
    ErrorTolerance,
    PipelineSpec,
    RecordFormat,
    StartingOffsets,
    parse_pipeline_spec,
    validate_pipeline_spec,
)
from lockgate.coordinator.domain.pipelines import PartitionOffset, PipelineRecord, TaskRecord
from lockgate.coordinator.domain.states import CheckpointState, TargetState, TaskState
from lockgate.coordinator.domain.tasks import TopicPartition
from lockgate.coordinator.leader import Coordinator, HeartbeatTaskReport
from lockgate.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc

# ---------------------------------------------------------------------------------------
# Enum tables (proto <-> domain)
# ---------------------------------------------------------------------------------------

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
}
CHECKPOINT_STATE_FROM_PB: Mapping[int, CheckpointState] = {
    v: k for k, v in CHECKPOINT_STATE_TO_PB.items()
}

_FORMAT_TO_PB: Mapping[RecordFormat, int] = {
    RecordFormat.BYTES: common_pb2.DATA_FORMAT_BYTES,
    RecordFormat.STRING: common_pb2.DATA_FORMAT_STRING,
    RecordFormat.JSON: common_pb2.DATA_FORMAT_JSON,
    RecordFormat.AVRO: common_pb2.DATA_FORMAT_AVRO,
}
_FORMAT_FROM_PB: Mapping[int, RecordFormat] = {v: k for k, v in _FORMAT_TO_PB.items()}
_STARTING_TO_PB: Mapping[StartingOffsets, int] = {
    StartingOffsets.EARLIEST: common_pb2.OFFSET_POSITION_EARLIEST,
    StartingOffsets.LATEST: common_pb2.OFFSET_POSITION_LATEST,
}
_STARTING_FROM_PB: Mapping[int, StartingOffsets] = {v: k for k, v in _STARTING_TO_PB.items()}
_DELIVERY_TO_PB: Mapping[Delivery, int] = {
    Delivery.EXACTLY_ONCE: common_pb2.DELIVERY_GUARANTEE_EXACTLY_ONCE,
    Delivery.AT_LEAST_ONCE: common_pb2.DELIVERY_GUARANTEE_AT_LEAST_ONCE,
}
_DELIVERY_FROM_PB: Mapping[int, Delivery] = {v: k for k, v in _DELIVERY_TO_PB.items()}
_TOLERANCE_TO_PB: Mapping[ErrorTolerance, int] = {
    ErrorTolerance.NONE: common_pb2.ERROR_TOLERANCE_NONE,
    ErrorTolerance.ALL: common_pb2.ERROR_TOLERANCE_ALL,
}
_TOLERANCE_FROM_PB: Mapping[int, ErrorTolerance] = {v: k for k, v in _TOLERANCE_TO_PB.items()}

MAX_CONCURRENT_CHECKPOINTS = 2
"""Checkpoints in flight per pipeline this coordinator runs (the store's default)."""

_EXECUTOR_ID = re.compile(r"^[a-zA-Z0-9._-]{1,100}$")
_ADDRESS = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[^\s:\[\]]+):\d{1,5}$")
_DEFAULT_PAGE = 100
_MAX_PAGE = 1000

# ---------------------------------------------------------------------------------------
# Pipeline spec: proto <-> domain
# ---------------------------------------------------------------------------------------


def _unknown_kinds(message: Any) -> list[int]:
    """Field numbers a newer client set in a oneof this coordinator does not know."""
    unknown = UnknownFieldSet(message)
    return sorted({unknown[i].field_number for i in range(len(unknown))})


def _unsupported(path: str, description: str, fix: str) -> SpecViolation:
    return SpecViolation(field=path, description=description, fix=fix)


def raw_spec_from_proto(
    spec: common_pb2.PipelineSpec,
) -> tuple[dict[str, Any], list[SpecViolation]]:
    """The pipeline spec as the domain's raw mapping, plus the violations only the proto
    form can have (a sink type from a newer client, fields this coordinator cannot keep).

    Proto3 zero values mean "unset" and are left out, so the domain applies its defaults
    and reports missing required fields by their proto paths.
    """
    raw: dict[str, Any] = {}
    extra: list[SpecViolation] = []
    if spec.name:
        raw["name"] = spec.name
    if spec.HasField("source"):
        if spec.source.WhichOneof("source") == "kafka":
            raw["source"] = {"kafka": _raw_kafka_source(spec.source.kafka, extra)}
        else:
            raw["source"] = {}
            for number in _unknown_kinds(spec.source):
                extra.append(
                    _unsupported(
                        "source",
                        f"unknown source type (SourceSpec field {number}, sent by a newer client)",
                        "use a `kafka` source, or upgrade the coordinator",
                    )
                )
    if spec.HasField("transform"):
        kind = spec.transform.WhichOneof("transform")
        if kind == "sql":
            raw["transform"] = {"sql": spec.transform.sql}
        elif kind == "python":
            raw["transform"] = {"python": spec.transform.python}
    if spec.HasField("sink"):
        if spec.sink.WhichOneof("sink") == "kafka":
            raw["sink"] = {"kafka": _raw_kafka_sink(spec.sink.kafka, extra)}
        else:
            unknown = _unknown_kinds(spec.sink)
            if unknown:
                raw["sink"] = {"kafka": None}  # keeps the domain from adding "names no sink"
                extra.extend(
                    _unsupported(
                        "sink",
                        f"unknown sink type (SinkSpec field {n}, sent by a newer client)",
                        "use a `kafka` sink, or upgrade the coordinator",
                    )
                    for n in unknown
                )
            else:
                raw["sink"] = {}
    if spec.delivery:
        raw["delivery"] = _enum_value(_DELIVERY_FROM_PB, spec.delivery, "delivery", extra)
    if spec.HasField("checkpoint"):
        checkpoint: dict[str, Any] = {}
        if spec.checkpoint.interval_ms:
            checkpoint["interval_ms"] = spec.checkpoint.interval_ms
        if spec.checkpoint.timeout_ms:
            checkpoint["timeout_ms"] = spec.checkpoint.timeout_ms
        # The leader overlaps exactly MAX_CONCURRENT_CHECKPOINTS checkpoints per pipeline;
        # another value would be silently not honoured, so it is refused.
        if spec.checkpoint.max_concurrent not in (0, MAX_CONCURRENT_CHECKPOINTS):
            extra.append(
                _unsupported(
                    "checkpoint.max_concurrent",
                    f"{spec.checkpoint.max_concurrent} is not supported by this coordinator,"
                    f" which runs {MAX_CONCURRENT_CHECKPOINTS} checkpoints of a pipeline at once",
                    f"set it to 0 (default) or {MAX_CONCURRENT_CHECKPOINTS}",
                )
            )
        raw["checkpoint"] = checkpoint
    if spec.tasks_max:
        raw["tasks_max"] = spec.tasks_max
    if spec.HasField("errors"):
        errors: dict[str, Any] = {}
        if spec.errors.tolerance:
            errors["tolerance"] = _enum_value(
                _TOLERANCE_FROM_PB, spec.errors.tolerance, "errors.tolerance", extra
            )
        if spec.errors.dead_letter_topic:
            errors["dead_letter_topic"] = spec.errors.dead_letter_topic
        raw["errors"] = errors
    # allow_reordering only permits splitting a partition's range; tasks never split one,
    # so ignoring it keeps the stricter guarantee.
    return raw, extra


def _enum_value(table: Mapping[int, Any], value: int, path: str, extra: list[SpecViolation]) -> Any:
    if value in table:
        return table[value].value
    extra.append(
        _unsupported(path, f"enum value {value} is not known", "use one of the documented values")
    )
    return None


def _raw_kafka_source(
    source: common_pb2.KafkaSourceSpec, extra: list[SpecViolation]
) -> dict[str, Any]:
    path = "source.kafka"
    raw: dict[str, Any] = {}
    if source.bootstrap_servers:
        raw["bootstrap_servers"] = source.bootstrap_servers
    if source.topics:
        raw["topics"] = list(source.topics)
    if source.starting_offsets:
        raw["starting_offsets"] = _enum_value(
            _STARTING_FROM_PB, source.starting_offsets, f"{path}.starting_offsets", extra
        )
    if source.HasField("format"):
        value = _raw_format(source.format, f"{path}.format", extra)
        if value is not None:
            raw["format"] = value
        if source.format.schema_registry_url:
            raw["schema_registry_url"] = source.format.schema_registry_url
    if source.max_records_per_partition < 0:
        extra.append(
            _unsupported(
                f"{path}.max_records_per_partition",
                f"must be >= 0, got {source.max_records_per_partition}",
                "set 0 for no bound, or a positive record count",
            )
        )
    elif source.max_records_per_partition > 0:
        extra.append(
            _unsupported(
                f"{path}.max_records_per_partition",
                "is not supported by this coordinator version yet",
                "leave it at 0 (no bound)",
            )
        )
    return raw


def _raw_kafka_sink(sink: common_pb2.KafkaSinkSpec, extra: list[SpecViolation]) -> dict[str, Any]:
    path = "sink.kafka"
    raw: dict[str, Any] = {}
    if sink.bootstrap_servers:
        raw["bootstrap_servers"] = sink.bootstrap_servers
    if sink.topic:
        raw["topic"] = sink.topic
    if sink.HasField("format"):
        value = _raw_format(sink.format, f"{path}.format", extra)
        if value is not None:
            raw["format"] = value
        if sink.format.schema_registry_url:
            raw["schema_registry_url"] = sink.format.schema_registry_url
    if sink.transaction_timeout_ms < 0:
        extra.append(
            _unsupported(
                f"{path}.transaction_timeout_ms",
                f"must be >= 0, got {sink.transaction_timeout_ms}",
                "set 0 for the default (900000 ms) or a positive duration",
            )
        )
    elif sink.transaction_timeout_ms > 0:
        extra.append(
            _unsupported(
                f"{path}.transaction_timeout_ms",
                "is not supported by this coordinator version yet",
                "leave it at 0 (the broker's cap, 900000 ms)",
            )
        )
    return raw


def _raw_format(fmt: common_pb2.FormatSpec, path: str, extra: list[SpecViolation]) -> str | None:
    if fmt.key_format not in (common_pb2.DATA_FORMAT_UNSPECIFIED, common_pb2.DATA_FORMAT_BYTES):
        extra.append(
            _unsupported(
                f"{path}.key_format",
                "key formats other than BYTES are not supported by this coordinator yet",
                "leave key_format unset",
            )
        )
    if not fmt.value_format:
        return None
    value = _enum_value(_FORMAT_FROM_PB, fmt.value_format, f"{path}.value_format", extra)
    return str(value) if value is not None else None


def spec_violations(spec: common_pb2.PipelineSpec) -> list[SpecViolation]:
    """Every violation of a proto pipeline spec (empty when CreatePipeline accepts it)."""
    raw, extra = raw_spec_from_proto(spec)
    own = {v.field for v in extra}
    # The domain would repeat, less precisely, what `extra` already says about a field
    # (or about the part under it).
    return extra + [
        v
        for v in validate_pipeline_spec(raw)
        if not any(v.field == f or v.field.startswith(f"{f}.") for f in own)
    ]


def spec_from_proto(spec: common_pb2.PipelineSpec) -> PipelineSpec:
    """The validated domain spec; InvalidArgument listing every violation by field path."""
    violations = spec_violations(spec)
    if violations:
        raise invalid_spec(violations)
    raw, _ = raw_spec_from_proto(spec)
    return parse_pipeline_spec(raw)


def spec_to_proto(spec: PipelineSpec) -> common_pb2.PipelineSpec:
    """The proto form of a stored domain spec (defaults written out)."""
    result = common_pb2.PipelineSpec(
        name=spec.name,
        source=common_pb2.SourceSpec(
            kafka=common_pb2.KafkaSourceSpec(
                bootstrap_servers=spec.source.bootstrap_servers,
                topics=list(spec.source.topics),
                starting_offsets=_STARTING_TO_PB[spec.source.starting_offsets],  # type: ignore[arg-type]
                format=common_pb2.FormatSpec(
                    value_format=_FORMAT_TO_PB[spec.source.format],  # type: ignore[arg-type]
                    schema_registry_url=spec.source.schema_registry_url or "",
                ),
            )
        ),
        sink=common_pb2.SinkSpec(
            kafka=common_pb2.KafkaSinkSpec(
                bootstrap_servers=spec.sink.bootstrap_servers,
                topic=spec.sink.topic,
                format=common_pb2.FormatSpec(
                    value_format=_FORMAT_TO_PB[spec.sink.format],  # type: ignore[arg-type]
                    schema_registry_url=spec.sink.schema_registry_url or "",
                ),
            )
        ),
        delivery=_DELIVERY_TO_PB[spec.delivery],  # type: ignore[arg-type]
        checkpoint=common_pb2.CheckpointSpec(
            interval_ms=spec.checkpoint.interval_ms, timeout_ms=spec.checkpoint.timeout_ms
        ),
        tasks_max=spec.tasks_max,
        errors=common_pb2.ErrorsSpec(
            tolerance=_TOLERANCE_TO_PB[spec.errors.tolerance],  # type: ignore[arg-type]
            dead_letter_topic=spec.errors.dead_letter_topic or "",
        ),
    )
    if spec.transform.sql is not None:
        result.transform.sql = spec.transform.sql
    elif spec.transform.python is not None:
        result.transform.python = spec.transform.python
    return result


# ---------------------------------------------------------------------------------------
# Resources: domain -> proto
# ---------------------------------------------------------------------------------------


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


def task_id_to_proto(task: TaskId) -> common_pb2.TaskId:
    """`<pipeline>/<index>` as a TaskId message."""
    pipeline, index = split_task_id(task)
    return common_pb2.TaskId(pipeline_name=pipeline, task_index=index)


def task_id_from_proto(task: common_pb2.TaskId, field_path: str) -> TaskId:
    """The domain id of a TaskId message; InvalidArgument naming `field_path` if empty."""
    if not task.pipeline_name:
        raise InvalidArgument.for_field(
            f"{field_path}.pipeline_name", "must name the task's pipeline"
        )
    if task.task_index < 0:
        raise InvalidArgument.for_field(
            f"{field_path}.task_index", f"must be >= 0, got {task.task_index}"
        )
    return task_id(PipelineId(task.pipeline_name), task.task_index)


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


def checkpoint_to_proto(record: CheckpointRecord, *, detailed: bool) -> common_pb2.Checkpoint:
    """The Checkpoint resource with its timings; `detailed` adds each task's part."""
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
    )
    if detailed:
        for trigger in record.tasks:
            result.tasks.append(
                common_pb2.TaskCheckpoint(
                    task_id=task_id_to_proto(trigger.task_id),
                    task_generation=trigger.task_generation,
                    executor_id=trigger.executor_id or "",
                    state=_task_checkpoint_state(record, trigger.task_id),  # type: ignore[arg-type]
                )
            )
    return result


def _task_checkpoint_state(record: CheckpointRecord, task: TaskId) -> int:
    if record.state is CheckpointState.COMMITTED:
        return common_pb2.TASK_CHECKPOINT_STATE_COMMITTED
    if record.state is CheckpointState.ABORTED:
        return common_pb2.TASK_CHECKPOINT_STATE_ABORTED
    if task in record.precommitted:
        return common_pb2.TASK_CHECKPOINT_STATE_PRECOMMITTED
    return common_pb2.TASK_CHECKPOINT_STATE_TRIGGERED


def sink_handle_to_proto(
    *, transactional_id: str, producer_id: int | None, producer_epoch: int | None, servers: str
) -> common_pb2.SinkHandle:
    """A Kafka sink handle; producer id and epoch stay absent when unknown."""
    kafka = common_pb2.KafkaTransactionHandle(
        transactional_id=transactional_id, bootstrap_servers=servers
    )
    if producer_id is not None:
        kafka.producer_id = producer_id
    if producer_epoch is not None:
        kafka.producer_epoch = producer_epoch
    return common_pb2.SinkHandle(kafka=kafka)


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
                    sink_handle_to_proto(
                        transactional_id=h.transactional_id,
                        producer_id=h.producer_id,
                        producer_epoch=h.producer_epoch,
                        servers=servers,
                    )
                    for task_handles in pending.handles
                    if task_handles.task_id == restore.task_id
                    for h in task_handles.handles
                ],
            )
            for pending in restore.to_commit
        ],
        abort_before_start=[
            sink_handle_to_proto(
                transactional_id=item.transactional_id,
                producer_id=item.producer_id,
                producer_epoch=item.producer_epoch,
                servers=servers,
            )
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
    for i, r in enumerate(request.source_ranges):
        if not r.topic or r.partition < 0 or r.start_offset < 0 or r.end_offset < r.start_offset:
            violations.append(
                FieldViolation(
                    f"source_ranges[{i}]",
                    f"{r.topic}[{r.partition}] [{r.start_offset}, {r.end_offset}) is not a "
                    "half-open range of a named partition with 0 <= start <= end",
                )
            )
        ranges.append(OffsetRange(r.topic, r.partition, r.start_offset, r.end_offset))
    handles: list[SinkHandle] = []
    for i, h in enumerate(request.sink_handles):
        if h.WhichOneof("handle") != "kafka":
            violations.append(
                FieldViolation(f"sink_handles[{i}]", "only Kafka transaction handles exist in v1")
            )
            continue
        if not h.kafka.transactional_id:
            violations.append(
                FieldViolation(f"sink_handles[{i}].kafka.transactional_id", "must be set")
            )
        if not h.kafka.HasField("producer_id") or not h.kafka.HasField("producer_epoch"):
            violations.append(
                FieldViolation(
                    f"sink_handles[{i}].kafka.producer_id",
                    "a pre-committed transaction needs its producer id and epoch to be "
                    "committed later; report the failure (ReportCheckpointFailure) instead",
                )
            )
            continue
        handles.append(
            SinkHandle(
                transactional_id=h.kafka.transactional_id,
                producer_id=h.kafka.producer_id,
                producer_epoch=h.kafka.producer_epoch,
            )
        )
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
    )


def page_size(value: int, field_path: str = "page_size") -> int:
    """A request's page size: 0 means the default, larger values are capped."""
    if value < 0:
        raise InvalidArgument.for_field(field_path, f"must be >= 0, got {value}")
    return min(value or _DEFAULT_PAGE, _MAX_PAGE)


def _int_token(token: str, field_path: str = "page_token") -> int | None:
    if not token:
        return None
    if not token.isdigit():
        raise InvalidArgument.for_field(
            field_path, "is not a token this server returned; pass next_page_token unchanged"
        )
    return int(token)


def _require(value: str, field_path: str, what: str) -> str:
    if not value:
        raise InvalidArgument.for_field(field_path, f"must be set to {what}")
    return value


# ---------------------------------------------------------------------------------------
# Fencing failures (FAILED_PRECONDITION + FencingFailure detail)
# ---------------------------------------------------------------------------------------


def _pack(message: Any) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def fencing_status(
    *, token: int, subject: str, presented: int, current: int, message: str
) -> grpc.Status:
    """The status of a call refused for a stale fencing token: FAILED_PRECONDITION with
    ErrorInfo (reason STALE_FENCING_TOKEN) and a lockgate.v1.FencingFailure detail."""
    token_name = common_pb2.FencingToken.Name(token)  # type: ignore[arg-type]
    status = status_pb2.Status(
        code=code_pb2.FAILED_PRECONDITION,
        message=message,
        details=[
            _pack(
                error_details_pb2.ErrorInfo(
                    reason="STALE_FENCING_TOKEN",
                    domain=ERROR_DOMAIN,
                    metadata={
                        "token": token_name.removeprefix("FENCING_TOKEN_").lower(),
                        "subject": subject,
                        "presented": str(presented),
                        "current": str(current),
                    },
                )
            ),
            _pack(
                common_pb2.FencingFailure(
                    token=token,  # type: ignore[arg-type]
                    subject=subject,
                    presented=presented,
                    current=current,
                )
            ),
        ],
    )
    result: grpc.Status = rpc_status.to_status(status)
    return result


# ---------------------------------------------------------------------------------------
# The servicer
# ---------------------------------------------------------------------------------------


_Method = TypeVar("_Method", bound=Callable[..., Any])


def _leader_only(method: _Method) -> _Method:
    """Answer NotLeader (UNAVAILABLE + `lockgate-leader`) on a follower before reading
    anything: the caller must retry at the leader, whatever the request holds."""

    @functools.wraps(method)
    def wrapper(self: CoordinatorServicer, request: Any, context: grpc.ServicerContext) -> Any:
        self._coordinator.require_fence()
        return method(self, request, context)

    return wrapper  # type: ignore[return-value]


class CoordinatorServicer(coordinator_pb2_grpc.CoordinatorServiceServicer):
    """CoordinatorService over one replica's `Coordinator` (see module docstring)."""

    def __init__(self, coordinator: Coordinator) -> None:
        self._coordinator = coordinator
        self._store = coordinator.store

    # ------------------------------------------------------------------ cluster

    def GetClusterInfo(
        self, request: coordinator_pb2.GetClusterInfoRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.GetClusterInfoResponse:
        """Leader, replicas and executors as this replica reads them from SQL."""
        lease = self._store.lease.read_lease()
        settings = self._coordinator.settings
        response = coordinator_pb2.GetClusterInfoResponse(responder_id=settings.coordinator_id)
        if lease.is_held and lease.holder is not None:
            response.leader_epoch.CopyFrom(
                common_pb2.LeaderEpoch(epoch=lease.leader_epoch, leader_id=lease.holder)
            )
            response.leader_address = lease.holder_address or ""
            response.lease_expire_time.FromMilliseconds(lease.expires_at_ms)
        # Replicas keep no membership rows yet: list the leader and this replica.
        members: dict[str, common_pb2.CoordinatorMember] = {}
        if lease.is_held and lease.holder is not None:
            members[lease.holder] = common_pb2.CoordinatorMember(
                coordinator_id=lease.holder,
                address=lease.holder_address or "",
                is_leader=True,
                last_seen_time=timestamp(lease.db_now_ms),
            )
        if settings.coordinator_id not in members:
            members[settings.coordinator_id] = common_pb2.CoordinatorMember(
                coordinator_id=settings.coordinator_id,
                address=settings.advertise,
                is_leader=False,
                last_seen_time=timestamp(lease.db_now_ms),
            )
        response.coordinators.extend(members[k] for k in sorted(members))
        executors, now_ms = self._store.executors.list_executors()
        tasks_by_executor: dict[str, list[TaskId]] = {}
        for task in self._store.pipelines.list_tasks():
            if task.executor_id is not None:
                tasks_by_executor.setdefault(task.executor_id, []).append(task.task_id)
        for executor in executors:
            response.executors.append(
                self._executor_to_proto(
                    executor, now_ms, tasks_by_executor.get(executor.executor_id, [])
                )
            )
        return response

    def _executor_to_proto(
        self, executor: ExecutorRecord, now_ms: int, tasks: Sequence[TaskId]
    ) -> common_pb2.Executor:
        alive = self._coordinator.is_alive(executor, now_ms)
        return common_pb2.Executor(
            executor_id=executor.executor_id,
            address=executor.address,
            executor_generation=executor.generation,
            session_id=_session_id(executor),
            state=(common_pb2.EXECUTOR_STATE_ALIVE if alive else common_pb2.EXECUTOR_STATE_EXPIRED),
            tasks=[task_id_to_proto(t) for t in tasks],
            register_time=timestamp(executor.registered_at_ms),
            last_heartbeat_time=timestamp(executor.last_heartbeat_ms),
        )

    # ------------------------------------------------------------------ membership

    @_leader_only
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
        record = self._coordinator.register_executor(
            executor_id=ExecutorId(request.executor_id), address=request.address
        )
        fence = self._coordinator.require_fence()
        tasks = [
            t for t in self._store.pipelines.list_tasks() if t.executor_id == record.executor_id
        ]
        settings = self._coordinator.settings
        return coordinator_pb2.RegisterExecutorResponse(
            executor_generation=record.generation,
            session_id=_session_id(record),
            leader_epoch=common_pb2.LeaderEpoch(epoch=fence.leader_epoch, leader_id=fence.holder),
            session_timeout_ms=settings.session_timeout_ms,
            heartbeat_interval_ms=settings.heartbeat_interval_ms,
            assignments=self._assignments(tasks),
        )

    @_leader_only
    def Heartbeat(
        self, request: coordinator_pb2.HeartbeatRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.HeartbeatResponse:
        """Leader only: keep the session, record task states, return the assignment."""
        _require(request.executor_id, "executor_id", "the executor's id")
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
        fence = self._coordinator.require_fence()
        if request.highest_leader_epoch_seen.epoch > fence.leader_epoch:
            # The executor has seen a newer leader: this replica's term is over (its lease
            # keeper notices on its next attempt).
            raise NotLeader(leader_address=None)
        try:
            tasks = self._coordinator.heartbeat(
                executor_id=ExecutorId(request.executor_id),
                generation=Generation(request.executor_generation),
                reports=reports,
            )
        except StaleGeneration as exc:
            current = self._store.executors.get_executor(
                executor_id=ExecutorId(request.executor_id)
            )
            self._abort_fenced(
                context,
                token=common_pb2.FENCING_TOKEN_EXECUTOR_GENERATION,
                subject=request.executor_id,
                presented=request.executor_generation,
                current=current.generation,
                message=exc.message,
            )
            raise
        settings = self._coordinator.settings
        return coordinator_pb2.HeartbeatResponse(
            leader_epoch=common_pb2.LeaderEpoch(epoch=fence.leader_epoch, leader_id=fence.holder),
            session_timeout_ms=settings.session_timeout_ms,
            heartbeat_interval_ms=settings.heartbeat_interval_ms,
            assignments=self._assignments(tasks),
        )

    @_leader_only
    def DeregisterExecutor(
        self, request: coordinator_pb2.DeregisterExecutorRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.DeregisterExecutorResponse:
        """Leader only: the executor leaves; its tasks move on the next pass."""
        _require(request.executor_id, "executor_id", "the executor's id")
        try:
            self._coordinator.deregister_executor(
                executor_id=ExecutorId(request.executor_id),
                generation=Generation(request.executor_generation),
            )
        except StaleGeneration as exc:
            current = self._store.executors.get_executor(
                executor_id=ExecutorId(request.executor_id)
            )
            self._abort_fenced(
                context,
                token=common_pb2.FENCING_TOKEN_EXECUTOR_GENERATION,
                subject=request.executor_id,
                presented=request.executor_generation,
                current=current.generation,
                message=exc.message,
            )
            raise
        return coordinator_pb2.DeregisterExecutorResponse()

    def _assignments(self, tasks: Iterable[TaskRecord]) -> list[coordinator_pb2.TaskAssignment]:
        pipelines: dict[PipelineId, PipelineRecord] = {}
        restored: dict[PipelineId, int] = {}
        running: list[TaskRecord] = []
        for task in tasks:
            pipeline = pipelines.get(task.pipeline_id)
            if pipeline is None:
                pipeline = self._store.pipelines.get_pipeline(pipeline_id=task.pipeline_id)
                pipelines[task.pipeline_id] = pipeline
                restored[task.pipeline_id] = _restored_checkpoint(
                    self._store.offsets.get_offsets(pipeline_id=task.pipeline_id)
                )
            if pipeline.target_state is not TargetState.STOPPED:
                running.append(task)
        # One read for every task's restore state (a heartbeat of an executor with many
        # tasks used to read each task's on its own).
        restores = self._store.checkpoints.restore_states(task_ids=[t.task_id for t in running])
        result: list[coordinator_pb2.TaskAssignment] = []
        specs = {pid: spec_to_proto(p.spec) for pid, p in pipelines.items()}
        for task in running:
            pipeline = pipelines[task.pipeline_id]
            restore = restores[task.task_id]
            result.append(
                coordinator_pb2.TaskAssignment(
                    task_id=task_id_to_proto(task.task_id),
                    task_generation=task.generation,
                    config_version=pipeline.config_version,
                    pipeline_spec=specs[task.pipeline_id],
                    source_partitions=[
                        common_pb2.TopicPartition(topic=tp.topic, partition=tp.partition)
                        for tp in task.partitions
                    ],
                    target_state=TARGET_STATE_TO_PB[pipeline.target_state],  # type: ignore[arg-type]
                    restore=restore_to_proto(
                        restore,
                        restored_checkpoint_id=restored[task.pipeline_id],
                        servers=pipeline.spec.sink.bootstrap_servers,
                    ),
                )
            )
        return result

    # ------------------------------------------------------------------ pipelines

    @_leader_only
    def CreatePipeline(
        self, request: coordinator_pb2.CreatePipelineRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.CreatePipelineResponse:
        """Leader only: validate, store at config version 1, split into tasks."""
        spec = spec_from_proto(request.spec)
        target = TARGET_STATE_FROM_PB.get(request.initial_target_state, TargetState.RUNNING)
        record = self._coordinator.create_pipeline(spec=spec, target_state=target)
        return coordinator_pb2.CreatePipelineResponse(pipeline=pipeline_to_proto(record))

    def GetPipeline(
        self, request: coordinator_pb2.GetPipelineRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.GetPipelineResponse:
        """Any replica: one pipeline."""
        name = _require(request.name, "name", "the pipeline's name")
        record = self._store.pipelines.get_pipeline(pipeline_id=PipelineId(name))
        return coordinator_pb2.GetPipelineResponse(pipeline=pipeline_to_proto(record))

    def ListPipelines(
        self, request: coordinator_pb2.ListPipelinesRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.ListPipelinesResponse:
        """Any replica: pipelines ordered by name, a page at a time."""
        records, token = self._store.pipelines.list_pipelines(
            page_size=page_size(request.page_size), page_token=request.page_token
        )
        return coordinator_pb2.ListPipelinesResponse(
            pipelines=[pipeline_to_proto(r) for r in records], next_page_token=token
        )

    @_leader_only
    def UpdatePipeline(
        self, request: coordinator_pb2.UpdatePipelineRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.UpdatePipelineResponse:
        """Leader only: replace the masked fields; config version + 1."""
        name = _require(request.name, "name", "the pipeline's name")
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
        current = self._store.pipelines.get_pipeline(pipeline_id=PipelineId(name))
        if request.expected_config_version and (
            request.expected_config_version != current.config_version
        ):
            raise Aborted(
                f"pipeline {name!r} is at config version {current.config_version}, not "
                f"{request.expected_config_version}; read it again and retry",
                reason="CONFIG_VERSION_MISMATCH",
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
        spec = spec_from_proto(merged)
        try:
            record = self._coordinator.update_pipeline(
                spec=spec, expected_version=request.expected_config_version or None
            )
        except FailedPrecondition as exc:
            if exc.reason == "CONFIG_VERSION_MISMATCH":
                raise Aborted(exc.message, reason=exc.reason) from None
            raise
        return coordinator_pb2.UpdatePipelineResponse(pipeline=pipeline_to_proto(record))

    @_leader_only
    def DeletePipeline(
        self, request: coordinator_pb2.DeletePipelineRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.DeletePipelineResponse:
        """Leader only: finish or abort its checkpoints, then remove it."""
        name = _require(request.name, "name", "the pipeline's name")
        self._coordinator.delete_pipeline(pipeline_id=PipelineId(name))
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
                for v in self._coordinator.topic_violations(spec_from_proto(request.spec))
            )
        name_taken = False
        if request.spec.name:
            try:
                self._store.pipelines.get_pipeline(pipeline_id=PipelineId(request.spec.name))
                name_taken = True
            except NotFound:
                name_taken = False
        return coordinator_pb2.ValidatePipelineResponse(
            valid=not found, violations=found, name_taken=name_taken
        )

    def _target(self, name: str, target: TargetState) -> common_pb2.Pipeline:
        record = self._coordinator.set_target_state(
            pipeline_id=PipelineId(name), target_state=target
        )
        return pipeline_to_proto(record)

    @_leader_only
    def PausePipeline(
        self, request: coordinator_pb2.PausePipelineRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.PausePipelineResponse:
        """Leader only: target PAUSED (refused for a STOPPED pipeline)."""
        name = _require(request.name, "name", "the pipeline's name")
        current = self._store.pipelines.get_pipeline(pipeline_id=PipelineId(name))
        if current.target_state is TargetState.STOPPED:
            raise FailedPrecondition(
                f"pipeline {name!r} is STOPPED; resume it first, then pause it",
                reason="PIPELINE_STOPPED",
            )
        return coordinator_pb2.PausePipelineResponse(
            pipeline=self._target(name, TargetState.PAUSED)
        )

    @_leader_only
    def ResumePipeline(
        self, request: coordinator_pb2.ResumePipelineRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.ResumePipelineResponse:
        """Leader only: target RUNNING."""
        name = _require(request.name, "name", "the pipeline's name")
        return coordinator_pb2.ResumePipelineResponse(
            pipeline=self._target(name, TargetState.RUNNING)
        )

    @_leader_only
    def StopPipeline(
        self, request: coordinator_pb2.StopPipelineRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.StopPipelineResponse:
        """Leader only: target STOPPED; tasks are released."""
        name = _require(request.name, "name", "the pipeline's name")
        return coordinator_pb2.StopPipelineResponse(
            pipeline=self._target(name, TargetState.STOPPED)
        )

    @_leader_only
    def RestartPipeline(
        self, request: coordinator_pb2.RestartPipelineRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.RestartPipelineResponse:
        """Leader only: re-plan the tasks; with include_tasks, new generations."""
        name = _require(request.name, "name", "the pipeline's name")
        pipeline_id = PipelineId(name)
        current = self._store.pipelines.get_pipeline(pipeline_id=pipeline_id)
        if current.target_state is TargetState.STOPPED:
            raise FailedPrecondition(
                f"pipeline {name!r} is STOPPED; resume it to restart it",
                reason="PIPELINE_STOPPED",
            )
        self._coordinator.replan_pipeline(pipeline_id=pipeline_id)
        restarted: list[TaskRecord] = []
        if request.include_tasks:
            restarted = self._coordinator.restart_tasks(
                pipeline_id=pipeline_id, only_failed=request.only_failed
            )
        return coordinator_pb2.RestartPipelineResponse(
            pipeline=pipeline_to_proto(self._store.pipelines.get_pipeline(pipeline_id=pipeline_id)),
            restarted_tasks=[task_id_to_proto(t.task_id) for t in restarted],
        )

    def GetPipelineStatus(
        self, request: coordinator_pb2.GetPipelineStatusRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.GetPipelineStatusResponse:
        """Any replica: desired state, each task's observed state, latest checkpoints."""
        name = _require(request.name, "name", "the pipeline's name")
        pipeline_id = PipelineId(name)
        pipeline = self._store.pipelines.get_pipeline(pipeline_id=pipeline_id)
        tasks = self._store.pipelines.list_tasks(pipeline_id=pipeline_id)
        complete = self._store.checkpoints.list_checkpoints(
            pipeline_id=pipeline_id,
            limit=1,
            states=[CheckpointState.COMPLETE, CheckpointState.COMMITTED],
        )
        committed = self._store.checkpoints.list_checkpoints(
            pipeline_id=pipeline_id, limit=1, states=[CheckpointState.COMMITTED]
        )
        in_flight = self._store.checkpoints.list_checkpoints(
            pipeline_id=pipeline_id,
            limit=100,
            states=[CheckpointState.TRIGGERED, CheckpointState.COMPLETE],
        )
        response = coordinator_pb2.GetPipelineStatusResponse(
            name=name,
            target_state=TARGET_STATE_TO_PB[pipeline.target_state],  # type: ignore[arg-type]
            config_version=pipeline.config_version,
            tasks=[
                task_to_proto(
                    t, target_state=pipeline.target_state, config_version=pipeline.config_version
                )
                for t in tasks
            ],
            last_complete_checkpoint_id=complete[0].checkpoint_id if complete else 0,
            last_committed_checkpoint_id=committed[0].checkpoint_id if committed else 0,
            in_flight_checkpoint_ids=sorted(c.checkpoint_id for c in in_flight),
        )
        if committed and committed[0].committed_at_ms is not None:
            response.last_commit_time.FromMilliseconds(committed[0].committed_at_ms)
        return response

    # ------------------------------------------------------------------ tasks

    def ListTasks(
        self, request: coordinator_pb2.ListTasksRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.ListTasksResponse:
        """Any replica: tasks by pipeline and index, optionally filtered."""
        size = page_size(request.page_size)
        start = _int_token(request.page_token) or 0
        pipeline_id = PipelineId(request.pipeline_name) if request.pipeline_name else None
        pipelines: dict[PipelineId, PipelineRecord] = {}
        if pipeline_id is not None:
            pipelines[pipeline_id] = self._store.pipelines.get_pipeline(pipeline_id=pipeline_id)
        tasks = [
            t
            for t in self._store.pipelines.list_tasks(pipeline_id=pipeline_id)
            if not request.executor_id or t.executor_id == request.executor_id
        ]
        page = tasks[start : start + size]
        result: list[common_pb2.Task] = []
        for t in page:
            if t.pipeline_id not in pipelines:
                pipelines[t.pipeline_id] = self._store.pipelines.get_pipeline(
                    pipeline_id=t.pipeline_id
                )
            p = pipelines[t.pipeline_id]
            result.append(
                task_to_proto(t, target_state=p.target_state, config_version=p.config_version)
            )
        more = start + size < len(tasks)
        return coordinator_pb2.ListTasksResponse(
            tasks=result, next_page_token=str(start + size) if more else ""
        )

    @_leader_only
    def RestartTask(
        self, request: coordinator_pb2.RestartTaskRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.RestartTaskResponse:
        """Not available yet: the store restarts a pipeline's tasks, not a single one."""
        task = task_id_from_proto(request.task_id, "task_id")
        self._store.pipelines.get_task(task_id=task)
        raise Unimplemented(
            "RestartTask of a single task is not available yet; use RestartPipeline with "
            "include_tasks (and only_failed to restart just the failed tasks)"
        )

    # ------------------------------------------------------------------ offsets

    def GetOffsets(
        self, request: coordinator_pb2.GetOffsetsRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.GetOffsetsResponse:
        """Any replica: where each source partition resumes."""
        name = _require(request.pipeline_name, "pipeline_name", "the pipeline's name")
        pipeline = self._store.pipelines.get_pipeline(pipeline_id=PipelineId(name))
        offsets = self._store.offsets.get_offsets(pipeline_id=PipelineId(name))
        return coordinator_pb2.GetOffsetsResponse(
            offsets=[
                common_pb2.PartitionOffset(
                    topic=o.topic, partition=o.partition, offset=o.next_offset
                )
                for o in offsets
            ],
            checkpoint_id=_restored_checkpoint(offsets),
            default_position=_STARTING_TO_PB[pipeline.spec.source.starting_offsets],  # type: ignore[arg-type]
        )

    @_leader_only
    def ResetOffsets(
        self, request: coordinator_pb2.ResetOffsetsRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.ResetOffsetsResponse:
        """Leader only: set where a STOPPED pipeline resumes."""
        name = _require(request.pipeline_name, "pipeline_name", "the pipeline's name")
        pipeline_id = PipelineId(name)
        pipeline = self._store.pipelines.get_pipeline(pipeline_id=pipeline_id)
        kind = request.WhichOneof("reset")
        if kind is None:
            raise InvalidArgument.for_field(
                "reset", "set either offsets (explicit per partition) or position"
            )
        if kind == "position":
            position = _STARTING_FROM_PB.get(request.position)
            if position is None:
                raise InvalidArgument.for_field("position", "must be EARLIEST or LATEST")
            if position is not pipeline.spec.source.starting_offsets:
                raise InvalidArgument.for_field(
                    "position",
                    f"only the pipeline's starting_offsets "
                    f"({pipeline.spec.source.starting_offsets.value}) can be restored by "
                    "position in this version; give explicit offsets instead",
                )
            self._coordinator.reset_offsets(pipeline_id=pipeline_id, offsets=None)
            return coordinator_pb2.ResetOffsetsResponse(default_position=request.position)
        known = {
            tp
            for t in self._store.pipelines.list_tasks(pipeline_id=pipeline_id)
            for tp in t.partitions
        }
        wanted: dict[TopicPartition, int] = {}
        violations: list[FieldViolation] = []
        for i, o in enumerate(request.offsets.offsets):
            tp = TopicPartition(o.topic, o.partition)
            if tp not in known:
                violations.append(
                    FieldViolation(
                        f"offsets.offsets[{i}]",
                        f"{o.topic}[{o.partition}] is not a source partition of {name!r}",
                    )
                )
            if o.offset < 0:
                violations.append(
                    FieldViolation(f"offsets.offsets[{i}].offset", f"must be >= 0, got {o.offset}")
                )
            wanted[tp] = o.offset
        if violations:
            raise InvalidArgument(
                "invalid ResetOffsets: "
                + "; ".join(f"{v.field}: {v.description}" for v in violations),
                violations=violations,
            )
        self._coordinator.reset_offsets(pipeline_id=pipeline_id, offsets=wanted)
        stored = self._store.offsets.get_offsets(pipeline_id=pipeline_id)
        return coordinator_pb2.ResetOffsetsResponse(
            offsets=[
                common_pb2.PartitionOffset(
                    topic=o.topic, partition=o.partition, offset=o.next_offset
                )
                for o in stored
            ]
        )

    # ------------------------------------------------------------------ checkpoints

    def ListCheckpoints(
        self, request: coordinator_pb2.ListCheckpointsRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.ListCheckpointsResponse:
        """Any replica: checkpoint history, newest first."""
        name = _require(request.pipeline_name, "pipeline_name", "the pipeline's name")
        size = page_size(request.page_size)
        before = _int_token(request.page_token)
        states: list[CheckpointState] | None = None
        if request.states:
            states = []
            for i, s in enumerate(request.states):
                state = CHECKPOINT_STATE_FROM_PB.get(s)
                if state is None:
                    raise InvalidArgument.for_field(f"states[{i}]", "is not a checkpoint state")
                states.append(state)
        records = self._store.checkpoints.list_checkpoints(
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
        name = _require(request.pipeline_name, "pipeline_name", "the pipeline's name")
        self._store.pipelines.get_pipeline(pipeline_id=PipelineId(name))
        record = self._store.checkpoints.get_checkpoint(
            pipeline_id=PipelineId(name), checkpoint_id=CheckpointId(request.checkpoint_id)
        )
        return coordinator_pb2.GetCheckpointResponse(
            checkpoint=checkpoint_to_proto(record, detailed=True)
        )

    # ------------------------------------------------------------------ reports

    @_leader_only
    def ReportPrecommit(
        self, request: coordinator_pb2.ReportPrecommitRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.ReportPrecommitResponse:
        """Leader only: a task's pre-commit of N; COMPLETE when it was the last."""
        precommit = precommit_from_proto(request)
        self._check_report_epoch(context, request.leader_epoch.epoch)
        try:
            record = self._coordinator.report_precommit(precommit=precommit)
        except StaleGeneration as exc:
            self._abort_stale_report(
                context,
                exc,
                executor_id=precommit.executor_id,
                executor_generation=precommit.executor_generation,
                task=precommit.task_id,
                task_generation=precommit.task_generation,
                checkpoint_id=precommit.checkpoint_id,
            )
            raise
        return coordinator_pb2.ReportPrecommitResponse(
            checkpoint_state=CHECKPOINT_STATE_TO_PB[record.state]  # type: ignore[arg-type]
        )

    @_leader_only
    def ReportCheckpointFailure(
        self,
        request: coordinator_pb2.ReportCheckpointFailureRequest,
        context: grpc.ServicerContext,
    ) -> coordinator_pb2.ReportCheckpointFailureResponse:
        """Leader only: a task could not pre-commit N; N (and later ones) abort."""
        if request.checkpoint_id <= 0:
            raise InvalidArgument.for_field("checkpoint_id", "must be >= 1")
        _require(request.executor_id, "executor_id", "the reporting executor's id")
        task = task_id_from_proto(request.task_id, "task_id")
        self._check_report_epoch(context, request.leader_epoch.epoch)
        try:
            state = self._coordinator.report_checkpoint_failure(
                pipeline_id=PipelineId(request.task_id.pipeline_name),
                checkpoint_id=CheckpointId(request.checkpoint_id),
                task=task,
                task_generation=Generation(request.task_generation),
                executor_id=ExecutorId(request.executor_id),
                executor_generation=Generation(request.executor_generation),
                error=request.error.message or "pre-commit failed",
                task_failed=request.task_failed,
            )
        except StaleGeneration as exc:
            self._abort_stale_report(
                context,
                exc,
                executor_id=ExecutorId(request.executor_id),
                executor_generation=Generation(request.executor_generation),
                task=task,
                task_generation=Generation(request.task_generation),
                checkpoint_id=CheckpointId(request.checkpoint_id),
            )
            raise
        return coordinator_pb2.ReportCheckpointFailureResponse(
            checkpoint_state=CHECKPOINT_STATE_TO_PB[state]  # type: ignore[arg-type]
        )

    @_leader_only
    def ReportTaskFailure(
        self, request: coordinator_pb2.ReportTaskFailureRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.ReportTaskFailureResponse:
        """Leader only: the task goes FAILED with its error until restarted."""
        _require(request.executor_id, "executor_id", "the reporting executor's id")
        task = task_id_from_proto(request.task_id, "task_id")
        message = request.error.message or "task failed"
        if request.error.HasField("record"):
            r = request.error.record
            message = f"{message} (record {r.topic}[{r.partition}]@{r.offset})"
        try:
            self._coordinator.report_task_failure(
                task=task,
                task_generation=Generation(request.task_generation),
                executor_id=ExecutorId(request.executor_id),
                executor_generation=Generation(request.executor_generation),
                error=message,
            )
        except StaleGeneration as exc:
            self._abort_stale_report(
                context,
                exc,
                executor_id=ExecutorId(request.executor_id),
                executor_generation=Generation(request.executor_generation),
                task=task,
                task_generation=Generation(request.task_generation),
                checkpoint_id=None,
            )
            raise
        return coordinator_pb2.ReportTaskFailureResponse()

    # ------------------------------------------------------------------ fencing helpers

    def _check_report_epoch(self, context: grpc.ServicerContext, presented: int) -> None:
        """Refuse a report answering a trigger of an older leader (its checkpoint was
        aborted when this leader took over); a newer epoch means this replica is stale."""
        fence = self._coordinator.require_fence()
        if presented and presented < fence.leader_epoch:
            self._abort_fenced(
                context,
                token=common_pb2.FENCING_TOKEN_LEADER_EPOCH,
                subject="",
                presented=presented,
                current=fence.leader_epoch,
                message=(
                    f"the report answers a trigger of leader epoch {presented}, but epoch "
                    f"{fence.leader_epoch} leads now and aborted that checkpoint; abort its "
                    "handles"
                ),
            )
        if presented > fence.leader_epoch:
            raise NotLeader(leader_address=None)  # a newer leader exists: this term is over

    def _abort_stale_report(
        self,
        context: grpc.ServicerContext,
        exc: LockgateError,
        *,
        executor_id: ExecutorId,
        executor_generation: Generation,
        task: TaskId,
        task_generation: Generation,
        checkpoint_id: CheckpointId | None,
    ) -> None:
        """Answer a StaleGeneration with the token that was stale and its current value."""
        try:
            executor = self._store.executors.get_executor(executor_id=executor_id)
            current_executor = int(executor.generation)
        except NotFound:
            current_executor = 0
        if current_executor != executor_generation:
            self._abort_fenced(
                context,
                token=common_pb2.FENCING_TOKEN_EXECUTOR_GENERATION,
                subject=executor_id,
                presented=executor_generation,
                current=current_executor,
                message=exc.message,
            )
        current_task = 0
        if checkpoint_id is not None:
            checkpoint = self._store.checkpoints.get_checkpoint(
                pipeline_id=split_task_id(task)[0], checkpoint_id=checkpoint_id
            )
            trigger = next((t for t in checkpoint.tasks if t.task_id == task), None)
            current_task = int(trigger.task_generation) if trigger else 0
        else:
            current_task = int(self._store.pipelines.get_task(task_id=task).generation)
        self._abort_fenced(
            context,
            token=common_pb2.FENCING_TOKEN_TASK_GENERATION,
            subject=task,
            presented=task_generation,
            current=current_task,
            message=exc.message,
        )

    @staticmethod
    def _abort_fenced(
        context: grpc.ServicerContext,
        *,
        token: int,
        subject: str,
        presented: int,
        current: int,
        message: str,
    ) -> None:
        context.abort_with_status(
            fencing_status(
                token=token, subject=subject, presented=presented, current=current, message=message
            )
        )


def _session_id(executor: ExecutorRecord) -> str:
    # Opaque to clients; unique per registration because the generation is.
    return f"{executor.executor_id}-g{executor.generation}-{executor.registered_at_ms}"


def _restored_checkpoint(offsets: Sequence[PartitionOffset]) -> int:
    """The COMPLETE checkpoint the offsets come from; 0 if any was set by a reset."""
    if not offsets or any(o.checkpoint_id is None for o in offsets):
        return 0
    return max(int(o.checkpoint_id or 0) for o in offsets)
