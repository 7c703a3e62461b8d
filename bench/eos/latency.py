"""End-to-end visibility latency: a fixed produce rate through a running pipeline.

The load generator and the reader are ``bench/latencygen`` (Go, franz-go), each a process of
its own on the same host (one wall clock): each record's value starts with its sequence
number (10 digits) and its produce time (16 digits, microseconds since the epoch, taken as
its burst of a few milliseconds' records starts); the ``read_committed`` reader takes the time
each record became visible to it. Latency = visible - produced, so it covers the producer's
batching, the pipeline's batch and two-phase commit, and the consumer's fetch.

Why Go: the load generator, the reader and the system under test share the machine, and the
Python generator and reader this replaced used 0.34 of a core at 93,000 records/s and 0.78 at
150,000 on the 2-core machine (README, issue 13), cores the copy under test lacked. The run
also measures the cores each used over the measured phase (the generator's, the reader's,
and the process trees it is given), so a missed target says whether the copy or the machine
ran out of time.
"""

from __future__ import annotations

import json
import math
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from confluent_kafka import Producer
from gobuild import go_binary
from proctree import TreeCpu

from eos.visibility import CommittedReader

LATENCYGEN_DIR = Path(__file__).resolve().parent.parent / "latencygen"

#: The names of the load generator's and the reader's processes in `LatencyRun.cores`.
GENERATOR_PROCESS = "load generator"
READER_PROCESS = "reader"


@dataclass(frozen=True)
class LatencyRun:
    """What a latency run measured."""

    target_rate: float
    """Records/s asked for."""
    achieved_rate: float
    """Records/s the producer kept up."""
    records: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    missing: int
    """Records produced but not visible by the deadline (the warm-up's included)."""
    cores: dict[str, float] = field(default_factory=dict)
    """Cores each watched process tree used over the measured phase, the load generator's and
    the reader's included."""
    warmup_records: int = 0
    """Records produced at the same rate before the measured ones, not in the figures above."""
    warmup_p99_ms: float = float("nan")
    """The warm-up records' own p99, printed beside the measured one."""


@dataclass(frozen=True)
class LatencySetup:
    """The broker and topics of a pipeline already running from ``source`` to ``sink``."""

    bootstrap: str
    source: str
    sink: str
    partitions: int
    value_bytes: int
    rate: float
    seconds: float
    warmup_s: float = 10.0
    """How long the same load runs before the measured ``seconds``, its records not counted:
    a broker fresh to this load pattern (many small produce requests, ``read_committed``
    fetches) spends its first seconds compiling it, at up to 0.9 of a core against 0.3-0.5
    afterwards, and every copy behind it is slower meanwhile (README, issue 13)."""
    settle_s: float = 30.0
    """How long past the produce phase records may take to become visible."""
    watched: Mapping[str, int] = field(default_factory=dict)
    """Process trees (name -> root pid) whose CPU the run measures, beside the load generator
    and the reader."""


def run_latency(setup: LatencySetup) -> LatencyRun:
    """Produce at ``setup.rate`` records/s for ``setup.seconds`` (after ``setup.warmup_s`` at
    the same rate) and time each record's visibility in ``setup.sink`` (the module's
    docstring). Raises GoBuildError if ``bench/latencygen`` cannot be built."""
    binary = go_binary(LATENCYGEN_DIR)
    warmup = int(setup.rate * setup.warmup_s)
    expected = warmup + int(setup.rate * setup.seconds)
    common = [
        f"-bootstrap={setup.bootstrap}",
        f"-partitions={setup.partitions}",
        f"-records={expected}",
        f"-measured-from={warmup}",
    ]
    reader = _Latencygen(
        binary, "read", [*common, f"-topic={setup.sink}", f"-settle={setup.settle_s}s"]
    )
    try:
        reader.expect_line("ready", timeout_s=60)
        generator = _Latencygen(
            binary,
            "produce",
            [
                *common,
                f"-topic={setup.source}",
                f"-rate={setup.rate}",
                f"-value-bytes={setup.value_bytes}",
            ],
        )
        try:
            generator.expect_line("measuring", timeout_s=setup.warmup_s + 60)
            cpu = {GENERATOR_PROCESS: generator.pid, READER_PROCESS: reader.pid}
            counters = {name: TreeCpu(pid, whole_tree=False) for name, pid in cpu.items()}
            counters.update((name, TreeCpu(pid)) for name, pid in setup.watched.items())
            produced = generator.result(timeout_s=setup.seconds + 120)
            cores = {name: tree.cores() for name, tree in counters.items()}
        finally:
            generator.stop()
        if produced["errors"]:
            raise RuntimeError(
                f"the latency run's load generator failed {produced['errors']} records:"
                f" {produced.get('first_error')}"
            )
        reader.tell(f"{produced['produced']}\n")
        seen = reader.result(timeout_s=setup.settle_s + 60)
    finally:
        reader.stop()
    return LatencyRun(
        target_rate=setup.rate,
        achieved_rate=produced["measured_rate"],
        records=produced["produced"] - warmup,
        p50_ms=_ms(seen["p50_ms"]),
        p99_ms=_ms(seen["p99_ms"]),
        max_ms=_ms(seen["max_ms"]),
        missing=produced["produced"] - seen["distinct"],
        cores=cores,
        warmup_records=warmup,
        warmup_p99_ms=_ms(seen["warmup_p99_ms"]),
    )


