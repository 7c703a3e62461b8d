"""``python -m lockgate.localcluster.cluster up|status|down``: the local cluster without Docker.

The cluster is the ordered list :func:`cluster_processes` returns. ``up`` starts them in
order (skipping those already up), ``down`` stops them in reverse order, ``status`` prints
one line each. To add a service (coordinator replicas c1..c3, executors, the registry),
append its :class:`~lockgate.localcluster.process.ProcessSpec` to that list.

Settings: ``--home`` (else ``$LOCKGATE_HOME``, else ``<repo>/.lockgate``), ``--kafka-port``
(else ``$LOCKGATE_KAFKA_PORT``, else 9092), ``--kafka-controller-port``
(else ``$LOCKGATE_KAFKA_CONTROLLER_PORT``, else 9093), ``--registry-grpc-port`` (else
``$LOCKGATE_SCHEMA_REGISTRY_GRPC_PORT``, else 7090), ``--registry-http-port`` (else
``$LOCKGATE_SCHEMA_REGISTRY_HTTP_PORT``, else 8081).

Processes: ``kafka`` (the broker), with ``LOCKGATE_DB=postgres`` a PostgreSQL server
(``databases.py``), then ``schema-registry`` (``python -m lockgate.schema_registry`` on a
SQLite file in the home or its PostgreSQL database, one worker process per core sharing its
two ports; stopping its pid stops the workers too), the services (``services.py``), and with
``LOCKGATE_PROMETHEUS=1`` a Prometheus server scraping them (``prometheus.py``). With
``LOCKGATE_SPARK=standalone`` a Spark master and two workers (``spark.py``) start before the
services, and the executors run their batches there.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from lockgate.common.security import INSECURE_ENV, TLS_DIR, insecure_requested
from lockgate.localcluster.certs import LocalPki, ensure_local_pki
from lockgate.localcluster.commands import registry_command
from lockgate.localcluster.databases import DatabaseKind, LocalDatabases, postgres_spec
from lockgate.localcluster.kafka import KafkaBrokerConfig, KafkaSetupError, broker_spec
from lockgate.localcluster.process import (
    ProcessError,
    ProcessSpec,
    ProcessState,
    answers_ok,
    lockgate_home,
    process_status,
    start_process,
    stop_process,
)
from lockgate.localcluster.prometheus import (
    local_targets,
    prometheus_port,
    prometheus_spec,
    prometheus_wanted,
)
from lockgate.localcluster.services import LOCAL_SPARK_CONF, ServiceSettings, service_processes
from lockgate.localcluster.spark import EXECUTOR_SPARK_CONF, StandaloneSpark, standalone_from_env
from lockgate.schema_registry.server import default_processes

KAFKA_PORT_ENV = "LOCKGATE_KAFKA_PORT"
KAFKA_CONTROLLER_PORT_ENV = "LOCKGATE_KAFKA_CONTROLLER_PORT"
REGISTRY_GRPC_PORT_ENV = "LOCKGATE_SCHEMA_REGISTRY_GRPC_PORT"
REGISTRY_HTTP_PORT_ENV = "LOCKGATE_SCHEMA_REGISTRY_HTTP_PORT"
REGISTRY_METRICS_PORT_ENV = "LOCKGATE_SCHEMA_REGISTRY_METRICS_PORT"
#: Prometheus port of the local registry's first worker (worker i serves port + i).
REGISTRY_METRICS_PORT = 9490
#: Name of the registry's pid and log files (``run/schema-registry.pid``).
SCHEMA_REGISTRY = "schema-registry"


@dataclass(frozen=True)
class ClusterSettings:
    """Where the cluster lives and which ports it uses."""

    home: Path
    kafka_port: int = 9092
    kafka_controller_port: int = 9093
    registry_grpc_port: int = 7090
    registry_http_port: int = 8081
    #: The registry's ``--processes``; None: its default (one worker per core).
    registry_processes: int | None = None
    #: Prometheus port of the registry's first worker (worker i: + i); None: off.
    registry_metrics_port: int | None = None
    #: SQLite files or PostgreSQL (``$LOCKGATE_DB``); None: SQLite files in the home.
    databases: LocalDatabases | None = None

    @property
    def local_databases(self) -> LocalDatabases:
        """Where the registry and the coordinators keep their state."""
        return self.databases or LocalDatabases(home=self.home)

    #: TLS and authentication on every service (``make certs`` material in the home);
    #: ``cluster up`` sets it unless ``LOCKGATE_INSECURE=1`` or ``--insecure``; the testbed
    #: and the tests' clusters stay plaintext on loopback.
    secure: bool = False

    @property
    def pki(self) -> LocalPki | None:
        """The local CA, certificates and tokens the services use (None: insecure)."""
        return LocalPki(self.home / TLS_DIR) if self.secure else None

    @property
    def kafka(self) -> KafkaBrokerConfig:
        """The broker's configuration."""
        return KafkaBrokerConfig(
            home=self.home, port=self.kafka_port, controller_port=self.kafka_controller_port
        )

    @property
    def registry_metrics_ports(self) -> tuple[int, ...]:
        """The metrics port of each of the registry's worker processes (none if off)."""
        if self.registry_metrics_port is None:
            return ()
        workers = self.registry_processes or default_processes()
        return tuple(self.registry_metrics_port + i for i in range(workers))

    @property
    def registry_db_url(self) -> str:
        """The schema registry's database: a SQLite file in the home, or on PostgreSQL."""
        return self.local_databases.registry_url


