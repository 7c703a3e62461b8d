"""The registry process: one store, the gRPC service and the REST facade.

``python -m lockgate.schema_registry --db URL --grpc 127.0.0.1:7090 --http 127.0.0.1:8081``.
Port 0 picks a free port; once both servers listen, one line goes to stdout:
``lockgate-schema-registry ready grpc=HOST:PORT http=HOST:PORT`` (tests and scripts wait for
it). SIGTERM / SIGINT stop both servers gracefully.
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType

import sqlalchemy as sa
import uvicorn

from lockgate.common.grpc_server import LockgateServer, ServerBindError, build_server
from lockgate.common.telemetry import setup_telemetry
from lockgate.schema_registry.avro_schema import DEFAULT_MAX_SCHEMA_BYTES
from lockgate.schema_registry.grpc_service import SERVICE_FULL_NAME, add_to_server
from lockgate.schema_registry.registry import SchemaRegistry
from lockgate.schema_registry.rest import RestApp
from lockgate.schema_registry.store import SchemaStore, create_db_engine, default_database_url

SERVICE_NAME = "lockgate-schema-registry"
DEFAULT_GRPC = "127.0.0.1:7090"
DEFAULT_HTTP = "127.0.0.1:8081"
_LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerOptions:
    """Command-line options of the registry process."""

    db_url: str
    grpc_listen: str
    http_listen: str
    max_schema_bytes: int
    grpc_workers: int


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
        default=8,
        help="gRPC worker threads (default 8: lookups are cheap, fewer threads contend less)",
    )
    args = parser.parse_args(argv)
    if args.max_schema_bytes < 1024:
        parser.error("--max-schema-bytes must be at least 1024")
    return ServerOptions(
        db_url=args.db or default_database_url(),
        grpc_listen=args.grpc,
        http_listen=args.http,
        max_schema_bytes=args.max_schema_bytes,
        grpc_workers=args.grpc_workers,
    )


def _safe_url(url: str) -> str:
    """The URL with its password masked, for messages."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return "<unparsable URL>"


def _bind_http(listen: str) -> socket.socket:
    host, _, port_text = listen.rpartition(":")
    if not host or not port_text.isdigit():
        raise SystemExit(f"--http {listen!r} is not HOST:PORT (e.g. {DEFAULT_HTTP})")
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    # proto=IPPROTO_TCP matters: asyncio only sets TCP_NODELAY on accepted sockets whose
    # proto says TCP, and without it Nagle + delayed ACK add ~40 ms to every response.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host.strip("[]"), int(port_text)))
    except OSError as exc:
        sock.close()
        raise SystemExit(
            f"{SERVICE_NAME} cannot listen on --http {listen}: {exc.strerror}; stop what holds"
            " it or choose another port"
        ) from None
    sock.listen(1024)
    return sock


def run(options: ServerOptions) -> int:
    """Migrate the database, serve gRPC and REST until SIGTERM/SIGINT; the exit status."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        store = SchemaStore(create_db_engine(options.db_url))
        store.migrate()
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, sa.exc.OperationalError) as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        print(
            f"{SERVICE_NAME}: cannot open the database --db {_safe_url(options.db_url)}: {reason}"
            " (SQLite: sqlite:////abs/path.db; PostgreSQL: postgresql+psycopg://user@host:5432/db)",
            file=sys.stderr,
        )
        return 2
    registry = SchemaRegistry(store, max_schema_bytes=options.max_schema_bytes)
    http_socket = _bind_http(options.http_listen)
    telemetry = setup_telemetry(SERVICE_NAME)
    try:
        grpc_server: LockgateServer = build_server(
            service_name=SERVICE_NAME,
            listen=options.grpc_listen,
            register=add_to_server(registry),
            service_full_names=[SERVICE_FULL_NAME],
            telemetry=telemetry,
            max_workers=options.grpc_workers,
            grace_seconds=5.0,
        )
    except ServerBindError as exc:
        http_socket.close()
        print(str(exc), file=sys.stderr)
        return 2
    config = uvicorn.Config(
        RestApp(registry, max_schema_bytes=options.max_schema_bytes),
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_keep_alive=30,
    )
    http_server = uvicorn.Server(config)
    http_host, http_port = http_socket.getsockname()[:2]
    ready_printer = threading.Thread(
        target=_announce_when_started,
        args=(http_server, f"{grpc_server.address}", f"{http_host}:{http_port}"),
        daemon=True,
    )
    ready_printer.start()

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


def _announce_when_started(server: uvicorn.Server, grpc_address: str, http_address: str) -> None:
    while not server.started and not server.should_exit:
        threading.Event().wait(0.02)
    if server.started:
        print(f"{SERVICE_NAME} ready grpc={grpc_address} http={http_address}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point (``lockgate-schema-registry``)."""
    return run(parse_args(argv))
