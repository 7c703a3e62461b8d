"""Pre-commit reports ready together share one ReportPrecommits call; each gets its own
answer, and a failed call fails each report so its own caller retries it."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from lockgate.common.model.ids import Generation, LeaderEpoch
from lockgate.executor.dataplane.protocol import PrecommitOutput
from lockgate.executor.runtime.coordinator import CallFailure, CoordinatorCallError
from lockgate.executor.runtime.report_batch import Coming, PrecommitBatcher
from lockgate.executor.runtime.values import (
    LeaderStamp,
    PrecommitAnswer,
    PrecommitReport,
    ReportStamp,
    TaskRef,
)
from tests.support.waits import wait_for


def report(task_index: int) -> PrecommitReport:
    return PrecommitReport(
        stamp=ReportStamp(
            request_id=f"r{task_index}",
            leader=LeaderStamp(LeaderEpoch(1)),
            checkpoint_id=1,
            task=TaskRef("p", task_index),
            task_generation=Generation(1),
            executor_id="e1",
            executor_generation=Generation(1),
        ),
        output=PrecommitOutput(ranges=(), handles=()),
        precommit_duration_ms=1,
    )


class HeldLeader:
    """Answers each call with one answer per report; the first call is held until released,
    so that reports arriving meanwhile queue up."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.refuse: set[int] = set()
        self.fail_next = False

    def send(
        self, reports: Sequence[PrecommitReport], timeout_s: float
    ) -> list[PrecommitAnswer | CoordinatorCallError]:
        self.calls.append([r.stamp.task.task_index for r in reports])
        if len(self.calls) == 1:
            self.entered.set()
            self.release.wait(10)
        if self.fail_next:
            self.fail_next = False
            raise CoordinatorCallError(
                failure=CallFailure.UNREACHABLE, code="UNAVAILABLE", message="no leader"
            )
        return [
            CoordinatorCallError(
                failure=CallFailure.REFUSED, code="INVALID_ARGUMENT", message="forged"
            )
            if r.stamp.task.task_index in self.refuse
            else PrecommitAnswer("TRIGGERED")
            for r in reports
        ]


def submit_in_thread(
    batcher: PrecommitBatcher,
    task_index: int,
    outcomes: dict[int, object],
    coming: Coming | None = None,
) -> threading.Thread:
    def run() -> None:
        try:
            outcomes[task_index] = batcher.submit(report(task_index), timeout_s=5, coming=coming)
        except CoordinatorCallError as exc:
            outcomes[task_index] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_reports_ready_during_a_call_go_together_in_the_next_with_their_own_answers() -> None:
    leader = HeldLeader()
    leader.refuse = {2}
    batcher = PrecommitBatcher(leader.send)
    outcomes: dict[int, object] = {}
    first = submit_in_thread(batcher, 0, outcomes)
    assert leader.entered.wait(5)
    others = [submit_in_thread(batcher, i, outcomes) for i in (1, 2, 3)]
    wait_for("three reports queued", lambda: len(batcher._group._queue) == 3, timeout_s=5)
    leader.release.set()
    for thread in [first, *others]:
        thread.join(10)

    assert leader.calls[0] == [0]
    assert sorted(leader.calls[1]) == [1, 2, 3] and len(leader.calls) == 2
    assert outcomes[0] == outcomes[1] == outcomes[3] == PrecommitAnswer("TRIGGERED")
    refused = outcomes[2]
    assert isinstance(refused, CoordinatorCallError) and refused.code == "INVALID_ARGUMENT"


def test_a_failed_call_fails_each_report_and_a_retry_is_sent_again() -> None:
    leader = HeldLeader()
    leader.release.set()
    leader.fail_next = True
    batcher = PrecommitBatcher(leader.send)

    with pytest.raises(CoordinatorCallError) as failed:
        batcher.submit(report(0), timeout_s=5)
    assert failed.value.retriable
    assert batcher.submit(report(0), timeout_s=5) == PrecommitAnswer("TRIGGERED")
    assert leader.calls == [[0], [0]]


def test_a_report_waits_for_the_reports_announced_as_coming_and_they_go_in_one_call() -> None:
    leader = HeldLeader()
    leader.release.set()
    # A linger far past the test's time: only the announced reports end the wait.
    batcher = PrecommitBatcher(leader.send, linger_s=60)
    outcomes: dict[int, object] = {}
    first, second = batcher.announce(TaskRef("p", 0)), batcher.announce(TaskRef("p", 1))
    # Whichever is queued first finds the other still coming and waits for it.
    threads = [
        submit_in_thread(batcher, 0, outcomes, first),
        submit_in_thread(batcher, 1, outcomes, second),
    ]
    for thread in threads:
        thread.join(10)
    assert not any(t.is_alive() for t in threads)

    assert [sorted(call) for call in leader.calls] == [[0, 1]]
    assert outcomes == {0: PrecommitAnswer("TRIGGERED"), 1: PrecommitAnswer("TRIGGERED")}


def test_a_withdrawn_report_ends_the_wait() -> None:
    leader = HeldLeader()
    leader.release.set()
    batcher = PrecommitBatcher(leader.send, linger_s=60)
    outcomes: dict[int, object] = {}
    reported, failing = batcher.announce(TaskRef("p", 0)), batcher.announce(TaskRef("p", 1))
    waiting = submit_in_thread(batcher, 0, outcomes, reported)
    wait_for("the report queued", lambda: len(batcher._group._queue) == 1, timeout_s=5)
    batcher.withdraw(failing)  # a pre-commit that failed: its report never comes
    waiting.join(10)
    assert not waiting.is_alive()

    assert leader.calls == [[0]]
    assert outcomes == {0: PrecommitAnswer("TRIGGERED")}


def test_a_report_waits_for_a_coming_one_no_longer_than_the_linger() -> None:
    leader = HeldLeader()
    leader.release.set()
    batcher = PrecommitBatcher(leader.send, linger_s=0.05)
    outcomes: dict[int, object] = {}
    batcher.announce(TaskRef("p", 1))  # never reports while the other is sent
    waiting = submit_in_thread(batcher, 0, outcomes)
    waiting.join(10)
    assert not waiting.is_alive()
    assert leader.calls == [[0]]
    assert outcomes == {0: PrecommitAnswer("TRIGGERED")}


def test_a_report_does_not_wait_for_its_own_tasks_later_report() -> None:
    """A task's later pre-commit queues behind this report's answer: waiting for it would
    only ever end at the linger."""
    leader = HeldLeader()
    leader.release.set()
    batcher = PrecommitBatcher(leader.send, linger_s=60)
    now, later = batcher.announce(TaskRef("p", 0)), batcher.announce(TaskRef("p", 0))
    outcomes: dict[int, object] = {}
    waiting = submit_in_thread(batcher, 0, outcomes, now)
    waiting.join(10)
    assert not waiting.is_alive()
    assert leader.calls == [[0]] and outcomes == {0: PrecommitAnswer("TRIGGERED")}
    batcher.withdraw(later)
