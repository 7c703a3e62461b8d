"""An executor runtime (a :class:`Worker`) in-process, with test doubles for its peers.

A fake coordinator stub behind the real gRPC coordinator client answers registration and
heartbeats with an assignment the test controls; a data plane's batch blocks until the
test (or a cancellation) releases it. Nothing here opens a socket.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from opentelemetry import trace

from lockgate.common.metrics import Instruments
from lockgate.common.model.ids import Generation, LeaderEpoch
from lockgate.common.model.offsets import OffsetRange
from lockgate.executor.coordinator_client import GrpcCoordinatorClient
from lockgate.executor.dataplane.protocol import PrecommitOutput, PrecommitWork
from lockgate.executor.errors import SinkError
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
    """Each batch announces itself and then waits for the test to release it.

    ``cancel_running`` releases every batch, which then fails as a cancelled Spark job
    does, unless ``honour_cancel`` is False (a batch no cancellation reaches). ``timeline``
    records when batches end (shared with the :class:`FakeCoordinator`).
    """

    def __init__(self, timeline: list[str] | None = None) -> None:
        self.started: dict[int, threading.Event] = {}
        self.release: dict[int, threading.Event] = {}
        self.ran: list[int] = []
        self.honour_cancel = True
        self.records_written = 0
        """How many records each batch says it wrote."""
        self.read_to_limit = False
        """Whether each batch reads as many records of each partition as its work allows
        (else none)."""
        self.works: list[PrecommitWork] = []
        self.cancelled = threading.Event()
        self.timeline = timeline if timeline is not None else []
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
            self.works.append(work)
        started.set()
        try:
            assert release.wait(WAIT_S), "the test never released the batch"
            if self.cancelled.is_set() and self.honour_cancel:
                raise SinkError(f"checkpoint {work.checkpoint_id}: job cancelled")
        finally:
            self.timeline.append(f"batch {work.checkpoint_id} ended")
        read = work.max_records_per_partition if self.read_to_limit else 0
        return PrecommitOutput(
            ranges=tuple(OffsetRange("in", p, 0, read) for _, p in work.source_partitions),
            handles=(),
            records_written=self.records_written,
        )

    def cancel_running(self) -> None:
        self.timeline.append("cancel")
        self.cancelled.set()
        if self.honour_cancel:
            with self._lock:
                releases = list(self.release.values())
            for release in releases:
                release.set()

    def stop(self, *, timeout_s: float = 10.0) -> None:
        """Nothing to stop."""


class FakeCoordinator:
    """A coordinator stub: answers RegisterExecutor and Heartbeat with ``assignments``;
    records reports and deregistrations (on ``timeline``)."""

    def __init__(self, timeline: list[str] | None = None, *, tasks: int = 1) -> None:
        self.assignments: list[coordinator_pb2.TaskAssignment] = [
            assignment(generation=1, task_index=i) for i in range(tasks)
        ]
        self.precommits: list[int] = []
        self.backlog_left: list[bool] = []
        """Each report's `backlog_left`, in the order they came."""
        self.report_calls: list[list[int]] = []
        """The task indexes of each ReportPrecommits call's reports."""
        self.answer_state = common_pb2.CHECKPOINT_STATE_TRIGGERED
        """The checkpoint state each report is answered with."""
        self.before_answer: Callable[[int], object] = lambda checkpoint_id: None
        """Runs with a report's checkpoint id before it is answered."""
        self.timeline = timeline if timeline is not None else []

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
        self.backlog_left.append(bool(request.backlog_left))
        self.before_answer(int(request.checkpoint_id))
        return coordinator_pb2.ReportPrecommitResponse(checkpoint_state=self.answer_state)

    def ReportPrecommits(self, request: Any, timeout: float) -> Any:
        self.report_calls.append(sorted(r.task_id.task_index for r in request.reports))
        results = [self.ReportPrecommit(report, timeout) for report in request.reports]
        return coordinator_pb2.ReportPrecommitsResponse(
            results=[
                coordinator_pb2.ReportPrecommitResult(checkpoint_state=r.checkpoint_state)
                for r in results
            ]
        )

    def ReportCheckpointFailure(self, request: Any, timeout: float) -> Any:
        return coordinator_pb2.ReportCheckpointFailureResponse()

    def ReportTaskFailure(self, request: Any, timeout: float) -> Any:
        return coordinator_pb2.ReportTaskFailureResponse()

    def DeregisterExecutor(self, request: Any, timeout: float) -> Any:
        self.timeline.append("deregistered")
        return coordinator_pb2.DeregisterExecutorResponse()


def assignment(*, generation: int, task_index: int = 0) -> coordinator_pb2.TaskAssignment:
    """Task ``task_index`` (partition in-<task_index>) of pipeline ``p`` at ``generation``,
    RUNNING."""
    return coordinator_pb2.TaskAssignment(
        task_id=common_pb2.TaskId(pipeline_name=PIPELINE, task_index=task_index),
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
        source_partitions=[common_pb2.TopicPartition(topic="in", partition=task_index)],
        target_state=common_pb2.TARGET_STATE_RUNNING,
    )


def trigger(
    runtime: Worker,
    checkpoint_id: int,
    generation: int = 1,
    *,
    tasks: int = 1,
    timeout_ms: int = 60_000,
) -> None:
    """Trigger checkpoint ``checkpoint_id`` on tasks 0..tasks-1; each must accept it."""
    results = runtime.trigger_checkpoint(
        pipeline_name=PIPELINE,
        checkpoint_id=checkpoint_id,
        config_version=0,
        leader_epoch=LEADER,
        tasks=[
            TriggerTask(
                task=TaskRef(PIPELINE, i),
                task_generation=Generation(generation),
                start_offsets={("in", i): 0},
                transactional_id_prefix=f"lockgate-{PIPELINE}-{i}-{checkpoint_id % 3}",
            )
            for i in range(tasks)
        ],
        timeout_ms=timeout_ms,
    )
    assert [r.reason for r in results] == [""] * tasks


def start_batch(runtime: Worker, data_plane: BlockingDataPlane, n: int) -> threading.Event:
    """Trigger checkpoint ``n``, wait until its batch runs; return the event that ends it."""
    trigger(runtime, n)
    started, release = data_plane.events(n)
    assert started.wait(WAIT_S), f"the batch of checkpoint {n} did not start"
    return release


def start_worker(
    tracer: trace.Tracer | None = None,
    *,
    tasks: int = 1,
    instruments: Instruments | None = None,
    data_plane: BlockingDataPlane | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[Worker, FakeCoordinator, BlockingDataPlane]:
    """A registered runtime whose tasks 0..tasks-1 of pipeline ``p`` are RUNNING."""
    data_plane = data_plane or BlockingDataPlane()
    timeline = data_plane.timeline
    coordinator = FakeCoordinator(timeline, tasks=tasks)
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
        tracer=tracer,
        instruments=instruments,
        clock=clock,
    )
    runtime.start()
    wait_for(
        "task running",
        lambda: [v.phase for v in runtime.statuses()] == [TaskPhase.RUNNING] * tasks,
        timeout_s=WAIT_S,
    )
    return runtime, coordinator, data_plane


def stop_worker(runtime: Worker, data_plane: BlockingDataPlane) -> None:
    """Release every batch and stop the runtime."""
    for release in data_plane.release.values():
        release.set()
    runtime.stop(deregister=False)
