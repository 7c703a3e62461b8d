"""The registry process: one store, the gRPC service and the REST facade.

``python -m lockgate.schema_registry --db URL --grpc 127.0.0.1:7090 --http 127.0.0.1:8081``.
Port 0 picks a free port; once both servers listen, one line goes to stdout:
``lockgate-schema-registry ready grpc=HOST:PORT http=HOST:PORT`` (tests and scripts wait for
it). SIGTERM / SIGINT stop both servers gracefully.

``--metrics-listen HOST:PORT`` serves Prometheus metrics: worker ``i`` on ``PORT + i`` (each
worker counts its own calls; Prometheus sums the workers), one process on ``PORT``.

``--processes N`` (default: the number of usable cores) serves from N worker processes
sharing both ports with ``SO_REUSEPORT``: one Python process tops out near one core, and a
lookup by id costs a few hundred microseconds of Python per gRPC call. The process started
is then a supervisor: it migrates the database, checks both ports are free (naming the
holder if not), holds them while it forks the workers, prints the ready line once every
worker listens, forwards SIGTERM/SIGINT to them, and stops them all (exit 1) if one dies.
Workers die with the supervisor (``PR_SET_PDEATHSIG``), so stopping its pid stops them all.

Workers share nothing but the database: each has its own schema caches, which is safe
because a global id never changes meaning. The ``request_id`` memory of mutating gRPC calls
is per worker too: a retry that arrives on another connection may land on another worker
and run again (registration is idempotent anyway; a repeated delete answers "already
deleted"). Use ``--processes 1`` where that matters.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import logging
import os
import select
import signal
import socket
import ssl
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import sqlalchemy as sa
import uvicorn

from lockgate.common.auth import load_authenticator
from lockgate.common.grpc_server import (
    LockgateServer,
    ServerBindError,
    build_server,
)
from lockgate.common.metrics import Instruments
from lockgate.common.prometheus import (
    MetricsEndpoint,
    MetricsListenError,
    add_metrics_listen_argument,
    parse_metrics_listen,
)
from lockgate.common.security import (
    SecurityConfigError,
    ServerSecurity,
    add_server_security_arguments,
    server_security,
)
from lockgate.common.telemetry import (
    TelemetryConfigError,
    setup_telemetry,
    telemetry_config_from_env,
)
from lockgate.schema_registry.avro_schema import DEFAULT_MAX_SCHEMA_BYTES
from lockgate.schema_registry.grpc_service import SERVICE_FULL_NAME, add_to_server
from lockgate.schema_registry.listen import (
    DEFAULT_GRPC,
    DEFAULT_HTTP,
    SERVICE_NAME,
    Listen,
    ListenError,
    bind_http,
    parse_listen,
    reserve_ports,
    taken_message,
    tcp_socket,
)
from lockgate.schema_registry.lookups import LookupCounter
from lockgate.schema_registry.registry import SchemaRegistry
from lockgate.schema_registry.rest import RestApp
from lockgate.schema_registry.sql import create_db_engine, default_database_url
from lockgate.schema_registry.store import SchemaStore

#: gRPC handler threads per process. grpcio's sync server hands every call from its polling
#: thread to a handler thread and back, and each extra thread adds GIL hand-offs: a minimal
#: servicer cost 90-100 us of CPU per call with 2 threads, 110-150 us with 4 (2 loaded
#: cores). A registration waiting on the database releases the GIL, so the other thread
#: goes on serving lookups; with two waiting at once lookups queue behind them, so
#: write-heavy registries may want more (``--grpc-workers``).
DEFAULT_GRPC_WORKERS = 2
#: Most worker processes ``--processes`` defaults to, however many cores there are.
MAX_DEFAULT_PROCESSES = 8
#: Seconds the supervisor gives its workers to listen, and then to stop after SIGTERM.
WORKER_START_DEADLINE_S = 60.0
WORKER_STOP_GRACE_S = 10.0
_PR_SET_PDEATHSIG = 1
_LOG = logging.getLogger(__name__)


def default_processes() -> int:
    """Worker processes by default: one per core this process may use, at most 8."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_DEFAULT_PROCESSES))


