"""Source offsets: where each pipeline resumes each source partition.

A row is written when a checkpoint becomes COMPLETE (in the same transaction: that row
is the commit point, `checkpoint_store`) or by an offset reset of a STOPPED pipeline.
Partitions without a row start from the pipeline's `starting_offsets`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import Connection

from lockgate.common.model.ids import CheckpointId, PipelineId
from lockgate.common.model.offsets import TopicPartition
from lockgate.coordinator.domain.lease import Fence
from lockgate.coordinator.domain.pipelines import (
    PartitionOffset,
    check_offsets_resettable,
    check_reset_offsets,
)
from lockgate.coordinator.domain.precommits import CheckpointKey
from lockgate.coordinator.store.bulk import array_params, unnested, upsert
from lockgate.coordinator.store.engine import Database, db_now_ms
from lockgate.coordinator.store.keyed import execute_keyed
from lockgate.coordinator.store.rows import (
    checkpoint_states,
    opt_int,
    read_pipeline,
    resolve_data_loss,
)
from lockgate.coordinator.store.tables import precommit_offsets, source_offsets

# Read on every trigger and report: built once, as `rows`' keyed reads.
_OF_PIPELINES = source_offsets.c.pipeline_id.in_(sa.bindparam("pipeline_ids", expanding=True))
_OF_PARTITIONS = sa.tuple_(source_offsets.c.topic, source_offsets.c.partition).in_(
    sa.bindparam("partitions", expanding=True)
)
_IN_ORDER = (source_offsets.c.pipeline_id, source_offsets.c.topic, source_offsets.c.partition)
_OFFSETS = sa.select(source_offsets).where(_OF_PIPELINES).order_by(*_IN_ORDER)
# What a trigger and a report need: the positions alone, mapped straight to a dict.
_POSITIONS = sa.select(
    source_offsets.c.pipeline_id,
    source_offsets.c.topic,
    source_offsets.c.partition,
    source_offsets.c.next_offset,
).where(_OF_PIPELINES)
_NEXT_OFFSETS = _POSITIONS.order_by(*_IN_ORDER)
_NEXT_OFFSETS_OF_PARTITIONS = _POSITIONS.where(_OF_PARTITIONS).order_by(*_IN_ORDER)
# On PostgreSQL the partitions are two array parameters (`bulk.unnested`), not a pair of
# parameters each: a 50-partition report bound 100 of them, one at a time, on every read.
_PARTITION_COLUMNS = ("topic", "partition")
_PARTITION_KEYS = unnested(source_offsets, _PARTITION_COLUMNS)
_NEXT_OFFSETS_OF_UNNESTED = _POSITIONS.where(
    sa.tuple_(source_offsets.c.topic, source_offsets.c.partition).in_(
        sa.select(*(_PARTITION_KEYS[c] for c in _PARTITION_COLUMNS))
    )
).order_by(*_IN_ORDER)


def next_offsets_of(
    conn: Connection,
    pipeline_ids: Sequence[PipelineId],
    *,
    partitions: AbstractSet[TopicPartition] | None = None,
) -> dict[PipelineId, dict[TopicPartition, int]]:
    """Each pipeline's restore position per partition (of `partitions` only, if given;
    partitions without one are absent, and pipelines with none), in one query."""
    values: dict[str, Any] = {"pipeline_ids": sorted(set(pipeline_ids))}
    stmt = _NEXT_OFFSETS
    if partitions is not None:
        pairs = sorted((tp.topic, tp.partition) for tp in partitions)
        if conn.dialect.name == "postgresql":
            values |= array_params(_PARTITION_COLUMNS, pairs)
            stmt = _NEXT_OFFSETS_OF_UNNESTED
        else:
            values["partitions"] = pairs
            stmt = _NEXT_OFFSETS_OF_PARTITIONS
    result: dict[PipelineId, dict[TopicPartition, int]] = {}
    for pipeline_id, topic, partition, next_offset in conn.execute(stmt, values):
        positions = result.setdefault(PipelineId(pipeline_id), {})
        positions[TopicPartition(topic, int(partition))] = int(next_offset)
    return result


def _partition_offsets(
    conn: Connection, pipeline_ids: Sequence[PipelineId]
) -> dict[PipelineId, list[PartitionOffset]]:
    """The `source_offsets` rows of these pipelines, in (topic, partition) order."""
    result: dict[PipelineId, list[PartitionOffset]] = {}
    for r in conn.execute(_OFFSETS, {"pipeline_ids": sorted(set(pipeline_ids))}):
        result.setdefault(PipelineId(r.pipeline_id), []).append(
            PartitionOffset(
                topic=r.topic,
                partition=int(r.partition),
                next_offset=int(r.next_offset),
                checkpoint_id=opt_int(r.checkpoint_id),
            )
        )
    return result


def write_next_offsets(
    conn: Connection,
    pipeline_id: PipelineId,
    offsets: Mapping[TopicPartition, int],
    *,
    checkpoint_id: CheckpointId | None,
) -> None:
    """Set where the pipeline resumes these partitions: from the COMPLETE checkpoint that
    read up to them (in its commit-point transaction), or None for an offset reset."""
    write_restore_points(
        conn, {(pipeline_id, tp): (offset, checkpoint_id) for tp, offset in offsets.items()}
    )


def write_restore_points(
    conn: Connection,
    points: Mapping[tuple[PipelineId, TopicPartition], tuple[int, CheckpointId | None]],
) -> None:
    """Set where each pipeline resumes each partition, and from which checkpoint (None: a
    reset), across pipelines in one statement (the COMPLETE of a report batch's many)."""
    upsert(
        conn,
        source_offsets,
        [
            {
                "pipeline_id": pipeline_id,
                "topic": tp.topic,
                "partition": tp.partition,
                "next_offset": offset,
                "checkpoint_id": checkpoint_id,
            }
            for (pipeline_id, tp), (offset, checkpoint_id) in sorted(points.items())
        ],
        key=("pipeline_id", "topic", "partition"),
    )


def restore_from_checkpoints(conn: Connection, completed: Sequence[CheckpointKey]) -> None:
    """Set where each pipeline resumes each partition these checkpoints pre-committed to
    where the newest of them ended it, and from which checkpoint, straight from their
    `precommit_offsets` rows: one statement, the ranges never leaving the database (read,
    then written back as an upsert, they were two statements and 100 rows each way for a
    100-task checkpoint)."""
    build = _RESTORE_BUILDS[conn.dialect.name]
    execute_keyed(conn, build, precommit_offsets, completed)


def _newest_ends(keys: sa.ColumnElement[bool]) -> sa.Select[Any]:
    """Per pipeline and partition, where the newest of the keyed checkpoints ended it."""
    ranked = (
        sa.select(
            *(precommit_offsets.c[c] for c in _RESTORE_KEY),
            precommit_offsets.c.end_offset,
            precommit_offsets.c.checkpoint_id,
            sa.func.row_number()
            .over(
                partition_by=[precommit_offsets.c[c] for c in _RESTORE_KEY],
                order_by=precommit_offsets.c.checkpoint_id.desc(),
            )
            .label("newest_first"),
        )
        .where(keys)
        .subquery()
    )
    return sa.select(
        *(ranked.c[c] for c in (*_RESTORE_KEY, "end_offset", "checkpoint_id")), db_now_ms()
    ).where(ranked.c.newest_first == 1)


def _restore(
    insert_into: Callable[[sa.Table], pg_dialect.Insert | sqlite_dialect.Insert],
    keys: sa.ColumnElement[bool],
) -> sa.Executable:
    """The upsert of `restore_from_checkpoints` in the dialect of `insert_into` (the SELECT's
    WHERE keeps SQLite from reading ON CONFLICT as a join's ON)."""
    insert = insert_into(source_offsets).from_select(_RESTORE_COLUMNS, _newest_ends(keys))
    return insert.on_conflict_do_update(index_elements=_RESTORE_KEY, set_=_restored(insert))


def _restored(insert: pg_dialect.Insert | sqlite_dialect.Insert) -> dict[str, Any]:
    return {
        "next_offset": insert.excluded.next_offset,
        "checkpoint_id": insert.excluded.checkpoint_id,
        "updated_at_ms": db_now_ms(),
    }


_RESTORE_KEY = ("pipeline_id", "topic", "partition")
_RESTORE_COLUMNS = (*_RESTORE_KEY, "next_offset", "checkpoint_id", "updated_at_ms")
# One build per dialect, made once: `execute_keyed` caches statements by their build.
_RESTORE_BUILDS = {
    "postgresql": functools.partial(_restore, pg_dialect.insert),
    "sqlite": functools.partial(_restore, sqlite_dialect.insert),
}


class OffsetStore:
    """Where pipelines resume reading."""

    def __init__(self, *, database: Database) -> None:
        self._db = database

    def get_offsets(self, *, pipeline_id: PipelineId) -> list[PartitionOffset]:
        """Where the pipeline resumes each source partition (from the last COMPLETE
        checkpoint or a reset); partitions absent start from `starting_offsets`. NotFound
        if there is no such pipeline."""
        with self._db.read() as conn:
            read_pipeline(conn, pipeline_id)
            return _partition_offsets(conn, [pipeline_id]).get(pipeline_id, [])

    def get_offsets_of(
        self, *, pipeline_ids: Sequence[PipelineId]
    ) -> dict[PipelineId, list[PartitionOffset]]:
        """`get_offsets` of many pipelines in one query (those without any: an empty list;
        no existence check)."""
        with self._db.read() as conn:
            found = _partition_offsets(conn, pipeline_ids)
        return {p: found.get(p, []) for p in pipeline_ids}

    def reset_offsets(
        self,
        *,
        fence: Fence,
        pipeline_id: PipelineId,
        offsets: Mapping[TopicPartition, int] | None,
    ) -> list[PartitionOffset]:
        """Set where a STOPPED pipeline resumes (None: forget all, back to
        `starting_offsets`). Leader-only. FailedPrecondition unless the target state is
        STOPPED and no checkpoint is still in flight (as Kafka Connect's offsets API).
        Moves the pipeline past a DATA_LOST checkpoint (the reset offsets say where)."""
        check_reset_offsets(offsets)
        with self._db.transaction(fence=fence) as conn:
            pipeline = read_pipeline(conn, pipeline_id, for_update=True)
            check_offsets_resettable(pipeline, checkpoint_states(conn, pipeline_id))
            if offsets is None:
                conn.execute(
                    source_offsets.delete().where(source_offsets.c.pipeline_id == pipeline_id)
                )
            write_next_offsets(conn, pipeline_id, offsets or {}, checkpoint_id=None)
            # The operator said where to resume: a DATA_LOST checkpoint no longer blocks.
            resolve_data_loss(conn, pipeline_id)
        return self.get_offsets(pipeline_id=pipeline_id)
