"""What a ``read_committed`` consumer of an output topic sees, as it sees it.

Every input record's value starts with its sequence number (10 digits), so a record is
counted once however many times it shows up; a second sighting is a duplicate.
"""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaError, TopicPartition

#: The bench's consumers' prefetch (its reader's and the plain loop's, (c)): librdkafka stops
#: fetching a partition for ``fetch.queue.backoff.ms`` (1 s) once the consumer's queue holds
#: ``queued.min.messages`` (100,000 by default, counted over the partitions, whose messages
#: share the consumer's one queue), which a consumer slower than its fetcher reaches every
#: second. With the default the reader drained a backlog at 175,000 records/s against about
#: 900,000 with this, and the plain loop copied 92,000-129,000 records/s against
#: 346,000-388,000 (alone with the broker; README, issue 13). Up to 1,000,000 records queued.
PREFETCH = {"queued.min.messages": 1_000_000}


class CommittedReader:
    """A ``read_committed`` consumer of every partition of ``topic``, from the beginning."""

    def __init__(self, bootstrap: str, topic: str, *, partitions: int, records: int) -> None:
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"bench-visible-{uuid.uuid4().hex}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "enable.partition.eof": False,
                # Not paused for a second with a commit's worth queued: PREFETCH.
                **PREFETCH,
            }
        )
        self._consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self._seen = bytearray(records)
        self.distinct = 0
        self.duplicates = 0
        self.skipped = 0
        """Records read that are not input records (markers, sentinels)."""
        self.first_seen_at: float | None = None
        """``time.monotonic()`` when the first record became visible."""

    def poll(self) -> int:
        """Read what is visible now (up to 10,000 records, waiting at most 10 ms); returns
        how many were read."""
        messages = self._consumer.consume(num_messages=10_000, timeout=0.01)
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                raise RuntimeError(str(error))
            value = message.value() or b""
            if not value[:10].isdigit():
                self.skipped += 1  # not an input record: a marker or read_visible's sentinel
                continue
            sequence = int(value[:10])
            if self._seen[sequence]:
                self.duplicates += 1
            else:
                self._seen[sequence] = 1
                self.distinct += 1
        if messages and self.first_seen_at is None:
            self.first_seen_at = time.monotonic()
        return len(messages)

    def close(self) -> None:
        """Leave (no offsets are committed)."""
        self._consumer.close()
