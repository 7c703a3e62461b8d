"""The ``cluster`` fixture: a started :class:`Worker` with its test doubles."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace

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


def start_worker(
    tracer: trace.Tracer | None = None,
) -> tuple[Worker, FakeCoordinator, BlockingDataPlane]:
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
        tracer=tracer,
    )
    runtime.start()
    wait_for(
        "task running",
        lambda: [v.phase for v in runtime.statuses()] == [TaskPhase.RUNNING],
        timeout_s=WAIT_S,
    )
    return runtime, coordinator, data_plane


def stop_worker(runtime: Worker, data_plane: BlockingDataPlane) -> None:
    """Release every batch and stop the runtime."""
    for release in data_plane.release.values():
        release.set()
    runtime.stop(deregister=False)


@pytest.fixture
def cluster() -> Iterator[tuple[Worker, FakeCoordinator, BlockingDataPlane]]:
    """A registered runtime whose task 0 of pipeline ``p`` is RUNNING."""
    runtime, coordinator, data_plane = start_worker()
    try:
        yield runtime, coordinator, data_plane
    finally:
        stop_worker(runtime, data_plane)
