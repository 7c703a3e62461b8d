"""Resident memory of a process tree, read from /proc."""

from __future__ import annotations

from pathlib import Path


def tree_rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and all its descendants, in MB."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            status = (proc / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        ppid = int(fields.get("PPid", "0").strip())
        children.setdefault(ppid, []).append(int(proc.name))
        rss[int(proc.name)] = int(fields.get("VmRSS", "0 kB").split()[0])
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        total += rss.get(current, 0)
        stack.extend(children.get(current, []))
    return total / 1024
