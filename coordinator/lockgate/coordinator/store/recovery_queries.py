"""The reads recovery starts from (DESIGN.md step 5): COMPLETE checkpoints still to be
committed, and transactions of checkpoints that never became COMPLETE, still to be aborted.

A new leader reads them for every pipeline; a (re)assigned task gets its share in its
restore state (`CheckpointStore.restore_states`). Plain reads, no decisions: which of
them a task gets is `domain.checkpoints.restore_states_of`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from lockgate.common.model.handles import TransactionHandle
from lockgate.common.model.ids import CheckpointId, ExecutorId, PipelineId, TaskId
from lockgate.coordinator.domain.checkpoints import LingeringTransaction, PendingCommit, TaskHandles
from lockgate.coordinator.domain.states import CheckpointState
from lockgate.coordinator.store.rows import of_checkpoints_in, opt_int, sink_handle
from lockgate.coordinator.store.tables import (
    checkpoint_tasks,
    checkpoints,
    precommit_handles,
    transactional_ids,
)

#: A task row of a checkpoint and its handles (one per Spark write partition).
_TASKS_HANDLES = sa.and_(
    precommit_handles.c.pipeline_id == checkpoint_tasks.c.pipeline_id,
    precommit_handles.c.checkpoint_id == checkpoint_tasks.c.checkpoint_id,
    precommit_handles.c.task_id == checkpoint_tasks.c.task_id,
)


# Read by every commit job (its pipeline's pending commits): built once, with the
# pipelines as an expanding bound parameter (building them cost more than running them).
_IN_PIPELINES: sa.BindParameter[Any] = sa.bindparam("pipeline_ids", expanding=True)
_COMPLETE = (
    sa.select(checkpoints.c.pipeline_id, checkpoints.c.checkpoint_id)
    .where(checkpoints.c.state == CheckpointState.COMPLETE.value)
    .order_by(checkpoints.c.pipeline_id, checkpoints.c.checkpoint_id)
)
_COMPLETE_OF = _COMPLETE.where(checkpoints.c.pipeline_id.in_(_IN_PIPELINES))


def _complete_handles(pipeline_ids: sa.BindParameter[Any] | None) -> sa.Select[Any]:
    return (
        sa.select(precommit_handles, checkpoint_tasks.c.executor_id)
        .join(checkpoint_tasks, _TASKS_HANDLES)
        .where(of_checkpoints_in(precommit_handles, [CheckpointState.COMPLETE], pipeline_ids))
        .order_by(precommit_handles.c.task_id, precommit_handles.c.transactional_id)
    )


_COMPLETE_HANDLES = _complete_handles(None)
_COMPLETE_HANDLES_OF = _complete_handles(_IN_PIPELINES)


def pending_commits(
    conn: Connection, pipeline_ids: Sequence[PipelineId] | None
) -> list[PendingCommit]:
    """COMPLETE, not COMMITTED checkpoints (of these pipelines, or all) with their handles,
    oldest first per pipeline; two queries however many there are."""
    stmt, hstmt, values = _COMPLETE, _COMPLETE_HANDLES, {}
    if pipeline_ids is not None:
        stmt, hstmt = _COMPLETE_OF, _COMPLETE_HANDLES_OF
        values = {"pipeline_ids": sorted(set(pipeline_ids))}
    complete = conn.execute(stmt, values).all()
    if not complete:
        return []
    handles: dict[tuple[str, int], dict[TaskId, list[TransactionHandle]]] = defaultdict(
        lambda: defaultdict(list)
    )
    owners: dict[tuple[str, int, TaskId], ExecutorId | None] = {}
    for h in conn.execute(hstmt, values):
        task_id = TaskId(h.task_id)
        handles[(h.pipeline_id, int(h.checkpoint_id))][task_id].append(sink_handle(h))
        owners[(h.pipeline_id, int(h.checkpoint_id), task_id)] = (
            ExecutorId(h.executor_id) if h.executor_id else None
        )
    return [
        PendingCommit(
            pipeline_id=PipelineId(pid),
            checkpoint_id=CheckpointId(int(cid)),
            handles=tuple(
                TaskHandles(task_id=t, handles=tuple(hs), executor_id=owners[(pid, int(cid), t)])
                for t, hs in sorted(handles[(pid, int(cid))].items())
            ),
        )
        for pid, cid in complete
    ]


# What the leader's pass asks on every wake, of every pipeline: built once (as `rows`' keyed
# reads: building a statement cost about twice executing it).
_PENDING_COMMIT_PIPELINES = (
    sa.select(checkpoints.c.pipeline_id)
    .distinct()
    .where(checkpoints.c.state == CheckpointState.COMPLETE.value)
)
_PENDING_COMMIT_PIPELINES_OF = _PENDING_COMMIT_PIPELINES.where(
    checkpoints.c.pipeline_id.in_(sa.bindparam("pipeline_ids", expanding=True))
)


def pending_commit_pipelines(
    conn: Connection, pipeline_ids: Sequence[PipelineId] | None
) -> frozenset[PipelineId]:
    """The pipelines (of these, or all) that `pending_commits` would name, without reading
    their handles: the leader's pass asks this on every wake, and each pipeline's commit
    job reads its own handles (the pass read every pending handle of the cluster, only to
    learn which pipelines to start a job for)."""
    if pipeline_ids is None:
        rows = conn.execute(_PENDING_COMMIT_PIPELINES)
    else:
        rows = conn.execute(
            _PENDING_COMMIT_PIPELINES_OF, {"pipeline_ids": sorted(set(pipeline_ids))}
        )
    return frozenset(PipelineId(r.pipeline_id) for r in rows)


def lingering_pipelines(
    conn: Connection, pipeline_ids: Sequence[PipelineId] | None
) -> frozenset[PipelineId]:
    """The pipelines (of these, or all) that `lingering_transactions` would name for their
    ABORTED checkpoints (it gives one entry per task row at least), without reading the
    entries: the leader's pass asks this on every wake, and the entries only of those."""
    if pipeline_ids is None:
        rows = conn.execute(_LINGERING_PIPELINES)
    else:
        rows = conn.execute(_LINGERING_PIPELINES_OF, {"pipeline_ids": sorted(set(pipeline_ids))})
    return frozenset(PipelineId(r.pipeline_id) for r in rows)


