"""The one converter of each protocol value to and from its `lockgate.v1` message.

Converting *from* a message validates it and raises `InvalidArgument` naming the field
path that was wrong (a report, a request or a spec sent by any client in any language);
converting *to* a message never fails. This is the only module of the model that imports
`*_pb2`, so services keep protobuf at their gRPC edges.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace
from typing import Any

from google.protobuf.unknown_fields import UnknownFieldSet

from lockgate.common.errors import InvalidArgument
from lockgate.common.model.handles import TransactionHandle
from lockgate.common.model.ids import PipelineId, TaskId, TransactionalId, split_task_id, task_id
from lockgate.common.model.kafka_properties import parse_kafka_properties
from lockgate.common.model.offsets import OffsetRange
from lockgate.common.model.pipeline_spec import (
    MAX_CONCURRENT_CHECKPOINTS,
    Delivery,
    ErrorTolerance,
    PipelineSpec,
    RecordFormat,
    SpecViolation,
    StartingOffsets,
    invalid_spec,
    parse_pipeline_spec,
    validate_pipeline_spec,
)
from lockgate.common.model.producer_batching import Compression
from lockgate.common.model.spec_checker import SpecChecker
from lockgate.v1 import common_pb2

# ---------------------------------------------------------------------------------------
# Ids, partitions, offset ranges, transaction handles
# ---------------------------------------------------------------------------------------


def task_id_to_proto(task: TaskId) -> common_pb2.TaskId:
    """`<pipeline>/<index>` as a TaskId message."""
    pipeline, index = split_task_id(task)
    return common_pb2.TaskId(pipeline_name=pipeline, task_index=index)


def task_id_from_proto(task: common_pb2.TaskId, field_path: str) -> TaskId:
    """The id of a TaskId message; InvalidArgument naming `field_path` if it names none."""
    if not task.pipeline_name:
        raise InvalidArgument.for_field(
            f"{field_path}.pipeline_name", "must name the task's pipeline"
        )
    if task.task_index < 0:
        raise InvalidArgument.for_field(
            f"{field_path}.task_index", f"must be >= 0, got {task.task_index}"
        )
    return task_id(PipelineId(task.pipeline_name), task.task_index)


def offset_range_to_proto(r: OffsetRange) -> common_pb2.OffsetRange:
    """An OffsetRange message."""
    return common_pb2.OffsetRange(
        topic=r.topic, partition=r.partition, start_offset=r.start_offset, end_offset=r.end_offset
    )


def offset_range_from_proto(r: common_pb2.OffsetRange, field_path: str) -> OffsetRange:
    """The range of an OffsetRange message; InvalidArgument naming `field_path` if it is
    not a half-open range of a named partition."""
    try:
        return OffsetRange(r.topic, r.partition, r.start_offset, r.end_offset)
    except ValueError as exc:
        raise InvalidArgument.for_field(field_path, str(exc)) from None


def handle_to_proto(handle: TransactionHandle) -> common_pb2.SinkHandle:
    """The SinkHandle message of a transaction; producer id and epoch stay absent when
    unknown."""
    kafka = common_pb2.KafkaTransactionHandle(
        transactional_id=handle.transactional_id, bootstrap_servers=handle.bootstrap_servers
    )
    if handle.producer_id is not None and handle.producer_epoch is not None:
        kafka.producer_id = handle.producer_id
        kafka.producer_epoch = handle.producer_epoch
    return common_pb2.SinkHandle(kafka=kafka)


def handle_from_proto(
    handle: common_pb2.SinkHandle, field_path: str, *, resumable: bool = False
) -> TransactionHandle:
    """The transaction of a SinkHandle message; InvalidArgument naming the field when it
    is not a Kafka handle, has no transactional id, or (`resumable`) lacks the producer id
    and epoch a later commit needs."""
    if handle.WhichOneof("handle") != "kafka":
        raise InvalidArgument.for_field(field_path, "only Kafka transaction handles exist in v1")
    kafka = handle.kafka
    if not kafka.transactional_id:
        raise InvalidArgument.for_field(
            f"{field_path}.kafka.transactional_id", "is required (the transaction's id)"
        )
    has_id, has_epoch = kafka.HasField("producer_id"), kafka.HasField("producer_epoch")
    if resumable and not (has_id and has_epoch):
        raise InvalidArgument.for_field(
            f"{field_path}.kafka.producer_id",
            "a pre-committed transaction needs its producer id and epoch to be committed "
            "later; report the failure (ReportCheckpointFailure) instead",
        )
    try:
        return TransactionHandle(
            transactional_id=TransactionalId(kafka.transactional_id),
            producer_id=kafka.producer_id if has_id else None,
            producer_epoch=kafka.producer_epoch if has_epoch else None,
            bootstrap_servers=kafka.bootstrap_servers,
        )
    except ValueError as exc:
        raise InvalidArgument.for_field(f"{field_path}.kafka", str(exc)) from None


def sink_properties_from_proto(properties: Mapping[str, str]) -> dict[str, str]:
    """The sink's Kafka properties a commit or abort call carries (`sink_properties`),
    checked as the spec parser checks `sink.kafka.properties`; InvalidArgument naming each
    refused key."""
    checker = SpecChecker()
    found = parse_kafka_properties(checker, {"properties": dict(properties)}, "sink", side="sink")
    if found is None:
        raise InvalidArgument(
            "invalid sink_properties: " + "; ".join(str(v) for v in checker.violations),
            violations=[
                replace(
                    v, field=v.field.replace("sink.properties", "sink_properties", 1)
                ).to_field_violation()
                for v in checker.violations
            ],
        )
    return dict(found)


# ---------------------------------------------------------------------------------------
# Pipeline spec
# ---------------------------------------------------------------------------------------

_FORMAT_TO_PB: Mapping[RecordFormat, int] = {
    RecordFormat.BYTES: common_pb2.DATA_FORMAT_BYTES,
    RecordFormat.STRING: common_pb2.DATA_FORMAT_STRING,
    RecordFormat.JSON: common_pb2.DATA_FORMAT_JSON,
    RecordFormat.AVRO: common_pb2.DATA_FORMAT_AVRO,
    RecordFormat.JSON_SCHEMA: common_pb2.DATA_FORMAT_JSON_SCHEMA,
    RecordFormat.PROTOBUF: common_pb2.DATA_FORMAT_PROTOBUF,
}
_FORMAT_FROM_PB: Mapping[int, RecordFormat] = {v: k for k, v in _FORMAT_TO_PB.items()}
STARTING_OFFSETS_TO_PB: Mapping[StartingOffsets, int] = {
    StartingOffsets.EARLIEST: common_pb2.OFFSET_POSITION_EARLIEST,
    StartingOffsets.LATEST: common_pb2.OFFSET_POSITION_LATEST,
}
STARTING_OFFSETS_FROM_PB: Mapping[int, StartingOffsets] = {
    v: k for k, v in STARTING_OFFSETS_TO_PB.items()
}
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
_COMPRESSION_TO_PB: Mapping[Compression, int] = {
    Compression.NONE: common_pb2.KAFKA_COMPRESSION_NONE,
    Compression.GZIP: common_pb2.KAFKA_COMPRESSION_GZIP,
    Compression.SNAPPY: common_pb2.KAFKA_COMPRESSION_SNAPPY,
    Compression.LZ4: common_pb2.KAFKA_COMPRESSION_LZ4,
    Compression.ZSTD: common_pb2.KAFKA_COMPRESSION_ZSTD,
}
_COMPRESSION_FROM_PB: Mapping[int, Compression] = {v: k for k, v in _COMPRESSION_TO_PB.items()}


def _unknown_kinds(message: Any) -> list[int]:
    """Field numbers a newer client set in a oneof this version does not know."""
    unknown = UnknownFieldSet(message)
    return sorted({unknown[i].field_number for i in range(len(unknown))})


def _enum_value(table: Mapping[int, Any], value: int, path: str, extra: list[SpecViolation]) -> Any:
    if value in table:
        return table[value].value
    extra.append(
        SpecViolation(path, f"enum value {value} is not known", "use one of the documented values")
    )
    return None


def raw_spec_from_proto(
    spec: common_pb2.PipelineSpec, *, written: Collection[str] = ()
) -> tuple[dict[str, Any], list[SpecViolation]]:
    """The spec as the parser's raw mapping, plus the violations only the proto form can
    have (a source or sink type from a newer client, fields this version cannot honour).

    Proto3 zero values mean "unset" and are left out, so the parser applies its defaults
    and reports missing required fields by their proto paths. On the wire 0 keeps that
    meaning; a client that knows which values its user wrote (the CLI reading a file)
    names their dotted paths in `written`, and a number written as 0 is then checked as
    the value it is (`checkpoint: {interval_ms: 0}` is refused, not read as the default).
    """
    raw: dict[str, Any] = {}
    extra: list[SpecViolation] = []
    if spec.name:
        raw["name"] = spec.name
    if spec.HasField("source"):
        raw["source"] = _raw_source(spec.source, extra, written)
    if spec.HasField("transform"):
        kind = spec.transform.WhichOneof("transform")
        if kind == "sql":
            raw["transform"] = {"sql": spec.transform.sql}
        elif kind == "python":
            raw["transform"] = {"python": spec.transform.python}
    if spec.HasField("sink"):
        raw["sink"] = _raw_sink(spec.sink, extra, written)
    if spec.delivery:
        raw["delivery"] = _enum_value(_DELIVERY_FROM_PB, spec.delivery, "delivery", extra)
    if spec.HasField("checkpoint"):
        raw["checkpoint"] = _raw_checkpoint(spec.checkpoint, extra, written)
    if spec.tasks_max or "tasks_max" in written:
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
    if spec.allow_reordering:
        raw["allow_reordering"] = True
    return raw, extra


def _raw_source(
    source: common_pb2.SourceSpec, extra: list[SpecViolation], written: Collection[str]
) -> dict[str, Any]:
    if source.WhichOneof("source") == "kafka":
        return {"kafka": _raw_kafka_source(source.kafka, extra, written)}
    extra.extend(
        SpecViolation(
            "source",
            f"unknown source type (SourceSpec field {number}, sent by a newer client)",
            "use a `kafka` source, or upgrade the coordinator",
        )
        for number in _unknown_kinds(source)
    )
    return {}


def _raw_sink(
    sink: common_pb2.SinkSpec, extra: list[SpecViolation], written: Collection[str]
) -> dict[str, Any]:
    if sink.WhichOneof("sink") == "kafka":
        return {"kafka": _raw_kafka_sink(sink.kafka, extra, written)}
    unknown = _unknown_kinds(sink)
    extra.extend(
        SpecViolation(
            "sink",
            f"unknown sink type (SinkSpec field {n}, sent by a newer client)",
            "use a `kafka` sink, or upgrade the coordinator",
        )
        for n in unknown
    )
    # `{"kafka": None}` keeps the parser from adding "names no sink" to a newer sink type.
    return {"kafka": None} if unknown else {}


def _raw_checkpoint(
    checkpoint: common_pb2.CheckpointSpec, extra: list[SpecViolation], written: Collection[str]
) -> dict[str, Any]:
    raw: dict[str, Any] = {}
    if checkpoint.interval_ms or "checkpoint.interval_ms" in written:
        raw["interval_ms"] = checkpoint.interval_ms
    if checkpoint.timeout_ms or "checkpoint.timeout_ms" in written:
        raw["timeout_ms"] = checkpoint.timeout_ms
    # The leader overlaps exactly MAX_CONCURRENT_CHECKPOINTS checkpoints per pipeline;
    # another value would be silently not honoured, so it is refused.
    if checkpoint.max_concurrent not in (0, MAX_CONCURRENT_CHECKPOINTS):
        extra.append(
            SpecViolation(
                "checkpoint.max_concurrent",
                f"{checkpoint.max_concurrent} is not supported by this coordinator,"
                f" which runs {MAX_CONCURRENT_CHECKPOINTS} checkpoints of a pipeline at once",
                f"set it to 0 (default) or {MAX_CONCURRENT_CHECKPOINTS}",
            )
        )
    return raw


def _raw_kafka_source(
    source: common_pb2.KafkaSourceSpec, extra: list[SpecViolation], written: Collection[str]
) -> dict[str, Any]:
    path = "source.kafka"
    raw: dict[str, Any] = {}
    if source.bootstrap_servers:
        raw["bootstrap_servers"] = source.bootstrap_servers
    if source.topics:
        raw["topics"] = list(source.topics)
    if source.starting_offsets:
        raw["starting_offsets"] = _enum_value(
            STARTING_OFFSETS_FROM_PB, source.starting_offsets, f"{path}.starting_offsets", extra
        )
    if source.HasField("format"):
        raw.update(_raw_format(source.format, f"{path}.format", extra))
    if source.max_records_per_partition or f"{path}.max_records_per_partition" in written:
        raw["max_records_per_partition"] = source.max_records_per_partition
    if source.properties:
        raw["properties"] = dict(source.properties)
    return raw


def _raw_kafka_sink(
    sink: common_pb2.KafkaSinkSpec, extra: list[SpecViolation], written: Collection[str]
) -> dict[str, Any]:
    path = "sink.kafka"
    raw: dict[str, Any] = {}
    if sink.bootstrap_servers:
        raw["bootstrap_servers"] = sink.bootstrap_servers
    if sink.topic:
        raw["topic"] = sink.topic
    if sink.HasField("format"):
        raw.update(_raw_format(sink.format, f"{path}.format", extra))
    if sink.transactional_id_prefix:
        raw["transactional_id_prefix"] = sink.transactional_id_prefix
    if sink.transaction_timeout_ms or f"{path}.transaction_timeout_ms" in written:
        raw["transaction_timeout_ms"] = sink.transaction_timeout_ms
    if sink.HasField("linger_ms"):  # optional: 0 (no linger) is a value, not "unset"
        raw["linger_ms"] = sink.linger_ms
    if sink.batch_size or f"{path}.batch_size" in written:
        raw["batch_size"] = sink.batch_size
    if sink.compression:
        raw["compression"] = _enum_value(
            _COMPRESSION_FROM_PB, sink.compression, f"{path}.compression", extra
        )
    if sink.properties:
        raw["properties"] = dict(sink.properties)
    return raw


def _raw_format(
    fmt: common_pb2.FormatSpec, path: str, extra: list[SpecViolation]
) -> dict[str, Any]:
    """A FormatSpec as the parser's `format`, `key_format` and `schema_registry_url` keys;
    the parser reports a bad value by its own path, so `value_format` is named here only
    for an enum number it does not know."""
    raw: dict[str, Any] = {}
    if fmt.value_format:
        value = _enum_value(_FORMAT_FROM_PB, fmt.value_format, f"{path}.value_format", extra)
        if value is not None:
            raw["format"] = value
    if fmt.key_format:
        key = _enum_value(_FORMAT_FROM_PB, fmt.key_format, f"{path}.key_format", extra)
        if key is not None:
            raw["key_format"] = key
    if fmt.schema_registry_url:
        raw["schema_registry_url"] = fmt.schema_registry_url
    return raw


def spec_violations(
    spec: common_pb2.PipelineSpec, *, written: Collection[str] = ()
) -> list[SpecViolation]:
    """Every violation of a proto pipeline spec (empty when CreatePipeline accepts it);
    `written` as for `raw_spec_from_proto`."""
    raw, extra = raw_spec_from_proto(spec, written=written)
    own = {v.field for v in extra}
    # The parser would repeat, less precisely, what `extra` already says about a field
    # (or about the part under it).
    return extra + [
        v
        for v in validate_pipeline_spec(raw)
        if not any(v.field == f or v.field.startswith(f"{f}.") for f in own)
    ]


def spec_from_proto(spec: common_pb2.PipelineSpec) -> PipelineSpec:
    """The validated spec; InvalidArgument listing every violation by field path."""
    violations = spec_violations(spec)
    if violations:
        raise invalid_spec(violations)
    raw, _ = raw_spec_from_proto(spec)
    return parse_pipeline_spec(raw)


def _format_to_proto(
    value: RecordFormat, key: RecordFormat, registry_url: str | None
) -> common_pb2.FormatSpec:
    return common_pb2.FormatSpec(
        value_format=_FORMAT_TO_PB[value],  # type: ignore[arg-type]
        key_format=(
            _FORMAT_TO_PB[key] if key is not RecordFormat.BYTES else 0  # type: ignore[arg-type]
        ),
        schema_registry_url=registry_url or "",
    )


def spec_to_proto(spec: PipelineSpec) -> common_pb2.PipelineSpec:
    """The proto form of a validated spec (defaults written out)."""
    source, sink = spec.source, spec.sink
    result = common_pb2.PipelineSpec(
        name=spec.name,
        source=common_pb2.SourceSpec(
            kafka=common_pb2.KafkaSourceSpec(
                bootstrap_servers=source.bootstrap_servers,
                topics=list(source.topics),
                starting_offsets=STARTING_OFFSETS_TO_PB[source.starting_offsets],  # type: ignore[arg-type]
                format=_format_to_proto(
                    source.format, source.key_format, source.schema_registry_url
                ),
                max_records_per_partition=source.max_records_per_partition,
                properties=dict(source.properties),
            )
        ),
        sink=common_pb2.SinkSpec(
            kafka=common_pb2.KafkaSinkSpec(
                bootstrap_servers=sink.bootstrap_servers,
                topic=sink.topic,
                format=_format_to_proto(sink.format, sink.key_format, sink.schema_registry_url),
                transactional_id_prefix=spec.transactional_id_prefix,
                transaction_timeout_ms=sink.transaction_timeout_ms,
                properties=dict(sink.properties),
                linger_ms=sink.batching.linger_ms,
                batch_size=sink.batching.batch_size,
                compression=_COMPRESSION_TO_PB[sink.batching.compression],  # type: ignore[arg-type]
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
        allow_reordering=spec.allow_reordering,
    )
    if spec.transform.sql is not None:
        result.transform.sql = spec.transform.sql
    elif spec.transform.python is not None:
        result.transform.python = spec.transform.python
    return result
