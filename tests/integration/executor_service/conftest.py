"""Fixtures: a scripted coordinator per test and a launcher of executor processes."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from tests.integration.executor_service.scripted import (
    CoordinatorServer,
    ExecutorProcess,
    ScriptedCoordinator,
    start_coordinator,
    start_executor,
)
from tests.support.waits import wait_for


@pytest.fixture
def coordinator() -> Iterator[CoordinatorServer]:
    """A scripted leader (epoch 1, generation 1, heartbeats every 200 ms), no tasks yet."""
    server = start_coordinator(ScriptedCoordinator())  # type: ignore[abstract]
    try:
        yield server
    finally:
        server.server.stop(0)


@pytest.fixture
def launch_executor(
    tmp_path: Path, coordinator: CoordinatorServer
) -> Iterator[Callable[..., ExecutorProcess]]:
    """``launch_executor(executor_id="e1", data_plane="none", failpoints="", extra_args=(),
    env=None)``: start an executor process against the scripted coordinator and wait until
    it registered."""
    started: list[ExecutorProcess] = []

    def launch(
        executor_id: str = "e1",
        *,
        data_plane: str = "none",
        failpoints: str = "",
        registered_timeout_s: float = 60.0,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> ExecutorProcess:
        before = len(coordinator.coordinator.registrations)
        executor = start_executor(
            executor_id=executor_id,
            coordinator_address=coordinator.address,
            log_path=tmp_path / f"{executor_id}-{len(started)}.log",
            data_plane=data_plane,
            failpoints=failpoints,
            extra_args=extra_args,
            env=env,
        )
        started.append(executor)
        wait_for(
            f"registration of executor {executor_id}",
            lambda: len(coordinator.coordinator.registrations) > before,
            timeout_s=registered_timeout_s,
            abort_if=executor.died,
        )
        return executor

    try:
        yield launch
    finally:
        for executor in started:
            executor.stop()
