"""Every coordinator replica is listed with its role and whether it was seen lately."""

from __future__ import annotations

from lockgate.common.model.ids import CoordinatorId, LeaderEpoch
from lockgate.coordinator.domain.lease import LeaseRecord
from lockgate.coordinator.domain.replicas import ReplicaLiveness, ReplicaRecord, replica_views

LEASE_MS = 1_000
NOW = 1_000_000


def lease(holder: str | None, *, expires_at_ms: int = NOW + 500) -> LeaseRecord:
    return LeaseRecord(
        holder=CoordinatorId(holder) if holder else None,
        holder_address=f"{holder}:1" if holder else None,
        leader_epoch=LeaderEpoch(3),
        expires_at_ms=expires_at_ms,
        db_now_ms=NOW,
    )


def replica(coordinator_id: str, last_seen_ms: int) -> ReplicaRecord:
    return ReplicaRecord(CoordinatorId(coordinator_id), f"{coordinator_id}:1", last_seen_ms)


def test_every_replica_with_the_leader_from_the_lease_and_stale_ones_missing() -> None:
    views = replica_views(
        [
            replica("c3", NOW - 3 * LEASE_MS - 1),
            replica("c1", NOW - 200),
            replica("c2", NOW - 3 * LEASE_MS),
        ],
        lease("c1"),
        lease_ms=LEASE_MS,
    )
    assert [(v.record.coordinator_id, v.is_leader, v.liveness) for v in views] == [
        ("c1", True, ReplicaLiveness.ALIVE),
        ("c2", False, ReplicaLiveness.ALIVE),
        ("c3", False, ReplicaLiveness.MISSING),
    ]


def test_an_expired_lease_names_no_leader() -> None:
    views = replica_views(
        [replica("c1", NOW - 100)], lease("c1", expires_at_ms=NOW), lease_ms=LEASE_MS
    )
    assert [v.is_leader for v in views] == [False]


def test_a_holder_without_a_row_is_listed_from_the_lease() -> None:
    views = replica_views([replica("c2", NOW)], lease("c1"), lease_ms=LEASE_MS)
    first = views[0]
    assert (first.record.coordinator_id, first.record.address, first.record.last_seen_ms) == (
        "c1",
        "c1:1",
        None,
    )
    assert first.is_leader and first.liveness is ReplicaLiveness.ALIVE
