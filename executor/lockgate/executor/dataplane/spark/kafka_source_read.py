"""The Kafka source's reading half: offset ranges with confluent-kafka, into Arrow batches.

Imported only inside the Spark task that reads (``KafkaSourceReader.read``), so Spark's
Python planner workers, which unpickle ``kafka_source.py`` to plan a read, load neither
pyarrow nor librdkafka (about 60 MB of resident memory each, README issue 13).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Generator, Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from lockgate.common.kafka_config import redact, resolve_properties
from lockgate.common.model.offsets import OffsetRange, partition_name
from lockgate.common.model.pipeline_spec import RecordFormat
from lockgate.executor.dataplane.spark.formats import DecodeFailure, RecordCodec, codec_for
from lockgate.executor.dataplane.spark.kafka_source import (
    ERROR_COLUMN,
    ON_BAD_RECORD_MARK,
    RAW_KEY_COLUMN,
    RAW_VALUE_COLUMN,
    SourceOptions,
)
from lockgate.executor.errors import RecordError, RecordLocation, SourceError, WorkerRecordError

_ROWS_PER_ARROW_BATCH = 10_000
#: One consume call's data messages of a range, in offset order (``read_ranges``).
ConsumedMessages = list[Message]
#: librdkafka's largest queued.min.messages (read_ranges sets it to the range's size).
SOURCE_QUEUED_MIN_MESSAGES = 10_000_000
_HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


class BatchBuilder:
    """Accumulates one range's records column by column into Arrow record batches.

    Topic and partition are constant per range, so they are filled in at build time; the
    per-record work is kept to one list comprehension per column and consume call (the hot
    loop of the whole source), with the codecs called only for formats that decode.
    """

    def __init__(self, options: SourceOptions, offset_range: OffsetRange) -> None:
        url = options.schema_registry_url
        self._key_codec: RecordCodec = codec_for(options.key_format, schema_registry_url=url)
        self._value_codec: RecordCodec = codec_for(options.value_format, schema_registry_url=url)
        self._marked = options.on_bad_record == ON_BAD_RECORD_MARK
        # Bytes keys and values are the column values as they are: no codec call per record.
        self._raw_keys = options.key_format is RecordFormat.BYTES
        self._raw_values = options.value_format is RecordFormat.BYTES
        self._topic = offset_range.topic
        self._partition = offset_range.partition
        self._schema = pa.schema(
            [
                ("key", pa.binary() if self._key_codec.column_type == "binary" else pa.string()),
                (
                    "value",
                    pa.binary() if self._value_codec.column_type == "binary" else pa.string(),
                ),
                ("topic", pa.string()),
                ("partition", pa.int32()),
                ("offset", pa.int64()),
                ("timestamp", pa.timestamp("us", tz="UTC")),
                ("headers", _HEADER_TYPE),
            ]
            + (
                [
                    (RAW_KEY_COLUMN, pa.binary()),
                    (RAW_VALUE_COLUMN, pa.binary()),
                    (ERROR_COLUMN, pa.string()),
                ]
                if self._marked
                else []
            )
        )
        self._reset()

    def _reset(self) -> None:
        self._keys: list[Any] = []
        self._values: list[Any] = []
        self._offsets: list[int] = []
        self._timestamps_ms: list[int] = []
        self._headers: list[Any] = []
        self._raw: list[tuple[bytes | None, bytes | None, str | None]] = []

    def __len__(self) -> int:
        return len(self._offsets)

    def extend(self, messages: Sequence[Message]) -> None:
        """Decode and append ``messages`` (data messages); raises ``WorkerRecordError`` on a
        bad record when not marking."""
        offsets = [m.offset() or 0 for m in messages]
        raw_keys = [m.key() for m in messages]
        raw_values = [m.value() for m in messages]
        if self._raw_keys and self._raw_values:
            self._keys += raw_keys
            self._values += raw_values
            if self._marked:
                self._raw += [(k, v, None) for k, v in zip(raw_keys, raw_values, strict=True)]
        else:
            for raw_key, raw_value, offset in zip(raw_keys, raw_values, offsets, strict=True):
                self._decode(raw_key, raw_value, offset)
        self._offsets += offsets
        self._timestamps_ms += [m.timestamp()[1] for m in messages]
        headers: list[Any] = [m.headers() for m in messages]
        if any(headers):
            self._headers += [
                [{"key": k, "value": v} for k, v in h] if h else None for h in headers
            ]
        else:
            self._headers += [None] * len(messages)

    def _decode(self, raw_key: bytes | None, raw_value: bytes | None, offset: int) -> None:
        key: Any = raw_key
        value: Any = raw_value
        error = None
        try:
            if not self._raw_keys:
                key = self._key_codec.decode(raw_key)
            if not self._raw_values:
                value = self._value_codec.decode(raw_value)
        except DecodeFailure as exc:
            if not self._marked:
                location = RecordLocation(self._topic, self._partition, offset)
                raise WorkerRecordError(RecordError(location, str(exc))) from exc
            key, value, error = None, None, str(exc)
        self._keys.append(key)
        self._values.append(value)
        if self._marked:
            self._raw.append((raw_key, raw_value, error))

    def build(self) -> pa.RecordBatch:
        """Return the accumulated rows as one batch and start a new one."""
        rows = len(self._offsets)
        # librdkafka gives -1 for a record without a timestamp: a null.
        timestamps_ms = pa.array(self._timestamps_ms, type=pa.int64())
        timestamps = pc.if_else(
            pc.less(timestamps_ms, 0),
            pa.scalar(None, type=pa.int64()),
            pc.multiply(timestamps_ms, 1000),
        ).cast(pa.timestamp("us", tz="UTC"))
        arrays = [
            pa.array(self._keys, type=self._schema.field("key").type),
            pa.array(self._values, type=self._schema.field("value").type),
            pa.repeat(pa.scalar(self._topic, type=pa.string()), rows),
            pa.repeat(pa.scalar(self._partition, type=pa.int32()), rows),
            pa.array(self._offsets, type=pa.int64()),
            timestamps,
            pa.array(self._headers, type=_HEADER_TYPE),
        ]
        if self._marked:
            raw_keys, raw_values, errors = (
                zip(*self._raw, strict=True) if self._raw else ((), (), ())
            )
            arrays += [
                pa.array(list(raw_keys), type=pa.binary()),
                pa.array(list(raw_values), type=pa.binary()),
                pa.array(list(errors), type=pa.string()),
            ]
        self._reset()
        return pa.RecordBatch.from_arrays(arrays, schema=self._schema)


def messages_in_range(
    messages: list[Message], position: int, end_offset: int, where: str
) -> tuple[list[Message], int]:
    """The data messages of one consume call below ``end_offset``, and the position after
    them. A partition-EOF event moves the position (its offset is the last stable offset
    under read_committed); any other error is a ``SourceError``."""
    if not messages:
        return messages, position
    last = messages[-1].offset() or 0
    if last < end_offset and all(m.error() is None for m in messages):
        # The common case: every message is data (offsets increase), and only the last
        # one's offset is read (one call per record less: README, issue 13).
        return messages, last + 1
    data: list[Message] = []
    for msg in messages:
        offset = msg.offset() or 0
        error = msg.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                position = max(position, offset)
                continue
            raise SourceError(f"reading {where} at offset {position}: {error.str()}")
        if offset >= end_offset:
            return data, offset
        data.append(msg)
        position = offset + 1
    return data, position


def read_range(options: SourceOptions, offset_range: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Read exactly the committed records with offsets in ``offset_range``, in order, as
    Arrow batches of the source's columns (``read_ranges``, decoded by ``BatchBuilder``)."""
    for _, messages in read_ranges(options, (offset_range,)):
        yield from range_batches(options, offset_range, messages)


