# ruff: noqa: F811 - the fixtures imported from test_store are redefined as test parameters
"""DATA_LOST checkpoints in the store, on SQLite and PostgreSQL (issue 14, hole 2): what is
recorded, what goes along, where the pipeline resumes, and the two ways past it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from lockgate.common.model.ids import PipelineId, TaskId
from lockgate.common.model.offsets import OffsetRange, TopicPartition
from lockgate.coordinator.domain.errors import FailedPrecondition
from lockgate.coordinator.domain.lease import Fence
from lockgate.coordinator.domain.states import CheckpointState, TargetState
from lockgate.coordinator.store import SqlStore
from tests.integration.coordinator.test_store import (
    lead,
    open_stores,  # noqa: F401 - fixture
    store_url,  # noqa: F401 - fixture
    trigger,
)
from tests.integration.coordinator.test_store_checkpoints import (
    SPLITS,
    C,
    offsets_table,
    precommit,
    running_pipeline,
)

P = PipelineId("p")


def two_in_flight(store: SqlStore, *, second_complete: bool = True) -> tuple[Fence, list[TaskId]]:
    """Checkpoint 1 COMPLETE over [0, 10); 2 over [10, 15), COMPLETE or only TRIGGERED."""
    fence = lead(store)
    t0, t1 = running_pipeline(store, fence)
    for n, (start, end) in ((1, (0, 10)), (2, (10, 15))):
        trigger(store, fence=fence, pipeline_id=P)
        if n == 2 and not second_complete:
            break
        precommit(store, fence, n, t0, start=start, end=end)
        assert precommit(store, fence, n, t1, start=start, end=end) is CheckpointState.COMPLETE
    return fence, [t0, t1]


def test_a_lost_checkpoint_records_its_ranges_and_takes_the_later_ones_along(
    open_stores: Callable[..., SqlStore],
) -> None:
    store = open_stores()
    fence, (t0, t1) = two_in_flight(store)
    taken = store.data_loss.record_data_loss(
        fence=fence, pipeline_id=P, checkpoint_id=C(1), lost_tasks={t0}, error="PRODUCER_FENCED"
    )
    assert taken == [C(2)]
    states = {c.checkpoint_id: c.state for c in store.checkpoints.list_checkpoints(pipeline_id=P)}
    assert states == {1: CheckpointState.DATA_LOST, 2: CheckpointState.DATA_LOST}
    assert store.checkpoints.get_checkpoint(pipeline_id=P, checkpoint_id=C(2)).lost_tasks == {
        t0,
        t1,
    }
    blocking = store.data_loss.blocking_loss(pipeline_id=P)
    assert blocking is not None and blocking.checkpoint_id == 1
    assert blocking.data_loss_error == "PRODUCER_FENCED" and blocking.lost_tasks == {t0}
    assert store.data_loss.lost_ranges(pipeline_id=P, checkpoint_id=C(1)) == [
        OffsetRange("in", 0, 0, 10),
        OffsetRange("in", 1, 0, 10),
    ]
    # Task 0's partitions re-read checkpoint 1's range; task 1's resume where 1 committed
    # them (2 never commits: it goes again).
    assert offsets_table(store) == {("in", 0): 0, ("in", 1): 0, ("in", 2): 10, ("in", 3): 10}
    assert store.checkpoints.list_pending_commits() == []
    assert store.checkpoints.list_lingering_transactions() == []
    # Idempotent: a retried record changes nothing.
    again = store.data_loss.record_data_loss(
        fence=fence, pipeline_id=P, checkpoint_id=C(1), lost_tasks={t0, t1}, error="other"
    )
    assert again == []
    assert store.data_loss.lost_ranges(pipeline_id=P, checkpoint_id=C(1))[0].partition == 0


def test_a_triggered_checkpoint_after_the_lost_one_aborts(
    open_stores: Callable[..., SqlStore],
) -> None:
    store = open_stores()
    fence, (t0, t1) = two_in_flight(store, second_complete=False)
    taken = store.data_loss.record_data_loss(
        fence=fence, pipeline_id=P, checkpoint_id=C(1), lost_tasks={t0, t1}, error="lost"
    )
    assert taken == [C(2)]
    aborted = store.checkpoints.get_checkpoint(pipeline_id=P, checkpoint_id=C(2))
    assert aborted.state is CheckpointState.ABORTED
    assert "checkpoint 1 before it lost its records" in (aborted.abort_reason or "")
    assert {t.checkpoint_id for t in store.checkpoints.list_lingering_transactions()} == {2}
    assert set(offsets_table(store).values()) == {0}


def test_restart_from_the_lost_checkpoint_moves_past_it_and_nothing_else_does(
    open_stores: Callable[..., SqlStore],
) -> None:
    store = open_stores()
    fence, (t0, _) = two_in_flight(store)
    store.data_loss.record_data_loss(
        fence=fence, pipeline_id=P, checkpoint_id=C(1), lost_tasks={t0}, error="lost"
    )
    # A trigger decided before the loss was recorded finds the pipeline FAILED.
    with pytest.raises(FailedPrecondition, match="is FAILED: checkpoint 1 lost") as refused:
        trigger(store, fence=fence, pipeline_id=P)
    assert refused.value.reason == "PIPELINE_FAILED"

    def restart_from(checkpoint_id: int) -> None:
        store.pipelines.restart_pipeline(
            fence=fence,
            pipeline_id=P,
            splits=SPLITS,
            restart_tasks=False,
            past_data_loss=C(checkpoint_id),
        )

    with pytest.raises(FailedPrecondition, match="--from-checkpoint 1"):
        restart_from(2)
    restart_from(1)
    assert store.data_loss.blocking_loss(pipeline_id=P) is None
    with pytest.raises(FailedPrecondition, match="no DATA_LOST checkpoint"):
        restart_from(1)
    # The pipeline triggers again, from the rewound offsets.
    n3 = trigger(store, fence=fence, pipeline_id=P)
    assert n3.checkpoint_id == 3


def test_an_offset_reset_moves_past_a_lost_checkpoint(
    open_stores: Callable[..., SqlStore],
) -> None:
    store = open_stores()
    fence, (t0, _) = two_in_flight(store)
    store.data_loss.record_data_loss(
        fence=fence, pipeline_id=P, checkpoint_id=C(1), lost_tasks={t0}, error="lost"
    )
    store.pipelines.set_target_state(fence=fence, pipeline_id=P, target_state=TargetState.STOPPED)
    store.offsets.reset_offsets(fence=fence, pipeline_id=P, offsets={TopicPartition("in", 0): 10})
    assert store.data_loss.blocking_loss(pipeline_id=P) is None
    assert offsets_table(store)[("in", 0)] == 10
