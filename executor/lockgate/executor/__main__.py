"""``python -m lockgate.executor`` (console script ``lockgate-executor``): one executor process.

    lockgate-executor --id e1 --coordinator 127.0.0.1:7070 --listen 127.0.0.1:7080 \\
        --spark-master local[2]

Start-up order: read the failpoints (a typo is refused before anything starts), serve
``ExecutorService`` (calls answer UNAVAILABLE until registered), build the SparkSession
and run its warm-up job (so the first checkpoint does not pay for it), then register with
the coordinator and heartbeat. SIGTERM or SIGINT stops serving, stops the tasks, cancels
their running Spark jobs and waits for their batches, deregisters, and stops the
SparkSession and its JVM, all within ``--shutdown-timeout-s`` (see :mod:`.shutdown`).
Exit status: 0 after a signal, 2 for bad arguments, 1 if start-up failed,
124 if the shutdown bound passed (its children killed), 137 when a failpoint fires.
"""

from __future__ import annotations

import os

# This process forks only to exec at once (PySpark launching the JVM of the SparkSession),
# while gRPC's server and channel threads run. gRPC's fork handlers are for children that
# go on using gRPC; run in a child about to exec they broke it now and then (measured: the
# child died before exec, "Java gateway process exited before sending its port number",
# with "Other threads are currently calling into gRPC, skipping fork() handlers" and an
# epoll EBADF in the log). gRPC's own advice for fork+exec is to switch them off.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import argparse
import dataclasses
import logging
import math
import re
import sys
from collections.abc import Sequence

import grpc

from lockgate.common.failpoints import FailpointConfigError, Failpoints
from lockgate.common.grpc_client import open_channel
from lockgate.common.grpc_server import ServerBindError, build_server
from lockgate.common.metrics import Instruments
from lockgate.common.prometheus import (
    MetricsListenError,
    add_metrics_listen_argument,
    start_telemetry,
)
from lockgate.common.security import (
    ClientSecurity,
    ServerSecurity,
    add_client_security_arguments,
    add_server_security_arguments,
    client_security,
    server_security,
)
from lockgate.common.telemetry import TelemetryConfigError
from lockgate.executor.coordinator_client import GrpcCoordinatorClient
from lockgate.executor.dataplane.control_only import ControlOnlyDataPlane
from lockgate.executor.dataplane.protocol import DataPlane
from lockgate.executor.dataplane.spark import SparkDataPlane
from lockgate.executor.dataplane.spark.data_plane import DEFAULT_DRIVER_MEMORY
from lockgate.executor.dataplane.transform_modules import (
    EXAMPLE_TRANSFORM_MODULES,
    MODULE_PREFIX_PATTERN,
)
from lockgate.executor.fencing import LeaderEpochFence
from lockgate.executor.runtime.values import ExecutorSettings
from lockgate.executor.servicer import ExecutorServicer
from lockgate.executor.shutdown import (
    DEFAULT_SHUTDOWN_TIMEOUT_S,
    EXIT_SHUTDOWN_TIMEOUT,
    ShutdownBound,
)
from lockgate.executor.worker import Worker
from lockgate.v1 import coordinator_pb2_grpc, executor_pb2, executor_pb2_grpc

