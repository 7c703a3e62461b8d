"""Pruning a pipeline's checkpoint history inside the transaction that made a checkpoint
final (`domain/history.py` decides which go). Deleting a checkpoints row takes its
`checkpoint_tasks`, `precommit_offsets` and `precommit_handles` rows along (ON DELETE
CASCADE)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from lockgate.common.model.ids import CheckpointId, PipelineId
from lockgate.coordinator.domain.history import HistoryEntry, checkpoints_to_prune
from lockgate.coordinator.domain.states import CheckpointState
from lockgate.coordinator.store.tables import checkpoint_tasks, checkpoints


def prune_history(conn: Connection, pipeline_id: PipelineId, *, keep: int) -> int:
    """Delete the pipeline's final checkpoints older than its newest `keep` final ones;
    return how many. The caller holds the pipeline row's lock."""
    outstanding = sa.select(checkpoint_tasks.c.checkpoint_id).where(
        checkpoint_tasks.c.pipeline_id == pipeline_id,
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
    if len(rows) <= keep:
        return 0
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
