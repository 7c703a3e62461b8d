"""A spec's Kafka checks report every missing topic and every silent cluster at once."""

from __future__ import annotations

from lockgate.common.model.pipeline_spec import PipelineSpec, parse_pipeline_spec
from lockgate.coordinator.domain.topics import (
    ClusterTopics,
    cluster_properties,
    kafka_refusal,
    source_partitions,
    topic_violations,
    topics_to_describe,
)

SOURCE, SINK = "127.0.0.1:9092", "127.0.0.1:9093"


def spec(*, sink_servers: str = SINK) -> PipelineSpec:
    return parse_pipeline_spec(
        {
            "name": "p",
            "source": {"kafka": {"bootstrap_servers": SOURCE, "topics": ["a", "b", "c"]}},
            "sink": {"kafka": {"bootstrap_servers": sink_servers, "topic": "out"}},
            "errors": {"tolerance": "all", "dead_letter_topic": "dlq"},
        }
    )


def test_sources_sink_and_dead_letter_topic_are_asked_of_their_clusters() -> None:
    assert topics_to_describe(spec(), source=True, sink=True) == {
        SOURCE: ["a", "b", "c"],
        SINK: ["out", "dlq"],
    }
    assert topics_to_describe(spec(sink_servers=SOURCE), source=False, sink=True) == {
        SOURCE: ["out", "dlq"]
    }


def test_each_cluster_is_asked_with_its_sides_kafka_properties() -> None:
    raw = spec().to_json()
    raw["source"]["kafka"]["properties"] = {"security.protocol": "SSL"}
    raw["sink"]["kafka"]["properties"] = {"security.protocol": "SASL_SSL"}
    both = parse_pipeline_spec(raw)
    assert cluster_properties(both, source=True, sink=True) == {
        SOURCE: (("security.protocol", "SSL"),),
        SINK: (("security.protocol", "SASL_SSL"),),
    }
    assert cluster_properties(both, source=False, sink=True) == {
        SINK: (("security.protocol", "SASL_SSL"),)
    }


def test_every_missing_topic_is_named_in_one_answer() -> None:
    clusters = {
        SOURCE: ClusterTopics(SOURCE, {"b": (0, 1)}),
        SINK: ClusterTopics(SINK, {"out": (0,)}),
    }
    violations = topic_violations(spec(), clusters, source=True, sink=True)
    assert [v.field for v in violations] == [
        "source.kafka.topics[0]",
        "source.kafka.topics[2]",
        "errors.dead_letter_topic",
    ]
    assert "'dlq' does not exist on 127.0.0.1:9093" in violations[2].description
    assert kafka_refusal(violations).reason == "TOPIC_NOT_FOUND"


def test_a_silent_cluster_is_named_by_its_field_once_and_its_topics_are_not_called_missing() -> (
    None
):
    clusters = {
        SOURCE: ClusterTopics(SOURCE, {"a": (0,), "b": (0,)}),
        SINK: ClusterTopics(SINK, {}, unreachable="no answer within 3 s"),
    }
    violations = topic_violations(spec(), clusters, source=True, sink=True)
    assert [v.field for v in violations] == [
        "source.kafka.topics[2]",
        "sink.kafka.bootstrap_servers",
    ]
    assert "Kafka at 127.0.0.1:9093 could not be reached" in violations[1].description
    refusal = kafka_refusal(violations)
    assert refusal.reason == "KAFKA_UNREACHABLE"
    assert "sink.kafka.bootstrap_servers" in refusal.message


def test_one_silent_cluster_for_both_sides_names_both_fields() -> None:
    clusters = {SOURCE: ClusterTopics(SOURCE, {}, unreachable="no answer")}
    violations = topic_violations(spec(sink_servers=SOURCE), clusters, source=True, sink=True)
    assert [v.field for v in violations] == [
        "source.kafka.bootstrap_servers",
        "sink.kafka.bootstrap_servers",
    ]


def test_source_partitions_follow_the_topic_order() -> None:
    clusters = {SOURCE: ClusterTopics(SOURCE, {"c": (0,), "a": (0, 1), "b": (0,)})}
    parts = source_partitions(spec(), clusters)
    assert [(tp.topic, tp.partition) for tp in parts] == [
        ("a", 0),
        ("a", 1),
        ("b", 0),
        ("c", 0),
    ]
