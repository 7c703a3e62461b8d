"""Where the Kafka sink's time goes, per record, against a real broker.

    .venv/bin/python bench/sink_profile.py [--records 200000] [--value-bytes 100]
        [--sweep] [--no-spark]

Starts its own Kafka broker in a temporary home and times, over the same records (keyed,
``--value-bytes`` values, in Arrow batches of 10,000 rows as Spark hands them to the sink,
with a Kafka timestamp and a null headers column, as the source produces them):

1. a bare confluent-kafka ``produce()`` loop over the batches' Python lists, idempotent
   and transactional (begin, produce, flush): the floor of any Python sink;
2. the sink's ``PartitionWriter`` (``write_batch`` over every batch, then its pre-commit
   flush), at_least_once and exactly_once, with cProfile's ten costliest functions for
   exactly_once;
3. unless ``--no-spark``, the JVM's share: one Spark ``local[2]`` job reading an in-memory
   DataFrame of the same shape and writing it to a no-op Python writer, then to the Kafka
   sink (exactly_once): the difference is the sink's own cost inside Spark;
4. with ``--sweep``, exactly_once through the writer under a few ``sink.kafka.linger_ms``,
   ``batch_size`` and ``compression`` values (how the defaults were chosen).

Prints µs per record and records/s for each; figures, not pass/fail. Timings on a loaded
machine are inflated: compare the lines of one run with each other.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from confluent_kafka import Producer

from lockgate.common.kafka_transactions import open_transactional_producer
from lockgate.common.model.pipeline_spec import Delivery, ErrorTolerance, RecordFormat
from lockgate.executor.dataplane.spark.kafka_sink import SinkOptions
from lockgate.executor.dataplane.spark.kafka_sink_write import PartitionWriter
from lockgate.localcluster.kafka import KafkaBrokerConfig, broker_spec, create_topic
from lockgate.localcluster.ports import free_port
from lockgate.localcluster.process import start_process, stop_process

BATCH_ROWS = 10_000
"""Spark's `spark.sql.execution.arrow.maxRecordsPerBatch` default."""


def arrow_batches(records: int, value_bytes: int) -> list[pa.RecordBatch]:
    """The records as the sink receives them: key, value, headers (null), timestamp."""
    pad = b"x" * max(0, value_bytes - 10)
    now_us = int(time.time() * 1_000_000)
    headers_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    batches = []
    for start in range(0, records, BATCH_ROWS):
        rows = range(start, min(start + BATCH_ROWS, records))
        batches.append(
            pa.RecordBatch.from_arrays(
                [
                    pa.array([str(n % 1000).encode() for n in rows], pa.binary()),
                    pa.array([f"{n:010d}".encode() + pad for n in rows], pa.binary()),
                    pa.nulls(len(rows), headers_type),
                    pa.array([now_us] * len(rows), pa.timestamp("us", tz="UTC")),
                ],
                names=["key", "value", "headers", "timestamp"],
            )
        )
    return batches


