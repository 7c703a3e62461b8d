"""The coordinator process: `python -m lockgate.coordinator --id c1 ...` (`lockgate-coordinator`).

Opens the store (running Alembic migrations first: safe from several replicas at once),
serves CoordinatorService (`api/`) with health and reflection, and runs the herder (the
lease keeper and the leader's work loop, `herder/`) until SIGTERM or SIGINT, then gives
the lease up so another replica takes over at once.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import sqlalchemy as sa

from lockgate.common.errors import LockgateError, Unavailable
from lockgate.common.failpoints import FailpointConfigError, Failpoints
from lockgate.common.grpc_server import ServerBindError, build_server
from lockgate.common.metrics import Instruments
from lockgate.common.model.ids import CoordinatorId
from lockgate.common.prometheus import (
    MetricsListenError,
    add_metrics_listen_argument,
    start_telemetry,
)
from lockgate.common.security import (
    ClientSecurity,
    SecurityConfigError,
    ServerSecurity,
    add_client_security_arguments,
    add_server_security_arguments,
    client_security,
    server_security,
)
from lockgate.common.telemetry import Telemetry, TelemetryConfigError
from lockgate.coordinator.api import CoordinatorServicer
from lockgate.coordinator.domain.assignment import (
    DEFAULT_REASSIGN_DELAY_MS,
    DEFAULT_SESSION_TIMEOUT_MS,
)
from lockgate.coordinator.domain.history import DEFAULT_CHECKPOINT_HISTORY
from lockgate.coordinator.domain.lease import DEFAULT_LEASE_MS
from lockgate.coordinator.herder import (
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    CoordinatorSettings,
    Herder,
)
from lockgate.coordinator.herder.executors import ExecutorClient
from lockgate.coordinator.store import SqlStore, open_store
from lockgate.v1 import coordinator_pb2, coordinator_pb2_grpc

SERVICE_NAME = "lockgate-coordinator"
LOCKGATE_HOME_ENV = "LOCKGATE_HOME"
_LOG = logging.getLogger("lockgate.coordinator")


def default_database_url() -> str:
    """`sqlite:///<$LOCKGATE_HOME or ./.lockgate>/coordinator.db` (replicas on one machine
    share the file)."""
    home = Path(os.environ.get(LOCKGATE_HOME_ENV) or ".lockgate")
    return f"sqlite:///{(home / 'coordinator.db').resolve()}"


def _positive(name: str) -> Callable[[str], int]:
    """An argparse type: a whole number > 0, with an error naming the flag."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{name} must be a whole number, got {text!r}"
            ) from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{name} must be > 0, got {value}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    """The command line of the coordinator process."""
    parser = argparse.ArgumentParser(
        prog="lockgate-coordinator",
        description="Run one Lockgate coordinator replica (one of N; one leads at a time).",
    )
    parser.add_argument("--id", required=True, help="replica id, unique in the cluster, e.g. c1")
    parser.add_argument(
        "--db",
        default=None,
        help="SQLAlchemy URL of the state database: sqlite:///path/file.db (default "
        "$LOCKGATE_HOME/coordinator.db, else .lockgate/coordinator.db) or "
        "postgresql+psycopg://user@host:port/database",
    )
    parser.add_argument(
        "--listen", default="127.0.0.1:7070", help="HOST:PORT to serve gRPC on (port 0: any)"
    )
    parser.add_argument(
        "--advertise",
        default=None,
        help="HOST:PORT clients and other replicas reach this one on (default: the bound "
        "listen address)",
    )
    parser.add_argument(
        "--lease-ms",
        type=_positive("--lease-ms"),
        default=DEFAULT_LEASE_MS,
        help="leader lease (ms)",
    )
    parser.add_argument(
        "--session-timeout-ms",
        type=_positive("--session-timeout-ms"),
        default=DEFAULT_SESSION_TIMEOUT_MS,
        help="time without a heartbeat after which an executor is dead (ms)",
    )
    parser.add_argument(
        "--heartbeat-interval-ms",
        type=_positive("--heartbeat-interval-ms"),
        default=DEFAULT_HEARTBEAT_INTERVAL_MS,
        help="time between executor heartbeats the leader asks for (ms)",
    )
    parser.add_argument(
        "--reassign-delay-ms",
        type=int,
        default=DEFAULT_REASSIGN_DELAY_MS,
        help="extra wait after an executor's session expired before its tasks move (ms)",
    )
    add_metrics_listen_argument(parser)
    add_server_security_arguments(parser)
    add_client_security_arguments(parser)
    parser.add_argument(
        "--checkpoint-history",
        type=_positive("--checkpoint-history"),
        default=DEFAULT_CHECKPOINT_HISTORY,
        help="final checkpoints kept per pipeline; older ones are deleted (non-final ones"
        " never are)",
    )
    parser.add_argument(
        "--log-level", default=os.environ.get("LOCKGATE_LOG_LEVEL", "INFO"), help="e.g. DEBUG"
    )
    return parser


