"""The local cluster CLI and the process supervision under it, with real processes.

Every test uses its own home directory and free ports: nothing here touches 127.0.0.1:9092
or the repository's .lockgate/.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import psycopg
import pytest

from lockgate.localcluster.cluster import (
    SCHEMA_REGISTRY,
    ClusterSettings,
    is_registry_ready,
    schema_registry_spec,
)
from lockgate.localcluster.commands import registry_command
from lockgate.localcluster.databases import (
    COORDINATOR_DATABASE,
    POSTGRES,
    REGISTRY_DATABASE,
)
from lockgate.localcluster.kafka import is_broker_ready
from lockgate.localcluster.ports import free_port
from lockgate.localcluster.process import (
    PidRecord,
    PortInUseError,
    ProcessSpec,
    ProcessStartError,
    RunningProcess,
    check_ports_free,
    has_exited,
    is_alive,
    kill_process,
    lockgate_home,
    port_holder,
    read_pid_file,
    start_process,
    stop_pid,
    stop_process,
)
from lockgate.v1 import schema_registry_pb2 as sr_pb
from lockgate.v1 import schema_registry_pb2_grpc as sr_grpc
from tests.support.metrics import scrape, series_value
from tests.support.processes import children, descendants, pid_alive
from tests.support.waits import wait_for

SCHEMA = json.dumps({"type": "record", "name": "Cluster", "fields": [{"name": "a", "type": "int"}]})


@dataclass(frozen=True)
class _Ports:
    """The cluster's ports for one test: free ones, never the defaults (9092, 7090, ...)."""

    kafka: int
    controller: int
    registry_grpc: int
    registry_http: int

    @classmethod
    def free(cls, *, kafka: int | None = None) -> _Ports:
        return cls(kafka or free_port(), free_port(), free_port(), free_port())

    @property
    def registry_grpc_address(self) -> str:
        return f"127.0.0.1:{self.registry_grpc}"

    @property
    def registry_http_address(self) -> str:
        return f"127.0.0.1:{self.registry_http}"


