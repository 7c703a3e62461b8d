"""Network partitions (issue 14): a process in its own network namespace is cut off by DROP
rules, and healed.

Both tests share one namespace (a veth pair to this one, :mod:`tests.support.netns`) and
one Kafka broker listening on, and advertising, the root side's veth address, which the
namespace and this side both reach. Each puts one process in the namespace:

- an executor, cut from every coordinator (both ways) but not from Kafka, in the middle
  of a batch held before its producer's ``init_transactions()``: its task moves to the
  other executor, and the zombie's late producer, released while the other executor's
  checkpoint on the same slot is pre-committed, must fence only itself;
- the leading coordinator, cut from PostgreSQL while it is inside the transaction that
  writes a checkpoint COMPLETE (held there by ``inside_complete_transaction``): the
  others elect a new leader within the lease (plus a margin for this loaded machine), the
  cut leader's transaction never commits and it steps down, and the pipeline ends with
  output = input.

They need root (CAP_NET_ADMIN), ``ip`` and ``nft``, and skip with the reason otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from lockgate.localcluster.postgres import PostgresCluster, unique_database_name
from lockgate.localcluster.process import stop_process
from lockgate.v1 import common_pb2
from tests.fixtures.kafka import KafkaBroker, start_test_broker
from tests.integration.e2e.harness import (
    SHORT_SESSION_ARGS,
    CopyRun,
    ServiceCluster,
    held_checkpoint,
    release,
)
from tests.support.netns import NetworkNamespace, network_namespace, unavailable_reason
from tests.support.waits import wait_for

_SKIP = unavailable_reason()
pytestmark = [pytest.mark.spark, pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")]

BEFORE_INIT = "before_init_transactions"
AFTER_PRECOMMIT = "after_precommit_before_report"
INSIDE_COMPLETE = "inside_complete_transaction"
#: The leader-cut test's lease; a new leader is due within it plus one second of polling.
LEASE_MS = 3000
#: What this shared two-core machine may add to that bound (seven other test runs).
LOAD_MARGIN_S = 5.0


@pytest.fixture(scope="module")
def namespace() -> Iterator[NetworkNamespace]:
    """The module's network namespace (deleted at the end, also after a failure)."""
    with network_namespace() as made:
        yield made


@pytest.fixture(scope="module")
def broker(
    namespace: NetworkNamespace, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KafkaBroker]:
    """A broker on the root side's veth address, reachable from the namespace too."""
    started = start_test_broker(tmp_path_factory.mktemp("kafka-netns"), host=namespace.host_address)
    try:
        yield started
    finally:
        stop_process(home=started.home, name=started.process.name)


def _data_loss(cluster: ServiceCluster, pipeline: str) -> str | None:
    """A DATA_LOST checkpoint, or the first log line reporting a lost transaction."""
    lost = [
        c.checkpoint_id
        for c in cluster.checkpoints(pipeline)
        if c.state == common_pb2.CHECKPOINT_STATE_DATA_LOST
    ]
    return f"checkpoints {lost} are DATA_LOST" if lost else cluster.data_loss_line()


def _executor_state(cluster: ServiceCluster, executor_id: str) -> int:
    for executor in cluster.cluster_info().executors:
        if executor.executor_id == executor_id:
            return int(executor.state)
    return common_pb2.EXECUTOR_STATE_UNSPECIFIED


