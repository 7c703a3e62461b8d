"""Kafka offset ranges: the unit of input of a checkpoint.

A range is ``[start, end)`` of *offsets*, not a count of records: with transactions some
offsets hold control records (commit/abort markers) or aborted data that a
``read_committed`` reader never sees, so a range of 10 offsets may hold fewer records.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, TopicPartition

from lockgate.executor.errors import SourceError


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Offsets ``start`` (inclusive) to ``end`` (exclusive) of one topic partition."""

    topic: str
    partition: int
    start: int
    end: int

    def __post_init__(self) -> None:
        if self.partition < 0 or self.start < 0 or self.end < self.start:
            raise ValueError(f"invalid offset range {self}: need 0 <= start <= end")

    @property
    def size(self) -> int:
        """Number of offsets covered (an upper bound on the records read)."""
        return self.end - self.start


def split_range(offset_range: OffsetRange, max_offsets: int) -> list[OffsetRange]:
    """Split a range into consecutive chunks of at most ``max_offsets`` offsets.

    Only for pipelines that need no per-key order: chunks are written by different
    producers, which interleaves them in the output partition.
    """
    if max_offsets <= 0:
        raise ValueError("max_offsets must be positive")
    if offset_range.size <= max_offsets:
        return [offset_range]
    return [
        OffsetRange(
            offset_range.topic,
            offset_range.partition,
            start,
            min(start + max_offsets, offset_range.end),
        )
        for start in range(offset_range.start, offset_range.end, max_offsets)
    ]


def _consumer(bootstrap_servers: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            # No group is ever joined or committed: offsets come from the coordinator.
            "group.id": "lockgate-offset-snapshot",
            "enable.auto.commit": False,
            # Watermark queries then return the last stable offset, so a range never ends
            # inside a transaction that is still undecided.
            "isolation.level": "read_committed",
        }
    )


def topic_partitions(*, bootstrap_servers: str, topic: str, timeout_s: float = 10.0) -> list[int]:
    """The partition ids of ``topic``; ``SourceError`` naming the topic if it does not exist."""
    consumer = _consumer(bootstrap_servers)
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s)
    except KafkaException as exc:
        raise SourceError(
            f"cannot read metadata of topic {topic!r} from {bootstrap_servers}: {exc}"
        ) from exc
    finally:
        consumer.close()
    topic_metadata = metadata.topics.get(topic)
    if topic_metadata is None or topic_metadata.error is not None or not topic_metadata.partitions:
        raise SourceError(
            f"source topic {topic!r} does not exist on {bootstrap_servers};"
            " create it or fix source.kafka.topics"
        )
    return sorted(topic_metadata.partitions)


def snapshot_offset_ranges(
    *,
    bootstrap_servers: str,
    topics: Iterable[str],
    start_offsets: Mapping[tuple[str, int], int],
    starting_offsets: str = "earliest",
    max_offsets_per_partition: int | None = None,
    timeout_s: float = 10.0,
) -> list[OffsetRange]:
    """Snapshot the next checkpoint's input: one range per partition of ``topics``.

    Each range starts at ``start_offsets[(topic, partition)]`` (the end of the last
    complete checkpoint) or, for a partition never read, at the ``starting_offsets``
    policy (``earliest`` = log start, ``latest`` = current last stable offset); it ends at
    the partition's last stable offset (read_committed high watermark), capped at
    ``max_offsets_per_partition`` offsets to bound the batch. Empty ranges are included so
    the caller can carry the position forward.
    """
    consumer = _consumer(bootstrap_servers)
    ranges: list[OffsetRange] = []
    try:
        for topic in topics:
            for partition in topic_partitions(
                bootstrap_servers=bootstrap_servers, topic=topic, timeout_s=timeout_s
            ):
                try:
                    low, stable = consumer.get_watermark_offsets(
                        TopicPartition(topic, partition), timeout=timeout_s, cached=False
                    )
                except KafkaException as exc:
                    raise SourceError(
                        f"cannot read the end offsets of {topic}[{partition}]: {exc}"
                    ) from exc
                start = start_offsets.get((topic, partition))
                if start is None:
                    start = low if starting_offsets == "earliest" else stable
                # Retention may have deleted offsets below the log start.
                start = max(start, low)
                end = max(start, stable)
                if max_offsets_per_partition is not None:
                    end = min(end, start + max_offsets_per_partition)
                ranges.append(OffsetRange(topic, partition, start, end))
    finally:
        consumer.close()
    return ranges
