"""A replica's view of who leads (the herder's lease keeper), over a SQLite file."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockgate.common.errors import NotLeader, Unavailable
from lockgate.common.model.ids import CoordinatorId
from lockgate.coordinator.domain.assignment import LeaderGap
from lockgate.coordinator.domain.lease import LeaseRecord
from lockgate.coordinator.domain.states import LeaseRole
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


def test_a_lease_regained_after_a_failed_attempt_notes_the_gap(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        leader = Herder(
            store=store,
            settings=CoordinatorSettings(
                coordinator_id=CoordinatorId("c1"), advertise="127.0.0.1:7071", lease_ms=60_000
            ),
        )
        keeper = leader.lease_keeper
        first = keeper.campaign()
        assert keeper.leader_gap is None  # no leader seen before this term
        renewed = keeper.campaign()
        assert keeper.leader_gap is None  # a renewal is the same term
        real = store.lease.try_acquire_lease

        def unreachable(**_kwargs: object) -> LeaseRecord:
            raise Unavailable("the state database is down", reason="DATABASE_UNAVAILABLE")

        store.lease.try_acquire_lease = unreachable  # type: ignore[method-assign]
        with pytest.raises(Unavailable):
            keeper.campaign()
        assert keeper.role is LeaseRole.FOLLOWER and keeper.leader_gap is None
        store.lease.try_acquire_lease = real  # type: ignore[method-assign]
        regained = keeper.campaign()
        assert regained.leader_epoch == first.leader_epoch  # the lease had not run out
        assert keeper.leader_gap == LeaderGap(
            started_ms=renewed.db_now_ms, ended_ms=regained.db_now_ms
        )
    finally:
        store.close()
