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

Every session runs under `SessionTimeouts` derived from the lease (lock, statement and
idle-in-transaction timeouts and TCP keepalives on PostgreSQL, the busy timeout on SQLite),
so a leader paused or partitioned mid-write cannot block the other replicas past the
lease; a call cut short raises `Unavailable` (reason `DATABASE_BUSY`). A PostgreSQL server
that is down, restarting or cut off raises `Unavailable` too (reason `DATABASE_UNAVAILABLE`):
the pool's pre-ping drops dead connections, so calls succeed again once it is back.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import FunctionElement

from lockgate.common.model.ids import CoordinatorId, LeaderEpoch
from lockgate.coordinator.domain.errors import FencedError, InvalidArgument, Unavailable
from lockgate.coordinator.domain.lease import Fence, LeaseRecord
from lockgate.coordinator.store.tables import LEASE_ROW_ID, leader_lease
from lockgate.coordinator.store.write_turn import WriteTurn

_DATABASE_BUSY_SQLSTATES = frozenset({"57014", "55P03"})
"""PostgreSQL's query_canceled (statement_timeout) and lock_not_available (lock_timeout)."""

_DATABASE_GONE_SQLSTATE_PREFIXES = ("08", "57P")
"""PostgreSQL's connection exceptions (class 08) and a server shutting down, crashed or still
recovering (57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now)."""


def database_unreachable(exc: sa.exc.DBAPIError, *, dialect: str) -> bool:
    """Whether `exc` says the PostgreSQL server could not be reached or went away mid-call
    (refused or lost connection, a crash, a restart still recovering), as opposed to a
    refused statement. The pool drops such connections (`pool_pre_ping` tests the next
    one), so the call may be retried once the server is back."""
    if dialect != "postgresql":
        return False
    if exc.connection_invalidated:
        return True
    sqlstate = getattr(exc.orig, "sqlstate", None)
    if sqlstate is None:
        # psycopg raises an OperationalError without a SQLSTATE when the failure is the
        # connection's own (refused, reset, timed out): the server never answered.
        return isinstance(exc, sa.exc.OperationalError)
    return str(sqlstate).startswith(_DATABASE_GONE_SQLSTATE_PREFIXES)


