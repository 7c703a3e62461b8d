"""Pre-commit reports ready together go to the leader in one ReportPrecommits call.

Each task's batch reports from the task's own thread. A report that finds no call in
flight is sent at once, with whatever else is queued; reports that become ready while a
call is in flight wait for it and go together in the next one (as the leader's group
commit does with SQL transactions). A checkpoint of many tasks on one executor so costs a
couple of calls, not one per task, and a lone report waits for nothing.

Each caller keeps its own retry loop (`Reporter`): a call that fails as a whole (no
leader, deadline exceeded) fails every report in it, and each caller sends its report
again; the retries gather into a batch again. Sending a report twice is harmless: the
leader recognises a task's repeated pre-commit of N and records nothing new.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lockgate.executor.runtime.coordinator import CoordinatorCallError
from lockgate.executor.runtime.values import PrecommitAnswer, PrecommitReport

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


class PrecommitBatcher:
    """Coalesces concurrent `submit` calls into ReportPrecommits calls (module docstring)."""

    def __init__(self, send: SendPrecommits, *, max_batch: int = 500) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self._send = send
        self._max_batch = max_batch
        self._cond = threading.Condition()
        self._queue: list[_Pending] = []
        self._sending = False

    def submit(self, report: PrecommitReport, *, timeout_s: float) -> PrecommitAnswer:
        """Send ``report`` (alone or with others ready at the same time); its answer, or
        the :class:`CoordinatorCallError` of its refusal or of the failed call."""
        me = _Pending(report, timeout_s)
        with self._cond:
            self._queue.append(me)
        while True:
            with self._cond:
                while self._sending and not me.done:
                    self._cond.wait()
                if me.done:
                    break
                self._sending = True  # this caller sends what is queued, its own included
                batch = self._queue[: self._max_batch]
                del self._queue[: len(batch)]
            self._send_batch(batch)
        if me.error is not None:
            raise me.error
        assert me.answer is not None
        return me.answer

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


__all__ = ["PrecommitBatcher", "SendPrecommits"]
