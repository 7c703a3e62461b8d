"""Pre-commit records: checking a batch of reports against what their checkpoints asked,
and writing the accepted ones (tables `precommit_offsets`, `precommit_handles`, the
producer ids of `transactional_ids`, `checkpoint_tasks.precommitted_at_ms`). Called inside
`CheckpointStore`'s fenced transactions, which write COMPLETE after them."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import TypedDict

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from lockgate.common.model.ids import CheckpointId, ExecutorId, Generation, PipelineId, TaskId
from lockgate.common.model.offsets import TopicPartition
from lockgate.coordinator.domain.checkpoints import CheckpointRecord, Precommit, PrecommitCount
from lockgate.coordinator.domain.errors import NotFound
from lockgate.coordinator.domain.pipelines import TaskRecord
from lockgate.coordinator.domain.precommits import (
    CheckpointKey,
    accept_precommits,
    group_by_checkpoint,
)
from lockgate.coordinator.domain.states import CheckpointState
from lockgate.coordinator.store.engine import db_now_ms
from lockgate.coordinator.store.offset_store import next_offsets_of
from lockgate.coordinator.store.rows import (
    executor_generations,
    find_checkpoint,
    read_pipeline,
    read_tasks_by_id,
)
from lockgate.coordinator.store.tables import (
    checkpoint_tasks,
    checkpoints,
    precommit_handles,
    precommit_offsets,
    transactional_ids,
)

# Every report batch runs these: built once with bound parameters, as `rows`' keyed reads
# (building a statement cost about twice executing it).
_EARLIER_TRIGGERED_RANGES = (
    sa.select(
        precommit_offsets.c.topic, precommit_offsets.c.partition, precommit_offsets.c.end_offset
    )
    .where(
        precommit_offsets.c.pipeline_id == sa.bindparam("pipeline_id"),
        precommit_offsets.c.checkpoint_id.in_(
            # The earlier TRIGGERED checkpoints first (none, as a rule), then their ranges:
            # a join led by the ranges walked every earlier checkpoint's, so a report's cost
            # grew with the pipeline's history.
            sa.select(checkpoints.c.checkpoint_id)
            .where(
                checkpoints.c.pipeline_id == sa.bindparam("pipeline_id"),
                checkpoints.c.checkpoint_id < sa.bindparam("checkpoint_id"),
                checkpoints.c.state == CheckpointState.TRIGGERED.value,
            )
            .scalar_subquery()
        ),
    )
    .order_by(precommit_offsets.c.checkpoint_id)
)
_PRECOMMIT_COUNTS = (
    sa.select(
        checkpoint_tasks.c.checkpoint_id,
        sa.func.count(),
        sa.func.count(checkpoint_tasks.c.precommitted_at_ms),
    )
    .where(
        checkpoint_tasks.c.pipeline_id == sa.bindparam("pipeline_id"),
        checkpoint_tasks.c.checkpoint_id.in_(sa.bindparam("checkpoint_ids", expanding=True)),
    )
    .group_by(checkpoint_tasks.c.checkpoint_id)
)
_MARK_PRECOMMITTED = (
    checkpoint_tasks.update()
    .where(
        checkpoint_tasks.c.pipeline_id == sa.bindparam("the_pipeline_id"),
        checkpoint_tasks.c.checkpoint_id == sa.bindparam("the_checkpoint_id"),
        checkpoint_tasks.c.task_id.in_(sa.bindparam("task_ids", expanding=True)),
    )
    .values(precommitted_at_ms=db_now_ms())
)
_PRODUCER_IDS = (
    transactional_ids.update()
    .where(transactional_ids.c.transactional_id == sa.bindparam("txid"))
    .values(
        producer_id=sa.bindparam("pid"),
        producer_epoch=sa.bindparam("pepoch"),
        updated_at_ms=db_now_ms(),
    )
)


def store_precommits(conn: Connection, precommits: Sequence[Precommit]) -> None:
    """Check and store pre-commits with a handful of statements per checkpoint, however
    many tasks report (a 100-task checkpoint is one round of bulk writes)."""
    accepted = accept_precommits(precommits, **precommit_snapshot(conn, precommits))
    for key, fresh in accepted.items():
        write_precommits(conn, key, fresh)


class PrecommitSnapshot(TypedDict):
    """What the pre-commit rules read, as `accept_precommits` takes it."""

    checkpoints: dict[CheckpointKey, CheckpointRecord | None]
    executor_generations: dict[ExecutorId, Generation]
    tasks: dict[TaskId, TaskRecord]
    resume_offsets: dict[CheckpointKey, dict[TopicPartition, int]]
    sink_servers: dict[PipelineId, str]


def precommit_snapshot(conn: Connection, precommits: Sequence[Precommit]) -> PrecommitSnapshot:
    """What the pre-commit rules read (`domain/precommits.py`), for these reports.

    Only what concerns the reporting tasks: each checkpoint with their rows alone, and the
    resume offsets of their partitions alone (the rules look at no other task's), so a
    batch costs its own size, not its checkpoints' (a 100-task checkpoint's rows and
    partitions on every batch were most of a report's cost)."""
    groups = group_by_checkpoint(precommits)
    sink_servers = _sink_servers(conn, sorted({p.pipeline_id for p in precommits}))
    tasks = read_tasks_by_id(conn, [p.task_id for p in precommits])
    return PrecommitSnapshot(
        checkpoints={
            key: find_checkpoint(conn, *key, task_ids={p.task_id for p in group})
            for key, group in sorted(groups.items())
        },
        executor_generations=executor_generations(conn, (p.executor_id for p in precommits)),
        tasks=tasks,
        resume_offsets={
            key: _start_offsets(
                conn,
                *key,
                partitions={
                    tp for p in group if p.task_id in tasks for tp in tasks[p.task_id].partitions
                },
            )
            for key, group in sorted(groups.items())
        },
        sink_servers=sink_servers,
    )


def _sink_servers(conn: Connection, pipeline_ids: Sequence[PipelineId]) -> dict[PipelineId, str]:
    """Each existing pipeline's sink cluster (a deleted one has none, nor checkpoints),
    read FOR UPDATE: a pipeline's pre-commits and completions are written one transaction
    at a time (the same read locked the rows and gave the servers: once per batch)."""
    servers: dict[PipelineId, str] = {}
    for pipeline_id in pipeline_ids:
        with contextlib.suppress(NotFound):
            pipeline = read_pipeline(conn, pipeline_id, for_update=True)
            servers[pipeline_id] = pipeline.spec.sink.bootstrap_servers
    return servers


def _start_offsets(
    conn: Connection,
    pipeline_id: PipelineId,
    checkpoint_id: CheckpointId,
    *,
    partitions: AbstractSet[TopicPartition],
) -> dict[TopicPartition, int]:
    """Where checkpoint N starts each of these partitions that has a known start: where the
    previous checkpoint ended. That is the pipeline's restore offsets (the last COMPLETE
    one's ends, or a reset), unless an earlier checkpoint still TRIGGERED pre-committed the
    partition: then its end (the leader triggers nothing while one is TRIGGERED, so only
    the store's own callers reach that case)."""
    if not partitions:
        return {}
    starts = next_offsets_of(conn, [pipeline_id], partitions=partitions).get(pipeline_id, {})
    earlier = conn.execute(
        _EARLIER_TRIGGERED_RANGES, {"pipeline_id": pipeline_id, "checkpoint_id": checkpoint_id}
    ).all()
    for topic, partition, end in earlier:
        if (tp := TopicPartition(topic, int(partition))) in partitions:
            starts[tp] = int(end)
    return starts


def precommit_counts(
    conn: Connection, pipeline_id: PipelineId, checkpoint_ids: Sequence[CheckpointId]
) -> dict[CheckpointId, PrecommitCount]:
    """Of each of these checkpoints, how many tasks it was triggered for and how many have
    pre-committed it, in one read (no task rows: completion needs only the counts)."""
    if not checkpoint_ids:
        return {}
    rows = conn.execute(
        _PRECOMMIT_COUNTS, {"pipeline_id": pipeline_id, "checkpoint_ids": sorted(checkpoint_ids)}
    ).all()
    counts = {CheckpointId(int(c)): PrecommitCount(int(n), int(done)) for c, n, done in rows}
    return {c: counts.get(c, PrecommitCount(0, 0)) for c in checkpoint_ids}


def write_precommits(conn: Connection, key: CheckpointKey, fresh: Sequence[Precommit]) -> None:
    pipeline_id, checkpoint_id = key
    where = {"pipeline_id": pipeline_id, "checkpoint_id": checkpoint_id}
    offset_rows = [
        {
            **where,
            "topic": r.topic,
            "partition": r.partition,
            "task_id": p.task_id,
            "start_offset": r.start_offset,
            "end_offset": r.end_offset,
        }
        for p in fresh
        for r in p.offsets
    ]
    if offset_rows:
        conn.execute(precommit_offsets.insert(), offset_rows)
    handle_rows = [
        {
            **where,
            "task_id": p.task_id,
            "transactional_id": h.transactional_id,
            "kind": "kafka",  # the column leaves room for other sinks; v1 has Kafka only
            "producer_id": h.producer_id,
            "producer_epoch": h.producer_epoch,
        }
        for p in fresh
        for h in p.handles
    ]
    if handle_rows:
        conn.execute(precommit_handles.insert(), handle_rows)
        conn.execute(
            _PRODUCER_IDS,
            [
                {
                    "txid": h["transactional_id"],
                    "pid": h["producer_id"],
                    "pepoch": h["producer_epoch"],
                }
                for h in handle_rows
            ],
        )
    conn.execute(
        _MARK_PRECOMMITTED,
        {
            "the_pipeline_id": pipeline_id,
            "the_checkpoint_id": checkpoint_id,
            "task_ids": sorted({p.task_id for p in fresh}),
        },
    )


__all__ = [
    "PrecommitSnapshot",
    "precommit_counts",
    "precommit_snapshot",
    "store_precommits",
    "write_precommits",
]
