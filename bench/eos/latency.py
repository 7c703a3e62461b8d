"""End-to-end visibility latency: a fixed produce rate through a running pipeline.

Each record's value starts with its sequence number (10 digits) and its produce time (16
digits, microseconds since the epoch, taken just before ``produce()``); a ``read_committed``
consumer of the output, in a process of its own on the same host (one wall clock), takes the
time each record became visible to it. Latency = visible - produced, so it covers the
producer's batching, the pipeline's batch and two-phase commit, and the consumer's fetch.

The reader is a process, not a thread beside the load generator: neither waits for the
other's turn at the interpreter lock (a record's stamp is taken when ``consume()`` returns, and
the generator's when its burst starts), and the cores each uses are reported apart.

The load generator, the reader and the system under test share the machine: the run also
measures the cores each used over the produce phase (this process, the reader's, and the
process trees it is given), so a missed target says whether the copy or the machine ran out
of time.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event

from confluent_kafka import Producer

from eos.proctree import TreeCpu
from eos.visibility import CommittedReader

#: The names of this process (the load generator) and of the reader's in `LatencyRun.cores`.
BENCH_PROCESS = "bench (load generator)"
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
    """Cores each watched process tree used over the measured phase, this one's included."""
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
    """Process trees (name -> root pid) whose CPU the run measures, beside this process."""


def run_latency(setup: LatencySetup) -> LatencyRun:
    """Produce at ``setup.rate`` records/s for ``setup.seconds`` and time each record's
    visibility in ``setup.sink`` (read by a process of its own: the module's docstring)."""
    warmup = int(setup.rate * setup.warmup_s)
    expected = warmup + int(setup.rate * setup.seconds)
    spawn = multiprocessing.get_context("spawn")  # not fork: this process holds gRPC channels
    distinct, ready, stop = spawn.Value("q", 0), spawn.Event(), spawn.Event()
    results, sent_results = spawn.Pipe(duplex=False)
    reader = spawn.Process(
        target=_read_visible,
        args=(setup.bootstrap, setup.sink, setup.partitions, expected, warmup),
        kwargs={"distinct": distinct, "ready": ready, "stop": stop, "results": sent_results},
        name="latency-reader",
        daemon=True,
    )
    reader.start()
    try:
        started = time.monotonic() + 60
        while not ready.wait(timeout=1):
            if not reader.is_alive() or time.monotonic() > started:
                raise RuntimeError(
                    f"the latency run's reader process did not start (exit code {reader.exitcode})"
                )
        measuring = _Measuring({BENCH_PROCESS: os.getpid(), READER_PROCESS: reader.pid or 0})
        produced = _produce_at_rate(setup, expected, measured_from=warmup, measuring=measuring)
        achieved = (produced - warmup) / (time.monotonic() - measuring.began)
        cores = measuring.cores()
        deadline = time.monotonic() + setup.settle_s
        while distinct.value < produced and time.monotonic() < deadline:
            time.sleep(0.1)  # the reader process does the work; this only waits for it
    finally:
        stop.set()
    if not results.poll(timeout=60):
        reader.kill()
        raise RuntimeError("the latency run's reader process sent no results within 60 s")
    measured_ms, warmup_ms = array("d"), array("d")
    measured_ms.frombytes(results.recv_bytes())
    warmup_ms.frombytes(results.recv_bytes())
    seen = int(results.recv())
    reader.join(timeout=10)
    ordered = sorted(measured_ms)
    return LatencyRun(
        target_rate=setup.rate,
        achieved_rate=achieved,
        records=produced - warmup,
        p50_ms=_percentile(ordered, 0.50),
        p99_ms=_percentile(ordered, 0.99),
        max_ms=ordered[-1] if ordered else float("nan"),
        missing=produced - seen,
        cores=cores,
        warmup_records=warmup,
        warmup_p99_ms=_percentile(sorted(warmup_ms), 0.99),
    )


def _percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


class _Measuring:
    """The measured phase's start: its time and the CPU counters of the processes watched."""

    def __init__(self, processes: Mapping[str, int]) -> None:
        self._processes = processes
        self.began = time.monotonic()
        self._cpu: dict[str, TreeCpu] = {}

    def start(self, watched: Mapping[str, int]) -> None:
        self.began = time.monotonic()
        self._cpu = {name: TreeCpu(pid, whole_tree=False) for name, pid in self._processes.items()}
        self._cpu.update((name, TreeCpu(pid)) for name, pid in watched.items())

    def cores(self) -> dict[str, float]:
        """The cores each process used since ``start`` (none before it)."""
        return {name: tree.cores() for name, tree in self._cpu.items()}


def _read_visible(
    bootstrap: str,
    sink: str,
    partitions: int,
    records: int,
    warmup: int,
    *,
    distinct: Synchronized[int],
    ready: Event,
    stop: Event,
    results: Connection,
) -> None:
    """The reader process: read ``sink`` until ``stop``, keeping ``distinct`` current; then
    send each measured record's latency and each warm-up record's (ms, an ``array('d')``'s
    bytes; the records numbered below ``warmup`` are the warm-up's) and the distinct count."""
    reader = CommittedReader(bootstrap, sink, partitions=partitions, records=records)
    measured_ms, warmup_ms = array("d"), array("d")

    def on_record(sequence: int, value: bytes, now: float) -> None:
        into = measured_ms if sequence >= warmup else warmup_ms
        into.append((now - int(value[10:26]) / 1e6) * 1000)

    try:
        reader.poll(on_record)  # the first poll connects: from here on it reads as it comes
        ready.set()
        while not stop.is_set():
            reader.poll(on_record)
            distinct.value = reader.distinct
    finally:
        reader.close()
    results.send_bytes(measured_ms.tobytes())
    results.send_bytes(warmup_ms.tobytes())
    results.send(reader.distinct)


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


def _produce_at_rate(
    setup: LatencySetup, records: int, *, measured_from: int, measuring: _Measuring
) -> int:
    """Produce ``records`` records, paced to ``setup.rate`` per second, starting ``measuring``
    as record ``measured_from`` is due (the warm-up's end); returns how many.

    The generator shares the machine with what it measures, so it does little per record:
    the records due are produced in a burst every few ms, all stamped with the burst's start
    (a record produced later in its burst is counted a little late, never early)."""
    producer = Producer({"bootstrap.servers": setup.bootstrap, "linger.ms": 5})
    produce, topic, partitions = producer.produce, setup.source, setup.partitions
    pad = b"x" * max(0, setup.value_bytes - 26)
    keys = [str(k).encode() for k in range(1000)]
    began = time.monotonic()
    sent = 0
    while sent < records:
        due = min(records, int((time.monotonic() - began) * setup.rate) + 1)
        if sent <= measured_from < due:
            measuring.start(setup.watched)
        stamp = b"%016d" % (time.time_ns() // 1000)
        while sent < due:
            try:
                produce(
                    topic,
                    b"%010d" % sent + stamp + pad,
                    keys[sent % 1000],
                    partition=sent % partitions,
                )
            except BufferError:
                producer.poll(0.01)
                continue
            sent += 1
        producer.poll(0)
        time.sleep(0.002)  # pacing: the next batch is due in a few milliseconds
    producer.flush(60)
    return sent
