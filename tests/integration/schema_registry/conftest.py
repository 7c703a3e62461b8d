"""Start schema registry processes for the integration tests (real subprocesses)."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

_READY = re.compile(r"ready grpc=(\S+) http=(\S+)")
#: Seconds a registry gets to migrate and start listening.
START_DEADLINE_S = 60.0


@dataclass
class RegistryProcess:
    """A running ``python -m lockgate.schema_registry``."""

    process: subprocess.Popen[str]
    grpc_address: str
    http_address: str
    output: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        """Base URL of the REST facade."""
        return f"http://{self.http_address}"

    def stop(self) -> int:
        """SIGTERM and wait (SIGKILL after 15 s); returns the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=15)
        return int(self.process.returncode)


def start_registry(db_url: str, *extra_args: str) -> RegistryProcess:
    """Start a registry on free ports and wait for its ready line."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", OTEL_SDK_DISABLED="true")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lockgate.schema_registry",
            "--db",
            db_url,
            "--grpc",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
            *extra_args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    output: list[str] = []

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            output.append(line)
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    try:
        while True:
            line = lines.get(timeout=START_DEADLINE_S)
            if line is None:
                raise RuntimeError("schema registry exited before ready:\n" + "".join(output))
            match = _READY.search(line)
            if match:
                return RegistryProcess(process, match.group(1), match.group(2), output)
    except queue.Empty:
        process.kill()
        process.wait()
        raise RuntimeError(
            f"schema registry not ready within {START_DEADLINE_S}s:\n" + "".join(output)
        ) from None


@pytest.fixture
def registry_factory() -> Iterator[Callable[..., RegistryProcess]]:
    """Call with a database URL (and extra args) to start a registry; all stopped at the end."""
    started: list[RegistryProcess] = []

    def start(db_url: str, *extra_args: str) -> RegistryProcess:
        running = start_registry(db_url, *extra_args)
        started.append(running)
        return running

    yield start
    for running in started:
        running.stop()


@pytest.fixture
def sqlite_registry(
    registry_factory: Callable[..., RegistryProcess], tmp_path: Path
) -> RegistryProcess:
    """A registry on a fresh SQLite file."""
    return registry_factory(f"sqlite:///{tmp_path / 'registry.db'}")


@pytest.fixture(scope="module")
def module_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryProcess]:
    """One registry on a fresh SQLite file shared by a test module (tests that do not care
    about each other's subjects)."""
    running = start_registry(f"sqlite:///{tmp_path_factory.mktemp('registry') / 'registry.db'}")
    try:
        yield running
    finally:
        running.stop()
