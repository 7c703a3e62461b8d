"""Reports to the coordinator's leader: pre-commits, checkpoint and task failures.

A report is sent until answered or until its checkpoint's deadline. What an unanswered
or refused report means for the handles it carries is the subtle part (the checkpoint
runner acts on it): once an attempt may have reached the leader, the leader may have
recorded it, and its handles then belong to the leader's decision.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from lockgate.common.metrics import REPORT_RETRIES, Instruments
from lockgate.executor.runtime.coordinator import CoordinatorCallError, CoordinatorClient
from lockgate.executor.runtime.report_batch import Coming, PrecommitBatcher
from lockgate.executor.runtime.values import (
    CheckpointFailureReport,
    PrecommitAnswer,
    PrecommitReport,
    TaskFailureReport,
    TaskRef,
)

_LOG = logging.getLogger(__name__)

_T = TypeVar("_T")


class ReportOutcome(enum.Enum):
    """What became of a report."""

    ACCEPTED = "accepted"
    #: The leader said no (aborted, fenced, unknown): nothing of it was recorded.
    REFUSED = "refused"
    #: No answer before the deadline: the leader may or may not have recorded it.
    UNKNOWN = "unknown"


class Reporter:
    """Sends this executor's reports through a :class:`CoordinatorClient`."""

    def __init__(
        self,
        client: CoordinatorClient,
        *,
        rpc_timeout_s: float,
        stopping: threading.Event,
        clock: Callable[[], float] = time.monotonic,
        instruments: Instruments | None = None,
    ) -> None:
        self._client = client
        self._precommits = PrecommitBatcher(
            lambda reports, timeout: client.report_precommits(reports, timeout_s=timeout)
        )
        self._instruments = instruments or Instruments.disabled()
        self._rpc_timeout_s = rpc_timeout_s
        self._stopping = stopping
        self._clock = clock

    def announce_precommit(self, task: TaskRef) -> Coming:
        """Announce a triggered pre-commit's report (`PrecommitBatcher.announce`)."""
        return self._precommits.announce(task)

    def withdraw_precommit(self, coming: Coming) -> None:
        """The announced report will not come (`PrecommitBatcher.withdraw`)."""
        self._precommits.withdraw(coming)

    def report_precommit(
        self, report: PrecommitReport, *, deadline: float, what: str, coming: Coming | None = None
    ) -> tuple[ReportOutcome, PrecommitAnswer | None]:
        """Report a pre-commit until answered or ``deadline``; reports of other tasks
        ready at the same time, or announced as `coming`, share its ReportPrecommits call
        (`report_batch.py`)."""
        return self._send(
            lambda timeout: self._precommits.submit(report, timeout_s=timeout, coming=coming),
            deadline=deadline,
            what=what,
            kind="precommit",
        )

    def report_checkpoint_failure(
        self, report: CheckpointFailureReport, *, deadline: float, what: str
    ) -> ReportOutcome:
        """ReportCheckpointFailure until answered or ``deadline``."""
        outcome, _ = self._send(
            lambda timeout: self._client.report_checkpoint_failure(report, timeout_s=timeout),
            deadline=deadline,
            what=what,
            kind="checkpoint_failure",
        )
        return outcome

    def report_task_failure(self, report: TaskFailureReport) -> None:
        """ReportTaskFailure once: the heartbeat carries the FAILED state and error too."""
        try:
            self._client.report_task_failure(report, timeout_s=self._rpc_timeout_s)
        except CoordinatorCallError as exc:
            _LOG.warning("ReportTaskFailure failed: %s", exc.message)

    def _send(
        self, call: Callable[[float], _T], *, deadline: float, what: str, kind: str
    ) -> tuple[ReportOutcome, _T | None]:
        """Send a report until answered or ``deadline``.

        Returns REFUSED only if the first attempt was refused: once an attempt may have been
        recorded, a later refusal (e.g. from a new leader) says nothing about the first.
        """
        attempt = 0
        while True:
            attempt += 1
            timeout = max(0.5, min(self._rpc_timeout_s, deadline - self._clock()))
            try:
                return ReportOutcome.ACCEPTED, call(timeout)
            except CoordinatorCallError as exc:
                if not exc.retriable:
                    _LOG.warning("%s refused: %s %s", what, exc.code, exc.message)
                    return (ReportOutcome.REFUSED if attempt == 1 else ReportOutcome.UNKNOWN), None
                if self._clock() >= deadline or self._stopping.is_set():
                    _LOG.warning("%s unanswered before its deadline: %s", what, exc.message)
                    return ReportOutcome.UNKNOWN, None
                _LOG.info("%s: %s, retrying", what, exc.code)
                self._instruments.add(REPORT_RETRIES, 1, {"report": kind})
                self._stopping.wait(min(1.0, max(0.0, deadline - self._clock())))


__all__ = ["ReportOutcome", "Reporter"]
