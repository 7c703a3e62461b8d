"""Who holds a TCP port: named in the message of a server that cannot bind it."""

from __future__ import annotations

import os


def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as lines:
                next(lines, None)
                for line in lines:
                    fields = line.split()
                    # fields[1] is local "HEXADDR:HEXPORT", fields[3] the state (0A = LISTEN).
                    if (
                        len(fields) > 9
                        and fields[3] == "0A"
                        and int(fields[1].rsplit(":", 1)[1], 16) == port
                    ):
                        inodes.add(fields[9])
        except OSError:
            continue
    return inodes


def describe_port_holder(port: int) -> str | None:
    """``"pid N (command)"`` of a process listening on TCP ``port``, if Linux's /proc says."""
    inodes = _listening_inodes(port)
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
                    return f"pid {pid} ({command.strip()[:120]})"
        except OSError:
            continue
    return "another process"


__all__ = ["describe_port_holder"]
