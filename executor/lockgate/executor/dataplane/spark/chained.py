"""A batch without a transform as one chained Spark stage: read and produce in one task.

Flink chains a source to its sink when nothing between them needs a shuffle; Lockgate
chains them when nothing between them needs Spark's SQL engine: the pipeline has no
transform and a bad record fails the task (``errors.tolerance: none``; marking bad records
for the dead-letter topic splits the batch in two, which the DataFrame path does). Each
Spark task of the batch then reads its offset ranges with the source's reader
(``kafka_source_read.read_range``) and hands every Arrow batch straight to the sink's
``PartitionWriter``, inside one Spark Python worker. Compared with the DataFrame path
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

import functools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from pyspark import TaskContext
from pyspark.sql import SparkSession

from lockgate.common.model.offsets import OffsetRange
from lockgate.common.model.pipeline_spec import Delivery, ErrorTolerance, PipelineSpec
from lockgate.executor.dataplane.spark.kafka_sink import (
    KafkaSinkCommitMessage,
    SinkOptions,
    transactional_id_for,
)
from lockgate.executor.dataplane.spark.kafka_source import SourceOptions, plan_partitions


def chains(spec: PipelineSpec) -> bool:
    """Whether a batch of ``spec`` runs chained: no transform, and a bad record fails
    the task rather than going to the dead-letter topic."""
    return (
        spec.transform.sql is None
        and spec.transform.python is None
        and spec.errors.tolerance is ErrorTolerance.NONE
    )


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
    write_partition: int,
    ranges: Sequence[OffsetRange],
    attempt: int,
) -> CopiedPartition:
    """Read ``ranges`` in order and write every record through one producer (one
    transaction for exactly_once), left prepared; runs in a Spark Python worker."""
    # Here, not at the top: a process that only plans never loads pyarrow or librdkafka.
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    from lockgate.executor.dataplane.spark.kafka_sink_write import PartitionWriter, column_bytes
    from lockgate.executor.dataplane.spark.kafka_source_read import read_range

    writer = PartitionWriter(sink, write_partition)
    records = 0
    bytes_read = 0
    oldest: int | None = None
    try:
        for offset_range in ranges:
            for batch in read_range(source, offset_range):
                records += batch.num_rows
                bytes_read += column_bytes(batch, "key") + column_bytes(batch, "value")
                batch_oldest = pc.min(batch.column("timestamp").cast("int64")).as_py()
                if batch_oldest is not None:
                    oldest = batch_oldest if oldest is None else min(oldest, batch_oldest)
                writer.write_batch(batch)
        message = writer.precommit(attempt)
    except BaseException:
        writer.abandon()
        raise
    return CopiedPartition(message, records, oldest, bytes_read)


def _copy_task(
    source: SourceOptions,
    sink: SinkOptions,
    packs: Iterable[tuple[int, tuple[OffsetRange, ...]]],
) -> Iterator[CopiedPartition]:
    context = TaskContext.get()
    attempt = context.attemptNumber() if context is not None else 0
    for write_partition, ranges in packs:
        yield copy_partition(
            source, sink, write_partition=write_partition, ranges=ranges, attempt=attempt
        )


def run_chained(
    session: SparkSession, source: SourceOptions, sink: SinkOptions
) -> list[CopiedPartition]:
    """Run the batch of ``source.ranges`` as one Spark job of chained tasks, one per packed
    or split range; their results in write-partition order.

    On failure every write partition's transactional id is fenced, then Spark's error is
    raised as it came (the caller names it).
    """
    packs = plan_partitions(
        source.ranges,
        max_offsets_per_split=source.max_offsets_per_split,
        pack_offsets=source.pack_offsets,
    )
    if not packs:
        return []
    # One element per slice: write partition k is element k, whichever task runs it.
    work = session.sparkContext.parallelize(list(enumerate(packs)), len(packs))
    try:
        copied: list[CopiedPartition] = work.mapPartitions(
            functools.partial(_copy_task, source, sink)
        ).collect()
    except BaseException:
        _fence_write_partitions(sink, len(packs))
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


__all__ = ["CopiedPartition", "chains", "copy_partition", "run_chained"]
