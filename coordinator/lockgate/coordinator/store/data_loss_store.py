"""DATA_LOST checkpoints: record a commit that failed for good, and move past it.

Columns of `checkpoints` (`data_loss_error`, `data_lost_at_ms`, `data_loss_resolved_at_ms`)
and `checkpoint_tasks.lost_at_ms` (migration 0004). The decisions are
`domain/data_loss.py`'s; this sub-store applies them inside the fenced transaction.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet

from sqlalchemy.engine import Connection

from lockgate.common.model.ids import CheckpointId, PipelineId, TaskId
from lockgate.common.model.offsets import OffsetRange
from lockgate.coordinator.domain.checkpoints import CheckpointRecord
from lockgate.coordinator.domain.data_loss import (
    check_restart_from,
    later_in_flight,
    offsets_after_loss,
)
from lockgate.coordinator.domain.lease import Fence
from lockgate.coordinator.domain.states import CheckpointState, transition_checkpoint
from lockgate.coordinator.store.checkpoint_aborts import apply_abort
from lockgate.coordinator.store.engine import Database, db_now_ms
from lockgate.coordinator.store.offset_store import write_next_offsets
from lockgate.coordinator.store.rows import (
    checkpoint_states,
    move_checkpoint,
    read_checkpoint,
    read_pipeline,
    read_precommit_ranges,
    resolve_data_loss,
    unresolved_data_loss,
)
from lockgate.coordinator.store.tables import checkpoint_tasks


def _mark_lost(
    conn: Connection,
    pipeline_id: PipelineId,
    checkpoint_id: CheckpointId,
    *,
    lost_tasks: AbstractSet[TaskId],
    error: str,
) -> None:
    now = db_now_ms()
    move_checkpoint(
        conn,
        pipeline_id,
        checkpoint_id,
        was=CheckpointState.COMPLETE,
        to=CheckpointState.DATA_LOST,
        data_loss_error=error,
        data_lost_at_ms=now,
    )
    conn.execute(
        checkpoint_tasks.update()
        .where(
            checkpoint_tasks.c.pipeline_id == pipeline_id,
            checkpoint_tasks.c.checkpoint_id == checkpoint_id,
            checkpoint_tasks.c.task_id.in_(sorted(lost_tasks)),
        )
        .values(lost_at_ms=now)
    )


class DataLossStore:
    """Checkpoints whose committed output the broker lost, and the way past them."""

    def __init__(self, *, database: Database) -> None:
        self._db = database

    def record_data_loss(
        self,
        *,
        fence: Fence,
        pipeline_id: PipelineId,
        checkpoint_id: CheckpointId,
        lost_tasks: AbstractSet[TaskId],
        error: str,
    ) -> list[CheckpointId]:
        """COMPLETE checkpoint N goes DATA_LOST with `error` and its `lost_tasks`; the later
        COMPLETE ones go DATA_LOST whole (their handles aborted by the caller first), the
        later TRIGGERED ones abort, and the pipeline's restore offsets go back to the start
        of the lost ranges (`offsets_after_loss`). Leader-only; idempotent. Returns the
        later checkpoints it took along."""
        with self._db.transaction(fence=fence) as conn:
            read_pipeline(conn, pipeline_id, for_update=True)
            checkpoint = read_checkpoint(conn, pipeline_id, checkpoint_id)
            transition_checkpoint(checkpoint.state, CheckpointState.DATA_LOST)
            if checkpoint.state is CheckpointState.DATA_LOST:
                return []
            complete, triggered = later_in_flight(
                checkpoint_id, checkpoint_states(conn, pipeline_id)
            )
            _mark_lost(conn, pipeline_id, checkpoint_id, lost_tasks=lost_tasks, error=error)
            for later in complete:
                _mark_lost(
                    conn,
                    pipeline_id,
                    later,
                    lost_tasks=read_checkpoint(conn, pipeline_id, later).task_ids,
                    error=f"not committed: checkpoint {checkpoint_id} before it lost its"
                    " records, and this one's would follow the gap; its transactions were"
                    " aborted and its ranges are read again",
                )
            if triggered:
                apply_abort(
                    conn,
                    pipeline_id,
                    triggered[0],
                    f"checkpoint {checkpoint_id} before it lost its records",
                )
            ranges = read_precommit_ranges(conn, pipeline_id, [checkpoint_id, *complete])
            mine = [(t, tp, s, e) for c, t, tp, s, e in ranges if c == checkpoint_id]
            write_next_offsets(
                conn,
                pipeline_id,
                offsets_after_loss(
                    ranges_of_lost=mine,
                    lost_tasks=lost_tasks,
                    ranges_after=[(tp, s) for c, _, tp, s, _ in ranges if c != checkpoint_id],
                ),
                checkpoint_id=None,
            )
            return [*complete, *triggered]

    def blocking_loss(self, *, pipeline_id: PipelineId) -> CheckpointRecord | None:
        """The pipeline's DATA_LOST checkpoint nobody moved past yet (it is FAILED), if any."""
        with self._db.read() as conn:
            return unresolved_data_loss(conn, pipeline_id)

    def lost_ranges(
        self, *, pipeline_id: PipelineId, checkpoint_id: CheckpointId
    ) -> list[OffsetRange]:
        """The source ranges of DATA_LOST checkpoint N whose output was lost."""
        with self._db.read() as conn:
            lost = read_checkpoint(conn, pipeline_id, checkpoint_id).lost_tasks
            return [
                OffsetRange(tp.topic, tp.partition, start, end)
                for _, task, tp, start, end in read_precommit_ranges(
                    conn, pipeline_id, [checkpoint_id]
                )
                if task in lost
            ]


def move_past_data_loss(
    conn: Connection, pipeline_id: PipelineId, checkpoint_id: CheckpointId
) -> CheckpointRecord:
    """Let the pipeline trigger again after DATA_LOST checkpoint N: it resumes from the
    offsets `record_data_loss` wrote (the lost ranges are read again). FailedPrecondition
    unless N is its unresolved DATA_LOST checkpoint. Inside the caller's transaction, which
    holds the pipeline row (`PipelineStore.restart_pipeline`'s)."""
    lost = check_restart_from(
        unresolved_data_loss(conn, pipeline_id), checkpoint_id, pipeline=pipeline_id
    )
    resolve_data_loss(conn, pipeline_id)
    return lost


__all__ = ["DataLossStore", "move_past_data_loss"]
