"""Source offsets: where each pipeline resumes each source partition.

A row is written when a checkpoint becomes COMPLETE (in the same transaction: that row
is the commit point, `checkpoint_store`) or by an offset reset of a STOPPED pipeline.
Partitions without a row start from the pipeline's `starting_offsets`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from lockgate.common.model.ids import CheckpointId, PipelineId
from lockgate.common.model.offsets import TopicPartition
from lockgate.coordinator.domain.lease import Fence
from lockgate.coordinator.domain.pipelines import (
    PartitionOffset,
    check_offsets_resettable,
    check_reset_offsets,
)
from lockgate.coordinator.store.bulk import upsert
from lockgate.coordinator.store.engine import Database
from lockgate.coordinator.store.rows import (
    checkpoint_states,
    opt_int,
    read_pipeline,
    resolve_data_loss,
)
from lockgate.coordinator.store.tables import source_offsets

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
        values["partitions"] = sorted((tp.topic, tp.partition) for tp in partitions)
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
