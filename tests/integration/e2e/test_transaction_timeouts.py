"""A COMPLETE checkpoint against the broker's transaction timeout (issue 14, holes 2 and 3),
with real processes: a broker whose `transaction.max.timeout.ms` is short and which looks for
timed-out transactions every second, a coordinator held between COMPLETE and its commit
(`after_complete_before_commit:hold`), and a Spark executor.

- Held past the sink's `transaction.timeout.ms`, the broker aborts the checkpoint's
  transactions: the pipeline goes FAILED with the checkpoint and its lost ranges, and
  `pipeline restart --from-checkpoint N` reads them again: output = input, exactly once.
- Held past half of it, status warns, and the commit still lands once released.
- With its only executor SIGKILLed after COMPLETE, the leader commits the checkpoint itself.

The coordinator's recovery time here is 2 s session + 0 s reassignment + 1 s lease + 7 s
commit retry = 10 s, so `checkpoint.timeout_ms` 8000 needs a transaction timeout above 18 s:
the sink's is 20 s.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockgate.localcluster.kafka import create_topic
from lockgate.localcluster.process import stop_process
from lockgate.v1 import common_pb2, coordinator_pb2
from tests.fixtures.kafka import KafkaBroker, start_test_broker
from tests.integration.e2e.harness import (
    ServiceCluster,
    check_output,
    end_offsets,
    held,
    ongoing_transactions,
    pipeline_yaml,
    produce_keyed,
    read_output,
    release,
    unique,
)
from tests.support.waits import wait_for

pytestmark = [pytest.mark.spark]

HOLD = "after_complete_before_commit"
TRANSACTION_TIMEOUT_MS = 20_000
COORDINATOR_ARGS = (
    "--session-timeout-ms",
    "2000",
    "--reassign-delay-ms",
    "0",
    "--heartbeat-interval-ms",
    "500",
)


@pytest.fixture(scope="module")
def short_timeout_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A broker that caps transactions at 30 s and aborts timed-out ones within a second."""
    broker = start_test_broker(
        tmp_path_factory.mktemp("kafka-short-txn"),
        overrides={
            "transaction.max.timeout.ms": "30000",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
        },
    )
    try:
        yield broker
    finally:
        stop_process(home=broker.home, name=broker.process.name)


class HeldPipeline:
    """One executor copying a two-partition topic, its leader held at the first COMPLETE."""

    def __init__(self, broker: KafkaBroker, tmp_path: Path) -> None:
        self.bootstrap = broker.bootstrap_servers
        self.cluster = ServiceCluster(
            home=tmp_path / "services",
            bootstrap_servers=self.bootstrap,
            lease_ms=1000,
            coordinator_args=COORDINATOR_ARGS,
        )
        self.holds = tmp_path / "holds"
        self.holds.mkdir()
        self.name = unique("txn")
        self.source, self.sink = unique("txn_in"), unique("txn_out")
        self.written: list[tuple[bytes, bytes, int]] = []
        self.spec = tmp_path / "pipeline.yaml"

    def start(self) -> int:
        """Start everything; return the checkpoint the leader holds COMPLETE, uncommitted."""
        cluster = self.cluster
        cluster.start_coordinator("c1", failpoints=f"{HOLD}:hold", hold_dir=self.holds)
        wait_for("a leader", lambda: bool(cluster.leader_id()), timeout_s=30)
        create_topic(self.bootstrap, self.source, partitions=2)
        create_topic(self.bootstrap, self.sink)
        self.written = produce_keyed(self.bootstrap, self.source, records=400, partitions=2)
        cluster.start_executor("e1")
        self.spec.write_text(
            pipeline_yaml(
                name=self.name,
                bootstrap_servers=self.bootstrap,
                source_topic=self.source,
                sink_topic=self.sink,
                interval_ms=500,
                timeout_ms=8000,
                tasks_max=1,
                extra_sink={"transaction_timeout_ms": TRANSACTION_TIMEOUT_MS},
            )
        )
        cluster.cli("pipeline", "create", "-f", str(self.spec))
        detail = wait_for(
            "the leader to hold a COMPLETE checkpoint before its commit",
            lambda: held(self.holds, HOLD),
            timeout_s=180,
            explain=cluster.logs_tail,
        )
        match = re.search(r"checkpoint (\d+)", detail)
        assert match, detail
        return int(match.group(1))

    def open_transactions(self) -> list[str]:
        """The pipeline's transactional ids with a transaction Ongoing on the broker."""
        return ongoing_transactions(self.bootstrap, f"lockgate-{self.name}-")

    def status(self) -> coordinator_pb2.GetPipelineStatusResponse:
        return self.cluster.pipeline_status(self.name)

    def copied_exactly_once(self) -> None:
        """Wait until every record is committed downstream; check there are no duplicates."""
        ends = end_offsets(self.bootstrap, self.source, [0, 1])

        wait_for(
            "every record committed",
            lambda: self.cluster.committed_through(
                self.name,
                {(self.source, p): end for p, end in ends.items()},
                nothing_in_flight=True,
            ),
            timeout_s=120,
            explain=self.cluster.logs_tail,
        )
        result = check_output(self.written, read_output(self.bootstrap, self.sink))
        assert (result.duplicates, result.missing) == (0, 0), result


