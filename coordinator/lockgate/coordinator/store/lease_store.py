"""The leader lease: the one `leader_lease` row, acquired and renewed by compare-and-set.

The rules are in `domain/lease.py`; the fence check every leader write starts with is in
`engine.py`. Expiry is always computed from the database's clock inside the statement.
"""

from __future__ import annotations

import sqlalchemy as sa

from lockgate.common.model.ids import CoordinatorId
from lockgate.coordinator.domain.errors import InvalidArgument
from lockgate.coordinator.domain.lease import Fence, LeaseRecord
from lockgate.coordinator.store.engine import Database, db_now_ms, lease_row
from lockgate.coordinator.store.tables import LEASE_ROW_ID, leader_lease


class LeaseStore:
    """Who leads, with which epoch."""

    def __init__(self, *, database: Database) -> None:
        self._db = database

    def try_acquire_lease(
        self,
        *,
        holder: CoordinatorId,
        holder_address: str,
        lease_ms: int,
        incarnation: str = "",
    ) -> LeaseRecord:
        """Acquire or renew the lease in one compare-and-set statement; return the row after.

        Succeeds when the lease is free or expired (epoch + 1) or already held, unexpired,
        by this very process: `holder` *and* `incarnation` (renewal: epoch kept). A
        restarted replica is a new incarnation of the same id: it waits for its previous
        process's lease to expire and then leads with a new epoch, because that process may
        only be paused, not dead. The caller leads iff the returned row names it and its
        incarnation and `is_held`. Expiry = database clock + `lease_ms`, computed inside
        the statement.
        """
        if lease_ms <= 0:
            raise InvalidArgument.for_field("lease_ms", f"must be > 0, got {lease_ms}")
        now = db_now_ms()
        renewal = sa.and_(
            leader_lease.c.holder == holder,
            sa.func.coalesce(leader_lease.c.holder_incarnation, "") == incarnation,
            leader_lease.c.expires_at_ms > now,
        )
        with self._db.transaction(fence=None, urgent=True) as conn:
            conn.execute(
                leader_lease.update()
                .where(
                    leader_lease.c.id == LEASE_ROW_ID,
                    sa.or_(renewal, leader_lease.c.expires_at_ms <= now),
                )
                .values(
                    leader_epoch=sa.case(
                        (renewal, leader_lease.c.leader_epoch),
                        else_=leader_lease.c.leader_epoch + 1,
                    ),
                    holder=holder,
                    holder_incarnation=incarnation,
                    holder_address=holder_address,
                    expires_at_ms=now + lease_ms,
                )
            )
            return lease_row(conn)

    def release_lease(self, *, fence: Fence) -> None:
        """Give the lease up at once (graceful shutdown) so another replica need not wait.

        Leader-only. The epoch stays; the next holder's acquisition adds one.
        """
        with self._db.transaction(fence=fence) as conn:
            conn.execute(
                leader_lease.update()
                .where(leader_lease.c.id == LEASE_ROW_ID)
                .values(expires_at_ms=db_now_ms() - 1)
            )

    def read_lease(self) -> LeaseRecord:
        """The lease row and the database's clock (who leads, with which epoch)."""
        with self._db.read() as conn:
            return lease_row(conn)
