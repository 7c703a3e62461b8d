"""Where the local cluster keeps its state: SQLite files in the home, or one PostgreSQL server.

``LOCKGATE_DB=sqlite`` (the default) gives the coordinators ``coordinator.db`` and the schema
registry ``schema-registry.db``, both in the home. ``LOCKGATE_DB=postgres`` adds a process
``postgres`` to the cluster, started before the registry: a PostgreSQL server on
``127.0.0.1:$LOCKGATE_POSTGRES_PORT`` (default 5433, beside a system server on 5432) with its
data in ``<home>/postgres`` (``python -m lockgate.localcluster.postgres``, the same code that
starts the tests' throwaway servers). It is ready once it accepts connections and the two
databases exist, ``lockgate_coordinator`` (the three coordinators) and
``lockgate_schema_registry`` (the registry), created on its first start. While it runs,
``cluster.py`` lists it whatever ``LOCKGATE_DB`` says, so ``down`` stops it.
"""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import psycopg
from psycopg import sql

from lockgate.localcluster.ports import LOOPBACK
from lockgate.localcluster.process import ProcessSpec

DB_ENV = "LOCKGATE_DB"
POSTGRES_PORT_ENV = "LOCKGATE_POSTGRES_PORT"
#: Not 5432: a PostgreSQL installed from the distribution's packages may listen there.
POSTGRES_PORT = 5433
#: Name of the server's pid and log files (``run/postgres.pid``).
POSTGRES = "postgres"
#: The superuser ``initdb`` creates; loopback connections are trusted (a local cluster).
SUPERUSER = "postgres"
COORDINATOR_DATABASE = "lockgate_coordinator"
REGISTRY_DATABASE = "lockgate_schema_registry"


class DatabaseKind(Enum):
    """The values of ``$LOCKGATE_DB``."""

    SQLITE = "sqlite"
    POSTGRES = "postgres"


@dataclass(frozen=True)
class LocalDatabases:
    """The local cluster's databases: their kind, and the PostgreSQL server's port."""

    home: Path
    kind: DatabaseKind = DatabaseKind.SQLITE
    postgres_port: int = POSTGRES_PORT

    @classmethod
    def from_env(cls, home: Path) -> LocalDatabases:
        """From ``$LOCKGATE_DB`` and ``$LOCKGATE_POSTGRES_PORT``; SystemExit names a bad one."""
        raw = os.environ.get(DB_ENV, "").strip().lower() or DatabaseKind.SQLITE.value
        try:
            kind = DatabaseKind(raw)
        except ValueError:
            raise SystemExit(f"error: ${DB_ENV} must be sqlite or postgres, got {raw!r}") from None
        port_text = os.environ.get(POSTGRES_PORT_ENV, "").strip() or str(POSTGRES_PORT)
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise SystemExit(
                f"error: ${POSTGRES_PORT_ENV} must be a TCP port number, got {port_text!r}"
            )
        return cls(home=home, kind=kind, postgres_port=int(port_text))

    @property
    def postgres_address(self) -> str:
        """``127.0.0.1:PORT`` of the PostgreSQL server."""
        return f"{LOOPBACK}:{self.postgres_port}"

    def _url(self, *, sqlite_file: str, database: str) -> str:
        if self.kind is DatabaseKind.SQLITE:
            return f"sqlite:///{self.home / sqlite_file}"
        return f"postgresql+psycopg://{SUPERUSER}@{self.postgres_address}/{database}"

    @property
    def coordinator_url(self) -> str:
        """The coordinators' shared state database."""
        return self._url(sqlite_file="coordinator.db", database=COORDINATOR_DATABASE)

    @property
    def registry_url(self) -> str:
        """The schema registry's database."""
        return self._url(sqlite_file="schema-registry.db", database=REGISTRY_DATABASE)


def _databases_ready(port: int) -> bool:
    """True once the server accepts connections and Lockgate's databases exist (this creates
    those that do not)."""
    dsn = f"host={LOOPBACK} port={port} user={SUPERUSER} dbname=postgres"
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as conn:
            present = {row[0] for row in conn.execute("SELECT datname FROM pg_database")}
            for name in (COORDINATOR_DATABASE, REGISTRY_DATABASE):
                if name not in present:
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    except psycopg.OperationalError:
        return False
    return True


def postgres_spec(databases: LocalDatabases) -> ProcessSpec:
    """The PostgreSQL server of ``LOCKGATE_DB=postgres``, data in ``<home>/postgres``."""
    port = databases.postgres_port
    return ProcessSpec(
        name=POSTGRES,
        argv=(
            sys.executable,
            "-m",
            "lockgate.localcluster.postgres",
            "--base-dir",
            str(databases.home / POSTGRES),
            "--port",
            str(port),
        ),
        address=databases.postgres_address,
        ports=(port,),
        ready=lambda: _databases_ready(port),
        # initdb on the first start, then recovery after a crash.
        ready_timeout_s=120.0,
        stop_signal=signal.SIGINT,
        stop_grace_s=30.0,
    )