def _lingering_pipelines_of(
    pipeline_ids: Sequence[PipelineId] | sa.BindParameter[Any] | None,
) -> sa.Select[Any]:
    return (
        sa.select(checkpoint_tasks.c.pipeline_id)
        .distinct()
        .where(
            of_checkpoints_in(checkpoint_tasks, [CheckpointState.ABORTED], pipeline_ids),
            checkpoint_tasks.c.abort_acked_at_ms.is_(None),
        )
    )


_LINGERING_PIPELINES = _lingering_pipelines_of(None)
# The trigger's read of its due pipelines, on every pass that finds one due: built per call,
# it cost twice as much as the trigger's other read of its checkpoints, running included.
_LINGERING_PIPELINES_OF = _lingering_pipelines_of(sa.bindparam("pipeline_ids", expanding=True))
# Both of the pass's questions in one statement: which pipelines have commits to send, and
# which aborts (a statement each was two of the seven of every pass).
_PASS_DUTIES = sa.union_all(
    sa.select(
        sa.literal("commit").label("duty"), _PENDING_COMMIT_PIPELINES.subquery().c.pipeline_id
    ),
    sa.select(sa.literal("abort").label("duty"), _LINGERING_PIPELINES.subquery().c.pipeline_id),
)


def pass_duties(conn: Connection) -> tuple[frozenset[PipelineId], frozenset[PipelineId]]:
    """Every pipeline that `pending_commit_pipelines` names, and every one that
    `lingering_pipelines` does, in one read."""
    duties: dict[str, set[PipelineId]] = {"commit": set(), "abort": set()}
    for duty, pipeline_id in conn.execute(_PASS_DUTIES):
        duties[duty].add(PipelineId(pipeline_id))
    return frozenset(duties["commit"]), frozenset(duties["abort"])


def lingering_transactions(
    conn: Connection,
    pipeline_ids: Sequence[PipelineId] | None,
    states: Sequence[CheckpointState],
) -> list[LingeringTransaction]:
    """Transactions of checkpoints in `states` (ABORTED, maybe TRIGGERED) whose abort is
    not recorded yet, of these pipelines or all (see `LingeringTransaction`)."""
    stmt = (
        sa.select(
            checkpoint_tasks.c.pipeline_id,
            checkpoint_tasks.c.checkpoint_id,
            checkpoint_tasks.c.task_id,
            checkpoint_tasks.c.transactional_id,
            checkpoints.c.state,
            precommit_handles.c.transactional_id.label("handle_transactional_id"),
            precommit_handles.c.producer_id,
            precommit_handles.c.producer_epoch,
            transactional_ids.c.checkpoint_id.label("slot_checkpoint_id"),
        )
        .select_from(
            checkpoint_tasks.join(checkpoints)  # on its foreign key
            # A reported pre-commit has one handle per Spark write partition, each on
            # its own id "<slot id>-<k>": abort exactly those. An unreported one has
            # none; its row keeps the slot's id and no producer id.
            .outerjoin(precommit_handles, _TASKS_HANDLES)
            .outerjoin(
                transactional_ids,
                transactional_ids.c.transactional_id == checkpoint_tasks.c.transactional_id,
            )
        )
        .where(
            of_checkpoints_in(checkpoint_tasks, states, pipeline_ids),
            checkpoint_tasks.c.abort_acked_at_ms.is_(None),
        )
        .order_by(
            checkpoint_tasks.c.pipeline_id,
            checkpoint_tasks.c.checkpoint_id,
            checkpoint_tasks.c.task_id,
            precommit_handles.c.transactional_id,
        )
    )
    return [
        LingeringTransaction(
            pipeline_id=PipelineId(r.pipeline_id),
            checkpoint_id=CheckpointId(int(r.checkpoint_id)),
            checkpoint_state=CheckpointState(r.state),
            task_id=TaskId(r.task_id),
            transactional_id=r.handle_transactional_id or r.transactional_id,
            producer_id=opt_int(r.producer_id),
            producer_epoch=opt_int(r.producer_epoch),
            slot_reused=r.slot_checkpoint_id is not None
            and int(r.slot_checkpoint_id) != int(r.checkpoint_id),
        )
        for r in conn.execute(stmt)
    ]
