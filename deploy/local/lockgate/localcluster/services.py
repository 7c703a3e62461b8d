"""Process specs of Lockgate's own services in the local cluster: coordinators and executors.

``cluster.py`` appends :func:`service_processes` to its list (after the broker and the
schema registry), so ``make cluster-up`` starts three coordinator replicas c1..c3 sharing
one database (``databases.py``: a SQLite file in the home, or PostgreSQL; ports 7070-7072)
and two executors e1..e2 (ports 7080-7081).
The end-to-end tests build the same specs on free ports with :func:`coordinator_spec` and
:func:`executor_spec`, so the tests run what users run; the command lines themselves are
spelled in :mod:`lockgate.localcluster.commands`.

Environment: ``LOCKGATE_COORDINATOR_PORTS`` (default ``7070,7071,7072``; one replica per
port), ``LOCKGATE_EXECUTOR_PORTS`` (default ``7080,7081``), ``LOCKGATE_SPARK_MASTER``
(default ``local[1]``); ``LOCKGATE_CLUSTER_SERVICES=none`` leaves them all out (a cluster of
the broker and the registry only, as the local-cluster tests use). Each serves Prometheus
metrics at ``http://127.0.0.1:PORT/metrics``: ``LOCKGATE_COORDINATOR_METRICS_PORTS`` (default
``9470,9471,9472``) and ``LOCKGATE_EXECUTOR_METRICS_PORTS`` (default ``9480,9481``); ``none``
turns them off.

A coordinator is ready when its ``grpc.health.v1`` answers SERVING; an executor when its
``GetExecutorStatus`` shows a registration (generation > 0), i.e. after its SparkSession
warmed up and the leader accepted it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from lockgate.common.grpc_client import open_channel
from lockgate.common.security import ClientSecurity
from lockgate.localcluster.certs import LocalPki
from lockgate.localcluster.commands import coordinator_command, executor_command
from lockgate.localcluster.databases import LocalDatabases
from lockgate.localcluster.ports import LOOPBACK
from lockgate.localcluster.process import ProcessSpec
from lockgate.v1 import executor_pb2, executor_pb2_grpc

COORDINATOR_PORTS_ENV = "LOCKGATE_COORDINATOR_PORTS"
EXECUTOR_PORTS_ENV = "LOCKGATE_EXECUTOR_PORTS"
SPARK_MASTER_ENV = "LOCKGATE_SPARK_MASTER"
SERVICES_ENV = "LOCKGATE_CLUSTER_SERVICES"
COORDINATOR_METRICS_PORTS_ENV = "LOCKGATE_COORDINATOR_METRICS_PORTS"
EXECUTOR_METRICS_PORTS_ENV = "LOCKGATE_EXECUTOR_METRICS_PORTS"
#: Ports of the coordinator replicas c1, c2, c3 in the local cluster.
COORDINATOR_PORTS: tuple[int, ...] = (7070, 7071, 7072)
#: Ports of the executors e1, e2 in the local cluster.
EXECUTOR_PORTS: tuple[int, ...] = (7080, 7081)
#: Prometheus ports (``/metrics``) of c1, c2, c3 and of e1, e2 in the local cluster.
COORDINATOR_METRICS_PORTS: tuple[int, ...] = (9470, 9471, 9472)
EXECUTOR_METRICS_PORTS: tuple[int, ...] = (9480, 9481)
#: Spark master of each local executor: one core each, two executors share two cores.
DEFAULT_SPARK_MASTER = "local[1]"
#: Spark settings that make a local executor's start cheaper (measured: the JVM and the
#: first Python worker dominate; these only trim what the defaults add on top).
LOCAL_SPARK_CONF: Mapping[str, str] = {
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.shuffle.partitions": "1",
    "spark.default.parallelism": "1",
    "spark.driver.memory": "512m",
    "spark.sql.catalogImplementation": "in-memory",
}


def _probe_channel(address: str, security: ClientSecurity | None = None) -> grpc.Channel:
    # No proxy: loopback must never be sent to an HTTP proxy the environment names.
    return open_channel(
        address,
        follow_leader=False,
        options=[("grpc.enable_http_proxy", 0)],
        security=security,
    )


def is_serving(
    address: str, *, timeout_s: float = 2.0, security: ClientSecurity | None = None
) -> bool:
    """True when the gRPC server at ``address`` answers its health check with SERVING."""
    with _probe_channel(address, security) as channel:
        try:
            answer = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=timeout_s
            )
        except grpc.RpcError:
            return False
    return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)


def executor_generation(
    address: str, *, timeout_s: float = 2.0, security: ClientSecurity | None = None
) -> int:
    """The executor's current registration generation (0 if unregistered or unreachable);
    a secure executor answers only the coordinator identity (``security``)."""
    with _probe_channel(address, security) as channel:
        try:
            status = executor_pb2_grpc.ExecutorServiceStub(channel).GetExecutorStatus(
                executor_pb2.GetExecutorStatusRequest(), timeout=timeout_s
            )
        except grpc.RpcError:
            return 0
    return int(status.executor_generation)


def is_executor_registered(address: str, security: ClientSecurity | None = None) -> bool:
    """True when the executor at ``address`` is registered with a leader."""
    return executor_generation(address, security=security) > 0


def coordinator_spec(
    *,
    coordinator_id: str,
    port: int,
    db_url: str,
    lease_ms: int = 3000,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    metrics_port: int | None = None,
    host: str = LOOPBACK,
    pki: LocalPki | None = None,
) -> ProcessSpec:
    """One coordinator replica listening (and advertised) on ``host:port`` (loopback by
    default), with Prometheus metrics on ``127.0.0.1:metrics_port`` if given; with TLS and
    tokens from ``pki`` when given (plaintext without)."""
    address = f"{host}:{port}"
    secure_args = pki.coordinator_args() if pki else []
    probe = pki.as_admin() if pki else None
    return ProcessSpec(
        name=f"coordinator-{coordinator_id}",
        argv=tuple(
            coordinator_command(
                coordinator_id=coordinator_id,
                db_url=db_url,
                listen=address,
                advertise=address,
                lease_ms=lease_ms,
                metrics_listen=_loopback(metrics_port),
                extra=[*secure_args, *extra_args],
            )
        ),
        address=address,
        ports=(port,) if metrics_port is None else (port, metrics_port),
        ready=lambda: is_serving(address, security=probe),
        env=dict(env or {}),
        ready_timeout_s=60.0,
        stop_grace_s=15.0,
    )


def executor_spec(
    *,
    executor_id: str,
    port: int,
    coordinators: Sequence[str],
    spark_master: str = DEFAULT_SPARK_MASTER,
    spark_conf: Mapping[str, str] = LOCAL_SPARK_CONF,
    env: Mapping[str, str] | None = None,
    ready_timeout_s: float = 240.0,
    data_plane: str | None = None,
    extra_args: Sequence[str] = (),
    metrics_port: int | None = None,
    host: str = LOOPBACK,
    pki: LocalPki | None = None,
) -> ProcessSpec:
    """One executor on ``host:port`` (loopback by default) that registers with
    ``coordinators``, with Prometheus metrics on ``127.0.0.1:metrics_port`` if given; with
    mTLS and its token from ``pki`` when given.

    Ready only once registered: its SparkSession (JVM start and warm-up job, 20-80 s on a
    busy machine) comes first, hence the long default deadline. ``data_plane`` ``"none"`` runs
    the control path only (tests of it); ``extra_args`` go to its command line as they are.
    """
    address = f"{host}:{port}"
    secure_args = pki.executor_args(executor_id) if pki else []
    probe = pki.as_coordinator() if pki else None
    return ProcessSpec(
        name=f"executor-{executor_id}",
        argv=tuple(
            executor_command(
                executor_id=executor_id,
                listen=address,
                coordinators=coordinators,
                spark_master=spark_master,
                spark_conf=spark_conf,
                data_plane=data_plane,
                metrics_listen=_loopback(metrics_port),
                extra=[*secure_args, *extra_args],
            )
        ),
        address=address,
        ports=(port,) if metrics_port is None else (port, metrics_port),
        ready=lambda: is_executor_registered(address, probe),
        env={**(pki.executor_env(executor_id) if pki else {}), **(env or {})},
        ready_timeout_s=ready_timeout_s,
        stop_grace_s=20.0,
    )


def _loopback(port: int | None) -> str | None:
    return None if port is None else f"{LOOPBACK}:{port}"


@dataclass(frozen=True)
class ServiceSettings:
    """Where the services keep their state and which ports they use."""

    home: Path
    coordinator_ports: tuple[int, ...] = COORDINATOR_PORTS
    executor_ports: tuple[int, ...] = EXECUTOR_PORTS
    coordinator_metrics_ports: tuple[int, ...] = COORDINATOR_METRICS_PORTS
    """Prometheus port of c1, c2, ...; a replica past the end of the list has none."""
    executor_metrics_ports: tuple[int, ...] = EXECUTOR_METRICS_PORTS
    spark_master: str = DEFAULT_SPARK_MASTER
    #: Every executor's ``--spark-conf`` settings.
    spark_conf: Mapping[str, str] = field(default_factory=lambda: dict(LOCAL_SPARK_CONF))
    lease_ms: int = 3000
    executor_env: Mapping[str, str] = field(default_factory=dict)
    #: The coordinators' state database; None: ``coordinator.db`` (SQLite) in the home.
    db_url: str | None = None
    pki: LocalPki | None = None
    """TLS and tokens of every service (``make certs``); None: plaintext."""

    @classmethod
    def from_env(
        cls, home: Path, pki: LocalPki | None = None, *, db_url: str | None = None
    ) -> ServiceSettings:
        """Settings from the ``LOCKGATE_*`` variables above; SystemExit names a bad one."""
        return cls(
            pki=pki,
            home=home,
            db_url=db_url,
            coordinator_ports=_ports_from_env(COORDINATOR_PORTS_ENV, COORDINATOR_PORTS),
            executor_ports=_ports_from_env(EXECUTOR_PORTS_ENV, EXECUTOR_PORTS),
            coordinator_metrics_ports=_ports_from_env(
                COORDINATOR_METRICS_PORTS_ENV, COORDINATOR_METRICS_PORTS
            ),
            executor_metrics_ports=_ports_from_env(
                EXECUTOR_METRICS_PORTS_ENV, EXECUTOR_METRICS_PORTS
            ),
            spark_master=os.environ.get(SPARK_MASTER_ENV) or DEFAULT_SPARK_MASTER,
        )

    @property
    def coordinator_db_url(self) -> str:
        """The coordinators' shared database: ``db_url``, else a SQLite file in the home."""
        return self.db_url or LocalDatabases(home=self.home).coordinator_url

    @property
    def coordinator_addresses(self) -> tuple[str, ...]:
        """Every replica's address, as executors and the CLI are given them."""
        return tuple(f"{LOOPBACK}:{port}" for port in self.coordinator_ports)


