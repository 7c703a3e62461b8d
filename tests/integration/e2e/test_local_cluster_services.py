"""`make cluster-up` with its services, with real processes: the coordinators and an executor
(a SparkSession) brought up, listed and stopped whole, and the cluster on PostgreSQL
(`LOCKGATE_DB=postgres`). The broker-and-registry half of the local cluster's CLI, and the
process supervision under it, are `tests/integration/test_localcluster.py`.

Every test uses its own home directory and free ports: nothing here touches 127.0.0.1:9092
or the repository's .lockgate/.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import psycopg

from lockgate.localcluster.cluster import SCHEMA_REGISTRY
from lockgate.localcluster.databases import COORDINATOR_DATABASE, POSTGRES, REGISTRY_DATABASE
from lockgate.localcluster.ports import free_port
from lockgate.localcluster.process import is_alive, port_holder, read_pid_file
from tests.support.local_cluster import SCHEMA, ClusterPorts, run_cluster, traversable_home
from tests.support.metrics import scrape, series_value
from tests.support.processes import descendants, pid_alive
from tests.support.waits import wait_for


def test_cluster_up_with_services_status_down_leaves_nothing_running(tmp_path: Path) -> None:
    """`make cluster-up` with the coordinators and an executor (its SparkSession included):
    every process is up and listed, and `down` stops all of them and everything they started
    (the executor's JVM and Python workers), freeing every port."""
    home = tmp_path / "home"
    ports = ClusterPorts.free()
    coordinator_ports = [free_port() for _ in range(3)]
    executor_port = free_port()
    metrics_ports = [free_port() for _ in range(4)]
    services = {
        "LOCKGATE_COORDINATOR_PORTS": ",".join(str(p) for p in coordinator_ports),
        "LOCKGATE_EXECUTOR_PORTS": str(executor_port),
        "LOCKGATE_COORDINATOR_METRICS_PORTS": ",".join(str(p) for p in metrics_ports[:3]),
        "LOCKGATE_EXECUTOR_METRICS_PORTS": str(metrics_ports[3]),
    }
    names = ["kafka", SCHEMA_REGISTRY, "coordinator-c1", "coordinator-c2", "coordinator-c3"]
    names.append("executor-e1")
    try:
        up = run_cluster(home, ports, "up", services=services)
        assert up.returncode == 0, up.stdout + up.stderr
        for name in names:
            assert f"{name}: up (pid " in up.stdout, up.stdout
        records = {name: read_pid_file(home, name) for name in names}
        assert all(r is not None and is_alive(r) for r in records.values()), records
        executor = records["executor-e1"]
        assert executor is not None
        spark = descendants(executor.pid)
        assert spark, "the executor started no SparkSession process"

        status = run_cluster(home, ports, "status", services=services)
        assert status.returncode == 0
        listed = {line.split()[0]: line.split()[-1] for line in status.stdout.splitlines()}
        assert listed == dict.fromkeys(names, "up"), status.stdout
        # Every service serves /metrics on its port; the leader reports its epoch.
        texts = [scrape(f"127.0.0.1:{port}") for port in metrics_ports]
        assert all("# TYPE" in text for text in texts)
        epochs = [series_value(t, "lockgate_leader_epoch") for t in texts[:3]]
        assert any(e is not None and e >= 1 for e in epochs), epochs

        down = run_cluster(home, ports, "down", services=services)
        assert down.returncode == 0, down.stderr
        for name in names:
            record = records[name]
            assert record is not None
            assert f"{name}: stopped pid {record.pid}" in down.stdout, down.stdout
            assert not is_alive(record)
        left = [pid for pid in spark if pid_alive(pid)]
        assert not left, f"processes the executor started outlived `down`: {left}"
        for port in (ports.kafka, *coordinator_ports, executor_port, *metrics_ports):
            assert port_holder(port) is None, f"port {port} still held"
    finally:
        run_cluster(home, ports, "down", services=services)


def _sql(port: int, database: str, query: str) -> list[tuple[object, ...]]:
    with psycopg.connect(f"host=127.0.0.1 port={port} user=postgres dbname={database}") as conn:
        return list(conn.execute(query).fetchall())


def _leader(port: int) -> tuple[str, int] | None:
    """The lease holder and leader epoch in the coordinators' PostgreSQL database."""
    rows = _sql(port, COORDINATOR_DATABASE, "SELECT holder, leader_epoch FROM leader_lease")
    return (str(rows[0][0]), int(str(rows[0][1]))) if rows and rows[0][0] else None


def test_cluster_on_postgres_elects_a_leader_there_and_keeps_the_registry_there() -> None:
    """`LOCKGATE_DB=postgres make cluster-up`: a PostgreSQL server starts before the registry,
    the coordinators elect a leader in its `lockgate_coordinator` database and the registry
    keeps schemas in `lockgate_schema_registry` (no SQLite file in the home); `down`, even
    without LOCKGATE_DB, stops the server cleanly and frees its port, and a second `up` finds
    the schemas and the lease."""
    ports = ClusterPorts.free()
    pg_port = free_port()
    services = {
        "LOCKGATE_DB": "postgres",
        "LOCKGATE_POSTGRES_PORT": str(pg_port),
        "LOCKGATE_COORDINATOR_PORTS": ",".join(str(free_port()) for _ in range(3)),
        # No executor: this is about the state databases, not Spark.
        "LOCKGATE_EXECUTOR_PORTS": "none",
    }
    names = ["kafka", POSTGRES, SCHEMA_REGISTRY, "coordinator-c1", "coordinator-c2"]
    names.append("coordinator-c3")
    with traversable_home("lockgate-home-") as home:
        try:
            up = run_cluster(home, ports, "up", services=services)
            assert up.returncode == 0, up.stdout + up.stderr
            started = [line.split(":")[0] for line in up.stdout.splitlines() if ": up (pid" in line]
            assert started == names, up.stdout
            holder, epoch = wait_for(
                "a leader in the coordinators' PostgreSQL database",
                lambda: _leader(pg_port),
                timeout_s=30,
            )
            assert holder in {"c1", "c2", "c3"} and epoch >= 1

            rest = f"http://{ports.registry_http_address}"
            created = httpx.post(f"{rest}/subjects/pg-value/versions", json={"schema": SCHEMA})
            assert created.status_code == 200, created.text
            schema_id = created.json()["id"]
            stored = _sql(pg_port, REGISTRY_DATABASE, "SELECT count(*) FROM sr_schemas")
            assert stored == [(1,)]
            assert not (home / "coordinator.db").exists()
            assert not (home / "schema-registry.db").exists()

            status = run_cluster(home, ports, "status", services=services)
            listed = {line.split()[0]: line.split()[1:] for line in status.stdout.splitlines()}
            assert listed[POSTGRES][1:] == [f"127.0.0.1:{pg_port}", "up"], status.stdout

            # `down` without LOCKGATE_DB (as `make clean` runs it) still stops the server.
            sqlite = {k: v for k, v in services.items() if k != "LOCKGATE_DB"}
            down = run_cluster(home, ports, "down", services=sqlite)
            assert down.returncode == 0, down.stderr
            assert f"{POSTGRES}: stopped pid" in down.stdout, down.stdout
            assert port_holder(pg_port) is None
            # SIGINT, PostgreSQL's fast shutdown: a clean stop, no crash recovery next time.
            log = (home / "log" / f"{POSTGRES}.log").read_text()
            assert "database system is shut down" in log

            again = run_cluster(home, ports, "up", services=services)
            assert again.returncode == 0, again.stdout + again.stderr
            kept = httpx.get(f"{rest}/schemas/ids/{schema_id}")
            assert kept.status_code == 200, kept.text
            wait_for(
                "a new leader epoch after the restart",
                lambda: (_leader(pg_port) or ("", 0))[1] > epoch,
                timeout_s=30,
            )
        finally:
            run_cluster(home, ports, "down", services=services)
