# ruff: noqa: F811 - the fixtures imported from test_store are redefined as test parameters
"""The store's session timeouts, on SQLite and PostgreSQL (issue 14, Also): a leader's write
that meets a lock another connection holds (a paused or partitioned replica mid-write)
fails within the lease, as `Unavailable`, instead of hanging."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable, Iterator

import pytest
import sqlalchemy as sa

from lockgate.common.errors import Unavailable
from lockgate.common.model.ids import CoordinatorId, PipelineId
from lockgate.coordinator.store import SqlStore, open_store
from tests.integration.coordinator.test_store import (
    lead,
    open_stores,  # noqa: F401 - fixture
    spec,
    store_url,  # noqa: F401 - fixture
)
from tests.support.waits import wait_for

LEASE_MS = 1_000


@contextlib.contextmanager
def lock_held_elsewhere(url: str) -> Iterator[None]:
    """Another connection holds the lock every leader write needs: SQLite's write lock, or
    PostgreSQL's row lock on the lease row (the fence check reads it FOR SHARE)."""
    if url.startswith("sqlite"):
        other = sqlite3.connect(sa.make_url(url).database or "", isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            other.execute("ROLLBACK")
            other.close()
        return
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn, conn.begin():
            conn.execute(sa.text("SELECT 1 FROM leader_lease FOR UPDATE"))
            yield
    finally:
        engine.dispose()


@pytest.mark.serial  # a time bound is the assertion
def test_a_lock_held_by_another_connection_fails_the_leaders_write_within_the_lease(
    open_stores: Callable[..., SqlStore], store_url: str
) -> None:
    store = open_stores(lease_ms=LEASE_MS)
    fence = lead(store, lease_ms=30_000)
    with lock_held_elsewhere(store_url):
        began = time.monotonic()
        with pytest.raises(Unavailable) as raised:
            store.pipelines.create_pipeline(fence=fence, spec=spec("blocked"))
        waited_s = time.monotonic() - began
    assert waited_s < LEASE_MS / 1000, f"the write waited {waited_s:.2f}s, past the lease"
    assert raised.value.reason == "DATABASE_BUSY"
    assert "nothing was written; retry" in raised.value.message
    # Once the lock is gone the same store writes again.
    store.pipelines.create_pipeline(fence=fence, spec=spec("blocked"))
    assert store.pipelines.get_pipeline(pipeline_id=PipelineId("blocked")).config_version == 1


@pytest.mark.postgres
def test_a_leader_paused_inside_a_write_past_the_idle_bound_loses_the_write_not_the_cluster(
    postgres_url: str,
) -> None:
    """PostgreSQL ends a session idle in its transaction after half the lease: the paused
    leader's locks go, a contender takes the lease, and the paused write never lands; the
    paused leader's call fails as `Unavailable` (its session is gone), not as an internal
    error."""
    old_store = open_store(postgres_url, lease_ms=LEASE_MS)
    new_store = open_store(postgres_url, lease_ms=LEASE_MS)
    try:
        old = lead(old_store, "c1", lease_ms=LEASE_MS)
        with pytest.raises(Unavailable), old_store.database.transaction(fence=old) as conn:
            # Paused after the fence check, past the lease and the idle bound.
            taken = wait_for(
                "a contender to take the lease",
                lambda: (
                    (
                        lease := new_store.lease.try_acquire_lease(
                            holder=CoordinatorId("c2"), holder_address="c2:7070", lease_ms=30_000
                        )
                    ).holder
                    == "c2"
                    and lease
                ),
                timeout_s=10,
            )
            conn.execute(sa.text("SELECT 1"))  # the server ended this session
        assert taken.leader_epoch == old.leader_epoch + 1
        assert new_store.pipelines.list_pipelines(page_size=10, page_token="")[0] == []
    finally:
        old_store.close()
        new_store.close()
