"""The Kafka sink's rows -> produce() calls, with a recording producer (no broker): order,
keys, headers, timestamps, dead letters and counts, on the vectorised path and the per-row
one alike."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pytest

from lockgate.common.model.pipeline_spec import Delivery, ErrorTolerance, RecordFormat
from lockgate.common.model.producer_batching import Compression, ProducerBatching
from lockgate.executor.dataplane.spark.kafka_sink import TARGET_TOPIC_COLUMN, SinkOptions
from lockgate.executor.dataplane.spark.kafka_sink_write import PartitionWriter
from lockgate.executor.errors import WorkerRecordError

_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


@dataclass
class RecordingProducer:
    """Records each produce() as (topic, key, value, headers, timestamp); full once when
    `full_once`, as librdkafka's local queue can be."""

    sent: list[tuple[str, Any, Any, Any, int]] = field(default_factory=list)
    full_once: bool = False

    def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        timestamp: int = 0,
        headers: Any = None,
    ) -> None:
        if self.full_once:
            self.full_once = False
            raise BufferError("queue full")
        self.sent.append((topic, key, value, headers, timestamp))

    def poll(self, timeout: float) -> int:
        return 0


def _writer(
    *,
    value_format: RecordFormat = RecordFormat.BYTES,
    tolerance: ErrorTolerance = ErrorTolerance.NONE,
) -> tuple[PartitionWriter, RecordingProducer]:
    options = SinkOptions(
        bootstrap_servers="127.0.0.1:9",
        topic="out",
        delivery=Delivery.AT_LEAST_ONCE,
        transactional_id_prefix="",
        value_format=value_format,
        key_format=RecordFormat.BYTES,
        schema_registry_url="",
        tolerance=tolerance,
        dead_letter_topic="dlq" if tolerance is ErrorTolerance.ALL else None,
        result_path=None,
        transaction_timeout_ms=60_000,
    )
    writer = PartitionWriter(options, 0)
    producer = RecordingProducer()
    writer._producer = producer  # type: ignore[assignment]
    return writer, producer


def _batch(**columns: pa.Array) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(list(columns.values()), names=list(columns))


def test_rows_with_no_headers_keep_order_keys_timestamps_and_counts() -> None:
    writer, producer = _writer()
    producer.full_once = True  # the first row waits for room and is still sent once, first
    writer.write_batch(
        _batch(
            key=pa.array([b"k1", None, b"k3"], pa.binary()),
            value=pa.array([b"a", b"bb", None], pa.binary()),
            headers=pa.nulls(3, _HEADERS),
            timestamp=pa.array([5_000_000, None, -1_000], pa.timestamp("us", tz="UTC")),
        )
    )
    assert producer.sent == [
        ("out", b"k1", b"a", None, 5_000),
        ("out", None, b"bb", None, 0),  # no timestamp: the producer stamps it
        ("out", b"k3", None, None, 0),  # not positive: likewise, as before
    ]
    assert (writer.records_written, writer.bytes_written, writer.dead_lettered) == (3, 7, 0)


def test_headers_go_with_their_own_rows_only() -> None:
    writer, producer = _writer()
    writer.write_batch(
        _batch(
            value=pa.array([b"a", b"b", b"c"], pa.binary()),
            headers=pa.array([[{"key": "h", "value": b"1"}], None, []], _HEADERS),
        )
    )
    assert [(s[2], s[3]) for s in producer.sent] == [
        (b"a", [("h", b"1")]),
        (b"b", None),
        (b"c", None),
    ]
    assert writer.records_written == 3


def test_string_values_are_encoded_by_the_format_codec() -> None:
    writer, producer = _writer(value_format=RecordFormat.STRING)
    writer.write_batch(_batch(value=pa.array(["é", None], pa.string())))
    assert [s[2] for s in producer.sent] == ["é".encode(), None]
    assert writer.bytes_written == 2


def test_rows_aimed_at_a_dead_letter_topic_pass_through_and_bad_ones_are_routed() -> None:
    writer, producer = _writer(value_format=RecordFormat.JSON, tolerance=ErrorTolerance.ALL)
    writer.write_batch(
        _batch(
            value=pa.array([b'{"a": 1}', b"not json", b"raw"], pa.binary()),
            **{TARGET_TOPIC_COLUMN: pa.array([None, None, "dlq"], pa.string())},
        )
    )
    assert [(s[0], s[2]) for s in producer.sent] == [
        ("out", b'{"a": 1}'),
        ("dlq", b"not json"),
        ("dlq", b"raw"),
    ]
    assert (writer.records_written, writer.dead_lettered) == (1, 2)
    assert producer.sent[1][3][-1] == ("__lockgate.error.stage", b"sink")


def test_a_bad_record_without_tolerance_fails_the_write() -> None:
    writer, _ = _writer(value_format=RecordFormat.JSON)
    with pytest.raises(WorkerRecordError):
        writer.write_batch(_batch(value=pa.array([b"not json"], pa.binary())))


def test_the_producer_gets_the_pipeline_batching_fields() -> None:
    options = SinkOptions.parse(
        {
            "bootstrap_servers": "127.0.0.1:9",
            "topic": "out",
            "delivery": "at_least_once",
            "linger_ms": "0",
            "batch_size": "65536",
            "compression": "lz4",
            "kafka_properties": '{"client.id": "etl"}',
        }
    )
    assert options.batching == ProducerBatching(0, 65_536, Compression.LZ4)
    config = PartitionWriter(options, 0)._producer_config()
    assert (config["linger.ms"], config["batch.size"], config["compression.type"]) == (
        0,
        65_536,
        "lz4",
    )
    assert config["client.id"] == "etl"
    unset = SinkOptions.parse(
        {"bootstrap_servers": "h:1", "topic": "t", "delivery": "at_least_once"}
    )
    assert unset.batching == ProducerBatching()
