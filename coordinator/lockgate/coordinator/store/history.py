"""Pruning a pipeline's checkpoint history inside the transaction that made a checkpoint
final (`domain/history.py` decides which go). Deleting a checkpoints row takes its
`checkpoint_tasks`, `precommit_offsets` and `precommit_handles` rows along (ON DELETE
CASCADE)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from lockgate.common.model.ids import CheckpointId, PipelineId
from lockgate.coordinator.domain.history import HistoryEntry, checkpoints_to_prune, history_slack
from lockgate.coordinator.domain.states import CheckpointState
from lockgate.coordinator.store.rows import of_checkpoints_in
from lockgate.coordinator.store.tables import checkpoint_tasks, checkpoints

# The span of the pipeline's checkpoint ids: one scalar subquery per end, in one
# statement. SQLite reads a min() or a max() alone off the index's end, but walks the whole
# range for both in one aggregate; two statements cost a round trip more on PostgreSQL.
# Built once (every commit reads it), as `rows`' keyed reads.
_SPAN = sa.select(
    *(
        sa.select(end(checkpoints.c.checkpoint_id))
        .where(checkpoints.c.pipeline_id == sa.bindparam("pipeline_id"))
        .scalar_subquery()
        for end in (sa.func.min, sa.func.max)
    )
)


def prune_history(conn: Connection, pipeline_id: PipelineId, *, keep: int) -> int:
    """Delete the pipeline's final checkpoints older than its newest `keep` final ones once
    the pipeline holds more than `keep` plus a tenth of it (`history_slack`); return how
    many. The caller holds the pipeline row's lock.

    The slack makes the read of the whole history (up to `keep` rows, several ms at the
    default 1,000) happen once per `keep // 10` commits, not on every commit once the
    history is full; below it one read of both ends of the index decides there is nothing
    to do."""
    limit = keep + history_slack(keep)
    oldest, newest = conn.execute(_SPAN, {"pipeline_id": pipeline_id}).one()
    if oldest is None or int(newest) - int(oldest) + 1 <= limit:
        return 0  # ids are unique: no more rows than the span
    total = conn.execute(
        sa.select(sa.func.count()).where(checkpoints.c.pipeline_id == pipeline_id)
    ).scalar_one()
    if total <= limit:
        return 0
    # Of the ABORTED checkpoints only (a COMMITTED one's task rows have no abort to ack: a
    # subquery over every task row the pipeline ever wrote was most of a commit's cost).
    outstanding = sa.select(checkpoint_tasks.c.checkpoint_id).where(
        of_checkpoints_in(checkpoint_tasks, [CheckpointState.ABORTED], [pipeline_id]),
        checkpoint_tasks.c.abort_acked_at_ms.is_(None),
    )
    rows = conn.execute(
        sa.select(
            checkpoints.c.checkpoint_id,
            checkpoints.c.state,
            checkpoints.c.data_loss_resolved_at_ms,
            checkpoints.c.checkpoint_id.in_(outstanding).label("outstanding"),
        ).where(checkpoints.c.pipeline_id == pipeline_id)
    ).all()
    doomed = checkpoints_to_prune(
        (
            HistoryEntry(
                checkpoint_id=CheckpointId(int(r.checkpoint_id)),
                state=CheckpointState(r.state),
                aborts_outstanding=bool(r.outstanding),
                data_loss_resolved=r.data_loss_resolved_at_ms is not None,
            )
            for r in rows
        ),
        keep=keep,
    )
    if doomed:
        # ON DELETE CASCADE needs SQLite's foreign_keys pragma, which the engine sets.
        conn.execute(
            checkpoints.delete().where(
                checkpoints.c.pipeline_id == pipeline_id,
                checkpoints.c.checkpoint_id.in_(doomed),
            )
        )
    return len(doomed)


__all__ = ["prune_history"]
