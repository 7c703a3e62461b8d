"""Kafka admin for the herder: which partitions a pipeline's topics have, whether its sink
topic exists.

It lives with the store because the store side is the only place that speaks SQL or Kafka
admin; the herder asks it plain questions (topics in, `TopicPartition`s or field errors out).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from lockgate.common.errors import FieldViolation
from lockgate.common.model.offsets import TopicPartition
from lockgate.coordinator.domain.errors import InvalidArgument, Unavailable


class KafkaTopics:
    """Kafka metadata the leader needs to split pipelines into tasks."""

    def __init__(self, *, timeout_s: float = 5.0, settle_s: float = 2.0) -> None:
        self._timeout_s = timeout_s
        # A topic created a moment ago may not be in every broker's metadata yet: look
        # again for this long before calling it missing.
        self._settle_s = settle_s

    def _describe(self, bootstrap_servers: str, topics: Sequence[str]) -> dict[str, list[int]]:
        """Partitions of each topic of `topics` that exists (missing ones are absent)."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": bootstrap_servers})
        deadline = time.monotonic() + self._settle_s
        while True:
            try:
                # No topic argument: asking for one topic may auto-create it on the broker.
                metadata = admin.list_topics(timeout=self._timeout_s)
            except KafkaException as exc:
                raise Unavailable(
                    f"Kafka at {bootstrap_servers} did not answer within "
                    f"{self._timeout_s:.0f} s ({exc.args[0] if exc.args else exc}); check the "
                    "bootstrap servers and retry"
                ) from None
            found = {
                t: sorted(d.partitions)
                for t in topics
                if (d := metadata.topics.get(t)) is not None and d.error is None and d.partitions
            }
            if len(found) == len(set(topics)) or time.monotonic() >= deadline:
                return found
            time.sleep(0.2)  # metadata refresh interval while a new topic propagates

    def partitions(
        self, *, bootstrap_servers: str, topics: Sequence[str], field_path: str
    ) -> list[TopicPartition]:
        """Every partition of `topics`; InvalidArgument naming `field_path[i]` for a topic
        that does not exist, Unavailable if the cluster cannot be reached."""
        found = self._describe(bootstrap_servers, topics)
        missing = [(f"{field_path}[{i}]", t) for i, t in enumerate(topics) if t not in found]
        if missing:
            raise _missing_topics(missing, bootstrap_servers)
        return [TopicPartition(t, p) for t in topics for p in found[t]]

    def check_exists(self, *, bootstrap_servers: str, topic: str, field_path: str) -> None:
        """InvalidArgument naming `field_path` if `topic` does not exist."""
        if topic not in self._describe(bootstrap_servers, [topic]):
            raise _missing_topics([(field_path, topic)], bootstrap_servers)


def _missing_topics(missing: Sequence[tuple[str, str]], servers: str) -> InvalidArgument:
    violations = [
        FieldViolation(
            field=path, description=f"topic {topic!r} does not exist on {servers}; create it first"
        )
        for path, topic in missing
    ]
    return InvalidArgument(
        "; ".join(f"{v.field}: {v.description}" for v in violations),
        violations=violations,
        reason="TOPIC_NOT_FOUND",
    )
