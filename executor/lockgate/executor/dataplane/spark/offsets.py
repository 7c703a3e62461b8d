"""Where a checkpoint's input ends: a snapshot of each source partition's offsets.

The ranges are the model's (`lockgate.common.model.offsets.OffsetRange`); this module asks
Kafka for the partitions of a topic and their last stable offsets, through one metadata
consumer per Kafka cluster kept open across checkpoints (``METADATA_CLIENTS``, a
``lockgate.common.kept_clients.KeptClients``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from lockgate.common.kafka_config import redact
from lockgate.common.kept_clients import KeptClients
from lockgate.common.model.offsets import OffsetRange, partition_name
from lockgate.executor.errors import OffsetOutOfRangeError, SourceError


def _consumer(bootstrap_servers: str, resolved: Mapping[str, str]) -> Consumer:
    # `resolved` are the side's properties (security among them), references read;
    # Lockgate's own settings come last: the parser refuses a property that would change them.
    config: dict[str, Any] = {
        **resolved,
        "bootstrap.servers": bootstrap_servers,
        # No group is ever joined or committed: offsets come from the coordinator.
        "group.id": "lockgate-offset-snapshot",
        "enable.auto.commit": False,
        # Watermark queries then return the last stable offset, so a range never ends
        # inside a transaction that is still undecided.
        "isolation.level": "read_committed",
    }
    try:
        return Consumer(config)
    except KafkaException as exc:
        # librdkafka may quote a value it refuses: never a resolved secret.
        raise SourceError(
            f"cannot build a Kafka consumer of {bootstrap_servers} with"
            f" source.kafka.properties: {redact(str(exc), resolved)}"
        ) from None


#: The executor's metadata consumers, shared by its threads (librdkafka's clients are
#: thread-safe): its data plane closes them when it stops.
METADATA_CLIENTS: KeptClients[Consumer] = KeptClients(
    _consumer, close=lambda consumer: consumer.close(), shared=True
)


def topic_partitions(
    *,
    bootstrap_servers: str,
    topic: str,
    timeout_s: float = 10.0,
    properties: Mapping[str, str] | None = None,
) -> list[int]:
    """The partition ids of ``topic``; ``SourceError`` naming the topic if it does not exist.
    ``properties``: the side's Kafka client properties (as written; resolved here)."""
    with METADATA_CLIENTS.using(bootstrap_servers, properties or {}) as consumer:
        return _partitions_of(consumer, bootstrap_servers, topic, timeout_s)


def _partitions_of(
    consumer: Consumer, bootstrap_servers: str, topic: str, timeout_s: float
) -> list[int]:
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s)
    except KafkaException as exc:
        raise SourceError(
            f"cannot read metadata of topic {topic!r} from {bootstrap_servers}: {exc}"
        ) from exc
    topic_metadata = metadata.topics.get(topic)
    if topic_metadata is None or topic_metadata.error is not None or not topic_metadata.partitions:
        raise SourceError(
            f"source topic {topic!r} does not exist on {bootstrap_servers};"
            " create it or fix source.kafka.topics"
        )
    return sorted(topic_metadata.partitions)


def check_in_log(topic: str, partition: int, *, start: int, low: int, stable: int) -> None:
    """``OffsetOutOfRangeError`` naming the partition and offsets if ``start`` is below the
    log start (retention deleted the records: they would be skipped) or past the last
    stable offset (the log was truncated or the topic re-created: nothing would be read)."""
    where = partition_name(topic, partition)
    fix = (
        "stop the pipeline, set where it resumes with `lockgate pipeline offsets NAME --set"
        f" {topic}:{partition}=OFFSET`, then resume it"
    )
    if start < low:
        raise OffsetOutOfRangeError(
            f"{where}: the pipeline resumes at offset {start}, but the log starts"
            f" at {low}: records {start}..{low - 1} were deleted (retention) before they were"
            f" read; {fix} (at {low} to accept the loss)"
        )
    if start > stable:
        raise OffsetOutOfRangeError(
            f"{where}: the pipeline resumes at offset {start}, past the log end"
            f" ({stable}): the log was truncated or the topic re-created; {fix}"
        )


def snapshot_offset_ranges(
    *,
    bootstrap_servers: str,
    topics: Iterable[str],
    start_offsets: Mapping[tuple[str, int], int],
    starting_offsets: str = "earliest",
    max_offsets_per_partition: int | None = None,
    timeout_s: float = 10.0,
    properties: Mapping[str, str] | None = None,
) -> list[OffsetRange]:
    """Snapshot the next checkpoint's input: one range per partition of ``topics``.

    Each range starts at ``start_offsets[(topic, partition)]`` (the end of the last
    complete checkpoint) or, for a partition never read, at the ``starting_offsets``
    policy (``earliest`` = log start, ``latest`` = current last stable offset); a start
    outside the log is an ``OffsetOutOfRangeError`` (``check_in_log``); it ends at
    the partition's last stable offset (read_committed high watermark), capped at
    ``max_offsets_per_partition`` offsets to bound the batch. Empty ranges are included so
    the caller can carry the position forward.
    """
    ranges: list[OffsetRange] = []
    with METADATA_CLIENTS.using(bootstrap_servers, properties or {}) as consumer:
        for topic in topics:
            for partition in _partitions_of(consumer, bootstrap_servers, topic, timeout_s):
                try:
                    low, stable = consumer.get_watermark_offsets(
                        TopicPartition(topic, partition), timeout=timeout_s, cached=False
                    )
                except KafkaException as exc:
                    raise SourceError(
                        f"cannot read the end offsets of {partition_name(topic, partition)}: {exc}"
                    ) from exc
                start = start_offsets.get((topic, partition))
                if start is None:
                    start = low if starting_offsets == "earliest" else stable
                check_in_log(topic, partition, start=start, low=low, stable=stable)
                end = max(start, stable)
                if max_offsets_per_partition is not None:
                    end = min(end, start + max_offsets_per_partition)
                ranges.append(OffsetRange(topic, partition, start, end))
    return ranges
