"""The ``cluster`` fixture: a started :class:`Worker` with its test doubles."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lockgate.executor.worker import Worker
from tests.unit.executor_runtime.runtime_doubles import (
    BlockingDataPlane,
    FakeCoordinator,
    start_worker,
    stop_worker,
)


@pytest.fixture
def cluster() -> Iterator[tuple[Worker, FakeCoordinator, BlockingDataPlane]]:
    """A registered runtime whose task 0 of pipeline ``p`` is RUNNING."""
    runtime, coordinator, data_plane = start_worker()
    try:
        yield runtime, coordinator, data_plane
    finally:
        stop_worker(runtime, data_plane)
