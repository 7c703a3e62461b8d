"""An executor's session survives a short outage of the coordinator's PostgreSQL.

Time during which the leader could not reach its database (so could not record
heartbeats) does not count against an executor: after the leader leads again, each
session alive when the outage began gets a full session timeout
(`domain.assignment.counted_heartbeat_ms`). A real coordinator on a PostgreSQL server of
the test's own, one `--data-plane none` executor, a 4 s session timeout and a 2 s outage
(the server SIGKILLed, then restarted on its data directory).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from lockgate.common.grpc_client import open_channel
from lockgate.localcluster.postgres import PostgresCluster, unique_database_name
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

pytestmark = pytest.mark.postgres

SESSION_TIMEOUT_MS = 4_000
OUTAGE_S = 2.0
#: What the coordinator logs when a lease attempt failed (its database is unreachable).
LEASE_FAILED = "lease attempt failed"
#: What the executor logs when it gives its session up.
SESSION_LOST = "session of executor e1 lost"


@pytest.fixture
def postgres() -> Iterator[PostgresCluster]:
    """A server of this test's own (killing the session's would hurt other tests)."""
    with PostgresCluster(durable=True) as cluster:
        yield cluster


def _task(stub: coordinator_pb2_grpc.CoordinatorServiceStub, name: str) -> common_pb2.Task | None:
    """The pipeline's one task once RUNNING."""
    status = stub.GetPipelineStatus(coordinator_pb2.GetPipelineStatusRequest(name=name), timeout=5)
    running = [t for t in status.tasks if t.state == common_pb2.TASK_STATE_RUNNING]
    return running[0] if len(running) == 1 else None


def _committed(stub: coordinator_pb2_grpc.CoordinatorServiceStub, name: str) -> list[int]:
    return sorted(
        n
        for n, c in checkpoints(stub, name).items()
        if c.state == common_pb2.CHECKPOINT_STATE_COMMITTED
    )


def test_a_short_database_outage_expires_no_session(
    tmp_path: Path,
    postgres: PostgresCluster,
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
    control_executors: Callable[[str, list[str]], ChildProcess],
    request: pytest.FixtureRequest,
) -> None:
    cluster = CoordinatorCluster(
        tmp_path, postgres.create_database(unique_database_name(request.node.name))
    )
    try:
        (coordinator,) = cluster.start(1, session_timeout_ms=SESSION_TIMEOUT_MS)
        cluster.leader()
        executor = control_executors("e1", [coordinator.address])
        name = unique_name("outage")
        with open_channel(coordinator.address) as channel:
            stub = coordinator_pb2_grpc.CoordinatorServiceStub(channel)
            stub.CreatePipeline(
                coordinator_pb2.CreatePipelineRequest(
                    spec=pipeline_spec(
                        name,
                        bootstrap=kafka_broker.bootstrap_servers,
                        source_topic=new_topic(),
                        sink_topic=new_topic(),
                        interval_ms=200,
                        timeout_ms=30_000,
                    )
                ),
                timeout=10,
            )
            before = wait_for(f"{name}'s task RUNNING", lambda: _task(stub, name), timeout_s=60)
            last_before = max(
                wait_for(
                    f"a checkpoint of {name} to commit",
                    lambda: _committed(stub, name),
                    timeout_s=30,
                )
            )
            postgres.kill()
            killed_at = time.monotonic()
            wait_for(
                "the leader to see the outage",
                lambda: LEASE_FAILED in coordinator.log_path.read_text(errors="replace"),
                timeout_s=OUTAGE_S,
            )
            # The outage's length is what the test is about, not a synchronisation.
            time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - killed_at)))
            postgres.restart()
            wait_for(
                f"{name} to commit again after the outage",
                lambda: [n for n in _committed_or_empty(stub, name) if n > last_before],
                timeout_s=30,
            )
            after = _task(stub, name)
        assert after is not None, "the task is no longer RUNNING after the outage"
        assert (after.executor_id, after.executor_generation, after.task_generation) == (
            before.executor_id,
            before.executor_generation,
            before.task_generation,
        ), "the executor's session or its task's assignment changed"
        assert SESSION_LOST not in executor.log_path.read_text(errors="replace")
    finally:
        cluster.stop_all()


def _committed_or_empty(stub: coordinator_pb2_grpc.CoordinatorServiceStub, name: str) -> list[int]:
    """The committed checkpoints, or none while the coordinator cannot read them."""
    try:
        return _committed(stub, name)
    except grpc.RpcError:
        return []
