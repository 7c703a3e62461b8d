"""Which Kafka topics a pipeline needs, and what is wrong with a spec whose topics are
missing or whose Kafka cannot be reached (pure: the store asks Kafka, this decides).

Rules:
- Source topics are read on the source's cluster; the sink topic and the dead-letter
  topic (when set) are written on the sink's cluster.
- Every violation is reported at once: each missing topic by its own field, each cluster
  that did not answer by its `bootstrap_servers` field (its topics are then unknown, not
  missing, so they are not reported).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lockgate.common.model.offsets import TopicPartition
from lockgate.common.model.pipeline_spec import PipelineSpec
from lockgate.coordinator.domain.errors import FieldViolation, InvalidArgument

SOURCE_SERVERS_FIELD = "source.kafka.bootstrap_servers"
SINK_SERVERS_FIELD = "sink.kafka.bootstrap_servers"


@dataclass(frozen=True)
class ClusterTopics:
    """What one Kafka cluster said about the topics it was asked for."""

    bootstrap_servers: str
    partitions: Mapping[str, tuple[int, ...]]
    """Partitions of each topic asked for that exists; a missing topic is absent."""
    unreachable: str | None = None
    """Why the cluster could not be asked (no answer in time); None when it answered."""


@dataclass(frozen=True)
class _Needed:
    """One topic a spec needs: on which cluster, named by which field."""

    servers_field: str
    bootstrap_servers: str
    topic_field: str
    topic: str


def _needed(spec: PipelineSpec, *, source: bool, sink: bool) -> list[_Needed]:
    found: list[_Needed] = []
    if source:
        src = spec.source
        found.extend(
            _Needed(SOURCE_SERVERS_FIELD, src.bootstrap_servers, f"source.kafka.topics[{i}]", t)
            for i, t in enumerate(src.topics)
        )
    if sink:
        servers = spec.sink.bootstrap_servers
        found.append(_Needed(SINK_SERVERS_FIELD, servers, "sink.kafka.topic", spec.sink.topic))
        if spec.errors.dead_letter_topic is not None:
            found.append(
                _Needed(
                    SINK_SERVERS_FIELD,
                    servers,
                    "errors.dead_letter_topic",
                    spec.errors.dead_letter_topic,
                )
            )
    return found


def topics_to_describe(spec: PipelineSpec, *, source: bool, sink: bool) -> dict[str, list[str]]:
    """Bootstrap servers -> the topics to look up there (sources, and/or the sink and
    dead-letter topics)."""
    wanted: dict[str, list[str]] = {}
    for need in _needed(spec, source=source, sink=sink):
        topics = wanted.setdefault(need.bootstrap_servers, [])
        if need.topic not in topics:
            topics.append(need.topic)
    return wanted


def cluster_properties(
    spec: PipelineSpec, *, source: bool, sink: bool
) -> dict[str, tuple[tuple[str, str], ...]]:
    """Bootstrap servers -> the Kafka properties to ask that cluster with: the source's for
    the source cluster, the sink's for the sink cluster (the source's when both sides name
    the same servers and both are asked: one connection answers both)."""
    found: dict[str, tuple[tuple[str, str], ...]] = {}
    if sink:
        found[spec.sink.bootstrap_servers] = spec.sink.properties
    if source:
        found[spec.source.bootstrap_servers] = spec.source.properties
    return found


def topic_violations(
    spec: PipelineSpec,
    clusters: Mapping[str, ClusterTopics],
    *,
    source: bool,
    sink: bool,
) -> list[FieldViolation]:
    """Every missing topic and every cluster that did not answer, by field, in spec order."""
    violations: list[FieldViolation] = []
    named: set[str] = set()
    for need in _needed(spec, source=source, sink=sink):
        cluster = clusters[need.bootstrap_servers]
        if cluster.unreachable is not None:
            if need.servers_field not in named:
                named.add(need.servers_field)
                violations.append(
                    FieldViolation(
                        need.servers_field,
                        f"Kafka at {need.bootstrap_servers} could not be reached "
                        f"({cluster.unreachable}); check the address and that the broker "
                        "is up, then retry",
                    )
                )
        elif need.topic not in cluster.partitions:
            violations.append(
                FieldViolation(
                    need.topic_field,
                    f"topic {need.topic!r} does not exist on {need.bootstrap_servers}; "
                    "create it first",
                )
            )
    return violations


def kafka_refusal(violations: Sequence[FieldViolation]) -> InvalidArgument:
    """The InvalidArgument listing every topic and cluster violation of a spec
    (reason KAFKA_UNREACHABLE if a cluster did not answer, else TOPIC_NOT_FOUND)."""
    unreachable = any(v.field in (SOURCE_SERVERS_FIELD, SINK_SERVERS_FIELD) for v in violations)
    return InvalidArgument(
        "the pipeline's Kafka topics cannot be used: "
        + "; ".join(f"{v.field}: {v.description}" for v in violations),
        violations=violations,
        reason="KAFKA_UNREACHABLE" if unreachable else "TOPIC_NOT_FOUND",
    )


def source_partitions(
    spec: PipelineSpec, clusters: Mapping[str, ClusterTopics]
) -> list[TopicPartition]:
    """Every partition of the spec's source topics (all of them found), in topic order."""
    cluster = clusters[spec.source.bootstrap_servers]
    return [TopicPartition(t, p) for t in spec.source.topics for p in cluster.partitions[t]]