def test_an_executor_cut_from_the_coordinators_mid_batch_fences_only_itself(
    namespace: NetworkNamespace, broker: KafkaBroker, tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    cluster = ServiceCluster(
        home=tmp_path / "services",
        bootstrap_servers=bootstrap,
        lease_ms=3000,
        coordinator_args=SHORT_SESSION_ARGS,
        host=namespace.host_address,
    )
    holds_a, holds_b = tmp_path / "holds-e1", tmp_path / "holds-e2"
    holds_a.mkdir()
    holds_b.mkdir()
    try:
        for coordinator_id in ("c1", "c2"):
            cluster.start_coordinator(coordinator_id)
        wait_for("a leader", lambda: bool(cluster.leader_id()), timeout_s=30)
        run = CopyRun.begin(cluster, "cut-exec", records=500)

        # A (e1, in the namespace) alone, so the task is A's; its batch holds before
        # init_transactions, mid-batch.
        cluster.start_executor(
            "e1",
            failpoints=f"{BEFORE_INIT}:hold,{AFTER_PRECOMMIT}:hold",
            hold_dir=holds_a,
            namespace=namespace,
        )
        run.create(tmp_path, interval_ms=500, timeout_ms=180_000)
        pipeline = run.pipeline
        cluster.wait_held(
            holds_a, BEFORE_INIT, "A's batch to hold before init_transactions", timeout_s=180
        )
        cluster.start_executor("e2", failpoints=f"{AFTER_PRECOMMIT}:hold", hold_dir=holds_b)

        # The partition: A cannot reach any coordinator, nor any coordinator A; Kafka stays.
        for port in cluster.coordinator_ports.values():
            namespace.cut(port)
        namespace.cut_inbound(cluster.executor_ports["e1"])
        wait_for(
            "the task to move to B",
            lambda: cluster.runs_on(pipeline, "e2"),
            timeout_s=60,
            explain=cluster.logs_tail,
        )
        assert _executor_state(cluster, "e1") == common_pb2.EXECUTOR_STATE_EXPIRED
        assert cluster.checkpoint_states(pipeline)[1] == common_pb2.CHECKPOINT_STATE_ABORTED
        held_b = cluster.wait_held(
            holds_b,
            AFTER_PRECOMMIT,
            "B's first checkpoint to hold after its pre-commit, its transaction open",
            timeout_s=120,
        )
        first_on_b = held_checkpoint(held_b)

        # The zombie's late producer: init_transactions, writes and flushes through Kafka.
        release(holds_a, BEFORE_INIT)
        cluster.wait_held(holds_a, AFTER_PRECOMMIT, "A's late batch to be written", timeout_s=120)
        release(holds_a, AFTER_PRECOMMIT)  # its report goes nowhere

        # B goes on: its checkpoint and two more are committed, every record copied.
        release(holds_b, AFTER_PRECOMMIT)
        run.produce(500)
        run.wait_copied(
            "two more checkpoints committed on B and every record copied",
            timeout_s=120,
            after_checkpoint=first_on_b + 1,
            abort_if=lambda: _data_loss(cluster, pipeline),
        )

        # Healed, A comes back; its late work is refused and fences no one else.
        namespace.heal()
        wait_for(
            "A alive again after the heal",
            lambda: _executor_state(cluster, "e1") == common_pb2.EXECUTOR_STATE_ALIVE,
            timeout_s=60,
            explain=cluster.logs_tail,
        )
        committed = cluster.pipeline_status(pipeline).last_committed_checkpoint_id
        run.produce(200)
        run.wait_copied(
            "a checkpoint after the heal and every record copied",
            timeout_s=120,
            after_checkpoint=committed,
            abort_if=lambda: _data_loss(cluster, pipeline),
        )
        assert _data_loss(cluster, pipeline) is None
        assert (
            cluster.checkpoint_states(pipeline)[first_on_b] == common_pb2.CHECKPOINT_STATE_COMMITTED
        )
        result = run.check_exactly_once()
        print(
            f"\nA cut mid-batch; B's checkpoint {first_on_b} held at {held_b!r}; "
            f"{result.records_out} of {result.records_in} records out, exactly once"
        )
    finally:
        for hold_dir in (holds_a, holds_b):
            for failpoint in (BEFORE_INIT, AFTER_PRECOMMIT):
                release(hold_dir, failpoint)
        namespace.heal()
        cluster.stop_all()


def _lease(engine: sa.engine.Engine) -> tuple[str | None, int]:
    """The lease row's holder and epoch, as PostgreSQL has them."""
    with engine.connect() as conn:
        row = conn.execute(sa.text("SELECT holder, leader_epoch FROM leader_lease")).one()
    return row.holder, int(row.leader_epoch)


def _taken_from(engine: sa.engine.Engine, old_holder: str) -> tuple[str, int] | None:
    """The lease's new holder and epoch once a replica other than ``old_holder`` has it."""
    holder, epoch = _lease(engine)
    return (holder, epoch) if holder not in (None, old_holder) else None


@pytest.mark.serial  # a time bound is the assertion
def test_a_leader_cut_from_postgresql_mid_write_is_replaced_within_its_lease(
    namespace: NetworkNamespace, broker: KafkaBroker, tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    hold_dir = tmp_path / "holds-c1"
    hold_dir.mkdir()
    with PostgresCluster(host=namespace.host_address, allow_from=(namespace.network,)) as pg:
        url = pg.create_database(unique_database_name("netns_leader"))
        engine = sa.create_engine(url)
        cluster = ServiceCluster(
            home=tmp_path / "services",
            bootstrap_servers=bootstrap,
            lease_ms=LEASE_MS,
            coordinator_args=SHORT_SESSION_ARGS,
            host=namespace.host_address,
            database_url=url,
        )
        try:
            # c1 leads from the namespace; its third COMPLETE write holds inside its
            # transaction.
            cluster.start_coordinator(
                "c1", failpoints=f"{INSIDE_COMPLETE}@3:hold", hold_dir=hold_dir, namespace=namespace
            )
            wait_for("c1 to lead", lambda: cluster.leader_id() == "c1", timeout_s=30)
            for coordinator_id in ("c2", "c3"):
                cluster.start_coordinator(coordinator_id)
            cluster.start_executor("e1")
            run = CopyRun.begin(cluster, "cut-leader", records=1000)
            run.create(tmp_path, interval_ms=500, timeout_ms=180_000)
            pipeline = run.pipeline
            in_flight = held_checkpoint(
                cluster.wait_held(
                    hold_dir,
                    INSIDE_COMPLETE,
                    "c1 to hold inside a COMPLETE transaction",
                    timeout_s=240,
                )
            )
            old_holder, old_epoch = _lease(engine)
            assert old_holder == "c1"

            # The cut, then the leader goes on with its write: into the void.
            namespace.cut(pg.port)
            cut_at = time.monotonic()
            release(hold_dir, INSIDE_COMPLETE)
            new_holder, new_epoch = wait_for(
                "another replica to take the lease",
                lambda: _taken_from(engine, "c1"),
                timeout_s=60,
                explain=cluster.logs_tail,
            )
            elected_s = time.monotonic() - cut_at
            assert new_epoch > old_epoch
            assert elected_s <= LEASE_MS / 1000 + 1 + LOAD_MARGIN_S, elected_s
            # What let the others in: PostgreSQL ended the cut leader's session, which
            # would otherwise hold its locks until the server's keepalive (hours).
            wait_for(
                "PostgreSQL to end the cut leader's open transaction",
                lambda: "idle-in-transaction timeout" in pg.log_path.read_text(errors="replace"),
                timeout_s=10,
            )
            wait_for(
                "the cut leader to step down",
                lambda: "coordinator c1 lost the lease" in cluster.log("coordinator-c1"),
                timeout_s=60,
                explain=cluster.logs_tail,
            )

            run.produce(1000)
            namespace.heal()
            run.wait_copied(
                "every record copied under the new leader",
                timeout_s=180,
                after_checkpoint=in_flight,
                abort_if=lambda: _data_loss(cluster, pipeline),
            )
            # The held COMPLETE never committed: the new leader aborted that checkpoint,
            # and every checkpoint that counts since is the new term's.
            checkpoints = cluster.checkpoints(pipeline)
            states = {c.checkpoint_id: c.state for c in checkpoints}
            assert states[in_flight] == common_pb2.CHECKPOINT_STATE_ABORTED, states
            later = [
                c
                for c in checkpoints
                if c.checkpoint_id > in_flight and c.state != common_pb2.CHECKPOINT_STATE_ABORTED
            ]
            assert later and all(c.leader_epoch.epoch >= new_epoch for c in later), [
                (c.checkpoint_id, c.leader_epoch.epoch) for c in later
            ]
            assert _lease(engine)[0] != "c1"
            result = run.check_exactly_once()
            print(
                f"\nc1 (epoch {old_epoch}) cut inside checkpoint {in_flight}'s COMPLETE write;"
                f" {new_holder} led with epoch {new_epoch} {elected_s:.1f} s after the cut"
                f" (lease {LEASE_MS} ms); {result.records_out} records out, exactly once"
            )
        finally:
            release(hold_dir, INSIDE_COMPLETE)
            namespace.heal()
            cluster.stop_all()
            engine.dispose()
