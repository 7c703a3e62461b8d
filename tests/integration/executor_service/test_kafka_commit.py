"""CommitCheckpoint, AbortCheckpoint and task restore against a real Kafka broker.

The transactions are pre-committed by the test (as a sink writer would) and finished by
the executor process through the resume path; failpoints kill it midway through.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

import grpc
import pytest

from lockgate.common.failpoints import FAILPOINT_EXIT_CODE
from lockgate.localcluster.kafka import read_visible
from lockgate.v1 import common_pb2, coordinator_pb2, executor_pb2
from tests.fixtures.kafka import KafkaBroker
from tests.integration.executor_service.scripted import (
    CoordinatorServer,
    ExecutorProcess,
    assignment,
)
from tests.support.transactions import left_open
from tests.support.waits import wait_for


def _precommit(
    broker: KafkaBroker,
    topic: str,
    values: Sequence[bytes],
    *,
    with_producer_id: bool = True,
    transactional_id: str | None = None,
) -> common_pb2.SinkHandle:
    """Write ``values`` to ``topic`` in a transaction left open, as a pre-commit does."""
    transactional_id = transactional_id or f"lg-test-{uuid.uuid4().hex[:10]}"
    handle = left_open(broker.bootstrap_servers, topic, values, transactional_id=transactional_id)
    kafka = common_pb2.KafkaTransactionHandle(
        transactional_id=transactional_id, bootstrap_servers=broker.bootstrap_servers
    )
    if with_producer_id:
        kafka.producer_id = handle.producer_id
        kafka.producer_epoch = handle.producer_epoch
    return common_pb2.SinkHandle(kafka=kafka)


def _values(broker: KafkaBroker, topic: str) -> list[bytes]:
    return sorted(r.value or b"" for r in read_visible(broker.bootstrap_servers, topic))


def _addressed(executor: ExecutorProcess, coordinator: CoordinatorServer) -> dict[str, Any]:
    """The fields every leader-to-executor call carries: a fresh request id, the scripted
    leader's epoch, the executor's id and generation, and the pipeline ("p")."""
    return {
        "request_id": str(uuid.uuid4()),
        "leader_epoch": coordinator.coordinator.epoch(),
        "executor_id": executor.executor_id,
        "executor_generation": coordinator.coordinator.executor_generation,
        "pipeline_name": "p",
    }


def _commit(
    executor: ExecutorProcess,
    coordinator: CoordinatorServer,
    handles: Sequence[common_pb2.SinkHandle],
    checkpoint_id: int = 1,
) -> executor_pb2.CommitCheckpointResponse:
    response: executor_pb2.CommitCheckpointResponse = executor.stub.CommitCheckpoint(
        executor_pb2.CommitCheckpointRequest(
            **_addressed(executor, coordinator), checkpoint_id=checkpoint_id, handles=handles
        ),
        timeout=60,
    )
    return response


def _abort(
    executor: ExecutorProcess,
    coordinator: CoordinatorServer,
    handles: Sequence[common_pb2.SinkHandle],
) -> executor_pb2.AbortCheckpointResponse:
    response: executor_pb2.AbortCheckpointResponse = executor.stub.AbortCheckpoint(
        executor_pb2.AbortCheckpointRequest(
            **_addressed(executor, coordinator), checkpoint_id=1, handles=handles, reason="test"
        ),
        timeout=60,
    )
    return response


def _batch(name: str, count: int = 20) -> list[bytes]:
    return [f"{name}-{i:03d}".encode() for i in range(count)]


def _precommit_a_and_b(
    broker: KafkaBroker, new_topic: Callable[..., str]
) -> tuple[str, str, list[common_pb2.SinkHandle]]:
    """Two new topics with batch "a" and batch "b" pre-committed to them: the topics and the
    two handles."""
    topic_a, topic_b = new_topic(), new_topic()
    handles = [
        _precommit(broker, topic_a, _batch("a")),
        _precommit(broker, topic_b, _batch("b")),
    ]
    return topic_a, topic_b, handles


def test_commit_makes_output_visible_is_idempotent_and_never_aborts_after(
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
    coordinator: CoordinatorServer,
    launch_executor: Callable[..., ExecutorProcess],
) -> None:
    topic_a, topic_b, handles = _precommit_a_and_b(kafka_broker, new_topic)
    executor = launch_executor("e1")

    assert _commit(executor, coordinator, handles).handles_committed == 2
    assert _values(kafka_broker, topic_a) == _batch("a")
    assert _values(kafka_broker, topic_b) == _batch("b")
    # The leader retries until acked: a repeat must succeed and change nothing.
    assert _commit(executor, coordinator, handles).handles_committed == 2
    assert _values(kafka_broker, topic_a) == _batch("a")

    with pytest.raises(grpc.RpcError) as refused:
        _abort(executor, coordinator, handles[:1])
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "already committed" in (refused.value.details() or "")


def test_abort_finishes_handles_with_and_without_producer_id_idempotently(
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
    coordinator: CoordinatorServer,
    launch_executor: Callable[..., ExecutorProcess],
) -> None:
    topic_a, topic_b = new_topic(), new_topic()
    handles = [
        _precommit(kafka_broker, topic_a, _batch("a")),
        # The writer died before reporting its producer id: only init_transactions ends it.
        _precommit(kafka_broker, topic_b, _batch("b"), with_producer_id=False),
    ]
    executor = launch_executor("e1")
    assert _abort(executor, coordinator, handles).handles_aborted == 2
    assert _abort(executor, coordinator, handles).handles_aborted == 2
    # read_visible only returns once every transaction before its sentinel is decided.
    assert _values(kafka_broker, topic_a) == []
    assert _values(kafka_broker, topic_b) == []


def test_abort_of_an_unreported_precommit_ends_every_write_partitions_transaction(
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
    coordinator: CoordinatorServer,
    launch_executor: Callable[..., ExecutorProcess],
) -> None:
    """A pre-commit that died before reporting left one open transaction per Spark write
    partition on "<slot id>-<k>"; the leader only knows the slot's id. The executor must end
    exactly those (found through Kafka's ListTransactions), and nothing of another slot."""
    slot = f"lockgate-p-0-{uuid.uuid4().hex[:8]}"
    topic, neighbour_topic = new_topic(), new_topic()
    for k in range(3):
        _precommit(kafka_broker, topic, _batch(f"w{k}"), transactional_id=f"{slot}-{k}")
    # Another slot whose id starts like this one's: its transaction must survive.
    neighbour = _precommit(
        kafka_broker, neighbour_topic, _batch("n"), transactional_id=f"{slot}0-0"
    )
    executor = launch_executor("e1")
    unreported = common_pb2.SinkHandle(
        kafka=common_pb2.KafkaTransactionHandle(
            transactional_id=slot, bootstrap_servers=kafka_broker.bootstrap_servers
        )
    )
    assert _abort(executor, coordinator, [unreported]).handles_aborted == 1
    assert _values(kafka_broker, topic) == []  # all decided (read_visible), none committed
    assert _commit(executor, coordinator, [neighbour]).handles_committed == 1
    assert _values(kafka_broker, neighbour_topic) == _batch("n")
    # Nothing left open: a second abort finds nothing to end and succeeds.
    assert _abort(executor, coordinator, [unreported]).handles_aborted == 1


def test_death_midway_through_commit_then_retry_on_another_executor(
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
    coordinator: CoordinatorServer,
    launch_executor: Callable[..., ExecutorProcess],
) -> None:
    topic_a, topic_b, handles = _precommit_a_and_b(kafka_broker, new_topic)
    first = launch_executor("e1", failpoints="mid_commit_handles")
    with pytest.raises(grpc.RpcError):
        _commit(first, coordinator, handles)
    assert first.wait_exit(timeout_s=30) == FAILPOINT_EXIT_CODE
    assert "failpoint mid_commit_handles hit" in first.log_text()
    assert _values(kafka_broker, topic_a) == _batch("a")

    second = launch_executor("e2")
    assert _commit(second, coordinator, handles).handles_committed == 2
    assert _values(kafka_broker, topic_a) == _batch("a")
    assert _values(kafka_broker, topic_b) == _batch("b")


def test_death_after_commit_before_ack_then_retry_succeeds(
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
    coordinator: CoordinatorServer,
    launch_executor: Callable[..., ExecutorProcess],
) -> None:
    topic = new_topic()
    handles = [_precommit(kafka_broker, topic, _batch("a"))]
    first = launch_executor("e1", failpoints="after_commit_before_ack")
    with pytest.raises(grpc.RpcError) as lost:
        _commit(first, coordinator, handles)
    assert lost.value.code() == grpc.StatusCode.UNAVAILABLE
    assert first.wait_exit(timeout_s=30) == FAILPOINT_EXIT_CODE
    assert _values(kafka_broker, topic) == _batch("a")

    second = launch_executor("e2")
    assert _commit(second, coordinator, handles).handles_committed == 1
    assert _values(kafka_broker, topic) == _batch("a")


def test_restore_commits_then_aborts_before_the_task_runs(
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
    coordinator: CoordinatorServer,
    launch_executor: Callable[..., ExecutorProcess],
) -> None:
    topic_a, topic_b, topic_c = new_topic(), new_topic(), new_topic()
    complete_2 = _precommit(kafka_broker, topic_a, _batch("ckpt2"))
    complete_3 = _precommit(kafka_broker, topic_b, _batch("ckpt3"))
    never_complete = _precommit(kafka_broker, topic_c, _batch("ckpt4"))
    restore = coordinator_pb2.TaskRestoreState(
        restored_checkpoint_id=3,
        start_offsets=[common_pb2.PartitionOffset(topic="input", partition=0, offset=40)],
        commit_before_start=[
            common_pb2.CheckpointHandles(checkpoint_id=2, handles=[complete_2]),
            common_pb2.CheckpointHandles(checkpoint_id=3, handles=[complete_3]),
        ],
        abort_before_start=[never_complete],
    )
    script = coordinator.coordinator
    script.set_assignments([assignment(pipeline="p", task_index=0, generation=1, restore=restore)])
    launch_executor("e1")

    def running() -> bool:
        status = script.last_status("p", 0)
        return status is not None and status.state == common_pb2.TASK_STATE_RUNNING

    wait_for("task RUNNING after restore", running, timeout_s=60)
    assert _values(kafka_broker, topic_a) == _batch("ckpt2")
    assert _values(kafka_broker, topic_b) == _batch("ckpt3")
    assert _values(kafka_broker, topic_c) == []
