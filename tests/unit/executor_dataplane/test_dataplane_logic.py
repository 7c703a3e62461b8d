"""Pure logic of the data plane: ranges, formats, error transport (the spec is parsed by the
model: tests/unit/model)."""

from __future__ import annotations

from typing import Any

import pytest

from lockgate.common.model.handles import TransactionHandle
from lockgate.common.model.ids import TransactionalId
from lockgate.common.model.offsets import OffsetRange
from lockgate.common.model.pipeline_spec import RecordFormat
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
from lockgate.executor.errors import RecordError, RecordLocation, WorkerRecordError


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
    with pytest.raises(ValueError, match="the protobuf format needs schema_registry_url"):
        codec_for(RecordFormat.PROTOBUF)
    protobuf = codec_for(RecordFormat.PROTOBUF, schema_registry_url="http://127.0.0.1:8081")
    assert protobuf.column_type == "string"
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