def range_batches(
    options: SourceOptions,
    offset_range: OffsetRange,
    messages: Iterable[ConsumedMessages],
) -> Iterator[pa.RecordBatch]:
    """``messages`` of ``offset_range`` (one of ``read_ranges``) as Arrow batches of the
    source's columns, decoded by ``BatchBuilder``."""
    builder = BatchBuilder(options, offset_range)
    for data in messages:
        builder.extend(data)
        if len(builder) >= _ROWS_PER_ARROW_BATCH:
            yield builder.build()
    if len(builder):
        yield builder.build()


#: How many ranges' consumers ``read_ranges`` has open at once: the range being read, and
#: the next, whose connection and first fetches overlap that reading.
_OPEN_RANGES = 2


def read_ranges(
    options: SourceOptions, ranges: Iterable[OffsetRange]
) -> Generator[tuple[OffsetRange, Iterator[ConsumedMessages]], None, None]:
    """Each of ``ranges`` that is not empty, in order, with an iterator over its committed
    records: the data messages of each consume call that had any. Read
    each range's iterator before asking for the next range.

    Each range has a consumer of its own, opened (connected, assigned, fetching) as the
    range before it starts to be read, so a range's first fetch is not waited for; it is
    closed once the caller asks for the next range, or leaves (close the generator: one
    kept alive by an error's traceback keeps its consumers open)."""
    pending = [r for r in ranges if r.size]
    opened: deque[Consumer] = deque()
    try:
        for index, offset_range in enumerate(pending):
            for ahead in pending[index + len(opened) : index + _OPEN_RANGES]:
                opened.append(_range_consumer(options, ahead))
            yield offset_range, _consume(opened[0], options, offset_range)
            opened.popleft().close()
    finally:
        for consumer in opened:
            consumer.close()


