"""A paused executor's late producer (issue 14, hole 1), made deterministic with held failpoints.

Executor e1 (A) runs checkpoint 1 of a one-task pipeline and is held in its Spark write
partition just before the producer's ``init_transactions()`` (failpoint
``before_init_transactions:hold``). A is SIGSTOPped past the session timeout (the
reassignment delay is 0), so the task moves to e2 (B) under a new task generation and
checkpoint 1 aborts. B's first checkpoint writes on the same slot (slot 0 again: 1 was
ABORTED) and is held after its pre-commit, its transaction open and flushed, before its
report (``after_precommit_before_report:hold``). Then A wakes: its write partition opens
its producer -- the zombie's ``init_transactions()`` -- produces and flushes (A is held
again after the batch, which tells the test that this happened). Only then is B let go:
its checkpoint becomes COMPLETE and is committed, and two more checkpoints follow.

With ids without the task generation (``lockgate-<p>-<t>-<slot>``), A's
``init_transactions()`` aborts B's pre-committed transaction, and the commit of B's
COMPLETE checkpoint fails with DATA_LOSS. With the generation in the id, A can only fence
its own ids: a read_committed consumer finds the output equal to the input, exactly once.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from lockgate.v1 import common_pb2
from tests.fixtures.kafka import KafkaBroker
from tests.integration.e2e.harness import (
    SHORT_SESSION_ARGS,
    CopyRun,
    ServiceCluster,
    held_checkpoint,
    release,
)
from tests.support.waits import wait_for

pytestmark = [pytest.mark.spark]

BEFORE_INIT = "before_init_transactions"
AFTER_PRECOMMIT = "after_precommit_before_report"


def test_a_paused_executors_late_producer_cannot_abort_a_live_checkpoint(
    kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    cluster = ServiceCluster(
        home=tmp_path / "services",
        bootstrap_servers=bootstrap,
        lease_ms=3000,
        coordinator_args=SHORT_SESSION_ARGS,
    )
    holds_a, holds_b = tmp_path / "holds-e1", tmp_path / "holds-e2"
    holds_a.mkdir()
    holds_b.mkdir()
    paused = False
    try:
        cluster.start_coordinator("c1")
        wait_for("a leader", lambda: bool(cluster.leader_id()), timeout_s=30)
        run = CopyRun.begin(cluster, "zombie", records=500)

        # A alone, so the task is A's; its checkpoint 1 holds before init_transactions.
        cluster.start_executor(
            "e1", failpoints=f"{BEFORE_INIT}:hold,{AFTER_PRECOMMIT}:hold", hold_dir=holds_a
        )
        run.create(tmp_path, interval_ms=1000, timeout_ms=180_000)
        pipeline = run.pipeline
        held_a = cluster.wait_held(
            holds_a,
            BEFORE_INIT,
            "A's write partition to hold before init_transactions",
            timeout_s=180,
        )
        cluster.start_executor("e2", failpoints=f"{AFTER_PRECOMMIT}:hold", hold_dir=holds_b)

        # A paused past its session: the task moves to B, checkpoint 1 aborts.
        cluster.signal("executor-e1", signal.SIGSTOP)
        paused = True
        wait_for(
            "the task to run on B",
            lambda: cluster.runs_on(pipeline, "e2"),
            timeout_s=60,
            explain=cluster.logs_tail,
        )
        assert cluster.checkpoint_states(pipeline)[1] == common_pb2.CHECKPOINT_STATE_ABORTED
        held_b = cluster.wait_held(
            holds_b,
            AFTER_PRECOMMIT,
            "B's first checkpoint to hold after its pre-commit",
            timeout_s=120,
        )
        first_on_b = held_checkpoint(held_b)

        # A wakes: its late producer runs init_transactions, writes and flushes.
        release(holds_a, BEFORE_INIT)
        cluster.signal("executor-e1", signal.SIGCONT)
        paused = False
        cluster.wait_held(
            holds_a, AFTER_PRECOMMIT, "A's late producer to finish its batch", timeout_s=120
        )
        release(holds_a, AFTER_PRECOMMIT)

        # B's checkpoint goes on: COMPLETE, committed, and two more after it.
        release(holds_b, AFTER_PRECOMMIT)
        run.produce(500)
        run.wait_copied(
            "two more checkpoints committed on B and every record copied",
            timeout_s=120,
            after_checkpoint=first_on_b + 1,
            abort_if=cluster.data_loss_line,
        )
        assert cluster.data_loss_line() is None
        states = cluster.checkpoint_states(pipeline)
        assert states[first_on_b] == common_pb2.CHECKPOINT_STATE_COMMITTED, states

        result = run.check_exactly_once()
        print(
            f"\nA held at {held_a!r}; B's checkpoint {first_on_b} held at {held_b!r}; "
            f"{result.records_out} of {result.records_in} records out, exactly once"
        )
    finally:
        for hold_dir in (holds_a, holds_b):
            for failpoint in (BEFORE_INIT, AFTER_PRECOMMIT):
                release(hold_dir, failpoint)
        if paused:
            cluster.signal("executor-e1", signal.SIGCONT)
        cluster.stop_all()
