"""PostgreSQL crashes and restarts under three coordinators while a pipeline runs (issue 14).

Three coordinator replicas share a database on a PostgreSQL server of the test's own; one
Spark executor copies a 2-partition topic. Executor e1 holds checkpoint 1 after its batch
was produced and flushed, before its report (``after_precommit_before_report:hold``); the
server is SIGKILLed with every backend (a crash: no shutdown checkpoint, every session cut)
and e1 released, so its report reaches a leader that can write nothing; every replica fails
to renew or take the lease. Once all three have seen the outage and the leader has stepped
down, the server starts again on the same data directory and port (crash recovery).

Without anyone's help the replicas must reconnect (their pools drop the dead connections),
elect a leader, and the pipeline must go on: a read_committed consumer finds the output equal
to the input, every key's records in order, no transaction of the pipeline is left Ongoing,
all three replicas answer from the database, and no call during the outage was answered with
an internal error (an unreachable database is UNAVAILABLE, which callers retry).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockgate.common.grpc_client import open_channel
from lockgate.localcluster.postgres import PostgresCluster, unique_database_name
from lockgate.v1 import coordinator_pb2, coordinator_pb2_grpc
from tests.fixtures.kafka import KafkaBroker
from tests.integration.e2e.harness import (
    SHORT_SESSION_ARGS,
    CopyRun,
    ServiceCluster,
    release,
)
from tests.support.waits import wait_for

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

PARTITIONS = 2
#: Records written before the crash, during the outage, and after the restart.
BATCH = 1000
COORDINATORS = ("c1", "c2", "c3")
PRECOMMIT_HOLD = "after_precommit_before_report"
#: What a replica logs when it could not renew or take the lease.
LEASE_FAILED = "lease attempt failed"
#: What a service logs when a call failed with an unexpected error (INTERNAL to its caller).
INTERNAL_ERROR = "failed unexpectedly"
#: What the leader logs when it stops leading.
LEASE_LOST = "lost the lease"


@pytest.fixture
def postgres() -> Iterator[PostgresCluster]:
    """A server of this test's own (crashing the session's would hurt other tests), durable:
    every commit it acknowledged survives the crash, as on a production server."""
    with PostgresCluster(durable=True) as cluster:
        yield cluster


def _leaders_seen(cluster: ServiceCluster) -> str | None:
    """The leader every replica names when asked on its own (None: they disagree, or one
    cannot read the database or does not answer)."""
    seen: set[str] = set()
    for coordinator_id in COORDINATORS:
        address = f"127.0.0.1:{cluster.coordinator_ports[coordinator_id]}"
        with open_channel(address, follow_leader=False) as channel:
            info = coordinator_pb2_grpc.CoordinatorServiceStub(channel).GetClusterInfo(
                coordinator_pb2.GetClusterInfoRequest(), timeout=10
            )
        seen.add(info.leader_epoch.leader_id)
    return seen.pop() if len(seen) == 1 and "" not in seen else None


def test_exactly_once_when_postgresql_crashes_and_restarts_under_three_coordinators(
    kafka_broker: KafkaBroker, postgres: PostgresCluster, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    cluster = ServiceCluster(
        home=tmp_path / "services",
        bootstrap_servers=bootstrap,
        lease_ms=3000,
        database_url=postgres.create_database(unique_database_name("pg_restart")),
        coordinator_args=SHORT_SESSION_ARGS,
    )
    holds = tmp_path / "holds"
    holds.mkdir()
    began = time.monotonic()
    marks: list[str] = []

    def mark(what: str) -> None:
        marks.append(f"{what} +{time.monotonic() - began:.0f}s")

    try:
        for coordinator_id in COORDINATORS:
            cluster.start_coordinator(coordinator_id)
        wait_for("a leader", lambda: bool(cluster.leader_id()), timeout_s=30)
        run = CopyRun.begin(cluster, "pg", records=BATCH, partitions=PARTITIONS)
        cluster.start_executor("e1", failpoints=f"{PRECOMMIT_HOLD}:hold", hold_dir=holds)
        run.create(tmp_path, interval_ms=500, timeout_ms=60_000)
        cluster.wait_held(
            holds,
            PRECOMMIT_HOLD,
            "e1 to hold checkpoint 1 after its pre-commit, before its report",
            timeout_s=240,
        )
        mark("pre-commit held")

        # The crash, with a pre-commit to report and input arriving; it lasts until every
        # replica failed a lease attempt and the leader stepped down.
        leader = cluster.leader_id()
        assert leader, "no leader before the crash"
        failures_before = {
            c: cluster.log(f"coordinator-{c}").count(LEASE_FAILED) for c in COORDINATORS
        }
        stepped_down_before = cluster.log(f"coordinator-{leader}").count(LEASE_LOST)
        postgres.kill()
        release(holds, PRECOMMIT_HOLD)
        run.produce(BATCH)
        wait_for(
            f"every replica to fail a lease attempt and leader {leader} to step down",
            lambda: (
                all(
                    cluster.log(f"coordinator-{c}").count(LEASE_FAILED) > failures_before[c]
                    for c in COORDINATORS
                )
                and cluster.log(f"coordinator-{leader}").count(LEASE_LOST) > stepped_down_before
            ),
            timeout_s=60,
            explain=cluster.logs_tail,
        )
        mark("every replica saw the outage")
        postgres.restart()
        mark("PostgreSQL restarted")

        run.produce(BATCH)
        run.wait_copied(
            "every record committed and nothing in flight", timeout_s=180, nothing_in_flight=True
        )
        mark("settled")
        print(f"\nPostgreSQL crashed and restarted; {', '.join(marks)}")
        run.wait_no_ongoing_transaction()
        result = run.check_exactly_once()
        print(result)
        assert result.records_out == 3 * BATCH, result
        # No replica died or hung: each answers from its own database pool, naming one leader.
        leaders = wait_for(
            "every replica to read one leader from the database",
            lambda: _leaders_seen(cluster),
            timeout_s=30,
            explain=cluster.logs_tail,
        )
        print(f"leader after the restart: {leaders}")
        # Callers were told UNAVAILABLE (retry) during the outage, never an internal error.
        for coordinator_id in COORDINATORS:
            log = cluster.log(f"coordinator-{coordinator_id}")
            assert INTERNAL_ERROR not in log, log[log.index(INTERNAL_ERROR) - 300 :][:3000]
    finally:
        release(holds, PRECOMMIT_HOLD)
        cluster.stop_all()
