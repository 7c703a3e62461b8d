"""Exactly-once throughput: Lockgate against its baselines and contenders on one broker.

    .venv/bin/python bench/eos_throughput.py [--records 1000000] [--partitions 4]

Starts its own Kafka broker, one coordinator and one executor (``--spark-master``,
default ``local[2]``; with TLS and tokens as the local cluster, ``--insecure``: plaintext;
``--spark-conf KEY=VALUE``, repeatable, passed to the executor's own ``--spark-conf``) in a
temporary home, writes N records (``--value-bytes`` each) to an
input topic, then copies them several times, each into its own output topic:

(a) a Lockgate pipeline with ``delivery: exactly_once`` (``--tasks-max``, default 1: one
    task, whose batches Spark runs as one task per slot);
(b) the same pipeline with ``delivery: at_least_once``;
(c) a plain confluent-kafka consume -> produce loop (no transactions, one process), its
    consumer's prefetch set (``eos.visibility.PREFETCH``); (c0) the same with librdkafka's;
(d) Kafka's ``TransactionalMessageCopier`` (kafka-tools jar), one per input partition,
    in parallel;
(e) unless ``--no-streams``: a Kafka Streams copy topology, ``exactly_once_v2``, as many
    stream threads as Spark's cores, ``commit.interval.ms`` = Lockgate's checkpoint interval;
(f) unless ``--no-flink``: a Flink job in a local MiniCluster of parallelism = Spark's cores,
    ``KafkaSource`` (bounded) -> ``KafkaSink`` at ``EXACTLY_ONCE``, checkpointing at
    Lockgate's interval ((e) and (f): ``bench/eos/contenders.py`` over ``bench/contenders/``);
(m) unless ``--no-metrics-overhead``: (a) again on a coordinator and an executor restarted
    with ``--metrics-listen`` (every metric of README's Metrics section recorded and served
    to Prometheus; (a)-(b) run with metrics off, the services' default), after its own
    untimed warm-up, to print the overhead of metrics, 1 - m/a, against its < 3 % target.
    The run ends by scraping the executor's /metrics: its records-written counter must
    cover the input, so (m) really measured metrics on.

(a), (b) and (c) run ``--rounds`` times (default 3) in turn, the first two's order alternating
from round to round; the table shows each one's median round (with the peak RSS of all its
rounds), and every round's records/s and (a)'s ratios to (b) and (c) round by round are
printed beneath it: one round's figures on two shared cores move by a fifth.

For each it prints records/s, MB/s (of values) and peak RSS: for (a), (b) and (m) the
executor's (its Python process plus the Spark JVM and Python workers under it), for (e) and
(f) the JVM's; then the ratios of (a) to every other. A Lockgate run is timed from its
``CreatePipeline`` call (in this process, as a control plane makes it) to the commit time the
coordinator stamped on the checkpoint whose offsets reach the end of the input (the executor's Spark
start is excluded: an executor is long-lived; so is its first big batch, paid by an untimed
warm-up pipeline of as many records as a timed run, without which whichever of (a) and (b)
runs first is about a third slower, and with a fifth of them still a fifth slower).
(e) and (f) are timed from the JVM's start until a ``read_committed`` consumer has seen every
record, start-up included; (a)-(f) must each have copied every record, checked by a
``read_committed`` consumer. Then, unless ``--no-latency``, the latency run: an exactly_once
pipeline fed at half of (a)'s records/s for ``--latency-warmup-seconds``, not counted, then
for ``--latency-seconds``, each record timed from produce to visible to ``read_committed``
(p50, p99 against 2 x the checkpoint interval), and unless ``--no-streams`` the same run
through (e) Kafka Streams at the same rate; the load generator and the reader are
``bench/latencygen`` (Go, built here: ``eos/latency.py`` says why), and each run prints the
cores that they, the broker and the copy used while the measured records were produced, so a
miss says whether the copy or the machine ran short.
Figures, not pass/fail.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
from confluent_kafka import Consumer, KafkaError, Producer
from eos.contenders import (
    ContenderMissingError,
    ContenderSetup,
    check_output,
    jvm_contenders,
    spark_cores,
    streams_latency,
)
from eos.latency import LATENCYGEN_DIR, LatencyRun, LatencySetup, run_latency
from eos.report import Figure, median_round, print_figures, print_latency, print_rounds
from eos.visibility import PREFETCH
from gobuild import GoBuildError, go_binary
from proctree import tree_rss_mb

from lockgate.client.pipeline_file import spec_from_mapping
from lockgate.common.grpc_client import open_channel
from lockgate.common.security import ClientSecurity
from lockgate.localcluster.certs import ensure_local_pki
from lockgate.localcluster.kafka import (
    KafkaBrokerConfig,
    broker_spec,
    create_topic,
    java_argv,
    read_visible,
    tools_log4j2,
)
from lockgate.localcluster.ports import free_port
from lockgate.localcluster.process import (
    ProcessSpec,
    RunningProcess,
    start_process,
    stop_process,
    wait_until,
)
from lockgate.localcluster.services import coordinator_spec, executor_spec
from lockgate.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc

COPIER = "org.apache.kafka.tools.TransactionalMessageCopier"

#: Every Lockgate pipeline's checkpoint interval, and the contenders' commit/checkpoint interval.
CHECKPOINT_INTERVAL_MS = 1000


def produce_input(bootstrap: str, topic: str, *, records: int, partitions: int, size: int) -> None:
    """Write ``records`` keyed records of ``size`` value bytes, round-robin over partitions."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1 << 20})
    pad = b"x" * max(0, size - 10)
    for n in range(records):
        value = f"{n:010d}".encode() + pad
        while True:
            try:
                producer.produce(
                    topic, key=str(n % 1000).encode(), value=value, partition=n % partitions
                )
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(300)


