"""What the leader's trigger decision reads, for the pipelines its schedule found due
(`herder/trigger_schedule.py`), in one read transaction whatever their number: their tasks,
their newest and unfinished checkpoints, which have aborts still to send, and where their
next checkpoints start (a read per
pipeline cost the leader a round trip per pipeline per pass; a read of every pipeline cost
it the whole cluster per pass)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from lockgate.common.model.ids import CheckpointId, PipelineId
from lockgate.common.model.offsets import TopicPartition
from lockgate.coordinator.domain.checkpoints import CheckpointRecord
from lockgate.coordinator.domain.pipelines import TaskRecord
from lockgate.coordinator.domain.states import CheckpointState
from lockgate.coordinator.store.offset_store import next_offsets_of
from lockgate.coordinator.store.recovery_queries import lingering_pipelines
from lockgate.coordinator.store.rows import checkpoint_record, task_record
from lockgate.coordinator.store.tables import checkpoints, pipelines, tasks

#: Checkpoints that are not final, or not final for the trigger decision (an unresolved
#: DATA_LOST one stops its pipeline).
_OPEN_STATES = (CheckpointState.TRIGGERED, CheckpointState.COMPLETE, CheckpointState.DATA_LOST)


# Read on every pass that finds a pipeline due: built once with bound parameters, as `rows`'
# keyed reads (building a statement cost about twice executing it).
_IN_PIPELINES: sa.BindParameter[Any] = sa.bindparam("pipeline_ids", expanding=True)
_NEWEST = sa.select(checkpoints).join(
    pipelines,
    sa.and_(
        pipelines.c.pipeline_id == checkpoints.c.pipeline_id,
        checkpoints.c.checkpoint_id == pipelines.c.next_checkpoint_id - 1,
    ),
)
_UNFINISHED = sa.select(checkpoints).where(checkpoints.c.state.in_([s.value for s in _OPEN_STATES]))
# Both in one statement (a round trip less on every pass that finds a pipeline due), each
# half still its own index read: an OR of the two conditions walked every checkpoint.
_RECENT = sa.union_all(_NEWEST, _UNFINISHED)
_RECENT_OF = sa.union_all(
    _NEWEST.where(checkpoints.c.pipeline_id.in_(_IN_PIPELINES)),
    _UNFINISHED.where(checkpoints.c.pipeline_id.in_(_IN_PIPELINES)),
)
_TASKS_OF = (
    sa.select(tasks)
    .where(tasks.c.pipeline_id.in_(_IN_PIPELINES))
    .order_by(tasks.c.pipeline_id, tasks.c.task_index)
)


@dataclass(frozen=True)
class TriggerInputs:
    """What `domain.checkpoints.trigger_due` reads of some pipelines, as one snapshot."""

    tasks: dict[PipelineId, list[TaskRecord]]
    """Each pipeline's tasks, by index (only those the read's `allowed` let through)."""
    recent: dict[PipelineId, list[CheckpointRecord]]
    """Each pipeline's newest and unfinished checkpoints (`trigger_snapshot`)."""
    lingering: frozenset[PipelineId]
    """Those with a transaction of an ABORTED checkpoint whose abort is not acked yet."""
    start_offsets: dict[PipelineId, dict[TopicPartition, int]]
    """Where each let through would start its partitions (those with a restore position): the next
    checkpoint's start offsets, as none of these is triggered unless no checkpoint of it is
    in flight (a pre-commit from other offsets is refused at its report)."""


def trigger_snapshot(
    conn: Connection, pipeline_ids: Sequence[PipelineId] | None = None
) -> dict[PipelineId, list[CheckpointRecord]]:
    """Per pipeline with any (of `pipeline_ids`, None: of all), newest first and without
    their tasks (`trigger_due` reads states and times only): its newest checkpoint and
    every one in `_OPEN_STATES`. Every checkpoint in flight counts against the in-flight
    limit, however old."""
    if pipeline_ids is None:
        rows = conn.execute(_RECENT)
    else:
        rows = conn.execute(_RECENT_OF, {"pipeline_ids": sorted(set(pipeline_ids))})
    found: dict[tuple[PipelineId, CheckpointId], CheckpointRecord] = {}
    for row in rows:  # the newest may be unfinished too: once
        record = checkpoint_record(row)
        found[(record.pipeline_id, record.checkpoint_id)] = record
    result: dict[PipelineId, list[CheckpointRecord]] = defaultdict(list)
    for (pipeline_id, _), record in sorted(found.items(), reverse=True):
        result[pipeline_id].append(record)
    return dict(result)


#: Whether a pipeline may be triggered as far as its recent checkpoints and lingering
#: aborts say (`domain.checkpoints.checkpoints_allow_trigger`).
AllowedByCheckpoints = Callable[[PipelineId, Sequence[CheckpointRecord], bool], bool]


def tasks_of(
    conn: Connection, pipeline_ids: Sequence[PipelineId]
) -> dict[PipelineId, list[TaskRecord]]:
    """Each of these pipelines' tasks, by index (a pipeline without any is absent)."""
    by_pipeline: dict[PipelineId, list[TaskRecord]] = defaultdict(list)
    if pipeline_ids:
        for row in conn.execute(_TASKS_OF, {"pipeline_ids": sorted(set(pipeline_ids))}):
            task = task_record(row)
            by_pipeline[task.pipeline_id].append(task)
    return dict(by_pipeline)


def trigger_inputs(
    conn: Connection,
    pipeline_ids: Sequence[PipelineId],
    allowed: AllowedByCheckpoints | None = None,
) -> TriggerInputs:
    """The recent checkpoints and lingering aborts of these pipelines only, and the tasks
    and start offsets of those `allowed` lets through (None: all). A pipeline due while its
    checkpoint is in flight, the usual case at short intervals, costs a pass two small reads
    instead of a row per task and per partition."""
    ids = sorted(set(pipeline_ids))
    recent = trigger_snapshot(conn, ids)
    lingering = lingering_pipelines(conn, ids)
    if allowed is not None:
        ids = [p for p in ids if allowed(p, recent.get(p, []), p in lingering)]
    return TriggerInputs(
        tasks=tasks_of(conn, ids),
        recent=recent,
        lingering=lingering,
        start_offsets=next_offsets_of(conn, ids) if ids else {},
    )
