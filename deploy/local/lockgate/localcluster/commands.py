"""The command lines of Lockgate's three services, spelled once.

``make cluster-up``, the tests and the benchmarks all start coordinators, executors and schema
registries as ``python -m lockgate.<service>`` processes. Their argv is built here only, so a
renamed or added flag changes one function and every launcher follows. The services' own
argparse parsers (``lockgate.coordinator.__main__``, ``lockgate.executor.__main__``,
``lockgate.schema_registry.server``) stay the definition of the flags; these functions only
spell them. An argument left ``None`` is not passed, so the service's own default applies.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence


def coordinator_command(
    *,
    coordinator_id: str,
    db_url: str,
    listen: str,
    advertise: str | None = None,
    lease_ms: int | None = None,
    metrics_listen: str | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """``python -m lockgate.coordinator``: replica ``coordinator_id`` on ``db_url``, serving on
    ``listen`` (and advertised as ``advertise``), Prometheus metrics on ``metrics_listen``;
    ``extra`` is appended as it is."""
    argv = [
        sys.executable,
        "-m",
        "lockgate.coordinator",
        "--id",
        coordinator_id,
        "--db",
        db_url,
        "--listen",
        listen,
    ]
    if advertise is not None:
        argv += ["--advertise", advertise]
    if lease_ms is not None:
        argv += ["--lease-ms", str(lease_ms)]
    return [*argv, *_metrics(metrics_listen), *extra]


def _metrics(metrics_listen: str | None) -> list[str]:
    return [] if metrics_listen is None else ["--metrics-listen", metrics_listen]


def executor_command(
    *,
    executor_id: str,
    listen: str,
    coordinators: Sequence[str],
    spark_master: str | None = None,
    spark_conf: Mapping[str, str] | None = None,
    data_plane: str | None = None,
    metrics_listen: str | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """``python -m lockgate.executor``: executor ``executor_id`` serving on ``listen`` and
    registering with every replica in ``coordinators``; ``data_plane`` ``"none"`` runs the
    control path only; Prometheus metrics on ``metrics_listen``; ``extra`` is appended as it
    is."""
    argv = [
        sys.executable,
        "-m",
        "lockgate.executor",
        "--id",
        executor_id,
        "--coordinator",
        ",".join(coordinators),
        "--listen",
        listen,
    ]
    if data_plane is not None:
        argv += ["--data-plane", data_plane]
    if spark_master is not None:
        argv += ["--spark-master", spark_master]
    for key, value in (spark_conf or {}).items():
        argv += ["--spark-conf", f"{key}={value}"]
    return [*argv, *_metrics(metrics_listen), *extra]


def registry_command(
    *,
    db_url: str,
    grpc_listen: str,
    http_listen: str,
    processes: int | None = None,
    metrics_listen: str | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """``python -m lockgate.schema_registry`` on ``db_url``, gRPC on ``grpc_listen`` and REST on
    ``http_listen`` (port 0: any; it prints ``ready grpc=H:P http=H:P`` once it serves), with
    ``processes`` workers (None: one per core), worker ``i``'s Prometheus metrics on
    ``metrics_listen``'s port + ``i``; ``extra`` is appended as it is."""
    argv = [
        sys.executable,
        "-m",
        "lockgate.schema_registry",
        "--db",
        db_url,
        "--grpc",
        grpc_listen,
        "--http",
        http_listen,
    ]
    if processes is not None:
        argv += ["--processes", str(processes)]
    return [*argv, *_metrics(metrics_listen), *extra]
