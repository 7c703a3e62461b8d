"""Service processes a test starts by itself, and how it stops them.

Most tests run the services as the local cluster does, through
:mod:`lockgate.localcluster.services` specs (the end-to-end ``ServiceCluster``). Tests that need
the bare process instead -- to read its output, to send it signals at chosen moments, to run it
against a scripted peer -- start it here:

- :func:`start_child` runs any service command line (spelled by
  :mod:`lockgate.localcluster.commands`) in its own session with its output in a log file, and
  gives a :class:`ChildProcess` that can say why waiting for it is pointless (it died), show its
  log, and stop exactly itself;
- :func:`start_registry` runs a schema registry on ports the kernel picks and waits for the
  ``ready grpc=H:P http=H:P`` line it prints, so no port can be lost between a probe and its bind.

Processes are stopped by their own ``Popen`` handle, never by name: a test ends only what it
started.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lockgate.common.failpoints import FAILPOINT_HOLD_DIR_ENV, FAILPOINTS_ENV
from lockgate.localcluster.commands import registry_command

#: Seconds a registry gets to migrate its database and start listening.
REGISTRY_START_DEADLINE_S = 60.0
_REGISTRY_READY = re.compile(r"ready grpc=(\S+) http=(\S+)")


def failpoint_env(failpoints: str = "", *, hold_dir: Path | None = None) -> dict[str, str]:
    """The environment that arms ``failpoints`` in a service (none: disarms any the test
    process itself was given); ``hold_dir`` is where its ``:hold`` ones meet the test."""
    env = {FAILPOINTS_ENV: failpoints}
    if hold_dir is not None:
        env[FAILPOINT_HOLD_DIR_ENV] = str(hold_dir)
    return env


def children(pid: int) -> list[int]:
    """Live (not zombie) processes whose parent is ``pid`` (a registry's workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (an executor's Spark JVM and its Python workers)."""
    found: list[int] = []
    stack = [pid]
    while stack:
        for child in children(stack.pop()):
            found.append(child)
            stack.append(child)
    return found


def pid_alive(pid: int) -> bool:
    """True if ``pid`` is a live process (a zombie has exited and counts as gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z"


def pid_stopped(pid: int) -> bool:
    """True once every thread of ``pid`` is stopped (SIGSTOP): ``kill`` returns before
    the threads have stopped, and one still running can take a lock meanwhile."""
    try:
        threads = list(Path(f"/proc/{pid}/task").iterdir())
        states = [(t / "stat").read_text().rsplit(")", 1)[1].split()[0] for t in threads]
    except OSError:
        return False
    return bool(states) and all(state in ("T", "t") for state in states)


@dataclass
class ChildProcess:
    """A service process started by :func:`start_child`."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        """The process id."""
        return self.process.pid

    def log_text(self) -> str:
        """Everything the process logged so far."""
        return self.log_path.read_text(errors="replace")

    def died(self) -> str | None:
        """Why waiting for this process is pointless (it exited, with its last log), or None;
        made for ``wait_for(..., abort_if=child.died)``."""
        code = self.process.poll()
        if code is None:
            return None
        return f"{self.name} exited with {code}; log:\n{self.log_text()[-3000:]}"

    def wait_exit(self, timeout_s: float) -> int:
        """Wait for the process to exit on its own; its exit status."""
        return self.process.wait(timeout=timeout_s)

    def stop(self, *, grace_s: float = 20.0) -> int:
        """SIGCONT (a test may have paused it), SIGTERM, SIGKILL after ``grace_s``; the exit
        status. Harmless to call again."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGCONT)
                self.process.terminate()
            try:
                self.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        return self.process.returncode


def start_child(
    name: str,
    argv: Sequence[str],
    *,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> ChildProcess:
    """Start ``argv`` in a new session (so signals a test sends reach it alone), its output
    appended to ``log_path``, ``env`` on top of this process's environment. Returns at once:
    the caller waits for what "ready" means to it."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            list(argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            start_new_session=True,
        )
    return ChildProcess(name=name, process=process, log_path=log_path)


@dataclass
class RegistryProcess:
    """A running ``python -m lockgate.schema_registry`` started by :func:`start_registry`."""

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


def start_registry(
    db_url: str, *extra_args: str, environ: Mapping[str, str] | None = None
) -> RegistryProcess:
    """Start a registry on ``db_url``, on ports the kernel picks, and wait for its ready line
    (telemetry off unless ``environ`` says otherwise)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OTEL_SDK_DISABLED": "true", **(environ or {})}
    process = subprocess.Popen(
        registry_command(
            db_url=db_url, grpc_listen="127.0.0.1:0", http_listen="127.0.0.1:0", extra=extra_args
        ),
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
            line = lines.get(timeout=REGISTRY_START_DEADLINE_S)
            if line is None:
                raise RuntimeError("schema registry exited before ready:\n" + "".join(output))
            match = _REGISTRY_READY.search(line)
            if match:
                return RegistryProcess(process, match.group(1), match.group(2), output)
    except queue.Empty:
        process.kill()
        process.wait()
        raise RuntimeError(
            f"schema registry not ready within {REGISTRY_START_DEADLINE_S}s:\n" + "".join(output)
        ) from None
