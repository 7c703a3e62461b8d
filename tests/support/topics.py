"""Kafka metadata without Kafka, for herders built in a test: every topic asked for exists."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lockgate.coordinator.domain.topics import ClusterTopics


class FixedTopics:
    """Stands in for `store.kafka_topics.KafkaTopics`: every topic exists, on every cluster,
    with `partitions` partitions."""

    def __init__(self, partitions: int = 2) -> None:
        self._partitions = partitions

    def describe(self, wanted: Mapping[str, Sequence[str]]) -> dict[str, ClusterTopics]:
        """Each cluster answers with every topic it was asked for."""
        return {
            servers: ClusterTopics(servers, {t: tuple(range(self._partitions)) for t in topics})
            for servers, topics in wanted.items()
        }