def is_registry_ready(
    http_address: str, *, timeout_s: float = 2.0, pki: LocalPki | None = None
) -> bool:
    """True when the registry's REST API answers ``GET /subjects`` with 200 (over HTTPS
    with the admin token when ``pki`` is given)."""
    if pki is None:
        return answers_ok(f"http://{http_address}/subjects", timeout_s=timeout_s)
    admin = pki.as_admin()
    return answers_ok(
        f"https://{http_address}/subjects",
        timeout_s=timeout_s,
        context=admin.ssl_context(),
        headers={"Authorization": f"Bearer {admin.token}"},
    )


def schema_registry_spec(settings: ClusterSettings) -> ProcessSpec:
    """The schema registry process: gRPC and REST on loopback, SQLite in the home."""
    grpc_address = f"127.0.0.1:{settings.registry_grpc_port}"
    http_address = f"127.0.0.1:{settings.registry_http_port}"
    return ProcessSpec(
        name=SCHEMA_REGISTRY,
        argv=tuple(
            registry_command(
                db_url=settings.registry_db_url,
                grpc_listen=grpc_address,
                http_listen=http_address,
                processes=settings.registry_processes or None,
                metrics_listen=None
                if settings.registry_metrics_port is None
                else f"127.0.0.1:{settings.registry_metrics_port}",
                extra=settings.pki.registry_args() if settings.pki else (),
            )
        ),
        address=f"grpc={grpc_address},http={http_address}",
        ports=(settings.registry_grpc_port, settings.registry_http_port)
        + (() if settings.registry_metrics_port is None else (settings.registry_metrics_port,)),
        ready=lambda: is_registry_ready(http_address, pki=settings.pki),
        ready_timeout_s=60.0,
        # The supervisor stops its workers (gRPC grace 2 s, then REST) before exiting.
        stop_grace_s=20.0,
    )


