"""The bound on an executor's shutdown, and what happens when it passes.

A SIGTERM arms a :class:`ShutdownBound`. The orderly path (stop serving, cancel the
running Spark jobs, wait for the batches, deregister, stop the SparkSession and its JVM)
asks it how much time is left. If the bound passes anyway -- a batch blocked where no
Spark cancellation reaches (a Python transform that never returns on the executor's own
thread), a JVM that does not stop, an exit held up by a thread that never ends -- the
process kills its own children (the JVM, Spark's Python workers: every live process
below it) and exits with :data:`EXIT_SHUTDOWN_TIMEOUT`, rather than linger as an executor
that deregistered but still holds its port and its JVM.

A watchdog thread gives up at the bound whatever the main thread is doing; the main
thread gives up as soon as it knows the orderly path failed. Only processes below this
one are killed, found through ``/proc`` (where there is no ``/proc``, none: the JVM
still exits when its stdin, a pipe from this process, closes).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

_LOG = logging.getLogger(__name__)

#: Default seconds from SIGTERM (or SIGINT) to the end of the process (``--shutdown-timeout-s``).
DEFAULT_SHUTDOWN_TIMEOUT_S = 10.0
#: Exit status when the bound passed and the process killed its own children.
EXIT_SHUTDOWN_TIMEOUT = 124


def _children(pid: int) -> list[int]:
    """Live (not zombie) processes whose parent is ``pid``."""
    found: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in filter(str.isdigit, entries):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # The command name (field 2) is in parentheses and may hold spaces: split after it.
        state, parent = stat[stat.rindex(")") + 2 :].split()[:2]
        if int(parent) == pid and state != "Z":
            found.append(int(entry))
    return found


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid``, parents before their children."""
    found: list[int] = []
    pending = [pid]
    while pending:
        for child in _children(pending.pop()):
            found.append(child)
            pending.append(child)
    return found


def kill_descendants() -> list[int]:
    """SIGKILL every live process below this one; returns their pids."""
    # Collected before the first kill: a killed JVM's children are re-parented away.
    pids = descendants(os.getpid())
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            continue
    return pids


class ShutdownBound:
    """The deadline of one shutdown, armed when the signal arrives.

    ``exit_process`` ends the process (``os._exit``: no cleanup, no thread joined); unit
    tests replace it and ``kill_children``.
    """

    def __init__(
        self,
        timeout_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        kill_children: Callable[[], list[int]] = kill_descendants,
        exit_process: Callable[[int], NoReturn] = os._exit,
    ) -> None:
        self.timeout_s = timeout_s
        self._clock = clock
        self._kill_children = kill_children
        self._exit_process = exit_process
        self._deadline: float | None = None
        self._lock = threading.Lock()

    def arm(self) -> None:
        """Start counting (once) and start the watchdog that gives up at the deadline."""
        with self._lock:
            if self._deadline is not None:
                return
            self._deadline = self._clock() + self.timeout_s
        threading.Thread(target=self._watch, name="lockgate-shutdown-bound", daemon=True).start()
        _LOG.info("shutting down: the process ends within %.1f s", self.timeout_s)

    def remaining(self, *, keep_s: float = 0.0) -> float:
        """Seconds left before the deadline, less ``keep_s`` kept for later steps (>= 0)."""
        with self._lock:
            deadline = self._deadline
        if deadline is None:
            return max(0.0, self.timeout_s - keep_s)
        return max(0.0, deadline - self._clock() - keep_s)

    def give_up(self, why: str) -> NoReturn:
        """Kill this process's children and exit with :data:`EXIT_SHUTDOWN_TIMEOUT`."""
        killed = self._kill_children()
        message = (
            f"shutdown cannot end in order within {self.timeout_s:.1f} s ({why}): killed"
            f" {len(killed)} child processes {killed}; exiting with {EXIT_SHUTDOWN_TIMEOUT}"
        )
        _LOG.error("%s", message)
        # Logging handlers may not flush before os._exit: say it on stderr as well.
        print(message, file=sys.stderr, flush=True)
        self._exit_process(EXIT_SHUTDOWN_TIMEOUT)

    def _watch(self) -> None:
        while (left := self.remaining()) > 0:
            time.sleep(min(left, 0.5))
        self.give_up("the bound passed")


__all__ = [
    "DEFAULT_SHUTDOWN_TIMEOUT_S",
    "EXIT_SHUTDOWN_TIMEOUT",
    "ShutdownBound",
    "descendants",
    "kill_descendants",
]
