"""Kafka metadata without Kafka, for herders built in a test: every topic asked for exists."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lockgate.common.model.offsets import TopicPartition
from lockgate.coordinator.domain.progress import PartitionBounds
from lockgate.coordinator.domain.topics import ClusterTopics


class FixedTopics:
    """Stands in for `store.kafka_topics.KafkaTopics`: every topic exists, on every cluster,
    with `partitions` partitions, each holding `end_offset` records from offset 0."""

    def __init__(self, partitions: int = 2, end_offset: int = 0) -> None:
        self._partitions = partitions
        self._end_offset = end_offset

    def describe(
        self, wanted: Mapping[str, Sequence[str]], properties: object = None
    ) -> dict[str, ClusterTopics]:
        """Each cluster answers with every topic it was asked for."""
        return {
            servers: ClusterTopics(servers, {t: tuple(range(self._partitions)) for t in topics})
            for servers, topics in wanted.items()
        }

    def partition_bounds(
        self, bootstrap_servers: str, partitions: Sequence[TopicPartition], properties: object = ()
    ) -> dict[TopicPartition, PartitionBounds]:
        """Every partition answers: from 0 to `end_offset`."""
        return {tp: PartitionBounds(start=0, end=self._end_offset) for tp in partitions}