@dataclass(frozen=True)
class SessionTimeouts:
    """How long one database call may take, all below the leader's lease, so that a
    leader paused or cut off in the middle of a write (or a replica stuck behind one)
    cannot hold the others past the lease: its statement fails, its locks go.

    - `lock_ms`: waiting for a row lock (PostgreSQL `lock_timeout`) or for SQLite's write
      lock (`busy_timeout`);
    - `statement_ms`: one statement (`statement_timeout`);
    - `idle_in_transaction_ms`: a session idle inside an open transaction (a paused
      leader's) is ended by the server, releasing its locks
      (`idle_in_transaction_session_timeout`);
    - `tcp_user_timeout_ms` and TCP keepalives every second: a connection to a server
      that vanished (a partition) fails instead of waiting for the kernel's minutes.
    """

    lock_ms: int
    statement_ms: int
    idle_in_transaction_ms: int
    tcp_user_timeout_ms: int

    @classmethod
    def within_lease(cls, lease_ms: int) -> SessionTimeouts:
        """Half the lease for locks, idle transactions and the TCP timeout, three quarters
        for a statement (which includes its lock waits)."""
        half = max(100, lease_ms // 2)
        return cls(
            lock_ms=half,
            statement_ms=max(150, lease_ms * 3 // 4),
            idle_in_transaction_ms=half,
            tcp_user_timeout_ms=half,
        )

    def postgresql_connect_args(self) -> dict[str, Any]:
        """libpq connection parameters (psycopg) that apply them to every session."""
        options = " ".join(
            f"-c {name}={value}"
            for name, value in (
                ("statement_timeout", self.statement_ms),
                ("lock_timeout", self.lock_ms),
                ("idle_in_transaction_session_timeout", self.idle_in_transaction_ms),
            )
        )
        return {
            "options": options,
            "keepalives": 1,
            "keepalives_idle": 1,
            "keepalives_interval": 1,
            "keepalives_count": max(1, self.tcp_user_timeout_ms // 1000),
            "tcp_user_timeout": self.tcp_user_timeout_ms,
            "connect_timeout": max(2, -(-self.statement_ms // 1000)),
        }


class db_now_ms(FunctionElement[int]):
    """The database's clock in integer milliseconds since the Unix epoch.

    Rendered per dialect: never a replica's own clock (DESIGN.md, leader lease).
    """

    type = sa.BigInteger()
    inherit_cache = True


_DB_NOW = sa.select(db_now_ms())


def read_now_ms(conn: Connection) -> int:
    """The database's clock now (`db_now_ms`), read on `conn`."""
    return int(conn.execute(_DB_NOW).scalar_one())


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


def create_engine(url: str, *, timeouts: SessionTimeouts | None) -> Engine:
    """Create an engine configured for the coordinator (WAL, busy timeout, explicit BEGIN,
    and on PostgreSQL its session timeouts and keepalives); `timeouts` None: none (the
    migrations, whose DDL may wait for another replica's)."""
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
        _configure_sqlite(
            engine, busy_timeout_ms=timeouts.lock_ms if timeouts else _MIGRATION_BUSY_TIMEOUT_MS
        )
        return engine
    connect_args = timeouts.postgresql_connect_args() if timeouts else {}
    engine = sa.create_engine(parsed, pool_pre_ping=True, connect_args=connect_args)
    _configure_postgresql(engine)
    return engine


_MIGRATION_BUSY_TIMEOUT_MS = 30_000
"""SQLite's wait for another replica migrating the same file at start."""


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


def _configure_postgresql(engine: Engine) -> None:
    # Lists (the bulk statements' one array per column, `bulk.py`) go in PostgreSQL's
    # binary array format: psycopg's text format quotes and escapes every element in
    # Python (a 100-string array: 212 us as text, 48 us binary; 3 ms of the leader's 81
    # per checkpoint in the PostgreSQL round trip: README, issue 14). A list whose items
    # are all None falls back to text (its element type is unknown).
    from psycopg.types.array import ListBinaryDumper  # PostgreSQL only: loaded here

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.adapters.register_dumper(list, ListBinaryDumper)


class Database:
    """The engine every sub-store shares, and its two kinds of transaction.

    Thread-safe (one connection per transaction).
    """

    def __init__(self, engine: Engine, *, timeouts: SessionTimeouts | None = None) -> None:
        self._engine = engine
        self._timeouts = timeouts
        # The threads of one replica take turns at writing here rather than in the
        # database (`write_turn.py`); other replicas still meet this one's writes there.
        self._write_turn = WriteTurn()

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine."""
        return self._engine

    @contextlib.contextmanager
    def read(self) -> Iterator[Connection]:
        """A read-only snapshot transaction."""
        with self._busy_as_unavailable(), self._engine.connect() as conn, conn.begin():
            yield conn

    @contextlib.contextmanager
    def transaction(self, *, fence: Fence | None, urgent: bool = False) -> Iterator[Connection]:
        """A write transaction; with a `fence`, conditional on the caller still leading
        (FencedError before anything is written otherwise). None only for the lease's own
        compare-and-set, which is its own condition, and for a replica's own presence row,
        which every replica writes, leader or not. `urgent` (the lease's renewal) takes the
        replica's next turn at writing, before every other waiting write."""
        with (
            self._write_turn.held(urgent=urgent),
            self._busy_as_unavailable(),
            self._engine.connect() as conn,
        ):
            conn.execution_options(lockgate_write=True)
            with conn.begin():
                if fence is not None:
                    _check_fence(conn, fence)
                yield conn

    def write_turn(self) -> contextlib.AbstractContextManager[None]:
        """This replica's turn at writing alone (re-entrant: `transaction` inside it takes
        it again), for a caller with work to finish after its transaction commits and
        before the next write begins (`in_flight.py`)."""
        return self._write_turn.held()

    @contextlib.contextmanager
    def _busy_as_unavailable(self) -> Iterator[None]:
        """A statement or lock wait cut short by the session timeouts is `Unavailable`
        (retry), not an internal error: another replica held a lock, or the database was
        slow, for longer than the lease allows. So is a database that cannot be reached
        (down, restarting, cut off): every replica waits for it, none crashes."""
        try:
            yield
        except sa.exc.DBAPIError as exc:
            if database_unreachable(exc, dialect=self._engine.dialect.name):
                raise Unavailable(
                    "the connection to the state database failed (the database is down,"
                    " restarting or cut off, or ended a session idle in its transaction):"
                    f" {_first_line(exc.orig)}; retry once it is back (a write cut short"
                    " may or may not have been committed)",
                    reason="DATABASE_UNAVAILABLE",
                    retry_after_seconds=1.0,
                ) from exc
            if not isinstance(exc, sa.exc.OperationalError):
                raise
            orig = exc.orig
            busy = getattr(orig, "sqlstate", None) in _DATABASE_BUSY_SQLSTATES or (
                "database is locked" in str(orig)
            )
            if not busy or self._timeouts is None:
                raise
            raise Unavailable(
                f"the state database did not answer within {self._timeouts.statement_ms} ms"
                " (a lock held by another replica or a paused leader, or a slow database);"
                " nothing was written; retry",
                reason="DATABASE_BUSY",
                retry_after_seconds=0.5,
            ) from exc

    def db_now_ms(self) -> int:
        """The database's clock, in milliseconds since the Unix epoch."""
        with self.read() as conn:
            return read_now_ms(conn)

    def close(self) -> None:
        """Release the connection pool."""
        self._engine.dispose()


def _first_line(error: BaseException | None) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


# Every fenced write checks the lease first, and the lease keeper reads it on every renewal:
# both statements built once (building one cost about twice executing it).
_FENCE = (
    sa.select(leader_lease.c.leader_epoch)
    .where(
        leader_lease.c.id == LEASE_ROW_ID,
        leader_lease.c.holder == sa.bindparam("holder"),
        leader_lease.c.leader_epoch == sa.bindparam("leader_epoch"),
        leader_lease.c.expires_at_ms > db_now_ms(),
    )
    .with_for_update(read=True)
)
_LEASE_ROW = sa.select(
    leader_lease.c.holder,
    leader_lease.c.holder_incarnation,
    leader_lease.c.holder_address,
    leader_lease.c.leader_epoch,
    leader_lease.c.expires_at_ms,
    db_now_ms().label("db_now"),
).where(leader_lease.c.id == LEASE_ROW_ID)


def _check_fence(conn: Connection, fence: Fence) -> None:
    row = conn.execute(_FENCE, {"holder": fence.holder, "leader_epoch": fence.leader_epoch}).first()
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
    row = conn.execute(_LEASE_ROW).one()
    return LeaseRecord(
        holder=CoordinatorId(row.holder) if row.holder is not None else None,
        holder_incarnation=row.holder_incarnation or "",
        holder_address=row.holder_address,
        leader_epoch=LeaderEpoch(int(row.leader_epoch)),
        expires_at_ms=int(row.expires_at_ms),
        db_now_ms=int(row.db_now),
    )
