"""A replica's view of who leads (the herder's lease keeper), over a SQLite file."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockgate.common.errors import NotLeader
from lockgate.common.model.ids import CoordinatorId
from lockgate.coordinator.herder import CoordinatorSettings, Herder
from lockgate.coordinator.store import open_store


def test_a_follower_names_the_leader_from_the_lease_row(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        store.lease.try_acquire_lease(
            holder=CoordinatorId("c2"), holder_address="127.0.0.1:7072", lease_ms=60_000
        )
        follower = Herder(
            store=store,
            settings=CoordinatorSettings(
                coordinator_id=CoordinatorId("c1"), advertise="127.0.0.1:7071"
            ),
        )
        follower.lease_keeper.attempt()  # loses: c2 holds an unexpired lease
        with pytest.raises(NotLeader) as raised:
            follower.require_fence()
        assert raised.value.leader_address == "127.0.0.1:7072"
    finally:
        store.close()


def test_the_lease_keeper_makes_a_free_lease_ours(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        leader = Herder(
            store=store,
            settings=CoordinatorSettings(
                coordinator_id=CoordinatorId("c1"), advertise="127.0.0.1:7071", lease_ms=5_000
            ),
        )
        leader.lease_keeper.attempt()
        fence = leader.require_fence()
        assert (fence.holder, fence.leader_epoch) == ("c1", 1)
    finally:
        store.close()


def test_every_attempt_records_the_replica_leader_or_not(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        replicas = [
            Herder(
                store=store,
                settings=CoordinatorSettings(
                    coordinator_id=CoordinatorId(f"c{i}"), advertise=f"127.0.0.1:707{i}"
                ),
            )
            for i in (1, 2)
        ]
        for replica in replicas:
            replica.lease_keeper.attempt()
        first, _ = store.replicas.list_replicas()
        replicas[1].lease_keeper.attempt()
        views, lease = replicas[1].lease_keeper.replicas()
        assert [(v.record.coordinator_id, v.record.address, v.is_leader) for v in views] == [
            ("c1", "127.0.0.1:7071", True),
            ("c2", "127.0.0.1:7072", False),
        ]
        # The follower's second attempt wrote its row again (database clock, never back).
        seen = {str(v.record.coordinator_id): v.record.last_seen_ms for v in views}
        assert seen["c2"] is not None and seen["c2"] >= (first[1].last_seen_ms or 0)
        assert lease.holder == "c1"
    finally:
        store.close()