def _ms(figure: float) -> float:
    """latencygen's -1 (no record) as NaN."""
    return figure if figure >= 0 else math.nan


class _Latencygen:
    """One ``latencygen`` process: its lines of output as they come, its last one its result."""

    def __init__(self, binary: Path, command: str, args: list[str]) -> None:
        self._proc = subprocess.Popen(
            [str(binary), command, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.pid = self._proc.pid
        self._name = f"latencygen {command}"
        self._lines: list[str] = []
        self._changed = threading.Condition()
        self._stderr: list[str] = []
        threading.Thread(target=self._read, args=(self._proc.stdout,), daemon=True).start()
        threading.Thread(target=self._drain, args=(self._proc.stderr,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            with self._changed:
                self._lines.append(line.strip())
                self._changed.notify_all()
        with self._changed:
            self._lines.append("")  # end of output
            self._changed.notify_all()

    def _drain(self, stream: IO[str]) -> None:
        self._stderr.extend(stream)

    def _next_line(self, timeout_s: float, what: str) -> str:
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not self._lines:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"{self._name} did not {what} within {timeout_s:.0f} s")
                self._changed.wait(timeout=left)
            line = self._lines.pop(0)
        if not line:
            self._proc.wait(timeout=10)
            said = "".join(self._stderr).strip() or "nothing on stderr"
            raise RuntimeError(
                f"{self._name} exited ({self._proc.returncode}) before it could {what}: {said}"
            )
        return line

    def expect_line(self, expected: str, *, timeout_s: float) -> None:
        """Wait for the line ``expected``."""
        line = self._next_line(timeout_s, f"say {expected!r}")
        if line != expected:
            raise RuntimeError(f"{self._name} said {line!r} where {expected!r} was expected")

    def tell(self, text: str) -> None:
        """Write ``text`` to its standard input."""
        assert self._proc.stdin is not None
        self._proc.stdin.write(text)
        self._proc.stdin.flush()

    def result(self, *, timeout_s: float) -> dict[str, Any]:
        """Its JSON result line."""
        answer: dict[str, Any] = json.loads(self._next_line(timeout_s, "print its result"))
        return answer

    def stop(self) -> None:
        """Kill it unless it has exited."""
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait(timeout=10)


def wait_until_copying(
    bootstrap: str, source: str, sink: str, *, partitions: int, timeout_s: float
) -> bool:
    """Write a marker record to every partition of ``source`` and wait until a
    ``read_committed`` consumer of ``sink`` has seen them all: the copy runs and commits. The
    markers are not input records (`CommittedReader` skips them). False on the timeout."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition in range(partitions):
        producer.produce(source, b"warm-up marker", partition=partition)
    producer.flush(30)
    reader = CommittedReader(bootstrap, sink, partitions=partitions, records=0)
    try:
        deadline = time.monotonic() + timeout_s
        while reader.skipped < partitions:
            if time.monotonic() > deadline:
                return False
            reader.poll()
        return True
    finally:
        reader.close()
