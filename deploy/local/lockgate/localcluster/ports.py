"""Free TCP ports of loopback, for every process the local cluster, the tests and the benchmarks
start on ports of their own.

The kernel picks the port (a bind to port 0) and the probe socket is closed again, so the port is
only *probably* free when the process binds it a moment later. Every caller must cope with losing
that race: :func:`lockgate.localcluster.process.start_process` raises ``PortInUseError`` and the
callers pick another port and try again.
"""

from __future__ import annotations

import socket

#: The address every local process listens on: loopback only, never reachable from outside.
LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port of ``host`` that was free a moment ago (the caller must cope with losing the
    race for it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port
