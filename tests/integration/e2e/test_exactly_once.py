"""Kafka's own exactly-once test method, on Lockgate: copy while processes die.

Three coordinator replicas and two executors run as separate processes. Input records
(small, keyed, with a per-key sequence number) are written to a 2-partition topic while a
pipeline copies them through a Spark SQL transform into another topic. Meanwhile the
executors die at every executor failpoint (after_precommit_before_report,
mid_commit_handles, after_commit_before_ack), three more times by SIGKILL at random
moments; the first leader dies at the coordinator failpoint after_complete_before_commit,
and a later leader is SIGKILLed while a commit is in flight (the moment an executor died
after committing and before acking). Afterwards a read_committed
consumer must find the output equal to the input as a multiset (no duplicate, none
missing), every key's records in order, and Kafka's TransactionsCommand must list no
hanging transaction.

The same cluster then runs an at_least_once pipeline while an executor and the leader are
SIGKILLed: nothing may be missing (duplicates are allowed).

Budget: an executor's SparkSession takes 20-80 s to start on two busy cores, so the
restarts are paired (one executor restarts while the other works) and each executor runs
``local[1]``.
"""

from __future__ import annotations

import collections
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from lockgate.localcluster.kafka import TRANSACTIONS_COMMAND, ConsumedRecord, create_topic
from lockgate.v1 import common_pb2, coordinator_pb2
from tests.fixtures.kafka import KafkaBroker
from tests.integration.e2e.harness import (
    SHORT_SESSION_ARGS,
    ServiceCluster,
    check_output,
    end_offsets,
    pipeline_yaml,
    produce_keyed,
    read_output,
    unique,
)
from tests.support.waits import wait_for

pytestmark = [pytest.mark.spark]

RECORDS = 50_000
PARTITIONS = 2
#: Records per second written while faults are injected (the rest follows at once).
TRICKLE_PER_SECOND = 100
EXECUTOR_START_TIMEOUT_S = 240.0
#: The coordinator-side failpoint, armed in c1 (the first leader).
LEADER_FAILPOINT = "after_complete_before_commit@3"


@pytest.fixture(scope="module")
def services(
    kafka_broker: KafkaBroker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServiceCluster]:
    """c1..c3 and (started by the tests) executors, stopped at the end of the module."""
    cluster = ServiceCluster(
        home=tmp_path_factory.mktemp("e2e-services"),
        bootstrap_servers=kafka_broker.bootstrap_servers,
        lease_ms=3000,
        coordinator_args=SHORT_SESSION_ARGS,
    )
    try:
        # c1 leads first and dies after its 3rd COMPLETE checkpoint, before any commit call.
        cluster.start_coordinator("c1", failpoints=LEADER_FAILPOINT)
        for coordinator_id in ("c2", "c3"):
            cluster.start_coordinator(coordinator_id)
        wait_for(
            "a leader", lambda: bool(cluster.leader_id()), timeout_s=30, explain=cluster.logs_tail
        )
        yield cluster
    finally:
        cluster.stop_all()


@dataclass
class Restarter:
    """Starts executors in background threads (their Spark warm-up is slow) and keeps errors."""

    cluster: ServiceCluster
    threads: list[threading.Thread] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)

    def start(self, executor_id: str, failpoints: str = "") -> None:
        hits_before = self.cluster.log(f"executor-{executor_id}").count("failpoint ")

        def run() -> None:
            try:
                self.cluster.start_executor(executor_id, failpoints=failpoints)
            except BaseException as exc:  # reported by join()
                # An armed failpoint may fire before the executor counts as ready (e.g.
                # while its restore re-commits a checkpoint): that death is the point.
                log = self.cluster.log(f"executor-{executor_id}")
                if not (failpoints and log.count("failpoint ") > hits_before):
                    self.errors.append(exc)

        thread = threading.Thread(target=run, name=f"start-{executor_id}", daemon=True)
        thread.start()
        self.threads.append(thread)

    def join(self, timeout_s: float = EXECUTOR_START_TIMEOUT_S + 30) -> None:
        deadline = time.monotonic() + timeout_s
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self.threads = [t for t in self.threads if t.is_alive()]
        assert not self.errors, f"an executor failed to start: {self.errors[0]}"
        assert not self.threads, "an executor did not start in time"


