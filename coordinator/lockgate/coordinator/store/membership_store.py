"""Executor membership: the `executors` table (address, session generation, heartbeats).

Each registration starts a new session (generation + 1); reports carrying an older
generation are refused (`domain/membership.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from lockgate.common.model.ids import ExecutorId, Generation
from lockgate.coordinator.domain.errors import InvalidArgument
from lockgate.coordinator.domain.lease import Fence
from lockgate.coordinator.domain.membership import ExecutorRecord, check_generation
from lockgate.coordinator.store.engine import Database, db_now_ms, read_now_ms
from lockgate.coordinator.store.rows import (
    executor_not_registered,
    executor_record,
    read_executor,
    read_executors_by_id,
)
from lockgate.coordinator.store.tables import executors

#: Every executor, by id: what each pass of the leader reads (built once, as `rows`' reads).
_ALL_EXECUTORS = sa.select(executors).order_by(executors.c.executor_id)
#: And what each heartbeat writes.
_HEARTBEAT = (
    executors.update()
    .where(executors.c.executor_id == sa.bindparam("the_executor_id"))
    .values(last_heartbeat_ms=db_now_ms())
)


#: A heartbeat's session check, in its transaction (`heartbeat_executors`): the executor's
#: row, the generation the heartbeat reported and the database's clock; raises to refuse.
SessionCheck = Callable[[ExecutorRecord, Generation, int], None]


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

    def heartbeat_executors(
        self,
        *,
        fence: Fence,
        sessions: Sequence[tuple[ExecutorId, Generation]],
        check: SessionCheck,
    ) -> list[ExecutorRecord]:
        """Record a heartbeat of each session (executor id, generation), in one write
        transaction: heartbeats that arrive together share it (`Membership`).

        Each executor's row is read once and locked. NotFound if it is not registered; then
        `check` sees it with the reported generation and the database's clock, and raises to
        refuse; then StaleGeneration if the generation is not the current one. Any refusal
        writes nothing. Returns each session's executor as it was before its heartbeat.
        Leader-only.
        """
        ids = sorted({executor_id for executor_id, _ in sessions})
        with self._db.transaction(fence=fence) as conn:
            now_ms = read_now_ms(conn)
            found = {r.executor_id: r for r in read_executors_by_id(conn, ids, for_update=True)}
            for executor_id, generation in sessions:
                current = found.get(executor_id)
                if current is None:
                    raise executor_not_registered(executor_id)
                check(current, generation, now_ms)
                check_generation(
                    what=f"executor {executor_id}",
                    reported=generation,
                    current=current.generation,
                )
            conn.execute(_HEARTBEAT, [{"the_executor_id": executor_id} for executor_id in ids])
            return [found[executor_id] for executor_id, _ in sessions]

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

    def list_executors(self) -> tuple[list[ExecutorRecord], int]:
        """Every registered executor (id order) and the database's clock at reading time."""
        with self._db.read() as conn:
            return read_executors(conn), read_now_ms(conn)


def read_executors(conn: Connection) -> list[ExecutorRecord]:
    """Every registered executor, in id order."""
    return [executor_record(r) for r in conn.execute(_ALL_EXECUTORS)]
