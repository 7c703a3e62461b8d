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
from dataclasses import dataclass

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
        lock = threading.Lock()
        # Two conditions on one lock, so each wakes only who needs it: an arrival wakes
        # the one sender lingering for it (`_arrivals`), a sent batch wakes the callers
        # waiting for an answer or their turn (`_cond`). One condition for both woke every
        # waiting caller on every arrival: a 50-task checkpoint's reports cost 50 x 50
        # thread wake-ups.
        self._cond = threading.Condition(lock)
        self._arrivals = threading.Condition(lock)
        self._queue: list[_Pending] = []
        self._sending = False
        self._coming: Counter[TaskRef] = Counter()

    def announce(self, task: TaskRef) -> Coming:
        """Announce a report of `task` (a pre-commit triggered): reports of other tasks
        ready meanwhile wait for it, up to `linger_s`, until it is submitted with it or
        `withdraw`n."""
        with self._cond:
            self._coming[task] += 1
        return Coming(task)

    def withdraw(self, coming: Coming) -> None:
        """The announced report will not come (the pre-commit failed or was skipped); a
        no-op once it was submitted."""
        with self._cond:
            self._arrive_locked(coming)

    def submit(
        self, report: PrecommitReport, *, timeout_s: float, coming: Coming | None = None
    ) -> PrecommitAnswer:
        """Send ``report`` (alone or with others ready at the same time; `coming`: the
        announcement it fulfils); its answer, or the :class:`CoordinatorCallError` of its
        refusal or of the failed call."""
        me = _Pending(report, timeout_s)
        with self._cond:
            self._queue.append(me)
            if coming is not None:
                self._arrive_locked(coming)
        while True:
            with self._cond:
                while self._sending and not me.done:
                    self._cond.wait()
                if me.done:
                    break
                self._sending = True  # this caller sends what is queued, its own included
                self._linger_locked()
                batch = self._queue[: self._max_batch]
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
            self._arrivals.notify()  # the one lingering sender, if any

    def _linger_locked(self) -> None:
        """Wait while reports of tasks not reporting now are coming, up to `linger_s`,
        unless a call is full."""
        until = time.monotonic() + self._linger_s
        while len(self._queue) < self._max_batch and self._awaited_locked():
            left = until - time.monotonic()
            if left <= 0:
                return
            self._arrivals.wait(left)

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
            with self._cond:
                for pending in batch:
                    pending.done = True
                self._sending = False
                self._cond.notify_all()


__all__ = ["LINGER_S", "Coming", "PrecommitBatcher", "SendPrecommits"]