def _failpoint_hits(cluster: ServiceCluster, executor_id: str, failpoint: str) -> int:
    return cluster.log(f"executor-{executor_id}").count(f"failpoint {failpoint} hit")


def _last_committed(cluster: ServiceCluster, pipeline: str) -> int:
    try:
        return int(cluster.pipeline_status(pipeline).last_committed_checkpoint_id)
    except Exception:  # a leader change in progress: ask again later
        return -1


def _wait_failpoint(cluster: ServiceCluster, executor_id: str, failpoint: str, before: int) -> None:
    name = f"executor-{executor_id}"
    wait_for(
        f"{executor_id} to die at failpoint {failpoint}",
        lambda: (
            _failpoint_hits(cluster, executor_id, failpoint) > before
            and not cluster.is_running(name)
        ),
        timeout_s=240,
        explain=cluster.logs_tail,
    )


def _kill_at_random_moment(
    cluster: ServiceCluster, executor_id: str, rng: random.Random, pipeline: str
) -> float:
    """SIGKILL ``executor_id`` after a random delay, once the pipeline committed again."""
    start = _last_committed(cluster, pipeline)
    wait_for(
        f"progress of {pipeline} before killing {executor_id}",
        lambda: _last_committed(cluster, pipeline) > start,
        timeout_s=180,
        explain=cluster.logs_tail,
    )
    delay = rng.uniform(0.0, 3.0)
    time.sleep(delay)  # the random moment itself, not a synchronisation
    cluster.kill(f"executor-{executor_id}")
    return delay


class _Producer(threading.Thread):
    """Writes the input in the background: a trickle while the faults are injected (so
    every kill lands while records flow), then the rest at once."""

    def __init__(self, bootstrap_servers: str, topic: str) -> None:
        super().__init__(name="input-producer", daemon=True)
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.written: list[tuple[bytes, bytes, int]] = []
        self.error: BaseException | None = None
        self.faults_done = threading.Event()

    def _write(self, count: int) -> None:
        self.written.extend(
            produce_keyed(
                self.bootstrap_servers,
                self.topic,
                records=count,
                partitions=PARTITIONS,
                offset=len(self.written),
            )
        )

    def run(self) -> None:
        try:
            while len(self.written) < RECORDS and not self.faults_done.is_set():
                self._write(min(TRICKLE_PER_SECOND, RECORDS - len(self.written)))
                # The trickle's pace (a rate, not a synchronisation).
                self.faults_done.wait(1.0)
            if len(self.written) < RECORDS:
                self._write(RECORDS - len(self.written))
        except BaseException as exc:
            self.error = exc


def _wait_all_copied(
    cluster: ServiceCluster, pipeline: str, topic: str, bootstrap: str, *, timeout_s: float
) -> None:
    ends = end_offsets(bootstrap, topic, range(PARTITIONS))
    wanted = {(topic, p): end for p, end in ends.items()}

    def copied() -> bool:
        try:
            offsets = cluster.offsets(pipeline)
        except Exception:
            return False
        return all(offsets.get(tp, -1) >= end for tp, end in wanted.items())

    wait_for(
        f"{pipeline} to copy all input", copied, timeout_s=timeout_s, explain=cluster.logs_tail
    )


