"""The store's session timeouts are derived from the lease and stay below it (issue 14, Also),
and a database that cannot be reached is told apart from a busy one or a refused statement."""

from __future__ import annotations

import sqlite3

import psycopg
import sqlalchemy as sa

from lockgate.coordinator.store.engine import SessionTimeouts, database_unreachable


def test_the_timeouts_are_below_the_lease() -> None:
    timeouts = SessionTimeouts.within_lease(3_000)
    assert (
        max(
            timeouts.lock_ms,
            timeouts.statement_ms,
            timeouts.idle_in_transaction_ms,
            timeouts.tcp_user_timeout_ms,
        )
        < 3_000
    )
    args = timeouts.postgresql_connect_args()
    assert "-c lock_timeout=1500" in args["options"]
    assert "-c idle_in_transaction_session_timeout=1500" in args["options"]
    assert args["keepalives"] == 1 and args["tcp_user_timeout"] == 1500


def _wrapped(
    orig: Exception, *, kind: type[sa.exc.DBAPIError] = sa.exc.OperationalError, lost: bool = False
) -> sa.exc.DBAPIError:
    return kind("SELECT 1", {}, orig, connection_invalidated=lost)


def test_a_server_that_is_down_restarting_or_gone_is_unreachable() -> None:
    # Refused before any answer (no SQLSTATE), a connection lost mid-call (SQLAlchemy
    # invalidates it), a server still in crash recovery (57P03), one shutting down (57P01).
    for error in (
        _wrapped(psycopg.OperationalError("connection refused")),
        _wrapped(psycopg.OperationalError("server closed the connection"), lost=True),
        _wrapped(psycopg.errors.CannotConnectNow("the database system is starting up")),
        _wrapped(psycopg.errors.AdminShutdown("terminating connection")),
    ):
        assert database_unreachable(error, dialect="postgresql"), error


def test_a_refused_statement_or_a_busy_database_is_not_unreachable() -> None:
    # A statement or lock timeout is DATABASE_BUSY; a constraint violation is a real error.
    for error in (
        _wrapped(psycopg.errors.QueryCanceled("statement timeout")),
        _wrapped(psycopg.errors.LockNotAvailable("lock timeout")),
        _wrapped(psycopg.errors.UniqueViolation("duplicate key"), kind=sa.exc.IntegrityError),
    ):
        assert not database_unreachable(error, dialect="postgresql"), error
    # SQLite is a local file: "locked" is busy, nothing is a server that went away.
    assert not database_unreachable(
        _wrapped(sqlite3.OperationalError("database is locked")), dialect="sqlite"
    )
