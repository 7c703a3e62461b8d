"""An executor that stops answering (SIGSTOP) holds up only the checkpoints that call it:
the leader calls executors on a pool, so the other executor's pipeline keeps committing at
its interval. A real coordinator and two `--data-plane none` executor processes."""

from __future__ import annotations

import itertools
import os
import signal
import time
from collections.abc import Callable

from lockgate.common.grpc_client import open_channel
from lockgate.coordinator.herder.executors import DEFAULT_COMMIT_TIMEOUT_S
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

#: How long the executor stays stopped: longer than a stuck trigger (2 s) plus a stuck
#: abort (5 s) twice over, shorter than the session timeout (its tasks stay put).
STOPPED_S = 15.0
SESSION_TIMEOUT_MS = 60_000
#: A gap between two commits of the other pipeline that only waiting on the stopped
#: executor explains: below one commit call's deadline (a loop that called executors one at
#: a time waited a trigger's 2 s plus an abort's 5 s), far above a round trip under load.
MAX_GAP_S = DEFAULT_COMMIT_TIMEOUT_S - 1.0


def _executor_of(stub: coordinator_pb2_grpc.CoordinatorServiceStub, name: str) -> str | None:
    status = stub.GetPipelineStatus(coordinator_pb2.GetPipelineStatusRequest(name=name), timeout=5)
    running = [t for t in status.tasks if t.state == common_pb2.TASK_STATE_RUNNING]
    return running[0].executor_id if len(running) == 1 else None


def _commit_times(stub: coordinator_pb2_grpc.CoordinatorServiceStub, name: str) -> list[float]:
    return sorted(
        c.commit_time.ToMilliseconds() / 1000
        for c in checkpoints(stub, name).values()
        if c.state == common_pb2.CHECKPOINT_STATE_COMMITTED
    )


def test_a_stopped_executor_does_not_hold_up_the_other_executors_checkpoints(
    sqlite_cluster: CoordinatorCluster,
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
    control_executors: Callable[[str, list[str]], ChildProcess],
) -> None:
    (coordinator,) = sqlite_cluster.start(1, session_timeout_ms=SESSION_TIMEOUT_MS)
    sqlite_cluster.leader()
    executors = {e: control_executors(e, [coordinator.address]) for e in ("e1", "e2")}
    names = [unique_name("steady"), unique_name("stuck")]
    with open_channel(coordinator.address) as channel:
        stub = coordinator_pb2_grpc.CoordinatorServiceStub(channel)
        for name in names:
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
        # Balanced assignment: one single-task pipeline on each executor.
        owners = wait_for(
            "each pipeline's task RUNNING, one on each executor",
            lambda: (
                o
                if None not in (o := {n: _executor_of(stub, n) for n in names}).values()
                and len(set(o.values())) == 2
                else None
            ),
            timeout_s=60,
        )
        steady, stuck = names
        for name in names:
            wait_for(
                f"a checkpoint of {name} to commit",
                lambda n=name: _commit_times(stub, n),  # type: ignore[misc]
                timeout_s=30,
            )
        paused = executors[str(owners[stuck])]
        os.kill(paused.pid, signal.SIGSTOP)
        try:
            stopped_at = time.time()
            time.sleep(STOPPED_S)  # the window observed, not a synchronisation
            during = [t for t in _commit_times(stub, steady) if t > stopped_at]
            stuck_during = [t for t in _commit_times(stub, stuck) if t > stopped_at + 1]
        finally:
            os.kill(paused.pid, signal.SIGCONT)
        assert not stuck_during, "the stopped executor's pipeline committed while stopped"
        assert len(during) >= 6, f"only {len(during)} checkpoints of {steady} in {STOPPED_S} s"
        ends = [stopped_at, *during, stopped_at + STOPPED_S]
        gaps = [b - a for a, b in itertools.pairwise(ends)]
        assert max(gaps) < MAX_GAP_S, f"{steady} waited {max(gaps):.1f} s between commits"
        # Woken, the stopped executor's pipeline commits again.
        resumed_at = time.time()
        wait_for(
            f"{stuck} to commit again",
            lambda: [t for t in _commit_times(stub, stuck) if t > resumed_at],
            timeout_s=60,
        )
