"""The fixed cost of one checkpoint, broken down: where a pre-commit's time goes.

    .venv/bin/python bench/checkpoint_cost.py [--sizes 10,50000] [--repeats 5]

Starts its own Kafka broker and, in this process, the executor's SparkSession
(``--spark-master``, default ``local[2]``, built and warmed up as the executor builds it),
then runs the executor's half of a checkpoint ``--repeats`` times for each batch size of
``--sizes`` (records over ``--partitions`` partitions, 100 B values, ``bytes`` format, no
transform, ``--delivery`` exactly_once or at_least_once), on a warm session, exactly as
``SparkDataPlane.run_precommit`` does, and splits each into:

- ``snapshot``: the end offsets of the source partitions (``snapshot_offset_ranges``);
- ``topics``: the source and sink topics' existence (``_check_topics_exist``);
- ``plan``: the read's and the transform's logical plans (the Python data source's
  ``schema()`` among them, unless the reader is given its schema);
- ``pre-job``: from ``save()`` to the Spark job's submission: the write's planning and the
  read's (``writer()`` and ``reader()``/``partitions()`` in Spark's Python planner workers);
- ``job``: the Spark job, submission to completion (read and write tasks, one stage);
  ``read`` is a read-only job of the same ranges (``format("noop")``), run after, so
  ``job - read`` is about what writing costs;
- ``post-job``: from the job's end to ``save()``'s return: the writer's ``commit()`` in a
  Python worker, and the result file;
- ``commit``: ending the batch's transactions (``Committer.commit``, FindCoordinator +
  EndTxn per handle), what the leader asks for after COMPLETE;
- ``forks``: the Python processes Spark started during the batch;
- ``writers``: the batch's write partitions (each one producer, and for exactly_once one
  transaction): at most one per task slot, as the executor packs the source's ranges.

Then, unless ``--source-records 0``, the source's per-record cost alone: ``read_range`` (what
one Spark read task runs) over ``--source-records`` (200,000) records of one partition, in
this process, best of three in records/s; ``--profile`` adds cProfile's top functions.

The trigger and report RPCs and the leader's COMPLETE are not in this process: see
``bench/coordinator.py`` (the checkpoint round trip without a data plane, p50 well under
100 ms) and the pre-commit and commit p50 that ``bench/eos_throughput.py`` prints per run.
Figures, not pass/fail; p50 over the repeats, in ms.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from eos_throughput import produce_input  # bench/ is the script's own directory
from proctree import descendants
from pyspark.sql import SparkSession

from lockgate.common.model.ids import CheckpointId, PipelineId, TaskId
from lockgate.common.model.offsets import OffsetRange
from lockgate.common.model.pipeline_spec import PipelineSpec, RecordFormat, parse_pipeline_spec
from lockgate.executor.committer import Committer
from lockgate.executor.dataplane.spark.batch import BatchOptions, run_precommit_batch
from lockgate.executor.dataplane.spark.kafka_source import (
    KafkaSource,
    SourceOptions,
    ranges_to_option,
    source_schema,
)
from lockgate.executor.dataplane.spark.kafka_source_read import read_range
from lockgate.executor.dataplane.spark.offsets import snapshot_offset_ranges, topic_partitions
from lockgate.executor.dataplane.spark.session import build_spark_session, task_slots
from lockgate.localcluster.kafka import KafkaBrokerConfig, broker_spec, create_topic
from lockgate.localcluster.ports import free_port
from lockgate.localcluster.process import start_process, stop_process

COLUMNS = (
    "snapshot",
    "topics",
    "plan",
    "pre-job",
    "job",
    "post-job",
    "total",
    "read",
    "commit",
    "forks",
    "writers",
)


def job_window_ms(spark: SparkSession, job_ids: Sequence[int]) -> tuple[float, float]:
    """The wall-clock submission of the first and completion of the last of ``job_ids``
    (ms since the epoch), from Spark's status store, which its listener bus fills a moment
    after a job ends (waited for, up to 10 s)."""
    store = spark.sparkContext._jsc.sc().statusStore()  # type: ignore[union-attr]
    deadline = time.monotonic() + 10
    while True:
        jobs = [store.job(job_id) for job_id in job_ids]
        if all(job.completionTime().isDefined() for job in jobs):
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"Spark's status store has no end for jobs {list(job_ids)}")
        time.sleep(0.05)
    return (
        min(float(job.submissionTime().get().getTime()) for job in jobs),
        max(float(job.completionTime().get().getTime()) for job in jobs),
    )


def read_only_ms(spark: SparkSession, bootstrap: str, ranges: Sequence[OffsetRange]) -> float:
    """The Spark job of reading ``ranges`` and discarding them, submission to completion."""
    group = f"bench-read-{uuid.uuid4().hex}"
    spark.sparkContext.setJobGroup(group, "read only")
    (
        spark.read.format(KafkaSource.name())
        .schema(source_schema(RecordFormat.BYTES, RecordFormat.BYTES, marked=False))
        .option("bootstrap_servers", bootstrap)
        .option("offset_ranges", ranges_to_option(ranges))
        .load()
        .write.format("noop")
        .mode("overwrite")
        .save()
    )
    job_ids = spark.sparkContext.statusTracker().getJobIdsForGroup(group)
    first, last = job_window_ms(spark, job_ids)
    return last - first


def one_checkpoint(
    spark: SparkSession,
    spec: PipelineSpec,
    *,
    checkpoint: int,
    start_offsets: dict[tuple[str, int], int],
    jvm_pid: int,
) -> tuple[dict[str, float], list[OffsetRange]]:
    """Run one pre-commit and its commit; the figures of each step, in ms."""
    figures: dict[str, float] = {}
    before = descendants(jvm_pid)
    wall_started = time.time() * 1000
    started = time.monotonic()
    ranges = snapshot_offset_ranges(
        bootstrap_servers=spec.source.bootstrap_servers,
        topics=spec.source.topics,
        start_offsets=start_offsets,
    )
    figures["snapshot"] = (time.monotonic() - started) * 1000
    result = run_precommit_batch(
        spark,
        spec,
        pipeline=PipelineId("bench"),
        task=TaskId("bench-0"),
        checkpoint_id=CheckpointId(checkpoint),
        offset_ranges=ranges,
        transactional_id_prefix=f"bench-{uuid.uuid4().hex[:8]}",
        # As the executor's data plane packs them: at most one write partition per task slot.
        options=BatchOptions(max_packed_partitions=task_slots(spark)),
    )
    wall_ended = time.time() * 1000
    figures["forks"] = float(len(descendants(jvm_pid) - before))
    figures["writers"] = float(result.write_partitions)
    phases = dict(result.phase_seconds)
    figures["topics"] = phases.get("topics", 0.0) * 1000
    figures["plan"] = phases.get("plan", 0.0) * 1000
    figures["total"] = wall_ended - wall_started
    if result.spark_job_ids:
        first, last = job_window_ms(spark, result.spark_job_ids)
        save_started = wall_started + figures["snapshot"] + figures["topics"] + figures["plan"]
        figures["pre-job"] = first - save_started
        figures["job"] = last - first
        figures["post-job"] = wall_ended - last
    started = time.monotonic()
    handles = [h.on(spec.sink.bootstrap_servers) for h in result.handles]
    if handles:
        Committer().commit(handles, what=f"checkpoint {checkpoint}", sink_properties={})
    figures["commit"] = (time.monotonic() - started) * 1000
    figures["read"] = read_only_ms(spark, spec.source.bootstrap_servers, ranges)
    return figures, ranges


def source_rate(bootstrap: str, *, records: int, profile: bool) -> None:
    """Time ``read_range`` over ``records`` records of one partition; print records/s."""
    topic = f"ckpt-source-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, partitions=1)
    produce_input(bootstrap, topic, records=records, partitions=1, size=100)
    options = SourceOptions.parse(
        {
            "bootstrap_servers": bootstrap,
            "offset_ranges": ranges_to_option([OffsetRange(topic, 0, 0, records)]),
        }
    )

    def read_all() -> int:
        return sum(batch.num_rows for batch in read_range(options, options.ranges[0]))

    best = float("inf")
    for _ in range(3):
        started = time.monotonic()
        if read_all() != records:
            raise SystemExit(f"read_range did not return the {records:,} records")
        best = min(best, time.monotonic() - started)
    print(f"source: read_range of {records:,} records in {best:.2f}s: {records / best:,.0f}/s")
    if profile:
        profiler = cProfile.Profile()
        profiler.runcall(read_all)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(12)


def print_table(size: int, rows: list[dict[str, float]]) -> None:
    """One line per batch size: the p50 of each column over the repeats."""
    cells = []
    for column in COLUMNS:
        values = [row[column] for row in rows if column in row]
        cells.append(f"{statistics.median(values):>8.0f}" if values else f"{'-':>8}")
    print(f"{size:>8,} " + " ".join(cells))


def checkpoint_costs(spec: PipelineSpec, sizes: list[int], *, repeats: int, master: str) -> None:
    """Run ``repeats`` checkpoints of each size on a warm session; print the table."""
    started = time.monotonic()
    spark = build_spark_session(master=master)
    print(f"SparkSession built and warmed up in {time.monotonic() - started:.1f}s")
    jvm_pid = spark.sparkContext._gateway.proc.pid  # type: ignore[union-attr]
    source = spec.source.topics[0]
    partitions = len(
        topic_partitions(bootstrap_servers=spec.source.bootstrap_servers, topic=source)
    )
    start_offsets: dict[tuple[str, int], int] = {}
    checkpoint = 0
    print(f"{'records':>8} " + " ".join(f"{c:>8}" for c in COLUMNS) + "   (p50, ms)")
    for size in [sizes[0], *sizes]:  # the first size once untimed: a warm session
        rows = []
        for _ in range(repeats):
            produce_input(
                spec.source.bootstrap_servers, source, records=size, partitions=partitions, size=100
            )
            checkpoint += 1
            figures, ranges = one_checkpoint(
                spark, spec, checkpoint=checkpoint, start_offsets=start_offsets, jvm_pid=jvm_pid
            )
            start_offsets = {(r.topic, r.partition): r.end_offset for r in ranges}
            rows.append(figures)
        if checkpoint > repeats:
            print_table(size, rows)
    spark.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """Break the fixed cost of a checkpoint down and print it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", default="10,50000", help="records per batch, comma-separated")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--spark-master", default="local[2]")
    parser.add_argument(
        "--delivery",
        choices=("exactly_once", "at_least_once"),
        default="exactly_once",
        help="the pipeline's delivery (at_least_once: no transaction, no handle to commit)",
    )
    parser.add_argument("--source-records", type=int, default=200_000)
    parser.add_argument("--profile", action="store_true", help="cProfile the source's read")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]

    with tempfile.TemporaryDirectory(prefix="lockgate-ckptcost-") as tmp:
        home = Path(tmp)
        config = KafkaBrokerConfig(
            home=home / "kafka", port=free_port(), controller_port=free_port()
        )
        broker = start_process(broker_spec(config), home=config.home)
        try:
            bootstrap = config.bootstrap_servers
            source, sink = (f"ckpt-{side}-{uuid.uuid4().hex[:6]}" for side in ("in", "out"))
            for topic in (source, sink):
                create_topic(bootstrap, topic, partitions=args.partitions)
            spec = parse_pipeline_spec(
                {
                    "name": "bench",
                    "source": {"kafka": {"bootstrap_servers": bootstrap, "topics": [source]}},
                    "sink": {"kafka": {"bootstrap_servers": bootstrap, "topic": sink}},
                    "delivery": args.delivery,
                }
            )
            if args.repeats > 0:
                checkpoint_costs(spec, sizes, repeats=args.repeats, master=args.spark_master)
            if args.source_records:
                source_rate(bootstrap, records=args.source_records, profile=args.profile)
        finally:
            stop_process(home=config.home, name=broker.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
