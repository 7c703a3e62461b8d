"""The Kafka source: a PySpark 4 Python data source that reads explicit offset ranges.

Use: ``spark.read.format(KafkaSource.name()).option("offset_ranges", ranges_to_option(r))
.option("bootstrap_servers", …).load()``. One Spark input partition per offset range (a
range is split into chunks only when ``max_offsets_per_split`` is set, which breaks
per-key order), read with confluent-kafka inside the Spark task, ``read_committed``,
``assign()`` + seek to the start, stopping when the position reaches the range's end.
Ranges come from the coordinator's checkpoints, never from consumer-group state.

Runs inside Spark's Python workers: everything reachable from here must be picklable and
importable there. This module is the planning half, imported by Spark's planner workers to
unpickle ``KafkaSource``; the reading half (``kafka_source_read.py``, with pyarrow and
confluent-kafka) is imported only by the task that reads.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from lockgate.common.model.offsets import OffsetRange, split_range
from lockgate.common.model.pipeline_spec import RecordFormat
from lockgate.executor.errors import SourceError

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

# Hidden columns added when bad records are marked instead of failing the read.
RAW_KEY_COLUMN = "__lockgate_raw_key"
RAW_VALUE_COLUMN = "__lockgate_raw_value"
ERROR_COLUMN = "__lockgate_error"

ON_BAD_RECORD_FAIL = "fail"
ON_BAD_RECORD_MARK = "mark"


def ranges_to_option(ranges: Sequence[OffsetRange]) -> str:
    """Encode offset ranges as the ``offset_ranges`` option (data source options are strings)."""
    return json.dumps([[r.topic, r.partition, r.start_offset, r.end_offset] for r in ranges])


def ranges_from_option(text: str) -> list[OffsetRange]:
    """Decode the ``offset_ranges`` option."""
    return [OffsetRange(str(t), int(p), int(s), int(e)) for t, p, s, e in json.loads(text)]


@dataclass(frozen=True)
class SourceOptions:
    """The reader's options, parsed once on the driver and shipped to the tasks."""

    bootstrap_servers: str
    ranges: tuple[OffsetRange, ...]
    value_format: RecordFormat
    key_format: RecordFormat
    on_bad_record: str
    #: The schema registry's REST URL, for the avro format ("" when unused).
    schema_registry_url: str
    max_offsets_per_split: int
    stall_timeout_s: float
    #: Pack ranges into partitions of at most this many offsets (``pack_ranges``); 0: don't.
    pack_offsets: int = 0
    #: And into at most this many (the session's task slots: one wave); 0: no limit.
    max_partitions: int = 0
    #: `source.kafka.properties` as written (secrets as references), resolved by the reader.
    kafka_properties: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, options: dict[str, str]) -> SourceOptions:
        """Validate the string options Spark hands to the data source."""
        try:
            bootstrap_servers = options["bootstrap_servers"]
            ranges = tuple(ranges_from_option(options["offset_ranges"]))
        except KeyError as exc:
            raise SourceError(f"the Kafka source needs the option {exc.args[0]!r}") from exc
        on_bad = options.get("on_bad_record", ON_BAD_RECORD_FAIL)
        if on_bad not in (ON_BAD_RECORD_FAIL, ON_BAD_RECORD_MARK):
            raise SourceError(f"on_bad_record must be fail or mark, got {on_bad!r}")
        return cls(
            bootstrap_servers=bootstrap_servers,
            ranges=ranges,
            value_format=RecordFormat(options.get("value_format", "bytes")),
            key_format=RecordFormat(options.get("key_format", "bytes")),
            on_bad_record=on_bad,
            schema_registry_url=options.get("schema_registry_url", ""),
            max_offsets_per_split=int(options.get("max_offsets_per_split", "0")),
            pack_offsets=int(options.get("pack_offsets", "0")),
            max_partitions=int(options.get("max_partitions", "0")),
            stall_timeout_s=float(options.get("stall_timeout_s", "60")),
            kafka_properties=tuple(
                sorted(json.loads(options.get("kafka_properties", "{}")).items())
            ),
        )


#: The source's columns, in order (before the marking columns of ``source_schema``).
SOURCE_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "headers")


def _spark_type(fmt: RecordFormat) -> str:
    # Every codec but the bytes one yields text (avro and json as JSON text).
    return "binary" if fmt is RecordFormat.BYTES else "string"


def source_schema(value_format: RecordFormat, key_format: RecordFormat, *, marked: bool) -> str:
    """The DDL schema of the source; ``marked`` adds the raw bytes and error columns."""
    types = (
        _spark_type(key_format),
        _spark_type(value_format),
        "string",
        "int",
        "long",
        "timestamp",
        "array<struct<key: string, value: binary>>",
    )
    columns = [f"{name} {type_}" for name, type_ in zip(SOURCE_COLUMNS, types, strict=True)]
    if marked:
        columns += [
            f"{RAW_KEY_COLUMN} binary",
            f"{RAW_VALUE_COLUMN} binary",
            f"{ERROR_COLUMN} string",
        ]
    return ", ".join(columns)


