"""The local cluster's CLI (`python -m lockgate.localcluster.cluster`, what `make cluster-up`
runs) as the tests run it: on free ports and a home of the test's own, never the defaults."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from lockgate.localcluster.ports import free_port

#: An Avro schema the tests register through the cluster's schema registry.
SCHEMA = json.dumps({"type": "record", "name": "Cluster", "fields": [{"name": "a", "type": "int"}]})


@dataclass(frozen=True)
class ClusterPorts:
    """The cluster's ports for one test: free ones, never the defaults (9092, 7090, ...)."""

    kafka: int
    controller: int
    registry_grpc: int
    registry_http: int

    @classmethod
    def free(cls, *, kafka: int | None = None) -> ClusterPorts:
        return cls(kafka or free_port(), free_port(), free_port(), free_port())

    @property
    def registry_grpc_address(self) -> str:
        return f"127.0.0.1:{self.registry_grpc}"

    @property
    def registry_http_address(self) -> str:
        return f"127.0.0.1:{self.registry_http}"


def run_cluster(
    home: Path, ports: ClusterPorts, *args: str, services: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``lockgate.localcluster.cluster ARGS`` on ``ports``; ``services`` (the service
    port variables) brings the coordinators and executors in too."""
    env = {**os.environ}
    for name in (
        "LOCKGATE_HOME",
        "LOCKGATE_SCHEMA_REGISTRY_GRPC_PORT",
        "LOCKGATE_SCHEMA_REGISTRY_HTTP_PORT",
        "LOCKGATE_DB",
        "LOCKGATE_POSTGRES_PORT",
    ):
        env.pop(name, None)
    # Most of these tests are about the broker and the registry; the coordinators and
    # executors (a Spark start each) only where ``services`` gives their ports.
    if services is None:
        env["LOCKGATE_CLUSTER_SERVICES"] = "none"
    else:
        env.pop("LOCKGATE_CLUSTER_SERVICES", None)
        env.update(services)
    # Not the fixed default metrics ports: the services' ports come with ``services``.
    env["LOCKGATE_SCHEMA_REGISTRY_METRICS_PORT"] = "none"
    for name in ("LOCKGATE_COORDINATOR_METRICS_PORTS", "LOCKGATE_EXECUTOR_METRICS_PORTS"):
        env[name] = (services or {}).get(name, "none")
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "lockgate.localcluster.cluster",
            *args,
            "--home",
            str(home),
            "--kafka-port",
            str(ports.kafka),
            "--kafka-controller-port",
            str(ports.controller),
            "--registry-grpc-port",
            str(ports.registry_grpc),
            "--registry-http-port",
            str(ports.registry_http),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )


@contextlib.contextmanager
def traversable_home(prefix: str) -> Iterator[Path]:
    """A cluster home PostgreSQL's unprivileged user can enter when the tests run as root
    (pytest's tmp_path is private to root), removed afterwards."""
    home = Path(tempfile.mkdtemp(prefix=prefix))
    home.chmod(0o755)
    try:
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)
