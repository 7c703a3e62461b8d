"""Where a pipeline is in its sources: a topic-partition and a half-open offset range.

A range is `[start_offset, end_offset)` of *offsets*, not a count of records: with
transactions some offsets hold control records (commit/abort markers) or aborted data that
a `read_committed` reader never sees, so a range of 10 offsets may hold fewer records.
`end_offset` is the next offset to read: what a restored task starts from.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class TopicPartition:
    """One partition of a Kafka topic."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return partition_name(self.topic, self.partition)


def partition_name(topic: str, partition: int) -> str:
    """A partition as every message and view names it: `topic[partition]`."""
    return f"{topic}[{partition}]"


def range_name(topic: str, partition: int, start_offset: int, end_offset: int) -> str:
    """A half-open offset range as views name it: `topic[partition] start..end`."""
    return f"{partition_name(topic, partition)} {start_offset}..{end_offset}"


def record_name(topic: str, partition: int, offset: int) -> str:
    """One record's place as errors name it: `topic[partition]@offset`."""
    return f"{partition_name(topic, partition)}@{offset}"


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Offsets `start_offset` (inclusive) to `end_offset` (exclusive) of one partition.

    Constructing one that is not a range (negative partition or offset, end before start)
    raises ValueError: a pre-commit report or a snapshot never holds such a thing.
    """

    topic: str
    partition: int
    start_offset: int
    end_offset: int

    def __post_init__(self) -> None:
        if not self.topic or self.partition < 0 or not 0 <= self.start_offset <= self.end_offset:
            raise ValueError(
                f"{self.topic!r}[{self.partition}] [{self.start_offset}, {self.end_offset}) is "
                "not a half-open range of a named partition with 0 <= start <= end"
            )

    @property
    def topic_partition(self) -> TopicPartition:
        """The partition this range belongs to."""
        return TopicPartition(self.topic, self.partition)

    @property
    def size(self) -> int:
        """Number of offsets covered (an upper bound on the records read)."""
        return self.end_offset - self.start_offset


def split_range(offset_range: OffsetRange, max_offsets: int) -> list[OffsetRange]:
    """Split a range into consecutive chunks of at most `max_offsets` offsets.

    Only for pipelines that need no per-key order (`allow_reordering`): chunks are written
    by different producers, which interleaves them in the output partition (DESIGN.md).
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
            min(start + max_offsets, offset_range.end_offset),
        )
        for start in range(offset_range.start_offset, offset_range.end_offset, max_offsets)
    ]