@dataclass(frozen=True)
class ServerOptions:
    """Command-line options of the registry process."""

    db_url: str
    grpc_listen: str
    http_listen: str
    max_schema_bytes: int
    grpc_workers: int
    processes: int = 1
    metrics_listen: str | None = None
    """Worker i serves /metrics on this port + i (each worker's own counts)."""
    security: ServerSecurity = field(default_factory=ServerSecurity)
    """TLS (gRPC and HTTPS alike) and the ``--auth-tokens`` file."""


def parse_args(argv: Sequence[str] | None = None) -> ServerOptions:
    """Parse the command line; argparse exits with a usage message on bad input."""
    parser = argparse.ArgumentParser(
        prog=SERVICE_NAME,
        description="Lockgate schema registry: gRPC SchemaRegistryService and a"
        " Confluent-compatible REST API over one SQL store.",
    )
    parser.add_argument(
        "--db",
        default=None,
        help="SQLAlchemy URL (default: SQLite file under $LOCKGATE_HOME or ./.lockgate;"
        " PostgreSQL: postgresql+psycopg://user@host/db)",
    )
    parser.add_argument(
        "--grpc", default=DEFAULT_GRPC, help=f"gRPC HOST:PORT (default {DEFAULT_GRPC})"
    )
    parser.add_argument(
        "--http", default=DEFAULT_HTTP, help=f"REST HOST:PORT (default {DEFAULT_HTTP})"
    )
    parser.add_argument(
        "--max-schema-bytes",
        type=int,
        default=DEFAULT_MAX_SCHEMA_BYTES,
        help=f"largest schema accepted, in bytes (default {DEFAULT_MAX_SCHEMA_BYTES})",
    )
    parser.add_argument(
        "--grpc-workers",
        type=int,
        default=DEFAULT_GRPC_WORKERS,
        help=f"gRPC handler threads per process (default {DEFAULT_GRPC_WORKERS}: lookups are"
        " cheap, more threads contend for the GIL)",
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=None,
        help="worker processes serving both ports with SO_REUSEPORT (default: one per core,"
        f" now {default_processes()}; 1 serves from this process alone)",
    )
    add_metrics_listen_argument(parser)
    add_server_security_arguments(parser)
    args = parser.parse_args(argv)
    try:
        security = server_security(
            args, listen_hosts=[args.grpc.rpartition(":")[0], args.http.rpartition(":")[0]]
        )
        load_authenticator(security.auth_tokens)  # a broken file is refused at once
    except SecurityConfigError as exc:
        parser.error(str(exc))
    if args.metrics_listen is not None:
        try:
            parse_metrics_listen(args.metrics_listen)
        except MetricsListenError as exc:
            parser.error(str(exc))
    if args.max_schema_bytes < 1024:
        parser.error("--max-schema-bytes must be at least 1024")
    if args.grpc_workers < 1:
        parser.error(f"--grpc-workers must be at least 1, got {args.grpc_workers}")
    processes = default_processes() if args.processes is None else args.processes
    if not 1 <= processes <= 64:
        parser.error(f"--processes must be between 1 and 64, got {processes}")
    return ServerOptions(
        db_url=args.db or default_database_url(),
        grpc_listen=args.grpc,
        http_listen=args.http,
        max_schema_bytes=args.max_schema_bytes,
        grpc_workers=args.grpc_workers,
        processes=processes,
        metrics_listen=args.metrics_listen,
        security=security,
    )


