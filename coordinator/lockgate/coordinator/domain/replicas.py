"""Coordinator replicas as the cluster sees them (`GetClusterInfo`).

Rules:
- Every replica writes its own row (address, database clock) on each lease attempt, every
  lease/4; the lease row names only the leader, so this is how a replica knows the others.
- A replica seen within `MISSING_AFTER_LEASES` lease periods (by the database's clock) is
  ALIVE; one not seen for longer is MISSING (stopped, paused, or cut off from the
  database). Its row stays, so a replica removed for good keeps being listed as MISSING.
- The leader is the holder of an unexpired lease, whatever its own row says; a holder with
  no row (a replica of a version before the table) is listed from the lease row alone.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from lockgate.common.model.ids import CoordinatorId
from lockgate.coordinator.domain.lease import LeaseRecord

MISSING_AFTER_LEASES = 3


@dataclass(frozen=True)
class ReplicaRecord:
    """A replica's own row: where it serves and when it last wrote (database clock)."""

    coordinator_id: CoordinatorId
    address: str
    last_seen_ms: int | None
    """None only for a lease holder that never wrote a row."""


class ReplicaLiveness(enum.StrEnum):
    """Whether a replica has written its row lately."""

    ALIVE = "alive"
    MISSING = "missing"


@dataclass(frozen=True)
class ReplicaView:
    """One replica with its role and liveness."""

    record: ReplicaRecord
    is_leader: bool
    liveness: ReplicaLiveness


def replica_views(
    replicas: Sequence[ReplicaRecord], lease: LeaseRecord, *, lease_ms: int
) -> list[ReplicaView]:
    """Every replica, by id, with its role (from `lease`) and its liveness at the lease
    row's reading time (`lease.db_now_ms`)."""
    leader = lease.holder if lease.is_held else None
    records = {r.coordinator_id: r for r in replicas}
    if leader is not None and leader not in records:
        records[leader] = ReplicaRecord(leader, lease.holder_address or "", None)
    missing_after_ms = MISSING_AFTER_LEASES * lease_ms
    views: list[ReplicaView] = []
    for coordinator_id in sorted(records):
        record = records[coordinator_id]
        is_leader = coordinator_id == leader
        seen = record.last_seen_ms
        alive = is_leader or (seen is not None and lease.db_now_ms - seen <= missing_after_ms)
        views.append(
            ReplicaView(
                record=record,
                is_leader=is_leader,
                liveness=ReplicaLiveness.ALIVE if alive else ReplicaLiveness.MISSING,
            )
        )
    return views
