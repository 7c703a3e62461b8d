"""Fixtures shared by the coordinator's process tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.coordinator.test_service_coordinator import CoordinatorCluster


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
def sqlite_cluster(tmp_path: Path) -> Iterator[CoordinatorCluster]:
    """Coordinator replicas on a SQLite file (tests whose database does not matter)."""
    running = CoordinatorCluster(tmp_path, f"sqlite:///{tmp_path / 'coordinator.db'}")
    try:
        yield running
    finally:
        running.stop_all()
