"""Start schema registry processes for the integration tests (real subprocesses)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.processes import RegistryProcess, start_registry


@pytest.fixture
def registry_factory() -> Iterator[Callable[..., RegistryProcess]]:
    """Call with a database URL (and extra args) to start a registry; all stopped at the end."""
    started: list[RegistryProcess] = []

    def start(db_url: str, *extra_args: str) -> RegistryProcess:
        running = start_registry(db_url, *extra_args)
        started.append(running)
        return running

    yield start
    for running in started:
        running.stop()


@pytest.fixture
def sqlite_registry(
    registry_factory: Callable[..., RegistryProcess], tmp_path: Path
) -> RegistryProcess:
    """A registry on a fresh SQLite file."""
    return registry_factory(f"sqlite:///{tmp_path / 'registry.db'}")
