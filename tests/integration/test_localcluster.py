"""The local cluster CLI and the process supervision under it, with real processes.

Every test uses its own home directory and free ports: nothing here touches 127.0.0.1:9092
or the repository's .lockgate/.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from lockgate.common.ports import describe_port_holder
from lockgate.localcluster.cluster import (
    SCHEMA_REGISTRY,
    ClusterSettings,
    is_registry_ready,
    schema_registry_spec,
)
from lockgate.localcluster.commands import registry_command
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
from tests.support.local_cluster import SCHEMA, ClusterPorts, run_cluster
from tests.support.processes import children, pid_alive
from tests.support.waits import wait_for


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


def test_cluster_up_status_down(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ports = ClusterPorts.free()
    registry_line = [
        SCHEMA_REGISTRY,
        f"grpc={ports.registry_grpc_address},http={ports.registry_http_address}",
    ]
    try:
        up = run_cluster(home, ports, "up")
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

        again = run_cluster(home, ports, "up")
        assert again.returncode == 0, again.stderr
        assert f"already up (pid {record.pid}" in again.stdout
        assert f"already up (pid {registry.pid}" in again.stdout

        status = run_cluster(home, ports, "status")
        assert status.returncode == 0
        assert [line.split() for line in status.stdout.splitlines()] == [
            ["kafka", f"pid={record.pid}", f"127.0.0.1:{ports.kafka}", "up"],
            [registry_line[0], f"pid={registry.pid}", registry_line[1], "up"],
        ]

        down = run_cluster(home, ports, "down")
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

        twice = run_cluster(home, ports, "down")
        assert twice.returncode == 0, twice.stderr
        assert "kafka: not running" in twice.stdout
        assert f"{SCHEMA_REGISTRY}: not running" in twice.stdout

        status = run_cluster(home, ports, "status")
        assert [line.split() for line in status.stdout.splitlines()] == [
            ["kafka", "pid=-", f"127.0.0.1:{ports.kafka}", "down"],
            [registry_line[0], "pid=-", registry_line[1], "down"],
        ]

        # A second `up` on the same home keeps the data (the registry's schema too).
        restarted = run_cluster(home, ports, "up")
        assert restarted.returncode == 0, restarted.stderr
        kept = httpx.get(f"{rest}/schemas/ids/{schema_id}")
        assert kept.status_code == 200 and json.loads(kept.json()["schema"]) == json.loads(SCHEMA)
    finally:
        run_cluster(home, ports, "down")


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
        up = run_cluster(home, ClusterPorts.free(kafka=taken), "up")
        assert up.returncode == 1
        assert f"port {taken}" in up.stderr
        assert f"pid {os.getpid()}" in up.stderr  # the holder: this test process
        assert read_pid_file(home, "kafka") is None


def test_cluster_rejects_bad_port(tmp_path: Path) -> None:
    ports = ClusterPorts.free()
    result = run_cluster(
        tmp_path, ClusterPorts(70000, 9093, ports.registry_grpc, ports.registry_http), "status"
    )
    assert result.returncode != 0
    assert "--kafka-port" in result.stderr and "70000" in result.stderr


def test_cluster_rejects_bad_and_clashing_registry_ports(tmp_path: Path) -> None:
    ports = ClusterPorts.free()
    bad = run_cluster(
        tmp_path, ClusterPorts(ports.kafka, ports.controller, 0, ports.registry_http), "status"
    )
    assert bad.returncode != 0
    assert "--registry-grpc-port" in bad.stderr and "got 0" in bad.stderr
    clash = run_cluster(
        tmp_path,
        ClusterPorts(ports.kafka, ports.controller, ports.kafka, ports.registry_http),
        "status",
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


def test_a_listener_on_another_address_of_the_port_is_not_named_as_its_holder() -> None:
    # The kernel hands the same port number to listeners on different addresses: a JVM on the
    # machine's own address does not keep anything from binding loopback's, and naming it as
    # the holder sent an operator (and a test) to the wrong process.
    mine = f"pid {os.getpid()} "
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other:
        other.bind(("127.0.0.2", 0))
        other.listen()
        port = int(other.getsockname()[1])
        assert port_holder(port) is None
        assert describe_port_holder(port, "127.0.0.1") is None
        for host in ("127.0.0.2", "0.0.0.0", None):
            holder = describe_port_holder(port, host)
            assert holder is not None and holder.startswith(mine), host
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as loopback:
            loopback.bind(("127.0.0.1", port))
            loopback.listen()
            assert (port_holder(port) or "").startswith(mine)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as wildcard:
        wildcard.bind(("0.0.0.0", 0))
        wildcard.listen()
        assert (port_holder(wildcard.getsockname()[1]) or "").startswith(mine)


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