def _explain_difference(
    cluster: ServiceCluster,
    pipeline: str,
    written: list[tuple[bytes, bytes, int]],
    output: list[ConsumedRecord],
) -> str:
    """For a failure: the input offsets missing (or duplicated) from the output, as ranges,
    and every checkpoint whose source ranges touch them (state, tasks, executors, handles)."""
    # The input topic was new and written by one idempotent producer: a record's offset is
    # its index among the records of its partition.
    seen = collections.Counter((r.key or b"", r.value or b"") for r in output)
    next_offset: dict[int, int] = collections.defaultdict(int)
    wrong: dict[int, list[int]] = collections.defaultdict(list)
    for key, value, partition in written:
        offset = next_offset[partition]
        next_offset[partition] += 1
        if seen[(key, value)] != 1:
            wrong[partition].append(offset)
    lines: list[str] = []
    spans: list[tuple[int, int, int]] = []
    for partition, offsets in sorted(wrong.items()):
        start = previous = offsets[0]
        for offset in [*offsets[1:], -1]:
            if offset != previous + 1:
                spans.append((partition, start, previous + 1))
                start = offset
            previous = offset
    lines.append(
        "input offsets not seen exactly once: "
        + ", ".join(f"p{p}[{a},{b})" for p, a, b in spans[:20])
    )
    for summary in sorted(cluster.all_checkpoints(pipeline), key=lambda c: c.checkpoint_id):
        detail = cluster.call(
            lambda s, n=summary.checkpoint_id: s.GetCheckpoint(
                coordinator_pb2.GetCheckpointRequest(pipeline_name=pipeline, checkpoint_id=n),
                timeout=10,
            )
        ).checkpoint
        touched = [
            (task, r)
            for task in detail.tasks
            for r in task.source_ranges
            if any(
                p == r.partition and a < r.end_offset and r.start_offset < b for p, a, b in spans
            )
        ]
        for task, r in touched:
            lines.append(
                f"checkpoint {detail.checkpoint_id} "
                f"{common_pb2.CheckpointState.Name(detail.state)} ({detail.abort_reason}) task "
                f"{task.task_id.task_index} on {task.executor_id} gen {task.task_generation}: "
                f"p{r.partition}[{r.start_offset},{r.end_offset}) handles "
                + ", ".join(
                    f"{h.kafka.transactional_id}/{h.kafka.producer_id}/{h.kafka.producer_epoch}"
                    for h in task.sink_handles
                )
            )
    return "\n".join(lines)


def _no_hanging_transactions(broker: KafkaBroker, topic: str) -> str:
    """Kafka's own check: no transaction is still open on ``topic``.

    ``--max-transaction-timeout 0`` counts every open transaction (the default, 15 min,
    would let a transaction a dead writer left open pass for as long as this test runs).
    Other tests' topics on the shared broker are not this test's business.
    """
    hanging = broker.run_tool(
        TRANSACTIONS_COMMAND,
        "--bootstrap-server",
        broker.bootstrap_servers,
        "find-hanging",
        "--broker-id",
        "1",
        "--max-transaction-timeout",
        "0",
    )
    assert hanging.returncode == 0, hanging.stderr
    rows = [line for line in hanging.stdout.splitlines() if line.split("\t")[0] == topic]
    assert not rows, f"transactions still open on {topic}:\n{hanging.stdout}"
    return hanging.stdout


