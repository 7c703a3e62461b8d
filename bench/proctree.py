"""What /proc says of processes for the benchmarks: a process tree's pids, its resident
memory, the CPU a process or a tree used, and how busy the machine's cores were. The one
home of these readings for every ``bench/*.py``."""

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


def tree_pids(pid: int) -> set[int]:
    """``pid`` and the pids of every process under it."""
    return {pid} | descendants(pid)


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
    return sum(_rss_kb(p) for p in tree_pids(pid)) / 1024


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) ``pid`` has used; 0 if it is gone."""
    try:
        stat = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def context_switches(pid: int) -> int:
    """Context switches, voluntary and not, of ``pid``'s threads alive now (a thread that
    has ended takes its own with it); 0 if it is gone."""
    total = 0
    for status in (Path("/proc") / str(pid) / "task").glob("*/status"):
        try:
            lines = status.read_text().splitlines()
        except OSError:
            continue
        total += sum(int(line.split()[1]) for line in lines if "ctxt_switches:" in line)
    return total


class TreeCpu:
    """CPU time a process, or its whole tree, uses from now on: ``pid`` and, with
    ``whole_tree``, every descendant it has at the start or at ``cores()`` (one that came
    and went between the two is missed)."""

    def __init__(self, pid: int, *, whole_tree: bool = True) -> None:
        self._pid = pid
        self._whole_tree = whole_tree
        self._began = time.monotonic()
        self._start = {p: cpu_seconds(p) for p in self._pids()}

    def _pids(self) -> set[int]:
        return tree_pids(self._pid) if self._whole_tree else {self._pid}

    def seconds(self) -> float:
        """CPU seconds used since the start."""
        now = {p: cpu_seconds(p) for p in self._pids() | set(self._start)}
        return sum(cpu - self._start.get(p, 0.0) for p, cpu in now.items() if cpu)

    def cores(self) -> float:
        """Cores used on average since the start (CPU seconds per wall second)."""
        return self.seconds() / max(time.monotonic() - self._began, 1e-9)


class MachineCpu:
    """How busy the machine's cores are from now on: every process's CPU, this
    benchmark's own and the kernel's included (``/proc/stat``: all but idle and I/O
    wait)."""

    def __init__(self) -> None:
        self._began = time.monotonic()
        self._start = _busy_seconds()

    def seconds(self) -> float:
        """CPU seconds the machine's cores were busy since the start."""
        return _busy_seconds() - self._start

    def cores(self) -> float:
        """Cores busy on average since the start."""
        return self.seconds() / max(time.monotonic() - self._began, 1e-9)


def _busy_seconds() -> float:
    """CPU seconds the machine's cores have been busy since boot."""
    with open("/proc/stat") as stat:
        # cpu user nice system idle iowait irq softirq steal (guest time is in user already)
        ticks = [int(n) for n in stat.readline().split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / _CLOCK_TICKS
