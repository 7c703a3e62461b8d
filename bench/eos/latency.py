"""End-to-end visibility latency: a fixed produce rate through a running pipeline.

Each record's value starts with its sequence number (10 digits) and its produce time (16
digits, microseconds since the epoch, taken just before ``produce()``); a ``read_committed``
consumer of the output, in a thread of this process (one clock), takes the time each record
became visible to it. Latency = visible - produced, so it covers the producer's batching, the
pipeline's batch and two-phase commit, and the consumer's fetch.

The load generator, the reader and the system under test share the machine: the run also
measures the cores each used over the produce phase (this process, and the process trees
it is given), so a missed target says whether the copy or the machine ran out of time.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from confluent_kafka import Producer

from eos.proctree import TreeCpu
from eos.visibility import CommittedReader

#: The name of this process (the load generator and the reader) in `LatencyRun.cores`.
BENCH_PROCESS = "bench (load generator + reader)"


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
    """Records produced but not visible by the deadline."""
    cores: dict[str, float] = field(default_factory=dict)
    """Cores each watched process tree used over the produce phase, this one's included."""


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
    settle_s: float = 30.0
    """How long past the produce phase records may take to become visible."""
    watched: Mapping[str, int] = field(default_factory=dict)
    """Process trees (name -> root pid) whose CPU the run measures, beside this process."""


def run_latency(setup: LatencySetup) -> LatencyRun:
    """Produce at ``setup.rate`` records/s for ``setup.seconds`` and time each record's
    visibility in ``setup.sink``."""
    expected = int(setup.rate * setup.seconds)
    reader = CommittedReader(
        setup.bootstrap, setup.sink, partitions=setup.partitions, records=expected
    )
    latencies_ms: list[float] = []

    def on_record(value: bytes, now: float) -> None:
        latencies_ms.append((now - int(value[10:26]) / 1e6) * 1000)

    stop = threading.Event()

    def consume() -> None:
        while not stop.is_set():
            reader.poll(on_record)

    consumer = threading.Thread(target=consume, name="latency-reader", daemon=True)
    consumer.start()
    try:
        began = time.monotonic()
        cpu = {BENCH_PROCESS: TreeCpu(os.getpid(), whole_tree=False)}
        cpu.update((name, TreeCpu(pid)) for name, pid in setup.watched.items())
        produced = _produce_at_rate(setup, expected)
        achieved = produced / (time.monotonic() - began)
        cores = {name: tree.cores() for name, tree in cpu.items()}
        deadline = time.monotonic() + setup.settle_s
        while reader.distinct < produced and time.monotonic() < deadline:
            time.sleep(0.1)  # the reader thread does the work; this only waits for it
    finally:
        stop.set()
        consumer.join(timeout=10)
        reader.close()
    ordered = sorted(latencies_ms)

    def pct(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")

    return LatencyRun(
        target_rate=setup.rate,
        achieved_rate=achieved,
        records=produced,
        p50_ms=pct(0.50),
        p99_ms=pct(0.99),
        max_ms=ordered[-1] if ordered else float("nan"),
        missing=produced - reader.distinct,
        cores=cores,
    )


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


def _produce_at_rate(setup: LatencySetup, records: int) -> int:
    """Produce ``records`` records, paced to ``setup.rate`` per second; returns how many.

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
