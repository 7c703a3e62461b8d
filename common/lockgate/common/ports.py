"""Who holds a TCP port: named in the message of a server that cannot bind it, and by the local
cluster before it starts a process on the port."""

from __future__ import annotations

import ipaddress
import os

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _proc_address(hex_address: str) -> Address:
    """An address of /proc/net/tcp*: 32-bit words in hexadecimal, each in host (little-endian)
    byte order."""
    raw = bytes.fromhex(hex_address)
    native = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    address = ipaddress.ip_address(native)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _conflicts(listening: Address, wanted: Address | None) -> bool:
    """Whether a listener on ``listening`` keeps a bind to ``wanted`` (None: any address) from
    the same port. A listener on one address does not block a bind to another: the kernel hands
    the same port to 127.0.0.1 and to 192.0.2.2 alike."""
    if wanted is None or wanted.is_unspecified or listening.is_unspecified:
        return True
    return listening == wanted


def _listening_inodes(port: int, wanted: Address | None) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as lines:
                next(lines, None)
                for line in lines:
                    fields = line.split()
                    # fields[1] is local "HEXADDR:HEXPORT", fields[3] the state (0A = LISTEN).
                    if len(fields) <= 9 or fields[3] != "0A":
                        continue
                    hex_address, _, hex_port = fields[1].rpartition(":")
                    if int(hex_port, 16) == port and _conflicts(_proc_address(hex_address), wanted):
                        inodes.add(fields[9])
        except OSError:
            continue
    return inodes


def _wanted_address(host: str | None) -> Address | None:
    if host is None:
        return None
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None  # a name ("localhost"): any listener on the port may be the one in the way


def describe_port_holder(port: int, host: str | None = None) -> str | None:
    """``"pid N (command)"`` of a process listening on TCP ``port`` where it keeps a bind to
    ``host`` from succeeding (any address when None), if Linux's /proc says; None if nothing
    listens there."""
    inodes = _listening_inodes(port, _wanted_address(host))
    if not inodes:
        return None
    targets = {f"socket:[{inode}]" for inode in inodes}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            for fd in fds:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in targets:
                    with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                        command = cmdline.read().replace(b"\0", b" ").decode(errors="replace")
                    command = command.strip()
                    if len(command) > 160:
                        command = command[:157] + "..."
                    return f"pid {pid} ({command})"
        except OSError:
            continue
    # Listening, but owned by a process we may not inspect (another user, another netns).
    return "a process this user cannot inspect"


__all__ = ["describe_port_holder"]