_LOG = logging.getLogger("lockgate.executor")
#: Most seconds running calls get to finish once a signal arrived.
_SERVER_GRACE_S = 2.0
#: Share of the shutdown bound kept, after waiting for the batches, for the deregistration
#: and the end of the SparkSession and its JVM.
_KEEP_AFTER_BATCHES = 0.3
_JVM_SIZE = re.compile(r"^[1-9][0-9]*[kKmMgG]$")
_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lockgate-executor",
        description="Run one Lockgate executor: a SparkSession driving two-phase-commit "
        "batch writers for the coordinator's checkpoints.",
    )
    parser.add_argument("--id", required=True, help="executor id, e.g. e1 ([a-zA-Z0-9._-])")
    parser.add_argument(
        "--coordinator",
        required=True,
        action="append",
        help="coordinator address HOST:PORT; repeat or comma-separate for several replicas",
    )
    parser.add_argument(
        "--listen", default="127.0.0.1:7080", help="HOST:PORT to serve ExecutorService on"
    )
    parser.add_argument(
        "--advertise",
        default=None,
        help="HOST:PORT the coordinator calls back (default: the bound --listen address)",
    )
    parser.add_argument(
        "--spark-master", default="local[*]", help="Spark master URL (local[*], spark://, k8s://)"
    )
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Spark setting, e.g. spark.executor.memory=2g (repeatable)",
    )
    parser.add_argument(
        "--spark-driver-memory",
        default=None,
        metavar="SIZE",
        help="heap of the Spark driver JVM (spark.driver.memory), which runs the tasks under "
        f"local[*]; e.g. 768m or 2g (default {DEFAULT_DRIVER_MEMORY})",
    )
    parser.add_argument(
        "--allow-transform-module",
        action="append",
        default=[],
        metavar="PREFIX",
        help="run transform.python only from modules under PREFIX (a dotted module name; "
        f"repeatable); {', '.join(EXAMPLE_TRANSFORM_MODULES)} is always allowed",
    )
    parser.add_argument(
        "--data-plane",
        choices=("spark", "none"),
        default="spark",
        help="spark (default); none runs empty pre-commits without Spark, for tests of the "
        "control path only",
    )
    parser.add_argument(
        "--max-tasks", type=int, default=0, help="most tasks to accept; 0 = no limit"
    )
    parser.add_argument(
        "--shutdown-timeout-s",
        type=float,
        default=DEFAULT_SHUTDOWN_TIMEOUT_S,
        help="seconds from SIGTERM/SIGINT to exit: running Spark jobs are cancelled; past "
        f"this the executor kills its children and exits {EXIT_SHUTDOWN_TIMEOUT}",
    )
    add_metrics_listen_argument(parser)
    add_server_security_arguments(parser)
    add_client_security_arguments(parser)
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    return parser


def _coordinators(values: Sequence[str]) -> tuple[str, ...]:
    addresses = tuple(a.strip() for value in values for a in value.split(",") if a.strip())
    for address in addresses:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"--coordinator {address!r} is not HOST:PORT, e.g. 127.0.0.1:7070")
    return addresses


def _spark_conf(values: Sequence[str], driver_memory: str | None) -> dict[str, str]:
    conf: dict[str, str] = {}
    for value in values:
        key, sep, setting = value.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--spark-conf {value!r} is not KEY=VALUE")
        conf[key.strip()] = setting
    if driver_memory is not None:
        if not _JVM_SIZE.match(driver_memory):
            raise ValueError(
                f"--spark-driver-memory {driver_memory!r}: write a JVM size, e.g. 768m or 2g"
            )
        if "spark.driver.memory" in conf:
            raise ValueError(
                "--spark-driver-memory and --spark-conf spark.driver.memory=... both set the"
                " driver's heap: keep one"
            )
        conf["spark.driver.memory"] = driver_memory
    return conf


