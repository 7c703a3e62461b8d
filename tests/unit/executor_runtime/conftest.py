"""The ``cluster`` fixture: a started :class:`Worker` with its test doubles."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lockgate.executor.coordinator_client import GrpcCoordinatorClient
from lockgate.executor.runtime.tasks import TaskPhase
from lockgate.executor.runtime.values import ExecutorSettings
from lockgate.executor.worker import Worker
from tests.support.waits import wait_for
from tests.unit.executor_runtime.runtime_doubles import (
    WAIT_S,
    BlockingDataPlane,
    FakeCoordinator,
)


@pytest.fixture
def cluster() -> Iterator[tuple[Worker, FakeCoordinator, BlockingDataPlane]]:
    """A registered runtime whose task 0 of pipeline ``p`` is RUNNING."""
    timeline: list[str] = []
    coordinator = FakeCoordinator(timeline)
    data_plane = BlockingDataPlane(timeline)
    runtime = Worker(
        ExecutorSettings(
            executor_id="e1",
            advertised_address="127.0.0.1:1",
            coordinator_addresses=("127.0.0.1:2",),
            spark_master="local[1]",
            heartbeat_interval_ms=20,
        ),
        coordinator=GrpcCoordinatorClient(coordinator),  # type: ignore[arg-type]
        data_plane=data_plane,
    )
    runtime.start()
    wait_for(
        "task running",
        lambda: [v.phase for v in runtime.statuses()] == [TaskPhase.RUNNING],
        timeout_s=WAIT_S,
    )
    try:
        yield runtime, coordinator, data_plane
    finally:
        for release in data_plane.release.values():
            release.set()
        runtime.stop(deregister=False)
