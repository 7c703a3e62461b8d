# ruff: noqa: F811 - the fixtures imported from test_store are redefined as test parameters
"""The leader's commit loop on SQLite and PostgreSQL, executors faked (issue 14): against a
COMPLETE checkpoint whose commit keeps failing it logs what status warns once the
checkpoint's transactions near the sink's timeout (hole 3); as checkpoints commit, it keeps
the history bounded (Also)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import grpc
import pytest
import sqlalchemy as sa

from lockgate.common.model.ids import CoordinatorId, PipelineId
from lockgate.coordinator.domain.lease import Fence
from lockgate.coordinator.domain.states import CheckpointState
from lockgate.coordinator.herder import CoordinatorSettings, Herder
from lockgate.coordinator.herder.executors import ExecutorCallFailed, ExecutorClient
from lockgate.coordinator.store import SqlStore
from lockgate.coordinator.store.tables import (
    checkpoint_tasks,
    checkpoints,
    precommit_handles,
    precommit_offsets,
)
from tests.integration.coordinator.test_store import (
    open_stores,  # noqa: F401 - fixture
    store_url,  # noqa: F401 - fixture
    trigger,
)
from tests.integration.coordinator.test_store_checkpoints import precommit, running_pipeline
from tests.support.topics import FixedTopics
from tests.support.waits import wait_for


class UnreachableExecutors(ExecutorClient):
    """Every commit call fails as an executor that does not answer would."""

    def send_commit(self, **_: Any) -> Callable[[], int]:
        def unreachable() -> int:
            raise ExecutorCallFailed(
                "CommitCheckpoint: unreachable", code=grpc.StatusCode.UNAVAILABLE
            )

        return unreachable


def leading_herder(
    store: SqlStore, executors: ExecutorClient | None = None, **settings: Any
) -> tuple[Herder, Fence]:
    """Coordinator c1's Herder holding the lease, its executor calls answered by
    `executors`. Nothing renews the lease here, nor does any executor heartbeat: both last
    long enough for a loaded machine (with the executors' sessions lapsed, the leader would
    commit from itself, against no broker: seen at load 10+)."""
    leader = Herder(
        store=store,
        settings=CoordinatorSettings(
            coordinator_id=CoordinatorId("c1"),
            advertise="c1:1",
            lease_ms=60_000,
            session_timeout_ms=600_000,
            **settings,
        ),
        topics=FixedTopics(),  # type: ignore[arg-type]
        executor_client=executors,
    )
    leader.lease_keeper.campaign()
    return leader, leader.lease_keeper.require_fence()


def test_a_commit_still_failing_past_half_the_transaction_timeout_is_logged(
    open_stores: Callable[..., SqlStore], caplog: pytest.LogCaptureFixture
) -> None:
    store = open_stores()
    leader, fence = leading_herder(store, UnreachableExecutors())
    t0, t1 = running_pipeline(store, fence)
    trigger(store, fence=fence, pipeline_id=PipelineId("p"))
    precommit(store, fence, 1, t0, start=0, end=5)
    assert precommit(store, fence, 1, t1, start=0, end=5) is CheckpointState.COMPLETE

    with caplog.at_level(logging.WARNING):
        leader.checkpoints.commit_pending(fence)
    assert "is COMPLETE but not committed" not in caplog.text, "a fresh checkpoint is no news"

    # Triggered ten minutes ago: 66% of the default 900000 ms transaction timeout.
    with store.engine.begin() as conn:
        conn.execute(checkpoints.update().values(triggered_at_ms=store.db_now_ms() - 600_000))
    caplog.clear()

    def warned() -> bool:
        # The loop's retry backoff skips passes; the next one that tries the commit warns.
        with caplog.at_level(logging.WARNING):
            leader.checkpoints.commit_pending(fence)
        return "is COMPLETE but not committed" in caplog.text

    wait_for("the commit loop to warn", warned, timeout_s=10)
    assert "pipeline p: checkpoint 1 is COMPLETE but not committed after 600" in caplog.text
    assert "66% of sink.kafka.transaction_timeout_ms (900000 ms)" in caplog.text


class AnsweringExecutors(ExecutorClient):
    """Every commit call is acknowledged, as a live executor's would be."""

    def send_commit(self, **kwargs: Any) -> Callable[[], int]:
        return lambda: len(kwargs["handles"])


@pytest.mark.parametrize(("keep", "commits", "most"), [(5, 30, 5), (20, 50, 22)])
def test_history_stays_bounded_as_checkpoints_commit(
    open_stores: Callable[..., SqlStore], keep: int, commits: int, most: int
) -> None:
    """Thirty checkpoints commit one after the other on a coordinator that keeps five final
    ones: the table never holds more than five committed checkpoints, and the newest five
    are the ones kept, with their tasks, ranges and handles. Keeping 20, it holds up to a
    tenth more before it prunes back to 20 (so it reads the history once per two commits
    there, once per 100 at the default 1,000)."""
    store = open_stores()
    leader, fence = leading_herder(store, AnsweringExecutors(), checkpoint_history=keep)
    t0, t1 = running_pipeline(store, fence)
    rows: list[int] = []
    for n in range(1, commits + 1):
        trigger(store, fence=fence, pipeline_id=PipelineId("p"))
        precommit(store, fence, n, t0, start=5 * (n - 1), end=5 * n)
        precommit(store, fence, n, t1, start=5 * (n - 1), end=5 * n)
        leader.checkpoints.commit_pending(fence)
        with store.engine.connect() as conn:
            rows.append(
                conn.execute(sa.select(sa.func.count()).select_from(checkpoints)).scalar_one()
            )
    assert max(rows) == most
    kept = store.checkpoints.list_checkpoints(pipeline_id=PipelineId("p"), limit=100)
    newest = list(range(commits, commits - keep, -1))
    assert [c.checkpoint_id for c in kept] == newest
    assert all(c.state is CheckpointState.COMMITTED for c in kept)
    with store.engine.connect() as conn:
        for table in (checkpoint_tasks, precommit_offsets, precommit_handles):
            ids = {r[0] for r in conn.execute(sa.select(table.c.checkpoint_id))}
            assert ids == set(newest), table.name
    # The pipeline resumes where the newest checkpoint ended, pruning or not.
    offsets = store.offsets.get_offsets(pipeline_id=PipelineId("p"))
    assert {o.next_offset for o in offsets} == {5 * commits}
