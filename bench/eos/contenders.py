"""Contenders (e) Kafka Streams EOS v2 and (f) Flink's exactly-once KafkaSink, as JVMs.

Both are the small Java programs of ``bench/contenders/`` (built by ``make install``:
``mvn -q -f bench/contenders/pom.xml package``), run with ``java`` from each module's
``target/classes`` and the classpath Maven wrote to ``target/classpath.txt``. A run is timed
from the JVM's start to the moment a ``read_committed`` consumer of its output topic has seen
every input record, so JVM start-up and, for Flink, the MiniCluster's start are counted (the
time to the first visible record is printed beside it); the JVM's peak RSS is sampled meanwhile.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

from proctree import tree_rss_mb

from eos.latency import LatencyRun, LatencySetup, run_latency, wait_until_copying
from eos.report import Figure
from eos.visibility import CommittedReader
from lockgate.localcluster.kafka import create_topic, read_visible

CONTENDERS_DIR = Path(__file__).resolve().parent.parent / "contenders"
STREAMS_MAIN = "dev.lockgate.bench.StreamsCopy"
FLINK_MAIN = "dev.lockgate.bench.FlinkCopy"
#: Flink on Java 17 reflects into these (Flink's own ``env.java.opts.all`` opens them too).
JAVA17_OPENS = (
    "java.base/java.lang",
    "java.base/java.lang.reflect",
    "java.base/java.lang.invoke",
    "java.base/java.io",
    "java.base/java.net",
    "java.base/java.nio",
    "java.base/sun.nio.ch",
    "java.base/java.text",
    "java.base/java.time",
    "java.base/java.util",
    "java.base/java.util.concurrent",
    "java.base/java.util.concurrent.atomic",
    "java.base/java.util.concurrent.locks",
)


class ContenderMissingError(RuntimeError):
    """A contender's jars are not built."""


@dataclass(frozen=True)
class ContenderRun:
    """What one JVM contender did."""

    seconds: float
    """From the JVM's start until every input record was visible to ``read_committed``."""
    first_visible_s: float
    """From the JVM's start until its first record was visible (start-up, first commit)."""
    rss_mb: float
    """Peak resident memory of the JVM."""


@dataclass(frozen=True)
class ContenderSetup:
    """Where a contender runs: the broker, the topics, the budget, a directory for its files."""

    bootstrap: str
    source: str
    sink: str
    records: int
    partitions: int
    cores: int
    checkpoint_interval_ms: int
    home: Path
    heap: str = "1g"


def classpath(module: str) -> str:
    """``target/classes`` of ``bench/contenders/<module>`` and its dependencies' jars."""
    target = CONTENDERS_DIR / module / "target"
    listed = target / "classpath.txt"
    if not listed.exists() or not (target / "classes").is_dir():
        raise ContenderMissingError(
            f"{module} contender not built: run `make install` (or `mvn -q -f "
            f"{CONTENDERS_DIR / 'pom.xml'} package`)"
        )
    return f"{target / 'classes'}:{listed.read_text().strip()}"


def java_command(module: str, main: str, args: list[str], *, heap: str) -> list[str]:
    """``java`` running ``main`` of contender ``module``."""
    java = shutil.which("java")
    if java is None:
        raise ContenderMissingError("`java` (17+) is not on PATH")
    opens = [f"--add-opens={package}=ALL-UNNAMED" for package in JAVA17_OPENS]
    return [java, f"-Xmx{heap}", *opens, "-cp", classpath(module), main, *args]


def _streams_argv(setup: ContenderSetup) -> list[str]:
    """The Kafka Streams copy topology from ``setup.source`` to ``setup.sink``:
    exactly_once_v2, ``cores`` stream threads, ``commit.interval.ms`` = Lockgate's checkpoint
    interval, a fresh application id and state directory."""
    state_dir = setup.home / f"streams-state-{uuid.uuid4().hex[:6]}"
    args = [
        setup.bootstrap,
        setup.source,
        setup.sink,
        f"bench-streams-{uuid.uuid4().hex[:6]}",
        str(setup.cores),
        str(setup.checkpoint_interval_ms),
        str(state_dir),
    ]
    return java_command("streams", STREAMS_MAIN, args, heap=setup.heap)


def run_streams(setup: ContenderSetup) -> ContenderRun:
    """(e): the Kafka Streams copy (`_streams_argv`); SIGTERMed once all is visible."""
    return _timed(setup, "streams", _streams_argv(setup))


