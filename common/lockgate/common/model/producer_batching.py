"""The sink producers' batching fields: `sink.kafka.linger_ms`, `batch_size`, `compression`.

Each trades latency (or CPU) for throughput, so each is a documented pipeline field with a
default chosen by measurement (bench/sink_profile.py --sweep; README, Pipelines) rather than
a constant in the sink. Each has a librdkafka twin in `sink.kafka.properties` (`linger.ms`
or its alias `queue.buffering.max.ms`, `batch.size`, `compression.type` or its alias
`compression.codec`), which specs stored before the fields existed may hold. The parser
keeps one stored form per meaning: a twin alone is moved into its field (checked with the
field's bounds); a twin next to its field, or two twins of one field, are refused, naming
both, because one of the two values would be silently ignored.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lockgate.common.model.kafka_properties import KafkaProperties
from lockgate.common.model.spec_checker import SpecChecker


class Compression(enum.StrEnum):
    """The codec of the sink's record batches (librdkafka `compression.type`)."""

    NONE = "none"
    GZIP = "gzip"
    SNAPPY = "snappy"
    LZ4 = "lz4"
    ZSTD = "zstd"


DEFAULT_LINGER_MS = 100
"""How long a producer waits to fill a batch unless set. It costs the sink no latency: a
write partition produces its whole share of a checkpoint, then its pre-commit flushes, and
librdkafka's flush sends at once whatever linger.ms says; records are visible only after the
commit anyway. Longer lingers fill batches better while the partition produces: on 200,000
100-byte records (bench/sink_profile.py --sweep, three interleaved rounds, a loaded 2-core
machine) 0 ms copied 52,900 records/s, 5 ms 59,500, 20 ms 67,200 and 100 ms 92,200."""
MAX_LINGER_MS = 900_000
"""librdkafka's own upper bound of `linger.ms`."""
DEFAULT_BATCH_SIZE = 1_000_000
"""Bytes of one record batch (librdkafka `batch.size`) unless set: librdkafka's default; the
broker's default `message.max.bytes` (1 MiB) bounds what a larger value buys, and 16 KiB
batches measured slower (44,400 records/s against 67,200 at 20 ms, same sweep)."""
MIN_BATCH_SIZE = 1_024
"""Smaller batches only multiply requests; a record larger than a batch still goes alone."""
MAX_BATCH_SIZE = 2_147_483_647
"""librdkafka's own upper bound of `batch.size`."""
DEFAULT_COMPRESSION = Compression.NONE
"""No compression unless set, as Kafka's producers: what a codec buys depends on the values.
On the sweep's very compressible values (a counter padded with one repeated byte) lz4 copied
78,600 records/s and zstd 105,700 against 67,200 uncompressed (all at 20 ms); on values that
do not compress a codec only costs the executor CPU."""

BATCHING_FIELDS = ("linger_ms", "batch_size", "compression")
"""The fields' keys under `sink.kafka`."""

_TWINS: Mapping[str, str] = {
    "linger.ms": "linger_ms",
    "queue.buffering.max.ms": "linger_ms",
    "batch.size": "batch_size",
    "compression.type": "compression",
    "compression.codec": "compression",
}
"""librdkafka properties (and their aliases) that set a batching field."""


@dataclass(frozen=True)
class ProducerBatching:
    """How the sink's producers batch records, defaults filled in."""

    linger_ms: int = DEFAULT_LINGER_MS
    batch_size: int = DEFAULT_BATCH_SIZE
    """Bytes."""
    compression: Compression = DEFAULT_COMPRESSION

    def producer_config(self) -> dict[str, Any]:
        """The librdkafka settings these fields stand for."""
        return {
            "linger.ms": self.linger_ms,
            "batch.size": self.batch_size,
            "compression.type": self.compression.value,
        }

    def to_json(self) -> dict[str, Any]:
        """The fields that differ from their defaults (a spec that leaves them unset stores
        what earlier versions stored)."""
        found: dict[str, Any] = {}
        if self.linger_ms != DEFAULT_LINGER_MS:
            found["linger_ms"] = self.linger_ms
        if self.batch_size != DEFAULT_BATCH_SIZE:
            found["batch_size"] = self.batch_size
        if self.compression is not DEFAULT_COMPRESSION:
            found["compression"] = self.compression.value
        return found


def parse_producer_batching(
    c: SpecChecker, kafka: Mapping[str, Any], path: str, properties: KafkaProperties
) -> tuple[ProducerBatching, KafkaProperties] | None:
    """The batching fields of `kafka` (the `sink.kafka` mapping at `path`), with their
    twins in the already checked `properties` moved into them; returns the batching and
    the properties left. Records each violation in `c`; None if any."""
    before = len(c.violations)
    raw = {key: kafka[key] for key in BATCHING_FIELDS if kafka.get(key) is not None}
    named = {key: f"{path}.{key}" for key in raw}
    left: list[tuple[str, str]] = []
    for key, value in properties:
        field = _TWINS.get(key.lower())
        if field is None:
            left.append((key, value))
            continue
        where = f"{path}.properties[{key!r}]"
        if field in named:
            c.add(
                where,
                f"sets what `{named[field]}` sets: one of the two would be ignored",
                f"remove it and keep `{path}.{field}`",
            )
            continue
        raw[field] = _typed(field, value)
        named[field] = where
    linger = c.positive_int(
        raw, "linger_ms", named.get("linger_ms", ""), DEFAULT_LINGER_MS, 0, maximum=MAX_LINGER_MS
    )
    batch_size = c.positive_int(
        raw,
        "batch_size",
        named.get("batch_size", ""),
        DEFAULT_BATCH_SIZE,
        MIN_BATCH_SIZE,
        maximum=MAX_BATCH_SIZE,
    )
    compression = c.choice(
        raw, "compression", named.get("compression", ""), Compression, DEFAULT_COMPRESSION
    )
    if len(c.violations) > before or linger is None or batch_size is None or compression is None:
        return None
    batching = ProducerBatching(linger_ms=linger, batch_size=batch_size, compression=compression)
    return batching, tuple(left)


def _typed(field: str, text: str) -> object:
    """A twin property's text as its field's value (numbers as ints, when they are)."""
    if field == "compression":
        return text.lower()
    stripped = text.strip()
    return int(stripped) if stripped.isdigit() else text
