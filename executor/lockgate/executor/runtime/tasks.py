"""The worker task state machine and the board of tasks this executor runs.

A task's observed phase (:class:`TaskPhase`) moves only along :data:`TASK_TRANSITIONS`,
through :func:`next_phase`; a new generation of a task is a new :class:`Task`, so a
FAILED task stays failed until the leader reassigns it.

:class:`TaskBoard` holds every task at its current generation and the stopped ones whose
batch still runs ("draining"). Every mutable field of the board and of its tasks is
guarded by the board's one lock; no Kafka or Spark call is made while holding it.
"""

from __future__ import annotations

import datetime
import enum
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from lockgate.common.errors import InvalidArgument, LockgateError
from lockgate.common.model.ids import Generation
from lockgate.executor.errors import OffsetOutOfRangeError, RecordError
from lockgate.executor.runtime.checkpoint_size import CheckpointSize
from lockgate.executor.runtime.values import Assignment, TaskError, TaskRef

_LOG = logging.getLogger(__name__)


class TaskPhase(enum.Enum):
    """Observed state of a task on this executor."""

    RESTORING = "restoring"
    RUNNING = "running"
    PAUSED = "paused"
    FAILED = "failed"
    STOPPED = "stopped"


#: Allowed moves of :class:`TaskPhase`; anything else is a bug.
TASK_TRANSITIONS: Mapping[TaskPhase, frozenset[TaskPhase]] = {
    TaskPhase.RESTORING: frozenset({TaskPhase.RUNNING, TaskPhase.PAUSED, TaskPhase.FAILED}),
    TaskPhase.RUNNING: frozenset({TaskPhase.PAUSED, TaskPhase.FAILED}),
    TaskPhase.PAUSED: frozenset({TaskPhase.RUNNING, TaskPhase.FAILED}),
    TaskPhase.FAILED: frozenset(),
    TaskPhase.STOPPED: frozenset(),
}


class InvalidTaskTransition(RuntimeError):
    """A task was asked to move between two phases the state machine does not allow."""


def next_phase(current: TaskPhase, target: TaskPhase) -> TaskPhase:
    """Return ``target`` if ``current -> target`` is allowed (or a no-op); raise otherwise.

    Any phase may become STOPPED (the task left the assignment).
    """
    if target is current or target is TaskPhase.STOPPED:
        return target
    if target not in TASK_TRANSITIONS[current]:
        raise InvalidTaskTransition(f"task cannot move from {current.value} to {target.value}")
    return target


def task_fails_on(exc: BaseException) -> bool:
    """True if ``exc`` fails the task itself, not just one checkpoint.

    A bad record (tolerance none), a bad spec, a failing transform or a resume offset
    outside the log comes back at every retry; a missing topic, a broker outage or a Spark
    hiccup may not.
    """
    return isinstance(exc, RecordError | InvalidArgument | OffsetOutOfRangeError)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def task_error(
    exc: BaseException,
    *,
    checkpoint_id: int,
    executor_id: str,
    executor_generation: int,
    task_generation: int,
) -> TaskError:
    """The :class:`TaskError` shown for ``exc``: the domain message, never a traceback."""
    message = exc.message if isinstance(exc, LockgateError) else f"{type(exc).__name__}: {exc}"
    return TaskError(
        message=message[:4000],
        error_type=type(exc).__name__,
        checkpoint_id=checkpoint_id,
        executor_id=executor_id,
        executor_generation=executor_generation,
        task_generation=task_generation,
        time=_now(),
        record=exc.location if isinstance(exc, RecordError) else None,
    )


@dataclass(frozen=True)
class TaskView:
    """A task's observed state, as heartbeats and GetExecutorStatus show it."""

    task: TaskRef
    generation: Generation
    phase: TaskPhase
    last_precommitted_checkpoint_id: int
    in_flight_checkpoint_ids: tuple[int, ...]
    last_error: TaskError | None
    state_change_time: datetime.datetime


