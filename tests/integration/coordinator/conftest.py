"""Fixtures shared by the coordinator's process tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lockgate.localcluster.commands import executor_command
from lockgate.localcluster.ports import free_port
from tests.integration.coordinator.test_service_coordinator import CoordinatorCluster
from tests.support.processes import ChildProcess, start_child


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh state database: a SQLite file, or a PostgreSQL database of the fixture."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'coordinator.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.fixture
def cluster(tmp_path: Path, db_url: str) -> Iterator[CoordinatorCluster]:
    """Coordinator replicas for one test, stopped at its end."""
    running = CoordinatorCluster(tmp_path, db_url)
    try:
        yield running
    finally:
        running.stop_all()


@pytest.fixture
def control_executors(tmp_path: Path) -> Iterator[Callable[[str, list[str]], ChildProcess]]:
    """`start(executor_id, coordinator_addresses)`: an executor process running the control
    path only (`--data-plane none`), stopped at the test's end."""
    started: list[ChildProcess] = []

    def start(executor_id: str, coordinators: list[str]) -> ChildProcess:
        argv = executor_command(
            executor_id=executor_id,
            listen=f"127.0.0.1:{free_port()}",
            coordinators=coordinators,
            data_plane="none",
        )
        child = start_child(
            executor_id, argv, log_path=tmp_path / f"{executor_id}.log", cwd=tmp_path
        )
        started.append(child)
        return child

    try:
        yield start
    finally:
        for child in started:
            child.stop(grace_s=10)


@pytest.fixture
def sqlite_cluster(tmp_path: Path) -> Iterator[CoordinatorCluster]:
    """Coordinator replicas on a SQLite file (tests whose database does not matter)."""
    running = CoordinatorCluster(tmp_path, f"sqlite:///{tmp_path / 'coordinator.db'}")
    try:
        yield running
    finally:
        running.stop_all()
