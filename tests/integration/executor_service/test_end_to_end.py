"""One checkpoint end to end: a real executor process with its SparkSession, a real broker.

Trigger -> the executor's PySpark batch writes the output inside open Kafka transactions
and reports ranges and handles -> nothing is visible to read_committed readers ->
CommitCheckpoint -> every record is visible exactly once.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from lockgate.localcluster.kafka import read_visible
from lockgate.v1 import common_pb2, executor_pb2
from tests.fixtures.kafka import KafkaBroker
from tests.integration.executor_service.scripted import (
    CoordinatorServer,
    ExecutorProcess,
    assignment,
    trigger_request,
)
from tests.support.waits import wait_for

pytestmark = pytest.mark.spark

RECORDS = 50


def _stable_end(bootstrap_servers: str, topic: str) -> int:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": "lockgate-test",
            "isolation.level": "read_committed",
        }
    )
    try:
        _, end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
        return int(end)
    finally:
        consumer.close()


def test_trigger_precommits_with_spark_and_commit_makes_output_visible_once(
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
    coordinator: CoordinatorServer,
    launch_executor: Callable[..., ExecutorProcess],
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    source, sink = new_topic(prefix="in"), new_topic(prefix="out")
    values = sorted(f"v-{i:03d}".encode() for i in range(RECORDS))
    producer = Producer({"bootstrap.servers": bootstrap})
    for i, value in enumerate(values):
        producer.produce(source, key=f"k{i % 7}".encode(), value=value, partition=0)
    assert producer.flush(30) == 0
    del producer

    script = coordinator.coordinator
    script.set_assignments(
        [
            assignment(
                pipeline="copy",
                task_index=0,
                generation=1,
                source_topic=source,
                sink_topic=sink,
                bootstrap_servers=bootstrap,
                sql="SELECT key, value FROM input",
            ),
            assignment(
                pipeline="copy",
                task_index=1,
                generation=1,
                source_topic=source,
                sink_topic="missing-topic-for-test",
                bootstrap_servers=bootstrap,
            ),
        ]
    )
    executor = launch_executor("e1", data_plane="spark", registered_timeout_s=240)
    assert "SparkSession on local[2] ready (with warm-up)" in executor.log_text()

    def running(index: int) -> bool:
        status = script.last_status("copy", index)
        return status is not None and status.state == common_pb2.TASK_STATE_RUNNING

    wait_for("tasks RUNNING", lambda: running(0) and running(1), timeout_s=30)
    start = [common_pb2.PartitionOffset(topic=source, partition=0, offset=0)]
    response = executor.stub.TriggerCheckpoint(
        trigger_request(
            executor,
            script,
            pipeline="copy",
            checkpoint_id=1,
            tasks=[(0, 1), (1, 1)],
            start_offsets=start,
        ),
        timeout=10,
    )
    assert [r.outcome for r in response.results] == [executor_pb2.TRIGGER_OUTCOME_ACCEPTED] * 2

    def _task_0_failure() -> str | None:
        failed = [f for f in script.checkpoint_failures if f.task_id.task_index == 0]
        return f"task 0 failed: {failed[0].error.message}" if failed else None

    wait_for(
        "pre-commit report of task 0 and failure report of task 1",
        lambda: len(script.precommits) == 1 and len(script.checkpoint_failures) == 1,
        timeout_s=240,
        abort_if=lambda: executor.died() or _task_0_failure(),
    )

    report = script.precommits[0]
    assert report.task_id.task_index == 0
    assert [(r.topic, r.partition, r.start_offset, r.end_offset) for r in report.source_ranges] == [
        (source, 0, 0, RECORDS)
    ]
    assert (report.counts.records_read, report.counts.records_written) == (RECORDS, RECORDS)
    assert report.sink_handles, "an exactly-once pre-commit must hand in its transactions"
    for handle in report.sink_handles:
        assert handle.kafka.HasField("producer_id") and handle.kafka.HasField("producer_epoch")
        assert handle.kafka.transactional_id.startswith("lg-test-copy-0-1")
        assert handle.kafka.bootstrap_servers == bootstrap
    # Pre-committed, not committed: the transaction holds read_committed readers at 0.
    assert _stable_end(bootstrap, sink) == 0

    failure = script.checkpoint_failures[0]
    assert failure.task_id.task_index == 1 and failure.checkpoint_id == 1
    assert "missing-topic-for-test" in failure.error.message
    assert not failure.task_failed

    commit = executor.stub.CommitCheckpoint(
        executor_pb2.CommitCheckpointRequest(
            leader_epoch=script.epoch(),
            executor_id="e1",
            executor_generation=script.executor_generation,
            pipeline_name="copy",
            checkpoint_id=1,
            handles=report.sink_handles,
        ),
        timeout=60,
    )
    assert commit.handles_committed == len(report.sink_handles)
    output = read_visible(bootstrap, sink)
    assert sorted(r.value or b"" for r in output) == values

    # Checkpoint 2 starts where 1 ended and finds nothing new: an empty, handle-less report.
    response = executor.stub.TriggerCheckpoint(
        trigger_request(
            executor,
            script,
            pipeline="copy",
            checkpoint_id=2,
            tasks=[(0, 1)],
            start_offsets=[common_pb2.PartitionOffset(topic=source, partition=0, offset=RECORDS)],
        ),
        timeout=10,
    )
    assert response.results[0].outcome == executor_pb2.TRIGGER_OUTCOME_ACCEPTED
    wait_for("second report", lambda: len(script.precommits) == 2, timeout_s=120)
    second = script.precommits[1]
    assert [(r.start_offset, r.end_offset) for r in second.source_ranges] == [(RECORDS, RECORDS)]
    assert list(second.sink_handles) == []
