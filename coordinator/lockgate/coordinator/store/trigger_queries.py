"""What the leader's trigger decision reads for every pipeline on every pass, in two reads
for all pipelines however many there are (a read per pipeline cost the leader a round trip
per pipeline per pass)."""

from __future__ import annotations

from collections import defaultdict

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from lockgate.common.model.ids import CheckpointId, PipelineId
from lockgate.coordinator.domain.checkpoints import CheckpointRecord
from lockgate.coordinator.domain.states import CheckpointState
from lockgate.coordinator.store.rows import checkpoint_record
from lockgate.coordinator.store.tables import checkpoints, pipelines

#: Checkpoints that are not final, or not final for the trigger decision (an unresolved
#: DATA_LOST one stops its pipeline).
_OPEN_STATES = (CheckpointState.TRIGGERED, CheckpointState.COMPLETE, CheckpointState.DATA_LOST)


def trigger_snapshot(conn: Connection) -> dict[PipelineId, list[CheckpointRecord]]:
    """Per pipeline with any, newest first and without their tasks (`trigger_due` reads
    states and times only): its newest checkpoint and every one in `_OPEN_STATES`. Every
    checkpoint in flight counts against the in-flight limit, however old."""
    newest = sa.select(checkpoints).join(
        pipelines,
        sa.and_(
            pipelines.c.pipeline_id == checkpoints.c.pipeline_id,
            checkpoints.c.checkpoint_id == pipelines.c.next_checkpoint_id - 1,
        ),
    )
    unfinished = sa.select(checkpoints).where(
        checkpoints.c.state.in_([s.value for s in _OPEN_STATES])
    )
    found: dict[tuple[PipelineId, CheckpointId], CheckpointRecord] = {}
    for stmt in (newest, unfinished):
        for row in conn.execute(stmt):
            record = checkpoint_record(row)
            found[(record.pipeline_id, record.checkpoint_id)] = record
    result: dict[PipelineId, list[CheckpointRecord]] = defaultdict(list)
    for (pipeline_id, _), record in sorted(found.items(), reverse=True):
        result[pipeline_id].append(record)
    return dict(result)
