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
from dataclasses import dataclass
from typing import Any, cast

from google.protobuf.descriptor import Descriptor, FieldDescriptor
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
    return _walk(message, _SIZED_LEVELS)


def _too_long(path: str, length: int, limit: int, unit: str) -> FieldViolation:
    return FieldViolation(path, f"has {length} {unit}, more than the limit of {limit}")


def _under(prefix: str, found: list[FieldViolation]) -> list[FieldViolation]:
    """A nested message's violations, their paths under the field that holds it."""
    return [FieldViolation(f"{prefix}{v.field}", v.description) for v in found]


@dataclass(frozen=True)
class _Rule:
    """What to check of one field, worked out once per field."""

    kind: int  # _NUMBER, _TEXT, _MESSAGE or _MAP
    repeated: bool
    limit: int


_NUMBER, _TEXT, _MESSAGE, _MAP = range(4)
_RULES: dict[FieldDescriptor, _Rule] = {}


def _rule(field: FieldDescriptor) -> _Rule:
    rule = _RULES.get(field)
    if rule is None:
        entry = field.message_type
        if entry is not None and entry.GetOptions().map_entry:
            kind = _MAP
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            kind = _MESSAGE
        elif field.type in _TEXT_TYPES:
            kind = _TEXT
        else:
            kind = _NUMBER
        rule = _RULES.setdefault(field, _Rule(kind, field.is_repeated, field_limit(field)))
    return rule


_SMALLEST: dict[Descriptor, int] = {}


def _smallest_bound(message_type: Descriptor) -> int:
    """The smallest bound of any field a message of this type can hold, however deep:
    the least over every message type it can reach (a recursive type included).

    A message whose encoding is no longer than it breaks no bound: a string has no more
    characters than its UTF-8 bytes, and a repeated field's or a map's every item takes a
    byte at least. So a request that small is not walked at all (nearly every request:
    a 50-report ReportPrecommits of about 3.5 kB took 1 ms to walk, its size 20 us)."""
    found = _SMALLEST.get(message_type)
    if found is None:
        bounds = [MAX_STRING_CHARS]  # each string of a list, each key and value of a map
        reached, to_visit = {message_type}, [message_type]
        while to_visit:
            for field in to_visit.pop().fields:
                rule = _rule(field)
                if rule.repeated or rule.kind == _TEXT:
                    bounds.append(rule.limit)
                nested = field.message_type
                if nested is not None and nested not in reached:
                    reached.add(nested)
                    to_visit.append(nested)
        found = _SMALLEST[message_type] = min(bounds)
    return found


#: How many levels of a request are measured (`ByteSize`) before they are walked: each
#: level measures its bytes again, so a deeply nested message costs a few times its size.
_SIZED_LEVELS = 3


def _walk(message: Message, sized: int) -> list[FieldViolation]:
    if sized and message.ByteSize() <= _smallest_bound(cast(Descriptor, message.DESCRIPTOR)):
        return []
    sized = max(sized - 1, 0)
    found: list[FieldViolation] = []
    for field, value in message.ListFields():
        rule = _rule(field)
        if not rule.repeated:
            if rule.kind == _MESSAGE:
                if nested := _walk(value, sized):
                    found += _under(f"{field.name}.", nested)
            elif rule.kind == _TEXT and len(value) > rule.limit:
                found.append(_too_long(field.name, len(value), rule.limit, "characters"))
        elif len(value) > rule.limit:
            found.append(_too_long(field.name, len(value), rule.limit, "items"))
        elif rule.kind == _MAP:
            _walk_map(value, field.name, found)
        elif rule.kind == _MESSAGE:
            for i, item in enumerate(value):
                if nested := _walk(item, sized):
                    found += _under(f"{field.name}[{i}].", nested)
        elif rule.kind == _TEXT:
            for i, item in enumerate(value):
                if len(item) > MAX_STRING_CHARS:
                    found.append(
                        _too_long(f"{field.name}[{i}]", len(item), MAX_STRING_CHARS, "characters")
                    )
    return found


def _walk_map(entries: Any, path: str, found: list[FieldViolation]) -> None:
    """A map field (options, properties): each key and value as a string field's."""
    for key in entries:
        where = f"{path}[{key[:64]!r}]" if isinstance(key, str) else f"{path}[{key}]"
        if isinstance(key, str | bytes) and len(key) > MAX_STRING_CHARS:
            found.append(_too_long(f"{where} (key)", len(key), MAX_STRING_CHARS, "characters"))
        value = entries[key]
        if isinstance(value, Message):
            found += _under(f"{where}.", _walk(value, 0))
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