def _safe_url(url: str) -> str:
    """The URL with its password masked, for messages."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return "<unparsable URL>"


def _open_store(db_url: str) -> SchemaStore | None:
    """The migrated store, or None after printing why the database cannot be used."""
    try:
        store = SchemaStore(create_db_engine(db_url))
        store.migrate()
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, sa.exc.OperationalError) as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        print(
            f"{SERVICE_NAME}: cannot open the database --db {_safe_url(db_url)}: {reason}"
            " (SQLite: sqlite:////abs/path.db; PostgreSQL: postgresql+psycopg://user@host:5432/db)",
            file=sys.stderr,
        )
        return None
    return store


def _setup_logging() -> None:
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s",
    )


def run(options: ServerOptions) -> int:
    """Migrate the database, serve gRPC and REST until SIGTERM/SIGINT; the exit status."""
    _setup_logging()
    try:
        parse_listen("--grpc", options.grpc_listen, DEFAULT_GRPC)
        parse_listen("--http", options.http_listen, DEFAULT_HTTP)
    except ListenError as exc:
        print(f"{SERVICE_NAME}: {exc}", file=sys.stderr)
        return 2
    try:
        # Configuration first: a bad OTEL_* value is refused before the database is migrated.
        telemetry_config_from_env(SERVICE_NAME)
    except TelemetryConfigError as exc:
        print(f"{SERVICE_NAME}: {exc}", file=sys.stderr)
        return 2
    if options.processes > 1:
        return _supervise(options)
    store = _open_store(options.db_url)
    if store is None:
        return 2
    http_socket = bind_http(options.http_listen)

    def announce(grpc_address: str, http_address: str) -> None:
        print(f"{SERVICE_NAME} ready grpc={grpc_address} http={http_address}", flush=True)

    return _serve(
        options,
        store=store,
        grpc_listen=options.grpc_listen,
        share_grpc_port=False,
        http_socket=http_socket,
        on_ready=announce,
    )


def _serve(
    options: ServerOptions,
    *,
    store: SchemaStore,
    grpc_listen: str,
    share_grpc_port: bool,
    http_socket: socket.socket,
    on_ready: Callable[[str, str], None],
    worker_index: int = 0,
) -> int:
    """Serve both APIs from this process until SIGTERM/SIGINT; the exit status."""
    registry = SchemaRegistry(store, max_schema_bytes=options.max_schema_bytes)
    try:
        endpoint = MetricsEndpoint.start_if_enabled(options.metrics_listen, index=worker_index)
    except MetricsListenError as exc:
        http_socket.close()
        store.close()
        print(f"{SERVICE_NAME}: {exc}", file=sys.stderr)
        return 2
    telemetry = setup_telemetry(SERVICE_NAME, metric_readers=endpoint.readers if endpoint else [])
    lookups = LookupCounter(Instruments(telemetry.meter()) if telemetry.records_metrics else None)
    try:
        grpc_server: LockgateServer = build_server(
            service_name=SERVICE_NAME,
            listen=grpc_listen,
            register=add_to_server(registry, lookups),
            service_full_names=[SERVICE_FULL_NAME],
            telemetry=telemetry,
            max_workers=options.grpc_workers,
            grace_seconds=5.0,
            reuse_port=share_grpc_port,
            security=options.security,
        )
    except ServerBindError as exc:
        http_socket.close()
        store.close()
        print(str(exc), file=sys.stderr)
        return 2
    config = uvicorn.Config(
        RestApp(
            registry,
            max_schema_bytes=options.max_schema_bytes,
            lookups=lookups,
            authenticator=load_authenticator(options.security.auth_tokens),
        ),
        log_level="warning",
        access_log=False,
        lifespan="on",
        # "auto" picks uvloop (a dependency) and httptools: measured ~25% less CPU per REST
        # lookup than asyncio's own loop.
        loop="auto",
        http="auto",
        timeout_keep_alive=30,
        **_https(options.security),
    )
    http_server = uvicorn.Server(config)
    http_host, http_port = http_socket.getsockname()[:2]
    ready_announcer = threading.Thread(
        target=_announce_when_started,
        args=(http_server, on_ready, grpc_server.address, f"{http_host}:{http_port}"),
        daemon=True,
    )
    ready_announcer.start()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        http_server.should_exit = True

    # uvicorn swaps in its own handlers while serving and, once stopped, re-raises the
    # signal to whatever handler was there before: with these, the re-raise lands here and
    # the process goes on to stop gRPC gracefully and exit 0 instead of dying by SIGTERM.
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        http_server.run(sockets=[http_socket])
    finally:
        grpc_server.stop(grace_seconds=2.0)
        telemetry.shutdown()
        store.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def _https(security: ServerSecurity) -> dict[str, Any]:
    """uvicorn's TLS settings: the gRPC server's certificate, and its client CA (mTLS)."""
    tls = security.tls
    if tls is None:
        return {}
    settings: dict[str, Any] = {"ssl_certfile": str(tls.cert), "ssl_keyfile": str(tls.key)}
    if tls.client_ca is not None:
        settings |= {"ssl_ca_certs": str(tls.client_ca), "ssl_cert_reqs": ssl.CERT_REQUIRED}
    return settings


def _announce_when_started(
    server: uvicorn.Server,
    on_ready: Callable[[str, str], None],
    grpc_address: str,
    http_address: str,
) -> None:
    while not server.started and not server.should_exit:
        threading.Event().wait(0.02)
    if server.started:
        on_ready(grpc_address, http_address)


# --- several worker processes ---------------------------------------------------------------


def _die_with_parent() -> None:
    """Ask Linux to SIGTERM this process when its parent dies (even by SIGKILL)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the supervisor's SIGTERM still reaches us
        pass


