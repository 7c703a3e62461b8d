"""Pruning a pipeline's checkpoint history inside the transaction that made a checkpoint
final (`domain/history.py` decides which go). Deleting a checkpoints row takes its
`checkpoint_tasks`, `precommit_offsets` and `precommit_handles` rows along (ON DELETE
CASCADE)."""

from __future__ import annotations

import functools
from collections.abc import Iterable

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from lockgate.common.model.ids import CheckpointId, PipelineId
from lockgate.coordinator.domain.history import HistoryEntry, checkpoints_to_prune, history_slack
from lockgate.coordinator.domain.states import CheckpointState
from lockgate.coordinator.store.keyed import padded_chunks
from lockgate.coordinator.store.rows import of_checkpoints_in
from lockgate.coordinator.store.tables import checkpoint_tasks, checkpoints


# Of each pipeline, the span of its checkpoint ids: one scalar subquery per end. SQLite
# reads a min() or a max() alone off the index's end, but walks the whole range for both in
# one aggregate. The pipelines whose checkpoints a write made final are read in one
# statement, a UNION ALL of one row per pipeline tagged with its position (a statement per
# pipeline was most of the pruning's cost in a report batch mixing many, issue 14), built
# once per size as `keyed.py`'s, padded as its keys (`padded_chunks`: at most 64 rows a
# statement, and SQLite allows 500 terms in a compound SELECT).
@functools.lru_cache(maxsize=16)
def _spans(size: int) -> sa.Executable:
    return sa.union_all(
        *(
            sa.select(
                sa.literal_column(str(i)).label("position"),
                *(
                    sa.select(end(checkpoints.c.checkpoint_id))
                    .where(checkpoints.c.pipeline_id == sa.bindparam(f"pipeline_{i}"))
                    .scalar_subquery()
                    for end in (sa.func.min, sa.func.max)
                ),
            )
            for i in range(size)
        )
    )


def prune_histories(conn: Connection, pipeline_ids: Iterable[PipelineId], *, keep: int) -> int:
    """Delete each of these pipelines' final checkpoints older than its newest `keep` final
    ones once the pipeline holds more than `keep` plus a tenth of it (`history_slack`);
    return how many. The caller holds the pipelines' row locks.

    The slack makes the read of a whole history (up to `keep` rows, several ms at the
    default 1,000) happen once per `keep // 10` commits, not on every commit once the
    history is full; below it one read of both ends of the index decides there is nothing
    to do (one statement for all the pipelines)."""
    limit = keep + history_slack(keep)
    named = sorted(set(pipeline_ids))
    spans = {}  # the padding's rows repeat the last pipeline's
    for padded in padded_chunks(named) if named else ():
        values = {f"pipeline_{i}": p for i, p in enumerate(padded)}
        for position, oldest, newest in conn.execute(_spans(len(padded)), values):
            spans[padded[int(position)]] = (oldest, newest)
    # ids are unique: no more rows than the span
    return sum(
        _prune(conn, pipeline_id, keep=keep, limit=limit)
        for pipeline_id, (oldest, newest) in sorted(spans.items())
        if oldest is not None and int(newest) - int(oldest) + 1 > limit
    )


def _prune(conn: Connection, pipeline_id: PipelineId, *, keep: int, limit: int) -> int:
    """`prune_histories` of one pipeline whose span is past `limit`."""
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


__all__ = ["prune_histories"]
