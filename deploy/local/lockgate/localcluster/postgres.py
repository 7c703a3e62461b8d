"""A real PostgreSQL server in a temporary directory, for tests and the local cluster.

``PostgresCluster`` runs ``initdb`` (trust authentication, loopback only), starts
``postgres`` on a free port of 127.0.0.1 (or of ``host``, with clients of the ``allow_from``
networks trusted too: a test's network namespace) with its Unix socket inside the cluster
directory,
waits until it accepts connections, and hands out databases as SQLAlchemy URLs. ``stop``
does a fast shutdown (SIGINT: roll back open transactions, checkpoint, exit) and removes
the directory it created. For fault tests, ``kill`` crashes a ``durable`` server (SIGKILL to
the postmaster and its backends) and ``restart`` starts it again on the same data directory
and port.

PostgreSQL refuses to run as root. When this process is root (as in CI containers) the
server runs as an unprivileged system user (``postgres`` if it exists, else ``nobody``),
and the cluster directory is owned by that user.
"""

from __future__ import annotations

import argparse
import glob
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import NoReturn

import psycopg
from psycopg import sql

from lockgate.localcluster.ports import free_port

_DATABASE_NAME_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_UNPRIVILEGED_USERS = ("postgres", "nobody")
_DEFAULT_SUPERUSER = "postgres"


class PostgresError(RuntimeError):
    """PostgreSQL could not be found, initialised, started or used; the message says why."""


@dataclass(frozen=True)
class _RunAs:
    """The OS account the server runs as (None fields: this process's own)."""

    user: str | None
    uid: int | None
    gid: int | None


def find_postgres_bindir() -> Path:
    """The directory holding ``initdb`` and ``postgres``.

    Looks at ``$LOCKGATE_PG_BINDIR``, ``pg_config --bindir``, the newest
    ``/usr/lib/postgresql/*/bin``, then ``PATH``.
    """
    candidates: list[Path] = []
    override = os.environ.get("LOCKGATE_PG_BINDIR")
    if override:
        candidates.append(Path(override))
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, check=True, timeout=10
            )
            candidates.append(Path(out.stdout.strip()))
        except (subprocess.SubprocessError, OSError):
            pass

    def version_key(path: str) -> tuple[int, ...]:
        digits = re.findall(r"\d+", Path(path).parent.name)
        return tuple(int(d) for d in digits)

    candidates.extend(
        Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version_key)[::-1]
    )
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(on_path).parent)
    for directory in candidates:
        if (directory / "initdb").is_file() and (directory / "postgres").is_file():
            return directory
    raise PostgresError(
        "PostgreSQL server binaries (initdb, postgres) not found in $LOCKGATE_PG_BINDIR, "
        "`pg_config --bindir`, /usr/lib/postgresql/*/bin or PATH; install them with "
        "`apt-get install postgresql` (Debian/Ubuntu) or set LOCKGATE_PG_BINDIR"
    )


def _run_as() -> _RunAs:
    if os.geteuid() != 0:
        return _RunAs(user=None, uid=None, gid=None)
    for name in _UNPRIVILEGED_USERS:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        return _RunAs(user=name, uid=entry.pw_uid, gid=entry.pw_gid)
    raise PostgresError(
        "running as root, and PostgreSQL refuses to run as root, but neither a 'postgres' "
        "nor a 'nobody' user exists to run it as; create one (`useradd --system postgres`) "
        "or run as a non-root user"
    )


def check_database_name(name: str) -> str:
    """Return ``name`` if it is a plain lowercase identifier, else raise ``ValueError``."""
    if not _DATABASE_NAME_RE.match(name):
        raise ValueError(
            f"database name {name!r} is invalid: use 1-63 characters of a-z, 0-9 and _, "
            "starting with a letter or _"
        )
    return name


def unique_database_name(prefix: str = "lockgate") -> str:
    """A fresh database name: ``prefix`` (sanitised, shortened) plus a random suffix."""
    cleaned = re.sub(r"[^a-z0-9_]+", "_", prefix.lower()).strip("_") or "db"
    if not re.match(r"^[a-z_]", cleaned):
        cleaned = f"db_{cleaned}"
    return f"{cleaned[:48]}_{uuid.uuid4().hex[:12]}"