def _worker_main(
    options: ServerOptions,
    *,
    index: int,
    supervisor: int,
    grpc_listen: str,
    http: Listen,
    ready_fd: int,
) -> int:
    """Body of worker ``index`` (runs in the forked child); the exit status."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    _die_with_parent()
    if os.getppid() != supervisor:  # the supervisor died before prctl took effect
        return 1
    http_socket = tcp_socket(http)
    http_socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        http_socket.bind((http.host, http.port))
    except OSError as exc:
        http_socket.close()
        print(taken_message(http, exc, http.port), file=sys.stderr)
        return 2
    http_socket.listen(1024)
    store = SchemaStore(create_db_engine(options.db_url))

    def announce(grpc_address: str, http_address: str) -> None:
        os.write(ready_fd, f"{index}\n".encode())

    return _serve(
        options,
        store=store,
        grpc_listen=grpc_listen,
        share_grpc_port=True,
        http_socket=http_socket,
        on_ready=announce,
        worker_index=index,
    )


def _fork_worker(
    options: ServerOptions,
    *,
    index: int,
    grpc_listen: str,
    http: Listen,
    ready_fd: int,
    close: Sequence[int],
) -> int:
    """Fork worker ``index``; returns its pid (the child never returns). The child writes
    ``index`` and a newline to ``ready_fd`` once it serves, and closes the fds in ``close``."""
    supervisor = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        for fd in close:
            os.close(fd)
        code = _worker_main(
            options,
            index=index,
            supervisor=supervisor,
            grpc_listen=grpc_listen,
            http=http,
            ready_fd=ready_fd,
        )
    except BaseException:
        # A forked child must never unwind into the supervisor's code: report and exit.
        traceback.print_exc()
    finally:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    raise AssertionError("unreachable")  # pragma: no cover


def _exited(pid: int) -> int | None:
    """The exit status of child ``pid`` if it has exited (reaping it), else None."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return -1
    if done == 0:
        return None
    return os.waitstatus_to_exitcode(status)


def _stop_workers(workers: dict[int, int]) -> None:
    """SIGTERM every live worker, SIGKILL those still alive after the grace period."""
    for pid in workers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + WORKER_STOP_GRACE_S
    live = set(workers)
    while live:
        live = {pid for pid in live if _exited(pid) is None}
        if not live:
            break
        if time.monotonic() >= deadline:
            for pid in live:
                _LOG.warning(
                    "worker pid %d ignored SIGTERM for %.0fs: SIGKILL", pid, WORKER_STOP_GRACE_S
                )
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            for pid in live:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
            break
        time.sleep(0.05)


def _watch_workers(workers: dict[int, int], wake: threading.Event, stop_signal: list[int]) -> int:
    """Wait for a stop signal (exit 0) or a worker's death (exit 1: the registry stops)."""
    while not stop_signal:
        wake.wait(timeout=1.0)
        wake.clear()
        for pid in list(workers):
            code = _exited(pid)
            if code is not None and not stop_signal:
                del workers[pid]
                _LOG.error("worker pid %d exited with code %d; stopping the registry", pid, code)
                return 1
    _LOG.info("%s: %s received, stopping", SERVICE_NAME, signal.Signals(stop_signal[0]).name)
    return 0