def _range_consumer(options: SourceOptions, offset_range: OffsetRange) -> Consumer:
    """A consumer of ``offset_range``'s partition, assigned at its start: librdkafka
    connects and fetches from here on, in its own threads."""
    resolved = resolve_properties(options.kafka_properties)
    settings: dict[str, Any] = {
        "bootstrap.servers": options.bootstrap_servers,
        "group.id": "lockgate-source",  # required by librdkafka; never joined or committed
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
        # Silently jumping elsewhere would lose or duplicate data: fail instead.
        "auto.offset.reset": "error",
        "fetch.max.bytes": 52_428_800,
        "queued.max.messages.kbytes": 65_536,
        # librdkafka fetches while its queue holds fewer than queued.min.messages, then stops
        # for fetch.queue.backoff.ms (1 s). The range's size: it never stops while the range
        # still needs records (the default, 100,000, paused a longer range for a second every
        # 100,000 records), and it does not prefetch past the range's end more than a fetch
        # (up to 64 MB, queued.max.messages.kbytes above, cost a 50,000-record range of a
        # backlog a third of its read time: README, issue 13).
        "queued.min.messages": min(offset_range.size, SOURCE_QUEUED_MIN_MESSAGES),
        # The source's own properties, resolved in this worker; the parser refuses the
        # keys set above that exactly-once depends on.
        **resolved,
    }
    try:
        consumer = Consumer(settings)
    except KafkaException as exc:
        # librdkafka may quote a value it refuses: never a resolved secret.
        raise SourceError(
            f"cannot build a Kafka consumer of {options.bootstrap_servers} with"
            f" source.kafka.properties: {redact(str(exc), resolved)}"
        ) from None
    try:
        consumer.assign(
            [TopicPartition(offset_range.topic, offset_range.partition, offset_range.start_offset)]
        )
    except BaseException:
        consumer.close()
        raise
    return consumer


def _consume(
    consumer: Consumer, options: SourceOptions, offset_range: OffsetRange
) -> Iterator[ConsumedMessages]:
    """Read exactly the committed records with offsets in ``offset_range`` from its
    ``consumer`` (``_range_consumer``), in order.

    Stops when the consumer's position reaches the range's end. A range may end on
    control records or aborted data that is never delivered, so besides delivered
    offsets the position and the partition-EOF event (whose offset is the last stable
    offset under read_committed) also count as progress. No progress for
    ``stall_timeout_s`` is a ``SourceError`` naming where it stuck.
    """
    tp = TopicPartition(offset_range.topic, offset_range.partition, offset_range.start_offset)
    where = partition_name(offset_range.topic, offset_range.partition)
    position = offset_range.start_offset
    last_progress = time.monotonic()
    while position < offset_range.end_offset:
        # No more than the range still holds: librdkafka's consume() waits out its
        # timeout unless it has that many, which cost every range 0.5 s at its end.
        wanted = min(_ROWS_PER_ARROW_BATCH, offset_range.end_offset - position)
        messages = consumer.consume(num_messages=wanted, timeout=0.5)
        before = position
        data, position = messages_in_range(messages, position, offset_range.end_offset, where)
        if data:
            yield data
        if not messages:
            # Skipped control records and aborted data move the position only.
            current = consumer.position([tp])[0].offset
            if current >= 0:
                position = max(position, current)
        if position > before:
            last_progress = time.monotonic()
        elif time.monotonic() - last_progress > options.stall_timeout_s:
            raise SourceError(
                f"reading {where} made no progress"
                f" for {options.stall_timeout_s:.0f}s at offset {position}, range end"
                f" {offset_range.end_offset}: is the range beyond the last stable offset?"
            )
