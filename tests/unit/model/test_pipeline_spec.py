"""Pipeline config validation: every bad field named, with the fix."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest

from lockgate.common.errors import InvalidArgument
from lockgate.common.model.pipeline_spec import (
    DEFAULT_MAX_RECORDS_PER_PARTITION,
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    Delivery,
    ErrorTolerance,
    RecordFormat,
    StartingOffsets,
    parse_pipeline_spec,
    validate_pipeline_spec,
)
from lockgate.common.model.producer_batching import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_LINGER_MS,
    Compression,
    ProducerBatching,
)


def valid() -> dict[str, Any]:
    return {
        "name": "orders-eo",
        "source": {
            "kafka": {
                "bootstrap_servers": "127.0.0.1:9092",
                "topics": ["orders", "refunds"],
                "starting_offsets": "latest",
                "format": "json",
            }
        },
        "transform": {"sql": "SELECT key, value FROM input"},
        "sink": {
            "kafka": {"bootstrap_servers": "127.0.0.1:9092", "topic": "out", "format": "json"}
        },
        "delivery": "exactly_once",
        "checkpoint": {"interval_ms": 500, "timeout_ms": 30000},
        "tasks_max": 4,
        "errors": {"tolerance": "all", "dead_letter_topic": "orders-dlq"},
    }


def fields(raw: object) -> list[str]:
    return [v.field for v in validate_pipeline_spec(raw)]


def test_valid_config_parses_with_every_value() -> None:
    spec = parse_pipeline_spec(valid())
    assert spec.name == "orders-eo"
    assert spec.source.topics == ("orders", "refunds")
    assert spec.source.starting_offsets is StartingOffsets.LATEST
    assert spec.sink.format is RecordFormat.JSON
    assert spec.delivery is Delivery.EXACTLY_ONCE
    assert spec.checkpoint.interval_ms == 500
    assert spec.tasks_max == 4
    assert spec.errors.tolerance is ErrorTolerance.ALL
    assert spec.errors.dead_letter_topic == "orders-dlq"


def test_round_trip_through_json_is_stable() -> None:
    spec = parse_pipeline_spec(valid())
    assert parse_pipeline_spec(spec.to_json()) == spec


def test_defaults_fill_optional_sections() -> None:
    raw = valid()
    for key in ("transform", "delivery", "checkpoint", "tasks_max", "errors"):
        del raw[key]
    spec = parse_pipeline_spec(raw)
    assert spec.transform.sql is None and spec.transform.python is None
    assert spec.delivery is Delivery.EXACTLY_ONCE
    assert spec.checkpoint.interval_ms > 0 and spec.checkpoint.timeout_ms > 0
    assert spec.tasks_max == 1
    assert spec.errors.tolerance is ErrorTolerance.NONE


def test_unknown_sink_type_is_named() -> None:
    raw = valid()
    raw["sink"] = {"s3": {"bucket": "b"}}
    violations = validate_pipeline_spec(raw)
    assert [v.field for v in violations] == ["sink.s3"]
    assert "unknown sink type" in violations[0].description
    assert "kafka" in violations[0].fix


def test_negative_interval_is_named() -> None:
    raw = valid()
    raw["checkpoint"]["interval_ms"] = -5
    violations = validate_pipeline_spec(raw)
    assert [v.field for v in violations] == ["checkpoint.interval_ms"]
    assert ">= 1" in violations[0].description


def test_missing_sink_topic_is_named() -> None:
    raw = valid()
    del raw["sink"]["kafka"]["topic"]
    assert fields(raw) == ["sink.kafka.topic"]


def test_dead_letter_topic_required_with_tolerance_all() -> None:
    raw = valid()
    del raw["errors"]["dead_letter_topic"]
    assert fields(raw) == ["errors.dead_letter_topic"]


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("tasks_max",), 0, "tasks_max"),
        (("tasks_max",), True, "tasks_max"),
        (("delivery",), "twice", "delivery"),
        (("source", "kafka", "format"), "xml", "source.kafka.format"),
        (("source", "kafka", "starting_offsets"), "middle", "source.kafka.starting_offsets"),
        (("source", "kafka", "topics"), [], "source.kafka.topics"),
        (("source", "kafka", "topics"), ["ok", "bad topic"], "source.kafka.topics[1]"),
        (("source", "kafka", "bootstrap_servers"), "localhost", "source.kafka.bootstrap_servers"),
        (("transform", "python"), "not a ref", "transform.python"),
        (("name",), "Has Spaces", "name"),
        (("checkpoint", "timeout_ms"), 0, "checkpoint.timeout_ms"),
        (("errors", "tolerance"), "some", "errors.tolerance"),
    ],
)
def test_each_bad_field_is_reported_at_its_path(
    path: tuple[str, ...], value: object, field: str
) -> None:
    raw = valid()
    target = raw
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    assert fields(raw) == [field]


def test_unknown_key_and_typo_are_refused() -> None:
    raw = valid()
    raw["tasks_mx"] = 3
    raw["sink"]["kafka"]["topik"] = "x"
    assert sorted(fields(raw)) == ["sink.kafka.topik", "tasks_mx"]


def test_sql_and_python_together_are_refused() -> None:
    raw = valid()
    raw["transform"]["python"] = "pkg.mod:fn"
    assert fields(raw) == ["transform"]


def test_all_violations_reported_at_once_in_one_error() -> None:
    raw = copy.deepcopy(valid())
    raw["checkpoint"]["interval_ms"] = -1
    raw["sink"] = {"s3": {}}
    del raw["source"]["kafka"]["topics"]
    with pytest.raises(InvalidArgument) as caught:
        parse_pipeline_spec(raw)
    got = sorted(v.field for v in caught.value.violations)
    assert got == ["checkpoint.interval_ms", "sink.s3", "source.kafka.topics"]
    assert "fix:" in caught.value.violations[0].description
    assert "checkpoint.interval_ms" in str(caught.value)


def test_not_a_mapping() -> None:
    assert fields(["name"]) == [""]


@pytest.mark.parametrize("fmt", ["avro", "json_schema", "protobuf"])
def test_registry_formats_need_the_registry_url_on_their_side(fmt: str) -> None:
    raw = valid()
    raw["source"]["kafka"]["format"] = fmt
    raw["sink"]["kafka"]["format"] = fmt
    violations = validate_pipeline_spec(raw)
    assert [v.field for v in violations] == [
        "source.kafka.schema_registry_url",
        "sink.kafka.schema_registry_url",
    ]
    assert f"required when the format is {fmt}" in violations[0].description
    raw["source"]["kafka"]["schema_registry_url"] = "http://127.0.0.1:8081/"
    raw["sink"]["kafka"]["schema_registry_url"] = "127.0.0.1:8081"
    violations = validate_pipeline_spec(raw)
    assert [v.field for v in violations] == ["sink.kafka.schema_registry_url"]
    assert "http://" in violations[0].description + (violations[0].fix or "")
    raw["sink"]["kafka"]["schema_registry_url"] = "https://registry.example:8081"
    spec = parse_pipeline_spec(raw)
    assert spec.source.schema_registry_url == "http://127.0.0.1:8081"
    assert spec.sink.format is RecordFormat(fmt)
    assert parse_pipeline_spec(spec.to_json()) == spec


def test_key_formats_parse_and_are_stored_only_when_set() -> None:
    raw = valid()
    assert "key_format" not in parse_pipeline_spec(raw).to_json()["source"]["kafka"]
    raw["source"]["kafka"]["key_format"] = "string"
    raw["sink"]["kafka"]["key_format"] = "json"
    spec = parse_pipeline_spec(raw)
    assert spec.source.key_format is RecordFormat.STRING
    assert spec.sink.key_format is RecordFormat.JSON
    assert parse_pipeline_spec(spec.to_json()) == spec


@pytest.mark.parametrize("fmt", ["avro", "json_schema", "protobuf"])
def test_registry_format_keys_are_refused_at_their_side(fmt: str) -> None:
    raw = valid()
    raw["sink"]["kafka"]["key_format"] = fmt
    violations = validate_pipeline_spec(raw)
    assert [v.field for v in violations] == ["sink.kafka.key_format"]
    assert violations[0].description == f"{fmt} keys are not supported"
    assert "json" in violations[0].fix


def test_allow_reordering_is_a_boolean_kept_in_the_stored_form() -> None:
    raw = valid()
    assert parse_pipeline_spec(raw).allow_reordering is False
    raw["allow_reordering"] = True
    spec = parse_pipeline_spec(raw)
    assert spec.allow_reordering is True
    assert parse_pipeline_spec(spec.to_json()) == spec
    raw["allow_reordering"] = "yes"
    assert fields(raw) == ["allow_reordering"]


def test_the_dead_letter_topic_must_not_be_the_sink_topic() -> None:
    raw = valid()
    raw["errors"]["dead_letter_topic"] = raw["sink"]["kafka"]["topic"]
    violations = validate_pipeline_spec(raw)
    assert [v.field for v in violations] == ["errors.dead_letter_topic"]
    assert "sink topic" in violations[0].description


def test_python_target_splits_module_and_function() -> None:
    raw = valid()
    raw["transform"] = {"python": "pkg.mod:fn"}
    assert parse_pipeline_spec(raw).transform.python_target == ("pkg.mod", "fn")
    assert parse_pipeline_spec(valid()).transform.python_target is None


@pytest.mark.parametrize(
    ("servers", "words"),
    [
        ("127.0.0.1:99999", "port 99999"),
        ("127.0.0.1:0", "port 0"),
        ("a:9092,b:70000", "port 70000"),
        ("127.0.0.1", "is not host:port"),
        ("127.0.0.1:9092,", "is not host:port"),
        (":9092", "is not host:port"),
    ],
)
def test_bootstrap_servers_need_a_host_and_a_port_from_1_to_65535(servers: str, words: str) -> None:
    raw = valid()
    raw["sink"]["kafka"]["bootstrap_servers"] = servers
    (violation,) = validate_pipeline_spec(raw)
    assert violation.field == "sink.kafka.bootstrap_servers"
    assert words in violation.description
    assert "1-65535" in violation.fix


def test_too_many_bootstrap_servers_are_refused_with_the_limit() -> None:
    raw = valid()
    raw["source"]["kafka"]["bootstrap_servers"] = ",".join(f"b{i}:9092" for i in range(101))
    (violation,) = validate_pipeline_spec(raw)
    assert violation.field == "source.kafka.bootstrap_servers"
    assert "limit of 100" in violation.description


@pytest.mark.serial  # a time bound is the assertion
def test_too_many_topics_are_refused_at_once_with_the_limit() -> None:
    raw = valid()
    raw["source"]["kafka"]["topics"] = [f"t{i}" for i in range(200_000)]
    started = time.monotonic()
    violations = validate_pipeline_spec(raw)
    assert time.monotonic() - started < 0.5
    assert [(v.field, v.description) for v in violations] == [
        ("source.kafka.topics", "lists 200000 topics, more than the limit of 1000")
    ]


@pytest.mark.serial  # a time bound is the assertion
def test_the_most_topics_allowed_are_checked_quickly() -> None:
    raw = valid()
    raw["source"]["kafka"]["topics"] = [f"t{i}" for i in range(1000)]
    raw["source"]["kafka"]["topics"][-1] = "t0"
    started = time.monotonic()
    assert fields(raw) == ["source.kafka.topics[999]"]
    assert time.monotonic() - started < 0.5


@pytest.mark.parametrize(
    ("path", "value", "limit"),
    [
        (("transform", "sql"), "SELECT 1 " + "x" * 1_048_576, 1_048_576),
        (("sink", "kafka", "bootstrap_servers"), "h" * 5_000 + ":9092", 4_096),
        (("source", "kafka", "schema_registry_url"), "http://h/" + "p" * 5_000, 4_096),
    ],
)
def test_long_strings_are_refused_with_their_path_and_limit(
    path: tuple[str, ...], value: str, limit: int
) -> None:
    raw = valid()
    section = raw
    for key in path[:-1]:
        section = section[key]
    section[path[-1]] = value
    (violation,) = validate_pipeline_spec(raw)
    assert violation.field == ".".join(path)
    assert f"more than the limit of {limit}" in violation.description


def test_the_transactional_id_prefix_defaults_to_lockgate_and_the_name() -> None:
    assert parse_pipeline_spec(valid()).transactional_id_prefix == "lockgate-orders-eo"
    raw = valid()
    raw["sink"]["kafka"]["transactional_id_prefix"] = "team-a.orders"
    spec = parse_pipeline_spec(raw)
    assert spec.transactional_id_prefix == "team-a.orders"
    assert spec.to_json()["sink"]["kafka"]["transactional_id_prefix"] == "team-a.orders"
    # Writing the default out is the same spec, stored the same way.
    raw["sink"]["kafka"]["transactional_id_prefix"] = "lockgate-orders-eo"
    assert parse_pipeline_spec(raw) == parse_pipeline_spec(valid())
    assert "transactional_id_prefix" not in parse_pipeline_spec(raw).to_json()["sink"]["kafka"]


@pytest.mark.parametrize("prefix", ["", "team a", "x" * 201, "ids/1", "é"])
def test_a_transactional_id_prefix_outside_its_charset_or_length_is_refused(prefix: str) -> None:
    raw = valid()
    raw["sink"]["kafka"]["transactional_id_prefix"] = prefix
    assert fields(raw) == ["sink.kafka.transactional_id_prefix"]


def test_batch_cap_and_transaction_timeout_default_and_are_stored_only_when_set() -> None:
    spec = parse_pipeline_spec(valid())
    assert spec.source.max_records_per_partition == DEFAULT_MAX_RECORDS_PER_PARTITION
    assert spec.sink.transaction_timeout_ms == DEFAULT_TRANSACTION_TIMEOUT_MS
    stored = spec.to_json()
    assert "max_records_per_partition" not in stored["source"]["kafka"]
    assert "transaction_timeout_ms" not in stored["sink"]["kafka"]
    raw = valid()
    raw["source"]["kafka"]["max_records_per_partition"] = 3_000
    raw["sink"]["kafka"]["transaction_timeout_ms"] = 120_000
    spec = parse_pipeline_spec(raw)
    assert spec.source.max_records_per_partition == 3_000
    assert spec.sink.transaction_timeout_ms == 120_000
    assert parse_pipeline_spec(spec.to_json()) == spec


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("source", "max_records_per_partition", 0),
        ("source", "max_records_per_partition", "many"),
        ("sink", "transaction_timeout_ms", 999),
        ("sink", "transaction_timeout_ms", True),
    ],
)
def test_a_bad_batch_cap_or_transaction_timeout_is_named(
    section: str, key: str, value: object
) -> None:
    raw = valid()
    raw[section]["kafka"][key] = value
    assert fields(raw) == [f"{section}.kafka.{key}"]


def test_producer_batching_defaults_and_is_stored_only_when_set() -> None:
    spec = parse_pipeline_spec(valid())
    assert spec.sink.batching == ProducerBatching(
        linger_ms=DEFAULT_LINGER_MS, batch_size=DEFAULT_BATCH_SIZE, compression=Compression.NONE
    )
    stored = spec.to_json()["sink"]["kafka"]
    assert not {"linger_ms", "batch_size", "compression"} & set(stored)
    raw = valid()
    raw["sink"]["kafka"].update(linger_ms=0, batch_size=65_536, compression="lz4")
    spec = parse_pipeline_spec(raw)
    assert spec.sink.batching == ProducerBatching(0, 65_536, Compression.LZ4)
    assert spec.sink.batching.producer_config() == {
        "linger.ms": 0,
        "batch.size": 65_536,
        "compression.type": "lz4",
    }
    assert parse_pipeline_spec(spec.to_json()) == spec


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("linger_ms", -1, ">= 0"),
        ("linger_ms", 900_001, "between 0 and 900000"),
        ("linger_ms", "soon", "must be an integer"),
        ("batch_size", 1_023, ">= 1024"),
        ("batch_size", 2**31, "between 1024 and 2147483647"),
        ("compression", "brotli", "none, gzip, snappy, lz4, zstd"),
    ],
)
def test_a_producer_batching_field_out_of_bounds_is_named_with_its_range(
    key: str, value: object, says: str
) -> None:
    raw = valid()
    raw["sink"]["kafka"][key] = value
    (violation,) = validate_pipeline_spec(raw)
    assert violation.field == f"sink.kafka.{key}"
    assert says in f"{violation.description}; {violation.fix}"


@pytest.mark.parametrize(
    ("key", "field", "value"),
    [
        ("linger.ms", "linger_ms", 5),
        ("queue.buffering.max.ms", "linger_ms", 5),
        ("batch.size", "batch_size", 65_536),
        ("compression.type", "compression", "zstd"),
        ("compression.codec", "compression", "zstd"),
    ],
)
def test_a_batching_property_next_to_its_field_is_refused_naming_both(
    key: str, field: str, value: object
) -> None:
    raw = valid()
    raw["sink"]["kafka"][field] = value
    raw["sink"]["kafka"]["properties"] = {key: str(value)}
    (violation,) = validate_pipeline_spec(raw)
    assert violation.field == f"sink.kafka.properties[{key!r}]"
    assert f"sink.kafka.{field}" in violation.description


def test_a_batching_property_alone_is_read_into_its_field() -> None:
    # What a spec stored before the fields existed holds: it keeps running, stored anew
    # in the one form (the field), so it never meets its twin after a round trip.
    raw = valid()
    raw["sink"]["kafka"]["properties"] = {"linger.ms": "50", "client.id": "etl"}
    spec = parse_pipeline_spec(raw)
    assert spec.sink.batching.linger_ms == 50
    assert spec.sink.properties == (("client.id", "etl"),)
    stored = spec.to_json()["sink"]["kafka"]
    assert stored["linger_ms"] == 50
    assert stored["properties"] == {"client.id": "etl"}
    raw["sink"]["kafka"]["properties"] = {"linger.ms": "50", "queue.buffering.max.ms": "5"}
    (violation,) = validate_pipeline_spec(raw)
    assert violation.field == "sink.kafka.properties['queue.buffering.max.ms']"
    raw["sink"]["kafka"]["properties"] = {"batch.size": "12"}
    (violation,) = validate_pipeline_spec(raw)
    assert violation.field == "sink.kafka.properties['batch.size']"
    assert ">= 1024" in violation.description