@pytest.fixture
def held_pipeline(short_timeout_broker: KafkaBroker, tmp_path: Path) -> Iterator[HeldPipeline]:
    pipeline = HeldPipeline(short_timeout_broker, tmp_path)
    try:
        yield pipeline
    finally:
        release(pipeline.holds, HOLD)
        pipeline.cluster.stop_all()


def test_a_complete_checkpoint_the_broker_aborted_fails_the_pipeline_until_restarted_from_it(
    held_pipeline: HeldPipeline,
) -> None:
    p = held_pipeline
    lost = p.start()
    assert p.open_transactions(), "the COMPLETE checkpoint's transactions should be open"
    wait_for(
        "the broker to abort the held checkpoint's transactions (transaction.timeout.ms)",
        lambda: not p.open_transactions(),
        timeout_s=60,
    )
    release(p.holds, HOLD)

    status = wait_for(
        "the pipeline to show FAILED",
        lambda: (s := p.status()).health == coordinator_pb2.PIPELINE_HEALTH_FAILED and s,
        timeout_s=60,
        explain=p.cluster.logs_tail,
    )
    data_lost = status.data_lost_checkpoint
    assert data_lost.checkpoint_id == lost
    assert data_lost.state == common_pb2.CHECKPOINT_STATE_DATA_LOST
    assert "PRODUCER_FENCED" in data_lost.data_loss_error or "INVALID" in data_lost.data_loss_error
    ends = end_offsets(p.bootstrap, p.source, [0, 1])
    assert sorted(
        (r.topic, r.partition, r.start_offset, r.end_offset) for r in data_lost.lost_ranges
    ) == [(p.source, part, 0, end) for part, end in sorted(ends.items())]
    assert not status.in_flight_checkpoint_ids, "the trigger loop stops for a FAILED pipeline"
    assert read_output(p.bootstrap, p.sink) == [], "the lost records never became visible"
    text = p.cluster.cli("pipeline", "status", p.name).stdout
    assert f"FAILED: checkpoint {lost} lost its data" in text
    assert f"--from-checkpoint {lost}" in text
    assert f"{p.source}[0] 0..{ends[0]}" in text

    wrong = p.cluster.cli("pipeline", "restart", p.name, "--from-checkpoint", "999", check=False)
    assert wrong.returncode == 1 and f"--from-checkpoint {lost}" in wrong.stdout + wrong.stderr
    p.cluster.cli("pipeline", "restart", p.name, "--from-checkpoint", str(lost))
    p.copied_exactly_once()
    assert p.status().health == coordinator_pb2.PIPELINE_HEALTH_OK


def test_a_complete_checkpoint_uncommitted_past_half_the_timeout_warns_in_status(
    held_pipeline: HeldPipeline,
) -> None:
    p = held_pipeline
    checkpoint = p.start()
    warnings = wait_for(
        "a warning about the uncommitted checkpoint",
        lambda: list(p.status().warnings),
        timeout_s=TRANSACTION_TIMEOUT_MS / 1000,
        explain=p.cluster.logs_tail,
    )
    assert f"checkpoint {checkpoint} is COMPLETE but not committed" in warnings[0]
    assert f"sink.kafka.transaction_timeout_ms ({TRANSACTION_TIMEOUT_MS} ms)" in warnings[0]
    text = p.cluster.cli("pipeline", "status", p.name).stdout
    assert f"warning: checkpoint {checkpoint} is COMPLETE" in text
    release(p.holds, HOLD)
    p.copied_exactly_once()
    assert list(p.status().warnings) == []


def test_with_every_executor_dead_the_leader_commits_a_complete_checkpoint_itself(
    held_pipeline: HeldPipeline,
) -> None:
    p = held_pipeline
    checkpoint = p.start()
    p.cluster.kill("executor-e1")

    def no_executor_alive() -> bool:
        executors = p.cluster.cluster_info().executors
        return all(e.state != common_pb2.EXECUTOR_STATE_ALIVE for e in executors)

    wait_for("the executor's session to expire", no_executor_alive, timeout_s=30)
    release(p.holds, HOLD)
    wait_for(
        "the leader to commit the checkpoint",
        # Later checkpoints may complete while the commit is held (only the pipeline's
        # commit job waits), and the leader commits them in order after it.
        lambda: p.status().last_committed_checkpoint_id >= checkpoint,
        timeout_s=30,
        explain=p.cluster.logs_tail,
    )
    assert "no executor is alive: the leader commits" in p.cluster.log("coordinator-c1")
    result = check_output(p.written, read_output(p.bootstrap, p.sink))
    assert (result.duplicates, result.missing) == (0, 0), result
