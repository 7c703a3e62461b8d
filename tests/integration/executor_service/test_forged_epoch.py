"""Issue 8's attack, with real processes: one GetExecutorStatus carrying leader epoch 2^63-1
used to make an executor refuse the real leader for good, so a new pipeline committed
nothing. A read must not raise the epoch an executor accepts: the pipeline still commits."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lockgate.v1 import common_pb2, coordinator_pb2, executor_pb2
from tests.fixtures.kafka import KafkaBroker
from tests.integration.coordinator.test_service_coordinator import (
    CoordinatorCluster,
    CoordinatorProcess,
    pipeline_spec,
    unique_name,
)
from tests.integration.executor_service.scripted import ExecutorProcess, start_executor
from tests.support.waits import wait_for

FORGED = common_pb2.LeaderEpoch(epoch=2**63 - 1, leader_id="stranger")


@pytest.fixture
def leader(tmp_path: Path) -> Iterator[CoordinatorProcess]:
    """One coordinator replica on a SQLite file, once it leads."""
    cluster = CoordinatorCluster(tmp_path, f"sqlite:///{tmp_path / 'coordinator.db'}")
    try:
        cluster.start(1)
        yield cluster.leader()
    finally:
        cluster.stop_all()


@pytest.fixture
def executor(leader: CoordinatorProcess, tmp_path: Path) -> Iterator[ExecutorProcess]:
    """An executor (`--data-plane none`) registered with the leader."""
    running = start_executor(
        executor_id="e1",
        coordinator_address=leader.address,
        log_path=tmp_path / "e1.log",
        data_plane="none",
    )
    try:
        wait_for(
            "e1 registered",
            lambda: (
                running.stub.GetExecutorStatus(
                    executor_pb2.GetExecutorStatusRequest(), timeout=5
                ).executor_generation
                > 0
            ),
            timeout_s=60,
            abort_if=running.died,
        )
        yield running
    finally:
        running.stop()


def test_a_forged_epoch_in_a_read_does_not_stop_a_pipeline_from_committing(
    leader: CoordinatorProcess,
    executor: ExecutorProcess,
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
) -> None:
    real_epoch = leader.cluster_info().leader_epoch.epoch
    executor.stub.GetExecutorStatus(
        executor_pb2.GetExecutorStatusRequest(leader_epoch=FORGED), timeout=5
    )
    status = executor.stub.GetExecutorStatus(executor_pb2.GetExecutorStatusRequest(), timeout=5)
    assert status.highest_leader_epoch_seen.epoch == real_epoch

    name = unique_name("forged")
    spec = pipeline_spec(
        name,
        bootstrap=kafka_broker.bootstrap_servers,
        source_topic=new_topic(prefix="in"),
        sink_topic=new_topic(prefix="out"),
    )
    stub = leader.stub()
    stub.CreatePipeline(coordinator_pb2.CreatePipelineRequest(spec=spec), timeout=15)

    def committed() -> int | None:
        found = stub.ListCheckpoints(
            coordinator_pb2.ListCheckpointsRequest(
                pipeline_name=name, states=[common_pb2.CHECKPOINT_STATE_COMMITTED]
            ),
            timeout=5,
        ).checkpoints
        return len(found) if len(found) >= 2 else None

    wait_for("two checkpoints COMMITTED", committed, timeout_s=60, abort_if=executor.died)
    assert "refused leader_epoch" not in executor.log_text()
