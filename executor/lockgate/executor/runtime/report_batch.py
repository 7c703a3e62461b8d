"""Pre-commit reports ready together go to the leader in one ReportPrecommits call.

Each task's batch reports from the task's own thread. A report that finds no call in
flight is sent with whatever else is queued; reports that become ready while a call is in
flight wait for it and go together in the next one: the leader's group commit
(`lockgate.common.group_commit`), which also wakes each waiting caller once and fails every
report of a call that failed as a whole.

What is the executor's own is the linger rule. A triggered pre-commit announces its task's
report (`announce`). A report that finds no call in flight but reports of other tasks
announced waits for them, up to `linger_s` (as a Kafka producer's `linger.ms`), so the
executor's tasks of one checkpoint that end together go in one call: their checkpoint
completes only with the last of them anyway, and the leader writes one transaction instead
of one for the first report and one for the rest (half of its report transactions in the
round-trip bench). A lone report, or one whose peers are all queued, waits for nothing; nor
does a report wait for a task that is reporting already (its later pre-commit queues behind
this report's answer).

Each caller keeps its own retry loop (`Reporter`): a call that fails as a whole (no
leader, deadline exceeded) fails every report in it, and each caller sends its report
again; the retries gather into a batch again. Sending a report twice is harmless: the
leader recognises a task's repeated pre-commit of N and records nothing new.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lockgate.common.group_commit import GroupCommit
from lockgate.executor.runtime.coordinator import CoordinatorCallError
from lockgate.executor.runtime.values import PrecommitAnswer, PrecommitReport, TaskRef

#: Sends reports in one call: an answer or an error per report; raises if the call failed.
SendPrecommits = Callable[
    [Sequence[PrecommitReport], float], Sequence[PrecommitAnswer | CoordinatorCallError]
]

#: How long a report waits at most for the reports still announced (s).
LINGER_S = 0.025


@dataclass(frozen=True)
class _Queued:
    report: PrecommitReport
    timeout_s: float


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
        self._send = send
        # Announced reports not queued yet, per task; read by the linger rule under the
        # group's lock, changed under this one.
        self._lock = threading.Lock()
        self._coming: Counter[TaskRef] = Counter()
        self._group: GroupCommit[_Queued, PrecommitAnswer | CoordinatorCallError] = GroupCommit(
            write_batch=self._send_batch,
            max_batch=max_batch,
            linger=self._awaits_more,
            linger_s=LINGER_S if linger_s is None else linger_s,
            retry_alone=False,
        )

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
        if self._arrive(coming):
            self._group.recheck()

    def submit(
        self, report: PrecommitReport, *, timeout_s: float, coming: Coming | None = None
    ) -> PrecommitAnswer:
        """Send ``report`` (alone or with others ready at the same time; `coming`: the
        announcement it fulfils); its answer, or the :class:`CoordinatorCallError` of its
        refusal or of the failed call."""
        answer = self._group.submit(
            _Queued(report, timeout_s),
            on_queued=None if coming is None else lambda: self._arrive(coming),
        )
        if isinstance(answer, CoordinatorCallError):
            raise answer
        return answer

    def _arrive(self, coming: Coming) -> bool:
        """`coming` is queued or will not come; whether it was still awaited."""
        with self._lock:
            if coming.arrived:
                return False
            coming.arrived = True
            self._coming[coming.task] -= 1
            if not self._coming[coming.task]:
                del self._coming[coming.task]
            return True

    def _awaits_more(self, queued: Sequence[_Queued]) -> bool:
        """Whether a report of a task not reporting now is announced."""
        reporting = {q.report.stamp.task for q in queued}
        with self._lock:
            return any(task not in reporting for task in self._coming)

    def _send_batch(
        self, batch: Sequence[_Queued]
    ) -> Sequence[PrecommitAnswer | CoordinatorCallError]:
        return self._send([q.report for q in batch], min(q.timeout_s for q in batch))


__all__ = ["LINGER_S", "Coming", "PrecommitBatcher", "SendPrecommits"]
