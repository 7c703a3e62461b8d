"""`bench/proctree.py`, the benchmarks' one reading of /proc, on real processes: a tree's CPU
counts its descendants' (a database server's backends, an executor's Spark workers), a
process alone does not, the machine's busy time covers every process, a thread that slept
and woke has switched, and a process that is gone reads as 0."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

# The bench's modules import each other as top-level names: bench/ is their scripts' own
# directory.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from proctree import MachineCpu, TreeCpu, context_switches, cpu_seconds, descendants

_BURN_S = 0.3

# The child says "ready" with its pid, waits for "go" on stdin, burns _BURN_S seconds of
# its own CPU, says "burned" and waits for stdin to close; its parent only waits for it.
_CHILD = textwrap.dedent(
    f"""
    import os, sys, time
    print("ready", os.getpid(), flush=True)
    sys.stdin.readline()
    began = time.process_time()
    while time.process_time() - began < {_BURN_S}:
        pass
    print("burned", flush=True)
    sys.stdin.read()
    """
)
_PARENT = (
    f"import subprocess, sys; sys.exit(subprocess.Popen([sys.executable, '-c', {_CHILD!r}]).wait())"
)


def test_a_tree_counts_its_descendants_cpu_and_the_machine_counts_everyones() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdin is not None and parent.stdout is not None
    try:
        tree = TreeCpu(parent.pid)
        alone = TreeCpu(parent.pid, whole_tree=False)
        machine = MachineCpu()
        ready, pid = parent.stdout.readline().split()
        child = int(pid)
        assert ready == "ready" and descendants(parent.pid) == {child}
        switches = context_switches(child)
        parent.stdin.write("go\n")
        parent.stdin.flush()
        assert parent.stdout.readline().strip() == "burned"
        assert context_switches(child) > switches  # it slept on stdin, then woke
        # /proc counts in clock ticks (10 ms): a tick's rounding either way.
        assert tree.seconds() >= _BURN_S - 0.02
        assert alone.seconds() < _BURN_S / 2
        assert machine.seconds() >= _BURN_S - 0.02
        assert machine.cores() > 0
    finally:
        parent.stdin.close()
        assert parent.wait(timeout=30) == 0
    assert cpu_seconds(parent.pid) == 0.0  # gone: reads as nothing, not an error
    assert context_switches(parent.pid) == 0
