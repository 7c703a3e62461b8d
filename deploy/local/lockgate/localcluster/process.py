"""Supervision of the local cluster's processes: start, wait until ready, inspect, stop.

A process is described declaratively by a :class:`ProcessSpec` (name, argv, environment,
address, ports, readiness check). :func:`start_process` launches it detached in its own
session, with its output in ``<home>/log/<name>.log`` and its pid in
``<home>/run/<name>.pid``; :func:`stop_process` stops exactly that pid and nothing else.

Pid files hold the pid *and* the process start time (field 22 of ``/proc/<pid>/stat``), so a
pid the kernel recycled for an unrelated process is recognised as "not ours" and never
signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from lockgate.common.ports import describe_port_holder
from lockgate.localcluster.ports import LOOPBACK

#: Environment variable that moves the cluster's data, logs and pid files.
LOCKGATE_HOME_ENV = "LOCKGATE_HOME"


class ProcessError(RuntimeError):
    """A supervised process could not be started, made ready or stopped."""


class PortInUseError(ProcessError):
    """A port a process needs is already bound; the message names the port and its holder."""

    def __init__(self, *, port: int, holder: str, wanted_by: str) -> None:
        self.port = port
        self.holder = holder
        super().__init__(
            f"port {port} needed by {wanted_by!r} is already in use by {holder}; "
            f"stop that process or choose another port"
        )


class ProcessStartError(ProcessError):
    """The process exited, or never became ready, before its deadline."""


class ProcessState(Enum):
    """What :func:`process_status` observed about a named process."""

    UP = "up"
    DOWN = "down"


def repo_root() -> Path:
    """The repository root (the folder holding ``deploy/``)."""
    # deploy/local/lockgate/localcluster/process.py -> four levels up is the repository.
    return Path(__file__).resolve().parents[4]


def lockgate_home(override: Path | str | None = None) -> Path:
    """The cluster home: ``override``, else ``$LOCKGATE_HOME``, else ``<repo>/.lockgate``."""
    if override is not None:
        return Path(override).resolve()
    env_home = os.environ.get(LOCKGATE_HOME_ENV)
    if env_home:
        return Path(env_home).resolve()
    return repo_root() / ".lockgate"


def answers_ok(
    url: str,
    *,
    timeout_s: float = 2.0,
    context: ssl.SSLContext | None = None,
    headers: Mapping[str, str] | None = None,
) -> bool:
    """True when an HTTP GET of `url` answers 200 (a readiness check; no proxy: loopback
    must not be sent to an HTTP proxy the environment names). ``context``: the TLS trust
    of an ``https://`` URL; ``headers``: e.g. its ``Authorization``."""
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
    )
    try:
        with opener.open(
            urllib.request.Request(url, headers=dict(headers or {})), timeout=timeout_s
        ) as answer:
            return int(answer.status) == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def pid_path(home: Path, name: str) -> Path:
    """Where the pid file of process ``name`` lives."""
    return home / "run" / f"{name}.pid"


def log_path(home: Path, name: str) -> Path:
    """Where the log of process ``name`` lives."""
    return home / "log" / f"{name}.log"