def cluster_processes(settings: ClusterSettings) -> list[ProcessSpec]:
    """The cluster's processes, in start order. Later services are appended here."""
    databases = settings.local_databases
    services = ServiceSettings.from_env(
        settings.home, settings.pki, db_url=databases.coordinator_url
    )
    postgres = postgres_spec(databases)
    # LOCKGATE_DB=postgres: the server of the registry's and the coordinators' databases. One
    # that runs is listed whatever LOCKGATE_DB says, so `down` (and `make clean`) stop it.
    postgres_wanted = databases.kind is DatabaseKind.POSTGRES or (
        process_status(home=settings.home, name=postgres.name, address=postgres.address).state
        is ProcessState.UP
    )
    spark = _standalone_spark(settings.home)
    if spark is not None:
        services = replace(
            services,
            spark_master=spark.master_url,
            spark_conf={**LOCAL_SPARK_CONF, **EXECUTOR_SPARK_CONF},
        )
    processes = [
        broker_spec(settings.kafka),
        *([postgres] if postgres_wanted else []),
        schema_registry_spec(settings),
        *(spark.processes() if spark is not None else []),
        # Coordinators c1..c3 (7070-7072) and executors e1..e2 (7080-7081): services.py.
        *service_processes(services),
    ]
    if prometheus_wanted():  # LOCKGATE_PROMETHEUS=1: prometheus.py
        processes.append(
            prometheus_spec(
                home=settings.home,
                port=prometheus_port(),
                targets=local_targets(
                    coordinator_ports=services.coordinator_metrics_ports[
                        : len(services.coordinator_ports)
                    ],
                    executor_ports=services.executor_metrics_ports[: len(services.executor_ports)],
                    registry_ports=settings.registry_metrics_ports,
                ),
            )
        )
    return processes


def _standalone_spark(home: Path) -> StandaloneSpark | None:
    """``LOCKGATE_SPARK=standalone``'s master and workers; a master that runs is listed
    whatever the variable says, so `down` (and `make clean`) stop it and its workers."""
    spark = standalone_from_env(home)
    if spark is not None:
        return spark
    running = StandaloneSpark(home=home)
    master = running.master_spec()
    status = process_status(home=home, name=master.name, address=master.address)
    return running if status.state is ProcessState.UP else None


def _port(value: str | None, *, default: int, source: str) -> int:
    if value is None or value == "":
        return default
    try:
        port = int(value)
    except ValueError:
        raise SystemExit(f"error: {source} must be a TCP port number, got {value!r}") from None
    if not 1 <= port <= 65535:
        raise SystemExit(f"error: {source} must be between 1 and 65535, got {port}")
    return port


def settings_from_args(args: argparse.Namespace) -> ClusterSettings:
    """Resolve flags, then environment variables, then defaults."""
    kafka_port = _port(
        args.kafka_port if args.kafka_port is not None else os.environ.get(KAFKA_PORT_ENV),
        default=9092,
        source=f"--kafka-port / ${KAFKA_PORT_ENV}",
    )
    controller_port = _port(
        args.kafka_controller_port
        if args.kafka_controller_port is not None
        else os.environ.get(KAFKA_CONTROLLER_PORT_ENV),
        default=9093,
        source=f"--kafka-controller-port / ${KAFKA_CONTROLLER_PORT_ENV}",
    )
    registry_grpc_port = _port(
        args.registry_grpc_port
        if args.registry_grpc_port is not None
        else os.environ.get(REGISTRY_GRPC_PORT_ENV),
        default=7090,
        source=f"--registry-grpc-port / ${REGISTRY_GRPC_PORT_ENV}",
    )
    registry_http_port = _port(
        args.registry_http_port
        if args.registry_http_port is not None
        else os.environ.get(REGISTRY_HTTP_PORT_ENV),
        default=8081,
        source=f"--registry-http-port / ${REGISTRY_HTTP_PORT_ENV}",
    )
    if kafka_port == controller_port:
        raise SystemExit(
            f"error: the Kafka port and the controller port must differ (both {kafka_port})"
        )
    ports = {
        "--kafka-port": kafka_port,
        "--kafka-controller-port": controller_port,
        "--registry-grpc-port": registry_grpc_port,
        "--registry-http-port": registry_http_port,
    }
    for flag, port in ports.items():
        clashes = [other for other, value in ports.items() if value == port and other != flag]
        if clashes:
            raise SystemExit(
                f"error: {flag} and {clashes[0]} must differ (both {port}); give each"
                " process its own port"
            )
    metrics = os.environ.get(REGISTRY_METRICS_PORT_ENV, "").strip()
    home = lockgate_home(args.home)
    return ClusterSettings(
        secure=not (getattr(args, "insecure", False) or insecure_requested()),
        home=home,
        databases=LocalDatabases.from_env(home),
        kafka_port=kafka_port,
        kafka_controller_port=controller_port,
        registry_grpc_port=registry_grpc_port,
        registry_http_port=registry_http_port,
        registry_metrics_port=None
        if metrics.lower() == "none"
        else _port(metrics, default=REGISTRY_METRICS_PORT, source=f"${REGISTRY_METRICS_PORT_ENV}"),
    )


