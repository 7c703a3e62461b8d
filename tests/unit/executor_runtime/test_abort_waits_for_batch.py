"""AbortCheckpoint answers only once no batch of the checkpoint runs on the executor.

A batch of an aborted checkpoint that is still running (its task moved to another
executor, or the leader gave up on it) opens producers on its slot's transactional ids;
``init_transactions`` on one of them aborts whatever the id has open. If the abort were
acknowledged at once, the leader would reuse the slot for the next checkpoint and the late
``init_transactions`` would abort that checkpoint's pre-committed transaction: measured in
the end-to-end test as a COMPLETE checkpoint whose commit failed with PRODUCER_FENCED.

The runtime (a :class:`Worker`) runs in-process against a fake coordinator stub behind the
real gRPC coordinator client (it answers registration and heartbeats with an assignment the
test controls) and a data plane whose batch blocks until the test releases it; nothing here
opens a socket.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from lockgate.common.errors import Unavailable
from lockgate.common.model.ids import Generation, LeaderEpoch
from lockgate.common.model.offsets import OffsetRange
from lockgate.executor.coordinator_client import GrpcCoordinatorClient
from lockgate.executor.dataplane.protocol import PrecommitOutput, PrecommitWork
from lockgate.executor.runtime.tasks import TaskPhase
from lockgate.executor.runtime.values import ExecutorSettings, LeaderStamp, TaskRef, TriggerTask
from lockgate.executor.worker import Worker
from lockgate.v1 import common_pb2, coordinator_pb2
from tests.support.waits import wait_for

PIPELINE = "p"
TASK = TaskRef(PIPELINE, 0)
EPOCH = common_pb2.LeaderEpoch(epoch=1, leader_id="c1")
LEADER = LeaderStamp(LeaderEpoch(1), "c1")
WAIT_S = 10.0


class BlockingDataPlane:
    """Each batch announces itself and then waits for the test to release it."""

    def __init__(self) -> None:
        self.started: dict[int, threading.Event] = {}
        self.release: dict[int, threading.Event] = {}
        self.ran: list[int] = []
        self._lock = threading.Lock()

    def events(self, checkpoint_id: int) -> tuple[threading.Event, threading.Event]:
        with self._lock:
            return (
                self.started.setdefault(checkpoint_id, threading.Event()),
                self.release.setdefault(checkpoint_id, threading.Event()),
            )

    def start(self) -> None:
        """Nothing to start."""

    def run_precommit(self, work: PrecommitWork) -> PrecommitOutput:
        started, release = self.events(work.checkpoint_id)
        with self._lock:
            self.ran.append(work.checkpoint_id)
        started.set()
        assert release.wait(WAIT_S), "the test never released the batch"
        return PrecommitOutput(
            ranges=tuple(OffsetRange("in", p, 0, 0) for _, p in work.source_partitions),
            handles=(),
        )

    def stop(self) -> None:
        """Nothing to stop."""


class FakeCoordinator:
    """A coordinator stub: answers RegisterExecutor and Heartbeat with ``assignments``;
    records reports."""

    def __init__(self) -> None:
        self.assignments: list[coordinator_pb2.TaskAssignment] = [assignment(generation=1)]
        self.precommits: list[int] = []

    def RegisterExecutor(self, request: Any, timeout: float) -> Any:
        return coordinator_pb2.RegisterExecutorResponse(
            executor_generation=1,
            session_id="s",
            leader_epoch=EPOCH,
            heartbeat_interval_ms=20,
            session_timeout_ms=10_000,
            assignments=self.assignments,
        )

    def Heartbeat(self, request: Any, timeout: float) -> Any:
        return coordinator_pb2.HeartbeatResponse(
            leader_epoch=EPOCH,
            heartbeat_interval_ms=20,
            session_timeout_ms=10_000,
            assignments=self.assignments,
        )

    def ReportPrecommit(self, request: Any, timeout: float) -> Any:
        self.precommits.append(int(request.checkpoint_id))
        return coordinator_pb2.ReportPrecommitResponse(
            checkpoint_state=common_pb2.CHECKPOINT_STATE_TRIGGERED
        )

    def ReportCheckpointFailure(self, request: Any, timeout: float) -> Any:
        return coordinator_pb2.ReportCheckpointFailureResponse()

    def ReportTaskFailure(self, request: Any, timeout: float) -> Any:
        return coordinator_pb2.ReportTaskFailureResponse()

    def DeregisterExecutor(self, request: Any, timeout: float) -> Any:
        return coordinator_pb2.DeregisterExecutorResponse()


def assignment(*, generation: int) -> coordinator_pb2.TaskAssignment:
    return coordinator_pb2.TaskAssignment(
        task_id=common_pb2.TaskId(pipeline_name=PIPELINE, task_index=0),
        task_generation=generation,
        config_version=1,
        pipeline_spec=common_pb2.PipelineSpec(
            name=PIPELINE,
            source=common_pb2.SourceSpec(
                kafka=common_pb2.KafkaSourceSpec(bootstrap_servers="127.0.0.1:1", topics=["in"])
            ),
            sink=common_pb2.SinkSpec(
                kafka=common_pb2.KafkaSinkSpec(bootstrap_servers="127.0.0.1:1", topic="out")
            ),
        ),
        source_partitions=[common_pb2.TopicPartition(topic="in", partition=0)],
        target_state=common_pb2.TARGET_STATE_RUNNING,
    )


@pytest.fixture
def cluster() -> Iterator[tuple[Worker, FakeCoordinator, BlockingDataPlane]]:
    coordinator = FakeCoordinator()
    data_plane = BlockingDataPlane()
    runtime = Worker(
        ExecutorSettings(
            executor_id="e1",
            advertised_address="127.0.0.1:1",
            coordinator_addresses=("127.0.0.1:2",),
            spark_master="local[1]",
            heartbeat_interval_ms=20,
        ),
        coordinator=GrpcCoordinatorClient(coordinator),  # type: ignore[arg-type]
        data_plane=data_plane,
    )
    runtime.start()
    wait_for(
        "task running",
        lambda: [v.phase for v in runtime.statuses()] == [TaskPhase.RUNNING],
        timeout_s=WAIT_S,
    )
    try:
        yield runtime, coordinator, data_plane
    finally:
        for release in data_plane.release.values():
            release.set()
        runtime.stop(deregister=False)


def trigger(runtime: Worker, checkpoint_id: int, generation: int = 1) -> None:
    results = runtime.trigger_checkpoint(
        pipeline_name=PIPELINE,
        checkpoint_id=checkpoint_id,
        config_version=0,
        leader_epoch=LEADER,
        tasks=[
            TriggerTask(
                task=TASK,
                task_generation=Generation(generation),
                start_offsets={("in", 0): 0},
                transactional_id_prefix=f"lockgate-{PIPELINE}-0-{checkpoint_id % 3}",
            )
        ],
        timeout_ms=60_000,
    )
    assert [r.reason for r in results] == [""]


def start_batch(runtime: Worker, data_plane: BlockingDataPlane, n: int) -> threading.Event:
    """Trigger checkpoint ``n``, wait until its batch runs; return the event that ends it."""
    trigger(runtime, n)
    started, release = data_plane.events(n)
    assert started.wait(WAIT_S), f"the batch of checkpoint {n} did not start"
    return release


def abort_in_background(runtime: Worker, checkpoint_id: int) -> threading.Event:
    answered = threading.Event()

    def run() -> None:
        runtime.abort_checkpoint(
            pipeline_name=PIPELINE,
            checkpoint_id=checkpoint_id,
            handles=[],
            reason="test",
            timeout_s=WAIT_S,
        )
        answered.set()

    threading.Thread(target=run, daemon=True).start()
    return answered


def test_abort_of_a_running_batch_answers_only_after_the_batch_ended(
    cluster: tuple[Worker, FakeCoordinator, BlockingDataPlane],
) -> None:
    runtime, coordinator, data_plane = cluster
    release = start_batch(runtime, data_plane, 1)
    with pytest.raises(Unavailable, match="still runs"):
        runtime.abort_checkpoint(
            pipeline_name=PIPELINE, checkpoint_id=1, handles=[], reason="t", timeout_s=0.2
        )
    answered = abort_in_background(runtime, 1)
    assert not answered.wait(0.5), "the abort was answered while the batch still ran"
    release.set()
    assert answered.wait(WAIT_S), "the abort was not answered after the batch ended"
    # The aborted batch never reports its pre-commit.
    assert coordinator.precommits == []


def test_abort_waits_for_the_batch_of_a_task_that_moved_away(
    cluster: tuple[Worker, FakeCoordinator, BlockingDataPlane],
) -> None:
    runtime, coordinator, data_plane = cluster
    release = start_batch(runtime, data_plane, 1)
    coordinator.assignments = []  # the task moved to another executor
    wait_for("the task to stop", lambda: runtime.statuses() == [], timeout_s=WAIT_S)

    answered = abort_in_background(runtime, 1)
    assert not answered.wait(0.5), "the abort was answered while the moved task's batch ran"
    release.set()
    assert answered.wait(WAIT_S)


def test_abort_of_a_queued_checkpoint_answers_at_once_and_it_never_runs(
    cluster: tuple[Worker, FakeCoordinator, BlockingDataPlane],
) -> None:
    runtime, coordinator, data_plane = cluster
    release = start_batch(runtime, data_plane, 1)
    trigger(runtime, 2)  # queued behind 1 on the task's queue

    runtime.abort_checkpoint(
        pipeline_name=PIPELINE, checkpoint_id=2, handles=[], reason="t", timeout_s=0.2
    )
    release.set()
    wait_for("checkpoint 1's report", lambda: coordinator.precommits == [1], timeout_s=WAIT_S)
    start_batch(runtime, data_plane, 3).set()
    wait_for("checkpoint 3's report", lambda: coordinator.precommits == [1, 3], timeout_s=WAIT_S)
    assert data_plane.ran == [1, 3], "the aborted checkpoint 2 ran"