class PostgresCluster:
    """One PostgreSQL server (a "cluster" in PostgreSQL's words) run by this process.

    Use as a context manager, or call ``start()`` then ``stop()``. With ``base_dir`` None a
    temporary directory is created and removed by ``stop()``; with a ``base_dir`` the data
    is kept, and an already initialised directory is reused.
    """

    def __init__(
        self,
        *,
        base_dir: Path | None = None,
        port: int | None = None,
        superuser: str = _DEFAULT_SUPERUSER,
        durable: bool = False,
        start_timeout_seconds: float = 60.0,
        host: str = "127.0.0.1",
        allow_from: Sequence[str] = (),
    ) -> None:
        self._requested_base_dir = base_dir
        self._requested_port = port
        self.superuser = superuser
        self._durable = durable
        self._start_timeout = start_timeout_seconds
        self.host = host
        self._allow_from = tuple(allow_from)
        self.port = 0
        self._base_dir: Path | None = None
        self._owns_dir = False
        self._process: subprocess.Popen[bytes] | None = None
        self._bindir: Path | None = None
        self._run_as = _RunAs(user=None, uid=None, gid=None)

    # -- paths ---------------------------------------------------------------------------

    @property
    def base_dir(self) -> Path:
        """The cluster's directory (data, socket and log live under it)."""
        if self._base_dir is None:
            raise PostgresError("the PostgreSQL cluster is not started; call start() first")
        return self._base_dir

    @property
    def data_dir(self) -> Path:
        """PGDATA."""
        return self.base_dir / "data"

    @property
    def socket_dir(self) -> Path:
        """Where the server's Unix socket lives (inside the cluster dir, not /var/run)."""
        return self.base_dir / "socket"

    @property
    def log_path(self) -> Path:
        """The server's log file."""
        return self.base_dir / "postgres.log"

    @property
    def pid(self) -> int | None:
        """The postmaster's pid while it runs."""
        return self._process.pid if self._process is not None else None

    # -- lifecycle -----------------------------------------------------------------------

    def _preexec(self) -> None:
        # Runs in the child between fork and exec: drop root before exec'ing PostgreSQL.
        if self._run_as.uid is not None and self._run_as.gid is not None:
            os.setgroups([])
            os.setgid(self._run_as.gid)
            os.setuid(self._run_as.uid)

    def _run(self, args: list[str], *, what: str) -> None:
        env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
        if self._run_as.user is not None:
            env["HOME"] = str(self.base_dir)
            env["USER"] = env["LOGNAME"] = self._run_as.user
        completed = subprocess.run(
            args,
            capture_output=True,
            env=env,
            cwd=self.base_dir,
            preexec_fn=self._preexec if self._run_as.uid is not None else None,
            timeout=120,
            check=False,
        )
        if completed.returncode != 0:
            output = (completed.stdout + completed.stderr).decode(errors="replace")
            raise PostgresError(f"{what} failed (exit {completed.returncode}):\n{output[-3000:]}")

    def _prepare_dir(self) -> None:
        if self._requested_base_dir is None:
            # Under the system temp dir: every user can traverse it, unlike pytest's
            # per-user 0700 directories, which the unprivileged server could not enter.
            self._base_dir = Path(tempfile.mkdtemp(prefix="lockgate-pg-"))
            self._owns_dir = True
        else:
            self._base_dir = self._requested_base_dir.resolve()
            self._base_dir.mkdir(parents=True, exist_ok=True)
        for sub in (self.base_dir, self.socket_dir):
            sub.mkdir(exist_ok=True)
            if self._run_as.uid is not None and self._run_as.gid is not None:
                os.chown(sub, self._run_as.uid, self._run_as.gid)
            os.chmod(sub, 0o700)
        if self._run_as.uid is not None:
            self._check_traversable()

    def _check_traversable(self) -> None:
        # The unprivileged user needs search (x) permission on every parent directory.
        for parent in self.base_dir.parents:
            mode = parent.stat().st_mode
            if not mode & 0o001 and parent.stat().st_uid != self._run_as.uid:
                raise PostgresError(
                    f"PostgreSQL must run as user {self._run_as.user!r} (not root) but that "
                    f"user cannot enter {parent} (mode {oct(mode & 0o777)}); put the cluster "
                    "directory somewhere world-traversable such as /tmp"
                )

    def _initdb(self) -> None:
        if (self.data_dir / "PG_VERSION").exists():
            return
        assert self._bindir is not None
        self._run(
            [
                str(self._bindir / "initdb"),
                "--pgdata",
                str(self.data_dir),
                "--username",
                self.superuser,
                "--auth-local=trust",
                "--auth-host=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-instructions",
                "--no-sync",
            ],
            what="initdb",
        )

    def _allow_clients(self) -> None:
        """Trust clients of the ``allow_from`` networks (initdb trusts loopback only)."""
        hba = self.data_dir / "pg_hba.conf"
        present = hba.read_text()
        missing = [
            f"host all all {network} trust\n"
            for network in self._allow_from
            if f"host all all {network} trust" not in present
        ]
        if missing:
            with hba.open("a") as conf:
                conf.writelines(missing)

    def _server_args(self) -> list[str]:
        assert self._bindir is not None
        settings = {
            "listen_addresses": self.host,
            "port": str(self.port),
            "unix_socket_directories": str(self.socket_dir),
            # The PostgreSQL sink pre-commits with PREPARE TRANSACTION (two-phase commit);
            # PostgreSQL disables it by default (0).
            "max_prepared_transactions": "64",
            "max_connections": "200",
            "shared_buffers": "64MB",
            "log_min_messages": "warning",
        }
        if not self._durable:
            # Tests kill processes, not machines: skipping fsync loses nothing there and
            # makes DDL-heavy tests several times faster.
            settings |= {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
        args = [str(self._bindir / "postgres"), "-D", str(self.data_dir)]
        for key, value in settings.items():
            args += ["-c", f"{key}={value}"]
        return args

    def _spawn(self) -> subprocess.Popen[bytes]:
        env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child, closed below
        try:
            return subprocess.Popen(
                self._server_args(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.base_dir,
                preexec_fn=self._preexec if self._run_as.uid is not None else None,
                # Own process group: a Ctrl-C aimed at pytest does not hit the server
                # before stop() shuts it down cleanly.
                start_new_session=True,
            )
        finally:
            log.close()

    def _log_tail(self, limit: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-limit:]
        except OSError:
            return "(no log)"

    def _wait_until_ready(self, process: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + self._start_timeout
        last_error = ""
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise PostgresError(
                    f"postgres exited with code {process.returncode} while starting on "
                    f"{self.host}:{self.port}; log {self.log_path}:\n{self._log_tail()}"
                )
            try:
                with psycopg.connect(self._dsn("postgres"), connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError as exc:
                last_error = str(exc).strip()
            # Poll interval of a readiness check with a deadline.
            time.sleep(0.05)
        raise PostgresError(
            f"postgres did not accept connections on {self.host}:{self.port} within "
            f"{self._start_timeout:.0f} s (last error: {last_error}); log "
            f"{self.log_path}:\n{self._log_tail()}"
        )

    def prepare(self) -> None:
        """Find the binaries, create the directory and run ``initdb`` unless it ran before.

        Idempotent. :meth:`start` calls it; so does ``python -m lockgate.localcluster.postgres``
        before :meth:`exec_server`.
        """
        self._bindir = find_postgres_bindir()
        self._run_as = _run_as()
        self._prepare_dir()
        try:
            self._initdb()
            self._allow_clients()
        except BaseException:
            self._cleanup_dir()
            raise

    def exec_server(self) -> NoReturn:
        """Replace this process by the server, as the unprivileged user when root.

        For the local cluster, whose supervisor (``process.py``) keeps the pid: the pid stays
        the same through ``exec``. Needs :meth:`prepare` first and the ``port`` given.
        """
        if self._bindir is None or self._requested_port is None:
            raise PostgresError("exec_server needs prepare() first and a port given")
        self.port = self._requested_port
        argv = self._server_args()
        if self._run_as.uid is not None:
            self._preexec()
        os.chdir(self.base_dir)
        os.execve(argv[0], argv, {**os.environ, "LC_ALL": "C", "LANG": "C"})

    def start(self) -> PostgresCluster:
        """Initialise (if needed) and start the server; return once it accepts connections."""
        if self._process is not None:
            return self
        self.prepare()
        try:
            # A free port can be taken between probing and binding: retry on a new one.
            attempts = 1 if self._requested_port else 5
            for attempt in range(attempts):
                self.port = self._requested_port or free_port(self.host)
                process = self._spawn()
                try:
                    self._wait_until_ready(process)
                except PostgresError:
                    self._terminate(process)
                    in_use = "already in use" in self._log_tail()
                    if in_use and attempt + 1 < attempts:
                        continue
                    if in_use:
                        raise PostgresError(
                            f"port {self.port} on {self.host} is already in use; choose "
                            "another port or stop the process holding it"
                        ) from None
                    raise
                self._process = process
                return self
            raise AssertionError("unreachable")
        except BaseException:
            self._cleanup_dir()
            raise

    def kill(self) -> None:
        """SIGKILL the postmaster and every backend at once, as a crash: no shutdown
        checkpoint, open transactions and sessions cut. The data directory and the port are
        kept for :meth:`restart`, whose start runs PostgreSQL's crash recovery.

        Only a ``durable`` cluster may be killed: without it ``synchronous_commit`` is off,
        and a crash loses the transactions committed in the last few hundred milliseconds,
        which no production server would."""
        if not self._durable:
            raise PostgresError(
                "killing a cluster started without durable=True would lose its last commits"
                " (synchronous_commit is off); start it with PostgresCluster(durable=True)"
            )
        process, self._process = self._process, None
        if process is None:
            raise PostgresError("the PostgreSQL cluster is not running; nothing to kill")
        # The server runs in its own session (see _spawn): its process group is the
        # postmaster and its backends, nothing else.
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)

    def restart(self) -> PostgresCluster:
        """Start the server again on the same data directory and port (after :meth:`kill`);
        return once it accepts connections (crash recovery done)."""
        if self._process is not None:
            return self
        if self._base_dir is None or not self.port:
            raise PostgresError("the PostgreSQL cluster was never started; call start() first")
        process = self._spawn()
        try:
            self._wait_until_ready(process)
        except PostgresError:
            self._terminate(process)
            raise
        self._process = process
        return self

    def _terminate(self, process: subprocess.Popen[bytes]) -> None:
        if process.poll() is not None:
            return
        # SIGINT is PostgreSQL's "fast" shutdown; SIGQUIT "immediate"; SIGKILL last.
        for sig, wait_seconds in ((signal.SIGINT, 30.0), (signal.SIGQUIT, 10.0)):
            process.send_signal(sig)
            try:
                process.wait(timeout=wait_seconds)
                return
            except subprocess.TimeoutExpired:
                continue
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)

    def _cleanup_dir(self) -> None:
        if self._owns_dir and self._base_dir is not None:
            shutil.rmtree(self._base_dir, ignore_errors=True)
            self._base_dir = None
            self._owns_dir = False

    def stop(self) -> None:
        """Fast shutdown; remove the directory if this object created it. Idempotent."""
        process, self._process = self._process, None
        if process is not None:
            self._terminate(process)
        self._cleanup_dir()

    def __enter__(self) -> PostgresCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- databases -----------------------------------------------------------------------

    def _dsn(self, database: str) -> str:
        return f"host={self.host} port={self.port} user={self.superuser} dbname={database}"

    def url(self, database: str = "postgres") -> str:
        """SQLAlchemy URL of ``database``: ``postgresql+psycopg://user@HOST:port/db``."""
        if self._process is None:
            raise PostgresError("the PostgreSQL cluster is not started; call start() first")
        check_database_name(database)
        return f"postgresql+psycopg://{self.superuser}@{self.host}:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """Create database ``name`` and return its SQLAlchemy URL.

        Raises ``ValueError`` for a name that is not a plain identifier and ``PostgresError``
        if it already exists.
        """
        check_database_name(name)
        if self._process is None:
            raise PostgresError("the PostgreSQL cluster is not started; call start() first")
        try:
            with psycopg.connect(self._dsn("postgres"), autocommit=True) as conn:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        except psycopg.errors.DuplicateDatabase:
            raise PostgresError(f"database {name!r} already exists; choose another name") from None
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """Drop database ``name`` if it exists, disconnecting its sessions first."""
        check_database_name(name)
        if self._process is None:
            return
        with psycopg.connect(self._dsn("postgres"), autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m lockgate.localcluster.postgres --base-dir DIR --port PORT``.

    Initialises ``DIR`` unless it was before, then becomes the server on ``127.0.0.1:PORT``
    (durable: fsync on, since the local cluster keeps its data across restarts). The local
    cluster runs it as the ``postgres`` process; it exits 1 with the reason when it cannot.
    """
    parser = argparse.ArgumentParser(
        prog="python -m lockgate.localcluster.postgres",
        description="Run a PostgreSQL server on 127.0.0.1 with its data under --base-dir.",
    )
    parser.add_argument("--base-dir", type=Path, required=True, help="data, socket, log")
    parser.add_argument("--port", type=int, required=True, help="TCP port on 127.0.0.1")
    args = parser.parse_args(argv)
    server = PostgresCluster(base_dir=args.base_dir, port=args.port, durable=True)
    try:
        server.prepare()
        server.exec_server()
    except (PostgresError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
    return 1


__all__ = [
    "PostgresCluster",
    "PostgresError",
    "check_database_name",
    "find_postgres_bindir",
    "main",
    "unique_database_name",
]

if __name__ == "__main__":
    sys.exit(main())
