"""``python -m lockgate.localcluster.testbed --home DIR``: a whole Lockgate on free ports, for
tests written in other languages (the Go, Java and TypeScript clients' own test runners).

It starts, each as its own process on a free loopback port: a Kafka broker, the schema
registry (one worker), three coordinator replicas sharing one SQLite file, and executors
running the control path only (``--data-plane none``: no Spark, so they are ready in seconds).
When every process is ready it prints **one line of JSON** on stdout and writes the same to
``DIR/testbed.json``::

    {"home": "...", "kafka": "127.0.0.1:p", "coordinators": ["127.0.0.1:p", ...],
     "executors": ["127.0.0.1:p", ...], "registry_grpc": "127.0.0.1:p",
     "registry_http": "http://127.0.0.1:p", "lease_ms": 1500,
     "processes": [{"name": "coordinator-c1", "address": "127.0.0.1:p", "pid": 123}, ...]}

It then waits until its standard input closes (the test runner exited or closed the pipe) or
it gets SIGTERM/SIGINT, and stops every process it started, in reverse order. A test kills a
coordinator (e.g. the leader, found with ``GetClusterInfo``) by the pid listed for its address.

A failure to start prints ``error: ...`` on stderr, stops what was started, and exits 1.
"""

from __future__ import annotations

import argparse
import functools
import json
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from lockgate.localcluster.cluster import ClusterSettings, schema_registry_spec
from lockgate.localcluster.kafka import KafkaSetupError, broker_spec
from lockgate.localcluster.ports import LOOPBACK, free_port
from lockgate.localcluster.process import (
    PortInUseError,
    ProcessError,
    ProcessSpec,
    RunningProcess,
    start_process,
    stop_process,
)
from lockgate.localcluster.services import coordinator_spec, executor_spec

#: A short lease so a test that kills the leader sees a new one quickly.
TESTBED_LEASE_MS = 1500
#: How often a spec is rebuilt on new ports when another process took a probed port.
_PORT_ATTEMPTS = 5


@dataclass
class Testbed:
    """The processes started so far, in start order, and the addresses the JSON names."""

    home: Path
    running: list[RunningProcess] = field(default_factory=list)
    description: dict[str, object] = field(default_factory=dict)

    def stop(self) -> None:
        """Stop every started process, last first."""
        for process in reversed(self.running):
            stop_process(home=self.home, name=process.name, grace_s=10.0)
        self.running.clear()


def _start(testbed: Testbed, build: Callable[..., ProcessSpec]) -> RunningProcess:
    """Start the spec ``build(port=<a free port>)`` returns; on a port another process took
    meanwhile, build it again on a new one."""
    for attempt in range(_PORT_ATTEMPTS):
        spec = build(port=free_port())
        try:
            running = start_process(spec, home=testbed.home)
        except PortInUseError:
            if attempt == _PORT_ATTEMPTS - 1:
                raise
            continue
        testbed.running.append(running)
        return running
    raise AssertionError("unreachable")


def start_testbed(testbed: Testbed, *, coordinators: int, executors: int) -> None:
    """Start the broker, the registry, ``coordinators`` replicas and ``executors`` executors;
    on an error, what was started is in ``testbed.running`` for the caller to stop."""
    home = testbed.home
    home.mkdir(parents=True, exist_ok=True)
    settings = ClusterSettings(
        home=home,
        kafka_port=free_port(),
        kafka_controller_port=free_port(),
        registry_grpc_port=free_port(),
        registry_http_port=free_port(),
        registry_processes=1,
    )
    # The broker's and the registry's ports are in ``settings`` (several ports each).
    _start(testbed, lambda port: broker_spec(settings.kafka))
    _start(testbed, lambda port: schema_registry_spec(settings))
    db_url = f"sqlite:///{home / 'coordinator.db'}"
    coordinator_addresses = [
        _start(
            testbed,
            functools.partial(
                coordinator_spec,
                coordinator_id=f"c{i}",
                db_url=db_url,
                lease_ms=TESTBED_LEASE_MS,
            ),
        ).address
        for i in range(1, coordinators + 1)
    ]
    executor_addresses = [
        _start(
            testbed,
            functools.partial(
                executor_spec,
                executor_id=f"e{i}",
                coordinators=coordinator_addresses,
                data_plane="none",
                ready_timeout_s=60.0,
            ),
        ).address
        for i in range(1, executors + 1)
    ]
    testbed.description = {
        "home": str(home),
        "kafka": settings.kafka.bootstrap_servers,
        "coordinators": coordinator_addresses,
        "executors": executor_addresses,
        "registry_grpc": f"{LOOPBACK}:{settings.registry_grpc_port}",
        "registry_http": f"http://{LOOPBACK}:{settings.registry_http_port}",
        "lease_ms": TESTBED_LEASE_MS,
        "processes": [
            {"name": process.name, "address": process.address, "pid": process.pid}
            for process in testbed.running
        ],
    }


def _wait_for_end() -> None:
    """Return when stdin closes or SIGTERM/SIGINT arrives."""
    done = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    def read_stdin() -> None:
        sys.stdin.buffer.read()
        done.set()

    threading.Thread(target=read_stdin, name="testbed-stdin", daemon=True).start()
    done.wait()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m lockgate.localcluster.testbed``."""
    parser = argparse.ArgumentParser(
        prog="python -m lockgate.localcluster.testbed",
        description="Start Lockgate's services on free ports for a client's tests; print them.",
    )
    parser.add_argument("--home", type=Path, required=True, help="directory for data and logs")
    parser.add_argument("--coordinators", type=int, default=3, help="replicas (default 3)")
    parser.add_argument("--executors", type=int, default=2, help="executors (default 2)")
    args = parser.parse_args(argv)
    if args.coordinators < 1 or args.executors < 0:
        parser.error("--coordinators must be >= 1 and --executors >= 0")
    testbed = Testbed(home=Path(args.home).resolve())
    try:
        start_testbed(testbed, coordinators=args.coordinators, executors=args.executors)
        line = json.dumps(testbed.description)
        (testbed.home / "testbed.json").write_text(line + "\n", encoding="utf-8")
        print(line, flush=True)
        _wait_for_end()
    except (ProcessError, KafkaSetupError) as exc:
        print(f"error: the testbed did not start: {exc}", file=sys.stderr)
        return 1
    finally:
        testbed.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
