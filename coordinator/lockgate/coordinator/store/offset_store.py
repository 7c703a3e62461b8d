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
from lockgate.coordinator.store.engine import Database, upsert
from lockgate.coordinator.store.rows import (
    checkpoint_states,
    opt_int,
    read_pipeline,
    resolve_data_loss,
)
from lockgate.coordinator.store.tables import source_offsets

# Read on every trigger and report: built once, as `rows`' keyed reads.
_OFFSETS = (
    sa.select(source_offsets)
    .where(source_offsets.c.pipeline_id.in_(sa.bindparam("pipeline_ids", expanding=True)))
    .order_by(source_offsets.c.pipeline_id, source_offsets.c.topic, source_offsets.c.partition)
)
_OFFSETS_OF_PARTITIONS = _OFFSETS.where(
    sa.tuple_(source_offsets.c.topic, source_offsets.c.partition).in_(
        sa.bindparam("partitions", expanding=True)
    )
)


def next_offsets_of(
    conn: Connection,
    pipeline_ids: Sequence[PipelineId],
    *,
    partitions: AbstractSet[TopicPartition] | None = None,
) -> dict[PipelineId, dict[TopicPartition, int]]:
    """Each pipeline's restore position per partition (of `partitions` only, if given;
    partitions without one are absent, and pipelines with none), in one query."""
    return {
        pipeline_id: {TopicPartition(o.topic, o.partition): o.next_offset for o in offsets}
        for pipeline_id, offsets in _partition_offsets(conn, pipeline_ids, partitions).items()
    }


def _partition_offsets(
    conn: Connection,
    pipeline_ids: Sequence[PipelineId],
    partitions: AbstractSet[TopicPartition] | None = None,
) -> dict[PipelineId, list[PartitionOffset]]:
    """The `source_offsets` rows of these pipelines (of `partitions` only, if given), in
    (topic, partition) order."""
    values: dict[str, Any] = {"pipeline_ids": sorted(set(pipeline_ids))}
    if partitions is not None:
        values["partitions"] = sorted((tp.topic, tp.partition) for tp in partitions)
    result: dict[PipelineId, list[PartitionOffset]] = {}
    for r in conn.execute(_OFFSETS if partitions is None else _OFFSETS_OF_PARTITIONS, values):
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
            for tp, offset in sorted(offsets.items())
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
