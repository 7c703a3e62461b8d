"""``python -m lockgate.localcluster.testbed``: the services other languages' tests run against.

One real testbed: it must print addresses that answer (a leader among the coordinators, the
executors registered, the registry's REST API), and stop every process it started when its
standard input closes, as a test runner that exits closes it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import grpc
import httpx

from lockgate.v1 import coordinator_pb2, coordinator_pb2_grpc
from tests.support.processes import pid_alive
from tests.support.waits import wait_for


def test_testbed_prints_live_services_and_stops_them_when_stdin_closes(tmp_path: Path) -> None:
    home = tmp_path / "testbed"
    child = subprocess.Popen(
        [sys.executable, "-m", "lockgate.localcluster.testbed", "--home", str(home)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line, "the testbed printed nothing; see its stderr"
        bed = json.loads(line)
        assert json.loads((home / "testbed.json").read_text()) == bed
        assert len(bed["coordinators"]) == 3 and len(bed["executors"]) == 2
        with grpc.insecure_channel(bed["coordinators"][0]) as channel:
            info = coordinator_pb2_grpc.CoordinatorServiceStub(channel).GetClusterInfo(
                coordinator_pb2.GetClusterInfoRequest(), timeout=10
            )
        assert info.leader_address in bed["coordinators"]
        answer = httpx.get(f"{bed['registry_http']}/subjects", timeout=10, trust_env=False)
        assert answer.status_code == 200 and answer.json() == []
        pids = [process["pid"] for process in bed["processes"]]
        assert all(pid_alive(pid) for pid in pids)
    finally:
        assert child.stdin is not None
        child.stdin.close()
        assert child.wait(timeout=120) == 0
    wait_for(
        "every testbed process to exit",
        lambda: not any(pid_alive(pid) for pid in pids) or None,
        timeout_s=30,
    )
