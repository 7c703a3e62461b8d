"""An executor hears of a change to its assignment at once, not at its next heartbeat.

A real coordinator process whose heartbeat interval is two minutes, and a real executor
process (`--data-plane none`). Without the leader's `NotifyAssignment` a new pipeline's
task would reach the executor only at its next heartbeat, and without the executor's own
heartbeat on a task's state change the leader would see the task RUNNING (and trigger it)
only at the one after: each waits out the interval, far past these tests' deadlines.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from lockgate.common.grpc_client import open_channel
from lockgate.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from tests.fixtures.kafka import KafkaBroker
from tests.integration.coordinator.test_service_coordinator import (
    CoordinatorCluster,
    first_in_state,
    pipeline_spec,
    unique_name,
)
from tests.support.processes import ChildProcess
from tests.support.waits import wait_for

HEARTBEAT_INTERVAL_MS = 120_000
#: Far inside the interval: a change that waited for a heartbeat would miss it.
DEADLINE_S = 30.0


def _task_states(stub: coordinator_pb2_grpc.CoordinatorServiceStub, name: str) -> list[int]:
    status = stub.GetPipelineStatus(coordinator_pb2.GetPipelineStatusRequest(name=name), timeout=5)
    return [t.state for t in status.tasks]


def test_a_new_pipeline_and_its_pause_and_resume_reach_the_executor_at_once(
    sqlite_cluster: CoordinatorCluster,
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
    control_executors: Callable[[str, list[str]], ChildProcess],
) -> None:
    (coordinator,) = sqlite_cluster.start(
        1, heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS, session_timeout_ms=3 * HEARTBEAT_INTERVAL_MS
    )
    sqlite_cluster.leader()
    executor = control_executors("e1", [coordinator.address])
    with open_channel(coordinator.address) as channel:
        stub = coordinator_pb2_grpc.CoordinatorServiceStub(channel)

        def heartbeated_since_registering() -> bool:
            info = stub.GetClusterInfo(coordinator_pb2.GetClusterInfoRequest(), timeout=5)
            return any(
                e.executor_id == "e1"
                and e.last_heartbeat_time.ToNanoseconds() > e.register_time.ToNanoseconds()
                for e in info.executors
            )

        # Its first heartbeat follows its registration at once; the next is 2 min away.
        wait_for(
            "e1 registered and heartbeated",
            heartbeated_since_registering,
            timeout_s=60,
            abort_if=executor.died,
        )
        name = unique_name("notices")
        stub.CreatePipeline(
            coordinator_pb2.CreatePipelineRequest(
                spec=pipeline_spec(
                    name,
                    bootstrap=kafka_broker.bootstrap_servers,
                    source_topic=new_topic(partitions=1),
                    sink_topic=new_topic(),
                )
            ),
            timeout=10,
        )
        committed = wait_for(
            "the new pipeline's first checkpoint committed",
            lambda: first_in_state(stub, name, common_pb2.CHECKPOINT_STATE_COMMITTED),
            timeout_s=DEADLINE_S,
            abort_if=executor.died,
        )
        stub.PausePipeline(
            coordinator_pb2.PausePipelineRequest(request_id=uuid.uuid4().hex, name=name),
            timeout=10,
        )
        wait_for(
            "the task PAUSED on e1",
            lambda: _task_states(stub, name) == [common_pb2.TASK_STATE_PAUSED],
            timeout_s=DEADLINE_S,
            abort_if=executor.died,
        )
        stub.ResumePipeline(
            coordinator_pb2.ResumePipelineRequest(request_id=uuid.uuid4().hex, name=name),
            timeout=10,
        )
        wait_for(
            "a checkpoint committed after the resume",
            lambda: first_in_state(
                stub, name, common_pb2.CHECKPOINT_STATE_COMMITTED, after=committed.checkpoint_id
            ),
            timeout_s=DEADLINE_S,
            abort_if=executor.died,
        )
