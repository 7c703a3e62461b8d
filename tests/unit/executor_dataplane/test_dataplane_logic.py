"""Pure logic of the data plane: spec parsing, ranges, formats, error transport."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockgate.common.kafka_transactions import TransactionalId, TransactionHandle
from lockgate.executor.dataplane.spark.formats import (
    DecodeFailure,
    JsonCodec,
    StringCodec,
    codec_for,
)
from lockgate.executor.dataplane.spark.kafka_sink import (
    ERROR_HEADER_REASON,
    KafkaSinkCommitMessage,
    dead_letter_headers,
    read_result_file,
    transactional_id_for,
    write_result_file,
)
from lockgate.executor.dataplane.spark.kafka_source import (
    ranges_from_option,
    ranges_to_option,
    source_schema,
)
from lockgate.executor.dataplane.spark.offsets import OffsetRange, split_range
from lockgate.executor.errors import RecordError, RecordLocation, SpecError, WorkerRecordError
from lockgate.executor.spec import (
    Delivery,
    ErrorTolerance,
    OrderGuarantee,
    PythonTransform,
    RecordFormat,
    SqlTransform,
    parse_data_plane_spec,
)

ISSUE_SPEC: dict[str, Any] = {
    "name": "copy",
    "source": {
        "kafka": {
            "bootstrap_servers": "127.0.0.1:9092",
            "topics": ["input"],
            "starting_offsets": "earliest",
        }
    },
    "transform": {"sql": "SELECT key, value, headers FROM input"},
    "sink": {"kafka": {"bootstrap_servers": "127.0.0.1:9092", "topic": "output"}},
    "delivery": "exactly_once",
    "checkpoint": {"interval_ms": 2000, "timeout_ms": 60000},
    "tasks_max": 2,
    "errors": {"tolerance": "none"},
}


def test_issue_example_spec_parses() -> None:
    spec = parse_data_plane_spec(ISSUE_SPEC)
    assert spec.source.topics == ("input",)
    assert spec.source.format is RecordFormat.BYTES
    assert spec.transform == SqlTransform("SELECT key, value, headers FROM input")
    assert spec.sink.topic == "output"
    assert spec.delivery is Delivery.EXACTLY_ONCE
    assert spec.errors.tolerance is ErrorTolerance.NONE
    assert spec.order is OrderGuarantee.PER_KEY


def _with(path: str, value: Any) -> dict[str, Any]:
    raw = copy.deepcopy(ISSUE_SPEC)
    node = raw
    *parents, last = path.split(".")
    for part in parents:
        node = node[part]
    if value is None:
        del node[last]
    else:
        node[last] = value
    return raw


@pytest.mark.parametrize(
    ("path", "value", "field", "hint"),
    [
        ("source.kafka.topics", [], "source.kafka.topics", "non-empty"),
        ("source.kafka.topics", ["bad topic!"], "source.kafka.topics[0]", "legal Kafka topic"),
        ("source.kafka.format", "xml", "source.kafka.format", "bytes, string, json, avro"),
        ("source.kafka.format", "avro", "source.kafka.schema_registry_url", "required"),
        ("sink.kafka.format", "avro", "sink.kafka.schema_registry_url", "required"),
        ("source.kafka.key_format", "avro", "source.kafka.key_format", "avro keys"),
        ("sink.kafka.schema_registry_url", "localhost:1", "sink.kafka.schema_registry_url", "http"),
        ("source.kafka.starting_offsets", "middle", "source.kafka.starting_offsets", "earliest"),
        ("sink.kafka.topic", None, "sink.kafka.topic", "non-empty"),
        ("delivery", "twice", "delivery", "exactly_once, at_least_once"),
        ("errors", {"tolerance": "all"}, "errors.dead_letter_topic", "required"),
        ("transform", {"python": "no_colon"}, "transform.python", "package.module:function"),
        ("transform", {"sql": "x", "python": "a:b"}, "transform", "exactly one"),
    ],
)
def test_bad_spec_names_the_field(path: str, value: Any, field: str, hint: str) -> None:
    with pytest.raises(SpecError) as failure:
        parse_data_plane_spec(_with(path, value))
    assert failure.value.field == field
    assert hint in failure.value.message


def test_python_transform_and_dead_letter_topic() -> None:
    raw = _with("transform", {"python": "my_pkg.jobs:enrich"})
    raw["errors"] = {"tolerance": "all", "dead_letter_topic": "dlq"}
    spec = parse_data_plane_spec(raw)
    assert spec.transform == PythonTransform("my_pkg.jobs", "enrich")
    assert spec.errors.dead_letter_topic == "dlq"


@given(
    start=st.integers(0, 10_000),
    size=st.integers(0, 5_000),
    chunk=st.integers(1, 700),
)
def test_split_range_covers_exactly_in_order(start: int, size: int, chunk: int) -> None:
    whole = OffsetRange("t", 3, start, start + size)
    parts = split_range(whole, chunk)
    assert parts[0].start == start and parts[-1].end == start + size
    assert all(a.end == b.start for a, b in itertools.pairwise(parts))
    assert all(0 < p.size <= chunk for p in parts) or size == 0


def test_offset_range_rejects_negative_or_reversed() -> None:
    with pytest.raises(ValueError, match="start <= end"):
        OffsetRange("t", 0, 5, 4)


def test_ranges_option_round_trip() -> None:
    ranges = [OffsetRange("a.b-c", 0, 0, 10), OffsetRange("x", 7, 100, 100)]
    assert ranges_from_option(ranges_to_option(ranges)) == ranges


def test_codecs() -> None:
    assert codec_for(RecordFormat.BYTES).decode(b"\xff") == b"\xff"
    assert StringCodec().decode("é".encode()) == "é"
    with pytest.raises(DecodeFailure, match="UTF-8"):
        StringCodec().decode(b"\xff")
    assert JsonCodec().decode(b'{"a": 1}') == '{"a": 1}'
    with pytest.raises(DecodeFailure, match="not valid JSON"):
        JsonCodec().decode(b"{nope")
    with pytest.raises(DecodeFailure, match="not valid JSON"):
        JsonCodec().encode("{nope")
    assert JsonCodec().decode(None) is None
    with pytest.raises(ValueError, match="schema_registry_url"):
        codec_for(RecordFormat.AVRO)
    avro = codec_for(RecordFormat.AVRO, schema_registry_url="http://127.0.0.1:8081")
    assert avro.column_type == "string"
    assert source_schema(RecordFormat.AVRO, RecordFormat.BYTES, marked=False).startswith(
        "key binary, value string"
    )


def test_source_schema_types_follow_formats() -> None:
    assert source_schema(RecordFormat.BYTES, RecordFormat.BYTES, marked=False).startswith(
        "key binary, value binary"
    )
    marked = source_schema(RecordFormat.JSON, RecordFormat.STRING, marked=True)
    assert marked.startswith("key string, value string")
    assert "__lockgate_error string" in marked


def test_record_error_survives_spark_exception_text() -> None:
    error = RecordError(RecordLocation("in.topic", 2, 41), 'not valid JSON: "quote" >> here')
    spark_text = f"PythonException: Traceback...\n{WorkerRecordError(error)}\n\tat org.apache..."
    recovered = RecordError.from_text(spark_text)
    assert recovered is not None
    assert recovered.location == error.location
    assert recovered.record_reason == error.record_reason
    assert "in.topic[2]@41" in recovered.message
    assert RecordError.from_text("some other failure") is None


def test_commit_messages_round_trip_through_result_file(tmp_path: Any) -> None:
    handle = TransactionHandle(TransactionalId("p-c1-0"), producer_id=7, producer_epoch=3)
    messages = [
        KafkaSinkCommitMessage(0, 1, handle, records_written=10, dead_lettered=2),
        KafkaSinkCommitMessage(1, 0, None, records_written=0, dead_lettered=0),
    ]
    path = str(tmp_path / "result.json")
    write_result_file(path, messages)
    assert read_result_file(path) == messages


def test_transactional_ids_are_deterministic_per_slot() -> None:
    assert transactional_id_for("lockgate-copy-t0-c5", 3) == "lockgate-copy-t0-c5-3"


def test_dead_letter_headers_omit_unknown_location() -> None:
    headers = dead_letter_headers(topic=None, partition=None, offset=None, reason="r", stage="sink")
    assert headers == [(ERROR_HEADER_REASON, b"r"), ("__lockgate.error.stage", b"sink")]
