"""The store's one engine: the SQLAlchemy engine, the database's clock, and transactions.

Every sub-store (`lease_store`, `membership_store`, `pipeline_store`, `checkpoint_store`,
`offset_store`) runs its statements inside `Database.transaction(fence=...)` (a write) or
`Database.read()` (a snapshot), so the fencing below is written once.

SQLite (a file in WAL mode shared by the replicas on one machine) or PostgreSQL, through
SQLAlchemy Core.

Fencing (see `domain/lease.py` for the rules): every state-changing transaction of the
leader takes its `Fence` and starts with `_check_fence`, which re-reads the lease row
*under a lock that keeps it from changing until the transaction ends*:
- SQLite: write transactions begin with `BEGIN IMMEDIATE`, taking the database's single
  write lock before the first read, so no other replica can change the lease row (or
  anything else) until this transaction commits or rolls back;
- PostgreSQL: `SELECT ... FROM leader_lease ... FOR SHARE`; a contender's acquiring
  `UPDATE` waits for this transaction, then re-evaluates its condition.
The check requires holder, epoch and an unexpired lease by the database's clock; on failure
nothing is written and `FencedError` is raised. Each check-then-write inside a transaction
also locks the rows it re-reads (`FOR UPDATE` on PostgreSQL: the pipeline row first, then
the rows under it, always in that order, so two leader threads cannot deadlock), and
conditional `UPDATE ... WHERE state = ...` statements check their row counts.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import FunctionElement

from lockgate.common.model.ids import CoordinatorId, LeaderEpoch
from lockgate.coordinator.domain.errors import FencedError, InvalidArgument
from lockgate.coordinator.domain.lease import Fence, LeaseRecord
from lockgate.coordinator.store.tables import LEASE_ROW_ID, leader_lease

DEFAULT_SQLITE_BUSY_TIMEOUT_MS = 10_000


class db_now_ms(FunctionElement[int]):
    """The database's clock in integer milliseconds since the Unix epoch.

    Rendered per dialect: never a replica's own clock (DESIGN.md, leader lease).
    """

    type = sa.BigInteger()
    inherit_cache = True


@compiles(db_now_ms, "sqlite")
def _db_now_sqlite(element: db_now_ms, compiler: SQLCompiler, **kw: Any) -> str:
    # julianday('now') has millisecond resolution; 2440587.5 is the Unix epoch's day.
    return "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"


@compiles(db_now_ms, "postgresql")
def _db_now_postgresql(element: db_now_ms, compiler: SQLCompiler, **kw: Any) -> str:
    # statement_timestamp(), not now(): now() is frozen at the start of the transaction,
    # which may be long before a fence check; clock_timestamp() would differ between the
    # several uses inside one compare-and-set statement.
    return "CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS BIGINT)"


def create_engine(url: str, *, sqlite_busy_timeout_ms: int) -> Engine:
    """Create an engine configured for the coordinator (WAL, busy timeout, explicit BEGIN)."""
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError as exc:
        raise InvalidArgument.for_field(
            "db",
            f"{url!r} is not a database URL; use sqlite:///path/to/file.db or "
            "postgresql+psycopg://user@host:port/database",
        ) from exc
    backend = parsed.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise InvalidArgument.for_field(
            "db", f"database {backend!r} is not supported; use sqlite or postgresql+psycopg"
        )
    if backend == "sqlite":
        engine = sa.create_engine(parsed)
        _configure_sqlite(engine, busy_timeout_ms=sqlite_busy_timeout_ms)
        return engine
    return sa.create_engine(parsed, pool_pre_ping=True)


def _configure_sqlite(engine: Engine, *, busy_timeout_ms: int) -> None:
    # pysqlite's own transaction handling issues a deferred BEGIN lazily before the first
    # write, which lets a fence check read the lease before another replica changes it.
    # Take control: autocommit at the driver level and our own BEGIN, IMMEDIATE for writes.
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        cursor.execute("PRAGMA journal_mode = WAL")
        # FULL: the COMPLETE row is a commit point; it must survive power loss, not only
        # a process crash.
        cursor.execute("PRAGMA synchronous = FULL")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        mode = "IMMEDIATE" if connection.get_execution_options().get("lockgate_write") else ""
        connection.exec_driver_sql(f"BEGIN {mode}".strip())


class Database:
    """The engine every sub-store shares, and its two kinds of transaction.

    Thread-safe (one connection per transaction).
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        # The threads of one replica take turns at writing here rather than in the
        # database: SQLite's busy handler retries a refused BEGIN IMMEDIATE only after
        # sleeping (up to 100 ms a try), and on PostgreSQL the row locks would queue them
        # anyway. Other replicas still meet this one's writes in the database.
        self._write_turn = threading.RLock()

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine."""
        return self._engine

    @contextlib.contextmanager
    def read(self) -> Iterator[Connection]:
        """A read-only snapshot transaction."""
        with self._engine.connect() as conn, conn.begin():
            yield conn

    @contextlib.contextmanager
    def transaction(self, *, fence: Fence | None) -> Iterator[Connection]:
        """A write transaction; with a `fence`, conditional on the caller still leading
        (FencedError before anything is written otherwise). None only for the lease's own
        compare-and-set, which is its own condition, and for a replica's own presence row,
        which every replica writes, leader or not."""
        with self._write_turn, self._engine.connect() as conn:
            conn.execution_options(lockgate_write=True)
            with conn.begin():
                if fence is not None:
                    _check_fence(conn, fence)
                yield conn

    def db_now_ms(self) -> int:
        """The database's clock, in milliseconds since the Unix epoch."""
        with self.read() as conn:
            return int(conn.execute(sa.select(db_now_ms())).scalar_one())

    def close(self) -> None:
        """Release the connection pool."""
        self._engine.dispose()


