"""A multi-task pipeline's checkpoints complete through ReportPrecommits: a real
coordinator and two `--data-plane none` executor processes, each reporting its tasks'
pre-commits in batches (`executor/runtime/report_batch.py`)."""

from __future__ import annotations

from collections.abc import Callable

from lockgate.common.grpc_client import open_channel
from lockgate.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from tests.fixtures.kafka import KafkaBroker
from tests.integration.coordinator.test_service_coordinator import (
    CoordinatorCluster,
    checkpoints,
    pipeline_spec,
    unique_name,
)
from tests.support.processes import ChildProcess
from tests.support.waits import wait_for

TASKS = 8


def test_checkpoints_of_many_tasks_commit_through_batched_reports(
    sqlite_cluster: CoordinatorCluster,
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
    control_executors: Callable[[str, list[str]], ChildProcess],
) -> None:
    (coordinator,) = sqlite_cluster.start(1)
    sqlite_cluster.leader()
    executors = [control_executors(e, [coordinator.address]) for e in ("e1", "e2")]
    # Both registered before the pipeline exists: else e1 could take every task and commit
    # three checkpoints before e2 joins (this failed once under load).
    wait_for(
        "both executors to register",
        lambda: (
            sum(
                e.state == common_pb2.EXECUTOR_STATE_ALIVE
                for e in coordinator.cluster_info().executors
            )
            == 2
        ),
        timeout_s=30,
    )
    name = unique_name("batched")
    with open_channel(coordinator.address) as channel:
        stub = coordinator_pb2_grpc.CoordinatorServiceStub(channel)
        stub.CreatePipeline(
            coordinator_pb2.CreatePipelineRequest(
                spec=pipeline_spec(
                    name,
                    bootstrap=kafka_broker.bootstrap_servers,
                    source_topic=new_topic(partitions=TASKS),
                    sink_topic=new_topic(),
                    tasks_max=TASKS,
                    interval_ms=200,
                    timeout_ms=30_000,
                )
            ),
            timeout=10,
        )

        def committed() -> list[common_pb2.Checkpoint]:
            return [
                c
                for c in checkpoints(stub, name).values()
                if c.state == common_pb2.CHECKPOINT_STATE_COMMITTED
            ]

        done = wait_for(
            "three committed checkpoints",
            lambda: len(committed()) >= 3 and committed(),
            timeout_s=90,
        )
        detail = stub.GetCheckpoint(
            coordinator_pb2.GetCheckpointRequest(
                pipeline_name=name, checkpoint_id=done[-1].checkpoint_id
            ),
            timeout=5,
        ).checkpoint
    # COMMITTED with tasks on both: each executor's reports were recorded.
    assert len(detail.tasks) == TASKS
    assert {t.executor_id for t in detail.tasks} == {"e1", "e2"}
    for executor in executors:
        log = executor.log_text()
        assert "has no ReportPrecommits" not in log, (
            f"{executor.name} fell back to one call per task"
        )