def cluster_up(settings: ClusterSettings) -> int:
    """Start every process that is not already up; on failure stop what this call started.
    A secure cluster first makes what is missing of its CA, certificates and tokens."""
    started: list[ProcessSpec] = []
    if settings.secure:
        executors = ServiceSettings.from_env(settings.home).executor_ports
        pki = ensure_local_pki(settings.home, [f"e{i}" for i in range(1, len(executors) + 1)])
        print(f"TLS and authentication on: CA, certificates and tokens in {pki.directory}")
    else:
        print("insecure: every service serves plaintext without authentication")
    for spec in cluster_processes(settings):
        status = process_status(home=settings.home, name=spec.name, address=spec.address)
        if status.state is ProcessState.UP:
            print(f"{spec.name}: already up (pid {status.pid}, {spec.address})")
            continue
        began = time.monotonic()
        try:
            running = start_process(spec, home=settings.home)
        except (ProcessError, KafkaSetupError) as exc:
            print(f"error: cannot start {spec.name}: {exc}", file=sys.stderr)
            for earlier in reversed(started):
                stop_process(home=settings.home, name=earlier.name, stop_signal=earlier.stop_signal)
                print(f"{earlier.name}: stopped again because {spec.name} failed", file=sys.stderr)
            return 1
        started.append(spec)
        print(
            f"{spec.name}: up (pid {running.pid}, {running.address}) in "
            f"{time.monotonic() - began:.1f}s; log {running.log_file}"
        )
    return 0


def cluster_status(settings: ClusterSettings) -> int:
    """Print one line per process: name, pid, address, up/down."""
    for spec in cluster_processes(settings):
        status = process_status(home=settings.home, name=spec.name, address=spec.address)
        pid = str(status.pid) if status.pid is not None else "-"
        print(f"{status.name:<16} pid={pid:<8} {status.address:<22} {status.state.value}")
    return 0


def cluster_down(settings: ClusterSettings) -> int:
    """Stop exactly the pids in the pid files, in reverse start order. Harmless twice."""
    for spec in reversed(cluster_processes(settings)):
        pid = stop_process(home=settings.home, name=spec.name, stop_signal=spec.stop_signal)
        if pid is None:
            print(f"{spec.name}: not running")
        else:
            print(f"{spec.name}: stopped pid {pid}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m lockgate.localcluster.cluster``."""
    parser = argparse.ArgumentParser(
        prog="python -m lockgate.localcluster.cluster",
        description="Start, inspect and stop Lockgate's local cluster (Kafka broker, services).",
    )
    parser.add_argument("command", choices=("up", "status", "down"))
    parser.add_argument(
        "--home", type=Path, default=None, help="cluster home (default $LOCKGATE_HOME or .lockgate)"
    )
    parser.add_argument("--kafka-port", default=None, help="broker port (default 9092)")
    parser.add_argument(
        "--kafka-controller-port", default=None, help="KRaft controller port (default 9093)"
    )
    parser.add_argument(
        "--registry-grpc-port", default=None, help="schema registry gRPC port (default 7090)"
    )
    parser.add_argument(
        "--registry-http-port", default=None, help="schema registry REST port (default 8081)"
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        help=f"plaintext, no authentication (also ${INSECURE_ENV}=1)",
    )
    args = parser.parse_args(argv)
    try:
        settings = settings_from_args(args)
        if args.command == "up":
            return cluster_up(settings)
        if args.command == "status":
            return cluster_status(settings)
        return cluster_down(settings)
    except KafkaSetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
