"""Forged pre-commit reports against a coordinator process: each is refused with
INVALID_ARGUMENT naming the field that does not match the trigger, nothing of it is stored,
and the genuine report of the same task still completes and commits the checkpoint."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import grpc
import pytest

from lockgate.common.grpc_client import error_details, open_channel
from lockgate.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc, executor_pb2
from tests.fixtures.kafka import KafkaBroker
from tests.integration.coordinator.test_service_coordinator import (
    CoordinatorCluster,
    ScriptedExecutor,
    checkpoints,
    first_in_state,
    pipeline_spec,
    rpc_error,
    unique_name,
)
from tests.support.waits import wait_for


def genuine(
    trigger: executor_pb2.TriggerCheckpointRequest, peer: ScriptedExecutor, partitions: int
) -> coordinator_pb2.ReportPrecommitRequest:
    """The report the trigger asks for: each partition from where the trigger starts it."""
    (task,) = trigger.tasks
    starts = {(o.topic, o.partition): o.offset for o in task.start_offsets}
    topic = next(iter(starts))[0]
    return coordinator_pb2.ReportPrecommitRequest(
        leader_epoch=trigger.leader_epoch,
        checkpoint_id=trigger.checkpoint_id,
        task_id=task.task_id,
        task_generation=task.task_generation,
        executor_id=peer.executor_id,
        executor_generation=trigger.executor_generation,
        source_ranges=[
            common_pb2.OffsetRange(
                topic=topic,
                partition=p,
                start_offset=starts[(topic, p)],
                end_offset=starts[(topic, p)] + 3,
            )
            for p in range(partitions)
        ],
        sink_handles=[
            common_pb2.SinkHandle(
                kafka=common_pb2.KafkaTransactionHandle(
                    transactional_id=f"{task.transactional_id_prefix}-0",
                    producer_id=4242,
                    producer_epoch=1,
                )
            )
        ],
    )


@pytest.fixture
def triggered(
    sqlite_cluster: CoordinatorCluster,
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
) -> Iterator[
    tuple[
        coordinator_pb2_grpc.CoordinatorServiceStub,
        str,
        ScriptedExecutor,
        executor_pb2.TriggerCheckpointRequest,
    ]
]:
    """A one-task pipeline over two partitions whose first checkpoint committed, and the
    trigger of a later one its (now silent) executor has not reported."""
    (member,) = sqlite_cluster.start(1)
    peer = ScriptedExecutor("e1", [member.address]).start()
    name = unique_name("forged")
    try:
        with open_channel([member.address]) as channel:
            stub = coordinator_pb2_grpc.CoordinatorServiceStub(channel)
            sqlite_cluster.leader()
            wait_for(
                "e1 registered",
                lambda: [e for e in member.cluster_info().executors if e.executor_id == "e1"],
                timeout_s=20,
            )
            spec = pipeline_spec(
                name,
                bootstrap=kafka_broker.bootstrap_servers,
                source_topic=new_topic(partitions=2),
                sink_topic=new_topic(),
                timeout_ms=60_000,
            )
            stub.CreatePipeline(coordinator_pb2.CreatePipelineRequest(spec=spec), timeout=15)
            wait_for(
                "a first committed checkpoint",
                lambda: first_in_state(stub, name, common_pb2.CHECKPOINT_STATE_COMMITTED),
                timeout_s=30,
            )
            with peer.lock:
                peer.script.precommit = "silent"

            def silent_trigger() -> executor_pb2.TriggerCheckpointRequest | None:
                # The first trigger the peer received silent. Not "the first trigger after the
                # newest checkpoint": that checkpoint may itself be the silenced one, and no
                # later one comes while it waits out its 60 s timeout.
                with peer.lock:
                    return next((t for t in peer.log.silenced if t.pipeline_name == name), None)

            trigger = wait_for("a trigger left unreported", silent_trigger, timeout_s=30)
            yield stub, name, peer, trigger
    finally:
        peer.stop()


def refused(
    stub: coordinator_pb2_grpc.CoordinatorServiceStub,
    report: coordinator_pb2.ReportPrecommitRequest,
) -> dict[str, str]:
    err = rpc_error(lambda: stub.ReportPrecommit(report, timeout=10))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert error_details(err).reason == "PRECOMMIT_MISMATCH"
    return {v.field: v.description for v in error_details(err).field_violations}


def test_each_forged_report_is_refused_and_the_genuine_one_commits(
    triggered: tuple[
        coordinator_pb2_grpc.CoordinatorServiceStub,
        str,
        ScriptedExecutor,
        executor_pb2.TriggerCheckpointRequest,
    ],
) -> None:
    stub, name, peer, trigger = triggered
    report = genuine(trigger, peer, partitions=2)
    assert all(r.start_offset > 0 for r in report.source_ranges), "starts from checkpoint 1"

    rewound = coordinator_pb2.ReportPrecommitRequest()
    rewound.CopyFrom(report)
    rewound.source_ranges[1].start_offset = 0  # re-reading what checkpoint 1 covered
    assert list(refused(stub, rewound)) == ["source_ranges[1].start_offset"]

    foreign = coordinator_pb2.ReportPrecommitRequest()
    foreign.CopyFrom(report)
    foreign.source_ranges.append(
        common_pb2.OffsetRange(topic="someone-elses", partition=0, start_offset=0, end_offset=9)
    )
    assert list(refused(stub, foreign)) == ["source_ranges[2]"]

    elsewhere = coordinator_pb2.ReportPrecommitRequest()
    elsewhere.CopyFrom(report)
    elsewhere.sink_handles[0].kafka.bootstrap_servers = "attacker.example:9092"
    assert list(refused(stub, elsewhere)) == ["sink_handles[0].kafka.bootstrap_servers"]

    other_id = coordinator_pb2.ReportPrecommitRequest()
    other_id.CopyFrom(report)
    other_id.sink_handles[0].kafka.transactional_id = "lockgate-another-pipeline-0-g1-0"
    assert list(refused(stub, other_id)) == ["sink_handles[0].kafka.transactional_id"]

    # None of them was stored: the genuine report is the task's first, and completes N.
    answer = stub.ReportPrecommit(report, timeout=10)
    assert answer.checkpoint_state in (
        common_pb2.CHECKPOINT_STATE_COMPLETE,
        common_pb2.CHECKPOINT_STATE_COMMITTED,
    )

    def committed() -> common_pb2.Checkpoint | None:
        found = checkpoints(stub, name).get(trigger.checkpoint_id)
        return found if found and found.state == common_pb2.CHECKPOINT_STATE_COMMITTED else None

    wait_for(f"checkpoint {trigger.checkpoint_id} COMMITTED", committed, timeout_s=30)
    with peer.lock:
        acked = [c for c in peer.log.acked_commits if c.checkpoint_id == trigger.checkpoint_id]
    assert [h.kafka.transactional_id for c in acked for h in c.handles] == [
        report.sink_handles[0].kafka.transactional_id
    ]
    offsets = stub.GetOffsets(coordinator_pb2.GetOffsetsRequest(pipeline_name=name), timeout=5)
    assert sorted(o.offset for o in offsets.offsets) == sorted(
        r.end_offset for r in report.source_ranges
    )


def test_a_batch_answers_each_report_and_a_retried_batch_is_harmless(
    triggered: tuple[
        coordinator_pb2_grpc.CoordinatorServiceStub,
        str,
        ScriptedExecutor,
        executor_pb2.TriggerCheckpointRequest,
    ],
) -> None:
    """ReportPrecommits: the forged report of a batch is refused alone (INVALID_ARGUMENT
    naming its field), the genuine one completes N; the same batch again changes nothing:
    only the genuine report's handle is committed."""
    stub, name, peer, trigger = triggered
    report = genuine(trigger, peer, partitions=2)
    forged = coordinator_pb2.ReportPrecommitRequest()
    forged.CopyFrom(report)
    forged.sink_handles[0].kafka.transactional_id = "lockgate-another-pipeline-0-g1-0"
    batch = coordinator_pb2.ReportPrecommitsRequest(
        executor_id=peer.executor_id, reports=[forged, report]
    )

    done = (common_pb2.CHECKPOINT_STATE_COMPLETE, common_pb2.CHECKPOINT_STATE_COMMITTED)
    refusal, accepted = stub.ReportPrecommits(batch, timeout=10).results
    assert refusal.refusal.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert refusal.refusal.reason == "PRECOMMIT_MISMATCH"
    assert [v.field for v in refusal.refusal.field_violations] == [
        "sink_handles[0].kafka.transactional_id"
    ]
    assert not accepted.HasField("refusal")
    assert accepted.checkpoint_state in done

    # Retried: the task's pre-commit of N is in, so both reports now read as its repeats
    # (as with ReportPrecommit): answered with N's state, nothing of either stored again.
    retried = stub.ReportPrecommits(batch, timeout=10).results
    assert [r.HasField("refusal") for r in retried] == [False, False]
    assert all(r.checkpoint_state in done for r in retried)

    wait_for(
        f"checkpoint {trigger.checkpoint_id} COMMITTED",
        lambda: (
            (found := checkpoints(stub, name).get(trigger.checkpoint_id))
            and found.state == common_pb2.CHECKPOINT_STATE_COMMITTED
        ),
        timeout_s=30,
    )
    with peer.lock:
        acked = [c for c in peer.log.acked_commits if c.checkpoint_id == trigger.checkpoint_id]
    assert [h.kafka.transactional_id for c in acked for h in c.handles] == [
        report.sink_handles[0].kafka.transactional_id
    ]


def test_a_batch_with_another_executors_report_is_refused_naming_the_report(
    triggered: tuple[
        coordinator_pb2_grpc.CoordinatorServiceStub,
        str,
        ScriptedExecutor,
        executor_pb2.TriggerCheckpointRequest,
    ],
) -> None:
    stub, _name, peer, trigger = triggered
    report = genuine(trigger, peer, partitions=2)
    batch = coordinator_pb2.ReportPrecommitsRequest(executor_id="e2", reports=[report])
    err = rpc_error(lambda: stub.ReportPrecommits(batch, timeout=10))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert [v.field for v in error_details(err).field_violations] == ["reports[0].executor_id"]
    empty = coordinator_pb2.ReportPrecommitsRequest(executor_id=peer.executor_id)
    err = rpc_error(lambda: stub.ReportPrecommits(empty, timeout=10))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert [v.field for v in error_details(err).field_violations] == ["reports"]