class KafkaRangePartition(InputPartition):
    """One Spark input partition: one or more offset ranges, read one after the other."""

    def __init__(self, offset_ranges: tuple[OffsetRange, ...]) -> None:
        super().__init__(offset_ranges)
        self.offset_ranges = offset_ranges


def pack_ranges(
    ranges: Sequence[OffsetRange], max_offsets: int, *, max_packs: int = 0
) -> list[tuple[OffsetRange, ...]]:
    """Group consecutive non-empty ranges into input partitions of at most ``max_offsets``
    offsets (a larger range stays alone): a small batch then runs one Spark task, one
    consumer and one producer (one transaction) instead of one per source partition, each
    of which costs connections and round trips whatever its size. Each range stays whole
    and in order, so per-key order holds; ``max_offsets`` 0 keeps one range per partition.

    More partitions than ``max_packs`` (> 0: the session's task slots) would run in waves,
    each paying a task's start, a producer and a transaction, and a slot idles while the
    last wave's longest runs: the ranges are then spread over ``max_packs`` partitions of
    about equal offsets instead (``_balanced``)."""
    packs: list[tuple[OffsetRange, ...]] = []
    current: list[OffsetRange] = []
    size = 0
    for offset_range in ranges:
        if offset_range.size == 0:
            continue
        if current and size + offset_range.size > max_offsets:
            packs.append(tuple(current))
            current, size = [], 0
        current.append(offset_range)
        size += offset_range.size
    if current:
        packs.append(tuple(current))
    if 0 < max_packs < len(packs):
        return _balanced([r for r in ranges if r.size > 0], max_packs)
    return packs


def _balanced(ranges: Sequence[OffsetRange], count: int) -> list[tuple[OffsetRange, ...]]:
    """``ranges``, each whole, in ``count`` groups of about equal offsets: the largest range
    first, each to the group with the fewest offsets so far (ties: the first); each group
    keeps the ranges' given order. The same ranges always give the same groups."""
    groups: list[list[int]] = [[] for _ in range(count)]
    sizes = [0] * count
    for index in sorted(range(len(ranges)), key=lambda i: (-ranges[i].size, i)):
        smallest = min(range(count), key=lambda g: (sizes[g], g))
        groups[smallest].append(index)
        sizes[smallest] += ranges[index].size
    return [tuple(ranges[i] for i in sorted(group)) for group in groups if group]


def plan_partitions(
    ranges: Sequence[OffsetRange],
    *,
    max_offsets_per_split: int,
    pack_offsets: int,
    max_partitions: int = 0,
) -> list[tuple[OffsetRange, ...]]:
    """The ranges each Spark task of a batch reads, in order: chunks of every non-empty
    range when splitting is allowed (``max_offsets_per_split`` > 0, pipelines that declare
    they need no order), else small ranges packed together (``pack_ranges``). The one plan
    of both the data source's reader and the chained batch (``chained.py``)."""
    if max_offsets_per_split > 0:
        return [
            (chunk,)
            for offset_range in ranges
            if offset_range.size > 0
            for chunk in split_range(offset_range, max_offsets_per_split)
        ]
    return pack_ranges(ranges, pack_offsets, max_packs=max_partitions)


class KafkaSourceReader(DataSourceReader):
    """Plans one partition per range and reads each with its own consumer."""

    def __init__(self, options: SourceOptions) -> None:
        self._options = options

    def partitions(self) -> Sequence[InputPartition]:
        """One input partition per pack of ranges (``plan_partitions``)."""
        return [
            KafkaRangePartition(pack)
            for pack in plan_partitions(
                self._options.ranges,
                max_offsets_per_split=self._options.max_offsets_per_split,
                pack_offsets=self._options.pack_offsets,
                max_partitions=self._options.max_partitions,
            )
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read a partition's ranges, in order, as Arrow record batches."""
        # Here, not at the top: the planner workers that unpickle this module never read.
        from lockgate.executor.dataplane.spark.kafka_source_read import (
            range_batches,
            read_ranges,
        )

        # With no range at all Spark still runs one task with a placeholder partition.
        if isinstance(partition, KafkaRangePartition):
            # Closed here, not when collected: an error's traceback keeps the generator alive.
            with contextlib.closing(read_ranges(self._options, partition.offset_ranges)) as read:
                for offset_range, messages in read:
                    yield from range_batches(self._options, offset_range, messages)


class KafkaSource(DataSource):
    """``spark.read.format("lockgate_kafka")``: explicit offset ranges of Kafka topics."""

    @classmethod
    def name(cls) -> str:
        """The format name registered with Spark."""
        return "lockgate_kafka"

    def schema(self) -> str:
        """Columns key, value, topic, partition, offset, timestamp, headers (+ marks)."""
        options = SourceOptions.parse(dict(self.options))
        return source_schema(
            options.value_format,
            options.key_format,
            marked=options.on_bad_record == ON_BAD_RECORD_MARK,
        )

    def reader(self, schema: StructType) -> DataSourceReader:
        """A reader over the ranges given in the options."""
        return KafkaSourceReader(SourceOptions.parse(dict(self.options)))
