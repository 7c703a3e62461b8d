"""The tasks one trigger starts announce their reports before any pre-commit runs, so the
reports that end together reach the leader in one ReportPrecommits call, not the first
alone and the rest after it (`report_batch.py`)."""

from __future__ import annotations

import pytest

from lockgate.executor.runtime import report_batch
from tests.support.waits import wait_for
from tests.unit.executor_runtime.runtime_doubles import (
    WAIT_S,
    start_worker,
    stop_worker,
    trigger,
)


def test_the_tasks_of_one_trigger_report_in_one_call(monkeypatch: pytest.MonkeyPatch) -> None:
    # A wait far past the test's time: only the announced reports can end it, however the
    # task threads are scheduled.
    monkeypatch.setattr(report_batch, "LINGER_S", 60.0)
    runtime, coordinator, data_plane = start_worker(tasks=3)
    try:
        trigger(runtime, 1, tasks=3)
        started, release = data_plane.events(1)
        assert started.wait(WAIT_S)
        release.set()  # the three batches end together
        wait_for("the reports sent", lambda: len(coordinator.precommits) == 3, timeout_s=WAIT_S)
        assert coordinator.report_calls == [[0, 1, 2]]
    finally:
        stop_worker(runtime, data_plane)


def test_a_task_stopped_before_its_pre_commit_ran_withdraws_its_report(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(report_batch, "LINGER_S", 60.0)
    runtime, coordinator, data_plane = start_worker(tasks=2)
    try:
        trigger(runtime, 1, tasks=2)
        started, release = data_plane.events(1)
        assert started.wait(WAIT_S)
        # Checkpoint 2 queues behind 1 on both tasks; then task 1 leaves the assignment:
        # its queue is dropped with checkpoint 2 in it, which never reports.
        trigger(runtime, 2, tasks=2)
        coordinator.assignments = coordinator.assignments[:1]
        wait_for("task 1 stopped", lambda: len(runtime.statuses()) == 1, timeout_s=WAIT_S)
        release.set()
        wait_for("checkpoint 1 reported", lambda: 1 in coordinator.precommits, timeout_s=WAIT_S)
        data_plane.events(2)[1].set()
        # Task 0's report of 2 waits for no one: task 1's was withdrawn with its queue.
        wait_for("checkpoint 2 reported", lambda: 2 in coordinator.precommits, timeout_s=WAIT_S)
    finally:
        stop_worker(runtime, data_plane)
