"""The Kafka source's per-record path, on messages as confluent-kafka hands them over."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import KafkaError

from lockgate.common.model.offsets import OffsetRange
from lockgate.executor.dataplane.spark import kafka_source, kafka_source_read
from lockgate.executor.dataplane.spark.kafka_source import (
    ERROR_COLUMN,
    ON_BAD_RECORD_MARK,
    RAW_VALUE_COLUMN,
    SourceOptions,
    pack_ranges,
    plan_partitions,
    ranges_to_option,
)
from lockgate.executor.dataplane.spark.kafka_source_read import BatchBuilder, messages_in_range
from lockgate.executor.errors import SourceError, WorkerRecordError

RANGE = OffsetRange("in", 3, 10, 20)


@dataclass
class FakeMessage:
    """What the source reads of a ``confluent_kafka.Message``."""

    offset_: int | None
    value_: bytes | None = b"v"
    key_: bytes | None = None
    timestamp_ms: int = 1_000
    headers_: list[tuple[str, bytes | None]] | None = None
    error_: KafkaError | None = None

    def offset(self) -> int | None:
        return self.offset_

    def key(self) -> bytes | None:
        return self.key_

    def value(self) -> bytes | None:
        return self.value_

    def timestamp(self) -> tuple[int, int]:
        return (1, self.timestamp_ms)

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return self.headers_

    def error(self) -> KafkaError | None:
        return self.error_


def _options(**extra: str) -> SourceOptions:
    return SourceOptions.parse(
        {"bootstrap_servers": "k:9092", "offset_ranges": ranges_to_option([RANGE]), **extra}
    )


def _rows(builder: BatchBuilder, messages: list[Any]) -> list[dict[str, Any]]:
    builder.extend(messages)
    rows: list[dict[str, Any]] = builder.build().to_pylist()
    return rows


def test_rows_keep_headers_only_where_a_record_has_them_and_null_missing_timestamps() -> None:
    rows = _rows(
        BatchBuilder(_options(), RANGE),
        [
            FakeMessage(10, key_=b"k", headers_=[("h", b"1"), ("n", None)]),
            FakeMessage(11, timestamp_ms=-1),
        ],
    )
    assert [(r["key"], r["value"], r["offset"]) for r in rows] == [
        (b"k", b"v", 10),
        (None, b"v", 11),
    ]
    assert [(r["topic"], r["partition"]) for r in rows] == [("in", 3), ("in", 3)]
    assert rows[0]["headers"] == [{"key": "h", "value": b"1"}, {"key": "n", "value": None}]
    assert rows[1]["headers"] is None
    assert rows[0]["timestamp"].timestamp() == 1.0
    assert rows[1]["timestamp"] is None


def test_rows_without_any_header_have_null_headers() -> None:
    rows = _rows(BatchBuilder(_options(), RANGE), [FakeMessage(10), FakeMessage(11)])
    assert [r["headers"] for r in rows] == [None, None]


def test_a_bad_record_fails_naming_its_offset_or_is_marked() -> None:
    bad = [FakeMessage(10, value_=b"ok"), FakeMessage(11, value_=b"\xff")]
    with pytest.raises(WorkerRecordError, match=r"bad record at in\[3\]@11"):
        _rows(BatchBuilder(_options(value_format="string"), RANGE), bad)
    rows = _rows(
        BatchBuilder(_options(value_format="string", on_bad_record=ON_BAD_RECORD_MARK), RANGE),
        bad,
    )
    assert [(r["value"], r[ERROR_COLUMN] is None) for r in rows] == [("ok", True), (None, False)]
    assert rows[1][RAW_VALUE_COLUMN] == b"\xff"


def _eof(offset: int) -> FakeMessage:
    return FakeMessage(offset, error_=KafkaError(KafkaError._PARTITION_EOF))


def test_in_range_takes_every_data_message_below_the_end() -> None:
    messages: list[Any] = [FakeMessage(12), FakeMessage(13)]
    data, position = messages_in_range(messages, 12, 20, "in[3]")
    assert ([m.offset() for m in data], position) == ([12, 13], 14)


def test_in_range_stops_at_the_end_and_counts_partition_eof_as_progress() -> None:
    messages: list[Any] = [FakeMessage(18), FakeMessage(19), FakeMessage(20), FakeMessage(21)]
    data, position = messages_in_range(messages, 18, 20, "in[3]")
    assert ([m.offset() for m in data], position) == ([18, 19], 20)
    # Control records before the EOF were never delivered: the EOF's offset is the position.
    data, position = messages_in_range([FakeMessage(14), _eof(17)], 14, 20, "in[3]")
    assert ([m.offset() for m in data], position) == ([14], 17)
    assert messages_in_range([], 15, 20, "in[3]") == ([], 15)


def test_in_range_fails_on_another_error_naming_the_partition() -> None:
    failed = FakeMessage(None, error_=KafkaError(KafkaError._TRANSPORT))
    with pytest.raises(SourceError, match=r"reading in\[3\] at offset 15"):
        messages_in_range([FakeMessage(14), failed], 14, 20, "in[3]")


def test_small_ranges_are_packed_whole_and_in_order_and_large_ones_stay_alone() -> None:
    a, b, c, d = (OffsetRange("t", p, 0, n) for p, n in enumerate((3, 4, 20, 2)))
    empty = OffsetRange("t", 9, 5, 5)
    assert pack_ranges([a, empty, b, c, d], 10) == [(a, b), (c,), (d,)]
    assert pack_ranges([a, b, c, d], 0) == [(a,), (b,), (c,), (d,)]
    assert pack_ranges([empty], 10) == []


def test_more_packs_than_task_slots_are_spread_over_the_slots_whole_and_in_order() -> None:
    """Four 50,000-offset ranges on 2 slots ran as two waves of tasks; now as 2 of 2."""
    big = [OffsetRange("t", p, 0, 50_000) for p in range(4)]
    assert pack_ranges(big, 10_000, max_packs=2) == [(big[0], big[2]), (big[1], big[3])]
    # Uneven ranges: the largest first, each to the group with the fewest offsets so far.
    a, b, c, d, e = (OffsetRange("t", p, 0, n) for p, n in enumerate((30, 50, 20, 25, 10)))
    empty = OffsetRange("t", 9, 5, 5)
    groups = pack_ranges([a, empty, b, c, d, e], 10, max_packs=2)
    assert groups == [(b, c), (a, d, e)], "each group in the ranges' own order"
    assert sorted(sum(r.size for r in g) for g in groups) == [65, 70]
    # As many packs as slots, or fewer, stay as they are; 0 slots: no cap.
    assert pack_ranges(big, 10_000, max_packs=4) == [(r,) for r in big]
    assert pack_ranges(big, 10_000, max_packs=0) == [(r,) for r in big]
    assert pack_ranges([a, b], 100, max_packs=1) == [(a, b)]
    assert pack_ranges(big, 10_000, max_packs=1) == [tuple(big)]


def test_the_slots_cap_applies_to_packed_plans_not_to_split_ones() -> None:
    big = [OffsetRange("t", p, 0, 50_000) for p in range(4)]
    assert (
        len(plan_partitions(big, max_offsets_per_split=0, pack_offsets=10, max_partitions=2)) == 2
    )
    # A pipeline that allows reordering splits its ranges for more tasks, not fewer.
    split = plan_partitions(big, max_offsets_per_split=25_000, pack_offsets=10, max_partitions=2)
    assert len(split) == 8


def test_a_packed_partition_reads_its_ranges_one_after_the_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read: list[OffsetRange] = []

    def read_ranges(_options: SourceOptions, ranges: Iterable[OffsetRange]) -> Iterator[Any]:
        for offset_range in ranges:
            read.append(offset_range)
            yield offset_range, iter(())

    monkeypatch.setattr(kafka_source_read, "read_ranges", read_ranges)
    ranges = [OffsetRange("in", p, 0, 5) for p in range(3)]
    options = SourceOptions.parse(
        {
            "bootstrap_servers": "k:9092",
            "offset_ranges": ranges_to_option(ranges),
            "pack_offsets": "10",
        }
    )
    reader = kafka_source.KafkaSourceReader(options)
    partitions = reader.partitions()
    assert len(partitions) == 2
    for partition in partitions:
        list(reader.read(partition))
    assert read == ranges


class FakeConsumer:
    """A consumer over the data messages at ``offsets`` (from RANGE's start), recording
    how many messages each ``consume`` call asks for."""

    def __init__(self, offsets: list[int]) -> None:
        self.pending = [FakeMessage(offset) for offset in offsets]
        self.asked: list[int] = []

    def assign(self, _partitions: object) -> None:
        pass

    def consume(self, num_messages: int, timeout: float) -> list[FakeMessage]:
        self.asked.append(num_messages)
        taken, self.pending = self.pending[:num_messages], self.pending[num_messages:]
        return taken

    def position(self, partitions: list[Any]) -> list[Any]:
        return partitions

    def close(self) -> None:
        pass


def test_a_read_never_asks_for_more_messages_than_its_range_still_holds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # librdkafka's consume() waits out its whole timeout unless it gets as many messages as
    # asked for: asking for more than the range holds cost every range 0.5 s at its end.
    consumer = FakeConsumer(list(range(RANGE.start_offset, RANGE.end_offset + 5)))
    monkeypatch.setattr(kafka_source_read, "Consumer", lambda _settings: consumer)
    batches = list(kafka_source_read.read_range(_options(), RANGE))
    assert sum(batch.num_rows for batch in batches) == RANGE.size
    assert consumer.asked == [RANGE.size]


class TrackedConsumers:
    """The consumers ``kafka_source_read`` builds, each a ``FakeConsumer`` over ``RANGE``
    (or one whose ``consume`` raises, ``failing``), and a log of each one's ``open N`` (its
    assignment) and ``close N``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, failing: bool = False) -> None:
        self.opened: list[FakeConsumer] = []
        self.log: list[str] = []
        self._failing = failing
        monkeypatch.setattr(kafka_source_read, "Consumer", self._build)

    def _build(self, _settings: object) -> FakeConsumer:
        tracked = self

        class Tracked(FakeConsumer):
            def assign(self, _partitions: object) -> None:
                tracked.log.append(f"open {tracked.opened.index(self)}")

            def consume(self, num_messages: int, timeout: float) -> list[FakeMessage]:
                if tracked._failing:
                    raise RuntimeError("broker gone")
                return super().consume(num_messages, timeout)

            def close(self) -> None:
                tracked.log.append(f"close {tracked.opened.index(self)}")

        self.opened.append(Tracked(list(range(RANGE.start_offset, RANGE.end_offset))))
        return self.opened[-1]


