"""Checkpoints on this executor: trigger -> pre-commit on the data plane -> report,
and the commit and abort of checkpoints the leader decided (DESIGN.md steps 1-4).

A triggered pre-commit runs on its task's single-thread queue, so a task's checkpoints
run in trigger order (N+1's input starts where N's ended).

A pre-commit's handles are aborted by this executor only when no report of them can have
been recorded by a leader (the task was stopped or the checkpoint aborted before any
report was sent, or the very first report was refused). Once a report may have arrived,
the handles belong to the leader's decision: aborting them could destroy a COMPLETE
checkpoint. The leader times out and aborts whatever it never completed.

An aborted checkpoint's batch may still be running here (its task moved to another
executor, or the leader gave up on it). That batch opens producers on its task slot's
transactional ids, and ``init_transactions`` on one of them aborts whatever transaction the
id has open -- once the leader reuses the slot, a later checkpoint's pre-committed one. So
``AbortCheckpoint`` answers only when no batch of that checkpoint runs on this executor any
more (``UNAVAILABLE`` while one does, and the leader retries); the leader reuses a slot only
after every abort of its last checkpoint was answered. A batch outliving its executor's
session (paused, cut off) is not waited for: the leader sends the abort to the executor
that ran the task only while that one is alive to it. That batch may still open producers
later, but only on its own task generation's ids: the task's next owner writes under a
newer generation (coordinator ``domain/transactional_ids.py``), so the late producer can
only fence itself and abort its own, already aborted, batch.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from lockgate.common.errors import LockgateError, Unavailable
from lockgate.common.failpoints import Failpoint, Failpoints
from lockgate.common.metrics import Instruments
from lockgate.common.model.handles import TransactionHandle
from lockgate.common.model.offsets import OffsetRange
from lockgate.common.model.pipeline_spec import PipelineSpec
from lockgate.common.telemetry import records_spans
from lockgate.executor.committer import Committer
from lockgate.executor.dataplane.protocol import DataPlane, PrecommitWork
from lockgate.executor.fencing import TriggerVerdict, decide_trigger
from lockgate.executor.runtime.batch_counts import BatchCounts
from lockgate.executor.runtime.report_batch import Coming
from lockgate.executor.runtime.reporter import Reporter, ReportOutcome
from lockgate.executor.runtime.tasks import Task, TaskBoard, TaskPhase, task_error, task_fails_on
from lockgate.executor.runtime.values import (
    CheckpointFailureReport,
    ExecutorSettings,
    LeaderStamp,
    PrecommitReport,
    Registration,
    ReportStamp,
    TriggerResult,
    TriggerTask,
)

_LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Trigger:
    """One accepted trigger of checkpoint N on one task, as its queue runs it."""

    work: PrecommitWork
    leader: LeaderStamp
    received: float
    deadline: float
    #: The TriggerCheckpoint call's trace context (W3C, from the leader): the batch runs
    #: after the call returned, on the task's thread, and re-attaches it.
    trace_context: otel_context.Context
    #: Its report, announced when the trigger was accepted: reports of this executor's
    #: other tasks ready first wait for it, briefly, to go in one call (`report_batch.py`).
    coming: Coming


class CheckpointRunner:
    """Triggers, runs and reports pre-commits; commits and aborts decided checkpoints."""

    def __init__(
        self,
        settings: ExecutorSettings,
        *,
        board: TaskBoard,
        data_plane: DataPlane,
        committer: Committer,
        reporter: Reporter,
        registration: Callable[[], Registration | None],
        failpoints: Failpoints,
        clock: Callable[[], float] = time.monotonic,
        instruments: Instruments | None = None,
        wall_clock: Callable[[], float] = time.time,
        tracer: trace.Tracer | None = None,
    ) -> None:
        self._settings = settings
        self._progress = BatchCounts(instruments or Instruments.disabled(), wall_clock=wall_clock)
        self._tracer = tracer or trace.get_tracer("lockgate.executor")
        self._board = board
        self._data_plane = data_plane
        self._committer = committer
        self._reporter = reporter
        self._registration = registration
        self._failpoints = failpoints
        self._clock = clock

    # -- trigger (step 1) ----------------------------------------------------------------

    def trigger(
        self,
        *,
        checkpoint_id: int,
        config_version: int,
        leader: LeaderStamp,
        tasks: Sequence[TriggerTask],
        timeout_ms: int,
        trace_context: otel_context.Context | None = None,
    ) -> list[TriggerResult]:
        """Start the pre-commit of checkpoint N on each task that may take it; its batches
        continue `trace_context` (None: the current one, the TriggerCheckpoint call's)."""
        received = self._clock()
        deadline = received + (timeout_ms or 60_000) / 1000
        trace_context = trace_context or otel_context.get_current()
        results: list[TriggerResult] = []
        to_run: list[tuple[Task, PrecommitWork]] = []
        with self._board.lock:
            for requested in tasks:
                task = self._board.task_locked(requested.task)
                result = self._admit_locked(task, requested, checkpoint_id, config_version)
                results.append(result)
                if result.verdict is TriggerVerdict.ACCEPTED and task is not None:
                    to_run.append((task, _work(task, requested, checkpoint_id)))
        # Every report announced before any pre-commit starts (the first may end at once).
        announced = [
            (task, work, self._reporter.announce_precommit(task.ref)) for task, work in to_run
        ]
        for task, work, coming in announced:
            try:
                queued = task.queue.submit(
                    self._run_precommit,
                    task,
                    _Trigger(work, leader, received, deadline, trace_context, coming),
                )
                # Run or dropped with a stopped task's queue: no report is coming any more
                # (a no-op once it was sent).
                queued.add_done_callback(
                    lambda _, c=coming: self._reporter.withdraw_precommit(c)  # type: ignore[misc]
                )
            except RuntimeError:
                self._reporter.withdraw_precommit(coming)
                # The task was stopped between the decision and the submit; the leader
                # times the checkpoint out.
                _LOG.info(
                    "task %s stopped before checkpoint %d could start", task.ref, work.checkpoint_id
                )
        return results

    def _admit_locked(
        self, task: Task | None, requested: TriggerTask, checkpoint_id: int, config_version: int
    ) -> TriggerResult:
        verdict = decide_trigger(
            running_generation=task.generation if task else None,
            presented_generation=requested.task_generation,
            ready=task is not None and task.phase is TaskPhase.RUNNING,
            config_version_matches=(
                task is not None
                and (config_version == 0 or config_version == task.assignment.config_version)
            ),
            already_triggered=task is not None and checkpoint_id in task.triggered,
        )
        if verdict is TriggerVerdict.ACCEPTED and task is not None:
            task.triggered.add(checkpoint_id)
            task.in_flight.add(checkpoint_id)
        return TriggerResult(
            task=requested.task,
            verdict=verdict,
            current_generation=task.generation if task else 0,
            reason=self._refusal(verdict, task, requested, checkpoint_id, config_version),
        )

    def _refusal(
        self,
        verdict: TriggerVerdict,
        task: Task | None,
        requested: TriggerTask,
        checkpoint_id: int,
        config_version: int,
    ) -> str:
        if task is None:
            return f"executor {self._settings.executor_id} does not run {requested.task}"
        if verdict is TriggerVerdict.STALE_GENERATION:
            _LOG.warning(
                "refused task_generation=%d current=%d subject=%s rpc=TriggerCheckpoint",
                requested.task_generation,
                task.generation,
                requested.task,
            )
            return (
                f"task {requested.task} runs at generation {task.generation}, the"
                f" trigger is for generation {requested.task_generation}"
            )
        if verdict is TriggerVerdict.NOT_READY:
            if task.phase is not TaskPhase.RUNNING:
                return f"task {requested.task} is {task.phase.value}"
            return (
                f"task {requested.task} runs config version {task.assignment.config_version},"
                f" the trigger is for {config_version}"
            )
        if verdict is TriggerVerdict.DUPLICATE:
            return f"checkpoint {checkpoint_id} was already triggered on this task"
        return ""

    # -- pre-commit and report (step 2) --------------------------------------------------

    def _run_precommit(self, task: Task, trigger: _Trigger) -> None:
        try:
            with self._precommit_span(task, trigger):
                self._precommit_and_report(task, trigger)
        except Exception:
            _LOG.exception(
                "pre-commit of %s checkpoint %d crashed", task.ref, trigger.work.checkpoint_id
            )
        finally:
            self._board.end_batch(task, trigger.work.checkpoint_id)

    def _precommit_span(
        self, task: Task, trigger: _Trigger
    ) -> AbstractContextManager[trace.Span | None]:
        """The task's pre-commit of N as `lockgate.executor.precommit`, in N's trace; none
        with traces off (made and ended for nothing, once per task and checkpoint)."""
        if not records_spans(self._tracer):
            return nullcontext()
        return self._tracer.start_as_current_span(
            "lockgate.executor.precommit",
            context=trigger.trace_context,
            attributes={
                "lockgate.pipeline": task.ref.pipeline_name,
                "lockgate.task.id": str(task.ref),
                "lockgate.checkpoint.id": trigger.work.checkpoint_id,
                "lockgate.executor.id": self._settings.executor_id,
            },
        )

    def _precommit_and_report(self, task: Task, trigger: _Trigger) -> None:
        work = trigger.work
        what = f"task {task.ref} checkpoint {work.checkpoint_id}"
        if not self._board.begin_batch(task, work.checkpoint_id):
            _LOG.info("%s skipped: stopped or aborted before it started", what)
            return
        span = trace.get_current_span()
        # Before any producer opens: a late abort of an earlier checkpoint on this slot
        # must not re-initialise its ids from now on.
        self._committer.claim_slot(work.transactional_id_prefix, work.checkpoint_id)
        started = self._clock()
        try:
            output = self._data_plane.run_precommit(work)
        except Exception as exc:
            self._size_next(task, trigger, started, None)
            span.set_status(Status(StatusCode.ERROR, str(exc)))
            self._report_failure(task, trigger, exc)
            return
        backlog_left = self._size_next(task, trigger, started, output.ranges)
        span.set_attribute("lockgate.spark.job_ids", list(output.spark_job_ids))
        span.set_attribute("lockgate.records.read", output.records_read)
        span.set_attribute("lockgate.records.written", output.records_written)
        span.set_attribute("lockgate.records.limit", work.max_records_per_partition)
        span.set_attribute("lockgate.backlog_left", backlog_left)
        self._failpoints.reach(Failpoint.AFTER_PRECOMMIT_BEFORE_REPORT, detail=what)
        if not self._board.is_current(task, work.checkpoint_id):
            # Never reported, so never COMPLETE: safe to abort here.
            _LOG.info("%s finished after its task stopped or N was aborted: aborting", what)
            self._abort_quietly(output.handles, what=what, spec=work.spec)
            return
        registration = self._registration()
        if registration is None:
            self._abort_quietly(output.handles, what=what, spec=work.spec)
            return
        report = PrecommitReport(
            stamp=self._stamp(task, trigger, registration),
            output=output,
            precommit_duration_ms=int((self._clock() - trigger.received) * 1000),
            backlog_left=backlog_left,
        )
        # Held before the report goes: N's commit can arrive before the answer does.
        self._progress.held(task.ref, work.checkpoint_id, output)
        outcome, answer = self._reporter.report_precommit(
            report,
            deadline=trigger.deadline,
            what=f"ReportPrecommit of {what}",
            coming=trigger.coming,
        )
        if outcome is ReportOutcome.REFUSED or (answer is not None and answer.aborted):
            self._progress.dropped(task.ref, work.checkpoint_id)
        if outcome is ReportOutcome.ACCEPTED and answer is not None:
            self._board.precommitted(task, work.checkpoint_id)
            if not answer.aborted:
                self._progress.precommitted(task.ref, report.precommit_duration_ms / 1000)
            _LOG.debug(  # per task and checkpoint: the commit's line is the INFO one
                "%s pre-committed in %d ms: %d records read (at most %d a partition, records"
                " left: %s), %d written, %d handles; leader says %s",
                what,
                report.precommit_duration_ms,
                output.records_read,
                work.max_records_per_partition,
                backlog_left,
                output.records_written,
                len(output.handles),
                answer.checkpoint_state,
            )
            if answer.aborted:
                # The leader decided: N is aborted and will never be COMPLETE.
                self._abort_quietly(output.handles, what=what, spec=work.spec)
        elif outcome is ReportOutcome.REFUSED:
            self._abort_quietly(output.handles, what=what, spec=work.spec)

    def _size_next(
        self,
        task: Task,
        trigger: _Trigger,
        started: float,
        ranges: Sequence[OffsetRange] | None,
    ) -> bool:
        """Size the task's next checkpoint from this pre-commit, begun at `started`, which
        read `ranges` (None: it failed); returns whether it may have left records
        (`checkpoint_size.py`)."""
        limit = trigger.work.max_records_per_partition
        seconds = self._clock() - started
        timeout_s = trigger.deadline - trigger.received
        with self._board.lock:
            if ranges is None:
                task.size.failed(limit=limit, seconds=seconds, timeout_s=timeout_s)
                return False
            return task.size.observe(
                limit=limit, ranges=ranges, seconds=seconds, timeout_s=timeout_s
            )

    def _stamp(self, task: Task, trigger: _Trigger, registration: Registration) -> ReportStamp:
        return ReportStamp(
            request_id=str(uuid.uuid4()),
            leader=trigger.leader,
            checkpoint_id=trigger.work.checkpoint_id,
            task=task.ref,
            task_generation=task.generation,
            executor_id=self._settings.executor_id,
            executor_generation=registration.executor_generation,
        )

    def _report_failure(self, task: Task, trigger: _Trigger, exc: Exception) -> None:
        checkpoint_id = trigger.work.checkpoint_id
        fails_task = task_fails_on(exc)
        if isinstance(exc, LockgateError):
            _LOG.warning(
                "pre-commit of %s checkpoint %d failed: %s", task.ref, checkpoint_id, exc.message
            )
        else:
            _LOG.error(
                "pre-commit of %s checkpoint %d failed unexpectedly",
                task.ref,
                checkpoint_id,
                exc_info=exc,
            )
        registration = self._registration()
        error = task_error(
            exc,
            checkpoint_id=checkpoint_id,
            executor_id=self._settings.executor_id,
            executor_generation=registration.executor_generation if registration else 0,
            task_generation=task.generation,
        )
        if fails_task:
            self._board.fail(task, error)
        if registration is None or not self._board.is_current(task):
            return
        self._reporter.report_checkpoint_failure(
            CheckpointFailureReport(
                stamp=self._stamp(task, trigger, registration),
                error=error,
                task_failed=fails_task,
            ),
            deadline=trigger.deadline,
            what=f"ReportCheckpointFailure of {task.ref} checkpoint {checkpoint_id}",
        )

    def _abort_quietly(
        self, handles: Sequence[TransactionHandle], *, what: str, spec: PipelineSpec
    ) -> None:
        if not handles:
            return
        try:
            self._committer.abort(handles, what=what, sink_properties=dict(spec.sink.properties))
        except LockgateError as exc:
            # The leader aborts them too (timeout or recovery); nothing more to do here.
            _LOG.warning("%s: abort of its own handles failed: %s", what, exc.message)

    # -- commit and abort of decided checkpoints (steps 3-5) -----------------------------

    def commit(
        self,
        *,
        pipeline_name: str,
        checkpoint_id: int,
        handles: Sequence[TransactionHandle],
        sink_properties: Mapping[str, str],
    ) -> int:
        """Commit a COMPLETE checkpoint's handles on the sink cluster (its Kafka properties
        as written); idempotent. Returns the count committed."""
        what = f"commit of {pipeline_name} checkpoint {checkpoint_id}"
        with self._handles_span("lockgate.executor.commit", pipeline_name, checkpoint_id, handles):
            count = self._committer.commit(handles, what=what, sink_properties=sink_properties)
        self._progress.committed(pipeline_name, checkpoint_id)
        self._failpoints.reach(Failpoint.AFTER_COMMIT_BEFORE_ACK, detail=what)
        _LOG.info("%s: %d handles committed", what, count)
        return count

    def abort(
        self,
        *,
        pipeline_name: str,
        checkpoint_id: int,
        handles: Sequence[TransactionHandle],
        reason: str,
        timeout_s: float,
        sink_properties: Mapping[str, str],
    ) -> int:
        """Cancel this executor's pre-commit of N, wait until no batch of N runs here any
        more, then abort the given handles.

        ``Unavailable`` if a batch of N still runs after ``timeout_s``: the caller retries,
        and must not reuse N's transactional ids before this call succeeded (see the module
        docstring).
        """
        what = f"abort of {pipeline_name} checkpoint {checkpoint_id}"
        still_running = self._board.cancel_and_wait(
            pipeline_name=pipeline_name, checkpoint_id=checkpoint_id, timeout_s=timeout_s
        )
        if still_running:
            running = ", ".join(str(ref) for ref in still_running)
            raise Unavailable(
                f"{what}: the batch of {running} still runs on executor"
                f" {self._settings.executor_id} and may still open transactions on its"
                " transactional ids; retry once it ended",
                retry_after_seconds=1.0,
            )
        with self._handles_span("lockgate.executor.abort", pipeline_name, checkpoint_id, handles):
            count = self._committer.abort(
                handles, what=what, sink_properties=sink_properties, checkpoint_id=checkpoint_id
            )
        self._progress.aborted(pipeline_name, checkpoint_id)
        _LOG.info("%s (%s): %d handles aborted", what, reason or "no reason given", count)
        return count

    def _handles_span(
        self,
        name: str,
        pipeline_name: str,
        checkpoint_id: int,
        handles: Sequence[TransactionHandle],
    ) -> AbstractContextManager[trace.Span]:
        """The Kafka commit or abort of a checkpoint's handles, as a span in the
        CommitCheckpoint/AbortCheckpoint call's trace (the leader's checkpoint trace)."""
        return self._tracer.start_as_current_span(
            name,
            attributes={
                "lockgate.pipeline": pipeline_name,
                "lockgate.checkpoint.id": checkpoint_id,
                "lockgate.executor.id": self._settings.executor_id,
                "lockgate.transactional_ids": [h.transactional_id for h in handles],
            },
        )


def _work(task: Task, requested: TriggerTask, checkpoint_id: int) -> PrecommitWork:
    assignment = task.assignment
    return PrecommitWork(
        task=task.ref,
        checkpoint_id=checkpoint_id,
        spec=assignment.require_spec(),
        source_partitions=assignment.source_partitions,
        start_offsets={**assignment.restore_offsets, **requested.start_offsets},
        transactional_id_prefix=requested.transactional_id_prefix,
        max_records_per_partition=task.size.limit,
        transaction_timeout_ms=assignment.transaction_timeout_ms,
    )


__all__ = ["CheckpointRunner"]