def _check_fence(conn: Connection, fence: Fence) -> None:
    row = conn.execute(
        sa.select(leader_lease.c.leader_epoch)
        .where(
            leader_lease.c.id == LEASE_ROW_ID,
            leader_lease.c.holder == fence.holder,
            leader_lease.c.leader_epoch == fence.leader_epoch,
            leader_lease.c.expires_at_ms > db_now_ms(),
        )
        .with_for_update(read=True)
    ).first()
    if row is not None:
        return
    current = lease_row(conn)
    raise FencedError(
        f"coordinator {fence.holder} (leader epoch {fence.leader_epoch}) no longer holds "
        f"the lease (holder {current.holder or 'none'}, epoch {current.leader_epoch}, "
        f"{'held' if current.is_held else 'expired'}); nothing was written",
        leader_address=current.holder_address if current.is_held else None,
    )


def lease_row(conn: Connection) -> LeaseRecord:
    """The lease row with the database's clock at reading time."""
    row = conn.execute(
        sa.select(
            leader_lease.c.holder,
            leader_lease.c.holder_incarnation,
            leader_lease.c.holder_address,
            leader_lease.c.leader_epoch,
            leader_lease.c.expires_at_ms,
            db_now_ms().label("db_now"),
        ).where(leader_lease.c.id == LEASE_ROW_ID)
    ).one()
    return LeaseRecord(
        holder=CoordinatorId(row.holder) if row.holder is not None else None,
        holder_incarnation=row.holder_incarnation or "",
        holder_address=row.holder_address,
        leader_epoch=LeaderEpoch(int(row.leader_epoch)),
        expires_at_ms=int(row.expires_at_ms),
        db_now_ms=int(row.db_now),
    )


def upsert(
    conn: Connection,
    table: sa.Table,
    rows: Sequence[Mapping[str, Any]],
    *,
    key: Sequence[str],
    stamp: str = "updated_at_ms",
) -> None:
    """Insert `rows`, or update those whose `key` exists, in one executemany statement;
    the `stamp` column is set from the database's clock."""
    if not rows:
        return
    columns = [c for c in rows[0] if c not in key]
    insert = (
        pg_dialect.insert(table)
        if conn.dialect.name == "postgresql"
        else sqlite_dialect.insert(table)
    )
    stmt = insert.values({stamp: db_now_ms()}).on_conflict_do_update(
        index_elements=list(key),
        set_={**{c: insert.excluded[c] for c in columns}, stamp: db_now_ms()},
    )
    conn.execute(stmt, [dict(r) for r in rows])
