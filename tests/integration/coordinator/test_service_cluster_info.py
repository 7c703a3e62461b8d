"""`GetClusterInfo` and `lockgate cluster status` list every coordinator replica, from any
replica, with its real role and last-seen time; a stopped replica ages into MISSING.

Three coordinator processes on one SQLite file (and on PostgreSQL where available)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from lockgate.client.coordinator_cli import cluster_app
from lockgate.v1 import common_pb2
from tests.integration.coordinator.test_service_coordinator import (
    LEASE_MS,
    CoordinatorCluster,
    CoordinatorProcess,
)
from tests.support.waits import wait_for

MISSING_AFTER_MS = 3 * LEASE_MS
"""The README's rule: a replica not seen for 3 lease periods is MISSING."""


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CoordinatorCluster]:
    """Replicas on a fresh SQLite file or PostgreSQL database, stopped at the end."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'coordinator.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    running = CoordinatorCluster(tmp_path, url)
    try:
        yield running
    finally:
        running.stop_all()


def members(replica: CoordinatorProcess) -> dict[str, common_pb2.CoordinatorMember]:
    return {m.coordinator_id: m for m in replica.cluster_info().coordinators}


def seen_ms(member: common_pb2.CoordinatorMember) -> int:
    return int(member.last_seen_time.ToMilliseconds())


def test_every_replica_lists_all_three_and_a_stopped_one_ages(
    cluster: CoordinatorCluster,
) -> None:
    replicas = cluster.start(3)
    leader = cluster.leader()
    ids = sorted(r.coordinator_id for r in replicas)

    def all_three_alive_and_distinct(
        asked: CoordinatorProcess,
    ) -> dict[str, common_pb2.CoordinatorMember] | None:
        found = members(asked)
        if sorted(found) != ids:
            return None
        if any(m.state != common_pb2.COORDINATOR_STATE_ALIVE for m in found.values()):
            return None
        if len({seen_ms(m) for m in found.values()}) != 3:
            return None
        return found

    for asked in replicas:
        found = wait_for(
            f"{asked.coordinator_id} to list c1, c2 and c3 alive, each with its own last-seen",
            lambda a=asked: all_three_alive_and_distinct(a),  # type: ignore[misc]
            timeout_s=10,
        )
        now_ms = time.time() * 1000  # the database's clock: SQLite on this machine, or PG here
        for member in found.values():
            assert abs(now_ms - seen_ms(member)) < MISSING_AFTER_MS, member
        assert [m.coordinator_id for m in found.values() if m.is_leader] == [leader.coordinator_id]
        assert {m.coordinator_id: m.address for m in found.values()} == {
            r.coordinator_id: r.address for r in replicas
        }

    # The CLI, through each replica, prints the three rows with their roles.
    app = typer.Typer()
    app.add_typer(cluster_app, name="cluster")
    for asked in replicas:
        result = CliRunner().invoke(app, ["cluster", "status", "--coordinator", asked.address])
        assert result.exit_code == 0, result.output
        rows = [
            line
            for line in result.output.splitlines()
            if any(line.startswith(f"│ {i} ") for i in ids)
        ]
        assert len(rows) == 3, result.output
        assert (
            sum("leader" in row for row in rows) == 1
            and sum("follower" in row for row in rows) == 2
        )

    # Stop a follower: its last-seen stays put while the others' move on, and after 3 lease
    # periods every remaining replica shows it MISSING.
    gone = next(r for r in replicas if r is not leader)
    gone.stop(grace_s=10)
    survivors = [r for r in replicas if r is not gone]
    last_seen = seen_ms(members(leader)[gone.coordinator_id])
    for asked in survivors:
        aged = wait_for(
            f"{asked.coordinator_id} to show {gone.coordinator_id} MISSING",
            lambda a=asked: (  # type: ignore[misc]
                m
                if (m := members(a)[gone.coordinator_id]).state
                == common_pb2.COORDINATOR_STATE_MISSING
                else None
            ),
            timeout_s=MISSING_AFTER_MS / 1000 + 10,
        )
        assert seen_ms(aged) == last_seen
        others = members(asked)
        for survivor in survivors:
            member = others[survivor.coordinator_id]
            assert member.state == common_pb2.COORDINATOR_STATE_ALIVE
            assert seen_ms(member) > last_seen