def bare_loop(bootstrap: str, topic: str, batches: list[pa.RecordBatch], *, txn: bool) -> float:
    """Seconds to produce every record with a plain loop (lists built outside the clock)."""
    columns = [(b.column("key").to_pylist(), b.column("value").to_pylist()) for b in batches]
    config = {"linger.ms": 20, "batch.num.messages": 10_000, "partitioner": "murmur2_random"}
    if txn:
        opened = open_transactional_producer(
            bootstrap_servers=bootstrap,
            transactional_id=f"bench-bare-{uuid.uuid4().hex[:6]}",
            config=config,
        )
        producer = opened.producer
        producer.begin_transaction()
    else:
        producer = Producer(
            {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", **config}
        )
    began = time.perf_counter()
    produce = producer.produce
    for keys, values in columns:
        for key, value in zip(keys, values, strict=True):
            while True:
                try:
                    produce(topic, value, key)
                    break
                except BufferError:
                    producer.poll(0.05)
    producer.flush(120)
    elapsed = time.perf_counter() - began
    if txn:
        producer.commit_transaction(30)
    return elapsed


def sink_options(bootstrap: str, topic: str, delivery: Delivery) -> SinkOptions:
    """The writer's options for ``delivery`` with the pipeline defaults."""
    return SinkOptions(
        bootstrap_servers=bootstrap,
        topic=topic,
        delivery=delivery,
        transactional_id_prefix=f"bench-sink-{uuid.uuid4().hex[:6]}",
        value_format=RecordFormat.BYTES,
        key_format=RecordFormat.BYTES,
        schema_registry_url="",
        tolerance=ErrorTolerance.NONE,
        dead_letter_topic=None,
        result_path=None,
        transaction_timeout_ms=60_000,
    )


def run_writer(options: SinkOptions, batches: list[pa.RecordBatch]) -> float:
    """Seconds for one write partition: every ``write_batch``, then the pre-commit."""
    writer = PartitionWriter(options, 0)
    writer._ensure_producer()  # the producer's start (init_transactions) is not per record
    began = time.perf_counter()
    for batch in batches:
        writer.write_batch(batch)
    writer.precommit(0)
    return time.perf_counter() - began


def profile_writer(options: SinkOptions, batches: list[pa.RecordBatch]) -> str:
    """cProfile's ten costliest functions (own time) of one writer run."""
    profiler = cProfile.Profile()
    profiler.runcall(run_writer, options, batches)
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(10)
    return "\n".join(line for line in out.getvalue().splitlines()[6:] if line.strip())


def per_record(label: str, seconds: float, records: int, baseline: float | None = None) -> None:
    """One figure line: µs per record, records/s, and the ratio to ``baseline``."""
    ratio = "" if baseline is None else f"  ({seconds / baseline:.2f} x bare)"
    rate = f"{seconds / records * 1e6:7.2f} µs/rec {records / seconds:10,.0f} rec/s"
    print(f"  {label:<44} {rate}{ratio}")


def spark_share(
    bootstrap: str, topic: str, records: int, value_bytes: int, conf: dict[str, str]
) -> None:
    """One Spark job of ``records`` rows into a no-op Python writer, then into the sink."""
    from pyspark.sql import functions as F

    from lockgate.executor.dataplane.spark.session import build_spark_session

    spark = build_spark_session(master="local[2]", conf=conf)
    spark.dataSource.register(NoopSink)
    frame = spark.range(0, records, numPartitions=2).select(
        F.expr("cast(cast(id % 1000 as string) as binary)").alias("key"),
        F.expr(
            f"cast(concat(lpad(cast(id as string), 10, '0'), repeat('x', {value_bytes - 10}))"
            " as binary)"
        ).alias("value"),
        F.current_timestamp().alias("timestamp"),
    )

    def timed(write: Callable[[], None]) -> float:
        began = time.perf_counter()
        write()
        return time.perf_counter() - began

    def noop() -> None:
        frame.write.format(NoopSink.name()).mode("append").save()

    def sink() -> None:
        options = sink_options(bootstrap, topic, Delivery.EXACTLY_ONCE)
        (
            frame.write.format("lockgate_kafka_sink")
            .mode("append")
            .option("bootstrap_servers", bootstrap)
            .option("topic", topic)
            .option("delivery", "exactly_once")
            .option("transactional_id_prefix", options.transactional_id_prefix)
            .save()
        )

    noop()  # warm-up: the Python workers and their imports

    def count() -> None:
        spark.range(0, records, numPartitions=2).count()

    count_s = timed(count)
    noop_s = timed(noop)
    sink_s = timed(sink)
    print(f"Spark local[2], {records:,} rows in 2 partitions (wall time of one job):")
    per_record("range().count() (JVM only)", count_s, records)
    per_record("JVM -> Arrow -> no-op Python writer", noop_s, records)
    per_record("JVM -> Arrow -> Kafka sink exactly_once", sink_s, records)
    print(
        f"  the sink's own share of the job: {(sink_s - noop_s) / sink_s:.0%};"
        f" Spark + Arrow hop: {noop_s / sink_s:.0%}"
    )
    print("memory of this process's tree after the jobs (RSS, MB), by kind:")
    for kind, processes, megabytes in memory_by_kind(os.getpid()):
        print(f"  {kind:<44} {processes:3} process(es) {megabytes:8,.0f} MB")
    spark.stop()


def memory_by_kind(root: int) -> list[tuple[str, int, float]]:
    """RSS of ``root`` and its descendants, grouped: the JVM, Spark's Python workers (and
    their daemon), and the driver's own Python."""
    parents: dict[int, int] = {}
    rss_kb: dict[int, int] = {}
    commands: dict[int, str] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            status = (proc / "status").read_text()
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        pid = int(proc.name)
        parents[pid] = int(fields.get("PPid", "0").strip())
        rss_kb[pid] = int(fields.get("VmRSS", "0 kB").split()[0])
        commands[pid] = command
    kinds: dict[str, list[int]] = {}
    for pid in rss_kb:
        ancestor = pid
        while ancestor not in (0, 1, root):
            ancestor = parents.get(ancestor, 0)
        if ancestor != root:
            continue
        command = commands[pid]
        if pid == root:
            kind = "driver Python (this process)"
        elif "kafka.Kafka" in command:
            kind = "Kafka broker (the bench's, not Spark's)"
        elif "java" in command.split(" ")[0]:
            kind = "Spark JVM"
        elif "pyspark" in command or "daemon" in command or "worker" in command:
            kind = "Spark Python workers"
        else:
            kind = f"other: {command[:40]}"
        kinds.setdefault(kind, []).append(rss_kb[pid])
    return sorted(
        ((kind, len(sizes), sum(sizes) / 1024) for kind, sizes in kinds.items()),
        key=lambda row: -row[2],
    )


def sweep(bootstrap: str, new_topic: Callable[[], str], batches: list[pa.RecordBatch]) -> None:
    """exactly_once through the writer under a few producer batching settings, in three
    interleaved rounds (the best of each), so a change of the machine's load hits all."""
    from lockgate.common.model.producer_batching import Compression, ProducerBatching

    records = sum(b.num_rows for b in batches)
    print("exactly_once writer by producer setting (linger_ms / batch_size / compression):")
    settings = [
        ProducerBatching(0, 1_000_000, Compression.NONE),
        ProducerBatching(5, 1_000_000, Compression.NONE),
        ProducerBatching(20, 1_000_000, Compression.NONE),
        ProducerBatching(100, 1_000_000, Compression.NONE),
        ProducerBatching(20, 16_384, Compression.NONE),
        ProducerBatching(20, 1_000_000, Compression.LZ4),
        ProducerBatching(20, 1_000_000, Compression.ZSTD),
    ]
    best = [float("inf")] * len(settings)
    for _ in range(3):
        for n, batching in enumerate(settings):
            options = replace(
                sink_options(bootstrap, new_topic(), Delivery.EXACTLY_ONCE), batching=batching
            )
            best[n] = min(best[n], run_writer(options, batches))
    for batching, seconds in zip(settings, best, strict=True):
        label = (
            f"{batching.linger_ms:>4} ms / {batching.batch_size:>9,} B /"
            f" {batching.compression.value}"
        )
        per_record(label, seconds, records)


class NoopSinkWriter:
    """Reads every Arrow batch and drops it (the cost of reaching a Python writer)."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> object:
        """Drain the batches; Spark wants a commit message back."""
        from pyspark.sql.datasource import WriterCommitMessage

        for _ in iterator:
            pass
        return WriterCommitMessage()

    def commit(self, messages: object) -> None:
        """Nothing to commit."""

    def abort(self, messages: object) -> None:
        """Nothing to abort."""


def _noop_source() -> type:
    from pyspark.sql.datasource import DataSource, DataSourceArrowWriter

    class _Writer(NoopSinkWriter, DataSourceArrowWriter):  # type: ignore[misc]
        pass

    class _Sink(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench_noop_sink"

        def writer(self, schema: object, overwrite: bool) -> _Writer:
            return _Writer()

    return _Sink


NoopSink: Any = _noop_source()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--sweep", action="store_true", help="time a few producer settings")
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark job timings")
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting for the Spark jobs, e.g. spark.driver.memory=512m (repeatable)",
    )
    args = parser.parse_args(argv)
    if args.records < 1 or args.value_bytes < 10:
        parser.error("--records must be >= 1 and --value-bytes >= 10")

    with tempfile.TemporaryDirectory(prefix="lockgate-sinkbench-") as tmp:
        config = KafkaBrokerConfig(
            home=Path(tmp) / "kafka", port=free_port(), controller_port=free_port()
        )
        spec = broker_spec(config)
        start_process(spec, home=config.home)
        try:
            bootstrap = config.bootstrap_servers

            def new_topic() -> str:
                topic = f"sink-{uuid.uuid4().hex[:6]}"
                create_topic(bootstrap, topic, partitions=args.partitions)
                return topic

            batches = arrow_batches(args.records, args.value_bytes)
            n = args.records
            bare_loop(bootstrap, new_topic(), batches[:2], txn=False)  # warm-up
            print(f"{n:,} records of {args.value_bytes} B, {len(batches)} Arrow batches:")
            bare_idem = bare_loop(bootstrap, new_topic(), batches, txn=False)
            bare_txn = bare_loop(bootstrap, new_topic(), batches, txn=True)
            per_record("bare produce() loop, idempotent", bare_idem, n)
            per_record("bare produce() loop, transactional", bare_txn, n)
            for delivery, bare in (
                (Delivery.AT_LEAST_ONCE, bare_idem),
                (Delivery.EXACTLY_ONCE, bare_txn),
            ):
                options = sink_options(bootstrap, new_topic(), delivery)
                per_record(f"sink writer, {delivery.value}", run_writer(options, batches), n, bare)
            print("cProfile of the exactly_once writer (own time, costliest first):")
            options = sink_options(bootstrap, new_topic(), Delivery.EXACTLY_ONCE)
            print(profile_writer(options, batches))
            if args.sweep:
                sweep(bootstrap, new_topic, batches)
            if not args.no_spark:
                conf = dict(item.split("=", 1) for item in args.spark_conf)
                spark_share(bootstrap, new_topic(), n, args.value_bytes, conf)
        finally:
            stop_process(home=config.home, name=spec.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
