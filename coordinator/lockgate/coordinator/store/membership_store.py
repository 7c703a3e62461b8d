"""Executor membership: the `executors` table (address, session generation, heartbeats).

Each registration starts a new session (generation + 1); reports carrying an older
generation are refused (`domain/membership.py`).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from lockgate.common.model.ids import ExecutorId, Generation
from lockgate.coordinator.domain.errors import InvalidArgument, NotFound
from lockgate.coordinator.domain.lease import Fence
from lockgate.coordinator.domain.membership import ExecutorRecord, check_generation
from lockgate.coordinator.store.engine import Database, db_now_ms, read_now_ms
from lockgate.coordinator.store.rows import executor_record, read_executor
from lockgate.coordinator.store.tables import executors

#: Every executor, by id: what each pass of the leader reads (built once, as `rows`' reads).
_ALL_EXECUTORS = sa.select(executors).order_by(executors.c.executor_id)
#: And what each heartbeat writes.
_HEARTBEAT = (
    executors.update()
    .where(executors.c.executor_id == sa.bindparam("the_executor_id"))
    .values(last_heartbeat_ms=db_now_ms())
)


class MembershipStore:
    """The executors and their sessions."""

    def __init__(self, *, database: Database) -> None:
        self._db = database

    def register_executor(
        self, *, fence: Fence, executor_id: ExecutorId, address: str
    ) -> ExecutorRecord:
        """Start a new session for an executor: its generation grows by one. Leader-only.

        Reports carrying the previous generation are refused from now on.
        """
        if not executor_id:
            raise InvalidArgument.for_field("executor_id", "must not be empty")
        with self._db.transaction(fence=fence) as conn:
            updated = conn.execute(
                executors.update()
                .where(executors.c.executor_id == executor_id)
                .values(
                    address=address,
                    generation=executors.c.generation + 1,
                    registered_at_ms=db_now_ms(),
                    last_heartbeat_ms=db_now_ms(),
                )
            )
            if updated.rowcount == 0:
                conn.execute(
                    executors.insert().values(
                        executor_id=executor_id,
                        address=address,
                        generation=1,
                        registered_at_ms=db_now_ms(),
                        last_heartbeat_ms=db_now_ms(),
                    )
                )
            return read_executor(conn, executor_id)

    def heartbeat_executor(
        self, *, fence: Fence, executor_id: ExecutorId, generation: Generation
    ) -> ExecutorRecord:
        """Record a heartbeat; StaleGeneration if `generation` is not the current one.

        Leader-only.
        """
        with self._db.transaction(fence=fence) as conn:
            current = read_executor(conn, executor_id, for_update=True)
            check_generation(
                what=f"executor {executor_id}", reported=generation, current=current.generation
            )
            conn.execute(_HEARTBEAT, {"the_executor_id": executor_id})
            return read_executor(conn, executor_id)

    def deregister_executor(
        self, *, fence: Fence, executor_id: ExecutorId, generation: Generation
    ) -> None:
        """Remove an executor that shuts down cleanly (its tasks move at the next rebalance).

        Leader-only; StaleGeneration if a newer session of the same id exists.
        """
        with self._db.transaction(fence=fence) as conn:
            current = read_executor(conn, executor_id, for_update=True)
            check_generation(
                what=f"executor {executor_id}", reported=generation, current=current.generation
            )
            conn.execute(executors.delete().where(executors.c.executor_id == executor_id))

    def get_executor(self, *, executor_id: ExecutorId) -> ExecutorRecord:
        """One executor; NotFound if it never registered (or deregistered)."""
        with self._db.read() as conn:
            return read_executor(conn, executor_id)

    def find_executor(self, *, executor_id: ExecutorId) -> tuple[ExecutorRecord | None, int]:
        """One executor (None if not registered) and the database's clock at reading time:
        a heartbeat's session check, one row whatever the number of executors."""
        with self._db.read() as conn:
            try:
                record: ExecutorRecord | None = read_executor(conn, executor_id)
            except NotFound:
                record = None
            return record, read_now_ms(conn)

    def list_executors(self) -> tuple[list[ExecutorRecord], int]:
        """Every registered executor (id order) and the database's clock at reading time."""
        with self._db.read() as conn:
            return read_executors(conn), read_now_ms(conn)


def read_executors(conn: Connection) -> list[ExecutorRecord]:
    """Every registered executor, in id order."""
    return [executor_record(r) for r in conn.execute(_ALL_EXECUTORS)]