def run_plain_loop(
    bootstrap: str, source: str, sink: str, *, records: int, prefetch: Mapping[str, int]
) -> float:
    """(c): consume -> produce with confluent-kafka, no transactions, the consumer's
    ``prefetch`` settings added to librdkafka's defaults; returns seconds."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-plain-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **prefetch,
        }
    )
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20})
    began = time.monotonic()
    consumer.subscribe([source])
    copied = 0
    try:
        while copied < records:
            for message in consumer.consume(num_messages=10_000, timeout=1.0):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise RuntimeError(str(error))
                while True:
                    try:
                        producer.produce(
                            sink,
                            key=message.key(),
                            value=message.value(),
                            headers=message.headers(),
                        )
                        break
                    except BufferError:
                        producer.poll(0.05)
                copied += 1
            producer.poll(0)
        producer.flush(120)
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return time.monotonic() - began


def run_copiers(bootstrap: str, source: str, sink: str, *, partitions: int, home: Path) -> float:
    """(d): one TransactionalMessageCopier per input partition, in parallel; returns seconds."""
    began = time.monotonic()
    procs = [
        subprocess.Popen(
            java_argv(
                COPIER,
                "--broker-list",
                bootstrap,
                "--input-topic",
                source,
                "--input-partition",
                str(p),
                "--output-topic",
                sink,
                "--transactional-id",
                f"bench-copier-{uuid.uuid4().hex[:6]}-{p}",
                "--consumer-group",
                f"bench-copier-{uuid.uuid4().hex[:6]}",
                "--transaction-size",
                "5000",
                "--max-messages",
                "-1",
                log4j2=tools_log4j2(home),
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for p in range(partitions)
    ]
    for proc in procs:
        if proc.wait(timeout=1800) != 0:
            raise RuntimeError(f"TransactionalMessageCopier exited {proc.returncode}")
    return time.monotonic() - began


def create_pipeline(
    stub: coordinator_pb2_grpc.CoordinatorServiceStub,
    *,
    bootstrap: str,
    source: str,
    sink: str,
    delivery: str,
    tasks_max: int,
    transform_sql: str | None = None,
    max_records_per_partition: int = 0,
) -> str:
    """Create a copy pipeline from ``source`` to ``sink`` through ``CreatePipeline``, as a
    control plane does (the spec is the mapping a pipeline file holds, read by the CLI's own
    `pipeline_file.spec_from_mapping`), checkpointing every :data:`CHECKPOINT_INTERVAL_MS`,
    with ``transform_sql`` if given (none: a plain copy, as the contenders make) and
    ``max_records_per_partition`` if not 0 (0: the spec's default); returns
    its name. Not through a `lockgate pipeline create` process: its interpreter's start
    (about 0.45 s) was charged to the copy's time."""
    name = f"bench-{delivery.replace('_', '-')}-{uuid.uuid4().hex[:6]}"
    spec = {
        "name": name,
        "source": {
            "kafka": {
                "bootstrap_servers": bootstrap,
                "topics": [source],
                "starting_offsets": "earliest",
                **(
                    {"max_records_per_partition": max_records_per_partition}
                    if max_records_per_partition
                    else {}
                ),
            }
        },
        **({"transform": {"sql": transform_sql}} if transform_sql else {}),
        "sink": {"kafka": {"bootstrap_servers": bootstrap, "topic": sink}},
        "delivery": delivery,
        "checkpoint": {"interval_ms": CHECKPOINT_INTERVAL_MS, "timeout_ms": 120000},
        "tasks_max": tasks_max,
        "errors": {"tolerance": "none"},
    }
    stub.CreatePipeline(
        coordinator_pb2.CreatePipelineRequest(
            request_id=uuid.uuid4().hex, spec=spec_from_mapping(spec)
        ),
        timeout=60,
    )
    return name


def run_pipeline(
    stub: coordinator_pb2_grpc.CoordinatorServiceStub,
    *,
    bootstrap: str,
    source: str,
    sink: str,
    records: int,
    delivery: str,
    tasks_max: int,
    executor_pid: int,
    transform_sql: str | None = None,
    max_records_per_partition: int = 0,
) -> tuple[float, float]:
    """(a)/(b): create the pipeline, wait until its committed offsets reach the input's end.
    Returns (seconds from the CreatePipeline call to the commit time the coordinator stamped
    on the checkpoint that covers the input, peak executor RSS in MB). The commit time, not
    the moment this process's polls saw it, ends the run, as (c) ends at its last flush."""
    began_wall = time.time()
    name = create_pipeline(
        stub,
        bootstrap=bootstrap,
        source=source,
        sink=sink,
        delivery=delivery,
        tasks_max=tasks_max,
        transform_sql=transform_sql,
        max_records_per_partition=max_records_per_partition,
    )
    created_wall = time.time()
    peak = 0.0
    complete_at = 0

    def done() -> bool:
        # Done when a COMMITTED checkpoint covers the whole input (GetOffsets answers the
        # last COMPLETE one's offsets, whose commit may still be under way).
        nonlocal peak, complete_at
        peak = max(peak, tree_rss_mb(executor_pid))
        try:
            if not complete_at:
                answer = stub.GetOffsets(
                    coordinator_pb2.GetOffsetsRequest(pipeline_name=name), timeout=5
                )
                if sum(int(o.offset) for o in answer.offsets) < records:
                    return False
                complete_at = int(answer.checkpoint_id)  # and its commit, in the same poll
            status = stub.GetPipelineStatus(
                coordinator_pb2.GetPipelineStatusRequest(name=name), timeout=5
            )
        except grpc.RpcError:
            return False
        return int(status.last_committed_checkpoint_id) >= complete_at

    wait_until(
        done, timeout_s=3600, description=f"{name} to copy {records} records", interval_s=0.2
    )
    seen_wall = time.time()
    stub.StopPipeline(coordinator_pb2.StopPipelineRequest(name=name), timeout=30)
    history = checkpoint_history(stub, name)
    print_checkpoints(history, delivery, began=(began_wall, created_wall, seen_wall))
    print_checkpoint_sizes(stub, name, history, delivery)
    committed_wall = next(
        (
            c.commit_time.ToMilliseconds() / 1000
            for c in history
            if c.checkpoint_id == complete_at and c.state == common_pb2.CHECKPOINT_STATE_COMMITTED
        ),
        seen_wall,
    )
    return committed_wall - began_wall, peak


def checkpoint_history(
    stub: coordinator_pb2_grpc.CoordinatorServiceStub, name: str
) -> list[common_pb2.Checkpoint]:
    """The pipeline's checkpoints (its newest 1,000)."""
    return list(
        stub.ListCheckpoints(
            coordinator_pb2.ListCheckpointsRequest(pipeline_name=name, page_size=1000),
            timeout=30,
        ).checkpoints
    )


def print_checkpoint_sizes(
    stub: coordinator_pb2_grpc.CoordinatorServiceStub,
    name: str,
    history: Sequence[common_pb2.Checkpoint],
    delivery: str,
) -> None:
    """Each committed checkpoint's records (the sum of its tasks' source ranges) and its
    longest range of one partition, in order: how the executor sized them (issue 13)."""
    sizes = []
    for summary in sorted(history, key=lambda c: c.checkpoint_id):
        if summary.state != common_pb2.CHECKPOINT_STATE_COMMITTED:
            continue
        checkpoint = stub.GetCheckpoint(
            coordinator_pb2.GetCheckpointRequest(
                pipeline_name=name, checkpoint_id=summary.checkpoint_id
            ),
            timeout=30,
        ).checkpoint
        ranges = [r for t in checkpoint.tasks for r in t.source_ranges]
        records = sum(r.end_offset - r.start_offset for r in ranges)
        longest = max((r.end_offset - r.start_offset for r in ranges), default=0)
        sizes.append(f"{records:,} ({longest:,})")
    print(f"    {delivery}: records a checkpoint (longest range of one partition): {sizes}")


def print_checkpoints(
    history: Sequence[common_pb2.Checkpoint],
    delivery: str,
    *,
    began: tuple[float, float, float] | None = None,
) -> None:
    """Where a Lockgate run's time went: its checkpoints, pre-commit and commit times; with
    ``began`` (wall clock: the run's start, CreatePipeline's return, the moment the run saw
    the input committed), the time before the first trigger, the gaps between a checkpoint's
    COMPLETE and the next trigger, and after the last commit."""
    committed = [c for c in history if c.state == common_pb2.CHECKPOINT_STATE_COMMITTED]
    if not committed:
        return
    precommit = sorted(c.precommit_duration_ms for c in committed)
    commit = sorted(c.commit_duration_ms for c in committed)
    print(
        f"    {delivery}: {len(committed)} checkpoints committed of {len(history)}; "
        f"pre-commit ms p50 {precommit[len(precommit) // 2]} max {precommit[-1]}"
        f" (sum {sum(precommit)}); commit ms p50 {commit[len(commit) // 2]} max {commit[-1]}"
        f" (sum {sum(commit)})"
    )
    if began is not None:
        ordered = sorted(committed, key=lambda c: c.checkpoint_id)
        first = ordered[0].trigger_time.ToMilliseconds() / 1000
        last = ordered[-1].commit_time.ToMilliseconds() / 1000
        gaps = [
            later.trigger_time.ToMilliseconds() - earlier.complete_time.ToMilliseconds()
            for earlier, later in itertools.pairwise(ordered)
        ]
        print(
            f"    {delivery}: {first - began[0]:.2f}s from pipeline create to the first trigger"
            f" (CreatePipeline returned after {began[1] - began[0]:.2f}s); COMPLETE to the next"
            f" trigger ms {sorted(gaps)}; the last commit {began[2] - last:.2f}s before the run"
            " saw it"
        )


@dataclass(frozen=True)
class Services:
    """One coordinator and one executor of a run, and the executor's /metrics if on."""

    coordinator: str
    coordinator_pid: int
    executor: RunningProcess
    executor_metrics: str | None
    security: ClientSecurity | None = None
    """How to call the coordinator (the admin over TLS; None: plaintext)."""


def start_services(
    start: Callable[[ProcessSpec, Path], RunningProcess],
    home: Path,
    *,
    spark_master: str,
    metrics: bool,
    secure: bool = True,
    spark_conf: Mapping[str, str] | None = None,
) -> Services:
    """c1 then e1 (its Spark warm-up included), under ``home``; ``metrics``: both serve
    ``--metrics-listen`` on free ports; ``secure``: TLS and tokens, as the local cluster (a
    throwaway CA in ``home``)."""
    home.mkdir(parents=True, exist_ok=True)
    pki = ensure_local_pki(home, ["e1"]) if secure else None
    coordinator_port, executor_port = free_port(), free_port()
    executor_metrics = free_port() if metrics else None
    coordinator = f"127.0.0.1:{coordinator_port}"
    coordinator_process = start(
        coordinator_spec(
            coordinator_id="c1",
            port=coordinator_port,
            db_url=f"sqlite:///{home / 'c.db'}",
            metrics_port=free_port() if metrics else None,
            pki=pki,
        ),
        home,
    )
    t0 = time.monotonic()
    executor = start(
        executor_spec(
            executor_id="e1",
            port=executor_port,
            coordinators=[coordinator],
            spark_master=spark_master,
            spark_conf=dict(spark_conf or {}),
            metrics_port=executor_metrics,
            pki=pki,
        ),
        home,
    )
    print(
        f"executor ready (Spark {spark_master}, warm-up included, metrics "
        f"{'on' if metrics else 'off'}) in {time.monotonic() - t0:.1f}s"
    )
    return Services(
        coordinator,
        coordinator_process.pid,
        executor,
        None if executor_metrics is None else f"127.0.0.1:{executor_metrics}",
        None if pki is None else pki.as_admin(),
    )


def records_written_counter(metrics_address: str) -> float:
    """The executor's lockgate_task_records_written_total, summed, from its /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://{metrics_address}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "lockgate_task_records_written_total"
    )


def latency_section(
    services: Services,
    *,
    bootstrap: str,
    rate: float,
    seconds: float,
    args: argparse.Namespace,
    watched: dict[str, int],
) -> LatencyRun:
    """An exactly_once pipeline on fresh topics; once it has committed a checkpoint, records
    produced at ``rate`` for ``seconds``, each timed from produce to ``read_committed``;
    ``watched``: the process trees whose CPU the run measures, the executor's and the
    coordinator's added."""
    source, sink = (f"bench-latency-{side}-{uuid.uuid4().hex[:6]}" for side in ("in", "out"))
    for topic in (source, sink):
        create_topic(bootstrap, topic, partitions=args.partitions)
    with open_channel([services.coordinator], security=services.security) as channel:
        stub = coordinator_pb2_grpc.CoordinatorServiceStub(channel)
        name = create_pipeline(
            stub,
            bootstrap=bootstrap,
            source=source,
            sink=sink,
            delivery="exactly_once",
            tasks_max=args.tasks_max,
            transform_sql=args.transform_sql,
            max_records_per_partition=args.max_records_per_partition,
        )

        def committed_one() -> bool:
            try:
                status = stub.GetPipelineStatus(
                    coordinator_pb2.GetPipelineStatusRequest(name=name), timeout=5
                )
            except grpc.RpcError:
                return False
            return int(status.last_committed_checkpoint_id) >= 1

        try:
            wait_until(committed_one, timeout_s=60, description=f"{name}'s first commit")
        except TimeoutError:
            print(f"    latency: {name} committed no checkpoint on empty input in 60 s; going on")
        measured = run_latency(
            LatencySetup(
                bootstrap=bootstrap,
                source=source,
                sink=sink,
                partitions=args.partitions,
                value_bytes=args.value_bytes,
                rate=rate,
                seconds=seconds,
                warmup_s=args.latency_warmup_seconds,
                watched={
                    **watched,
                    "executor (Spark JVM, Python workers)": services.executor.pid,
                    "coordinator": services.coordinator_pid,
                },
            )
        )
        stub.StopPipeline(coordinator_pb2.StopPipelineRequest(name=name), timeout=30)
        print_checkpoints(checkpoint_history(stub, name), "latency run, exactly_once")
    return measured


def latency_runs(
    services: Services,
    contenders: ContenderSetup,
    *,
    args: argparse.Namespace,
    rate: float,
    broker_pid: int,
) -> dict[str, LatencyRun]:
    """Lockgate's latency run and, unless ``--no-streams``, (e) Kafka Streams' at the same
    rate on the same machine, each with the cores of the broker and of what copies; none
    (and why, printed) when the load generator cannot be built."""
    try:
        go_binary(LATENCYGEN_DIR)
    except GoBuildError as unbuilt:
        print(f"    latency run skipped: {unbuilt}")
        return {}
    watched = {"broker": broker_pid}
    runs = {
        "(a) lockgate exactly_once": latency_section(
            services,
            bootstrap=contenders.bootstrap,
            rate=rate,
            seconds=args.latency_seconds,
            args=args,
            watched=watched,
        )
    }
    if args.streams:
        try:
            streams = streams_latency(
                contenders,
                rate=rate,
                seconds=args.latency_seconds,
                warmup_s=args.latency_warmup_seconds,
                value_bytes=args.value_bytes,
                watched=watched,
            )
        except ContenderMissingError as missing:
            print(f"    latency, (e): skipped, {missing}")
            streams = None
        if streams is not None:
            runs["(e) Kafka Streams exactly_once_v2"] = streams
    return runs


def main(argv: Sequence[str] | None = None) -> int:
    """Run the contenders and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument(
        "--tasks-max",
        type=int,
        default=1,
        help="tasks_max of Lockgate's pipelines (default 1, the pipeline's own default: one"
        " task, whose batches Spark spreads over its slots)",
    )
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--spark-master", default="local[2]")
    parser.add_argument(
        "--warmup-records",
        type=int,
        default=None,
        help="records copied (exactly_once, untimed) before the timed runs, so that neither"
        " pays the executor's first big batches (JIT, Python workers); default: as many as"
        " --records (with 200,000 of 1,000,000, whichever of (a) and (b) ran first was a"
        " fifth slower: README, issue 13); 0: none",
    )
    parser.add_argument(
        "--order",
        choices=("ab", "ba"),
        default="ab",
        help="which Lockgate run goes first in the first round (later rounds alternate)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="how many times (a), (b) and (c) run, in turn; the table shows each one's median"
        " round and every round is printed (one round's figures on two shared cores move by"
        " a fifth: README, issue 13)",
    )
    parser.add_argument(
        "--no-metrics-overhead",
        dest="metrics_overhead",
        action="store_false",
        help="skip (m), exactly_once with metrics on",
    )
    parser.add_argument("--no-streams", dest="streams", action="store_false", help="skip (e)")
    parser.add_argument("--no-flink", dest="flink", action="store_false", help="skip (f)")
    parser.add_argument(
        "--no-latency",
        dest="latency",
        action="store_false",
        help="skip the latency run (exactly_once at half of (a)'s records/s)",
    )
    parser.add_argument(
        "--latency-seconds",
        type=float,
        default=30.0,
        help="how long the latency run produces at its fixed rate, its records measured",
    )
    parser.add_argument(
        "--latency-warmup-seconds",
        type=float,
        default=10.0,
        help="how long the latency run produces at the same rate before that, its records not"
        " counted (their p99 is printed beside): the broker's first seconds under a new load"
        " are slower (README, issue 13)",
    )
    parser.add_argument(
        "--latency-rate",
        type=float,
        default=0.0,
        help="records/s of the latency run (default 0: half of (a)'s), e.g. to compare two"
        " versions of the code at the same load",
    )
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting for the executor (its --spark-conf; repeatable), e.g. to try"
        " spark.driver.memory=768m",
    )
    parser.add_argument(
        "--transform-sql",
        metavar="SQL",
        default="SELECT key, value, headers FROM input",
        help="the Lockgate pipelines' transform.sql (default: %(default)r, as examples/copy.yaml,"
        " which only selects columns and so runs chained: README, Executor); '' for none, a"
        " plain copy; a query Spark must run, e.g. with a WHERE, takes the data sources' path",
    )
    parser.add_argument(
        "--max-records-per-partition",
        type=int,
        default=0,
        metavar="N",
        help="the Lockgate pipelines' source.kafka.max_records_per_partition (default 0: the"
        " spec's default, 50,000): the most records one checkpoint reads from a partition, so"
        " the number of checkpoints a run takes",
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="plaintext, no authentication (default: TLS + tokens)",
    )
    args = parser.parse_args(argv)
    if args.max_records_per_partition < 0:
        parser.error("--max-records-per-partition must be >= 0 (0: the spec's default)")
    if min(args.records, args.partitions, args.tasks_max) < 1 or args.value_bytes < 10:
        parser.error("--records, --partitions and --tasks-max must be >= 1, --value-bytes >= 10")
    if args.warmup_records is None:
        args.warmup_records = args.records
    elif args.warmup_records < 0:
        parser.error("--warmup-records must be >= 0 (0: no warm-up)")
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    if args.latency_rate < 0:
        parser.error("--latency-rate must be >= 0 (0: half of (a)'s records/s)")

    if any("=" not in item for item in args.spark_conf):
        parser.error("--spark-conf takes KEY=VALUE, e.g. spark.driver.memory=768m")
    spark_conf = dict(item.split("=", 1) for item in args.spark_conf)

    with tempfile.TemporaryDirectory(prefix="lockgate-bench-") as tmp:
        home = Path(tmp)
        started: list[tuple[Path, RunningProcess]] = []

        def start(spec: ProcessSpec, where: Path) -> RunningProcess:
            process = start_process(spec, home=where)
            started.append((where, process))
            return process

        try:
            config = KafkaBrokerConfig(
                home=home / "kafka", port=free_port(), controller_port=free_port()
            )
            broker = start(broker_spec(config), config.home)
            bootstrap = config.bootstrap_servers
            services = start_services(
                start,
                home / "off",
                spark_master=args.spark_master,
                spark_conf=spark_conf,
                metrics=False,
                secure=not args.insecure,
            )

            def new_topic(prefix: str, records: int = 0) -> str:
                """A fresh topic, filled with ``records`` input records."""
                topic = f"{prefix}-{uuid.uuid4().hex[:6]}"
                create_topic(bootstrap, topic, partitions=args.partitions)
                if records:
                    produce_input(
                        bootstrap,
                        topic,
                        records=records,
                        partitions=args.partitions,
                        size=args.value_bytes,
                    )
                return topic

            t0 = time.monotonic()
            source = new_topic("bench-in", args.records)
            print(
                f"input: {args.records:,} records x {args.value_bytes} B in "
                f"{time.monotonic() - t0:.1f}s"
            )

            figures: dict[str, Figure] = {}
            warmup_in = new_topic("bench-warmup-in", args.warmup_records)

            def lockgate_copy(
                stub: coordinator_pb2_grpc.CoordinatorServiceStub,
                services: Services,
                source: str,
                sink: str,
                records: int,
                delivery: str,
            ) -> tuple[float, float]:
                return run_pipeline(
                    stub,
                    bootstrap=bootstrap,
                    source=source,
                    sink=sink,
                    records=records,
                    delivery=delivery,
                    tasks_max=args.tasks_max,
                    executor_pid=services.executor.pid,
                    transform_sql=args.transform_sql,
                    max_records_per_partition=args.max_records_per_partition,
                )

            def lockgate_run(
                stub: coordinator_pb2_grpc.CoordinatorServiceStub,
                services: Services,
                key: str,
                delivery: str,
                label: str,
            ) -> Figure:
                """One timed copy of the input by ``services``, checked: ``key``'s figure."""
                sink = new_topic(f"bench-out-{key}")
                seconds, rss = lockgate_copy(stub, services, source, sink, args.records, delivery)
                out = len(read_visible(bootstrap, sink, timeout_s=300))
                assert out >= args.records, f"{delivery}: only {out} records visible"
                return Figure(
                    f"({key}) lockgate {delivery}{label}",
                    args.records,
                    seconds,
                    args.value_bytes,
                    rss,
                )

            @contextlib.contextmanager
            def warmed(services: Services) -> Iterator[coordinator_pb2_grpc.CoordinatorServiceStub]:
                """A stub on one channel to ``services``' coordinator, after an untimed
                exactly_once copy, so that no timed run pays the executor's first big batches
                (JIT, Python workers), nor the channel's first call."""
                with open_channel([services.coordinator], security=services.security) as channel:
                    stub = coordinator_pb2_grpc.CoordinatorServiceStub(channel)
                    if args.warmup_records > 0:
                        seconds, _ = lockgate_copy(
                            stub,
                            services,
                            warmup_in,
                            new_topic("bench-warmup-out"),
                            args.warmup_records,
                            "exactly_once",
                        )
                        print(
                            f"warm-up: {args.warmup_records:,} records in {seconds:.1f}s (untimed)"
                        )
                    yield stub

            def plain_loop(key: str, name: str, prefetch: Mapping[str, int]) -> Figure:
                sink = new_topic(f"bench-out-{key}")
                seconds = run_plain_loop(
                    bootstrap, source, sink, records=args.records, prefetch=prefetch
                )
                check_output(bootstrap, sink, args.records, name)
                return Figure(name, args.records, seconds, args.value_bytes)

            # (a), (b) and (c) in turn, round after round: a slower minute of the machine
            # then lands on all three, and the ratios are read round by round.
            deliveries = {"a": "exactly_once", "b": "at_least_once"}
            rounds: dict[str, list[Figure]] = {"a": [], "b": [], "c": []}
            with warmed(services) as stub:
                for n in range(args.rounds):
                    order = args.order if n % 2 == 0 else args.order[::-1]
                    for key in order:
                        figure = lockgate_run(stub, services, key, deliveries[key], "")
                        rounds[key].append(figure)
                    rounds["c"].append(plain_loop("c", "(c) confluent-kafka loop", PREFETCH))
            figures.update({key: median_round(runs) for key, runs in rounds.items()})
            contenders = ContenderSetup(
                bootstrap=bootstrap,
                source=source,
                sink="bench-out",
                records=args.records,
                partitions=args.partitions,
                cores=spark_cores(args.spark_master),
                checkpoint_interval_ms=CHECKPOINT_INTERVAL_MS,
                home=home,
            )
            latencies: dict[str, LatencyRun] = {}
            if args.latency:
                latencies = latency_runs(
                    services,
                    contenders,
                    args=args,
                    rate=args.latency_rate or figures["a"].records_per_s / 2,
                    broker_pid=broker.pid,
                )
            if args.metrics_overhead:
                # Metrics are per process: the same services again, with /metrics served.
                stop_process(home=home / "off", name=services.executor.name)
                stop_process(home=home / "off", name="coordinator-c1")
                services = start_services(
                    start,
                    home / "on",
                    spark_master=args.spark_master,
                    spark_conf=spark_conf,
                    metrics=True,
                    secure=not args.insecure,
                )
                with warmed(services) as stub:
                    figures["m"] = lockgate_run(stub, services, "m", "exactly_once", ", metrics on")
                assert services.executor_metrics is not None
                counted = records_written_counter(services.executor_metrics)
                # The warm-up's records are counted too.
                assert counted >= args.records, f"metrics on, but only {counted} records counted"
                print(f"    metrics on: the executor counted {counted:,.0f} records written")
            figures["c0"] = plain_loop("c0", "(c0) the same, librdkafka's prefetch", {})
            sink = new_topic("bench-out-d")
            figures["d"] = Figure(
                "(d) TransactionalMessageCopier",
                args.records,
                run_copiers(bootstrap, source, sink, partitions=args.partitions, home=home),
                args.value_bytes,
            )
            check_output(bootstrap, sink, args.records, figures["d"].name)
            figures.update(
                jvm_contenders(
                    contenders, value_bytes=args.value_bytes, streams=args.streams, flink=args.flink
                )
            )
        finally:
            for where, process in reversed(started):
                stop_process(home=where, name=process.name)

    print_figures(figures)
    print_rounds(rounds)
    for label, run in latencies.items():
        print_latency(run, label=label, checkpoint_interval_ms=CHECKPOINT_INTERVAL_MS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
