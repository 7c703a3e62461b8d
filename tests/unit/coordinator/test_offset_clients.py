"""The lag's offsets are asked through one kept admin client per source cluster (and set of
Kafka properties), not a new client per pipeline and refresh (which crashed the leader inside
librdkafka at 200 pipelines), kept in the pool every kept Kafka client lives in
(`kept_clients.KeptClients`). The client is faked and counted: no sockets."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest

from lockgate.common.model.offsets import TopicPartition
from lockgate.coordinator.domain.progress import PartitionBounds
from lockgate.coordinator.store import kafka_topics
from lockgate.coordinator.store.kafka_topics import KafkaTopics


class FakeAdmin:
    """Answers ListOffsets: every partition starts at 0 and ends at 7."""

    def list_offsets(self, asked: dict[Any, Any], **_: Any) -> dict[Any, Future[Any]]:
        answers: dict[Any, Future[Any]] = {}
        for kafka_tp, spec in asked.items():
            future: Future[Any] = Future()
            future.set_result(type("Offset", (), {"offset": 0 if spec._value == -2 else 7})())
            answers[kafka_tp] = future
        return answers


def test_one_admin_client_per_cluster_and_properties_is_made_and_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[tuple[str, object]] = []

    def admin_client(bootstrap_servers: str, properties: object) -> FakeAdmin:
        made.append((bootstrap_servers, properties))
        return FakeAdmin()

    monkeypatch.setattr(kafka_topics, "_admin_client", admin_client)
    topics = KafkaTopics()
    partitions = [TopicPartition("in", 0), TopicPartition("in", 1)]
    for _ in range(3):  # three refreshes of two pipelines on cluster a, one on cluster b
        for servers in ("a:9092", "a:9092", "b:9092"):
            bounds = topics.partition_bounds(servers, partitions)
            assert bounds == {tp: PartitionBounds(start=0, end=7) for tp in partitions}
    topics.partition_bounds("a:9092", partitions, (("security.protocol", "SSL"),))
    assert made == [
        ("a:9092", {}),
        ("b:9092", {}),
        ("a:9092", {"security.protocol": "SSL"}),
    ]
