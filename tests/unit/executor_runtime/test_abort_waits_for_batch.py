"""AbortCheckpoint answers only once no batch of the checkpoint runs on the executor.

A batch of an aborted checkpoint that is still running (its task moved to another
executor, or the leader gave up on it) opens producers on its slot's transactional ids;
``init_transactions`` on one of them aborts whatever the id has open. If the abort were
acknowledged at once, the leader would reuse the slot for the next checkpoint and the late
``init_transactions`` would abort that checkpoint's pre-committed transaction: measured in
the end-to-end test as a COMPLETE checkpoint whose commit failed with PRODUCER_FENCED.

The runtime (a :class:`Worker`) runs in-process with the doubles of ``runtime_doubles``.
"""

from __future__ import annotations

import threading

import pytest

from lockgate.common.errors import Unavailable
from lockgate.executor.worker import Worker
from tests.support.waits import wait_for
from tests.unit.executor_runtime.runtime_doubles import (
    PIPELINE,
    WAIT_S,
    BlockingDataPlane,
    FakeCoordinator,
    start_batch,
    trigger,
)


def abort_in_background(runtime: Worker, checkpoint_id: int) -> threading.Event:
    answered = threading.Event()

    def run() -> None:
        runtime.abort_checkpoint(
            pipeline_name=PIPELINE,
            checkpoint_id=checkpoint_id,
            handles=[],
            reason="test",
            timeout_s=WAIT_S,
            sink_properties={},
        )
        answered.set()

    threading.Thread(target=run, daemon=True).start()
    return answered


def test_abort_of_a_running_batch_answers_only_after_the_batch_ended(
    cluster: tuple[Worker, FakeCoordinator, BlockingDataPlane],
) -> None:
    runtime, coordinator, data_plane = cluster
    release = start_batch(runtime, data_plane, 1)
    with pytest.raises(Unavailable, match="still runs"):
        runtime.abort_checkpoint(
            pipeline_name=PIPELINE,
            checkpoint_id=1,
            handles=[],
            reason="t",
            timeout_s=0.2,
            sink_properties={},
        )
    answered = abort_in_background(runtime, 1)
    assert not answered.wait(0.5), "the abort was answered while the batch still ran"
    release.set()
    assert answered.wait(WAIT_S), "the abort was not answered after the batch ended"
    # The aborted batch never reports its pre-commit.
    assert coordinator.precommits == []


def test_abort_waits_for_the_batch_of_a_task_that_moved_away(
    cluster: tuple[Worker, FakeCoordinator, BlockingDataPlane],
) -> None:
    runtime, coordinator, data_plane = cluster
    release = start_batch(runtime, data_plane, 1)
    coordinator.assignments = []  # the task moved to another executor
    wait_for("the task to stop", lambda: runtime.statuses() == [], timeout_s=WAIT_S)

    answered = abort_in_background(runtime, 1)
    assert not answered.wait(0.5), "the abort was answered while the moved task's batch ran"
    release.set()
    assert answered.wait(WAIT_S)


def test_abort_of_a_queued_checkpoint_answers_at_once_and_it_never_runs(
    cluster: tuple[Worker, FakeCoordinator, BlockingDataPlane],
) -> None:
    runtime, coordinator, data_plane = cluster
    release = start_batch(runtime, data_plane, 1)
    trigger(runtime, 2)  # queued behind 1 on the task's queue

    runtime.abort_checkpoint(
        pipeline_name=PIPELINE,
        checkpoint_id=2,
        handles=[],
        reason="t",
        timeout_s=0.2,
        sink_properties={},
    )
    release.set()
    wait_for("checkpoint 1's report", lambda: coordinator.precommits == [1], timeout_s=WAIT_S)
    start_batch(runtime, data_plane, 3).set()
    wait_for("checkpoint 3's report", lambda: coordinator.precommits == [1, 3], timeout_s=WAIT_S)
    assert data_plane.ran == [1, 3], "the aborted checkpoint 2 ran"