def test_the_next_ranges_consumer_is_open_while_a_range_is_read_and_none_is_left_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A range's consumer connects and fetches as the range before it is read, so its first
    # fetch is not waited for; at most two are open, and every one is closed, also when the
    # reader leaves early.
    consumers = TrackedConsumers(monkeypatch)
    log = consumers.log
    ranges = [RANGE, OffsetRange(RANGE.topic, RANGE.partition, 0, 0), RANGE, RANGE]
    read: list[tuple[OffsetRange, int]] = []
    for offset_range, messages in kafka_source_read.read_ranges(_options(), ranges):
        log.append(f"read {len(read)}")
        read.append((offset_range, sum(map(len, messages))))
    assert read == [(RANGE, RANGE.size)] * 3  # the empty range: no consumer, nothing to read
    assert log == [
        "open 0", "open 1", "read 0", "close 0",
        "open 2", "read 1", "close 1",
        "read 2", "close 2",
    ]  # fmt: skip

    consumers = TrackedConsumers(monkeypatch)
    reading = kafka_source_read.read_ranges(_options(), [RANGE, RANGE, RANGE])
    next(reading)
    reading.close()
    assert consumers.log == ["open 0", "open 1", "close 0", "close 1"]


def test_a_read_that_fails_closes_its_consumers_before_its_error_is_handled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The error's traceback keeps the reading generator alive: its consumers must not wait
    # for it to be collected.
    consumers = TrackedConsumers(monkeypatch, failing=True)
    ranges = [OffsetRange("in", p, 0, 5) for p in range(3)]
    options = SourceOptions.parse(
        {
            "bootstrap_servers": "k:9092",
            "offset_ranges": ranges_to_option(ranges),
            "pack_offsets": "100",
        }
    )
    reader = kafka_source.KafkaSourceReader(options)
    (partition,) = reader.partitions()
    with pytest.raises(RuntimeError, match="broker gone") as failed:
        list(reader.read(partition))
    assert failed.value.__traceback__ is not None
    assert len(consumers.opened) == 2
    assert sorted(e for e in consumers.log if e.startswith("close")) == ["close 0", "close 1"]
