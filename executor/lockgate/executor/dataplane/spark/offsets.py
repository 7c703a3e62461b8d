"""Where a checkpoint's input ends: a snapshot of each source partition's offsets.

The ranges are the model's (`lockgate.common.model.offsets.OffsetRange`); this module asks
Kafka for the partitions of a topic and their last stable offsets, through one metadata
consumer per Kafka cluster kept open across checkpoints (``MetadataClients``).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from lockgate.common.kafka_config import redact, resolve_properties
from lockgate.common.model.offsets import OffsetRange
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


@dataclass
class _Client:
    resolved: dict[str, str]
    consumer: Any
    users: int = 0
    last_used: float = 0.0
    retired: bool = False


class MetadataClients:
    """One metadata consumer per Kafka cluster and properties, kept open between uses.

    Every checkpoint of every task asks for its source partitions' end offsets and checks
    that its topics exist. A consumer built for each question costs a connection, a
    bootstrap metadata round trip and librdkafka's threads: about 0.1 s per question on
    the checkpoint's critical path, three per task and checkpoint (README, issue 13). The
    answers themselves are never cached: each is a fresh request to the broker.

    A client is rebuilt when its properties' references resolve to something else (a
    rotated secret), dropped after any error in its use (the next use starts afresh), and
    closed once unused for ``idle_s`` or at ``close_all``; never while a thread uses it.
    Safe to use from several threads at once: librdkafka serves metadata and offset
    queries concurrently on one client.
    """

    def __init__(
        self,
        factory: Callable[[str, Mapping[str, str]], Any] = _consumer,
        *,
        idle_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._factory = factory
        self._idle_s = idle_s
        self._clock = clock
        self._lock = threading.Lock()
        self._clients: dict[tuple[str, tuple[tuple[str, str], ...]], _Client] = {}

    @contextlib.contextmanager
    def using(self, bootstrap_servers: str, properties: Mapping[str, str]) -> Iterator[Any]:
        """The cluster's client for the duration of the block; dropped if the block fails."""
        resolved = resolve_properties(properties)
        key = (bootstrap_servers, tuple(sorted(properties.items())))
        client = self._acquire(key, bootstrap_servers, resolved)
        failed = False
        try:
            yield client.consumer
        except BaseException:
            failed = True
            raise
        finally:
            self._release(key, client, failed=failed)

    def _acquire(
        self, key: tuple[str, tuple[tuple[str, str], ...]], bootstrap: str, resolved: dict[str, str]
    ) -> _Client:
        with self._lock:
            now = self._clock()
            for stale_key, stale in list(self._clients.items()):
                if stale.users == 0 and now - stale.last_used > self._idle_s:
                    self._retire(stale_key, stale)
            client = self._clients.get(key)
            if client is not None and client.resolved != resolved:
                self._retire(key, client)
                client = None
            if client is None:
                client = _Client(resolved, self._factory(bootstrap, resolved))
                self._clients[key] = client
            client.users += 1
            return client

    def _release(
        self, key: tuple[str, tuple[tuple[str, str], ...]], client: _Client, *, failed: bool
    ) -> None:
        with self._lock:
            client.users -= 1
            client.last_used = self._clock()
            if failed and self._clients.get(key) is client:
                self._retire(key, client)
            elif client.retired and client.users == 0:
                client.consumer.close()

    def _retire(self, key: tuple[str, tuple[tuple[str, str], ...]], client: _Client) -> None:
        # Under the lock. A client still in use is closed by its last user's release.
        del self._clients[key]
        client.retired = True
        if client.users == 0:
            client.consumer.close()

    def close_all(self) -> None:
        """Close every client not in use now; those in use close when released."""
        with self._lock:
            for key, client in list(self._clients.items()):
                self._retire(key, client)


#: The executor's clients: its data plane closes them when it stops.
METADATA_CLIENTS = MetadataClients()


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
    fix = (
        "stop the pipeline, set where it resumes with `lockgate pipeline offsets NAME --set"
        f" {topic}:{partition}=OFFSET`, then resume it"
    )
    if start < low:
        raise OffsetOutOfRangeError(
            f"{topic}[{partition}]: the pipeline resumes at offset {start}, but the log starts"
            f" at {low}: records {start}..{low - 1} were deleted (retention) before they were"
            f" read; {fix} (at {low} to accept the loss)"
        )
    if start > stable:
        raise OffsetOutOfRangeError(
            f"{topic}[{partition}]: the pipeline resumes at offset {start}, past the log end"
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
                        f"cannot read the end offsets of {topic}[{partition}]: {exc}"
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