@dataclass
class Task:
    """Mutable state of one task at one generation (guarded by the board's lock)."""

    #: What the leader assigned at this generation; only its target state may change.
    assignment: Assignment
    target_running: bool
    #: One thread per task: its restore, then its pre-commits in trigger order (N+1's
    #: input starts where N's ended, so they must not run side by side within a task).
    queue: ThreadPoolExecutor
    #: How many records a partition its next checkpoint may read (`checkpoint_size.py`).
    size: CheckpointSize
    phase: TaskPhase = TaskPhase.RESTORING
    state_change_time: datetime.datetime = field(default_factory=_now)
    last_error: TaskError | None = None
    last_precommitted: int = 0
    triggered: set[int] = field(default_factory=set)
    in_flight: set[int] = field(default_factory=set)
    cancelled: set[int] = field(default_factory=set)
    #: Checkpoints whose batch has started and not yet ended (a subset of ``in_flight``).
    running: set[int] = field(default_factory=set)

    @classmethod
    def of(cls, assignment: Assignment) -> Task:
        """A new task, RESTORING, for an assignment this executor does not run yet."""
        return cls(
            assignment=assignment,
            target_running=assignment.target_running,
            queue=ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"task-{assignment.task}"),
            size=CheckpointSize.first(assignment.max_records_per_partition),
        )

    @property
    def ref(self) -> TaskRef:
        """Which task this is."""
        return self.assignment.task

    @property
    def generation(self) -> Generation:
        """The generation of the assignment this task runs."""
        return self.assignment.generation

    def move(self, target: TaskPhase) -> None:
        """Apply one transition of the state machine (a no-op if already there)."""
        if target is not self.phase:
            self.phase = next_phase(self.phase, target)
            self.state_change_time = _now()

    def view(self) -> TaskView:
        """A snapshot of this task's observed state."""
        return TaskView(
            task=self.ref,
            generation=self.generation,
            phase=self.phase,
            last_precommitted_checkpoint_id=self.last_precommitted,
            in_flight_checkpoint_ids=tuple(sorted(self.in_flight)),
            last_error=self.last_error,
            state_change_time=self.state_change_time,
        )

    def follow_target(self) -> None:
        """RUNNING or PAUSED as the user asked; only a task that runs or is paused moves."""
        if self.phase in (TaskPhase.RUNNING, TaskPhase.PAUSED):
            self.move(TaskPhase.RUNNING if self.target_running else TaskPhase.PAUSED)


