"""A batch that changes no record as one chained Spark stage: read and produce in one task.

Flink chains a source to its sink when nothing between them needs a shuffle; Lockgate
chains them when nothing between them needs Spark's SQL engine: the pipeline has no
transform, or a `transform.sql` that only selects columns of its batch
(`SELECT key, value, headers FROM input`: ``sql_transform.projected_columns``), and a bad
record fails the task (``errors.tolerance: none``; marking bad records for the dead-letter
topic splits the batch in two, which the DataFrame path does). Each
Spark task of the batch then reads its offset ranges with the source's reader
(``kafka_source_read``) and hands what it read straight to the sink's ``PartitionWriter``
(the selected columns only), inside one Spark Python worker: each consume call's messages
as they are when both sides' formats are ``bytes``, Arrow batches through the codecs
otherwise.
Compared with the DataFrame path
(``batch.run_precommit_batch`` through the two Python data sources):

- the records never enter the JVM: no Arrow hop out of the reader's worker and into the
  writer's, and one Python worker per running task instead of two;
- no Spark Python planner worker runs: the data sources' create, plan-read, plan-write and
  commit rounds (seconds per checkpoint under load) are gone, and so is the memory of
  those workers while only chained pipelines run (README, issue 13).

What stays the same, because the same code does it: the Spark tasks are the source's
packed or split ranges (``kafka_source.plan_partitions``), in order; write partition ``k``
writes with ``transactional.id`` ``<prefix>-k`` (``kafka_sink.transactional_id_for``), so
Spark's retried and speculative attempts of a task share the id and fence each other; only
the successful attempt's result reaches the driver (``collect``); every record is counted
and located as on the DataFrame path. When the job fails, every write partition's id is
fenced (``init_transactions``) before the error is raised, as the data source's
``abort()`` does for the partitions it has no message of.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from pyspark import TaskContext
from pyspark.sql import SparkSession

from lockgate.common.model.offsets import OffsetRange
from lockgate.common.model.pipeline_spec import Delivery, ErrorTolerance, PipelineSpec, RecordFormat
from lockgate.common.model.sql_transform import projected_columns
from lockgate.executor.dataplane.spark.kafka_sink import (
    KafkaSinkCommitMessage,
    SinkOptions,
    transactional_id_for,
)
from lockgate.executor.dataplane.spark.kafka_source import (
    SOURCE_COLUMNS,
    SourceOptions,
    plan_partitions,
)

if TYPE_CHECKING:
    from lockgate.executor.dataplane.spark.kafka_sink_write import PartitionWriter
    from lockgate.executor.dataplane.spark.kafka_source_read import ConsumedMessages

_LOG = logging.getLogger(__name__)
_Headers = list[list[tuple[str, bytes | None]] | None]


def chained_columns(spec: PipelineSpec) -> tuple[str, ...] | None:
    """The source columns a batch of ``spec`` hands to the sink when it runs chained (all
    of them without a transform, the selected ones for a `transform.sql` that only selects
    columns, `value` among them); None when it needs Spark's engine: another transform, or
    bad records marked for the dead-letter topic."""
    if spec.errors.tolerance is not ErrorTolerance.NONE or spec.transform.python is not None:
        return None
    if spec.transform.sql is None:
        return SOURCE_COLUMNS
    columns = projected_columns(spec.transform.sql, SOURCE_COLUMNS)
    # Without `value` the DataFrame path names what is missing (prepare_sink_frame).
    return columns if columns is not None and "value" in columns else None


@dataclass(frozen=True)
class CopiedPartition:
    """What one chained task reports: the sink's commit message and what it read."""

    message: KafkaSinkCommitMessage
    records_read: int
    #: The oldest Kafka timestamp read, in µs since the epoch; None if no record had one.
    oldest_timestamp_us: int | None
    #: Bytes of the keys and values read (a decoded value counts its text's bytes).
    bytes_read: int


def copy_partition(
    source: SourceOptions,
    sink: SinkOptions,
    *,
    columns: Sequence[str] = SOURCE_COLUMNS,
    write_partition: int,
    ranges: Sequence[OffsetRange],
    attempt: int,
) -> CopiedPartition:
    """Read ``ranges`` in order and write every record's ``columns`` through one producer
    (one transaction for exactly_once), left prepared; runs in a Spark Python worker.

    Bytes in and bytes out (both sides' formats ``bytes``, the usual copy) hand each
    consume call's messages to the producer as they are (``_copy_messages``); any other
    format goes through the source's Arrow batches, decoded, and the sink's codecs."""
    # Here, not at the top: a process that only plans never loads pyarrow or librdkafka.
    from lockgate.executor.dataplane.spark.kafka_sink_write import PartitionWriter
    from lockgate.executor.dataplane.spark.kafka_source_read import read_ranges

    writer = PartitionWriter(sink, write_partition)
    raw_source = source.key_format is RecordFormat.BYTES and (
        source.value_format is RecordFormat.BYTES
    )
    copy = _copy_messages if raw_source and writer.passes_through else _copy_batches
    read = _Read()
    try:
        if any(r.size for r in ranges):
            writer.open_early()
        # Closed here, not when the generator is collected: a failed copy's traceback keeps
        # it alive, and its consumers with it.
        with contextlib.closing(read_ranges(source, ranges)) as ranges_read:
            for offset_range, messages in ranges_read:
                copy(source, offset_range, messages, writer, columns, read)
        message = writer.precommit(attempt)
    except BaseException:
        writer.abandon()
        raise
    return CopiedPartition(message, read.records, read.oldest_us, read.bytes)


