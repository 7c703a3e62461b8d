"""Running the coordinator's Alembic migrations at start, safely from several replicas.

Replicas starting at once must not both create the tables. Each takes a lock first and
then runs `upgrade head`, which is a no-op for all but the first:
- PostgreSQL: a session-level advisory lock on the migration connection;
- SQLite: an exclusive `flock` on `<database file>.migrate.lock` (replicas sharing a SQLite
  file share a machine, so a file lock reaches them all).
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

VERSION_TABLE = "lockgate_coordinator_alembic_version"
"""Alembic's bookkeeping table; named so other services can share the database."""

_ADVISORY_LOCK_KEY = 0x4C6F636B67617465  # "Lockgate"; any constant all replicas agree on
_MIGRATIONS = Path(__file__).parent / "migrations"


def upgrade_to_head(engine: Engine) -> None:
    """Bring the database to the newest schema; safe to call from many processes at once."""
    with _migration_lock(engine), engine.connect() as connection:
        config = Config()
        config.set_main_option("script_location", str(_MIGRATIONS))
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
        connection.commit()


@contextlib.contextmanager
def _migration_lock(engine: Engine) -> Iterator[None]:
    if engine.dialect.name == "postgresql":
        with engine.connect() as lock_connection:
            _pg_lock(lock_connection)
            try:
                yield
            finally:
                lock_connection.execute(
                    text("SELECT pg_advisory_unlock(:key)"), {"key": _ADVISORY_LOCK_KEY}
                )
                lock_connection.commit()
        return
    database = engine.url.database
    if engine.dialect.name != "sqlite" or not database or database == ":memory:":
        yield  # a private in-memory database has no other replica to race with
        return
    lock_path = Path(f"{database}.migrate.lock")
    with lock_path.open("a") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


def _pg_lock(connection: Connection) -> None:
    connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": _ADVISORY_LOCK_KEY})
    connection.commit()