def _cluster(
    home: Path, ports: _Ports, *args: str, services: Mapping[str, str] | None = None
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
def _squatted_port() -> Iterator[int]:
    """A loopback port this test process listens on (so any other bind to it fails) while the
    block runs."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        yield int(squatter.getsockname()[1])


def _two_worker_registry(home: Path) -> tuple[ClusterSettings, RunningProcess]:
    """A schema registry of two worker processes started under ``home`` on free ports."""
    settings = ClusterSettings(
        home=home,
        registry_grpc_port=free_port(),
        registry_http_port=free_port(),
        registry_processes=2,
    )
    return settings, start_process(schema_registry_spec(settings), home=home)


def test_cluster_up_with_services_status_down_leaves_nothing_running(tmp_path: Path) -> None:
    """`make cluster-up` with the coordinators and an executor (its SparkSession included):
    every process is up and listed, and `down` stops all of them and everything they started
    (the executor's JVM and Python workers), freeing every port."""
    home = tmp_path / "home"
    ports = _Ports.free()
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
        up = _cluster(home, ports, "up", services=services)
        assert up.returncode == 0, up.stdout + up.stderr
        for name in names:
            assert f"{name}: up (pid " in up.stdout, up.stdout
        records = {name: read_pid_file(home, name) for name in names}
        assert all(r is not None and is_alive(r) for r in records.values()), records
        executor = records["executor-e1"]
        assert executor is not None
        spark = descendants(executor.pid)
        assert spark, "the executor started no SparkSession process"

        status = _cluster(home, ports, "status", services=services)
        assert status.returncode == 0
        listed = {line.split()[0]: line.split()[-1] for line in status.stdout.splitlines()}
        assert listed == dict.fromkeys(names, "up"), status.stdout
        # Every service serves /metrics on its port; the leader reports its epoch.
        texts = [scrape(f"127.0.0.1:{port}") for port in metrics_ports]
        assert all("# TYPE" in text for text in texts)
        epochs = [series_value(t, "lockgate_leader_epoch") for t in texts[:3]]
        assert any(e is not None and e >= 1 for e in epochs), epochs

        down = _cluster(home, ports, "down", services=services)
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
        _cluster(home, ports, "down", services=services)


@contextlib.contextmanager
def _traversable_home() -> Iterator[Path]:
    """A cluster home PostgreSQL's unprivileged user can enter when the tests run as root
    (pytest's tmp_path is private to root), removed afterwards."""
    home = Path(tempfile.mkdtemp(prefix="lockgate-home-"))
    home.chmod(0o755)
    try:
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


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
    ports = _Ports.free()
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
    with _traversable_home() as home:
        try:
            up = _cluster(home, ports, "up", services=services)
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

            status = _cluster(home, ports, "status", services=services)
            listed = {line.split()[0]: line.split()[1:] for line in status.stdout.splitlines()}
            assert listed[POSTGRES][1:] == [f"127.0.0.1:{pg_port}", "up"], status.stdout

            # `down` without LOCKGATE_DB (as `make clean` runs it) still stops the server.
            sqlite = {k: v for k, v in services.items() if k != "LOCKGATE_DB"}
            down = _cluster(home, ports, "down", services=sqlite)
            assert down.returncode == 0, down.stderr
            assert f"{POSTGRES}: stopped pid" in down.stdout, down.stdout
            assert port_holder(pg_port) is None
            # SIGINT, PostgreSQL's fast shutdown: a clean stop, no crash recovery next time.
            log = (home / "log" / f"{POSTGRES}.log").read_text()
            assert "database system is shut down" in log

            again = _cluster(home, ports, "up", services=services)
            assert again.returncode == 0, again.stdout + again.stderr
            kept = httpx.get(f"{rest}/schemas/ids/{schema_id}")
            assert kept.status_code == 200, kept.text
            wait_for(
                "a new leader epoch after the restart",
                lambda: (_leader(pg_port) or ("", 0))[1] > epoch,
                timeout_s=30,
            )
        finally:
            _cluster(home, ports, "down", services=services)


def test_cluster_up_status_down(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ports = _Ports.free()
    registry_line = [
        SCHEMA_REGISTRY,
        f"grpc={ports.registry_grpc_address},http={ports.registry_http_address}",
    ]
    try:
        up = _cluster(home, ports, "up")
        assert up.returncode == 0, up.stderr
        assert "kafka: up (pid " in up.stdout
        assert f"{SCHEMA_REGISTRY}: up (pid " in up.stdout
        # The broker starts first: the registry is a later service.
        assert up.stdout.index("kafka: up") < up.stdout.index(f"{SCHEMA_REGISTRY}: up")
        record = read_pid_file(home, "kafka")
        assert record is not None and is_alive(record)
        registry = read_pid_file(home, SCHEMA_REGISTRY)
        assert registry is not None and is_alive(registry)
        assert (home / "log" / "kafka.log").exists()
        assert (home / "log" / f"{SCHEMA_REGISTRY}.log").exists()
        assert is_broker_ready(f"127.0.0.1:{ports.kafka}")
        # One worker process per core (none on a single core): all must stop with `down`.
        workers = children(registry.pid)

        # The registry works over both APIs, on its SQLite file in the home.
        rest = f"http://{ports.registry_http_address}"
        created = httpx.post(f"{rest}/subjects/orders-value/versions", json={"schema": SCHEMA})
        assert created.status_code == 200, created.text
        schema_id = created.json()["id"]
        with grpc.insecure_channel(ports.registry_grpc_address) as channel:
            found = sr_grpc.SchemaRegistryServiceStub(channel).GetSchema(
                sr_pb.GetSchemaRequest(schema_id=schema_id), timeout=30
            )
        assert json.loads(found.schema.schema) == json.loads(SCHEMA)
        assert (home / "schema-registry.db").exists()

        again = _cluster(home, ports, "up")
        assert again.returncode == 0, again.stderr
        assert f"already up (pid {record.pid}" in again.stdout
        assert f"already up (pid {registry.pid}" in again.stdout

        status = _cluster(home, ports, "status")
        assert status.returncode == 0
        assert [line.split() for line in status.stdout.splitlines()] == [
            ["kafka", f"pid={record.pid}", f"127.0.0.1:{ports.kafka}", "up"],
            [registry_line[0], f"pid={registry.pid}", registry_line[1], "up"],
        ]

        down = _cluster(home, ports, "down")
        assert down.returncode == 0, down.stderr
        assert f"kafka: stopped pid {record.pid}" in down.stdout
        assert f"{SCHEMA_REGISTRY}: stopped pid {registry.pid}" in down.stdout
        # Reverse start order: the registry stops before the broker.
        assert down.stdout.index(SCHEMA_REGISTRY) < down.stdout.index("kafka: stopped")
        assert not is_alive(record)
        assert not is_alive(registry)
        assert not any(pid_alive(worker) for worker in workers)
        for port in (ports.kafka, ports.registry_grpc, ports.registry_http):
            assert port_holder(port) is None
        assert not is_registry_ready(ports.registry_http_address, timeout_s=0.5)
        assert not (home / "run" / "kafka.pid").exists()
        assert not (home / "run" / f"{SCHEMA_REGISTRY}.pid").exists()

        twice = _cluster(home, ports, "down")
        assert twice.returncode == 0, twice.stderr
        assert "kafka: not running" in twice.stdout
        assert f"{SCHEMA_REGISTRY}: not running" in twice.stdout

        status = _cluster(home, ports, "status")
        assert [line.split() for line in status.stdout.splitlines()] == [
            ["kafka", "pid=-", f"127.0.0.1:{ports.kafka}", "down"],
            [registry_line[0], "pid=-", registry_line[1], "down"],
        ]

        # A second `up` on the same home keeps the data (the registry's schema too).
        restarted = _cluster(home, ports, "up")
        assert restarted.returncode == 0, restarted.stderr
        kept = httpx.get(f"{rest}/schemas/ids/{schema_id}")
        assert kept.status_code == 200 and json.loads(kept.json()["schema"]) == json.loads(SCHEMA)
    finally:
        _cluster(home, ports, "down")


def test_registry_port_taken_is_named_and_nothing_is_left_running(tmp_path: Path) -> None:
    with _squatted_port() as taken:
        settings = ClusterSettings(
            home=tmp_path, registry_grpc_port=taken, registry_http_port=free_port()
        )
        with pytest.raises(PortInUseError) as info:
            start_process(schema_registry_spec(settings), home=tmp_path)
        assert info.value.port == taken
        assert f"pid {os.getpid()}" in str(info.value)
        assert read_pid_file(tmp_path, SCHEMA_REGISTRY) is None


def test_registry_workers_do_not_outlive_a_killed_supervisor(tmp_path: Path) -> None:
    settings, running = _two_worker_registry(tmp_path)
    try:
        workers = children(running.pid)
        assert len(workers) == 2
        os.kill(running.pid, signal.SIGKILL)
        wait_for(
            "the registry's workers exiting after their supervisor was killed",
            lambda: not any(pid_alive(worker) for worker in workers),
            timeout_s=30,
        )
        wait_for(
            "the registry's ports being released",
            lambda: (
                port_holder(settings.registry_http_port) is None
                and port_holder(settings.registry_grpc_port) is None
            ),
            timeout_s=30,
        )
    finally:
        stop_process(home=tmp_path, name=SCHEMA_REGISTRY, grace_s=5)


def test_cluster_up_names_the_port_taken_and_its_process(tmp_path: Path) -> None:
    with _squatted_port() as taken:
        home = tmp_path / "home"
        up = _cluster(home, _Ports.free(kafka=taken), "up")
        assert up.returncode == 1
        assert f"port {taken}" in up.stderr
        assert f"pid {os.getpid()}" in up.stderr  # the holder: this test process
        assert read_pid_file(home, "kafka") is None


def test_cluster_rejects_bad_port(tmp_path: Path) -> None:
    ports = _Ports.free()
    result = _cluster(
        tmp_path, _Ports(70000, 9093, ports.registry_grpc, ports.registry_http), "status"
    )
    assert result.returncode != 0
    assert "--kafka-port" in result.stderr and "70000" in result.stderr


def test_cluster_rejects_bad_and_clashing_registry_ports(tmp_path: Path) -> None:
    ports = _Ports.free()
    bad = _cluster(
        tmp_path, _Ports(ports.kafka, ports.controller, 0, ports.registry_http), "status"
    )
    assert bad.returncode != 0
    assert "--registry-grpc-port" in bad.stderr and "got 0" in bad.stderr
    clash = _cluster(
        tmp_path, _Ports(ports.kafka, ports.controller, ports.kafka, ports.registry_http), "status"
    )
    assert clash.returncode != 0
    assert "--kafka-port and --registry-grpc-port must differ" in clash.stderr


def test_port_holder_and_check_ports_free() -> None:
    with _squatted_port() as port:
        holder = port_holder(port)
        assert holder is not None and holder.startswith(f"pid {os.getpid()} ")
        with pytest.raises(PortInUseError) as info:
            check_ports_free((port,), wanted_by="demo")
        assert info.value.port == port
        assert str(port) in str(info.value) and "demo" in str(info.value)
    assert port_holder(port) is None


_STUBBORN = textwrap.dedent(
    """
    import signal, sys
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    open(sys.argv[1], "w").write("ready")
    while True:
        signal.pause()
    """
)


def test_start_and_stop_a_process_that_ignores_sigterm(tmp_path: Path) -> None:
    marker = tmp_path / "ready"
    spec = ProcessSpec(
        name="stubborn",
        argv=(sys.executable, "-c", _STUBBORN, str(marker)),
        address="-",
        ready=marker.exists,
        ready_timeout_s=30,
        stop_grace_s=0.5,
    )
    running = start_process(spec, home=tmp_path)
    record = read_pid_file(tmp_path, "stubborn")
    assert record is not None and record.pid == running.pid and is_alive(record)

    assert stop_process(home=tmp_path, name="stubborn", grace_s=0.5) == running.pid
    assert not is_alive(record)  # SIGTERM was ignored, so SIGKILL ended it
    assert stop_process(home=tmp_path, name="stubborn") is None


_LISTENER = textwrap.dedent(
    """
    import socket, sys, threading, time
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", int(sys.argv[1])))
    server.listen()
    for _ in range(4):  # threads that must all be gone before the port is free again
        threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
    while True:
        server.accept()[0].close()
    """
)


def test_a_killed_process_can_start_again_on_its_port_at_once(tmp_path: Path) -> None:
    port = free_port()
    spec = ProcessSpec(
        name="listener",
        argv=(sys.executable, "-c", _LISTENER, str(port)),
        address=f"127.0.0.1:{port}",
        ports=(port,),
        ready=lambda: port_holder(port) is not None,
        ready_timeout_s=30,
    )
    first = start_process(spec, home=tmp_path)
    assert kill_process(home=tmp_path, name="listener") == first.pid
    record = read_pid_file(tmp_path, "listener")
    assert record is not None and has_exited(record), "the pid file stays, the process is gone"
    check_ports_free((port,), wanted_by="the restart")
    second = start_process(spec, home=tmp_path)  # same port, no wait in between
    assert second.pid != first.pid
    assert kill_process(home=tmp_path, name="listener") == second.pid
    assert kill_process(home=tmp_path, name="listener") is None


def test_stop_pid_leaves_a_recycled_pid_alone() -> None:
    # Our own pid with a start time that is not ours: must be treated as "not running".
    assert stop_pid(PidRecord(pid=os.getpid(), start_time=1), grace_s=0.1) is False


def test_start_reports_a_process_that_dies(tmp_path: Path) -> None:
    spec = ProcessSpec(
        name="crasher",
        argv=(sys.executable, "-c", "import sys; print('boom: bad config'); sys.exit(3)"),
        address="-",
        ready=lambda: False,
        ready_timeout_s=30,
    )
    with pytest.raises(ProcessStartError) as info:
        start_process(spec, home=tmp_path)
    assert re.search(r"exited (immediately )?with code 3", str(info.value))
    assert "boom: bad config" in str(info.value)
    assert read_pid_file(tmp_path, "crasher") is None


def test_home_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("LOCKGATE_HOME", raising=False)
    assert lockgate_home().name == ".lockgate"
    monkeypatch.setenv("LOCKGATE_HOME", str(tmp_path / "env-home"))
    assert lockgate_home() == tmp_path / "env-home"
    assert lockgate_home(tmp_path / "flag-home") == tmp_path / "flag-home"


def test_registry_stops_whole_when_one_worker_dies(tmp_path: Path) -> None:
    settings, running = _two_worker_registry(tmp_path)
    record = read_pid_file(tmp_path, SCHEMA_REGISTRY)
    assert record is not None
    try:
        workers = children(running.pid)
        assert len(workers) == 2
        os.kill(workers[0], signal.SIGKILL)
        # A registry missing a worker would refuse a share of connections: it stops instead,
        # so that `cluster status` shows it down rather than half up.
        wait_for(
            "the registry supervisor exiting after a worker died",
            lambda: not is_alive(record),
            timeout_s=30,
        )
        assert not any(pid_alive(worker) for worker in workers)
        log = (tmp_path / "log" / f"{SCHEMA_REGISTRY}.log").read_text()
        # Killed before the supervisor saw every worker ready, the worker is reported as dying
        # "while starting"; either way the log names it and its signal.
        assert re.search(rf"worker (pid )?{workers[0]} exited with code -9", log), log
        assert port_holder(settings.registry_http_port) is None
    finally:
        stop_process(home=tmp_path, name=SCHEMA_REGISTRY, grace_s=5)


def test_registry_names_the_holder_of_a_taken_grpc_port(tmp_path: Path) -> None:
    with _squatted_port() as taken:
        result = subprocess.run(
            registry_command(
                db_url=f"sqlite:///{tmp_path / 'r.db'}",
                grpc_listen=f"127.0.0.1:{taken}",
                http_listen="127.0.0.1:0",
                processes=2,
            ),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 2
    assert f"cannot listen on --grpc 127.0.0.1:{taken}: port {taken} is in use by" in result.stderr
    assert f"pid {os.getpid()}" in result.stderr
    assert "Traceback" not in result.stderr
