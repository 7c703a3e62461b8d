"""Free TCP ports of loopback, for every process the local cluster, the tests and the benchmarks
start on ports of their own.

The kernel picks the port (a bind to port 0) and the probe socket is closed again, so the port is
only *probably* free when the process binds it a moment later. Two things narrow that window:

- Each port handed out is *reserved* on this machine for :data:`RESERVED_FOR_S` seconds (a file
  of that name under :data:`RESERVATIONS`, created exclusively), and no other caller on the
  machine is handed it in that time. Without it, another process (another xdist worker, another
  benchmark) could be handed the same port by the kernel while the first caller's cluster is
  still starting the processes its ports were picked for.
- Every caller must still cope with losing the race to a process that does not reserve (any
  other program): :func:`lockgate.localcluster.process.start_process` raises ``PortInUseError``
  and the callers pick another port and try again.
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

#: The address every local process listens on: loopback only, never reachable from outside.
LOOPBACK = "127.0.0.1"

#: Where the reservations are kept: one empty file per port, its mtime the reservation's time.
RESERVATIONS = Path(tempfile.gettempdir()) / "lockgate-port-reservations"

#: How long a port handed out stays reserved: longer than a cluster takes to start everything.
RESERVED_FOR_S = 300.0

#: Kernel picks tried before a reserved port is handed out anyway (the caller copes).
_PICKS = 20


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port of ``host`` that was free a moment ago and that no other caller of this
    function on this machine was handed in the last :data:`RESERVED_FOR_S` seconds (the caller
    must still cope with losing the race for it)."""
    return pick_port(lambda: _kernel_port(host))


def pick_port(kernel_port: Callable[[], int], *, now: Callable[[], float] = time.time) -> int:
    """The first port ``kernel_port`` gives that is not reserved, reserved now."""
    port = kernel_port()
    for _ in range(_PICKS):
        if _reserve(port, now()):
            return port
        port = kernel_port()
    return port


def _kernel_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


def _reserve(port: int, now: float) -> bool:
    """Reserve ``port`` unless a reservation younger than :data:`RESERVED_FOR_S` holds it.
    Where no reservation can be written (another user's directory, a read-only temp), the
    port is handed out unreserved: the callers cope with the race as before."""
    path = RESERVATIONS / str(port)
    try:
        RESERVATIONS.mkdir(parents=True, exist_ok=True)
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            if now - path.stat().st_mtime < RESERVED_FOR_S:
                return False
        os.utime(path, (now, now))
    except OSError:
        pass
    return True
