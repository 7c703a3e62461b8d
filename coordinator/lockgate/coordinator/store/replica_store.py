"""The coordinator replicas: the `coordinators` table, one row per replica id.

Unlike every other write, a replica's own row is written by that replica whether it leads
or not (no fence): it says only "I am here, at this address", with the database's clock.
What a row means (alive, missing, leader) is decided in `domain/replicas.py`.
"""

from __future__ import annotations

import sqlalchemy as sa

from lockgate.common.model.ids import CoordinatorId
from lockgate.coordinator.domain.lease import LeaseRecord
from lockgate.coordinator.domain.replicas import ReplicaRecord
from lockgate.coordinator.store.bulk import upsert
from lockgate.coordinator.store.engine import Database, lease_row
from lockgate.coordinator.store.tables import coordinators


class ReplicaStore:
    """Which coordinator replicas exist and when each last showed it was alive."""

    def __init__(self, *, database: Database) -> None:
        self._db = database

    def record_replica(self, *, coordinator_id: CoordinatorId, address: str) -> None:
        """Write this replica's row: its address, last seen now (database clock). Any
        replica, for itself only. Urgent, as the lease's renewal: the lease keeper writes it
        between two renewals, so a write queued behind the others would delay the next."""
        with self._db.transaction(fence=None, urgent=True) as conn:
            upsert(
                conn,
                coordinators,
                [{"coordinator_id": coordinator_id, "address": address}],
                key=["coordinator_id"],
                stamp="last_seen_ms",
            )

    def list_replicas(self) -> tuple[list[ReplicaRecord], LeaseRecord]:
        """Every replica's row (id order) and the lease row, read in one snapshot (the
        lease carries the database's clock at reading time)."""
        with self._db.read() as conn:
            rows = conn.execute(
                sa.select(coordinators).order_by(coordinators.c.coordinator_id)
            ).all()
            records = [
                ReplicaRecord(
                    coordinator_id=CoordinatorId(r.coordinator_id),
                    address=r.address,
                    last_seen_ms=int(r.last_seen_ms),
                )
                for r in rows
            ]
            return records, lease_row(conn)