def _open_state(db: str | None, *, lease_ms: int, failpoints: Failpoints) -> SqlStore | int:
    """The migrated store of `--db` (default: the home's SQLite file), its sessions' timeouts
    below `lease_ms`, or the exit code after printing why it cannot be opened."""
    url = db or default_database_url()
    if url.startswith("sqlite:///") and db is None:
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    try:
        shown = sa.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        shown = "<unparseable URL>"
    try:
        store = open_store(url, lease_ms=lease_ms, failpoints=failpoints)
    except Unavailable as exc:
        print(f"error: cannot open the database {shown}: {exc.message}", file=sys.stderr)
        return 1
    except LockgateError as exc:
        print(f"error: --db: {exc.message}", file=sys.stderr)
        return 2
    except sa.exc.OperationalError as exc:
        print(
            f"error: cannot open the database {shown}: {exc.orig}; check --db",
            file=sys.stderr,
        )
        return 1
    _LOG.info("state database %s migrated", shown)
    return store


def _telemetry(args: argparse.Namespace) -> Telemetry | None:
    """Telemetry and the ``--metrics-listen`` endpoint, or None after printing why not."""
    try:
        return start_telemetry(
            SERVICE_NAME, metrics_listen=args.metrics_listen, service_instance_id=args.id
        )
    except (TelemetryConfigError, MetricsListenError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None


def _checked_flags(args: argparse.Namespace) -> tuple[ServerSecurity, ClientSecurity] | None:
    """What the server asks of its callers and how it calls the executors, or None after
    printing why the flags cannot be used."""
    if args.reassign_delay_ms < 0:
        print("error: --reassign-delay-ms must be >= 0", file=sys.stderr)
        return None
    try:
        return (
            server_security(args, listen_hosts=[args.listen.rpartition(":")[0]]),
            client_security(args, from_home=False),
        )
    except SecurityConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None


def _failpoints() -> Failpoints | None:
    """The failpoints armed by ``LOCKGATE_FAILPOINTS`` (logged), or None after printing
    why the variable is wrong."""
    try:
        failpoints = Failpoints.from_env()
    except FailpointConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None
    if failpoints.armed:
        _LOG.warning("failpoints armed: %s", ", ".join(a.describe() for a in failpoints.armed))
    return failpoints


def main(argv: Sequence[str] | None = None) -> int:
    """Run a replica until SIGTERM/SIGINT; returns the process exit code."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format=f"%(asctime)s %(levelname)s [{args.id}] %(name)s: %(message)s",
        stream=sys.stderr,
    )
    securities = _checked_flags(args)
    if securities is None:
        return 2
    security, to_executors = securities
    telemetry = _telemetry(args)  # before _open_state: a bad OTEL_* value must not leave
    if telemetry is None:  # a migrated database
        return 2
    failpoints = _failpoints()
    if failpoints is None:
        return 2
    store = _open_state(args.db, lease_ms=args.lease_ms, failpoints=failpoints)
    if isinstance(store, int):
        return store
    advertise = args.advertise or args.listen
    host, _, port = advertise.rpartition(":")
    if host in ("0.0.0.0", "[::]", "") or port in ("0", ""):
        print(
            f"error: --advertise: {advertise!r} is not an address others can reach; pass "
            "--advertise HOST:PORT (needed when --listen binds every interface or port 0)",
            file=sys.stderr,
        )
        store.close()
        return 2
    settings = CoordinatorSettings(
        coordinator_id=CoordinatorId(args.id),
        advertise=advertise,
        lease_ms=args.lease_ms,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_interval_ms,
        reassign_delay_ms=args.reassign_delay_ms,
        checkpoint_history=args.checkpoint_history,
    )
    herder = Herder(
        store=store,
        settings=settings,
        failpoints=failpoints,
        instruments=Instruments(telemetry.meter()),
        executor_client=ExecutorClient(security=to_executors),
    )
    servicer = CoordinatorServicer(herder)
    try:
        server = build_server(
            service_name=SERVICE_NAME,
            listen=args.listen,
            register=lambda grpc_server: (
                coordinator_pb2_grpc.add_CoordinatorServiceServicer_to_server(servicer, grpc_server)
            ),
            service_full_names=[
                coordinator_pb2.DESCRIPTOR.services_by_name["CoordinatorService"].full_name
            ],
            telemetry=telemetry,
            security=security,
        )
    except (ServerBindError, ValueError) as exc:
        print(f"error: --listen: {exc}", file=sys.stderr)
        store.close()
        return 1
    herder.start()
    server.catch_signals()  # before saying it serves: a SIGTERM from here stops it gracefully
    _LOG.info(
        "coordinator %s serving on %s (advertised as %s), lease %d ms",
        args.id,
        server.address,
        settings.advertise,
        settings.lease_ms,
    )
    try:
        server.serve_until_signal(on_signal=lambda _: herder.checkpoints.traces.close())
    finally:
        herder.stop()
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
