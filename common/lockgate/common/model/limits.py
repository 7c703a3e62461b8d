"""The bounds on what a caller may send: one table, read by every service and the CLI.

Every gRPC server checks each request against it before its servicer runs
(`lockgate.common.grpc_server.RequestLimitsInterceptor`), and the pipeline-spec parser checks
a spec file against the same numbers, so a request with 200,000 topics or a megabyte-long
pipeline name is refused at once, by field path and limit, with `INVALID_ARGUMENT`, before
any parsing, SQL or Kafka call spends time on it. The servers' transport limits (message
size, concurrent calls) sit beside them in `grpc_server`.

The check walks only the fields a request sets (`Message.ListFields`) and compares a repeated
field's length before it looks at any element, so refusing a huge list costs what counting
it costs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from lockgate.common.errors import FieldViolation, InvalidArgument

MAX_STRING_CHARS = 4_096
"""Longest string field (characters; bytes for a bytes field) unless the table below says more."""

MAX_TEXT_CHARS = 1_048_576
"""Longest free text: a SQL transform, an Avro schema, an error message or abort reason."""

MAX_REPEATED_ITEMS = 10_000
"""Most items of a repeated field unless the table below says fewer: tasks, offset ranges,
handles, partitions of an offset reset, task statuses of a heartbeat."""

MAX_TASK_PARTITIONS = MAX_REPEATED_ITEMS
"""Most source partitions one task reads: its pre-commit report lists a range for each, so
the coordinator refuses a `tasks_max` that would give a task more."""

MAX_SOURCE_TOPICS = 1_000
"""Most topics one pipeline reads (`source.kafka.topics`)."""

MAX_BOOTSTRAP_SERVERS = 100
"""Most `host:port` entries in a `bootstrap_servers` list."""

MAX_KAFKA_PROPERTIES = 200
"""Most Kafka client properties of one pipeline side (`source.kafka.properties`,
`sink.kafka.properties`); librdkafka has about 170 in all."""

MAX_PAGE_TOKEN_CHARS = 256
"""Longest page token; the servers issue far shorter ones."""

MAX_REPORTED_VIOLATIONS = 20
"""Most violations one refusal lists; it says how many more there were."""

# Per-field exceptions to the defaults, by the field's full proto name.
FIELD_LIMITS: Mapping[str, int] = {
    "lockgate.v1.KafkaSourceSpec.topics": MAX_SOURCE_TOPICS,
    "lockgate.v1.KafkaSourceSpec.properties": MAX_KAFKA_PROPERTIES,
    "lockgate.v1.KafkaSinkSpec.properties": MAX_KAFKA_PROPERTIES,
    "lockgate.v1.CommitCheckpointRequest.sink_properties": MAX_KAFKA_PROPERTIES,
    "lockgate.v1.AbortCheckpointRequest.sink_properties": MAX_KAFKA_PROPERTIES,
    "lockgate.v1.TransformSpec.sql": MAX_TEXT_CHARS,
    "lockgate.v1.TaskError.message": MAX_TEXT_CHARS,
    "lockgate.v1.AbortCheckpointRequest.reason": MAX_TEXT_CHARS,
    "lockgate.v1.RegisterSchemaRequest.schema": MAX_TEXT_CHARS,
    "lockgate.v1.LookupSchemaRequest.schema": MAX_TEXT_CHARS,
    "lockgate.v1.CheckCompatibilityRequest.schema": MAX_TEXT_CHARS,
    "lockgate.v1.ListPipelinesRequest.page_token": MAX_PAGE_TOKEN_CHARS,
    "lockgate.v1.ListTasksRequest.page_token": MAX_PAGE_TOKEN_CHARS,
    "lockgate.v1.ListCheckpointsRequest.page_token": MAX_PAGE_TOKEN_CHARS,
    "lockgate.v1.ListSchemaVersionsRequest.page_token": MAX_PAGE_TOKEN_CHARS,
    "lockgate.v1.ListSubjectsRequest.page_token": MAX_PAGE_TOKEN_CHARS,
    "lockgate.v1.ListSubjectVersionsRequest.page_token": MAX_PAGE_TOKEN_CHARS,
    "google.protobuf.FieldMask.paths": 100,
}

_TEXT_TYPES = (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES)


def field_limit(field: FieldDescriptor) -> int:
    """The bound on one field: characters of a string, items of a repeated field (each
    string of a repeated string field has `MAX_STRING_CHARS`)."""
    default = MAX_REPEATED_ITEMS if field.is_repeated else MAX_STRING_CHARS
    return FIELD_LIMITS.get(field.full_name, default)


def can_exceed_limits(message_type: type[Message]) -> bool:
    """Whether some value of a message type could break a bound: False only when every
    field is a singular number, bool or enum (``GetSchemaRequest``), so the per-call check
    of such requests can be skipped."""
    return any(
        field.is_repeated or field.type in (*_TEXT_TYPES, FieldDescriptor.TYPE_MESSAGE)
        for field in message_type.DESCRIPTOR.fields
    )


def request_violations(message: Message) -> list[FieldViolation]:
    """Every field of `message` over its bound, by field path (empty when within bounds)."""
    found: list[FieldViolation] = []
    _walk(message, "", found)
    return found


def _too_long(path: str, length: int, limit: int, unit: str) -> FieldViolation:
    return FieldViolation(path, f"has {length} {unit}, more than the limit of {limit}")


def _walk(message: Message, prefix: str, found: list[FieldViolation]) -> None:
    for field, value in message.ListFields():
        path = f"{prefix}{field.name}"
        is_message = field.type == FieldDescriptor.TYPE_MESSAGE
        if field.is_repeated:
            limit = field_limit(field)
            if len(value) > limit:
                found.append(_too_long(path, len(value), limit, "items"))
                continue
            entry = field.message_type
            if entry is not None and entry.GetOptions().map_entry:
                _walk_map(value, path, found)
                continue
            items: Any = value
            for i, item in enumerate(items):
                if is_message:
                    _walk(item, f"{path}[{i}].", found)
                elif field.type in _TEXT_TYPES and len(item) > MAX_STRING_CHARS:
                    found.append(
                        _too_long(f"{path}[{i}]", len(item), MAX_STRING_CHARS, "characters")
                    )
        elif is_message:
            _walk(value, f"{path}.", found)
        elif field.type in _TEXT_TYPES and len(value) > field_limit(field):
            found.append(_too_long(path, len(value), field_limit(field), "characters"))


def _walk_map(entries: Any, path: str, found: list[FieldViolation]) -> None:
    """A map field (options, properties): each key and value as a string field's."""
    for key in entries:
        where = f"{path}[{key[:64]!r}]" if isinstance(key, str) else f"{path}[{key}]"
        if isinstance(key, str | bytes) and len(key) > MAX_STRING_CHARS:
            found.append(_too_long(f"{where} (key)", len(key), MAX_STRING_CHARS, "characters"))
        value = entries[key]
        if isinstance(value, Message):
            _walk(value, f"{where}.", found)
        elif isinstance(value, str | bytes) and len(value) > MAX_STRING_CHARS:
            found.append(_too_long(where, len(value), MAX_STRING_CHARS, "characters"))


def check_request_limits(message: Message) -> None:
    """Raise InvalidArgument (reason `LIMIT_EXCEEDED`) listing the fields of `message`
    over their bounds, each with its path and limit."""
    found = request_violations(message)
    if not found:
        return
    shown = found[:MAX_REPORTED_VIOLATIONS]
    more = len(found) - len(shown)
    raise InvalidArgument(
        "request exceeds its limits: "
        + "; ".join(f"{v.field}: {v.description}" for v in shown)
        + (f"; and {more} more" if more else "")
        + " (see README, Limits)",
        violations=shown,
        reason="LIMIT_EXCEEDED",
    )
