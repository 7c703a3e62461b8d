"""The part of a pipeline spec the data plane needs, parsed into frozen dataclasses.

The coordinator validates the whole spec at create time; this module parses only the keys
the executor's batch uses (source, transform, sink, delivery, errors, order) and refuses
anything it cannot run with a ``SpecError`` naming the field and the fix.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lockgate.executor.errors import SpecError


class RecordFormat(enum.Enum):
    """How the bytes of a Kafka key or value are interpreted."""

    BYTES = "bytes"
    STRING = "string"
    JSON = "json"
    AVRO = "avro"


class Delivery(enum.Enum):
    """Delivery guarantee of the sink."""

    EXACTLY_ONCE = "exactly_once"
    AT_LEAST_ONCE = "at_least_once"


class ErrorTolerance(enum.Enum):
    """What a bad record does: fail the task (``none``) or go to the dead-letter topic."""

    NONE = "none"
    ALL = "all"


class OrderGuarantee(enum.Enum):
    """Whether per-key order must be kept (forbids splitting a partition's range)."""

    PER_KEY = "per_key"
    NONE = "none"


StartingOffsets = str  # "earliest" or "latest"


@dataclass(frozen=True)
class KafkaSourceSpec:
    """``source.kafka``: where records are read from."""

    bootstrap_servers: str
    topics: tuple[str, ...]
    starting_offsets: StartingOffsets = "earliest"
    format: RecordFormat = RecordFormat.BYTES
    key_format: RecordFormat = RecordFormat.BYTES
    #: Base URL of the schema registry's REST facade; required by the avro format.
    schema_registry_url: str | None = None


@dataclass(frozen=True)
class SqlTransform:
    """``transform.sql``: a query over the temp view ``input`` (and the topic's own name)."""

    sql: str


@dataclass(frozen=True)
class PythonTransform:
    """``transform.python``: ``module:function`` taking and returning a DataFrame."""

    module: str
    function: str


Transform = SqlTransform | PythonTransform | None


@dataclass(frozen=True)
class KafkaSinkSpec:
    """``sink.kafka``: where results are written."""

    bootstrap_servers: str
    topic: str
    format: RecordFormat = RecordFormat.BYTES
    key_format: RecordFormat = RecordFormat.BYTES
    #: Base URL of the schema registry's REST facade; required by the avro format.
    schema_registry_url: str | None = None

    @property
    def value_subject(self) -> str:
        """The subject whose newest schema avro values are written with (TopicNameStrategy)."""
        return f"{self.topic}-value"


@dataclass(frozen=True)
class ErrorPolicy:
    """``errors``: tolerance and the dead-letter topic used when tolerance is ``all``."""

    tolerance: ErrorTolerance = ErrorTolerance.NONE
    dead_letter_topic: str | None = None


@dataclass(frozen=True)
class DataPlaneSpec:
    """Everything one pre-commit batch needs to know about its pipeline."""

    name: str
    source: KafkaSourceSpec
    transform: Transform
    sink: KafkaSinkSpec
    delivery: Delivery = Delivery.EXACTLY_ONCE
    errors: ErrorPolicy = ErrorPolicy()
    order: OrderGuarantee = OrderGuarantee.PER_KEY


# Kafka's own rule for topic names (Topic.java: legal chars, at most 249).
_TOPIC_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_PY_TARGET_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def _mapping(value: object, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise SpecError(field, f"must be a mapping, got {type(value).__name__}")
    return value


def _string(value: object, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SpecError(field, "must be a non-empty string")
    return value


def _topic(value: object, field: str) -> str:
    topic = _string(value, field)
    if not _TOPIC_RE.match(topic) or topic in {".", ".."}:
        raise SpecError(
            field, f"{topic!r} is not a legal Kafka topic name (letters, digits, '.', '_', '-')"
        )
    return topic


def _enum(enum_type: type[enum.Enum], value: object, field: str, default: Any) -> Any:
    if value is None:
        return default
    allowed = [member.value for member in enum_type]
    if value not in allowed:
        raise SpecError(field, f"must be one of {', '.join(map(str, allowed))}, got {value!r}")
    return enum_type(value)


def _check_format(fmt: RecordFormat, field: str, *, registry_url: str | None, side: str) -> None:
    if fmt is not RecordFormat.AVRO:
        return
    if field.endswith("key_format"):
        raise SpecError(field, "avro keys are not supported; use bytes, string or json keys")
    if registry_url is None:
        raise SpecError(
            f"{side}.kafka.schema_registry_url",
            "is required when the format is avro, e.g. http://127.0.0.1:8081",
        )


def _registry_url(kafka: Mapping[str, Any], side: str) -> str | None:
    raw = kafka.get("schema_registry_url")
    if raw is None or raw == "":
        return None
    url = _string(raw, f"{side}.kafka.schema_registry_url")
    if not url.startswith(("http://", "https://")):
        raise SpecError(
            f"{side}.kafka.schema_registry_url",
            f"must be an http:// or https:// URL, got {url!r}",
        )
    return url.rstrip("/")


def _source(raw: Mapping[str, Any]) -> KafkaSourceSpec:
    kafka = _mapping(raw.get("kafka"), "source.kafka")
    topics_raw = kafka.get("topics")
    if isinstance(topics_raw, str):
        topics_raw = [topics_raw]
    if not isinstance(topics_raw, list) or not topics_raw:
        raise SpecError("source.kafka.topics", "must be a non-empty list of topic names")
    topics = tuple(_topic(t, f"source.kafka.topics[{i}]") for i, t in enumerate(topics_raw))
    starting = kafka.get("starting_offsets", "earliest")
    if starting not in ("earliest", "latest"):
        raise SpecError(
            "source.kafka.starting_offsets", f"must be earliest or latest, got {starting!r}"
        )
    fmt = _enum(RecordFormat, kafka.get("format"), "source.kafka.format", RecordFormat.BYTES)
    key_fmt = _enum(
        RecordFormat, kafka.get("key_format"), "source.kafka.key_format", RecordFormat.BYTES
    )
    registry_url = _registry_url(kafka, "source")
    _check_format(fmt, "source.kafka.format", registry_url=registry_url, side="source")
    _check_format(key_fmt, "source.kafka.key_format", registry_url=registry_url, side="source")
    return KafkaSourceSpec(
        bootstrap_servers=_string(kafka.get("bootstrap_servers"), "source.kafka.bootstrap_servers"),
        topics=topics,
        starting_offsets=str(starting),
        format=fmt,
        key_format=key_fmt,
        schema_registry_url=registry_url,
    )


def _transform(raw: object) -> Transform:
    if raw is None:
        return None
    transform = _mapping(raw, "transform")
    if set(transform) - {"sql", "python"} or len(transform) != 1:
        raise SpecError("transform", "must have exactly one key: sql or python")
    if "sql" in transform:
        return SqlTransform(sql=_string(transform["sql"], "transform.sql"))
    target = _string(transform["python"], "transform.python")
    if not _PY_TARGET_RE.match(target):
        raise SpecError(
            "transform.python", f"must look like 'package.module:function', got {target!r}"
        )
    module, function = target.split(":")
    return PythonTransform(module=module, function=function)


def _sink(raw: Mapping[str, Any]) -> KafkaSinkSpec:
    kafka = _mapping(raw.get("kafka"), "sink.kafka")
    fmt = _enum(RecordFormat, kafka.get("format"), "sink.kafka.format", RecordFormat.BYTES)
    key_fmt = _enum(
        RecordFormat, kafka.get("key_format"), "sink.kafka.key_format", RecordFormat.BYTES
    )
    registry_url = _registry_url(kafka, "sink")
    _check_format(fmt, "sink.kafka.format", registry_url=registry_url, side="sink")
    _check_format(key_fmt, "sink.kafka.key_format", registry_url=registry_url, side="sink")
    return KafkaSinkSpec(
        bootstrap_servers=_string(kafka.get("bootstrap_servers"), "sink.kafka.bootstrap_servers"),
        topic=_topic(kafka.get("topic"), "sink.kafka.topic"),
        format=fmt,
        key_format=key_fmt,
        schema_registry_url=registry_url,
    )


def _errors(raw: object) -> ErrorPolicy:
    if raw is None:
        return ErrorPolicy()
    errors = _mapping(raw, "errors")
    tolerance = _enum(
        ErrorTolerance, errors.get("tolerance"), "errors.tolerance", ErrorTolerance.NONE
    )
    dlq_raw = errors.get("dead_letter_topic")
    dlq = None if dlq_raw is None else _topic(dlq_raw, "errors.dead_letter_topic")
    if tolerance is ErrorTolerance.ALL and dlq is None:
        raise SpecError(
            "errors.dead_letter_topic",
            "is required when errors.tolerance is all: bad records must go somewhere",
        )
    return ErrorPolicy(tolerance=tolerance, dead_letter_topic=dlq)


def parse_data_plane_spec(raw: Mapping[str, Any]) -> DataPlaneSpec:
    """Parse the data-plane keys of a pipeline spec (already loaded from YAML or JSON).

    Raises ``SpecError`` naming the first wrong field. Keys the data plane does not use
    (``checkpoint``, ``tasks_max``…) are ignored here; the coordinator validates them.
    """
    spec = _mapping(raw, "spec")
    name = _string(spec.get("name"), "name")
    source = _source(_mapping(spec.get("source"), "source"))
    sink = _sink(_mapping(spec.get("sink"), "sink"))
    errors = _errors(spec.get("errors"))
    if errors.dead_letter_topic is not None and errors.dead_letter_topic == sink.topic:
        raise SpecError("errors.dead_letter_topic", "must differ from sink.kafka.topic")
    return DataPlaneSpec(
        name=name,
        source=source,
        transform=_transform(spec.get("transform")),
        sink=sink,
        delivery=_enum(Delivery, spec.get("delivery"), "delivery", Delivery.EXACTLY_ONCE),
        errors=errors,
        order=_enum(OrderGuarantee, spec.get("order"), "order", OrderGuarantee.PER_KEY),
    )
