"""What a heartbeat answers (a real coordinator process; the test is the executor): the full
assignment only when it changed since the version the executor presents, else only that it
is unchanged, so a heartbeat repeats no spec."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from lockgate.common.grpc_client import open_channel
from lockgate.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from tests.fixtures.kafka import KafkaBroker
from tests.integration.coordinator.test_service_coordinator import (
    CoordinatorCluster,
    pipeline_spec,
    unique_name,
)
from tests.support.waits import wait_for


def test_a_heartbeat_resends_specs_only_when_the_assignment_changed(
    sqlite_cluster: CoordinatorCluster,
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
) -> None:
    """Unchanged: `assignment_unchanged` and no task (an executor would otherwise parse every
    spec on every heartbeat); a restarted task (new generation): every task again, with its
    spec, under a new version; an executor holding nothing (version 0): everything."""
    (coordinator,) = sqlite_cluster.start(1)
    sqlite_cluster.leader()
    with open_channel(coordinator.address) as channel:
        stub = coordinator_pb2_grpc.CoordinatorServiceStub(channel)
        registered = stub.RegisterExecutor(
            coordinator_pb2.RegisterExecutorRequest(
                request_id=uuid.uuid4().hex,
                executor_id="e1",
                address="127.0.0.1:1",  # never called: no task reports RUNNING
                spark_master="scripted",
            ),
            timeout=10,
        )
        assert registered.assignment_version != 0

        def heartbeat(known: int) -> coordinator_pb2.HeartbeatResponse:
            response: coordinator_pb2.HeartbeatResponse = stub.Heartbeat(
                coordinator_pb2.HeartbeatRequest(
                    executor_id="e1",
                    executor_generation=registered.executor_generation,
                    known_assignment_version=known,
                ),
                timeout=10,
            )
            return response

        name = unique_name("heartbeats")
        stub.CreatePipeline(
            coordinator_pb2.CreatePipelineRequest(
                spec=pipeline_spec(
                    name,
                    bootstrap=kafka_broker.bootstrap_servers,
                    source_topic=new_topic(partitions=2),
                    sink_topic=new_topic(),
                    tasks_max=2,
                )
            ),
            timeout=10,
        )
        first = wait_for(
            "both tasks assigned to e1",
            lambda: (
                r if len((r := heartbeat(registered.assignment_version)).assignments) == 2 else None
            ),
            timeout_s=30,
        )
        assert not first.assignment_unchanged
        assert first.assignment_version not in (0, registered.assignment_version)
        assert all(a.pipeline_spec.name == name for a in first.assignments)

        again = heartbeat(first.assignment_version)
        assert again.assignment_unchanged
        assert again.assignment_version == first.assignment_version
        assert list(again.assignments) == []

        nothing_held = heartbeat(0)
        assert not nothing_held.assignment_unchanged
        assert len(nothing_held.assignments) == 2

        before = {a.task_id.task_index: a.task_generation for a in first.assignments}
        stub.RestartTask(
            coordinator_pb2.RestartTaskRequest(
                task_id=common_pb2.TaskId(pipeline_name=name, task_index=0)
            ),
            timeout=10,
        )
        changed = heartbeat(first.assignment_version)
        assert not changed.assignment_unchanged
        assert changed.assignment_version != first.assignment_version
        after = {a.task_id.task_index: a for a in changed.assignments}
        assert after[0].task_generation == before[0] + 1
        assert after[1].task_generation == before[1]
        assert all(a.pipeline_spec.name == name for a in changed.assignments)
        assert heartbeat(changed.assignment_version).assignment_unchanged