@dataclass
class _Read:
    """What a chained task has read so far."""

    records: int = 0
    bytes: int = 0
    oldest_us: int | None = None

    def saw_timestamp(self, timestamp_us: int | None) -> None:
        if timestamp_us is not None:
            self.oldest_us = (
                timestamp_us if self.oldest_us is None else min(self.oldest_us, timestamp_us)
            )


def _copy_batches(
    source: SourceOptions,
    offset_range: OffsetRange,
    messages: Iterable[ConsumedMessages],
    writer: PartitionWriter,
    columns: Sequence[str],
    read: _Read,
) -> None:
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    from lockgate.executor.dataplane.spark.kafka_sink_write import column_bytes
    from lockgate.executor.dataplane.spark.kafka_source_read import range_batches

    selected = list(columns)
    for batch in range_batches(source, offset_range, messages):
        read.records += batch.num_rows
        read.bytes += column_bytes(batch, "key") + column_bytes(batch, "value")
        read.saw_timestamp(pc.min(batch.column("timestamp").cast("int64")).as_py())
        writer.write_batch(batch.select(selected))


def _copy_messages(
    source: SourceOptions,
    offset_range: OffsetRange,
    consumed: Iterable[ConsumedMessages],
    writer: PartitionWriter,
    columns: Sequence[str],
    read: _Read,
) -> None:
    """Produce each message's selected parts as the source read them: one list per part
    and consume call, and no Arrow batch (5-10 % of a copying task's CPU: README, issue 13)."""
    with_keys, with_headers = "key" in columns, "headers" in columns
    with_timestamps = "timestamp" in columns
    for messages in consumed:
        keys = [m.key() for m in messages]
        values = [m.value() for m in messages]
        # librdkafka gives -1 for a record without a timestamp.
        stamps = [m.timestamp()[1] for m in messages]
        read.records += len(messages)
        key_bytes = sum(map(len, filter(None, keys)))
        value_bytes = sum(map(len, filter(None, values)))
        read.bytes += key_bytes + value_bytes
        oldest_ms = min(filter((0).__le__, stamps), default=None)
        read.saw_timestamp(None if oldest_ms is None else oldest_ms * 1000)
        # A consumed message's headers: None or a list of (str, bytes) tuples. Rows with
        # none, the usual case, go through the producer's plainest call (write_rows).
        headers = cast(_Headers, [m.headers() for m in messages]) if with_headers else None
        writer.write_rows(
            keys if with_keys else [None] * len(values),
            values,
            headers if headers is not None and any(headers) else itertools.repeat(None),
            # 0: the producer stamps the record, as for a null timestamp column.
            [t if t > 0 else 0 for t in stamps] if with_timestamps else itertools.repeat(0),
            size=value_bytes + key_bytes if with_keys else value_bytes,
        )


def _copy_task(
    source: SourceOptions,
    sink: SinkOptions,
    columns: tuple[str, ...],
    packs: Iterable[tuple[int, tuple[OffsetRange, ...]]],
) -> Iterator[CopiedPartition]:
    context = TaskContext.get()
    attempt = context.attemptNumber() if context is not None else 0
    for write_partition, ranges in packs:
        yield copy_partition(
            source,
            sink,
            columns=columns,
            write_partition=write_partition,
            ranges=ranges,
            attempt=attempt,
        )


def run_chained(
    session: SparkSession,
    source: SourceOptions,
    sink: SinkOptions,
    *,
    columns: tuple[str, ...] = SOURCE_COLUMNS,
) -> list[CopiedPartition]:
    """Run the batch of ``source.ranges`` as one Spark job of chained tasks, one per packed
    or split range, each writing ``columns`` of its records; their results in
    write-partition order.

    On failure every write partition's transactional id is fenced, then Spark's error is
    raised as it came (the caller names it).
    """
    packs = plan_partitions(
        source.ranges,
        max_offsets_per_split=source.max_offsets_per_split,
        pack_offsets=source.pack_offsets,
        max_partitions=source.max_partitions,
    )
    if not packs:
        return []
    # One element per slice: write partition k is element k, whichever task runs it.
    work = session.sparkContext.parallelize(list(enumerate(packs)), len(packs))
    try:
        copied: list[CopiedPartition] = work.mapPartitions(
            functools.partial(_copy_task, source, sink, columns)
        ).collect()
    except BaseException:
        # Best effort, as Spark's abort() of a data source write: a fence that fails (Kafka
        # down, often why the job failed) must not replace the job's own error; the leader
        # aborts the checkpoint's slot again, and the next user of the ids fences them.
        try:
            _fence_write_partitions(sink, len(packs))
        except Exception:
            _LOG.warning("fencing the write partitions of a failed chained job", exc_info=True)
        raise
    return sorted(copied, key=lambda c: c.message.write_partition)


def _fence_write_partitions(sink: SinkOptions, count: int) -> None:
    if sink.delivery is not Delivery.EXACTLY_ONCE:
        return
    from lockgate.executor.dataplane.spark.kafka_sink_write import fence_transactional_id

    for write_partition in range(count):
        fence_transactional_id(
            bootstrap_servers=sink.bootstrap_servers,
            transactional_id=transactional_id_for(sink.transactional_id_prefix, write_partition),
            properties=sink.resolved_properties(),
        )


__all__ = ["CopiedPartition", "chained_columns", "copy_partition", "run_chained"]
