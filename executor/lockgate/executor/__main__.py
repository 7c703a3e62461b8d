"""``python -m lockgate.executor`` (console script ``lockgate-executor``): one executor process.

    lockgate-executor --id e1 --coordinator 127.0.0.1:7070 --listen 127.0.0.1:7080 \\
        --spark-master local[2]

Start-up order: read the failpoints (a typo is refused before anything starts), serve
``ExecutorService`` (calls answer UNAVAILABLE until registered), build the SparkSession
and run its warm-up job (so the first checkpoint does not pay for it), then register with
the coordinator and heartbeat. SIGTERM or SIGINT stops serving, stops the tasks and
deregisters. Exit status: 0 after a signal, 2 for bad arguments, 1 if start-up failed,
137 when a failpoint fires.
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
import sys
from collections.abc import Sequence

import grpc

from lockgate.common.failpoints import FailpointConfigError, Failpoints
from lockgate.common.grpc_client import open_channel
from lockgate.common.grpc_server import ServerBindError, build_server
from lockgate.common.telemetry import setup_telemetry
from lockgate.executor.coordinator_client import GrpcCoordinatorClient
from lockgate.executor.dataplane.control_only import ControlOnlyDataPlane
from lockgate.executor.dataplane.protocol import DataPlane
from lockgate.executor.dataplane.spark import SparkDataPlane
from lockgate.executor.fencing import LeaderEpochFence
from lockgate.executor.runtime.values import ExecutorSettings
from lockgate.executor.servicer import ExecutorServicer
from lockgate.executor.worker import Worker
from lockgate.v1 import coordinator_pb2_grpc, executor_pb2, executor_pb2_grpc

_LOG = logging.getLogger("lockgate.executor")
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
        "--data-plane",
        choices=("spark", "none"),
        default="spark",
        help="spark (default); none runs empty pre-commits without Spark, for tests of the "
        "control path only",
    )
    parser.add_argument(
        "--max-tasks", type=int, default=0, help="most tasks to accept; 0 = no limit"
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    return parser


def _coordinators(values: Sequence[str]) -> tuple[str, ...]:
    addresses = tuple(a.strip() for value in values for a in value.split(",") if a.strip())
    for address in addresses:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"--coordinator {address!r} is not HOST:PORT, e.g. 127.0.0.1:7070")
    return addresses


def _spark_conf(values: Sequence[str]) -> dict[str, str]:
    conf: dict[str, str] = {}
    for value in values:
        key, sep, setting = value.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--spark-conf {value!r} is not KEY=VALUE")
        conf[key.strip()] = setting
    return conf


def _checked_options(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> tuple[tuple[str, ...], dict[str, str], Failpoints]:
    """The coordinators, the Spark settings and the armed failpoints; a bad one exits 2
    naming the flag (or the LOCKGATE_FAILPOINTS entry) and the fix."""
    if not args.id or not set(args.id) <= _ID_CHARS or len(args.id) > 100:
        parser.error(f"--id {args.id!r}: use 1 to 100 characters of [a-zA-Z0-9._-]")
    try:
        coordinators = _coordinators(args.coordinator)
        spark_conf = _spark_conf(args.spark_conf)
        failpoints = Failpoints.from_env()
    except (ValueError, FailpointConfigError) as exc:
        parser.error(str(exc))
    if failpoints.armed:
        _LOG.warning(
            "failpoints armed: %s",
            ", ".join(a.describe() for a in failpoints.armed),
        )
    return coordinators, spark_conf, failpoints


def main(argv: Sequence[str] | None = None) -> int:
    """Run the executor until SIGTERM/SIGINT; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s [%(threadName)s] %(message)s",
        stream=sys.stderr,
    )
    coordinators, spark_conf, failpoints = _checked_options(parser, args)
    telemetry = setup_telemetry("lockgate-executor", service_instance_id=args.id)
    data_plane: DataPlane = (
        SparkDataPlane(master=args.spark_master, conf=spark_conf)
        if args.data_plane == "spark"
        else ControlOnlyDataPlane()
    )
    channel = open_channel(coordinators, telemetry=telemetry)
    fence = LeaderEpochFence()
    # The advertised address is completed right after the bind (port 0 picks one), before
    # the runtime registers it with the coordinator.
    settings = ExecutorSettings(
        executor_id=args.id,
        advertised_address=args.advertise or args.listen,
        coordinator_addresses=coordinators,
        spark_master=args.spark_master,
        max_tasks=args.max_tasks,
    )
    runtime = Worker(
        settings,
        coordinator=GrpcCoordinatorClient(coordinator_pb2_grpc.CoordinatorServiceStub(channel)),
        data_plane=data_plane,
        fence=fence,
        failpoints=failpoints,
    )

    def register(server: grpc.Server) -> None:
        executor_pb2_grpc.add_ExecutorServiceServicer_to_server(
            ExecutorServicer(runtime, coordinator_addresses=coordinators), server
        )

    try:
        server = build_server(
            service_name="lockgate-executor",
            listen=args.listen,
            register=register,
            service_full_names=[
                executor_pb2.DESCRIPTOR.services_by_name["ExecutorService"].full_name
            ],
            telemetry=telemetry,
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
    _LOG.info(
        "executor %s serving on %s, coordinator %s, data plane %s",
        args.id,
        runtime.settings.advertised_address,
        ",".join(coordinators),
        args.data_plane,
    )
    try:
        server.serve_until_signal()
    finally:
        runtime.stop()
        data_plane.stop()
        channel.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
