"""``LOCKGATE_DB=postgres make demo``: the local cluster on PostgreSQL, then the demo against it.

The cluster is started by ``python -m lockgate.localcluster.cluster up`` (what ``make
cluster-up`` runs) with ``LOCKGATE_DB=postgres``, on free ports and a home of its own; the demo
(``python -m lockgate.localcluster.demo``, what ``make demo`` runs next) copies a seeded topic
while it SIGKILLs executor e2, and checks the output with a ``read_committed`` consumer. Smaller
than ``make demo`` (20,000 records, not 200,000), the same steps.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from lockgate.localcluster.databases import COORDINATOR_DATABASE
from lockgate.localcluster.ports import free_port
from tests.support.local_cluster import traversable_home


@pytest.fixture
def postgres_home() -> Iterator[Path]:
    """A cluster home PostgreSQL's unprivileged user can enter when the tests run as root."""
    with traversable_home("lockgate-demo-pg-") as home:
        yield home


#: Tries of ``cluster up`` on new ports. A free port is only probably free (``free_port``):
#: another xdist worker's process can bind it while this cluster starts, and ``cluster up``
#: cannot move a port it was given, so the test picks new ones and tries again.
_UP_ATTEMPTS = 3


def _cluster_env(home: Path) -> tuple[list[str], dict[str, str]]:
    """``cluster up``'s port arguments and environment, on ports free a moment ago."""
    args = [
        "--kafka-port",
        str(free_port()),
        "--kafka-controller-port",
        str(free_port()),
        "--registry-grpc-port",
        str(free_port()),
        "--registry-http-port",
        str(free_port()),
    ]
    env = {
        **os.environ,
        "LOCKGATE_HOME": str(home),
        "LOCKGATE_DB": "postgres",
        "LOCKGATE_POSTGRES_PORT": str(free_port()),
        "LOCKGATE_COORDINATOR_PORTS": ",".join(str(free_port()) for _ in range(3)),
        "LOCKGATE_EXECUTOR_PORTS": f"{free_port()},{free_port()}",
        "LOCKGATE_SCHEMA_REGISTRY_METRICS_PORT": "none",
        "LOCKGATE_COORDINATOR_METRICS_PORTS": "none",
        "LOCKGATE_EXECUTOR_METRICS_PORTS": "none",
    }
    env.pop("LOCKGATE_CLUSTER_SERVICES", None)
    return args, env


def test_the_demo_passes_on_a_postgres_backed_cluster(postgres_home: Path) -> None:
    ports, env = _cluster_env(postgres_home)

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
        for _ in range(_UP_ATTEMPTS):
            up = cluster("up")
            if up.returncode == 0 or "already in use" not in up.stdout + up.stderr:
                break
            ports, env = _cluster_env(postgres_home)  # `up` stopped what it had started
        assert up.returncode == 0, up.stdout + up.stderr
        kafka_port = int(ports[ports.index("--kafka-port") + 1])
        pg_port = int(env["LOCKGATE_POSTGRES_PORT"])
        coordinators = env["LOCKGATE_COORDINATOR_PORTS"].split(",")
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
                # At the first checkpoint in flight: 20,000 records are one checkpoint, which
                # can be committed before the default 2 s have passed, and then nothing is.
                "--kill-after",
                "0",
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
