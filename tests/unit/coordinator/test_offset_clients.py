"""The lag's offsets and a spec's topics are asked through one kept admin client per cluster
(and set of Kafka properties), not a new client per pipeline and refresh (which crashed the
leader inside librdkafka at 200 pipelines) or per create, kept in the pool every kept Kafka
client lives in (`kept_clients.KeptClients`). The client is faked and counted: no sockets."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from lockgate.common.model.offsets import TopicPartition
from lockgate.coordinator.domain.progress import PartitionBounds
from lockgate.coordinator.store import kafka_topics
from lockgate.coordinator.store.kafka_topics import KafkaTopics


class FakeAdmin:
    """Answers ListOffsets: every partition starts at 0 and ends at 7; and Metadata: topic
    `in` has partitions 0 and 1, unless the cluster is `down`."""

    down = False

    def list_topics(self, timeout: float) -> Any:
        if self.down:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        described = type("Topic", (), {"error": None, "partitions": {0: None, 1: None}})()
        return type("Metadata", (), {"topics": {"in": described}})()

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


def test_the_topics_of_a_spec_are_asked_through_the_kept_client_dropped_when_unanswered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[FakeAdmin] = []

    def admin_client(bootstrap_servers: str, properties: object) -> FakeAdmin:
        made.append(FakeAdmin())
        return made[-1]

    monkeypatch.setattr(kafka_topics, "_admin_client", admin_client)
    topics = KafkaTopics(settle_s=0)
    for _ in range(3):  # three creates on one cluster, with the lag asked in between
        described = topics.describe({"a:9092": ["in"]})["a:9092"]
        assert described.partitions == {"in": (0, 1)} and described.unreachable is None
        topics.partition_bounds("a:9092", [TopicPartition("in", 0)])
    assert len(made) == 1

    made[0].down = True
    described = topics.describe({"a:9092": ["in"]})["a:9092"]
    assert described.partitions == {} and "no answer within 3 s" in str(described.unreachable)
    assert topics.describe({"a:9092": ["in"]})["a:9092"].partitions == {"in": (0, 1)}
    assert len(made) == 2  # the client that did not answer was dropped, a new one answered