@dataclass(frozen=True)
class ProcessSpec:
    """Everything needed to run one process of the cluster.

    ``ready`` is polled until it returns True (or the deadline passes); ``prepare`` runs
    once before the process starts (e.g. formatting Kafka's storage) and must be idempotent.
    ``ports`` are checked to be free before starting so a clash names its holder.
    ``stop_signal`` asks it to stop (SIGKILL follows after the grace period).
    """

    name: str
    argv: tuple[str, ...]
    address: str
    ready: Callable[[], bool]
    ports: tuple[int, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    ready_timeout_s: float = 60.0
    stop_grace_s: float = 20.0
    prepare: Callable[[], None] | None = None
    #: PostgreSQL's postmaster takes SIGINT ("fast": roll back, checkpoint, exit); its
    #: SIGTERM waits for every client to leave.
    stop_signal: signal.Signals = signal.SIGTERM


@dataclass(frozen=True)
class PidRecord:
    """The content of a pid file: the pid and the kernel's start time for it."""

    pid: int
    start_time: int


@dataclass(frozen=True)
class RunningProcess:
    """A process started by :func:`start_process`."""

    name: str
    pid: int
    address: str
    log_file: Path
    pid_file: Path


@dataclass(frozen=True)
class ProcessStatus:
    """One line of ``cluster status``."""

    name: str
    pid: int | None
    address: str
    state: ProcessState


# ---------------------------------------------------------------------------------------
# /proc helpers


def _proc_start_time(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot, or None if no such live process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) is in parentheses and may contain spaces: split after it.
    fields = stat[stat.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state); a zombie has exited and only waits to be reaped.
    if fields[0] == "Z":
        return None
    return int(fields[19])


def _reap_if_child(pid: int) -> None:
    """Collect ``pid``'s exit status if it is our child, so it does not linger as a zombie."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def is_alive(record: PidRecord) -> bool:
    """True if the process in ``record`` still runs (same pid *and* same start time)."""
    _reap_if_child(record.pid)
    return _proc_start_time(record.pid) == record.start_time


def has_exited(record: PidRecord) -> bool:
    """True once every thread of the process in ``record`` has exited, so its files, sockets
    and ports are released. ``is_alive`` turns False as soon as the main thread is a zombie,
    while a JVM's other threads may still be exiting with its listening sockets open."""
    if is_alive(record):
        return False
    try:
        stat = Path(f"/proc/{record.pid}/stat").read_text()
        threads = len(os.listdir(f"/proc/{record.pid}/task"))
    except OSError:
        return True  # reaped: gone
    fields = stat[stat.rindex(")") + 2 :].split()
    # Another process under a recycled pid, or a zombie left with only its main thread.
    return int(fields[19]) != record.start_time or threads <= 1


def port_holder(port: int) -> str | None:
    """Describe the process listening on loopback's TCP ``port`` (``pid N (cmdline)``), where
    every local process listens; None if free."""
    return describe_port_holder(port, LOOPBACK)


def check_ports_free(ports: tuple[int, ...], *, wanted_by: str) -> None:
    """Raise :class:`PortInUseError` naming the first taken port and the process holding it."""
    for port in ports:
        holder = port_holder(port)
        if holder is not None:
            raise PortInUseError(port=port, holder=holder, wanted_by=wanted_by)


# ---------------------------------------------------------------------------------------
# waiting


def wait_until(
    condition: Callable[[], bool],
    *,
    timeout_s: float,
    description: str,
    interval_s: float = 0.1,
    abort_if: Callable[[], str | None] | None = None,
) -> None:
    """Poll ``condition`` until it is True; raise TimeoutError after ``timeout_s``.

    ``abort_if`` is polled too: when it returns a message, waiting stops at once with a
    :class:`ProcessStartError` carrying it (e.g. the process being waited for has died).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        if condition():
            return
        if abort_if is not None:
            reason = abort_if()
            if reason is not None:
                raise ProcessStartError(f"gave up waiting for {description}: {reason}")
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{description} did not happen within {timeout_s:.1f}s")
        time.sleep(interval_s)


# ---------------------------------------------------------------------------------------
# pid files


def read_pid_file(home: Path, name: str) -> PidRecord | None:
    """The pid record of ``name``, or None if there is no (readable) pid file."""
    path = pid_path(home, name)
    try:
        parts = path.read_text().split()
        return PidRecord(pid=int(parts[0]), start_time=int(parts[1]))
    except (OSError, ValueError, IndexError):
        return None


def _write_pid_file(home: Path, name: str, record: PidRecord) -> Path:
    path = pid_path(home, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".pid.tmp")
    tmp.write_text(f"{record.pid}\n{record.start_time}\n")
    tmp.replace(path)  # atomic: a reader never sees half a pid file
    return path


def tail(path: Path, *, lines: int = 20) -> str:
    """The last ``lines`` lines of a text file (empty if it does not exist)."""
    try:
        content = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(content[-lines:])


# ---------------------------------------------------------------------------------------
# start / stop / status


def start_process(spec: ProcessSpec, *, home: Path) -> RunningProcess:
    """Start ``spec`` detached, write its pid file, and wait until it is ready.

    Raises :class:`PortInUseError` if one of ``spec.ports`` is taken (before starting),
    :class:`ProcessStartError` if the process exits or is not ready within
    ``spec.ready_timeout_s`` (it is then stopped and its pid file removed).
    """
    check_ports_free(spec.ports, wanted_by=spec.name)
    if spec.prepare is not None:
        spec.prepare()
    log_file = log_path(home, spec.name)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **spec.env}
    with log_file.open("ab") as log:
        log.write(f"--- starting {spec.name}: {' '.join(spec.argv)}\n".encode())
        log.flush()
        # A new session: the process survives the CLI that started it and gets no
        # terminal signals (Ctrl-C in `make cluster-up` must not kill the broker).
        child = subprocess.Popen(
            spec.argv,
            cwd=spec.cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    start_time = _proc_start_time(child.pid)
    if start_time is None:
        child.wait()
        raise ProcessStartError(
            f"{spec.name} exited immediately with code {child.returncode}; "
            f"last lines of {log_file}:\n{tail(log_file)}"
        )
    record = PidRecord(pid=child.pid, start_time=start_time)
    pid_file = _write_pid_file(home, spec.name, record)
    running = RunningProcess(
        name=spec.name, pid=child.pid, address=spec.address, log_file=log_file, pid_file=pid_file
    )

    def died() -> str | None:
        code = child.poll()
        if code is None:
            return None
        return f"{spec.name} exited with code {code}; last lines of {log_file}:\n{tail(log_file)}"

    try:
        wait_until(
            spec.ready,
            timeout_s=spec.ready_timeout_s,
            description=f"{spec.name} ready at {spec.address}",
            abort_if=died,
        )
    except (TimeoutError, ProcessStartError) as exc:
        stop_pid(record, grace_s=spec.stop_grace_s, stop_signal=spec.stop_signal)
        pid_file.unlink(missing_ok=True)
        raise ProcessStartError(f"{exc}\nlast lines of {log_file}:\n{tail(log_file)}") from exc
    return running


def stop_pid(
    record: PidRecord, *, grace_s: float = 20.0, stop_signal: signal.Signals = signal.SIGTERM
) -> bool:
    """Stop exactly the process in ``record``: ``stop_signal``, then SIGKILL after ``grace_s``.

    Returns True if a live process was stopped, False if it was not running (a recycled
    pid with another start time counts as not running and is left alone). Waits until the
    process has exited.
    """
    if not is_alive(record):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(record.pid, stop_signal)
    try:
        wait_until(
            lambda: not is_alive(record),
            timeout_s=grace_s,
            description=f"pid {record.pid} exit after {stop_signal.name}",
        )
    except TimeoutError:
        if is_alive(record):
            with contextlib.suppress(ProcessLookupError):
                os.kill(record.pid, signal.SIGKILL)
        wait_until(
            lambda: not is_alive(record),
            timeout_s=10.0,
            description=f"pid {record.pid} exit after SIGKILL",
        )
    return True


def kill_process(*, home: Path, name: str, timeout_s: float = 15.0) -> int | None:
    """SIGKILL the process recorded in ``name``'s pid file, as a crash: no cleanup runs.

    Waits until every thread of it has exited (so its ports can be bound again) and keeps
    the pid file (the process may be started again under the same name). Returns the pid
    killed, or None if nothing of that name was running.
    """
    record = read_pid_file(home, name)
    if record is None or not is_alive(record):
        return None
    with contextlib.suppress(ProcessLookupError):
        os.kill(record.pid, signal.SIGKILL)
    wait_until(
        lambda: has_exited(record),
        timeout_s=timeout_s,
        description=f"{name} (pid {record.pid}) exit after SIGKILL",
    )
    return record.pid


def stop_process(
    *,
    home: Path,
    name: str,
    grace_s: float = 20.0,
    stop_signal: signal.Signals = signal.SIGTERM,
) -> int | None:
    """Stop the process recorded in ``name``'s pid file (``stop_signal``, then SIGKILL after
    ``grace_s``) and remove the file.

    Returns the pid stopped, or None if nothing of that name was running. Harmless to call
    again.
    """
    record = read_pid_file(home, name)
    if record is None:
        pid_path(home, name).unlink(missing_ok=True)
        return None
    stopped = stop_pid(record, grace_s=grace_s, stop_signal=stop_signal)
    pid_path(home, name).unlink(missing_ok=True)
    return record.pid if stopped else None


def process_status(*, home: Path, name: str, address: str) -> ProcessStatus:
    """Whether the process recorded for ``name`` is running."""
    record = read_pid_file(home, name)
    if record is None or not is_alive(record):
        return ProcessStatus(
            name=name,
            pid=record.pid if record else None,
            address=address,
            state=ProcessState.DOWN,
        )
    return ProcessStatus(name=name, pid=record.pid, address=address, state=ProcessState.UP)
