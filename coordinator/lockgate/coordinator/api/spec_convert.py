"""Pipeline spec: proto <-> domain, and the violations only the proto form can have.

`spec_from_proto` is what CreatePipeline, UpdatePipeline and ValidatePipeline accept;
`spec_to_proto` writes a stored spec back with its defaults. The pure functions here need
no gRPC context and are unit-tested alone. The in-flight checkpoint limit a spec may ask
for is the domain's `DEFAULT_MAX_IN_FLIGHT`, not a number of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.protobuf.unknown_fields import UnknownFieldSet

from lockgate.coordinator.domain.checkpoints import DEFAULT_MAX_IN_FLIGHT
from lockgate.coordinator.domain.errors import SpecViolation, invalid_spec
from lockgate.coordinator.domain.pipeline_spec import (
    Delivery,
    ErrorTolerance,
    PipelineSpec,
    RecordFormat,
    StartingOffsets,
    parse_pipeline_spec,
    validate_pipeline_spec,
)
from lockgate.v1 import common_pb2

_FORMAT_TO_PB: Mapping[RecordFormat, int] = {
    RecordFormat.BYTES: common_pb2.DATA_FORMAT_BYTES,
    RecordFormat.STRING: common_pb2.DATA_FORMAT_STRING,
    RecordFormat.JSON: common_pb2.DATA_FORMAT_JSON,
    RecordFormat.AVRO: common_pb2.DATA_FORMAT_AVRO,
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
        raw["checkpoint"] = _raw_checkpoint(spec.checkpoint, extra)
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


def _raw_checkpoint(
    checkpoint: common_pb2.CheckpointSpec, extra: list[SpecViolation]
) -> dict[str, Any]:
    raw: dict[str, Any] = {}
    if checkpoint.interval_ms:
        raw["interval_ms"] = checkpoint.interval_ms
    if checkpoint.timeout_ms:
        raw["timeout_ms"] = checkpoint.timeout_ms
    # The leader overlaps exactly DEFAULT_MAX_IN_FLIGHT checkpoints per pipeline;
    # another value would be silently not honoured, so it is refused.
    if checkpoint.max_concurrent not in (0, DEFAULT_MAX_IN_FLIGHT):
        extra.append(
            _unsupported(
                "checkpoint.max_concurrent",
                f"{checkpoint.max_concurrent} is not supported by this coordinator,"
                f" which runs {DEFAULT_MAX_IN_FLIGHT} checkpoints of a pipeline at once",
                f"set it to 0 (default) or {DEFAULT_MAX_IN_FLIGHT}",
            )
        )
    return raw


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
            STARTING_OFFSETS_FROM_PB, source.starting_offsets, f"{path}.starting_offsets", extra
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
                starting_offsets=STARTING_OFFSETS_TO_PB[spec.source.starting_offsets],  # type: ignore[arg-type]
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
