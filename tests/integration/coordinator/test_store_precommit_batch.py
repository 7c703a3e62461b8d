# ruff: noqa: F811 - the fixtures imported from test_store are redefined as test parameters
"""One executor's batch of pre-commit reports (ReportPrecommits) in the store, on SQLite
and PostgreSQL: one transaction, each report checked on its own."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import sqlalchemy as sa

from lockgate.common.model.handles import TransactionHandle
from lockgate.common.model.ids import Generation, PipelineId
from lockgate.common.model.offsets import OffsetRange
from lockgate.coordinator.domain.checkpoints import CheckpointRecord, Precommit
from lockgate.coordinator.domain.errors import FencedError, InvalidArgument, StaleGeneration
from lockgate.coordinator.domain.lease import Fence
from lockgate.coordinator.domain.states import CheckpointState
from lockgate.coordinator.store import SqlStore
from lockgate.coordinator.store.tables import precommit_handles, precommit_offsets
from tests.integration.coordinator.test_store import (
    lead,
    open_stores,  # noqa: F401 - fixture
    store_url,  # noqa: F401 - fixture
    wait_for_expiry,
)
from tests.integration.coordinator.test_store_checkpoints import (
    E1,
    C,
    offsets_table,
    running_pipeline,
)

PID = PipelineId("p")


def genuine_reports(store: SqlStore, fence: Fence) -> list[Precommit]:
    """Checkpoint 1 triggered on both tasks, and the report each trigger asks for."""
    t0, _ = running_pipeline(store, fence)
    n1 = store.checkpoints.trigger_checkpoint(fence=fence, pipeline_id=PID)
    return [
        Precommit(
            pipeline_id=PID,
            checkpoint_id=C(1),
            task_id=t.task_id,
            task_generation=t.task_generation,
            executor_id=t.executor_id or E1,
            executor_generation=Generation(1),
            offsets=(OffsetRange("in", 0 if t.task_id == t0 else 2, 0, 3),),
            handles=(TransactionHandle(t.transactional_id, 7, 0),),
        )
        for t in sorted(n1.tasks, key=lambda t: t.task_id)
    ]


def rows(store: SqlStore) -> tuple[int, int]:
    """How many pre-commit offset ranges and handles are stored."""
    with store.engine.connect() as conn:
        return (
            conn.execute(sa.select(sa.func.count()).select_from(precommit_offsets)).scalar_one(),
            conn.execute(sa.select(sa.func.count()).select_from(precommit_handles)).scalar_one(),
        )


def states(results: list[CheckpointRecord | Exception]) -> list[object]:
    return [r.state if isinstance(r, CheckpointRecord) else type(r) for r in results]


def test_a_forged_or_stale_report_is_refused_alone_and_the_others_are_recorded(
    open_stores: Callable[..., SqlStore],
) -> None:
    store = open_stores()
    fence = lead(store)
    good0, good1 = genuine_reports(store, fence)
    forged = dataclasses.replace(
        good1, handles=(TransactionHandle("lockgate-another-pipeline-0-g1-0", 7, 0),)
    )
    stale = dataclasses.replace(good1, executor_generation=Generation(0))

    results = store.checkpoints.record_precommit_batch(
        fence=fence, precommits=[forged, good0, stale]
    )

    assert states(results) == [InvalidArgument, CheckpointState.TRIGGERED, StaleGeneration]
    assert isinstance(results[0], InvalidArgument)
    assert [v.field for v in results[0].violations] == ["sink_handles[0].kafka.transactional_id"]
    # Task 0's report is in, nothing of task 1's: N waits for task 1's genuine report.
    record = store.checkpoints.get_checkpoint(pipeline_id=PID, checkpoint_id=C(1))
    assert record.precommitted == frozenset({good0.task_id})
    assert rows(store) == (1, 1)
    assert offsets_table(store) == {}

    [last] = store.checkpoints.record_precommit_batch(fence=fence, precommits=[good1])
    assert isinstance(last, CheckpointRecord) and last.state is CheckpointState.COMPLETE
    assert offsets_table(store) == {("in", 0): 3, ("in", 2): 3}


def test_a_batch_of_every_task_writes_complete_and_a_retried_batch_is_harmless(
    open_stores: Callable[..., SqlStore],
) -> None:
    store = open_stores()
    fence = lead(store)
    reports = genuine_reports(store, fence)

    first = store.checkpoints.record_precommit_batch(fence=fence, precommits=reports)
    assert states(first) == [CheckpointState.COMPLETE, CheckpointState.COMPLETE]
    stored = rows(store)
    assert stored == (2, 2)

    # The executor did not get the answer and sends the same batch again (twice in one).
    again = store.checkpoints.record_precommit_batch(fence=fence, precommits=[*reports, reports[0]])
    assert states(again) == [CheckpointState.COMPLETE] * 3
    assert rows(store) == stored
    assert offsets_table(store) == {("in", 0): 3, ("in", 2): 3}


def test_a_fenced_batch_records_nothing(open_stores: Callable[..., SqlStore]) -> None:
    old_store, new_store = open_stores(), open_stores()
    old = lead(old_store, "c1", lease_ms=3_000)
    reports = genuine_reports(old_store, old)
    wait_for_expiry(new_store)
    lead(new_store, "c2")

    with pytest.raises(FencedError):
        old_store.checkpoints.record_precommit_batch(fence=old, precommits=reports)

    # All or nothing: not one report, not COMPLETE, not the offsets.
    record = new_store.checkpoints.get_checkpoint(pipeline_id=PID, checkpoint_id=C(1))
    assert (record.state, record.precommitted) == (CheckpointState.TRIGGERED, frozenset())
    assert rows(new_store) == (0, 0)
    assert offsets_table(new_store) == {}
