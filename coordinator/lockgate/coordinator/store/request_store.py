"""Recorded answers of mutating calls, by `request_id` (`domain/requests.py` says what a
repeat means). Written by the leader only, fenced like every other write; read by any
replica, so a retry after a failover finds what the previous leader recorded.
"""

from __future__ import annotations

import sqlalchemy as sa

from lockgate.coordinator.domain.lease import Fence
from lockgate.coordinator.domain.requests import RecordedRequest
from lockgate.coordinator.store.engine import Database, db_now_ms
from lockgate.coordinator.store.tables import idempotent_requests


class RequestStore:
    """The answers of mutating calls that carried a request_id."""

    def __init__(self, *, database: Database) -> None:
        self._db = database

    def find(self, *, request_id: str, retention_ms: int) -> RecordedRequest | None:
        """The call recorded under `request_id` within the last `retention_ms`, if any."""
        with self._db.read() as conn:
            row = conn.execute(
                sa.select(idempotent_requests).where(
                    idempotent_requests.c.request_id == request_id,
                    idempotent_requests.c.created_at_ms > db_now_ms() - retention_ms,
                )
            ).first()
        if row is None:
            return None
        return RecordedRequest(
            request_id=row.request_id,
            method=row.method,
            request_hash=row.request_hash,
            response=bytes(row.response),
            created_at_ms=int(row.created_at_ms),
        )

    def record(
        self,
        *,
        fence: Fence,
        request_id: str,
        method: str,
        request_hash: str,
        response: bytes,
        retention_ms: int,
    ) -> None:
        """Record a call's answer under its request_id and prune the records older than
        `retention_ms`, in one transaction. Leader-only. A record of the same id left
        from beyond the retention is replaced."""
        with self._db.transaction(fence=fence) as conn:
            conn.execute(
                idempotent_requests.delete().where(
                    sa.or_(
                        idempotent_requests.c.created_at_ms <= db_now_ms() - retention_ms,
                        idempotent_requests.c.request_id == request_id,
                    )
                )
            )
            conn.execute(
                idempotent_requests.insert().values(
                    request_id=request_id,
                    method=method,
                    request_hash=request_hash,
                    response=response,
                    created_at_ms=db_now_ms(),
                )
            )
