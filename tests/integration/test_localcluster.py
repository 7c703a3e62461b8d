"""The local cluster CLI and the process supervision under it, with real processes.

Every test uses its own home directory and free ports: nothing here touches 127.0.0.1:9092
or the repository's .lockgate/.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lockgate.localcluster.kafka import is_broker_ready
from lockgate.localcluster.process import (
    PidRecord,
    PortInUseError,
    ProcessSpec,
    ProcessStartError,
    check_ports_free,
    is_alive,
    lockgate_home,
    port_holder,
    read_pid_file,
    start_process,
    stop_pid,
    stop_process,
)
from tests.fixtures.kafka import free_port

pytestmark = pytest.mark.integration


def _cluster(
    home: Path, port: int, controller_port: int, *args: str
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ}
    env.pop("LOCKGATE_HOME", None)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "lockgate.localcluster.cluster",
            *args,
            "--home",
            str(home),
            "--kafka-port",
            str(port),
            "--kafka-controller-port",
            str(controller_port),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )


def test_cluster_up_status_down(tmp_path: Path) -> None:
    home = tmp_path / "home"
    port, controller_port = free_port(), free_port()
    try:
        up = _cluster(home, port, controller_port, "up")
        assert up.returncode == 0, up.stderr
        assert "kafka: up (pid " in up.stdout
        record = read_pid_file(home, "kafka")
        assert record is not None and is_alive(record)
        assert (home / "log" / "kafka.log").exists()
        assert is_broker_ready(f"127.0.0.1:{port}")

        again = _cluster(home, port, controller_port, "up")
        assert again.returncode == 0, again.stderr
        assert f"already up (pid {record.pid}" in again.stdout

        status = _cluster(home, port, controller_port, "status")
        assert status.returncode == 0
        assert status.stdout.split() == ["kafka", f"pid={record.pid}", f"127.0.0.1:{port}", "up"]

        down = _cluster(home, port, controller_port, "down")
        assert down.returncode == 0, down.stderr
        assert f"kafka: stopped pid {record.pid}" in down.stdout
        assert not is_alive(record)
        assert port_holder(port) is None
        assert not (home / "run" / "kafka.pid").exists()

        twice = _cluster(home, port, controller_port, "down")
        assert twice.returncode == 0, twice.stderr
        assert "kafka: not running" in twice.stdout

        status = _cluster(home, port, controller_port, "status")
        assert status.stdout.split() == ["kafka", "pid=-", f"127.0.0.1:{port}", "down"]

        # A second `up` on the formatted home keeps the data and starts again.
        restarted = _cluster(home, port, controller_port, "up")
        assert restarted.returncode == 0, restarted.stderr
    finally:
        _cluster(home, port, controller_port, "down")


def test_cluster_up_names_the_port_taken_and_its_process(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = int(squatter.getsockname()[1])
        home = tmp_path / "home"
        up = _cluster(home, taken, free_port(), "up")
        assert up.returncode == 1
        assert f"port {taken}" in up.stderr
        assert f"pid {os.getpid()}" in up.stderr  # the holder: this test process
        assert read_pid_file(home, "kafka") is None


def test_cluster_rejects_bad_port(tmp_path: Path) -> None:
    result = _cluster(tmp_path, 70000, 9093, "status")
    assert result.returncode != 0
    assert "--kafka-port" in result.stderr and "70000" in result.stderr


def test_port_holder_and_check_ports_free() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = int(sock.getsockname()[1])
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
