"""Pre-commit reports ready together go to the leader in one ReportPrecommits call.

Each task's batch reports from the task's own thread. A report that finds no call in
flight is sent with whatever else is queued; reports that become ready while a call is in
flight wait for it and go together in the next one (as the leader's group commit does with
SQL transactions).

A triggered pre-commit announces its task's report (`announce`). A report that finds no
call in flight but reports of other tasks announced waits for them, up to `linger_s` (as a
Kafka producer's `linger.ms`), so the executor's tasks of one checkpoint that end together
go in one call: their checkpoint completes only with the last of them anyway, and the
leader writes one transaction instead of one for the first report and one for the rest
(half of its report transactions in the round-trip bench). A lone report, or one whose
peers are all queued, waits for nothing; nor does a report wait for a task that is
reporting already (its later pre-commit queues behind this report's answer).

Wake-ups are what a report costs an executor at scale: each is a context switch and a
hand-over of the GIL (the scale run switched an executor's threads 16-18 times a task, a
third of its CPU in the kernel). So each waiting caller sleeps on its own event and is woken
once: when its answer is in, or when it is its turn to send the next call (the oldest
queued report's caller, so calls keep their order). One condition for all woke every
waiting caller after every call, and those queued for the next call went back to sleep. A
sender lingering for announced reports is woken once too, by the arrival that ends its
wait, not by every arrival (14 switches a task then, docs/benchmarks.md).

Each caller keeps its own retry loop (`Reporter`): a call that fails as a whole (no
leader, deadline exceeded) fails every report in it, and each caller sends its report
again; the retries gather into a batch again. Sending a report twice is harmless: the
leader recognises a task's repeated pre-commit of N and records nothing new.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from lockgate.executor.runtime.coordinator import CoordinatorCallError
from lockgate.executor.runtime.values import PrecommitAnswer, PrecommitReport, TaskRef

#: Sends reports in one call: an answer or an error per report; raises if the call failed.
SendPrecommits = Callable[
    [Sequence[PrecommitReport], float], Sequence[PrecommitAnswer | CoordinatorCallError]
]


@dataclass
class _Pending:
    report: PrecommitReport
    timeout_s: float
    done: bool = False
    answer: PrecommitAnswer | None = None
    error: Exception | None = None
    #: Its caller sends the next call (set under the batcher's lock, as `done` is).
    turn: bool = False
    #: Set when `done` or `turn` becomes true: the caller's one wake-up.
    woken: threading.Event = field(default_factory=threading.Event)


#: How long a report waits at most for the reports still announced (s).
LINGER_S = 0.025


class Coming:
    """A report announced by a triggered pre-commit (`PrecommitBatcher.announce`)."""

    def __init__(self, task: TaskRef) -> None:
        self.task = task
        self.arrived = False
        """Queued, or never to come: the batcher no longer waits for it."""


class PrecommitBatcher:
    """Coalesces concurrent `submit` calls into ReportPrecommits calls (module docstring)."""

    def __init__(
        self,
        send: SendPrecommits,
        *,
        max_batch: int = 500,
        linger_s: float | None = None,
    ) -> None:
        """`linger_s`: None for `LINGER_S` as it is when the batcher is made."""
        linger_s = LINGER_S if linger_s is None else linger_s
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if linger_s < 0:
            raise ValueError(f"linger_s must be >= 0, got {linger_s}")
        self._send = send
        self._max_batch = max_batch
        self._linger_s = linger_s
        self._lock = threading.Lock()
        # Only the sender lingering for announced reports waits on it; a sent call wakes
        # its callers and the next sender through their own events (`_Pending.woken`).
        self._arrivals = threading.Condition(self._lock)
        self._queue: list[_Pending] = []
        self._sending = False
        self._lingering = False
        self._coming: Counter[TaskRef] = Counter()

    def announce(self, task: TaskRef) -> Coming:
        """Announce a report of `task` (a pre-commit triggered): reports of other tasks
        ready meanwhile wait for it, up to `linger_s`, until it is submitted with it or
        `withdraw`n."""
        with self._lock:
            self._coming[task] += 1
        return Coming(task)

    def withdraw(self, coming: Coming) -> None:
        """The announced report will not come (the pre-commit failed or was skipped); a
        no-op once it was submitted."""
        with self._lock:
            self._arrive_locked(coming)

    def submit(
        self, report: PrecommitReport, *, timeout_s: float, coming: Coming | None = None
    ) -> PrecommitAnswer:
        """Send ``report`` (alone or with others ready at the same time; `coming`: the
        announcement it fulfils); its answer, or the :class:`CoordinatorCallError` of its
        refusal or of the failed call."""
        me = _Pending(report, timeout_s)
        with self._lock:
            self._queue.append(me)
            if coming is not None:
                self._arrive_locked(coming)
            if not self._sending:
                self._sending = True
                me.turn = True  # no call in flight: this caller sends at once
        while not me.done:
            if not me.turn:
                me.woken.wait()  # set once `done` or `turn` is
                continue
            with self._lock:
                me.turn = False
                me.woken.clear()
                self._linger_locked()
                batch = self._queue[: self._max_batch]  # the oldest first, its own included
                del self._queue[: len(batch)]
            self._send_batch(batch)
        if me.error is not None:
            raise me.error
        assert me.answer is not None
        return me.answer

    def _arrive_locked(self, coming: Coming) -> None:
        if not coming.arrived:
            coming.arrived = True
            self._coming[coming.task] -= 1
            if not self._coming[coming.task]:
                del self._coming[coming.task]
            if self._lingering and not self._lingers_locked():
                self._arrivals.notify()  # the sender's wait is over: its one wake-up

    def _linger_locked(self) -> None:
        """Wait while reports of tasks not reporting now are coming, up to `linger_s`,
        unless a call is full."""
        until = time.monotonic() + self._linger_s
        self._lingering = True
        try:
            while self._lingers_locked():
                left = until - time.monotonic()
                if left <= 0:
                    return
                self._arrivals.wait(left)
        finally:
            self._lingering = False

    def _lingers_locked(self) -> bool:
        return len(self._queue) < self._max_batch and self._awaited_locked()

    def _awaited_locked(self) -> bool:
        reporting = {p.report.stamp.task for p in self._queue}
        return any(task not in reporting for task in self._coming)

    def _send_batch(self, batch: Sequence[_Pending]) -> None:
        try:
            answers = list(self._send([p.report for p in batch], min(p.timeout_s for p in batch)))
            for pending, answer in zip(batch, answers, strict=True):
                if isinstance(answer, CoordinatorCallError):
                    pending.error = answer
                else:
                    pending.answer = answer
        except Exception as exc:  # the call failed: every report of it, each caller retries
            for pending in batch:
                pending.error = exc
        finally:
            with self._lock:
                for pending in batch:
                    pending.done = True
                    pending.woken.set()
                if self._queue:  # queued meanwhile: the oldest one's caller sends them next
                    self._queue[0].turn = True
                    self._queue[0].woken.set()
                else:
                    self._sending = False


__all__ = ["LINGER_S", "Coming", "PrecommitBatcher", "SendPrecommits"]
