"""Stopping the executor cancels its running batches and waits for them to end before it
deregisters (issue 16: a batch blocked in Spark kept a SIGTERMed executor alive).

While its session lives the leader does not hand the executor's task slots to another
one, so a batch still opening producers on a slot's transactional ids cannot fence the
next owner's; hence cancel, wait, then deregister.
"""

from __future__ import annotations

from lockgate.executor.worker import Worker
from tests.unit.executor_runtime.runtime_doubles import (
    TASK,
    BlockingDataPlane,
    FakeCoordinator,
    start_batch,
)


def test_stop_cancels_the_running_batch_and_deregisters_after_it_ended(
    cluster: tuple[Worker, FakeCoordinator, BlockingDataPlane],
) -> None:
    runtime, coordinator, data_plane = cluster
    start_batch(runtime, data_plane, 1)

    still_running = runtime.stop(batch_timeout_s=10)

    assert still_running == []
    assert data_plane.timeline == ["cancel", "batch 1 ended", "deregistered"]
    assert coordinator.precommits == [], "a cancelled batch reported a pre-commit"


def test_stop_names_the_batch_that_outlives_its_cancellation_and_still_deregisters(
    cluster: tuple[Worker, FakeCoordinator, BlockingDataPlane],
) -> None:
    runtime, _, data_plane = cluster
    data_plane.honour_cancel = False
    start_batch(runtime, data_plane, 1)

    still_running = runtime.stop(batch_timeout_s=0.2)

    assert still_running == [TASK]
    assert data_plane.timeline == ["cancel", "deregistered"]