# 230-420 s alone or beside one other test file, 546 s once while benchmarks also ran: each
# executor start (e1 after each failpoint, e2 after each SIGKILL) pays for its first batch's
# Spark planner workers (the data sources' path, which its WHERE takes, is not warmed at
# start), so 600 s is too near.
@pytest.mark.timeout(1200)
def test_exactly_once_under_sigkill_of_executors_and_leader(
    kafka_broker: KafkaBroker, services: ServiceCluster, tmp_path: Path
) -> None:
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    bootstrap = kafka_broker.bootstrap_servers
    source, sink = unique("eos_in"), unique("eos_out")
    create_topic(bootstrap, source, partitions=PARTITIONS)
    create_topic(bootstrap, sink, partitions=PARTITIONS)
    began = time.monotonic()
    cluster = services
    restarter = Restarter(cluster)

    # e1 dies at its failpoints one after the other; e2 is SIGKILLed at random moments
    # while e1 restarts, so the two warm-ups overlap.
    restarter.start("e1", failpoints="after_precommit_before_report@2")
    restarter.start("e2")
    restarter.join()

    pipeline = unique("eos")
    spec = tmp_path / "eos.yaml"
    spec.write_text(
        pipeline_yaml(
            name=pipeline,
            bootstrap_servers=bootstrap,
            source_topic=source,
            sink_topic=sink,
            # A real transform (projection + filter + expression), which keeps every record.
            sql="SELECT key, value, headers FROM input WHERE length(value) > 0",
            interval_ms=500,
            timeout_ms=15000,
            tasks_max=2,
        )
    )
    cluster.cli("pipeline", "create", "-f", str(spec))
    producer = _Producer(bootstrap, source)
    producer.start()

    events: list[str] = []
    # The first leader dies between writing COMPLETE and calling any executor: the next
    # leader must commit that checkpoint (DESIGN.md step 5). c1 comes back as a follower.
    wait_for(
        "leader c1 to die at failpoint after_complete_before_commit",
        lambda: (
            "failpoint after_complete_before_commit hit" in cluster.log("coordinator-c1")
            and not cluster.is_running("coordinator-c1")
        ),
        timeout_s=120,
        explain=cluster.logs_tail,
    )
    events.append(
        f"leader c1 died at after_complete_before_commit ({time.monotonic() - began:.0f}s)"
    )
    cluster.start_coordinator("c1")
    rounds = [
        ("after_precommit_before_report", "mid_commit_handles@2"),
        ("mid_commit_handles", "after_commit_before_ack@2"),
        ("after_commit_before_ack", ""),
    ]
    for failpoint, next_failpoints in rounds:
        # Each failpoint is armed in one life of e1 only: its first hit is the one.
        _wait_failpoint(cluster, "e1", failpoint, 0)
        events.append(f"e1 died at failpoint {failpoint} ({time.monotonic() - began:.0f}s)")
        if failpoint == "after_commit_before_ack":
            # The leader called CommitCheckpoint and got no ack: the commit is in flight.
            leader = cluster.leader_id()
            assert leader, "no leader to kill"
            cluster.kill(f"coordinator-{leader}")
            events.append(f"leader {leader} SIGKILLed during the commit")
            restarter.start("e1", failpoints=next_failpoints)
            cluster.start_coordinator(leader)  # back as a follower
        else:
            restarter.start("e1", failpoints=next_failpoints)
        delay = _kill_at_random_moment(cluster, "e2", rng, pipeline)
        events.append(f"e2 SIGKILLed at a random moment (+{delay:.2f}s)")
        restarter.start("e2")
        restarter.join()

    producer.faults_done.set()
    producer.join(120)
    assert producer.error is None, f"input producer failed: {producer.error}"
    assert len(producer.written) == RECORDS
    _wait_all_copied(cluster, pipeline, source, bootstrap, timeout_s=180)

    output = read_output(bootstrap, sink)
    result = check_output(producer.written, output)
    hanging = _no_hanging_transactions(kafka_broker, sink)
    elapsed = time.monotonic() - began
    print(
        f"\nexactly_once (seed {seed}): {result}; {elapsed:.0f}s; events: {events}; "
        f"find-hanging: {hanging.strip()!r}"
    )
    assert (result.records_out, result.duplicates, result.missing) == (RECORDS, 0, 0), (
        f"{result}\n{_explain_difference(cluster, pipeline, producer.written, output)}"
    )
    assert result.order_violations == 0, result
    checkpoints = cluster.all_checkpoints(pipeline)
    states = {c.state for c in checkpoints}
    assert common_pb2.CHECKPOINT_STATE_ABORTED in states, "a failpoint must have aborted one"


def test_at_least_once_loses_nothing_when_an_executor_and_the_leader_die(
    kafka_broker: KafkaBroker, services: ServiceCluster, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    cluster = services
    restarter = Restarter(cluster)
    for executor_id in ("e1", "e2"):
        if not cluster.is_running(f"executor-{executor_id}"):
            restarter.start(executor_id)
    restarter.join()
    source, sink = unique("alo_in"), unique("alo_out")
    create_topic(bootstrap, source, partitions=PARTITIONS)
    create_topic(bootstrap, sink, partitions=PARTITIONS)
    written = produce_keyed(bootstrap, source, records=10_000, partitions=PARTITIONS)
    pipeline = unique("alo")
    spec = tmp_path / "alo.yaml"
    spec.write_text(
        pipeline_yaml(
            name=pipeline,
            bootstrap_servers=bootstrap,
            source_topic=source,
            sink_topic=sink,
            delivery="at_least_once",
            interval_ms=500,
        )
    )
    cluster.cli("pipeline", "create", "-f", str(spec))
    wait_for(
        "a task of the at_least_once pipeline running on e2",
        lambda: any(
            t.executor_id == "e2" and t.state == common_pb2.TASK_STATE_RUNNING
            for t in cluster.pipeline_status(pipeline).tasks
        ),
        timeout_s=60,
        explain=cluster.logs_tail,
    )
    cluster.kill("executor-e2")
    # And the leader, while e2's tasks move: the next leader finishes the move and the copy.
    leader = cluster.leader_id()
    assert leader, "no leader to kill"
    cluster.kill(f"coordinator-{leader}")
    cluster.start_coordinator(leader)
    _wait_all_copied(cluster, pipeline, source, bootstrap, timeout_s=120)
    result = check_output(written, read_output(bootstrap, sink))
    print(f"\nat_least_once: {result}")
    assert result.missing == 0, result
    assert result.records_out >= len(written)