def streams_latency(
    setup: ContenderSetup,
    *,
    rate: float,
    seconds: float,
    warmup_s: float,
    value_bytes: int,
    watched: dict[str, int],
) -> LatencyRun | None:
    """(e) under Lockgate's latency run: the Streams copy on fresh topics, running and
    committed once (`wait_until_copying`) before records are produced at ``rate`` for
    ``warmup_s``, not counted, then ``seconds``, each timed to ``read_committed``;
    ``watched``: process trees whose CPU the run measures, the JVM's added. None (and why,
    printed) if it never started copying."""
    source, sink = (
        f"bench-latency-streams-{side}-{uuid.uuid4().hex[:6]}" for side in ("in", "out")
    )
    for topic in (source, sink):
        create_topic(setup.bootstrap, topic, partitions=setup.partitions)
    setup = replace(setup, source=source, sink=sink)
    log = setup.home / f"streams-latency-{uuid.uuid4().hex[:6]}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(_streams_argv(setup), stdout=out, stderr=subprocess.STDOUT)
        try:
            if not wait_until_copying(
                setup.bootstrap, source, sink, partitions=setup.partitions, timeout_s=120
            ):
                print(f"    latency, (e): Kafka Streams copied nothing in 120 s; see {log}")
                return None
            return run_latency(
                LatencySetup(
                    bootstrap=setup.bootstrap,
                    source=source,
                    sink=sink,
                    partitions=setup.partitions,
                    value_bytes=value_bytes,
                    rate=rate,
                    seconds=seconds,
                    warmup_s=warmup_s,
                    watched={**watched, "Kafka Streams JVM": proc.pid},
                )
            )
        finally:
            _stop(proc)


def run_flink(setup: ContenderSetup) -> ContenderRun:
    """(f): the Flink job in a local MiniCluster of parallelism ``cores``, checkpointing every
    Lockgate checkpoint interval; it ends by itself after its final checkpoint."""
    args = [
        setup.bootstrap,
        setup.source,
        setup.sink,
        str(setup.cores),
        str(setup.checkpoint_interval_ms),
        f"bench-flink-{uuid.uuid4().hex[:6]}",
    ]
    return _timed(setup, "flink", java_command("flink", FLINK_MAIN, args, heap=setup.heap))


def _timed(
    setup: ContenderSetup, name: str, argv: list[str], timeout_s: float = 1800
) -> ContenderRun:
    """Start ``argv``, wait until every input record is visible in ``setup.sink``, stop it."""
    log = setup.home / f"{name}-{uuid.uuid4().hex[:6]}.log"
    reader = CommittedReader(
        setup.bootstrap, setup.sink, partitions=setup.partitions, records=setup.records
    )
    peak = 0.0
    with log.open("wb") as out:
        began = time.monotonic()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        try:
            while reader.distinct < setup.records:
                if time.monotonic() - began > timeout_s:
                    raise RuntimeError(f"{name}: {reader.distinct} of {setup.records} visible")
                exited = proc.poll()
                if exited not in (None, 0):
                    raise RuntimeError(f"{name} exited {exited}; see {log}:\n{_tail(log)}")
                peak = max(peak, tree_rss_mb(proc.pid))
                reader.poll()
            seconds = time.monotonic() - began
        finally:
            reader.close()
            _stop(proc)
    first = (reader.first_seen_at or began) - began
    return ContenderRun(seconds=seconds, first_visible_s=first, rss_mb=peak)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (a clean close), then SIGKILL after 30 s."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)


def _tail(log: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of ``log``."""
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def spark_cores(master: str) -> int:
    """The cores a ``local[N]`` (or ``local[*]``, ``local``) Spark master uses: the contenders'
    thread count and parallelism."""
    inside = master.partition("[")[2].partition("]")[0] or "1"
    if inside.startswith("*"):
        return os.cpu_count() or 1
    return int(inside.split(",")[0])


def check_output(bootstrap: str, sink: str, records: int, label: str) -> None:
    """What a settled ``read_committed`` consumer sees in ``sink``: every input record (else
    the run does not count), and no duplicate (printed if there is one)."""
    values = [r.value or b"" for r in read_visible(bootstrap, sink, timeout_s=300)]
    distinct = len({value[:10] for value in values})
    assert distinct >= records, f"{label}: only {distinct} of {records} records visible"
    if len(values) != distinct:
        print(f"    {label}: {len(values) - distinct} DUPLICATES in its output")


def jvm_contenders(
    setup: ContenderSetup, *, value_bytes: int, streams: bool, flink: bool
) -> dict[str, Figure]:
    """(e) Kafka Streams EOS v2 and (f) Flink's exactly-once KafkaSink, each into a fresh
    output topic (``setup.sink`` is the prefix), verified by a ``read_committed`` consumer."""
    figures: dict[str, Figure] = {}
    chosen = [("e", "(e) Kafka Streams exactly_once_v2", run_streams, streams)]
    chosen.append(("f", "(f) Flink KafkaSink EXACTLY_ONCE", run_flink, flink))
    for key, label, run, wanted in chosen:
        if not wanted:
            continue
        sink = f"{setup.sink}-{key}-{uuid.uuid4().hex[:6]}"
        create_topic(setup.bootstrap, sink, partitions=setup.partitions)
        try:
            result = run(replace(setup, sink=sink))
        except ContenderMissingError as missing:
            print(f"    {label}: skipped, {missing}")
            continue
        check_output(setup.bootstrap, sink, setup.records, label)
        after_first = result.seconds - result.first_visible_s
        print(
            f"    {label}: first record visible {result.first_visible_s:.1f}s after the JVM"
            f" started (start-up and first commit, counted in its time); from then to the"
            f" last, {setup.records / max(after_first, 1e-3):,.0f} records/s"
        )
        figures[key] = Figure(label, setup.records, result.seconds, value_bytes, result.rss_mb)
    return figures
