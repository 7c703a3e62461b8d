# ruff: noqa: F811 - the fixtures imported from test_store are redefined as test parameters
"""The leader's commit loop against a COMPLETE checkpoint whose commit keeps failing, on
SQLite and PostgreSQL (executors faked): it logs what status warns once the checkpoint's
transactions near the sink's timeout (issue 14, hole 3)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from lockgate.common.model.ids import CoordinatorId, PipelineId
from lockgate.coordinator.domain.states import CheckpointState
from lockgate.coordinator.herder import CoordinatorSettings, Herder
from lockgate.coordinator.herder.executors import ExecutorCallFailed, ExecutorClient
from lockgate.coordinator.store import SqlStore
from lockgate.coordinator.store.tables import checkpoints
from tests.integration.coordinator.test_store import (
    open_stores,  # noqa: F401 - fixture
    store_url,  # noqa: F401 - fixture
)
from tests.integration.coordinator.test_store_checkpoints import precommit, running_pipeline
from tests.support.topics import FixedTopics
from tests.support.waits import wait_for


class UnreachableExecutors(ExecutorClient):
    """Every commit call fails as an executor that does not answer would."""

    def commit_checkpoint(self, **_: Any) -> int:
        raise ExecutorCallFailed("CommitCheckpoint: unreachable", code=grpc.StatusCode.UNAVAILABLE)


def test_a_commit_still_failing_past_half_the_transaction_timeout_is_logged(
    open_stores: Callable[..., SqlStore], caplog: pytest.LogCaptureFixture
) -> None:
    store = open_stores()
    leader = Herder(
        store=store,
        settings=CoordinatorSettings(coordinator_id=CoordinatorId("c1"), advertise="c1:1"),
        topics=FixedTopics(),  # type: ignore[arg-type]
        executor_client=UnreachableExecutors(),
    )
    leader.lease_keeper.campaign()
    fence = leader.lease_keeper.require_fence()
    t0, t1 = running_pipeline(store, fence)
    store.checkpoints.trigger_checkpoint(fence=fence, pipeline_id=PipelineId("p"))
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
