"""The composition root of one executor process's runtime (issue #5, reshaped in #15).

As in Kafka Connect, the coordinator's leader decides (the Herder) and the executor runs
(the Worker). :class:`Worker` wires the runtime's rooms together and is what the gRPC
servicer calls:

* :mod:`.runtime.membership` -- the membership thread: RegisterExecutor, then Heartbeat
  every ``heartbeat_interval_ms``; it applies assignments and notices a lost session;
* :mod:`.runtime.tasks` -- the task state machine and the board of tasks, one lock;
* :mod:`.runtime.restore` -- a (re)assigned task's restore, on its own queue;
* :mod:`.runtime.checkpoint_runner` -- trigger, pre-commit on the data plane, report;
  commit and abort of decided checkpoints (the races are written down there);
* :mod:`.runtime.reporter` -- reports to the leader, retried until their deadline;
* :mod:`.committer` -- the only commit/abort path of Kafka transactions;
* :mod:`.dataplane` -- the injected data plane (Spark, or control-only for tests).

Threads: the membership thread; one single-thread queue per task (restore, then its
pre-commits in trigger order); the gRPC server's threads calling
:meth:`Worker.trigger_checkpoint`, :meth:`Worker.commit_handles`,
:meth:`Worker.abort_checkpoint` and :meth:`Worker.statuses`.

Everything here takes plain values; ``*_pb2`` stays in the servicer and the coordinator
client.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from opentelemetry import context as otel_context
from opentelemetry import trace

from lockgate.common.failpoints import Failpoints
from lockgate.common.kafka_resume_clients import RESUME_CLIENTS
from lockgate.common.metrics import Instruments
from lockgate.common.model.handles import TransactionHandle
from lockgate.executor.committer import Committer
from lockgate.executor.dataplane.protocol import DataPlane
from lockgate.executor.fencing import LeaderEpochFence
from lockgate.executor.runtime.checkpoint_runner import CheckpointRunner
from lockgate.executor.runtime.coordinator import CoordinatorClient
from lockgate.executor.runtime.membership import Membership
from lockgate.executor.runtime.reporter import Reporter
from lockgate.executor.runtime.restore import Restorer
from lockgate.executor.runtime.tasks import TaskBoard, TaskView
from lockgate.executor.runtime.values import (
    Assignment,
    ExecutorSettings,
    LeaderStamp,
    Registration,
    TaskRef,
    TriggerResult,
    TriggerTask,
)

_LOG = logging.getLogger(__name__)


class Worker:
    """Registration, heartbeats, tasks and checkpoints of one executor process."""

    def __init__(
        self,
        settings: ExecutorSettings,
        *,
        coordinator: CoordinatorClient,
        data_plane: DataPlane,
        fence: LeaderEpochFence | None = None,
        failpoints: Failpoints | None = None,
        clock: Callable[[], float] = time.monotonic,
        instruments: Instruments | None = None,
        tracer: trace.Tracer | None = None,
    ) -> None:
        instruments = instruments or Instruments.disabled()
        self.fence = fence or LeaderEpochFence()
        failpoints = failpoints or Failpoints()
        self._stopping = threading.Event()
        # A task's state change is heartbeated at once (Membership.nudge).
        self._board = TaskBoard(on_change=lambda: self._membership.nudge())
        self._data_plane = data_plane
        committer = Committer(failpoints=failpoints, timeout_s=settings.handle_timeout_s)
        reporter = Reporter(
            coordinator,
            rpc_timeout_s=settings.rpc_timeout_s,
            stopping=self._stopping,
            clock=clock,
            instruments=instruments,
        )
        self._membership = Membership(
            settings,
            client=coordinator,
            fence=self.fence,
            stopping=self._stopping,
            statuses=self._board.statuses,
            on_assignment=self._apply_assignment,
            on_session_lost=lambda: self._stop_every_task("session lost"),
            clock=clock,
        )
        self._restorer = Restorer(
            settings,
            board=self._board,
            committer=committer,
            reporter=reporter,
            registration=lambda: self._membership.registration,
            stopping=self._stopping,
        )
        self._checkpoints = CheckpointRunner(
            settings,
            board=self._board,
            data_plane=data_plane,
            committer=committer,
            reporter=reporter,
            registration=lambda: self._membership.registration,
            failpoints=failpoints,
            clock=clock,
            instruments=instruments,
            tracer=tracer,
        )

    @property
    def settings(self) -> ExecutorSettings:
        """How this executor runs."""
        return self._membership.settings

    @settings.setter
    def settings(self, settings: ExecutorSettings) -> None:
        # Only the advertised address may change (known once the server is bound), and
        # only the registration sends it.
        self._membership.settings = settings

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Start the membership thread (register, then heartbeat)."""
        self._membership.start()

    def stop(self, *, deregister: bool = True, batch_timeout_s: float = 30.0) -> list[TaskRef]:
        """Stop heartbeating and every task, cancel the running batches on the data plane
        and wait up to ``batch_timeout_s`` for them to end, then leave the cluster cleanly
        if registered. Returns the tasks whose batch still runs (empty: none).

        The batches end before the deregistration: while this executor's session lives
        the leader does not hand its task slots (and their transactional ids) to another
        executor, so a batch still opening producers here cannot fence the next one.
        """
        self._stopping.set()
        registration = self._membership.stop()
        self._stop_every_task("executor shutting down")
        self._data_plane.cancel_running()
        still_running = self._board.wait_idle(timeout_s=batch_timeout_s)
        if still_running:
            _LOG.error(
                "the batch of %s still runs after it was cancelled",
                ", ".join(str(ref) for ref in still_running),
            )
        if deregister and registration is not None:
            self._membership.deregister(registration)
        RESUME_CLIENTS.close_all()  # the commit path's kept-open Kafka clients
        return still_running

    @property
    def registration(self) -> Registration | None:
        """The current registration, None until registered (or after the session was lost)."""
        return self._membership.registration

    def statuses(self) -> list[TaskView]:
        """Observed state of every task, ordered by pipeline name and task index."""
        return self._board.statuses()

    def assignment_changed(self) -> None:
        """The leader says this executor's assignment changed: heartbeat now to read it."""
        self._membership.nudge()

    # -- assignment ----------------------------------------------------------------------

    def _apply_assignment(self, assignments: Sequence[Assignment]) -> None:
        to_stop, to_start = self._board.apply(assignments)
        for task in to_stop:
            self._board.stop(task, why="no longer assigned at this generation")
        for task in to_start:
            _LOG.info("starting task %s generation %d", task.ref, task.generation)
            task.queue.submit(self._restorer.restore, task)

    def _stop_every_task(self, why: str) -> None:
        for task in self._board.take_all():
            self._board.stop(task, why=why)

    # -- checkpoints (what the servicer calls) -------------------------------------------

    def trigger_checkpoint(
        self,
        *,
        pipeline_name: str,
        checkpoint_id: int,
        config_version: int,
        leader_epoch: LeaderStamp,
        tasks: Sequence[TriggerTask],
        timeout_ms: int,
        trace_context: otel_context.Context | None = None,
    ) -> list[TriggerResult]:
        """Start the pre-commit of checkpoint N on each task that may take it (step 1);
        its batches continue `trace_context` (None: the current one)."""
        return self._checkpoints.trigger(
            checkpoint_id=checkpoint_id,
            config_version=config_version,
            leader=leader_epoch,
            tasks=tasks,
            timeout_ms=timeout_ms,
            trace_context=trace_context,
        )

    def commit_handles(
        self,
        *,
        pipeline_name: str,
        checkpoint_id: int,
        handles: Sequence[TransactionHandle],
        sink_properties: Mapping[str, str],
    ) -> int:
        """Commit a COMPLETE checkpoint's handles; idempotent. Returns the count committed."""
        return self._checkpoints.commit(
            pipeline_name=pipeline_name,
            checkpoint_id=checkpoint_id,
            handles=handles,
            sink_properties=sink_properties,
        )

    def abort_checkpoint(
        self,
        *,
        pipeline_name: str,
        checkpoint_id: int,
        handles: Sequence[TransactionHandle],
        reason: str,
        sink_properties: Mapping[str, str],
        timeout_s: float = 30.0,
    ) -> int:
        """Cancel and wait for this executor's batch of N, then abort the handles; see
        :meth:`CheckpointRunner.abort`."""
        return self._checkpoints.abort(
            pipeline_name=pipeline_name,
            checkpoint_id=checkpoint_id,
            handles=handles,
            reason=reason,
            timeout_s=timeout_s,
            sink_properties=sink_properties,
        )


__all__ = ["Worker"]
