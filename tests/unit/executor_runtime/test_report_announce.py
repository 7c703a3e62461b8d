"""The tasks one trigger starts announce their reports before any pre-commit runs, so the
reports that end together reach the leader in one ReportPrecommits call, not the first
alone and the rest after it (`report_batch.py`)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from lockgate.executor.runtime import report_batch
from lockgate.executor.worker import Worker
from tests.support.waits import wait_for
from tests.unit.executor_runtime.runtime_doubles import (
    WAIT_S,
    BlockingDataPlane,
    FakeCoordinator,
    start_worker,
    stop_worker,
    trigger,
)

Started = tuple[Worker, FakeCoordinator, BlockingDataPlane, threading.Event]


@pytest.fixture
def checkpoint_1_running(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Started]:
    """`request.param` tasks running checkpoint 1, its batches held until the returned event.
    Reports wait for announced ones as long as the test runs: only the announced reports
    can end the wait, however the task threads are scheduled."""
    monkeypatch.setattr(report_batch, "LINGER_S", 60.0)
    tasks = int(request.param)
    runtime, coordinator, data_plane = start_worker(tasks=tasks)
    try:
        trigger(runtime, 1, tasks=tasks)
        started, release = data_plane.events(1)
        assert started.wait(WAIT_S)
        yield runtime, coordinator, data_plane, release
    finally:
        stop_worker(runtime, data_plane)


@pytest.mark.parametrize("checkpoint_1_running", [3], indirect=True)
def test_the_tasks_of_one_trigger_report_in_one_call(checkpoint_1_running: Started) -> None:
    _, coordinator, _, release = checkpoint_1_running
    release.set()  # the three batches end together
    wait_for("the reports sent", lambda: len(coordinator.precommits) == 3, timeout_s=WAIT_S)
    assert coordinator.report_calls == [[0, 1, 2]]


@pytest.mark.parametrize("checkpoint_1_running", [2], indirect=True)
def test_a_task_stopped_before_its_pre_commit_ran_withdraws_its_report(
    checkpoint_1_running: Started,
) -> None:
    runtime, coordinator, data_plane, release = checkpoint_1_running
    # Checkpoint 2 queues behind 1 on both tasks; then task 1 leaves the assignment: its
    # queue is dropped with checkpoint 2 in it, which never reports.
    trigger(runtime, 2, tasks=2)
    coordinator.assignments = coordinator.assignments[:1]
    wait_for("task 1 stopped", lambda: len(runtime.statuses()) == 1, timeout_s=WAIT_S)
    release.set()
    wait_for("checkpoint 1 reported", lambda: 1 in coordinator.precommits, timeout_s=WAIT_S)
    data_plane.events(2)[1].set()
    # Task 0's report of 2 waits for no one: task 1's was withdrawn with its queue.
    wait_for("checkpoint 2 reported", lambda: 2 in coordinator.precommits, timeout_s=WAIT_S)