def _announce_ready(workers: dict[int, int], *, grpc_listen: str, http: str) -> None:
    """Log the workers' pids and print the ready line the local cluster waits for."""
    pids = " ".join(str(pid) for pid in workers)
    _LOG.info("%s serving from %d worker processes: %s", SERVICE_NAME, len(workers), pids)
    print(f"{SERVICE_NAME} ready grpc={grpc_listen} http={http}", flush=True)


def _supervise(options: ServerOptions) -> int:
    """Run ``options.processes`` workers sharing both ports; the exit status."""
    try:
        grpc_at = parse_listen("--grpc", options.grpc_listen, DEFAULT_GRPC)
        http = parse_listen("--http", options.http_listen, DEFAULT_HTTP)
    except ListenError as exc:
        print(f"{SERVICE_NAME}: {exc}", file=sys.stderr)
        return 2
    store = _open_store(options.db_url)
    if store is None:
        return 2
    # Workers open their own connections: a pooled connection must not cross a fork.
    store.close()
    try:
        reservations = reserve_ports((http, grpc_at))
    except ListenError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    http = Listen(http.flag, http.text, http.host, reservations[0].getsockname()[1])
    grpc_listen = grpc_at.with_port(reservations[1].getsockname()[1])

    wake = threading.Event()
    stop_signal: list[int] = []

    def on_stop(signum: int, frame: FrameType | None) -> None:
        stop_signal.append(signum)
        wake.set()

    def on_child(signum: int, frame: FrameType | None) -> None:
        wake.set()

    read_fd, write_fd = os.pipe()
    write_open = True
    previous = {
        sig: signal.signal(sig, handler)
        for sig, handler in (
            (signal.SIGTERM, on_stop),
            (signal.SIGINT, on_stop),
            (signal.SIGCHLD, on_child),
        )
    }
    workers: dict[int, int] = {}  # pid -> index
    try:
        inherited = [read_fd, *(sock.fileno() for sock in reservations)]
        for index in range(options.processes):
            pid = _fork_worker(
                options,
                index=index,
                grpc_listen=grpc_listen,
                http=http,
                ready_fd=write_fd,
                close=inherited,
            )
            workers[pid] = index
        # Only the workers hold the write end now: the reads see EOF if they all die.
        os.close(write_fd)
        write_open = False
        if not _wait_until_ready(workers, read_fd, stop_signal, options.processes):
            return 0 if stop_signal else 2
        for sock in reservations:
            sock.close()  # the workers' listening sockets hold the ports from here on
        reservations.clear()
        _announce_ready(workers, grpc_listen=grpc_listen, http=http.with_port(http.port))
        return _watch_workers(workers, wake, stop_signal)
    finally:
        _stop_workers(workers)
        for sock in reservations:
            sock.close()
        os.close(read_fd)
        if write_open:
            os.close(write_fd)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _wait_until_ready(
    workers: dict[int, int], read_fd: int, stop_signal: list[int], expected: int
) -> bool:
    """Wait for every worker's ready report; False if one died, a signal came or time ran out."""
    ready: set[int] = set()
    pending = b""
    deadline = time.monotonic() + WORKER_START_DEADLINE_S
    while len(ready) < expected:
        if stop_signal:
            return False
        for pid in list(workers):
            code = _exited(pid)
            if code is not None:
                del workers[pid]
                print(
                    f"{SERVICE_NAME}: worker {pid} exited with code {code} while starting;"
                    " stopping (its message is above)",
                    file=sys.stderr,
                )
                return False
        if time.monotonic() >= deadline:
            print(
                f"{SERVICE_NAME}: only {len(ready)} of {expected} worker processes were serving"
                f" after {WORKER_START_DEADLINE_S:.0f}s; stopping",
                file=sys.stderr,
            )
            return False
        try:
            readable, _, _ = select.select([read_fd], [], [], 0.2)
        except InterruptedError:  # pragma: no cover - PEP 475 retries select itself
            continue
        if readable:
            chunk = os.read(read_fd, 4096)
            pending += chunk
            *lines, pending = pending.split(b"\n")
            ready.update(int(line) for line in lines if line.strip())
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point (``lockgate-schema-registry``)."""
    return run(parse_args(argv))
