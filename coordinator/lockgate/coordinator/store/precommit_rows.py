"""Pre-commit records: checking a batch of reports against what their checkpoints asked,
writing the accepted ones (tables `precommit_offsets`, `precommit_handles`, the producer
ids of `transactional_ids`, `checkpoint_tasks.precommitted_at_ms`), and writing COMPLETE
for the checkpoints they make ready. Called inside `CheckpointStore`'s fenced
transactions. Each step is a few statements for the whole batch, however many pipelines
it mixes (issue 14: at scale an executor's batch holds many pipelines' reports)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from lockgate.common.errors import Aborted
from lockgate.common.model.ids import CheckpointId, PipelineId
from lockgate.common.model.offsets import TopicPartition
from lockgate.coordinator.domain.checkpoints import (
    CheckpointRecord,
    Precommit,
    PrecommitCount,
    checkpoints_to_complete,
    committed_on_completion,
)
from lockgate.coordinator.domain.precommits import (
    CheckpointKey,
    PrecommitSnapshot,
    accept_precommits,
    group_by_checkpoint,
)
from lockgate.coordinator.domain.states import CheckpointState
from lockgate.coordinator.store.bulk import insert_rows, update_rows
from lockgate.coordinator.store.engine import db_now_ms
from lockgate.coordinator.store.in_flight import Turn
from lockgate.coordinator.store.keyed import execute_keyed
from lockgate.coordinator.store.offset_store import next_offsets_of, restore_from_checkpoints
from lockgate.coordinator.store.rows import (
    checkpoint_record,
    checkpoint_states_of,
    commit_where,
    executor_generations,
    find_checkpoints_of_tasks,
    lock_pipelines,
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
_RANGE_COLUMNS = (
    precommit_offsets.c.pipeline_id,
    precommit_offsets.c.checkpoint_id,
    precommit_offsets.c.topic,
    precommit_offsets.c.partition,
    precommit_offsets.c.end_offset,
)


def store_precommits(
    conn: Connection, precommits: Sequence[Precommit], turn: Turn
) -> PrecommitSnapshot:
    """Check and store pre-commits with a handful of statements, however many tasks and
    checkpoints report (a 100-task checkpoint is one round of bulk writes). Returns what it
    read, for `complete_ready`."""
    snapshot = precommit_snapshot(conn, precommits, turn)
    write_precommits(conn, accept_precommits(precommits, snapshot), turn)
    return snapshot


def precommit_snapshot(
    conn: Connection, precommits: Sequence[Precommit], turn: Turn
) -> PrecommitSnapshot:
    """What the pre-commit rules read (`domain/precommits.py`), for these reports.

    Only what concerns the reporting tasks: each checkpoint with their rows alone, and the
    resume offsets of their partitions alone (the rules look at no other task's), so a
    batch costs its own size, not its checkpoints' (a 100-task checkpoint's rows and
    partitions on every batch were most of a report's cost). And in the same few
    statements however many pipelines the batch mixes (at scale, an executor's batch holds
    many pipelines' reports; a handful of reads per pipeline was the leader's largest
    cost in a report, issue 14). The checkpoints the leader keeps in flight (`turn`,
    `in_flight.py`) are not read again."""
    groups = group_by_checkpoint(precommits)
    pipeline_ids = sorted({p.pipeline_id for p in precommits})
    sink_servers = _sink_servers(conn, pipeline_ids)
    tasks = read_tasks_by_id(conn, [p.task_id for p in precommits])
    # Read once, under the locks: the start offsets and then the completion walk them.
    states = checkpoint_states_of(conn, pipeline_ids)
    kept = turn.lookup(groups, states)
    found = find_checkpoints_of_tasks(
        conn, {key: {p.task_id for p in group} for key, group in groups.items() if key not in kept}
    )
    return PrecommitSnapshot(
        checkpoints={**found, **kept},
        executor_generations=executor_generations(conn, (p.executor_id for p in precommits)),
        tasks=tasks,
        resume_offsets=_start_offsets(
            conn,
            {
                key: {tp for p in group if p.task_id in tasks for tp in tasks[p.task_id].partitions}
                for key, group in groups.items()
            },
            states,
        ),
        sink_servers=sink_servers,
        checkpoint_states=states,
    )


def _sink_servers(conn: Connection, pipeline_ids: Sequence[PipelineId]) -> dict[PipelineId, str]:
    """Each existing pipeline's sink cluster (a deleted one has none, nor checkpoints),
    read FOR UPDATE in name order, as every writer locks pipelines: a pipeline's
    pre-commits and completions are written one transaction at a time (the same read
    locked the rows and gave the servers: once per batch)."""
    return {
        pipeline_id: pipeline.spec.sink.bootstrap_servers
        for pipeline_id, pipeline in lock_pipelines(conn, pipeline_ids).items()
    }


def _start_offsets(
    conn: Connection,
    partitions: Mapping[CheckpointKey, AbstractSet[TopicPartition]],
    states: Mapping[PipelineId, Mapping[CheckpointId, CheckpointState]],
) -> dict[CheckpointKey, dict[TopicPartition, int]]:
    """Where each checkpoint N starts each of its partitions here that has a known start:
    where the previous checkpoint ended. That is the pipeline's restore offsets (the last
    COMPLETE one's ends, or a reset), unless an earlier checkpoint still TRIGGERED
    pre-committed the partition: then its end (the leader triggers nothing while one is
    TRIGGERED, so only the store's own callers reach that case). `states`: the pipelines'
    checkpoint states, read under their locks. One statement for the whole batch as a
    rule, two when an earlier checkpoint is still TRIGGERED."""
    wanted = {key: tps for key, tps in partitions.items() if tps}
    if not wanted:
        return {key: {} for key in partitions}
    pipeline_ids = sorted({pipeline_id for pipeline_id, _ in wanted})
    restore = next_offsets_of(conn, pipeline_ids, partitions=set().union(*wanted.values()))
    starts = {
        key: {tp: n for tp, n in restore.get(key[0], {}).items() if tp in tps}
        for key, tps in wanted.items()
    }
    newest: dict[PipelineId, CheckpointId] = {}  # each pipeline's latest reported checkpoint
    for pipeline_id, checkpoint_id in wanted:
        newest[pipeline_id] = max(newest.get(pipeline_id, checkpoint_id), checkpoint_id)
    # The earlier TRIGGERED checkpoints (none, as a rule), then their ranges: a join led by
    # the ranges walked every earlier checkpoint's, so a report's cost grew with history.
    earlier = sorted(
        (pipeline_id, c)
        for pipeline_id in pipeline_ids
        for c, state in states.get(pipeline_id, {}).items()
        if state is CheckpointState.TRIGGERED and c < newest[pipeline_id]
    )
    ranges = execute_keyed(conn, _ranges_where, precommit_offsets, earlier) if earlier else []
    for pipeline_id, checkpoint_id, topic, partition, end in ranges:  # oldest first
        tp = TopicPartition(topic, int(partition))
        for (p, n), tps in wanted.items():
            if p == pipeline_id and int(checkpoint_id) < n and tp in tps:
                starts[(p, n)][tp] = int(end)
    return {key: starts.get(key, {}) for key in partitions}


def complete_ready(
    conn: Connection,
    keys: Sequence[CheckpointKey],
    read: Mapping[PipelineId, Mapping[CheckpointId, CheckpointState]],
) -> tuple[dict[CheckpointKey, int], frozenset[CheckpointKey]]:
    """Write COMPLETE, with the pipeline's restore offsets, for each checkpoint from each
    of these on that `checkpoints_to_complete` says is ready: the commit point (DESIGN.md
    step 3). Returns the checkpoints it wrote COMPLETE, in order, each with the time it
    became COMPLETE (the database's clock, in ms), and those of them that some task left a
    handle in (read with the counts: `commit_without_handles` needs it). The caller holds the
    pipelines' locks, and `read` is their checkpoints' states as it read them under those
    locks (`PrecommitSnapshot.checkpoint_states`: storing pre-commits changes no state). A
    handful of statements however many pipelines the keys span (a report batch at scale
    mixes many)."""
    states = {pipeline_id: dict(read.get(pipeline_id, {})) for pipeline_id, _ in keys}
    first: dict[PipelineId, CheckpointId] = {}  # each pipeline's earliest reported checkpoint
    for pipeline_id, checkpoint_id in keys:
        first[pipeline_id] = min(first.get(pipeline_id, checkpoint_id), checkpoint_id)
    counts, with_handles = _precommit_counts(
        conn,
        [
            (pipeline_id, c)
            for pipeline_id, start in sorted(first.items())
            for c, state in sorted(states.get(pipeline_id, {}).items())
            if state is CheckpointState.TRIGGERED and c >= start
        ],
    )
    ready: list[CheckpointKey] = []
    for pipeline_id, checkpoint_id in sorted(keys):
        walked = states.get(pipeline_id, {})
        for done in checkpoints_to_complete(
            checkpoint_id, states=walked, counts=counts.get(pipeline_id, {})
        ):
            walked[done] = CheckpointState.COMPLETE
            ready.append((pipeline_id, done))
    if not ready:
        return {}, frozenset()
    return _write_complete(conn, ready), with_handles & frozenset(ready)


def commit_without_handles(
    conn: Connection,
    completed: Sequence[CheckpointKey],
    read: Mapping[PipelineId, Mapping[CheckpointId, CheckpointState]],
    with_handles: AbstractSet[CheckpointKey],
) -> dict[CheckpointKey, CheckpointRecord]:
    """Write COMMITTED at once for the checkpoints `complete_ready` just wrote COMPLETE that
    have nothing to commit (`committed_on_completion`: no handle, no earlier commit
    waiting); `read` as for `complete_ready`, `with_handles` what it found of handles.
    Returns them as written, without their tasks. One statement whatever the batch mixes,
    none when nothing completed."""
    if not completed:
        return {}
    handled: dict[PipelineId, set[CheckpointId]] = {}
    for pipeline_id, checkpoint_id in with_handles:
        handled.setdefault(pipeline_id, set()).add(checkpoint_id)
    by_pipeline: dict[PipelineId, list[CheckpointId]] = {}
    for pipeline_id, checkpoint_id in completed:
        by_pipeline.setdefault(pipeline_id, []).append(checkpoint_id)
    empty = [
        (pipeline_id, checkpoint_id)
        for pipeline_id, completed_ids in sorted(by_pipeline.items())
        for checkpoint_id in committed_on_completion(
            completed_ids,
            states=read.get(pipeline_id, {}),
            with_handles=handled.get(pipeline_id, set()),
        )
    ]
    if not empty:
        return {}
    return {
        (c.pipeline_id, c.checkpoint_id): c
        for c in map(checkpoint_record, execute_keyed(conn, commit_where, checkpoints, empty))
    }


def summaries_after(
    snapshot: PrecommitSnapshot,
    keys: Sequence[CheckpointKey],
    completed: Mapping[CheckpointKey, int],
    committed: Mapping[CheckpointKey, CheckpointRecord],
) -> list[CheckpointRecord]:
    """These checkpoints (those the snapshot found) without their tasks, as they are after
    the batch: as read, the ones `complete_ready` wrote COMPLETE with their state and time,
    those `commit_without_handles` then wrote COMMITTED as it wrote them. Nothing else of a
    checkpoint's row changes in a report batch's transaction, so the batch answers its
    reporters without reading the rows again."""
    summaries = []
    for key in keys:
        record = snapshot.checkpoints.get(key)
        if record is None:
            continue
        summary = record.summary()
        if key in committed:
            summary = committed[key]
        elif key in completed:
            summary = dataclasses.replace(
                summary, state=CheckpointState.COMPLETE, completed_at_ms=completed[key]
            )
        summaries.append(summary)
    return summaries


def _write_complete(conn: Connection, ready: Sequence[CheckpointKey]) -> dict[CheckpointKey, int]:
    """Move these TRIGGERED checkpoints to COMPLETE and set their pipelines' restore
    offsets to where they end (a later checkpoint's end over an earlier one's); when each
    became COMPLETE, in `ready`'s order."""
    moved = {
        (PipelineId(pipeline_id), CheckpointId(int(checkpoint_id))): int(completed_at_ms)
        for pipeline_id, checkpoint_id, completed_at_ms in execute_keyed(
            conn, _complete_where, checkpoints, ready
        )
    }
    if len(moved) != len(ready):
        # Unreachable under the pipelines' locks, which the states were read under: the
        # whole transaction is undone, and the reporter retries.
        raise Aborted(f"checkpoints {sorted(ready)} changed state while being completed; retry")
    restore_from_checkpoints(conn, ready)
    return {key: moved[key] for key in ready}


def _ranges_where(keys: sa.ColumnElement[bool]) -> sa.Executable:
    """The pre-committed ranges of the checkpoints, oldest first (`keyed.py`)."""
    return sa.select(*_RANGE_COLUMNS).where(keys).order_by(*_RANGE_COLUMNS[:2])


def _complete_where(keys: sa.ColumnElement[bool]) -> sa.Executable:
    """Move the checkpoints still TRIGGERED to COMPLETE; returns those it moved."""
    return (
        checkpoints.update()
        .where(keys, checkpoints.c.state == CheckpointState.TRIGGERED.value)
        .values(state=CheckpointState.COMPLETE.value, completed_at_ms=db_now_ms())
        .returning(
            checkpoints.c.pipeline_id, checkpoints.c.checkpoint_id, checkpoints.c.completed_at_ms
        )
    )


def _counts_where(keys: sa.ColumnElement[bool]) -> sa.Executable:
    """Per checkpoint, its task rows, those pre-committed, and whether some task left a
    handle in it (in the same read: a read of the handles of its own was one more
    statement in every report batch that completes a checkpoint)."""
    handles = sa.exists().where(
        precommit_handles.c.pipeline_id == checkpoint_tasks.c.pipeline_id,
        precommit_handles.c.checkpoint_id == checkpoint_tasks.c.checkpoint_id,
    )
    return (
        sa.select(
            checkpoint_tasks.c.pipeline_id,
            checkpoint_tasks.c.checkpoint_id,
            sa.func.count(),
            sa.func.count(checkpoint_tasks.c.precommitted_at_ms),
            handles,
        )
        .where(keys)
        .group_by(checkpoint_tasks.c.pipeline_id, checkpoint_tasks.c.checkpoint_id)
    )


def _precommit_counts(
    conn: Connection, keys: Sequence[CheckpointKey]
) -> tuple[dict[PipelineId, dict[CheckpointId, PrecommitCount]], frozenset[CheckpointKey]]:
    """Of each of these checkpoints, how many tasks it was triggered for and how many have
    pre-committed it, in one read (no task rows: completion needs only the counts); and
    which of them some task left a handle in."""
    counts: dict[PipelineId, dict[CheckpointId, PrecommitCount]] = {}
    for pipeline_id, checkpoint_id in keys:
        counts.setdefault(pipeline_id, {})[checkpoint_id] = PrecommitCount(0, 0)
    if not keys:
        return counts, frozenset()
    with_handles: set[CheckpointKey] = set()
    for pipeline_id, checkpoint_id, n, done, handles in execute_keyed(
        conn, _counts_where, checkpoint_tasks, keys
    ):
        key = (PipelineId(pipeline_id), CheckpointId(int(checkpoint_id)))
        counts[key[0]][key[1]] = PrecommitCount(int(n), int(done))
        if handles:
            with_handles.add(key)
    return counts, frozenset(with_handles)


def write_precommits(
    conn: Connection, accepted: Mapping[CheckpointKey, Sequence[Precommit]], turn: Turn
) -> None:
    """Store these accepted pre-commits: one bulk write per table for the whole batch
    (noted in `turn`, for the leader's in-flight checkpoints)."""
    fresh = [(key, p) for key, group in sorted(accepted.items()) for p in group]
    if not fresh:
        return
    turn.note_precommitted({key: [p.task_id for p in group] for key, group in accepted.items()})
    offset_rows = [
        {
            "pipeline_id": pipeline_id,
            "checkpoint_id": checkpoint_id,
            "topic": r.topic,
            "partition": r.partition,
            "task_id": p.task_id,
            "start_offset": r.start_offset,
            "end_offset": r.end_offset,
        }
        for (pipeline_id, checkpoint_id), p in fresh
        for r in p.offsets
    ]
    insert_rows(conn, precommit_offsets, offset_rows)
    handle_rows = [
        {
            "pipeline_id": pipeline_id,
            "checkpoint_id": checkpoint_id,
            "task_id": p.task_id,
            "transactional_id": h.transactional_id,
            "kind": "kafka",  # the column leaves room for other sinks; v1 has Kafka only
            "producer_id": h.producer_id,
            "producer_epoch": h.producer_epoch,
        }
        for (pipeline_id, checkpoint_id), p in fresh
        for h in p.handles
    ]
    insert_rows(conn, precommit_handles, handle_rows)
    update_rows(
        conn,
        transactional_ids,
        [
            {
                "transactional_id": h["transactional_id"],
                "producer_id": h["producer_id"],
                "producer_epoch": h["producer_epoch"],
            }
            for h in handle_rows
        ],
        key=["transactional_id"],
        stamp="updated_at_ms",
    )
    update_rows(
        conn,
        checkpoint_tasks,
        [
            {"pipeline_id": pipeline_id, "checkpoint_id": checkpoint_id, "task_id": task_id}
            for (pipeline_id, checkpoint_id), task_id in sorted(
                {(key, p.task_id) for key, p in fresh}
            )
        ],
        key=["pipeline_id", "checkpoint_id", "task_id"],
        stamp="precommitted_at_ms",
    )


__all__ = [
    "commit_without_handles",
    "complete_ready",
    "precommit_snapshot",
    "store_precommits",
    "summaries_after",
    "write_precommits",
]
