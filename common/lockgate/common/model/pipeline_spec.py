"""The pipeline spec: its shape, its defaults, and its validation — one parser for all.

The coordinator validates a spec with it when a pipeline is created, the executor reads the
spec it is sent with it, and the CLI checks a file with it before sending it, so a spec the
coordinator accepts is, by construction, one the executor runs. `lockgate.common.model.proto`
converts it to and from `lockgate.v1.PipelineSpec`.

Validation is one pure function that returns every violation at once (field path, what
is wrong, how to fix it), so a user fixes a config in one round trip rather than one
error per attempt. Unknown keys are violations too: a misspelt `tasks_mx` silently
falling back to a default is worse than an error.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from lockgate.common.model.ids import PIPELINE_ID_PATTERN, PipelineId
from lockgate.common.model.kafka_properties import KafkaProperties, parse_kafka_properties
from lockgate.common.model.limits import MAX_SOURCE_TOPICS, MAX_TEXT_CHARS
from lockgate.common.model.producer_batching import (
    BATCHING_FIELDS,
    ProducerBatching,
    parse_producer_batching,
)
from lockgate.common.model.spec_checker import SpecChecker

# Re-exported: callers take a spec's violations and error from the parser's module.
from lockgate.common.model.spec_checker import SpecViolation as SpecViolation
from lockgate.common.model.spec_checker import invalid_spec as invalid_spec
from lockgate.common.model.sql_transform import sql_transform_problem

MAX_CONCURRENT_CHECKPOINTS = 2
"""Checkpoints of one pipeline in flight at once (TRIGGERED or COMPLETE: N commits while
N+1 pre-commits); `checkpoint.max_concurrent` accepts only this value (or 0 for it). It
must stay below the transactional-id pool of a task (the coordinator's slots)."""


class RecordFormat(enum.StrEnum):
    """How record values are encoded on a Kafka topic."""

    BYTES = "bytes"
    STRING = "string"
    JSON = "json"
    AVRO = "avro"
    JSON_SCHEMA = "json_schema"
    PROTOBUF = "protobuf"

    @property
    def needs_registry(self) -> bool:
        """Whether the format frames records with a schema-registry id (Confluent's wire
        format), so its side needs `schema_registry_url`."""
        return self in (RecordFormat.AVRO, RecordFormat.JSON_SCHEMA, RecordFormat.PROTOBUF)


class StartingOffsets(enum.StrEnum):
    """Where a pipeline with no checkpoint yet starts reading a partition."""

    EARLIEST = "earliest"
    LATEST = "latest"


class Delivery(enum.StrEnum):
    """The delivery guarantee a pipeline asks for."""

    EXACTLY_ONCE = "exactly_once"
    AT_LEAST_ONCE = "at_least_once"


class ErrorTolerance(enum.StrEnum):
    """What a bad record does: fail the task (`none`) or go to a dead-letter topic (`all`)."""

    NONE = "none"
    ALL = "all"


@dataclass(frozen=True)
class KafkaSource:
    """The Kafka topics a pipeline reads."""

    bootstrap_servers: str
    topics: tuple[str, ...]
    starting_offsets: StartingOffsets
    format: RecordFormat
    schema_registry_url: str | None = None
    """Base URL of the schema registry's REST facade; required by avro, json_schema and
    protobuf."""
    key_format: RecordFormat = RecordFormat.BYTES
    """How record keys are decoded (bytes, string or json; registry formats are refused)."""
    max_records_per_partition: int = 0
    """Most records one checkpoint reads from one partition (0: the default,
    `DEFAULT_MAX_RECORDS_PER_PARTITION`), so a backlog drains in checkpoints that each fit."""
    properties: KafkaProperties = ()
    """Kafka client properties (librdkafka names) of every client of the source cluster;
    secrets as `${env:...}`/`${file:...}` references (`model.kafka_properties`)."""


@dataclass(frozen=True)
class Transform:
    """The PySpark step: a SQL statement over the view `input`, or a Python function."""

    sql: str | None
    python: str | None
    """`module:function`, called with a DataFrame and returning a DataFrame."""

    @property
    def python_target(self) -> tuple[str, str] | None:
        """`(module, function)` of a Python transform; None for SQL or the identity."""
        if self.python is None:
            return None
        module, _, function = self.python.partition(":")
        return module, function


@dataclass(frozen=True)
class KafkaSink:
    """The Kafka topic a pipeline writes."""

    bootstrap_servers: str
    topic: str
    format: RecordFormat
    schema_registry_url: str | None = None
    """Base URL of the schema registry's REST facade; required by avro, json_schema and
    protobuf. Their values are written with the newest schema registered under
    `<topic>-value` (protobuf: its first message)."""
    key_format: RecordFormat = RecordFormat.BYTES
    """How record keys are encoded (bytes, string or json; registry formats are refused)."""
    transactional_id_prefix: str | None = None
    """The start of the producers' `transactional.id`s; None for `lockgate-<pipeline>`
    (`PipelineSpec.transactional_id_prefix` gives the one in force)."""
    transaction_timeout_ms: int = 0
    """Kafka `transaction.timeout.ms` of the sink's transactions (0: the default,
    `DEFAULT_TRANSACTION_TIMEOUT_MS`)."""
    properties: KafkaProperties = ()
    """Kafka client properties (librdkafka names) of every client of the sink cluster,
    the commit and abort path included; secrets as references."""
    batching: ProducerBatching = field(default_factory=ProducerBatching)
    """`linger_ms`, `batch_size` and `compression` of the sink's producers
    (`model.producer_batching`)."""

    @property
    def value_subject(self) -> str:
        """The subject whose newest schema avro, json_schema and protobuf values are written
        with (TopicNameStrategy)."""
        return f"{self.topic}-value"


@dataclass(frozen=True)
class CheckpointConfig:
    """How often checkpoints run and how long one may take before it aborts."""

    interval_ms: int
    timeout_ms: int


@dataclass(frozen=True)
class ErrorsConfig:
    """What happens to records that cannot be processed."""

    tolerance: ErrorTolerance
    dead_letter_topic: str | None


@dataclass(frozen=True)
class PipelineSpec:
    """A validated pipeline configuration, defaults filled in."""

    name: PipelineId
    source: KafkaSource
    transform: Transform
    sink: KafkaSink
    delivery: Delivery
    checkpoint: CheckpointConfig
    tasks_max: int
    errors: ErrorsConfig
    allow_reordering: bool = False
    """The pipeline needs no per-key order: one partition's range may be split over several
    Spark write partitions (producers) in a checkpoint, interleaving them in the output."""

    @property
    def transactional_id_prefix(self) -> str:
        """The start of every `transactional.id` of the pipeline's producers."""
        return self.sink.transactional_id_prefix or default_transactional_id_prefix(self.name)

    def to_json(self) -> dict[str, Any]:
        """Return the normalized config as JSON-ready values (what the store keeps)."""
        transform: dict[str, str] = {}
        if self.transform.sql is not None:
            transform["sql"] = self.transform.sql
        if self.transform.python is not None:
            transform["python"] = self.transform.python
        errors: dict[str, str] = {"tolerance": self.errors.tolerance.value}
        if self.errors.dead_letter_topic is not None:
            errors["dead_letter_topic"] = self.errors.dead_letter_topic
        # key_format and allow_reordering are written only when set, so the stored form of
        # a spec that does not use them is what earlier versions stored.
        optional: dict[str, Any] = {"allow_reordering": True} if self.allow_reordering else {}
        return {
            "name": self.name,
            "source": {
                "kafka": {
                    "bootstrap_servers": self.source.bootstrap_servers,
                    "topics": list(self.source.topics),
                    "starting_offsets": self.source.starting_offsets.value,
                    "format": self.source.format.value,
                    **_key_format_json(self.source.key_format),
                    **_registry_json(self.source.schema_registry_url),
                    **_set_json("max_records_per_partition", self.source.max_records_per_partition),
                    **_properties_json(self.source.properties),
                }
            },
            "transform": transform,
            "sink": {
                "kafka": {
                    "bootstrap_servers": self.sink.bootstrap_servers,
                    "topic": self.sink.topic,
                    "format": self.sink.format.value,
                    **_key_format_json(self.sink.key_format),
                    **_registry_json(self.sink.schema_registry_url),
                    **_prefix_json(self.sink.transactional_id_prefix),
                    **_set_json("transaction_timeout_ms", self.sink.transaction_timeout_ms),
                    **self.sink.batching.to_json(),
                    **_properties_json(self.sink.properties),
                }
            },
            "delivery": self.delivery.value,
            "checkpoint": {
                "interval_ms": self.checkpoint.interval_ms,
                "timeout_ms": self.checkpoint.timeout_ms,
            },
            "tasks_max": self.tasks_max,
            "errors": errors,
            **optional,
        }


DEFAULT_CHECKPOINT_INTERVAL_MS = 1_000
DEFAULT_CHECKPOINT_TIMEOUT_MS = 60_000
DEFAULT_TRANSACTION_TIMEOUT_MS = 900_000
"""The sink's `transaction.timeout.ms` unless set: the broker's default cap (15 minutes)."""
DEFAULT_MAX_RECORDS_PER_PARTITION = 250_000
"""The most records one checkpoint reads of a partition unless set: the ceiling of the
executor's own sizing (`executor/runtime/checkpoint_size.py`: it starts lower and sizes each
checkpoint from the rate the task's last ones measured, to a tenth of the timeout), which
bounds the memory a batch holds. At 250,000 a copy of 4 partitions on `local[2]` peaked at
1,411 MB of executor memory (README, issue 13)."""

_TOPIC_PATTERN = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_PREFIX_PATTERN = re.compile(r"^[a-zA-Z0-9._-]{1,200}$")
_REGISTRY_URL_PATTERN = re.compile(r"^https?://[^\s/]+(/\S*)?$")
_PYTHON_REF_PATTERN = re.compile(
    r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$"
)


def validate_pipeline_spec(raw: object) -> list[SpecViolation]:
    """Return every violation in a raw pipeline config (empty when it is valid)."""
    _spec, violations = _parse(raw)
    return violations


def parse_pipeline_spec(raw: object, *, stored: bool = False) -> PipelineSpec:
    """Return the validated config with defaults filled in; InvalidArgument lists all faults.

    ``stored``: the spec was accepted when it was stored, so rules added since (the limits
    of `transform.sql`) are not applied to it: the coordinator can still read and show it,
    and the executors, which parse it as sent, fail its tasks with the violation instead.
    """
    spec, violations = _parse(raw, check_sql=not stored)
    if violations or spec is None:
        raise invalid_spec(violations)
    return spec


_TOP_LEVEL = (
    "name",
    "source",
    "transform",
    "sink",
    "delivery",
    "checkpoint",
    "tasks_max",
    "errors",
    "allow_reordering",
)


def _parse(
    raw: object, *, check_sql: bool = True
) -> tuple[PipelineSpec | None, list[SpecViolation]]:
    c = SpecChecker()
    if not isinstance(raw, Mapping):
        c.add(
            "",
            f"a pipeline config must be a mapping, got {type(raw).__name__}",
            "write the config as key: value pairs (YAML or JSON object)",
        )
        return None, c.violations
    c.unknown_keys(raw, _TOP_LEVEL, "")
    name = c.string(
        raw,
        "name",
        "name",
        required=True,
        pattern=PIPELINE_ID_PATTERN,
        pattern_fix="use 1-63 lowercase letters, digits and '-', starting with a letter",
    )
    source = _parse_source(c, raw)
    transform = _parse_transform(c, raw, check_sql=check_sql)
    sink = _parse_sink(c, raw)
    delivery = c.choice(raw, "delivery", "delivery", Delivery, Delivery.EXACTLY_ONCE)
    checkpoint = _parse_checkpoint(c, raw)
    tasks_max = c.positive_int(raw, "tasks_max", "tasks_max", 1, 1)
    errors = _parse_errors(c, raw)
    allow_reordering = _parse_bool(c, raw, "allow_reordering")
    if sink is not None and errors is not None and errors.dead_letter_topic == sink.topic:
        c.add(
            "errors.dead_letter_topic",
            f"is the sink topic {sink.topic!r}: bad records would mix with good ones",
            "name a topic of its own for bad records",
        )
    if c.violations:
        return None, c.violations
    assert name is not None and source is not None and transform is not None
    assert sink is not None and delivery is not None and checkpoint is not None
    assert tasks_max is not None and errors is not None
    if sink.transactional_id_prefix == default_transactional_id_prefix(name):
        sink = replace(sink, transactional_id_prefix=None)  # one stored form per meaning
    return (
        PipelineSpec(
            name=PipelineId(name),
            source=source,
            transform=transform,
            sink=sink,
            delivery=delivery,
            checkpoint=checkpoint,
            tasks_max=tasks_max,
            errors=errors,
            allow_reordering=allow_reordering,
        ),
        [],
    )


def _single_kind(
    c: SpecChecker, section: Mapping[str, Any], path: str, noun: str
) -> Mapping[str, Any] | None:
    """Sources and sinks are `{kind: {...}}`; only `kafka` exists so far."""
    kinds = list(section)
    if not kinds:
        c.add(path, f"names no {noun} type", f"write `{path}.kafka: {{...}}`")
        return None
    for kind in kinds:
        if kind != "kafka":
            c.add(f"{path}.{kind}", f"unknown {noun} type {kind!r}", "use `kafka`")
    if "kafka" not in section:
        return None
    return c.mapping(section, "kafka", f"{path}.kafka", required=True)


def _parse_source(c: SpecChecker, raw: Mapping[str, Any]) -> KafkaSource | None:
    section = c.mapping(raw, "source", "source", required=True)
    if section is None:
        return None
    kafka = _single_kind(c, section, "source", "source")
    if kafka is None:
        return None
    path = "source.kafka"
    c.unknown_keys(
        kafka,
        (
            "bootstrap_servers",
            "topics",
            "starting_offsets",
            "format",
            "key_format",
            "schema_registry_url",
            "max_records_per_partition",
            "properties",
        ),
        path,
    )
    servers = c.bootstrap_servers(kafka, path)
    topics = _parse_topics(c, kafka, f"{path}.topics")
    cap = c.positive_int(
        kafka, "max_records_per_partition", f"{path}.max_records_per_partition", 0, 1
    )
    starting = c.choice(
        kafka,
        "starting_offsets",
        f"{path}.starting_offsets",
        StartingOffsets,
        StartingOffsets.EARLIEST,
    )
    fmt = c.choice(kafka, "format", f"{path}.format", RecordFormat, RecordFormat.BYTES)
    key_fmt = _parse_key_format(c, kafka, path)
    registry = _parse_registry_url(c, kafka, path, fmt)
    properties = parse_kafka_properties(c, kafka, path, side="source")
    if servers is None or topics is None or starting is None or fmt is None or key_fmt is None:
        return None
    if properties is None:
        return None
    return KafkaSource(
        bootstrap_servers=servers,
        topics=topics,
        starting_offsets=starting,
        format=fmt,
        schema_registry_url=registry,
        key_format=key_fmt,
        max_records_per_partition=cap or DEFAULT_MAX_RECORDS_PER_PARTITION,
        properties=properties,
    )


def _parse_topics(c: SpecChecker, raw: Mapping[str, Any], path: str) -> tuple[str, ...] | None:
    value = raw.get("topics")
    if value is None:
        c.add(path, "is missing", f"list the topics to read, e.g. `{path}: [orders]`")
        return None
    if isinstance(value, str) or not isinstance(value, Sequence) or not value:
        c.add(path, "must be a non-empty list of topic names", f"write `{path}: [orders]`")
        return None
    if len(value) > MAX_SOURCE_TOPICS:
        c.add(
            path,
            f"lists {len(value)} topics, more than the limit of {MAX_SOURCE_TOPICS}",
            f"read at most {MAX_SOURCE_TOPICS} topics per pipeline; split it into several",
        )
        return None
    topics: list[str] = []
    seen: set[str] = set()
    for i, topic in enumerate(value):
        if not isinstance(topic, str) or not _TOPIC_PATTERN.match(topic):
            c.add(
                f"{path}[{i}]",
                f"{topic!r} is not a valid Kafka topic name",
                "use 1-249 characters from a-z A-Z 0-9 . _ -",
            )
        elif topic in seen:
            c.add(f"{path}[{i}]", f"topic {topic!r} is listed twice", "list each topic once")
        else:
            topics.append(topic)
            seen.add(topic)
    return tuple(topics) if len(topics) == len(value) else None


def _parse_transform(
    c: SpecChecker, raw: Mapping[str, Any], *, check_sql: bool = True
) -> Transform | None:
    section = c.mapping(raw, "transform", "transform", required=False)
    if section is None:
        return Transform(sql=None, python=None)  # identity: records pass unchanged
    c.unknown_keys(section, ("sql", "python"), "transform")
    sql = c.string(section, "sql", "transform.sql", required=False, max_chars=MAX_TEXT_CHARS)
    python = c.string(
        section,
        "python",
        "transform.python",
        required=False,
        pattern=_PYTHON_REF_PATTERN,
        pattern_fix="write `package.module:function`",
    )
    if sql is not None and python is not None:
        c.add("transform", "sets both `sql` and `python`", "keep exactly one of them")
        return None
    problem = None if sql is None or not check_sql else sql_transform_problem(sql)
    if problem is not None:
        c.add("transform.sql", problem.description, problem.fix)
        return None
    return Transform(sql=sql, python=python)


def _parse_sink(c: SpecChecker, raw: Mapping[str, Any]) -> KafkaSink | None:
    section = c.mapping(raw, "sink", "sink", required=True)
    if section is None:
        return None
    kafka = _single_kind(c, section, "sink", "sink")
    if kafka is None:
        return None
    path = "sink.kafka"
    c.unknown_keys(
        kafka,
        (
            "bootstrap_servers",
            "topic",
            "format",
            "key_format",
            "schema_registry_url",
            "transactional_id_prefix",
            "transaction_timeout_ms",
            *BATCHING_FIELDS,
            "properties",
        ),
        path,
    )
    servers = c.bootstrap_servers(kafka, path)
    topic = c.string(
        kafka,
        "topic",
        f"{path}.topic",
        required=True,
        pattern=_TOPIC_PATTERN,
        pattern_fix="use 1-249 characters from a-z A-Z 0-9 . _ -",
    )
    fmt = c.choice(kafka, "format", f"{path}.format", RecordFormat, RecordFormat.BYTES)
    key_fmt = _parse_key_format(c, kafka, path)
    registry = _parse_registry_url(c, kafka, path, fmt)
    prefix = c.string(
        kafka,
        "transactional_id_prefix",
        f"{path}.transactional_id_prefix",
        required=False,
        pattern=_PREFIX_PATTERN,
        pattern_fix="use 1-200 characters from a-z A-Z 0-9 . _ -",
    )
    # Below 1 s no checkpoint could commit; the broker refuses values above its cap.
    txn_timeout = c.positive_int(
        kafka, "transaction_timeout_ms", f"{path}.transaction_timeout_ms", 0, 1000
    )
    properties = parse_kafka_properties(c, kafka, path, side="sink")
    batching = None if properties is None else parse_producer_batching(c, kafka, path, properties)
    if servers is None or topic is None or fmt is None or key_fmt is None or txn_timeout is None:
        return None
    if batching is None:
        return None
    return KafkaSink(
        bootstrap_servers=servers,
        topic=topic,
        format=fmt,
        schema_registry_url=registry,
        key_format=key_fmt,
        transactional_id_prefix=prefix,
        transaction_timeout_ms=txn_timeout or DEFAULT_TRANSACTION_TIMEOUT_MS,
        properties=batching[1],
        batching=batching[0],
    )


def default_transactional_id_prefix(pipeline: str) -> str:
    """`lockgate-<pipeline>`: the prefix of a pipeline that names none."""
    return f"lockgate-{pipeline}"


def _prefix_json(prefix: str | None) -> dict[str, str]:
    return {} if prefix is None else {"transactional_id_prefix": prefix}


def _set_json(key: str, value: int) -> dict[str, int]:
    """`{key: value}` unless `value` is its default: the stored form of a spec that leaves
    it unset stays what earlier versions stored."""
    defaults = {
        "max_records_per_partition": DEFAULT_MAX_RECORDS_PER_PARTITION,
        "transaction_timeout_ms": DEFAULT_TRANSACTION_TIMEOUT_MS,
    }
    return {} if value == defaults[key] else {key: value}


def _properties_json(properties: KafkaProperties) -> dict[str, dict[str, str]]:
    return {"properties": dict(properties)} if properties else {}


def _registry_json(url: str | None) -> dict[str, str]:
    return {} if url is None else {"schema_registry_url": url}


def _key_format_json(fmt: RecordFormat) -> dict[str, str]:
    return {} if fmt is RecordFormat.BYTES else {"key_format": fmt.value}


def _parse_key_format(c: SpecChecker, kafka: Mapping[str, Any], path: str) -> RecordFormat | None:
    """`key_format`: bytes (default), string or json; the registry codecs (avro,
    json_schema, protobuf) need a key subject, which no pipeline names, so their keys are
    refused."""
    fmt = c.choice(kafka, "key_format", f"{path}.key_format", RecordFormat, RecordFormat.BYTES)
    if fmt is not None and fmt.needs_registry:
        c.add(
            f"{path}.key_format",
            f"{fmt.value} keys are not supported",
            "use bytes, string or json keys",
        )
        return None
    return fmt


def _parse_bool(c: SpecChecker, raw: Mapping[str, Any], key: str) -> bool:
    value = raw.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        c.add(key, f"must be true or false, got {value!r}", f"set `{key}: true` or remove it")
        return False
    return value


def _parse_registry_url(
    c: SpecChecker, kafka: Mapping[str, Any], path: str, fmt: RecordFormat | None
) -> str | None:
    """`schema_registry_url`: an http(s) URL, required when the format is avro, json_schema
    or protobuf."""
    url = c.string(
        kafka,
        "schema_registry_url",
        f"{path}.schema_registry_url",
        required=False,
        pattern=_REGISTRY_URL_PATTERN,
        pattern_fix="write the registry's REST address, e.g. http://127.0.0.1:8081",
    )
    if fmt is not None and fmt.needs_registry and kafka.get("schema_registry_url") is None:
        c.add(
            f"{path}.schema_registry_url",
            f"is required when the format is {fmt.value}",
            "add the registry's REST address, e.g. `schema_registry_url: http://127.0.0.1:8081`",
        )
    return url.rstrip("/") if url is not None else None


def _parse_checkpoint(c: SpecChecker, raw: Mapping[str, Any]) -> CheckpointConfig | None:
    section = c.mapping(raw, "checkpoint", "checkpoint", required=False) or {}
    c.unknown_keys(section, ("interval_ms", "timeout_ms"), "checkpoint")
    interval = c.positive_int(
        section, "interval_ms", "checkpoint.interval_ms", DEFAULT_CHECKPOINT_INTERVAL_MS, 1
    )
    timeout = c.positive_int(
        section, "timeout_ms", "checkpoint.timeout_ms", DEFAULT_CHECKPOINT_TIMEOUT_MS, 1
    )
    if interval is None or timeout is None:
        return None
    return CheckpointConfig(interval_ms=interval, timeout_ms=timeout)


def _parse_errors(c: SpecChecker, raw: Mapping[str, Any]) -> ErrorsConfig | None:
    section = c.mapping(raw, "errors", "errors", required=False) or {}
    c.unknown_keys(section, ("tolerance", "dead_letter_topic"), "errors")
    tolerance = c.choice(
        section, "tolerance", "errors.tolerance", ErrorTolerance, ErrorTolerance.NONE
    )
    dlq = c.string(
        section,
        "dead_letter_topic",
        "errors.dead_letter_topic",
        required=False,
        pattern=_TOPIC_PATTERN,
        pattern_fix="use 1-249 characters from a-z A-Z 0-9 . _ -",
    )
    if tolerance is ErrorTolerance.ALL and dlq is None and "dead_letter_topic" not in section:
        c.add(
            "errors.dead_letter_topic",
            "is required when errors.tolerance is `all` (bad records must go somewhere)",
            "name a dead-letter topic, or set errors.tolerance to `none`",
        )
        return None
    if tolerance is None:
        return None
    return ErrorsConfig(tolerance=tolerance, dead_letter_topic=dlq)