def _checked_options(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> tuple[tuple[str, ...], dict[str, str], Failpoints, ServerSecurity, ClientSecurity]:
    """The coordinators, the Spark settings, the armed failpoints, what the server asks of
    its callers and how to call the coordinator; a bad one exits 2 naming the flag (or the
    LOCKGATE_FAILPOINTS entry) and the fix."""
    if not args.id or not set(args.id) <= _ID_CHARS or len(args.id) > 100:
        parser.error(f"--id {args.id!r}: use 1 to 100 characters of [a-zA-Z0-9._-]")
    if not 0 < args.shutdown_timeout_s < math.inf:
        parser.error(
            f"--shutdown-timeout-s {args.shutdown_timeout_s}: use a finite number of seconds > 0"
        )
    for prefix in args.allow_transform_module:
        if not MODULE_PREFIX_PATTERN.match(prefix):
            parser.error(
                f"--allow-transform-module {prefix!r}: write a dotted module name, e.g."
                " mycompany.transforms"
            )
    try:
        coordinators = _coordinators(args.coordinator)
        spark_conf = _spark_conf(args.spark_conf, args.spark_driver_memory)
        failpoints = Failpoints.from_env()
        security = server_security(args, listen_hosts=[args.listen.rpartition(":")[0]])
        to_coordinator = client_security(args, from_home=False)
    except (ValueError, FailpointConfigError) as exc:
        parser.error(str(exc))
    if failpoints.armed:
        _LOG.warning(
            "failpoints armed: %s",
            ", ".join(a.describe() for a in failpoints.armed),
        )
    return coordinators, spark_conf, failpoints, security, to_coordinator


def _settings(args: argparse.Namespace, coordinators: tuple[str, ...]) -> ExecutorSettings:
    # The advertised address is completed right after the bind (port 0 picks one), before
    # the runtime registers it with the coordinator.
    return ExecutorSettings(
        executor_id=args.id,
        advertised_address=args.advertise or args.listen,
        coordinator_addresses=coordinators,
        spark_master=args.spark_master,
        max_tasks=args.max_tasks,
    )


def _data_plane(args: argparse.Namespace, spark_conf: dict[str, str]) -> DataPlane:
    if args.data_plane != "spark":
        return ControlOnlyDataPlane()
    return SparkDataPlane(
        master=args.spark_master,
        conf=spark_conf,
        allowed_transform_modules=args.allow_transform_module,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the executor until SIGTERM/SIGINT; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s [%(threadName)s] %(message)s",
        stream=sys.stderr,
    )
    coordinators, spark_conf, failpoints, security, to_coordinator = _checked_options(parser, args)
    try:
        telemetry = start_telemetry(
            "lockgate-executor", metrics_listen=args.metrics_listen, service_instance_id=args.id
        )
    except (TelemetryConfigError, MetricsListenError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    data_plane = _data_plane(args, spark_conf)
    channel = open_channel(coordinators, telemetry=telemetry, security=to_coordinator)
    settings = _settings(args, coordinators)
    runtime = Worker(
        settings,
        coordinator=GrpcCoordinatorClient(coordinator_pb2_grpc.CoordinatorServiceStub(channel)),
        data_plane=data_plane,
        fence=LeaderEpochFence(),
        failpoints=failpoints,
        instruments=Instruments(telemetry.meter()),
    )

    def register(server: grpc.Server) -> None:
        executor_pb2_grpc.add_ExecutorServiceServicer_to_server(
            ExecutorServicer(runtime, coordinator_addresses=coordinators), server
        )

    bound = ShutdownBound(args.shutdown_timeout_s)
    try:
        server = build_server(
            service_name="lockgate-executor",
            listen=args.listen,
            register=register,
            service_full_names=[
                executor_pb2.DESCRIPTOR.services_by_name["ExecutorService"].full_name
            ],
            telemetry=telemetry,
            # Calls still running get a short grace: the batches they may wait for are
            # only cancelled after the server stopped.
            grace_seconds=min(_SERVER_GRACE_S, bound.timeout_s / 4),
            security=security,
        )
    except (ServerBindError, ValueError) as exc:
        _LOG.error("%s", exc)
        return 1
    if args.advertise is None and server.address != args.listen:
        runtime.settings = dataclasses.replace(settings, advertised_address=server.address)
    try:
        data_plane.start()
    except Exception:
        _LOG.exception("the data plane (SparkSession on %s) could not start", args.spark_master)
        server.stop(0)
        return 1
    runtime.start()
    server.catch_signals()  # before saying it serves: a SIGTERM from here stops it gracefully
    _LOG.info(
        "executor %s serving on %s, coordinator %s, data plane %s",
        args.id,
        runtime.settings.advertised_address,
        ",".join(coordinators),
        args.data_plane,
    )
    try:
        server.serve_until_signal(on_signal=lambda _: bound.arm())
    finally:
        _shut_down(runtime, data_plane, bound)
        channel.close()
    return 0


def _shut_down(runtime: Worker, data_plane: DataPlane, bound: ShutdownBound) -> None:
    """Cancel and wait for the batches, deregister, stop the SparkSession and its JVM, all
    within ``bound``. A batch that outlives its cancellation ends the process at once after
    the deregistration (its children killed, exit ``EXIT_SHUTDOWN_TIMEOUT``): nothing else
    would end it."""
    still_running = runtime.stop(
        batch_timeout_s=bound.remaining(keep_s=bound.timeout_s * _KEEP_AFTER_BATCHES)
    )
    if still_running:
        bound.give_up(
            "the batch of "
            + ", ".join(str(ref) for ref in still_running)
            + " did not end when its Spark jobs were cancelled"
        )
    data_plane.stop(timeout_s=bound.remaining())


if __name__ == "__main__":
    sys.exit(main())
