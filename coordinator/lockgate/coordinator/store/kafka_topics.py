"""Kafka admin for the herder: which of the topics asked for exist, with their partitions,
and where their partitions' logs start and end (the lag, `domain/progress.py`; an offset reset
to a position).

It lives with the store because the store side is the only place that speaks SQL or Kafka
admin; the herder asks it a plain question (bootstrap servers -> topics) and gets plain
answers (`domain.topics.ClusterTopics`); `domain/topics.py` decides what is wrong.

Time bound: each cluster is asked once, all clusters at the same time, and one that does
not answer within `timeout_s` (3 s) is reported unreachable. A topic missing from a
cluster that did answer is looked up again for `settle_s` (2 s) before it is called
missing. So an answer comes within about 5 s, well inside a client's call deadline.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lockgate.common.kafka_config import SecretReferenceError, redact, resolve_properties
from lockgate.common.kept_clients import KeptClients
from lockgate.common.model.kafka_properties import KafkaProperties
from lockgate.common.model.offsets import TopicPartition
from lockgate.coordinator.domain.errors import FailedPrecondition
from lockgate.coordinator.domain.progress import PartitionBounds
from lockgate.coordinator.domain.topics import ClusterTopics

DEFAULT_TIMEOUT_S = 3.0
DEFAULT_SETTLE_S = 2.0

# librdkafka's own log lines ("Connect to ... failed") go through logging, not raw stderr.
_KAFKA_LOG = logging.getLogger("lockgate.coordinator.kafka")


class KafkaTopics:
    """Kafka metadata the leader needs to check a spec and split it into tasks."""

    def __init__(
        self, *, timeout_s: float = DEFAULT_TIMEOUT_S, settle_s: float = DEFAULT_SETTLE_S
    ) -> None:
        self._timeout_s = timeout_s
        # A topic created a moment ago may not be in every broker's metadata yet: look
        # again for this long before calling it missing.
        self._settle_s = settle_s
        # One admin client per cluster (and properties), kept (`kept_clients.py`), for
        # both questions: the topics a spec names (each create, update and validation)
        # and the offsets the lag is measured from. The lag refresh asks every pipeline's
        # cluster every few seconds, and a client made and dropped per pipeline per
        # refresh (400 a refresh at 200 pipelines) crashed the leader inside librdkafka's
        # list_offsets at that size; a client made per create cost its connection and
        # bootstrap round trip on each. librdkafka's clients serve several threads at once.
        self._admins: KeptClients[Any] = KeptClients(
            _admin_client, close=lambda admin: None, shared=True
        )

    def describe(
        self,
        wanted: Mapping[str, Sequence[str]],
        properties: Mapping[str, KafkaProperties] | None = None,
    ) -> dict[str, ClusterTopics]:
        """For each cluster (bootstrap servers -> topics), the partitions of the topics
        that exist there, or why the cluster could not be asked; each cluster is asked
        with its Kafka `properties` (as written, resolved here). Clusters are asked in
        parallel; see the module docstring for the time bound."""
        props = properties or {}
        if len(wanted) <= 1:
            return {
                servers: self._describe(servers, topics, props.get(servers, ()))
                for servers, topics in wanted.items()
            }
        with ThreadPoolExecutor(max_workers=len(wanted)) as pool:
            futures = {
                s: pool.submit(self._describe, s, t, props.get(s, ())) for s, t in wanted.items()
            }
            return {servers: future.result() for servers, future in futures.items()}

    def _describe(
        self, bootstrap_servers: str, topics: Sequence[str], properties: KafkaProperties
    ) -> ClusterTopics:
        from confluent_kafka import KafkaException

        try:
            resolved = _resolved(properties)
            with self._admins.using(
                bootstrap_servers, dict(properties), resolved=resolved
            ) as admin:
                return self._settled(admin, bootstrap_servers, topics)
        except _ClientSettingsError as exc:
            return ClusterTopics(
                bootstrap_servers=bootstrap_servers, partitions={}, unreachable=str(exc)
            )
        except KafkaException as exc:  # the client is dropped: the next question starts afresh
            error = exc.args[0] if exc.args else exc
            reason = error.str() if hasattr(error, "str") else str(error)
            return ClusterTopics(
                bootstrap_servers=bootstrap_servers,
                partitions={},
                unreachable=f"no answer within {self._timeout_s:g} s: {reason}",
            )

    def _settled(self, admin: Any, bootstrap_servers: str, topics: Sequence[str]) -> ClusterTopics:
        """The topics' partitions in the cluster's metadata, looked up again for `settle_s`
        while some are not there yet. KafkaException if the cluster does not answer."""
        deadline = time.monotonic() + self._settle_s
        while True:
            # No topic argument: asking for one topic may auto-create it on the broker.
            metadata = admin.list_topics(timeout=self._timeout_s)
            found = {
                t: tuple(sorted(d.partitions))
                for t in topics
                if (d := metadata.topics.get(t)) is not None and d.error is None and d.partitions
            }
            if len(found) == len(set(topics)) or time.monotonic() >= deadline:
                return ClusterTopics(bootstrap_servers=bootstrap_servers, partitions=found)
            time.sleep(0.2)  # metadata refresh interval while a new topic propagates

    def partition_bounds(
        self,
        bootstrap_servers: str,
        partitions: Sequence[TopicPartition],
        properties: KafkaProperties = (),
    ) -> dict[TopicPartition, PartitionBounds]:
        """Each partition's log start offset and its end offset as a read_committed
        consumer sees it (the last stable offset), asked in one round of ListOffsets within
        `timeout_s`, with the source's Kafka `properties`. Partitions the cluster did not
        answer for are left out (empty if it is unreachable): their lag is unknown, not
        zero."""
        from confluent_kafka import IsolationLevel, KafkaException
        from confluent_kafka import TopicPartition as KafkaPartition
        from confluent_kafka.admin._listoffsets import OffsetSpec

        if not partitions:
            return {}
        specs = {"start": OffsetSpec.earliest(), "end": OffsetSpec.latest()}  # type: ignore[no-untyped-call]
        try:
            resolved = _resolved(properties)
            with self._admins.using(
                bootstrap_servers, dict(properties), resolved=resolved
            ) as admin:
                # Both questions at once: an unreachable cluster costs one timeout, not two.
                asked = {
                    name: admin.list_offsets(
                        {KafkaPartition(tp.topic, tp.partition): spec for tp in partitions},
                        isolation_level=IsolationLevel.READ_COMMITTED,
                        request_timeout=self._timeout_s,
                    )
                    for name, spec in specs.items()
                }
        except _ClientSettingsError as exc:
            _KAFKA_LOG.warning("no offsets from %s: %s", bootstrap_servers, exc)
            return {}
        answers: dict[str, dict[TopicPartition, int]] = {}
        for name, futures in asked.items():
            found: dict[TopicPartition, int] = {}
            for kafka_tp, future in futures.items():
                try:
                    found[TopicPartition(kafka_tp.topic, kafka_tp.partition)] = int(
                        future.result(timeout=self._timeout_s).offset
                    )
                except (KafkaException, TimeoutError) as exc:
                    _KAFKA_LOG.debug("no offsets for %s: %s", kafka_tp, exc)
            answers[name] = found
        return {
            tp: PartitionBounds(start=answers["start"][tp], end=answers["end"][tp])
            for tp in partitions
            if tp in answers["start"] and tp in answers["end"]
        }

    def log_offsets(
        self,
        bootstrap_servers: str,
        partitions: Sequence[TopicPartition],
        *,
        latest: bool,
        properties: KafkaProperties = (),
    ) -> dict[TopicPartition, int]:
        """Each partition's log end offset under read_committed (the last stable offset:
        records of open transactions are not skipped past) with `latest`, else its log start
        offset, as `kafka-consumer-groups --reset-offsets --to-latest/--to-earliest` resolves
        them. FailedPrecondition naming the cluster and the partitions it did not answer for
        within `timeout_s`."""
        bounds = self.partition_bounds(bootstrap_servers, partitions, properties)
        missing = [tp for tp in partitions if tp not in bounds]
        if missing:
            names = ", ".join(str(tp) for tp in missing[:10])
            raise FailedPrecondition(
                f"the source Kafka cluster {bootstrap_servers} did not say where the logs of"
                f" {names}{' ...' if len(missing) > 10 else ''}"
                f" {'end' if latest else 'start'} within {self._timeout_s:g} s;"
                " retry when it answers, or reset to explicit offsets",
                reason="KAFKA_UNREACHABLE",
            )
        return {tp: (b.end if latest else b.start) for tp, b in bounds.items()}


class _ClientSettingsError(Exception):
    """A side's Kafka properties could not be made into a client here (a reference that
    does not resolve, a property librdkafka refuses); the message carries no secret."""


def _resolved(properties: KafkaProperties) -> dict[str, str]:
    """A side's properties with their references resolved in this process (the
    coordinator's environment and files)."""
    try:
        return resolve_properties(properties)
    except SecretReferenceError as exc:
        raise _ClientSettingsError(f"cannot resolve a Kafka property here: {exc}") from None


def _admin_client(bootstrap_servers: str, resolved: Mapping[str, str]) -> Any:
    """A confluent-kafka AdminClient of one cluster with its side's resolved Kafka
    properties."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    config: dict[str, Any] = {
        **resolved,
        "bootstrap.servers": bootstrap_servers,
        "logger": _KAFKA_LOG,
    }
    try:
        return AdminClient(config)
    except (KafkaException, ValueError, TypeError) as exc:
        raise _ClientSettingsError(
            f"the Kafka properties make no client: {redact(str(exc), resolved)}"
        ) from None