def _ports_from_env(name: str, default: tuple[int, ...]) -> tuple[int, ...]:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if raw.lower() == "none":
        return ()
    try:
        ports = tuple(int(part) for part in raw.split(",") if part.strip())
    except ValueError:
        raise SystemExit(
            f"error: ${name} must be comma-separated port numbers, got {raw!r}"
        ) from None
    if not all(1 <= port <= 65535 for port in ports):
        raise SystemExit(f"error: ${name} ports must be between 1 and 65535, got {raw!r}")
    return ports


def service_processes(settings: ServiceSettings) -> list[ProcessSpec]:
    """Coordinators c1..cN then executors e1..eM, in start order (none if
    ``LOCKGATE_CLUSTER_SERVICES=none``)."""
    if os.environ.get(SERVICES_ENV, "").strip().lower() == "none":
        return []
    settings.home.mkdir(parents=True, exist_ok=True)
    coordinators = [
        coordinator_spec(
            coordinator_id=f"c{i}",
            port=port,
            db_url=settings.coordinator_db_url,
            lease_ms=settings.lease_ms,
            metrics_port=_nth(settings.coordinator_metrics_ports, i),
            pki=settings.pki,
        )
        for i, port in enumerate(settings.coordinator_ports, start=1)
    ]
    executors = [
        executor_spec(
            executor_id=f"e{i}",
            port=port,
            coordinators=settings.coordinator_addresses,
            spark_master=settings.spark_master,
            spark_conf=settings.spark_conf,
            env=settings.executor_env,
            metrics_port=_nth(settings.executor_metrics_ports, i),
            pki=settings.pki,
        )
        for i, port in enumerate(settings.executor_ports, start=1)
    ]
    return [*coordinators, *executors]


def _nth(ports: tuple[int, ...], number: int) -> int | None:
    """The port of process ``number`` (from 1), or None past the end of the list."""
    return ports[number - 1] if number <= len(ports) else None
