"""A replica that leads, over a SQLite file, with Kafka metadata faked (`FixedTopics`) and
its threads not started: the herder's rules and its work-loop passes, tested in process."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lockgate.common.model.ids import CoordinatorId
from lockgate.coordinator.herder import CoordinatorSettings, Herder
from lockgate.coordinator.herder.executors import ExecutorClient
from lockgate.coordinator.store import open_store
from tests.support.topics import FixedTopics


@contextmanager
def sqlite_leader(
    db_path: Path, *, executor_client: ExecutorClient | None = None, partitions: int = 2
) -> Iterator[Herder]:
    """Replica "c1" over the SQLite file `db_path`, its lease taken by hand; the executors
    are `executor_client` (None: the real gRPC client, for tests that call no executor);
    every topic has `partitions` partitions.
    No executor heartbeats unless a test does, so sessions last 5 minutes: with the default
    10 s, a test of many passes on a loaded machine saw its executor lapse and its tasks
    never triggered again."""
    store = open_store(f"sqlite:///{db_path}")
    herder = Herder(
        store=store,
        settings=CoordinatorSettings(
            coordinator_id=CoordinatorId("c1"),
            advertise="127.0.0.1:7071",
            lease_ms=60_000,
            session_timeout_ms=300_000,
        ),
        topics=FixedTopics(partitions=partitions),  # type: ignore[arg-type]
        executor_client=executor_client,
    )
    try:
        herder.lease_keeper.campaign()
        yield herder
    finally:
        store.close()
