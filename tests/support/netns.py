"""A network namespace joined to this one by a veth pair, for partition tests.

:func:`network_namespace` makes one (``ip netns add``, ``ip link add ... type veth peer
...``, a private /30 from ``10.223.0.0/16``, both ends and the namespace's ``lo`` up),
yields a :class:`NetworkNamespace`, and deletes it again whatever happened (the namespace,
its veth pair and every rule in it go with ``ip netns del``). Names carry this process's pid,
so concurrent runs do not meet.

A process runs inside it when its command line is prefixed with :meth:`NetworkNamespace.wrap`
(``ip netns exec NS ...``: the process keeps the pid ``ip`` had, so pid files and signals work
as for any other process). Inside, it reaches the root side at ``host_address`` and is reached
at ``address``: a service the namespaced process talks to must listen on (and advertise)
``host_address``, not loopback, which is the namespace's own.

Partitions are nftables rules in the namespace's own ruleset (``ip netns exec NS nft``), so
nothing outside the namespace changes: :meth:`NetworkNamespace.cut` DROPs every packet of
the namespace's connections to one port of the root side (requests and replies: a silent
peer, as a pulled cable or a lost route looks, which is harder than a refused connection),
:meth:`NetworkNamespace.cut_inbound` those of the root side's connections to one port of
the namespace, and :meth:`NetworkNamespace.heal` lets everything through again.

The tests need root (CAP_NET_ADMIN), ``ip`` (iproute2) and ``nft`` (nftables, installed by
``deploy/scripts/install.sh``); :func:`unavailable_reason` says what is missing, for a skip.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

#: The nftables table holding a namespace's cuts (inside the namespace only).
_CUT_TABLE = "lockgate_partition"
#: /30 networks are taken from 10.223.0.0/16, picked by pid and a per-process counter.
_SECOND_OCTET = 223
_NETWORKS_PER_PROCESS = itertools.count()


def unavailable_reason() -> str | None:
    """Why this machine cannot run partition tests (not root, no ``ip`` or ``nft``), or
    None if it can."""
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN)"
    for tool, package in (("ip", "iproute2"), ("nft", "nftables")):
        if shutil.which(tool) is None:
            return f"`{tool}` is missing: apt-get install -y {package} (deploy/scripts/install.sh)"
    return None


def _run(argv: Sequence[str], *, stdin: str | None = None) -> None:
    completed = subprocess.run(
        list(argv), input=stdin, capture_output=True, text=True, timeout=30, check=False
    )
    if completed.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv)} exited {completed.returncode}: "
            f"{completed.stderr.strip() or completed.stdout.strip()}"
        )


@dataclass
class NetworkNamespace:
    """A namespace made by :func:`network_namespace`, and the cuts applied to it."""

    name: str
    host_veth: str
    #: The root side's end of the veth pair: what the namespace reaches this side at.
    host_address: str
    #: The namespace's end: what this side reaches processes in the namespace at.
    address: str
    prefix_length: int = 30
    #: The nftables rules in force, in the order they were added.
    rules: list[str] = field(default_factory=list)

    @property
    def network(self) -> str:
        """The veth pair's network in CIDR notation (both ends are in it)."""
        octets = [int(o) for o in self.host_address.split(".")]
        octets[3] &= 256 - (1 << (32 - self.prefix_length))
        return f"{'.'.join(map(str, octets))}/{self.prefix_length}"

    def wrap(self, argv: Sequence[str]) -> tuple[str, ...]:
        """``argv`` run inside the namespace."""
        return ("ip", "netns", "exec", self.name, *argv)

    def cut(self, port: int) -> None:
        """Drop every packet of the namespace's connections to ``host_address:port``, both
        ways, established ones included."""
        self._add(
            f"add rule inet {_CUT_TABLE} output ip daddr {self.host_address} tcp dport {port} drop",
            f"add rule inet {_CUT_TABLE} input ip saddr {self.host_address} tcp sport {port} drop",
        )

    def cut_inbound(self, port: int) -> None:
        """Drop every packet of the root side's connections to ``address:port`` (a server
        in the namespace), both ways, established ones included."""
        self._add(
            f"add rule inet {_CUT_TABLE} input ip saddr {self.host_address} tcp dport {port} drop",
            f"add rule inet {_CUT_TABLE} output ip daddr {self.host_address} tcp sport {port} drop",
        )

    def heal(self) -> None:
        """Remove every cut: traffic flows again (connections that timed out meanwhile are
        gone; their owners reconnect)."""
        if self.rules:
            _run(self.wrap(["nft", "delete", "table", "inet", _CUT_TABLE]))
            self.rules.clear()

    def _add(self, *rules: str) -> None:
        script = [] if self.rules else [_table_script()]
        _run(self.wrap(["nft", "-f", "-"]), stdin="\n".join([*script, *rules]) + "\n")
        self.rules.extend(rules)


def _table_script() -> str:
    """The namespace's cut table: an input and an output chain, accepting by default."""
    chains = "".join(
        f"  chain {hook} {{\n    type filter hook {hook} priority 0; policy accept;\n  }}\n"
        for hook in ("input", "output")
    )
    return f"table inet {_CUT_TABLE} {{\n{chains}}}"


def _addresses(index: int) -> tuple[str, str]:
    """The two ends of this process's ``index``-th /30: (root side, namespace side)."""
    block = (os.getpid() * 8 + index) % (1 << 14)
    third, fourth = block >> 6, (block & 63) * 4
    return (
        f"10.{_SECOND_OCTET}.{third}.{fourth + 1}",
        f"10.{_SECOND_OCTET}.{third}.{fourth + 2}",
    )


@contextlib.contextmanager
def network_namespace() -> Iterator[NetworkNamespace]:
    """A fresh namespace with a veth pair to this one, deleted on exit (also on failure)."""
    index = next(_NETWORKS_PER_PROCESS)
    tag = f"lg{os.getpid()}x{index}"
    name, host_veth, peer_veth = tag, f"{tag}h", f"{tag}n"
    host_address, address = _addresses(index)
    namespace = NetworkNamespace(
        name=name, host_veth=host_veth, host_address=host_address, address=address
    )
    try:
        _run(["ip", "netns", "add", name])
        _run(["ip", "link", "add", host_veth, "type", "veth", "peer", "name", peer_veth])
        _run(["ip", "link", "set", peer_veth, "netns", name])
        _run(["ip", "addr", "add", f"{host_address}/30", "dev", host_veth])
        _run(["ip", "link", "set", host_veth, "up"])
        _run(namespace.wrap(["ip", "addr", "add", f"{address}/30", "dev", peer_veth]))
        _run(namespace.wrap(["ip", "link", "set", peer_veth, "up"]))
        _run(namespace.wrap(["ip", "link", "set", "lo", "up"]))
        yield namespace
    finally:
        # Deleting one end of a veth pair deletes both; the namespace takes its rules along.
        subprocess.run(["ip", "link", "del", host_veth], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)


__all__ = ["NetworkNamespace", "network_namespace", "unavailable_reason"]
