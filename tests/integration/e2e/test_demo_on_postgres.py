"""``LOCKGATE_DB=postgres make demo``: the local cluster on PostgreSQL, then the demo against it.

The cluster is started by ``python -m lockgate.localcluster.cluster up`` (what ``make
cluster-up`` runs) with ``LOCKGATE_DB=postgres``, on free ports and a home of its own; the demo
(``python -m lockgate.localcluster.demo``, what ``make demo`` runs next) copies a seeded topic
while it SIGKILLs executor e2, and checks the output with a ``read_committed`` consumer. Smaller
than ``make demo`` (20,000 records, not 200,000), the same steps.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from lockgate.localcluster.databases import COORDINATOR_DATABASE
from lockgate.localcluster.ports import free_port


@pytest.fixture
def postgres_home() -> Iterator[Path]:
    """A cluster home PostgreSQL's unprivileged user can enter when the tests run as root."""
    home = Path(tempfile.mkdtemp(prefix="lockgate-demo-pg-"))
    home.chmod(0o755)
    try:
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_the_demo_passes_on_a_postgres_backed_cluster(postgres_home: Path) -> None:
    pg_port, kafka_port = free_port(), free_port()
    coordinators = [free_port() for _ in range(3)]
    ports = [
        "--kafka-port",
        str(kafka_port),
        "--kafka-controller-port",
        str(free_port()),
        "--registry-grpc-port",
        str(free_port()),
        "--registry-http-port",
        str(free_port()),
    ]
    env = {
        **os.environ,
        "LOCKGATE_HOME": str(postgres_home),
        "LOCKGATE_DB": "postgres",
        "LOCKGATE_POSTGRES_PORT": str(pg_port),
        "LOCKGATE_COORDINATOR_PORTS": ",".join(map(str, coordinators)),
        "LOCKGATE_EXECUTOR_PORTS": f"{free_port()},{free_port()}",
        "LOCKGATE_SCHEMA_REGISTRY_METRICS_PORT": "none",
        "LOCKGATE_COORDINATOR_METRICS_PORTS": "none",
        "LOCKGATE_EXECUTOR_METRICS_PORTS": "none",
    }
    env.pop("LOCKGATE_CLUSTER_SERVICES", None)

    def cluster(command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "lockgate.localcluster.cluster", command, *ports],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
            check=False,
        )

    try:
        up = cluster("up")
        assert up.returncode == 0, up.stdout + up.stderr
        demo = subprocess.run(
            [
                sys.executable,
                "-m",
                "lockgate.localcluster.demo",
                "--bootstrap-servers",
                f"127.0.0.1:{kafka_port}",
                *(f"--coordinator=127.0.0.1:{port}" for port in coordinators),
                "--records",
                "20000",
                "--partitions",
                "2",
                "--timeout",
                "300",
            ],
            capture_output=True,
            text=True,
            timeout=420,
            env=env,
            check=False,
        )
        assert demo.returncode == 0, demo.stdout + demo.stderr
        assert "exactly once: every record once, none missing" in demo.stdout, demo.stdout
        assert "SIGKILL executor e2" in demo.stdout, demo.stdout
        # The checkpoints the demo went through are rows of the coordinators' PostgreSQL.
        with psycopg.connect(
            f"host=127.0.0.1 port={pg_port} user=postgres dbname={COORDINATOR_DATABASE}"
        ) as conn:
            committed = conn.execute(
                "SELECT count(*) FROM checkpoints WHERE state = 'COMMITTED'"
            ).fetchone()
        assert committed is not None and int(committed[0]) >= 1
    finally:
        down = cluster("down")
        assert down.returncode == 0, down.stderr
