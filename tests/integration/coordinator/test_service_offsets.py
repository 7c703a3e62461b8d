"""ResetOffsets to a position, against a real coordinator process and a real broker."""

from __future__ import annotations

from collections.abc import Callable

import grpc
from confluent_kafka import Producer

from lockgate.common.grpc_client import open_channel
from lockgate.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from tests.fixtures.kafka import KafkaBroker, stable_end_offsets
from tests.integration.coordinator.test_service_coordinator import (
    CoordinatorCluster,
    pipeline_spec,
    rpc_error,
    unique_name,
)
from tests.support.waits import wait_for


def _produce(bootstrap: str, topic: str, counts: dict[int, int]) -> None:
    """Write `counts[p]` committed records to each partition p, in one transaction."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_name("tx")})
    producer.init_transactions(10)
    producer.begin_transaction()
    for partition, count in counts.items():
        for i in range(count):
            producer.produce(topic, value=f"r{i}".encode(), partition=partition)
    producer.commit_transaction(10)
    # commit_transaction() returns once the coordinator has decided, before the commit
    # marker (one offset each) is written to the partitions: a record produced meanwhile
    # lands before it, and the marker after.
    ends = [count + 1 for _, count in sorted(counts.items())]
    wait_for(
        "the committed transaction's markers",
        lambda: stable_end_offsets(bootstrap, topic, len(counts), committed=False) == ends,
        timeout_s=30,
    )


def _reset_when_kafka_answers(
    stub: coordinator_pb2_grpc.CoordinatorServiceStub, request: coordinator_pb2.ResetOffsetsRequest
) -> coordinator_pb2.ResetOffsetsResponse:
    """ResetOffsets, retried as a client would while the coordinator answers that the source
    cluster did not say where its logs end in time (FAILED_PRECONDITION, "retry when it
    answers": a broker slow under a loaded CPU); another error is kept, and named when the
    wait fails at its deadline."""

    def attempt() -> coordinator_pb2.ResetOffsetsResponse | None:
        try:
            return stub.ResetOffsets(request, timeout=15)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.FAILED_PRECONDITION and "retry when it answers" in (
                exc.details() or ""
            ):
                return None
            raise

    return wait_for("a reset the source cluster answered in time", attempt, timeout_s=60)


def test_reset_to_latest_takes_the_read_committed_log_end_of_every_partition(
    sqlite_cluster: CoordinatorCluster,
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
) -> None:
    """A STOPPED pipeline reset to LATEST resumes each source partition at its last stable
    offset (records of a still-open transaction are not skipped past); a reset back to its
    starting_offsets (EARLIEST) forgets them again; a RUNNING pipeline is refused with
    FAILED_PRECONDITION telling to stop it."""
    (coordinator,) = sqlite_cluster.start(1)
    sqlite_cluster.leader()
    bootstrap = kafka_broker.bootstrap_servers
    source, sink = new_topic(partitions=2), new_topic()
    _produce(bootstrap, source, {0: 3, 1: 5})
    # An open transaction on partition 0: its records are past the last stable offset.
    open_tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_name("open")})
    open_tx.init_transactions(10)
    open_tx.begin_transaction()
    for i in range(4):
        open_tx.produce(source, value=f"open{i}".encode(), partition=0)
    open_tx.flush(10)
    name = unique_name("latest")
    latest = coordinator_pb2.ResetOffsetsRequest(
        pipeline_name=name, position=common_pb2.OFFSET_POSITION_LATEST
    )
    try:
        with open_channel(coordinator.address) as channel:
            stub = coordinator_pb2_grpc.CoordinatorServiceStub(channel)
            stub.CreatePipeline(
                coordinator_pb2.CreatePipelineRequest(
                    spec=pipeline_spec(
                        name, bootstrap=bootstrap, source_topic=source, sink_topic=sink
                    )
                ),
                timeout=10,
            )
            err = rpc_error(lambda: stub.ResetOffsets(latest, timeout=10))
            assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, err
            assert "stop it" in (err.details() or "")

            stub.StopPipeline(coordinator_pb2.StopPipelineRequest(name=name), timeout=10)
            reset = _reset_when_kafka_answers(stub, latest)
            # Each committed batch ends with its transaction marker (one offset); the open
            # transaction's 4 records on partition 0 (high watermark 8) are not skipped.
            expected = [(source, 0, 4), (source, 1, 6)]
            assert [(o.topic, o.partition, o.offset) for o in reset.offsets] == expected
            assert reset.default_position == common_pb2.OFFSET_POSITION_LATEST
            stored = stub.GetOffsets(
                coordinator_pb2.GetOffsetsRequest(pipeline_name=name), timeout=5
            )
            assert [(o.topic, o.partition, o.offset) for o in stored.offsets] == expected
            assert stored.checkpoint_id == 0

            earliest = stub.ResetOffsets(
                coordinator_pb2.ResetOffsetsRequest(
                    pipeline_name=name, position=common_pb2.OFFSET_POSITION_EARLIEST
                ),
                timeout=10,
            )
            assert not earliest.offsets
            stored = stub.GetOffsets(
                coordinator_pb2.GetOffsetsRequest(pipeline_name=name), timeout=5
            )
            assert not stored.offsets
            assert stored.default_position == common_pb2.OFFSET_POSITION_EARLIEST
    finally:
        open_tx.abort_transaction(10)