class TaskBoard:
    """The tasks this executor runs, and the stopped ones whose batch still runs.

    ``lock`` guards everything here and every :class:`Task`'s fields; ``batch_ended``
    (on the same lock) is notified whenever a batch ends.
    """

    def __init__(self, on_change: Callable[[], None] = lambda: None) -> None:
        """``on_change``: called, without ``lock``, after a task's phase changed by
        :meth:`apply`, :meth:`restored` or :meth:`fail` (the executor heartbeats at once,
        so the leader learns it within a round trip, not a heartbeat interval)."""
        self._on_change = on_change
        self.lock = threading.Lock()
        self.batch_ended = threading.Condition(self.lock)
        self._tasks: dict[TaskRef, Task] = {}
        #: Stopped tasks whose batch is still running (see ``cancel_and_wait``).
        self._draining: list[Task] = []

    def task_locked(self, ref: TaskRef) -> Task | None:
        """The current task ``ref``; the caller holds ``lock``."""
        return self._tasks.get(ref)

    def statuses(self) -> list[TaskView]:
        """Observed state of every task, ordered by pipeline name and task index."""
        with self.lock:
            return [self._tasks[ref].view() for ref in sorted(self._tasks)]

    def apply(self, assignments: Sequence[Assignment]) -> tuple[list[Task], list[Task]]:
        """Take the leader's full assignment; return (tasks to stop, new tasks to start).

        A task missing from it, or assigned at a higher generation, is replaced; one at
        its generation follows its target state; a lower generation is ignored.
        """
        wanted = {assignment.task: assignment for assignment in assignments}
        to_stop: list[Task] = []
        to_start: list[Task] = []
        followed = False
        with self.lock:
            for ref, task in list(self._tasks.items()):
                assignment = wanted.get(ref)
                if assignment is None or assignment.generation > task.generation:
                    to_stop.append(self._tasks.pop(ref))
                    continue
                del wanted[ref]
                if assignment.generation == task.generation:
                    task.target_running = assignment.target_running
                    phase = task.phase
                    task.follow_target()
                    followed = followed or task.phase is not phase
                else:
                    _LOG.warning(
                        "ignoring assignment of %s at generation %d: running generation %d",
                        ref,
                        assignment.generation,
                        task.generation,
                    )
            for ref, assignment in wanted.items():
                self._tasks[ref] = task = Task.of(assignment)
                to_start.append(task)
        if followed:
            self._on_change()
        return to_stop, to_start

    def take_all(self) -> list[Task]:
        """Remove every task (the session is lost or the executor stops); stop them next."""
        with self.lock:
            tasks = list(self._tasks.values())
            self._tasks.clear()
        return tasks

    def stop(self, task: Task, *, why: str) -> None:
        """Stop a task no longer on the board: cancel its checkpoints, drop its queue."""
        with self.lock:
            task.move(TaskPhase.STOPPED)
            task.cancelled.update(task.in_flight)
            if task.running:
                self._draining.append(task)
        # Queued pre-commits see STOPPED and skip; a running one aborts its own handles.
        task.queue.shutdown(wait=False, cancel_futures=True)
        _LOG.info("stopped task %s generation %d: %s", task.ref, task.generation, why)

    def is_current(self, task: Task, checkpoint_id: int | None = None) -> bool:
        """True if ``task`` is still on the board, not stopped, and N was not cancelled."""
        with self.lock:
            return self.is_current_locked(task, checkpoint_id)

    def is_current_locked(self, task: Task, checkpoint_id: int | None = None) -> bool:
        """:meth:`is_current` for a caller that holds ``lock``."""
        current = self._tasks.get(task.ref) is task and task.phase is not TaskPhase.STOPPED
        return current and (checkpoint_id is None or checkpoint_id not in task.cancelled)

    def fail(self, task: Task, error: TaskError) -> bool:
        """Move a current task to FAILED with ``error``; False if it is gone or stopped."""
        with self.lock:
            if self._tasks.get(task.ref) is not task or task.phase is TaskPhase.STOPPED:
                return False
            task.last_error = error
            task.move(TaskPhase.FAILED)
        self._on_change()
        return True

    def restored(self, task: Task) -> bool:
        """Move a current RESTORING task to its target state; False if it is not one."""
        with self.lock:
            if self._tasks.get(task.ref) is not task or task.phase is not TaskPhase.RESTORING:
                return False
            task.move(TaskPhase.RUNNING if task.target_running else TaskPhase.PAUSED)
        self._on_change()
        return True

    def begin_batch(self, task: Task, checkpoint_id: int) -> bool:
        """Mark N's batch running unless the task stopped or N was cancelled.

        Checked and marked in one step: an abort either sees the batch running (and
        waits for it) or the batch sees the abort (and never starts).
        """
        with self.lock:
            if not self.is_current_locked(task, checkpoint_id):
                return False
            task.running.add(checkpoint_id)
            return True

    def end_batch(self, task: Task, checkpoint_id: int) -> None:
        """N's pre-commit is over (reported, aborted or crashed): wake waiting aborts."""
        with self.lock:
            task.in_flight.discard(checkpoint_id)
            task.running.discard(checkpoint_id)
            if not task.running and task in self._draining:
                self._draining.remove(task)
            self.batch_ended.notify_all()

    def wait_idle(self, *, timeout_s: float) -> list[TaskRef]:
        """Wait until no batch runs here (current or stopped tasks alike).

        Returns the tasks whose batch still runs after ``timeout_s`` (empty: none).
        """

        def busy() -> list[TaskRef]:
            return [t.ref for t in [*self._tasks.values(), *self._draining] if t.running]

        with self.lock:
            self.batch_ended.wait_for(lambda: not busy(), timeout=timeout_s)
            return busy()

    def precommitted(self, task: Task, checkpoint_id: int) -> None:
        """The leader accepted the report of N."""
        with self.lock:
            task.last_precommitted = max(task.last_precommitted, checkpoint_id)

    def cancel_and_wait(
        self, *, pipeline_name: str, checkpoint_id: int, timeout_s: float
    ) -> list[TaskRef]:
        """Cancel N on the pipeline's tasks, wait until no batch of N runs here any more.

        Returns the tasks whose batch of N still runs after ``timeout_s`` (empty: none).
        Stopped tasks count too: a task that moved away may still run N's batch, and that
        batch opens producers on its slot's transactional ids.
        """

        def batches_of_n() -> list[Task]:
            return [
                t
                for t in [*self._tasks.values(), *self._draining]
                if t.ref.pipeline_name == pipeline_name and checkpoint_id in t.running
            ]

        with self.lock:
            for task in self._tasks.values():
                if task.ref.pipeline_name == pipeline_name:
                    task.cancelled.add(checkpoint_id)
            if self.batch_ended.wait_for(lambda: not batches_of_n(), timeout=timeout_s):
                return []
            return [t.ref for t in batches_of_n()]


__all__ = [
    "TASK_TRANSITIONS",
    "InvalidTaskTransition",
    "Task",
    "TaskBoard",
    "TaskPhase",
    "TaskView",
    "next_phase",
    "task_error",
    "task_fails_on",
]
