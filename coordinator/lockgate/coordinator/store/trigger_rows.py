"""Starting the next checkpoint of many pipelines inside one transaction: each step is a
few statements for the whole set, however many pipelines it names (issue 14: a pass at
scale finds tens of pipelines due at once, and a handful of reads and writes per pipeline
was most of what a trigger cost the leader).

The reads are the decision's snapshot under the pipelines' locks (`domain.checkpoints.
plan_trigger` decides each pipeline on its own); the writes are one `executemany` per
table for every pipeline that may start one. A pipeline that may not is answered with its
refusal and nothing of it is written.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from lockgate.common.model.ids import LeaderEpoch, PipelineId, split_task_id
from lockgate.coordinator.domain.checkpoints import CheckpointRecord, TriggerPlan, plan_trigger
from lockgate.coordinator.domain.errors import FailedPrecondition, NotFound
from lockgate.coordinator.domain.states import CheckpointState
from lockgate.coordinator.store.bulk import insert_rows, upsert
from lockgate.coordinator.store.engine import db_now_ms
from lockgate.coordinator.store.rows import (
    checkpoint_record,
    checkpoint_states_of,
    lock_pipelines,
    pipeline_not_found,
    unresolved_data_losses,
)
from lockgate.coordinator.store.tables import (
    checkpoint_tasks,
    checkpoints,
    pipelines,
    transactional_ids,
)
from lockgate.coordinator.store.trigger_queries import tasks_of

Triggered = CheckpointRecord | FailedPrecondition | NotFound

_IN_PIPELINES: sa.BindParameter[Any] = sa.bindparam("pipeline_ids", expanding=True)
# Per (pipeline, task index, slot): the state of the checkpoint that last used the slot.
_SLOT_USE = (
    sa.select(
        transactional_ids.c.pipeline_id,
        transactional_ids.c.task_index,
        transactional_ids.c.slot,
        checkpoints.c.state,
    )
    .select_from(
        transactional_ids.outerjoin(
            checkpoints,
            sa.and_(
                checkpoints.c.pipeline_id == transactional_ids.c.pipeline_id,
                checkpoints.c.checkpoint_id == transactional_ids.c.checkpoint_id,
            ),
        )
    )
    .where(transactional_ids.c.pipeline_id.in_(_IN_PIPELINES))
)
_NEXT_CHECKPOINT_ID = (
    pipelines.update()
    .where(pipelines.c.pipeline_id == sa.bindparam("the_pipeline_id"))
    .values(next_checkpoint_id=pipelines.c.next_checkpoint_id + 1)
)
# Returns the rows as written (the times are the database's): a read of them again was
# one more statement in every trigger.
_NEW_CHECKPOINT = (
    checkpoints.insert()
    .values(state=CheckpointState.TRIGGERED.value, triggered_at_ms=db_now_ms())
    .returning(*checkpoints.c)
)


def trigger_pipelines(
    conn: Connection, pipeline_ids: Sequence[PipelineId], leader_epoch: LeaderEpoch
) -> dict[PipelineId, Triggered]:
    """Start the next checkpoint of each of these pipelines that may start one, inside the
    caller's fenced transaction; each is answered with its checkpoint as written (its
    tasks from the plan) or its refusal. Pipelines are locked in name order first."""
    ids = sorted(set(pipeline_ids))
    found = lock_pipelines(conn, ids)
    present = sorted(found)
    losses = unresolved_data_losses(conn, present)
    tasks = tasks_of(conn, present)
    states = checkpoint_states_of(conn, present)
    slot_use = _slot_use(conn, present)
    answers: dict[PipelineId, Triggered] = {}
    plans: list[TriggerPlan] = []
    for pipeline_id in ids:
        pipeline = found.get(pipeline_id)
        if pipeline is None:
            answers[pipeline_id] = pipeline_not_found(pipeline_id)
            continue
        lost = losses.get(pipeline_id)
        if lost is not None:
            # The decision to trigger may predate a loss recorded since (another job's
            # commit): checked here, under the pipeline row's lock.
            answers[pipeline_id] = FailedPrecondition(
                f"pipeline {pipeline_id!r} is FAILED: checkpoint {lost} lost its data;"
                " restart it from that checkpoint or set its offsets",
                reason="PIPELINE_FAILED",
            )
            continue
        try:
            plans.append(
                plan_trigger(
                    pipeline=pipeline,
                    tasks=tasks.get(pipeline_id, []),
                    states=states.get(pipeline_id, {}),
                    slot_use=slot_use.get(pipeline_id, {}),
                )
            )
        except FailedPrecondition as refused:  # nothing of it written
            answers[pipeline_id] = refused
    if plans:
        # The rows as written, their tasks from the plans.
        by_key = {
            (c.pipeline_id, c.checkpoint_id): c for c in _write_triggers(conn, plans, leader_epoch)
        }
        for plan in plans:
            answers[plan.pipeline_id] = dataclasses.replace(
                by_key[(plan.pipeline_id, plan.checkpoint_id)],
                tasks=tuple(sorted(plan.tasks, key=lambda t: t.task_id)),
            )
    return {pipeline_id: answers[pipeline_id] for pipeline_id in ids}


def _slot_use(
    conn: Connection, pipeline_ids: Sequence[PipelineId]
) -> dict[PipelineId, dict[int, dict[int, CheckpointState | None]]]:
    """pipeline -> task index -> slot -> state of the checkpoint that last used the slot."""
    result: dict[PipelineId, dict[int, dict[int, CheckpointState | None]]] = defaultdict(
        lambda: defaultdict(dict)
    )
    if pipeline_ids:
        for pipeline_id, index, slot, state in conn.execute(
            _SLOT_USE, {"pipeline_ids": list(pipeline_ids)}
        ):
            result[PipelineId(pipeline_id)][int(index)][int(slot)] = (
                CheckpointState(state) if state else None
            )
    return result


def _write_triggers(
    conn: Connection, plans: Sequence[TriggerPlan], leader_epoch: LeaderEpoch
) -> list[CheckpointRecord]:
    """Each plan's checkpoint N TRIGGERED, its tasks' rows and their slots' ids: one
    statement per table for all of them. Returns the checkpoints' rows as written, without
    their tasks."""
    conn.execute(_NEXT_CHECKPOINT_ID, [{"the_pipeline_id": p.pipeline_id} for p in plans])
    written = conn.execute(
        _NEW_CHECKPOINT,
        [
            {
                "pipeline_id": p.pipeline_id,
                "checkpoint_id": p.checkpoint_id,
                "leader_epoch": leader_epoch,
            }
            for p in plans
        ],
    )
    insert_rows(
        conn,
        checkpoint_tasks,
        [
            {
                "pipeline_id": p.pipeline_id,
                "checkpoint_id": p.checkpoint_id,
                "task_id": t.task_id,
                "task_generation": t.task_generation,
                "executor_id": t.executor_id,
                "slot": t.slot,
                "transactional_id": t.transactional_id,
            }
            for p in plans
            for t in p.tasks
        ],
    )
    upsert(
        conn,
        transactional_ids,
        [
            {
                "transactional_id": t.transactional_id,
                "pipeline_id": p.pipeline_id,
                "task_index": split_task_id(t.task_id)[1],
                "slot": t.slot,
                "checkpoint_id": p.checkpoint_id,
                "producer_id": None,
                "producer_epoch": None,
            }
            for p in plans
            for t in p.tasks
        ],
        # One row per (task, slot): the slot's latest id, whichever generation wrote the
        # one before (`transactional_ids.py`, the bound on distinct ids).
        key=["pipeline_id", "task_index", "slot"],
    )
    return [checkpoint_record(row) for row in written]


__all__ = ["Triggered", "trigger_pipelines"]
