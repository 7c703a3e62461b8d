"""Exactly once with the executors on a Spark standalone cluster (issue 10).

A real master and two workers of one core each (``lockgate.localcluster.spark``, the
``standalone_spark`` fixture) whose Python workers run an interpreter that does not see
Lockgate's source (``isolated_python``): the Kafka source and the two-phase-commit sink run
there only from the code the executors ship. One coordinator; executors e1 and e2 on
``spark://``, one core of the cluster each, so each one's batches run on one worker.

e1's first write partition holds just before ``init_transactions()``; the Spark worker running
it is then SIGKILLed with everything below it (its executor JVM and Python workers, as when the
machine dies) and started again, so Spark reruns the write there (or the checkpoint times out
and a later one redoes it). e2 dies, as if SIGKILLed, after its second pre-commit, with its
transactions open and unreported. A ``read_committed`` consumer must then find the output
equal to the input, each key's records in order, and no log may report a lost transaction.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import pytest

from lockgate.localcluster.kafka import create_topic
from lockgate.localcluster.process import is_alive, read_pid_file, start_process
from lockgate.localcluster.spark import EXECUTOR_SPARK_CONF, StandaloneSpark
from tests.fixtures.kafka import KafkaBroker
from tests.integration.e2e.harness import (
    SHORT_SESSION_ARGS,
    ServiceCluster,
    check_output,
    end_offsets,
    held,
    pipeline_yaml,
    produce_keyed,
    read_output,
    release,
    unique,
)
from tests.support.processes import descendants
from tests.support.waits import wait_for

RECORDS = 4_000
PARTITIONS = 2
BEFORE_INIT = "before_init_transactions"
#: Under a loaded two-core machine an executor's session on a cluster takes minutes.
EXECUTOR_READY_S = 420.0


def _worker_running(spark: StandaloneSpark, pid: int) -> tuple[str, list[int]]:
    """The worker whose process tree holds ``pid``, and that tree (worker first)."""
    for number in range(1, spark.workers + 1):
        name = f"spark-worker-{number}"
        record = read_pid_file(spark.home, name)
        if record is not None and is_alive(record):
            tree = [record.pid, *descendants(record.pid)]
            if pid in tree:
                return name, tree
    raise AssertionError(f"no Spark worker runs process {pid}")


def _kill_machine(tree: list[int]) -> None:
    """SIGKILL a worker and everything it started, as a machine that dies."""
    for pid in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# Two executors start a Spark application each on the cluster (2-4 min on a loaded machine).
@pytest.mark.timeout(1200)
def test_exactly_once_on_a_standalone_cluster_when_a_worker_and_an_executor_die(
    kafka_broker: KafkaBroker,
    standalone_spark: StandaloneSpark,
    isolated_python: Path,
    tmp_path: Path,
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    source, sink = unique("spark_in"), unique("spark_out")
    create_topic(bootstrap, source, partitions=PARTITIONS)
    create_topic(bootstrap, sink, partitions=PARTITIONS)
    written = produce_keyed(bootstrap, source, records=RECORDS, partitions=PARTITIONS)
    holds = tmp_path / "holds"
    holds.mkdir()
    cluster = ServiceCluster(
        home=tmp_path / "services",
        bootstrap_servers=bootstrap,
        lease_ms=3000,
        coordinator_args=SHORT_SESSION_ARGS,
    )
    on_cluster = {
        "spark_master": standalone_spark.master_url,
        "spark_conf": {**EXECUTOR_SPARK_CONF, "spark.pyspark.python": str(isolated_python)},
        "ready_timeout_s": EXECUTOR_READY_S,
    }
    try:
        cluster.start_coordinator("c1")
        wait_for("a leader", cluster.leader_id, timeout_s=30, explain=cluster.logs_tail)
        cluster.start_executor("e1", failpoints=f"{BEFORE_INIT}:hold", hold_dir=holds, **on_cluster)
        cluster.start_executor("e2", failpoints="after_precommit_before_report@2", **on_cluster)
        pipeline = unique("spark")
        spec = tmp_path / "pipeline.yaml"
        spec.write_text(
            pipeline_yaml(
                name=pipeline,
                bootstrap_servers=bootstrap,
                source_topic=source,
                sink_topic=sink,
                interval_ms=500,
                timeout_ms=30_000,
                # Several checkpoints per partition, so e2 reaches its second pre-commit.
                extra_source={"max_records_per_partition": 500},
            )
        )
        cluster.cli("pipeline", "create", "-f", str(spec))

        detail = wait_for(
            "e1's write partition to hold before init_transactions()",
            lambda: held(holds, BEFORE_INIT),
            timeout_s=300,
            explain=cluster.logs_tail,
        )
        holder = int(detail.rsplit("pid ", 1)[1])
        worker, tree = _worker_running(standalone_spark, holder)
        _kill_machine(tree)
        wait_for(f"{worker}'s processes to die", lambda: not any(map(_alive, tree)), timeout_s=30)
        release(holds, BEFORE_INIT)
        number = int(worker.rsplit("-", 1)[1])
        start_process(standalone_spark.worker_spec(number), home=standalone_spark.home)

        wait_for(
            "e2 to die at after_precommit_before_report",
            lambda: (
                "failpoint after_precommit_before_report hit" in cluster.log("executor-e2")
                and not cluster.is_running("executor-e2")
            ),
            timeout_s=300,
            explain=cluster.logs_tail,
        )
        ends = end_offsets(bootstrap, source, range(PARTITIONS))
        wait_for(
            f"{pipeline} to copy all input",
            lambda: all(
                cluster.offsets(pipeline).get((source, p), -1) >= end for p, end in ends.items()
            ),
            timeout_s=420,
            explain=cluster.logs_tail,
        )
        result = check_output(written, read_output(bootstrap, sink))
        print(f"\nstandalone exactly_once: {result}; {worker} killed mid-write")
        assert (result.records_out, result.duplicates, result.missing) == (RECORDS, 0, 0), result
        assert result.order_violations == 0, result
        assert cluster.data_loss_line() is None, cluster.data_loss_line()
    finally:
        cluster.stop_all()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for this test: it runs nothing any more.
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return False
