"""Fixtures and Kafka helpers for the data-plane tests: one SparkSession for all of them."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from pyspark.sql import SparkSession

from lockgate.executor.dataplane.spark.offsets import METADATA_CLIENTS
from lockgate.executor.dataplane.spark.session import build_spark_session


@pytest.fixture(scope="package")
def spark() -> Iterator[SparkSession]:
    """A SparkSession built like the executor's, shared by the data-plane tests as the
    executor shares it between pipelines (each start costs seconds of JVM and workers).

    ``local[2,2]``: two cores and two attempts per task, so a failed task is retried as
    on a cluster.
    """
    session = build_spark_session(master="local[2,2]", app_name="lockgate-dataplane-tests")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="package", autouse=True)
def _metadata_clients_closed() -> Iterator[None]:
    """The offset snapshots' Kafka clients stay open between batches, as in the executor;
    closed when these tests end, before the broker they talk to stops."""
    yield
    METADATA_CLIENTS.close_all()


@dataclass(frozen=True)
class Record:
    """One record as a consumer sees it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    #: The record's Kafka timestamp in ms (-1: none).
    timestamp_ms: int = -1


def produce(
    bootstrap_servers: str,
    topic: str,
    records: Sequence[tuple[bytes | None, bytes | None]],
    *,
    partition: int | None = None,
    headers: Sequence[tuple[str, bytes]] = (),
) -> None:
    """Produce records (key, value) without transactions and wait until all are acked."""
    producer = Producer({"bootstrap.servers": bootstrap_servers, "partitioner": "murmur2_random"})
    for key, value in records:
        kwargs: dict[str, object] = {"key": key, "value": value}
        if partition is not None:
            kwargs["partition"] = partition
        if headers:
            kwargs["headers"] = list(headers)
        producer.produce(topic, **kwargs)  # type: ignore[arg-type]
    assert producer.flush(30) == 0


def produce_transaction(
    bootstrap_servers: str,
    topic: str,
    values: Sequence[bytes],
    *,
    transactional_id: str,
    commit: bool,
) -> None:
    """Produce ``values`` to partition 0 in one transaction, then commit or abort it."""
    producer = Producer(
        {"bootstrap.servers": bootstrap_servers, "transactional.id": transactional_id}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value=value, partition=0)
    producer.flush(30)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def read_topic(
    bootstrap_servers: str,
    topic: str,
    *,
    partitions: int,
    committed: bool = True,
    timeout_s: float = 30.0,
) -> list[Record]:
    """Every record of ``topic`` up to its current end, in partition then offset order.

    The end is the last stable offset for ``committed`` (read_committed) readers and the
    log end otherwise; reading stops when each partition's position reaches it.
    """
    isolation = "read_committed" if committed else "read_uncommitted"
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": "lockgate-test",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    records: list[Record] = []
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
            for p in range(partitions)
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        pending = {p for p, end in ends.items() if end > 0}
        deadline = time.monotonic() + timeout_s
        while pending:
            assert time.monotonic() < deadline, f"timed out reading {topic}: {pending} pending"
            msg = consumer.poll(0.2)
            if msg is None:
                for tp in consumer.position([TopicPartition(topic, p) for p in pending]):
                    if tp.offset >= ends[tp.partition]:
                        pending.discard(tp.partition)
                continue
            error = msg.error()
            partition = msg.partition()
            assert partition is not None
            if error is not None:
                if (msg.offset() or 0) >= ends[partition]:
                    pending.discard(partition)
                continue
            offset = msg.offset()
            assert offset is not None
            if offset < ends[partition]:
                records.append(
                    Record(
                        partition=partition,
                        offset=offset,
                        key=msg.key(),
                        value=msg.value(),
                        headers=tuple(msg.headers() or ()),  # type: ignore[arg-type]
                        timestamp_ms=msg.timestamp()[1],
                    )
                )
            if offset + 1 >= ends[partition]:
                pending.discard(partition)
    finally:
        consumer.close()
    return sorted(records, key=lambda r: (r.partition, r.offset))
