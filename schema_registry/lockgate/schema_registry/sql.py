"""The SQL engine under the registry's store: engines, migrations, retried write transactions.

On SQLite every writing transaction starts with ``BEGIN IMMEDIATE`` (the database's one
writer lock), so writers queue instead of failing on a lock upgrade. A write that conflicts
(PostgreSQL serialization failure or deadlock, SQLite "locked", a unique-key race) is retried
whole, so the work function must decide again from what it reads.
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Connection, Engine

from lockgate.schema_registry import tables
from lockgate.schema_registry.errors import StoreUnavailableError
from lockgate.schema_registry.model import Subject

_LOG = logging.getLogger(__name__)
_T = TypeVar("_T")

#: How many times a writing transaction is retried after a conflict before giving up.
MAX_WRITE_ATTEMPTS = 30
#: PostgreSQL advisory lock key serialising concurrent migrations ("lockgate-sr" in hex-ish).
_MIGRATION_LOCK_KEY = 0x10C6A7E5


def default_database_url() -> str:
    """SQLite file under ``$LOCKGATE_HOME`` (or ``./.lockgate``): zero setup."""
    home = Path(os.environ.get("LOCKGATE_HOME", ".lockgate"))
    home.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{(home / 'schema_registry.db').resolve()}"


def create_db_engine(url: str) -> Engine:
    """An engine for ``url`` with the settings the registry needs (SQLite: WAL, immediate)."""
    if url.startswith("sqlite"):
        engine = sa.create_engine(url, connect_args={"timeout": 30.0, "check_same_thread": False})

        @sa.event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            # Let SQLAlchemy's "begin" event decide how transactions start (pysqlite's own
            # implicit BEGIN is deferred, which deadlocks two writers upgrading their locks).
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        @sa.event.listens_for(engine, "begin")
        def _on_begin(connection: Connection) -> None:
            if connection.get_execution_options().get("sqlite_write"):
                connection.exec_driver_sql("BEGIN IMMEDIATE")
            else:
                connection.exec_driver_sql("BEGIN")

        return engine
    return sa.create_engine(url, pool_size=8, max_overflow=8, pool_pre_ping=True)


def _is_retryable(exc: sa.exc.DBAPIError) -> bool:
    if isinstance(exc, sa.exc.IntegrityError):
        return True
    # PostgreSQL: serialization_failure / deadlock_detected; SQLite: database is locked.
    code = getattr(exc.orig, "sqlstate", None)
    if code in ("40001", "40P01"):
        return True
    return "locked" in str(exc.orig).lower()


class SqlStore:
    """Connections, migrations and transactions; :class:`SchemaStore` adds the registry's data."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._dialect = engine.dialect.name

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (for tests and shutdown)."""
        return self._engine

    def migrate(self) -> None:
        """Bring the tables to the newest Alembic revision (safe to run from several processes)."""
        script_location = str(resources.files("lockgate.schema_registry") / "migrations")
        config = Config()
        config.set_main_option("script_location", script_location)
        with self._engine.connect() as connection:
            if self._dialect == "postgresql":
                # Two registries starting together must not both create the tables.
                connection.exec_driver_sql(f"SELECT pg_advisory_lock({_MIGRATION_LOCK_KEY})")
                connection.commit()
            try:
                config.attributes["connection"] = connection
                command.upgrade(config, "head")
                connection.commit()
            finally:
                if self._dialect == "postgresql":
                    connection.exec_driver_sql(f"SELECT pg_advisory_unlock({_MIGRATION_LOCK_KEY})")
                    connection.commit()

    def close(self) -> None:
        """Release the connection pool."""
        self._engine.dispose()

    # --- transactions -------------------------------------------------------------------

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with self._engine.connect() as connection, connection.begin():
            yield connection

    def _write(self, work: Callable[[Connection], _T]) -> _T:
        """Run ``work`` in one writing transaction, retrying it whole after a conflict."""
        last: Exception | None = None
        for attempt in range(MAX_WRITE_ATTEMPTS):
            try:
                with self._engine.connect() as raw:
                    connection = raw.execution_options(sqlite_write=True)
                    with connection.begin():
                        return work(connection)
            except sa.exc.DBAPIError as exc:
                if not _is_retryable(exc):
                    raise
                last = exc
                # Jittered backoff so racing writers do not collide again in lock step.
                time.sleep(random.uniform(0, 0.002 * (attempt + 1)))
        # The driver's text holds SQL and parameters (schema text): logged, never sent.
        _LOG.warning("write given up after %d attempts: %s", MAX_WRITE_ATTEMPTS, last)
        raise StoreUnavailableError(
            f"the database kept reporting conflicts after {MAX_WRITE_ATTEMPTS} attempts;"
            " try again (the registry's log has the database's error)"
        )

    # One row per subject ("" for the global setting) in a (subject, value) table.

    def _get_setting(self, column: sa.Column[Any], subject: Subject | None) -> str | None:
        key = tables.GLOBAL_CONFIG_KEY if subject is None else subject
        with self._read() as connection:
            value = connection.execute(
                sa.select(column).where(column.table.c.subject == key)
            ).scalar()
        return None if value is None else str(value)

    def _effective_setting(self, column: sa.Column[Any], subject: Subject) -> str | None:
        """The subject's value, else the global one, else None: one query for both."""
        keys = (subject, tables.GLOBAL_CONFIG_KEY)
        with self._read() as connection:
            rows = dict(
                connection.execute(
                    sa.select(column.table.c.subject, column).where(
                        column.table.c.subject.in_(keys)
                    )
                ).all()
            )
        value = rows.get(subject, rows.get(tables.GLOBAL_CONFIG_KEY))
        return None if value is None else str(value)

    def _set_setting(
        self,
        column: sa.Column[Any],
        subject: Subject | None,
        value: str,
        *,
        guard: Callable[[Connection], None] | None = None,
    ) -> None:
        key = tables.GLOBAL_CONFIG_KEY if subject is None else subject
        table = column.table

        def work(connection: Connection) -> None:
            if guard is not None:
                guard(connection)
            updated = connection.execute(
                sa.update(table).where(table.c.subject == key).values({column.name: value})
            ).rowcount
            if not updated:
                # A racing insert makes this fail with IntegrityError: _write retries, updates.
                connection.execute(sa.insert(table).values({"subject": key, column.name: value}))

        self._write(work)

    def _delete_setting(self, column: sa.Column[Any], subject: Subject | None) -> str | None:
        key = tables.GLOBAL_CONFIG_KEY if subject is None else subject
        table = column.table

        def work(connection: Connection) -> str | None:
            value = connection.execute(sa.select(column).where(table.c.subject == key)).scalar()
            connection.execute(sa.delete(table).where(table.c.subject == key))
            return None if value is None else str(value)

        return self._write(work)
