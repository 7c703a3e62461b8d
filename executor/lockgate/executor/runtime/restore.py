"""Restoring a (re)assigned task before it runs (DESIGN.md step 5).

On the task's own thread, before any of its pre-commits: check that this executor can
run the spec, commit every COMPLETE-but-not-COMMITTED checkpoint the leader hands over
(oldest first, as Flink's committer recovers: N's output before N+1's), abort the
pre-commits that never became COMPLETE, then move RESTORING -> RUNNING or PAUSED. Kafka
being unavailable is retried a few times; anything else fails the task, which is
reported to the leader (``ReportTaskFailure``) and shown in heartbeats.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable

from lockgate.common.errors import LockgateError, Unavailable
from lockgate.executor.committer import Committer
from lockgate.executor.runtime.reporter import Reporter
from lockgate.executor.runtime.tasks import Task, TaskBoard, task_error
from lockgate.executor.runtime.values import (
    ExecutorSettings,
    Registration,
    RestorePlan,
    TaskFailureReport,
)

_LOG = logging.getLogger(__name__)


class Restorer:
    """Runs the restore of new tasks and fails those whose restore cannot succeed."""

    def __init__(
        self,
        settings: ExecutorSettings,
        *,
        board: TaskBoard,
        committer: Committer,
        reporter: Reporter,
        registration: Callable[[], Registration | None],
        stopping: threading.Event,
    ) -> None:
        self._settings = settings
        self._board = board
        self._committer = committer
        self._reporter = reporter
        self._registration = registration
        self._stopping = stopping

    def restore(self, task: Task) -> None:
        """Restore ``task`` (run on its queue); it ends RUNNING, PAUSED or FAILED."""
        plan = task.assignment.restore
        try:
            task.assignment.require_spec()
            if plan.invalid is not None:
                raise plan.invalid
            self._with_retries(
                lambda: self._finish(task, plan),
                attempts=self._settings.restore_attempts,
                what=f"restore of task {task.ref}",
            )
        except LockgateError as exc:
            self._fail(task, exc)
            return
        if self._board.restored(task):
            _LOG.info(
                "task %s generation %d restored (%d checkpoints re-committed, %d handles"
                " aborted): %s",
                task.ref,
                task.generation,
                len(plan.commits),
                len(plan.aborts),
                task.phase.value,
            )

    def _finish(self, task: Task, plan: RestorePlan) -> None:
        # Oldest first, as Flink's committer recovers: N's output before N+1's.
        properties = dict(task.assignment.require_spec().sink.properties)
        for checkpoint_id, handles in plan.commits:
            self._committer.commit(
                handles,
                what=f"restore of {task.ref}: commit of checkpoint {checkpoint_id}",
                sink_properties=properties,
            )
        self._committer.abort(
            plan.aborts, what=f"restore of {task.ref}: abort", sink_properties=properties
        )

    def _with_retries(self, action: Callable[[], None], *, attempts: int, what: str) -> None:
        for attempt in range(1, attempts + 1):
            try:
                action()
                return
            except Unavailable as exc:
                if attempt == attempts or self._stopping.is_set():
                    raise
                _LOG.warning("%s failed (attempt %d of %d): %s", what, attempt, attempts, exc)
                self._stopping.wait(min(2.0**attempt, 10.0))

    def _fail(self, task: Task, exc: LockgateError) -> None:
        registration = self._registration()
        error = task_error(
            exc,
            checkpoint_id=0,
            executor_id=self._settings.executor_id,
            executor_generation=registration.executor_generation if registration else 0,
            task_generation=task.generation,
        )
        if not self._board.fail(task, error):
            return
        _LOG.error("task %s generation %d failed: %s", task.ref, task.generation, error.message)
        if registration is None:
            return
        self._reporter.report_task_failure(
            TaskFailureReport(
                request_id=str(uuid.uuid4()),
                task=task.ref,
                task_generation=task.generation,
                executor_id=self._settings.executor_id,
                executor_generation=registration.executor_generation,
                error=error,
            )
        )


__all__ = ["Restorer"]
