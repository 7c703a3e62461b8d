"""The abort writes shared by every sub-store that ends checkpoints: the checkpoint store (a
failed or timed-out checkpoint), the pipeline store (a moved or restarted task) and the
data-loss store (a restart past a DATA_LOST checkpoint). `domain.checkpoints.plan_abort`
decides which checkpoints go (N and the later in-flight ones); these functions write that,
inside the caller's fenced transaction, with the pipeline row's lock held.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from lockgate.common.model.ids import CheckpointId, PipelineId, TaskId
from lockgate.coordinator.domain.checkpoints import abort_reason, plan_abort
from lockgate.coordinator.domain.states import CheckpointState
from lockgate.coordinator.store.engine import db_now_ms
from lockgate.coordinator.store.rows import (
    checkpoint_states,
    move_checkpoint,
    of_checkpoints_in,
    read_checkpoint,
)
from lockgate.coordinator.store.tables import checkpoint_tasks


def apply_abort(
    conn: Connection, pipeline_id: PipelineId, checkpoint_id: CheckpointId, reason: str
) -> list[CheckpointId]:
    """Abort N and the later in-flight checkpoints `plan_abort` takes down with it; return
    them (empty if N was already ABORTED). The caller holds the pipeline row's lock."""
    states = checkpoint_states(conn, pipeline_id)
    # Raises NotFound if N does not exist; COMMITTED ones are not in `states`.
    current = read_checkpoint(conn, pipeline_id, checkpoint_id).state
    victims = plan_abort(checkpoint_id, current=current, states=states)
    for victim in victims:
        move_checkpoint(
            conn,
            pipeline_id,
            victim,
            was=CheckpointState.TRIGGERED,
            to=CheckpointState.ABORTED,
            aborted_at_ms=db_now_ms(),
            abort_reason=abort_reason(victim, first=checkpoint_id, reason=reason),
        )
    return victims


def abort_checkpoints_of_tasks(
    conn: Connection, task_ids: AbstractSet[TaskId], *, reason: str
) -> list[tuple[PipelineId, CheckpointId]]:
    """Abort the TRIGGERED checkpoints any of these tasks is in (moved or restarted tasks:
    their new instance restarts from the last COMPLETE checkpoint), with the later ones;
    return them."""
    if not task_ids:
        return []
    rows = conn.execute(
        sa.select(checkpoint_tasks.c.pipeline_id, sa.func.min(checkpoint_tasks.c.checkpoint_id))
        .where(
            of_checkpoints_in(checkpoint_tasks, [CheckpointState.TRIGGERED]),
            checkpoint_tasks.c.task_id.in_(sorted(task_ids)),
        )
        .group_by(checkpoint_tasks.c.pipeline_id)
    ).all()
    return [
        (PipelineId(pipeline_id), aborted)
        for pipeline_id, first in rows
        for aborted in apply_abort(conn, PipelineId(pipeline_id), CheckpointId(first), reason)
    ]
