"""Resident memory of a process tree, and the tree itself, read from /proc."""

from __future__ import annotations

from pathlib import Path


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
