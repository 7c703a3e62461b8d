"""The Kafka broker SIGKILLed mid-pre-commit and mid-commit, and restarted (issue 14).

One coordinator and one Spark executor copy a 2-partition topic through a broker of the
test's own, which is SIGKILLed twice and restarted on the same data directory and ports
(its logs, transaction state and producer state recovered from disk, as after a crash):

- mid-pre-commit: executor e1 holds checkpoint 1 after its batch was produced and flushed,
  its transactions open, before ReportPrecommit (``after_precommit_before_report:hold``);
  the broker is killed and restarted, then e1 is released: the checkpoint becomes COMPLETE
  and its transactions, which the restarted broker recovered, are committed.
- mid-commit: the leader holds the next checkpoint at COMPLETE before any commit call
  (``after_complete_before_commit@2:hold``); the broker is killed and the leader released,
  so its commit calls run against the dead broker and fail (the leader retries); then the
  broker restarts and the commit lands.

More input then flows through the restarted broker. A read_committed consumer must find
the output equal to the input, every key's records in order, and Kafka must list no
transaction of the pipeline's transactional ids still Ongoing. Nothing is restarted by
hand but the broker: librdkafka reconnects, and the coordinator and the executor recover.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockgate.localcluster.process import stop_process
from lockgate.v1 import common_pb2, coordinator_pb2
from tests.fixtures.kafka import KafkaBroker, start_test_broker
from tests.integration.e2e.harness import (
    SHORT_SESSION_ARGS,
    CopyRun,
    ServiceCluster,
    held_checkpoint,
    release,
)
from tests.support.waits import wait_for

pytestmark = [pytest.mark.spark]

PARTITIONS = 2
#: Records written before each phase: before the first bounce, between the two, after.
BATCH = 1000
PRECOMMIT_HOLD = "after_precommit_before_report"
COMMIT_HOLD = "after_complete_before_commit"
#: What the leader logs when a commit call was not acked (it retries).
COMMIT_RETRY = "commit not acked yet, will retry"


class BouncedBroker:
    """The test's own broker, replaced by a new handle at each restart."""

    def __init__(self, home: Path) -> None:
        self.current: KafkaBroker = start_test_broker(home)

    @property
    def bootstrap_servers(self) -> str:
        return self.current.bootstrap_servers

    def kill(self) -> None:
        """SIGKILL the broker, as a crash."""
        self.current.kill()

    def restart(self) -> None:
        """Start it again on the same data directory and ports, and wait until it answers."""
        self.current = self.current.restart()

    def stop(self) -> None:
        stop_process(home=self.current.home, name=self.current.process.name)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BouncedBroker]:
    bounced = BouncedBroker(tmp_path / "kafka")
    try:
        yield bounced
    finally:
        bounced.stop()


def _checkpoint(
    cluster: ServiceCluster, pipeline: str, checkpoint_id: int
) -> common_pb2.Checkpoint:
    checkpoint: common_pb2.Checkpoint = cluster.call(
        lambda s: s.GetCheckpoint(
            coordinator_pb2.GetCheckpointRequest(
                pipeline_name=pipeline, checkpoint_id=checkpoint_id
            ),
            timeout=10,
        )
    ).checkpoint
    return checkpoint


def _committed(cluster: ServiceCluster, pipeline: str, checkpoint_id: int) -> bool:
    state = _checkpoint(cluster, pipeline, checkpoint_id).state
    return bool(state == common_pb2.CHECKPOINT_STATE_COMMITTED)


def test_exactly_once_when_the_broker_dies_mid_precommit_and_mid_commit(
    broker: BouncedBroker, tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    cluster = ServiceCluster(
        home=tmp_path / "services",
        bootstrap_servers=bootstrap,
        lease_ms=3000,
        coordinator_args=SHORT_SESSION_ARGS,
    )
    holds = tmp_path / "holds"
    holds.mkdir()
    began = time.monotonic()
    marks: list[str] = []

    def mark(what: str) -> None:
        marks.append(f"{what} +{time.monotonic() - began:.0f}s")

    try:
        # The leader holds its 2nd COMPLETE checkpoint: the first after the pre-commit one.
        cluster.start_coordinator("c1", failpoints=f"{COMMIT_HOLD}@2:hold", hold_dir=holds)
        wait_for("a leader", lambda: bool(cluster.leader_id()), timeout_s=30)
        run = CopyRun.begin(cluster, "bounce", records=BATCH, partitions=PARTITIONS)
        cluster.start_executor("e1", failpoints=f"{PRECOMMIT_HOLD}:hold", hold_dir=holds)
        # Above a broker restart on a loaded machine: the held checkpoints must not time out
        # while the broker is down.
        run.create(tmp_path, interval_ms=500, timeout_ms=120_000)
        pipeline = run.pipeline
        mark("pipeline created")

        # 1. Mid-pre-commit: checkpoint 1's transactions are open when the broker dies.
        precommitted = held_checkpoint(
            cluster.wait_held(
                holds,
                PRECOMMIT_HOLD,
                "e1 to hold checkpoint 1 after its pre-commit, before its report",
                timeout_s=240,
            )
        )
        assert run.ongoing_transactions(), "the held pre-commit should have its transactions open"
        mark("pre-commit held")
        broker.kill()
        broker.restart()
        mark("broker restarted")
        # Written before the release, so the next checkpoint's batch carries them.
        run.produce(BATCH)
        release(holds, PRECOMMIT_HOLD)
        wait_for(
            f"checkpoint {precommitted}, pre-committed before the bounce, to be committed",
            lambda: _committed(cluster, pipeline, precommitted),
            timeout_s=120,
            explain=cluster.logs_tail,
        )

        # 2. Mid-commit: the next checkpoint is COMPLETE; its commit runs while the broker
        # is down, fails and is retried until the broker is back.
        complete = held_checkpoint(
            cluster.wait_held(
                holds,
                COMMIT_HOLD,
                "the leader to hold the next COMPLETE checkpoint before its commit",
                timeout_s=120,
            )
        )
        mark("COMPLETE held")
        retries_before = cluster.log("coordinator-c1").count(COMMIT_RETRY)
        broker.kill()
        release(holds, COMMIT_HOLD)
        wait_for(
            "a commit call to fail against the dead broker",
            lambda: cluster.log("coordinator-c1").count(COMMIT_RETRY) > retries_before,
            timeout_s=60,
            explain=cluster.logs_tail,
        )
        assert not _committed(cluster, pipeline, complete)
        broker.restart()
        mark("broker restarted")

        # 3. The pipeline goes on through the restarted broker.
        run.produce(BATCH)
        run.wait_copied(
            "every record committed and nothing in flight", timeout_s=180, nothing_in_flight=True
        )
        # Both held checkpoints carried records (else a bounce hit an empty checkpoint).
        for checkpoint_id in (precommitted, complete):
            checkpoint = _checkpoint(cluster, pipeline, checkpoint_id)
            assert checkpoint.state == common_pb2.CHECKPOINT_STATE_COMMITTED, checkpoint
            assert any(
                r.end_offset > r.start_offset
                for task in checkpoint.tasks
                for r in task.source_ranges
            ), checkpoint

        mark("settled")
        print(
            f"\nbroker bounced with checkpoint {precommitted} pre-committed and checkpoint"
            f" {complete} COMPLETE; {', '.join(marks)}"
        )
        run.wait_no_ongoing_transaction()
        result = run.check_exactly_once()
        print(result)
        assert result.records_out == 3 * BATCH, result
    finally:
        release(holds, PRECOMMIT_HOLD)
        release(holds, COMMIT_HOLD)
        cluster.stop_all()
