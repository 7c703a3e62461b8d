"""What /proc says of a process tree: its pids, its resident memory, the CPU it used."""

from __future__ import annotations

import os
import time
from pathlib import Path

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def descendants(pid: int) -> set[int]:
    """The pids of every process under ``pid``."""
    children: dict[int, list[int]] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        # The command name, in parentheses, may hold spaces: the fields follow its end.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(proc.name))
    found: set[int] = set()
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.add(child)
            stack.append(child)
    return found


def _rss_kb(pid: int) -> int:
    try:
        status = (Path("/proc") / str(pid) / "status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def tree_rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and all its descendants, in MB."""
    return sum(_rss_kb(p) for p in {pid} | descendants(pid)) / 1024


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) ``pid`` has used; 0 if it is gone."""
    try:
        stat = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


class TreeCpu:
    """CPU time a process, or its whole tree, uses from now on: ``pid`` and, with
    ``whole_tree``, every descendant it has at the start or at ``cores()`` (one that came
    and went between the two is missed)."""

    def __init__(self, pid: int, *, whole_tree: bool = True) -> None:
        self._pid = pid
        self._whole_tree = whole_tree
        self._began = time.monotonic()
        self._start = {p: _cpu_s(p) for p in self._pids()}

    def _pids(self) -> set[int]:
        return {self._pid} | descendants(self._pid) if self._whole_tree else {self._pid}

    def cores(self) -> float:
        """Cores used on average since the start (CPU seconds per wall second)."""
        now = {p: _cpu_s(p) for p in self._pids() | set(self._start)}
        used = sum(cpu - self._start.get(p, 0.0) for p, cpu in now.items() if cpu)
        return used / max(time.monotonic() - self._began, 1e-9)
