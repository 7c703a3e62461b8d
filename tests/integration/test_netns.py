"""The partition tests' network namespace (tests/support/netns.py): what a cut drops, what it
leaves, that heal undoes it, and that nothing is left behind. Needs root, ``ip`` and ``nft``."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.support.netns import NetworkNamespace, network_namespace, unavailable_reason

_SKIP = unavailable_reason()
pytestmark = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")

#: Run inside the namespace: connect to argv[1]:argv[2] and print what happened.
_CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1.5).close()
    print("connected")
except socket.timeout:
    print("timeout")
except ConnectionRefusedError:
    print("refused")
"""


def _connect_from_inside(namespace: NetworkNamespace, port: int) -> str:
    """How a connection from the namespace to the root side's ``port`` ends."""
    argv = namespace.wrap([sys.executable, "-c", _CONNECT, namespace.host_address, str(port)])
    return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip()


def _connect_from_outside(address: str, port: int) -> str:
    try:
        socket.create_connection((address, port), timeout=1.5).close()
    except TimeoutError:
        return "timeout"
    except ConnectionRefusedError:
        return "refused"
    return "connected"


@pytest.fixture
def namespace() -> Iterator[NetworkNamespace]:
    with network_namespace() as made:
        yield made


def _listener(address: str) -> socket.socket:
    server = socket.socket()
    server.bind((address, 0))
    server.listen(16)
    return server


def test_a_cut_drops_one_port_silently_and_heal_restores_it(namespace: NetworkNamespace) -> None:
    with _listener(namespace.host_address) as cut, _listener(namespace.host_address) as kept:
        cut_port, kept_port = cut.getsockname()[1], kept.getsockname()[1]
        assert _connect_from_inside(namespace, cut_port) == "connected"
        namespace.cut(cut_port)
        # DROP: no refusal comes back, the connection attempt just times out.
        assert _connect_from_inside(namespace, cut_port) == "timeout"
        assert _connect_from_inside(namespace, kept_port) == "connected"
        namespace.heal()
        assert _connect_from_inside(namespace, cut_port) == "connected"


def test_an_inbound_cut_hides_a_server_in_the_namespace(namespace: NetworkNamespace) -> None:
    server = subprocess.Popen(
        namespace.wrap(
            [
                sys.executable,
                "-c",
                "import socket, sys, time\n"
                f"s = socket.create_server(({namespace.address!r}, 0))\n"
                "print(s.getsockname()[1], flush=True)\n"
                "time.sleep(120)\n",
            ]
        ),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        assert _connect_from_outside(namespace.address, port) == "connected"
        namespace.cut_inbound(port)
        assert _connect_from_outside(namespace.address, port) == "timeout"
        namespace.heal()
        assert _connect_from_outside(namespace.address, port) == "connected"
    finally:
        server.kill()
        server.wait(timeout=10)


def test_the_namespace_and_its_veth_are_gone_after_a_failure() -> None:
    with pytest.raises(RuntimeError, match="a failing test"), network_namespace() as made:
        made.cut(9)
        raise RuntimeError("a failing test")
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert made.name not in namespaces.split()
    assert made.host_veth not in links
