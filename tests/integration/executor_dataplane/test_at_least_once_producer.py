"""An at_least_once write partition borrows the producer its Spark Python worker keeps
between batches (`kafka_sink_write.AT_LEAST_ONCE_PRODUCERS`): a new idempotent producer
waits about 500 ms for its producer id (librdkafka asks before a connection is up, then
retries on a timer), which every batch paid at its flush. Real broker, in this process as
in one worker."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from lockgate.common.kept_clients import KeptClients
from lockgate.common.model.offsets import OffsetRange
from lockgate.executor.dataplane.spark import kafka_sink_write
from lockgate.executor.dataplane.spark.chained import copy_partition
from lockgate.executor.dataplane.spark.kafka_sink import SinkOptions
from lockgate.executor.dataplane.spark.kafka_sink_write import KeptProducer, PartitionWriter
from lockgate.executor.dataplane.spark.kafka_source import SourceOptions, ranges_to_option
from tests.integration.executor_dataplane.conftest import produce, read_topic


class Pool:
    """A fresh pool in place of the worker's, counting the producers it builds and closes."""

    def __init__(self) -> None:
        self.built: list[KeptProducer] = []
        self.closed: list[KeptProducer] = []
        self.clients: KeptClients[KeptProducer] = KeptClients(
            self._build, close=self._close, shared=False
        )

    def _build(self, bootstrap: str, settings: Mapping[str, str]) -> KeptProducer:
        kept = kafka_sink_write._kept_producer(bootstrap, settings)
        self.built.append(kept)
        return kept

    def _close(self, kept: KeptProducer) -> None:
        self.closed.append(kept)
        kafka_sink_write._close_kept(kept)


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[Pool]:
    pool = Pool()
    monkeypatch.setattr(kafka_sink_write, "AT_LEAST_ONCE_PRODUCERS", pool.clients)
    yield pool
    pool.clients.close_all()


def _options(bootstrap: str, source: str, sink: str, end: int) -> tuple[SourceOptions, SinkOptions]:
    ranges = [OffsetRange(source, 0, 0, end)]
    return (
        SourceOptions.parse(
            {"bootstrap_servers": bootstrap, "offset_ranges": ranges_to_option(ranges)}
        ),
        SinkOptions.parse(
            {
                "bootstrap_servers": bootstrap,
                "topic": sink,
                "delivery": "at_least_once",
                "linger_ms": "20",
            }
        ),
    )


def test_batches_of_one_worker_share_its_producer_and_each_delivers_its_records(
    kafka_broker: Any, new_topic: Callable[..., str], pool: Pool
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    source, sink = new_topic(partitions=1, prefix="in"), new_topic(partitions=1, prefix="out")
    records = [(f"k{i % 7}".encode(), f"v{i}".encode()) for i in range(300)]
    produce(bootstrap, source, records, partition=0)
    source_options, sink_options = _options(bootstrap, source, sink, 300)

    first = copy_partition(
        source_options,
        sink_options,
        write_partition=0,
        ranges=[OffsetRange(source, 0, 0, 100)],
        attempt=0,
    )
    assert [(r.key, r.value) for r in read_topic(bootstrap, sink, partitions=1)] == records[:100]
    second = copy_partition(
        source_options,
        sink_options,
        write_partition=1,
        ranges=[OffsetRange(source, 0, 100, 300)],
        attempt=0,
    )

    assert (first.message.records_written, second.message.records_written) == (100, 200)
    assert first.message.handle is None and second.message.handle is None
    assert [(r.key, r.value) for r in read_topic(bootstrap, sink, partitions=1)] == records
    assert len(pool.built) == 1, "the second batch borrowed the first one's producer"
    assert pool.closed == []


def test_a_failed_batch_drops_its_producer_and_the_next_builds_another(
    kafka_broker: Any, new_topic: Callable[..., str], pool: Pool
) -> None:
    """The failed batch's records may still sit in the producer: dropped with it (the
    batch's retry reads them again), never flushed into a later batch."""
    bootstrap = kafka_broker.bootstrap_servers
    source, sink = new_topic(partitions=1, prefix="in"), new_topic(partitions=1, prefix="out")
    _, sink_options = _options(bootstrap, source, sink, 0)

    failed = PartitionWriter(sink_options, 0)
    failed.write_rows([b"k"], [b"lost"], [None], [0], size=5)
    failed.abandon()
    assert pool.closed == pool.built and len(pool.built) == 1

    writer = PartitionWriter(sink_options, 0)
    writer.write_rows([b"k"], [b"kept"], [None], [0], size=5)
    assert writer.precommit(attempt=0).records_written == 1
    assert len(pool.built) == 2 and pool.closed == pool.built[:1]
    assert [(r.key, r.value) for r in read_topic(bootstrap, sink, partitions=1)] == [
        (b"k", b"kept")
    ]
