"""Rows to domain records, and the keyed reads the sub-stores share.

A pipeline, its tasks, an executor, a checkpoint are read by more than one sub-store (a
trigger reads the pipeline and its tasks, a pre-commit the executors' generations and the
checkpoint): those reads live here, once, with the mapping of each row to its frozen
domain record. They are the snapshots the domain's decisions take. Reads with
`for_update` lock the row on PostgreSQL (pipeline row first, then the rows under it).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from lockgate.common.model.handles import TransactionHandle
from lockgate.common.model.ids import (
    CheckpointId,
    ExecutorId,
    Generation,
    LeaderEpoch,
    PipelineId,
    TaskId,
    TransactionalId,
    split_task_id,
)
from lockgate.common.model.offsets import TopicPartition
from lockgate.common.model.pipeline_spec import PipelineSpec, parse_pipeline_spec
from lockgate.coordinator.domain.checkpoints import CheckpointRecord, TaskTrigger
from lockgate.coordinator.domain.errors import NotFound
from lockgate.coordinator.domain.membership import ExecutorRecord
from lockgate.coordinator.domain.pipelines import PipelineRecord, TaskRecord
from lockgate.coordinator.domain.precommits import CheckpointKey
from lockgate.coordinator.domain.states import CheckpointState, TargetState, TaskState
from lockgate.coordinator.store.engine import db_now_ms
from lockgate.coordinator.store.keyed import execute_keyed
from lockgate.coordinator.store.tables import (
    checkpoint_tasks,
    checkpoints,
    executors,
    pipelines,
    precommit_offsets,
    tasks,
)

# The keyed reads below are built once, with bound parameters, and executed with their
# values: building a statement (its clauses, their coercions, its cache key) cost SQLAlchemy
# about twice what executing the built one does, and these run on every report, trigger and
# commit (issue 14: `bench/coordinator.py`'s round trip is the leader's CPU).
_EXECUTOR = sa.select(executors).where(executors.c.executor_id == sa.bindparam("executor_id"))
_EXECUTORS_BY_ID = (
    sa.select(executors)
    .where(executors.c.executor_id.in_(sa.bindparam("executor_ids", expanding=True)))
    .order_by(executors.c.executor_id)
)
_EXECUTOR_GENERATIONS = sa.select(executors.c.executor_id, executors.c.generation).where(
    executors.c.executor_id.in_(sa.bindparam("executor_ids", expanding=True))
)
_PIPELINE = sa.select(pipelines).where(pipelines.c.pipeline_id == sa.bindparam("pipeline_id"))
_PIPELINES_FOR_UPDATE = (
    sa.select(pipelines)
    .where(pipelines.c.pipeline_id.in_(sa.bindparam("pipeline_ids", expanding=True)))
    .order_by(pipelines.c.pipeline_id)
    .with_for_update()
)
_TASKS = sa.select(tasks).order_by(tasks.c.pipeline_id, tasks.c.task_index)
_TASKS_OF = _TASKS.where(tasks.c.pipeline_id == sa.bindparam("pipeline_id"))
_TASKS_BY_ID = sa.select(tasks).where(tasks.c.task_id.in_(sa.bindparam("task_ids", expanding=True)))
_TASK = sa.select(tasks).where(tasks.c.task_id == sa.bindparam("task_id"))
_NOT_COMMITTED_STATES = sa.select(
    checkpoints.c.pipeline_id, checkpoints.c.checkpoint_id, checkpoints.c.state
).where(
    checkpoints.c.pipeline_id.in_(sa.bindparam("pipeline_ids", expanding=True)),
    checkpoints.c.state.in_(
        [
            CheckpointState.TRIGGERED.value,
            CheckpointState.COMPLETE.value,
            CheckpointState.ABORTED.value,
        ]
    ),
)
_CHECKPOINT = sa.select(checkpoints).where(
    checkpoints.c.pipeline_id == sa.bindparam("pipeline_id"),
    checkpoints.c.checkpoint_id == sa.bindparam("checkpoint_id"),
)
_CHECKPOINT_TASKS = (
    sa.select(checkpoint_tasks)
    .where(
        checkpoint_tasks.c.pipeline_id == sa.bindparam("pipeline_id"),
        checkpoint_tasks.c.checkpoint_id == sa.bindparam("checkpoint_id"),
    )
    .order_by(checkpoint_tasks.c.task_id)
)
_UNRESOLVED_DATA_LOSSES = (
    sa.select(checkpoints.c.pipeline_id, sa.func.min(checkpoints.c.checkpoint_id))
    .where(
        checkpoints.c.pipeline_id.in_(sa.bindparam("pipeline_ids", expanding=True)),
        checkpoints.c.state == CheckpointState.DATA_LOST.value,
        checkpoints.c.data_loss_resolved_at_ms.is_(None),
    )
    .group_by(checkpoints.c.pipeline_id)
)


def opt_int(value: Any) -> int | None:
    """An optional integer column."""
    return None if value is None else int(value)


def executor_record(row: Any) -> ExecutorRecord:
    """An `executors` row."""
    return ExecutorRecord(
        executor_id=ExecutorId(row.executor_id),
        address=row.address,
        generation=Generation(int(row.generation)),
        registered_at_ms=int(row.registered_at_ms),
        last_heartbeat_ms=int(row.last_heartbeat_ms),
    )


def pipeline_record(row: Any) -> PipelineRecord:
    """A `pipelines` row, its spec parsed."""
    return PipelineRecord(
        pipeline_id=PipelineId(row.pipeline_id),
        spec=parsed_spec(row.spec_json),
        config_version=int(row.config_version),
        target_state=TargetState(row.target_state),
        next_checkpoint_id=CheckpointId(int(row.next_checkpoint_id)),
        created_at_ms=int(row.created_at_ms),
        updated_at_ms=int(row.updated_at_ms),
    )


@functools.lru_cache(maxsize=4096)
def parsed_spec(spec_json: str) -> PipelineSpec:
    """A stored spec (`pipelines.spec_json`), parsed once per distinct text: the one place a
    stored spec becomes a `PipelineSpec`. The leader reads pipelines on every pass, and
    parsing was most of the cost; keyed by the text itself, an update (a new config
    version) or a pipeline deleted and created again under its name is a new entry, never a
    stale one (a `PipelineSpec` is frozen: shared)."""
    return parse_pipeline_spec(json.loads(spec_json), stored=True)


def partitions_json(partitions: Iterable[TopicPartition]) -> str:
    """A task's partitions as stored in `tasks.partitions_json` (sorted)."""
    return json.dumps([[tp.topic, tp.partition] for tp in sorted(partitions)])


@functools.lru_cache(maxsize=65_536)
def parsed_partitions(text: str) -> tuple[TopicPartition, ...]:
    """A task's stored partitions (`tasks.partitions_json`), parsed once per distinct text
    (as `parsed_spec`): heartbeats, triggers and reports read the same task rows over and
    over, and the parse was a third of a row's cost. The tuple is immutable: shared."""
    return tuple(TopicPartition(t, int(p)) for t, p in json.loads(text))


def task_record(row: Any) -> TaskRecord:
    """A `tasks` row: every statement that reads one selects `tasks` first, its columns in
    table order (`sa.select(tasks, ...)`); columns after those are not the task's.

    Mapped once per distinct row (as `parsed_partitions`): triggers, reports and
    heartbeats read the same unchanged rows over and over, and building the record (a
    frozen dataclass, an enum, the id split) cost 12 us a row against 0.3 us to find it."""
    return _task_from_values(tuple(row[:_TASK_COLUMNS]))


_TASK_COLUMNS = len(tasks.c)


@functools.lru_cache(maxsize=32_768)
def _task_from_values(values: tuple[Any, ...]) -> TaskRecord:
    (
        task_id,
        _pipeline_id,
        _task_index,
        partitions,
        executor_id,
        generation,
        state,
        state_executor_id,
        state_executor_generation,
        last_error,
        updated_at_ms,
    ) = values
    pipeline_id, index = split_task_id(TaskId(task_id))
    return TaskRecord(
        task_id=TaskId(task_id),
        pipeline_id=pipeline_id,
        task_index=index,
        partitions=parsed_partitions(partitions),
        executor_id=ExecutorId(executor_id) if executor_id else None,
        generation=Generation(int(generation)),
        state=TaskState(state),
        state_executor_id=ExecutorId(state_executor_id) if state_executor_id else None,
        state_executor_generation=(
            Generation(int(state_executor_generation))
            if state_executor_generation is not None
            else None
        ),
        last_error=last_error,
        updated_at_ms=int(updated_at_ms),
    )


def sink_handle(row: Any) -> TransactionHandle:
    """A `precommit_handles` row."""
    return TransactionHandle(
        transactional_id=TransactionalId(row.transactional_id),
        producer_id=int(row.producer_id),
        producer_epoch=int(row.producer_epoch),
    )


def read_executor(
    conn: Connection, executor_id: ExecutorId, *, for_update: bool = False
) -> ExecutorRecord:
    """One executor; NotFound if it is not registered."""
    stmt = _EXECUTOR.with_for_update() if for_update else _EXECUTOR
    row = conn.execute(stmt, {"executor_id": executor_id}).first()
    if row is None:
        raise executor_not_registered(executor_id)
    return executor_record(row)


def executor_not_registered(executor_id: ExecutorId) -> NotFound:
    """The refusal of a call naming an executor that is not registered."""
    return NotFound(
        f"executor {executor_id!r} is not registered (never, or it deregistered); register it",
        resource_type="executor",
        resource_name=executor_id,
    )


def read_executors_by_id(
    conn: Connection, executor_ids: Sequence[ExecutorId], *, for_update: bool = False
) -> list[ExecutorRecord]:
    """Those of these executors that are registered, in id order (the order their rows are
    locked in with `for_update`, so two writers never wait for each other's)."""
    stmt = _EXECUTORS_BY_ID.with_for_update() if for_update else _EXECUTORS_BY_ID
    return [executor_record(r) for r in conn.execute(stmt, {"executor_ids": list(executor_ids)})]


def executor_generations(
    conn: Connection, executor_ids: Iterable[ExecutorId]
) -> dict[ExecutorId, Generation]:
    """The current generation of each of these executors that is registered."""
    return {
        ExecutorId(r.executor_id): Generation(int(r.generation))
        for r in conn.execute(_EXECUTOR_GENERATIONS, {"executor_ids": sorted(set(executor_ids))})
    }


def read_pipeline(
    conn: Connection, pipeline_id: PipelineId, *, for_update: bool = False
) -> PipelineRecord:
    """One pipeline; NotFound if there is none by that name."""
    stmt = _PIPELINE.with_for_update() if for_update else _PIPELINE
    row = conn.execute(stmt, {"pipeline_id": pipeline_id}).first()
    if row is None:
        raise pipeline_not_found(pipeline_id)
    return pipeline_record(row)


def pipeline_not_found(pipeline_id: PipelineId) -> NotFound:
    """The refusal of a call naming a pipeline that does not exist."""
    return NotFound(
        f"no pipeline named {pipeline_id!r}; list pipelines to see the names",
        resource_type="pipeline",
        resource_name=pipeline_id,
    )


def lock_pipelines(
    conn: Connection, pipeline_ids: Iterable[PipelineId]
) -> dict[PipelineId, PipelineRecord]:
    """Lock these pipelines' rows FOR UPDATE in name order, as every writer of many
    pipelines locks them (two such writers never wait on each other in a cycle), and
    return those that exist (a deleted one is absent). One statement."""
    rows = conn.execute(_PIPELINES_FOR_UPDATE, {"pipeline_ids": sorted(set(pipeline_ids))})
    return {PipelineId(r.pipeline_id): pipeline_record(r) for r in rows}


def read_tasks(conn: Connection, pipeline_id: PipelineId | None) -> list[TaskRecord]:
    """Tasks of one pipeline (None: of all), in (pipeline, index) order."""
    rows = (
        conn.execute(_TASKS)
        if pipeline_id is None
        else conn.execute(_TASKS_OF, {"pipeline_id": pipeline_id})
    )
    return [task_record(r) for r in rows]


def read_tasks_by_id(conn: Connection, task_ids: Sequence[TaskId]) -> dict[TaskId, TaskRecord]:
    """These tasks, those that exist."""
    return {
        TaskId(r.task_id): task_record(r)
        for r in conn.execute(_TASKS_BY_ID, {"task_ids": sorted(set(task_ids))})
    }


def read_task(conn: Connection, task: TaskId, *, for_update: bool = False) -> TaskRecord:
    """One task; NotFound if it does not exist."""
    stmt = _TASK.with_for_update() if for_update else _TASK
    row = conn.execute(stmt, {"task_id": task}).first()
    if row is None:
        raise NotFound(
            f"no task {task!r}; the pipeline may have been deleted or re-split",
            resource_type="task",
            resource_name=task,
        )
    return task_record(row)


def checkpoint_states(
    conn: Connection, pipeline_id: PipelineId
) -> dict[CheckpointId, CheckpointState]:
    """The state of each checkpoint of the pipeline that is not COMMITTED (the snapshot
    the checkpoint decisions take: in flight, aborted, completion order)."""
    return checkpoint_states_of(conn, [pipeline_id]).get(pipeline_id, {})


def checkpoint_states_of(
    conn: Connection, pipeline_ids: Sequence[PipelineId]
) -> dict[PipelineId, dict[CheckpointId, CheckpointState]]:
    """`checkpoint_states` of each of these pipelines (one with none is absent), in one
    read from the (pipeline, state, checkpoint) index."""
    states: dict[PipelineId, dict[CheckpointId, CheckpointState]] = {}
    rows = conn.execute(_NOT_COMMITTED_STATES, {"pipeline_ids": sorted(set(pipeline_ids))})
    for pipeline_id, checkpoint_id, state in rows:
        states.setdefault(PipelineId(pipeline_id), {})[CheckpointId(int(checkpoint_id))] = (
            CheckpointState(state)
        )
    return states


def of_checkpoints_in(
    table: sa.Table,
    states: Iterable[CheckpointState],
    pipeline_ids: Sequence[PipelineId] | sa.BindParameter[Any] | None = None,
) -> sa.ColumnElement[bool]:
    """A filter on a table keyed by (pipeline_id, checkpoint_id) (`checkpoint_tasks`,
    `precommit_offsets`, `precommit_handles`): its rows of the checkpoints in these
    states, of these pipelines (None: of all; an expanding bound parameter: of those bound
    at each execution, for a statement built once). The checkpoints lead the read, so it
    costs the checkpoints in those states, not the table's history: a join filtered on the
    table's own pipeline_id let SQLite walk every row the pipeline ever wrote."""
    keys = sa.select(checkpoints.c.pipeline_id, checkpoints.c.checkpoint_id).where(
        checkpoints.c.state.in_(sorted(s.value for s in states))
    )
    if isinstance(pipeline_ids, sa.BindParameter):
        keys = keys.where(checkpoints.c.pipeline_id.in_(pipeline_ids))
    elif pipeline_ids is not None:
        keys = keys.where(checkpoints.c.pipeline_id.in_(sorted(set(pipeline_ids))))
    return sa.tuple_(table.c.pipeline_id, table.c.checkpoint_id).in_(keys)


def find_checkpoint(
    conn: Connection, pipeline_id: PipelineId, checkpoint_id: CheckpointId
) -> CheckpointRecord | None:
    """Checkpoint N with its tasks; None if N does not exist."""
    key = {"pipeline_id": pipeline_id, "checkpoint_id": checkpoint_id}
    row = conn.execute(_CHECKPOINT, key).first()
    if row is None:
        return None
    return checkpoint_record(row, conn.execute(_CHECKPOINT_TASKS, key).all())


def find_checkpoints_of_tasks(
    conn: Connection, task_ids: Mapping[CheckpointKey, AbstractSet[TaskId]]
) -> dict[CheckpointKey, CheckpointRecord | None]:
    """Each of these checkpoints with only these of its tasks (a partial record, for a
    check about those tasks alone; None for one that does not exist), in two statements
    however many checkpoints (`keyed.py`): a report batch mixes many pipelines' (issue
    14), and one read per checkpoint was most of a batch's cost."""
    keys = sorted(task_ids)
    found = {
        (PipelineId(r.pipeline_id), CheckpointId(int(r.checkpoint_id))): r
        for r in execute_keyed(conn, _checkpoints_where, checkpoints, keys)
    }
    task_rows: dict[CheckpointKey, list[Any]] = {key: [] for key in found}
    for t in execute_keyed(
        conn, _checkpoint_tasks_where, checkpoint_tasks, sorted(found), task_ids=task_ids
    ):
        task_rows[(PipelineId(t.pipeline_id), CheckpointId(int(t.checkpoint_id)))].append(t)
    return {
        key: checkpoint_record(found[key], task_rows[key]) if key in found else None for key in keys
    }


def _checkpoints_where(keys: sa.ColumnElement[bool]) -> sa.Executable:
    return sa.select(checkpoints).where(keys)


def _checkpoint_tasks_where(keys: sa.ColumnElement[bool]) -> sa.Executable:
    return sa.select(checkpoint_tasks).where(keys).order_by(checkpoint_tasks.c.task_id)


def commit_where(keys: sa.ColumnElement[bool]) -> sa.Executable:
    """Move the checkpoints still COMPLETE to COMMITTED; returns the rows it moved, as
    written (`keyed.py`)."""
    return (
        checkpoints.update()
        .where(keys, checkpoints.c.state == CheckpointState.COMPLETE.value)
        .values(state=CheckpointState.COMMITTED.value, committed_at_ms=db_now_ms())
        .returning(*checkpoints.c)
    )


def checkpoint_record(row: Any, task_rows: Sequence[Any] = ()) -> CheckpointRecord:
    """A `checkpoints` row with its `checkpoint_tasks` rows (none: a summary without tasks,
    for the decisions that read only states and times)."""
    return CheckpointRecord(
        pipeline_id=PipelineId(row.pipeline_id),
        checkpoint_id=CheckpointId(int(row.checkpoint_id)),
        state=CheckpointState(row.state),
        leader_epoch=LeaderEpoch(int(row.leader_epoch)),
        tasks=tuple(
            TaskTrigger(
                task_id=TaskId(t.task_id),
                task_generation=Generation(int(t.task_generation)),
                executor_id=ExecutorId(t.executor_id) if t.executor_id else None,
                transactional_id=t.transactional_id,
                slot=int(t.slot),
            )
            for t in task_rows
        ),
        precommitted=frozenset(
            TaskId(t.task_id) for t in task_rows if t.precommitted_at_ms is not None
        ),
        triggered_at_ms=int(row.triggered_at_ms),
        completed_at_ms=opt_int(row.completed_at_ms),
        committed_at_ms=opt_int(row.committed_at_ms),
        aborted_at_ms=opt_int(row.aborted_at_ms),
        abort_reason=row.abort_reason,
        data_loss_error=row.data_loss_error,
        data_lost_at_ms=opt_int(row.data_lost_at_ms),
        data_loss_resolved=row.data_loss_resolved_at_ms is not None,
        lost_tasks=frozenset(TaskId(t.task_id) for t in task_rows if t.lost_at_ms is not None),
    )


def read_checkpoint_summaries(
    conn: Connection, keys: Sequence[CheckpointKey]
) -> list[CheckpointRecord]:
    """These checkpoints (those that exist) without their tasks, in one read."""
    if not keys:
        return []
    if len(keys) == 1:  # the usual case: one report's, one commit's checkpoint
        pipeline_id, checkpoint_id = keys[0]
        one = {"pipeline_id": pipeline_id, "checkpoint_id": checkpoint_id}
        return [checkpoint_record(r) for r in conn.execute(_CHECKPOINT, one)]
    return [
        checkpoint_record(r) for r in execute_keyed(conn, _checkpoints_where, checkpoints, keys)
    ]


def read_checkpoint(
    conn: Connection,
    pipeline_id: PipelineId,
    checkpoint_id: CheckpointId,
    *,
    with_tasks: bool = True,
) -> CheckpointRecord:
    """Checkpoint N with its tasks (without, its state and times in one statement);
    NotFound if it does not exist."""
    if with_tasks:
        record = find_checkpoint(conn, pipeline_id, checkpoint_id)
    else:
        summaries = read_checkpoint_summaries(conn, [(pipeline_id, checkpoint_id)])
        record = summaries[0] if summaries else None
    if record is None:
        raise NotFound(
            f"pipeline {pipeline_id!r} has no checkpoint {checkpoint_id}",
            resource_type="checkpoint",
            resource_name=f"{pipeline_id}/{checkpoint_id}",
        )
    return record


def unresolved_data_loss(conn: Connection, pipeline_id: PipelineId) -> CheckpointRecord | None:
    """The pipeline's oldest DATA_LOST checkpoint not moved past yet: while there is one,
    the pipeline is FAILED and no checkpoint may start."""
    lost = unresolved_data_losses(conn, [pipeline_id]).get(pipeline_id)
    return None if lost is None else read_checkpoint(conn, pipeline_id, lost)


def unresolved_data_losses(
    conn: Connection, pipeline_ids: Sequence[PipelineId]
) -> dict[PipelineId, CheckpointId]:
    """`unresolved_data_loss` of each of these pipelines that has one, by id, in one read."""
    if not pipeline_ids:
        return {}
    rows = conn.execute(_UNRESOLVED_DATA_LOSSES, {"pipeline_ids": sorted(set(pipeline_ids))})
    return {PipelineId(p): CheckpointId(int(c)) for p, c in rows}


def move_checkpoint(
    conn: Connection,
    pipeline_id: PipelineId,
    checkpoint_id: CheckpointId,
    *,
    was: CheckpointState,
    to: CheckpointState,
    **values: Any,
) -> bool:
    """Move checkpoint N from state `was` to `to` (writing `values` with it) if it is still
    in `was`; whether it was. The caller holds the pipeline row's lock."""
    done = conn.execute(
        checkpoints.update()
        .where(
            checkpoints.c.pipeline_id == pipeline_id,
            checkpoints.c.checkpoint_id == checkpoint_id,
            checkpoints.c.state == was.value,
        )
        .values(state=to.value, **values)
    )
    return bool(done.rowcount == 1)


def resolve_data_loss(conn: Connection, pipeline_id: PipelineId) -> None:
    """Mark every unresolved DATA_LOST checkpoint of the pipeline moved past (an offset
    reset or a restart from it); the caller holds the pipeline row's lock."""
    conn.execute(
        checkpoints.update()
        .where(
            checkpoints.c.pipeline_id == pipeline_id,
            checkpoints.c.state == CheckpointState.DATA_LOST.value,
            checkpoints.c.data_loss_resolved_at_ms.is_(None),
        )
        .values(data_loss_resolved_at_ms=db_now_ms())
    )


def read_precommit_ranges(
    conn: Connection, pipeline_id: PipelineId, checkpoint_ids: list[CheckpointId]
) -> list[tuple[CheckpointId, TaskId, TopicPartition, int, int]]:
    """(checkpoint, task, partition, start, end) of every range the checkpoints' tasks
    pre-committed, by topic and partition."""
    rows = conn.execute(
        sa.select(precommit_offsets)
        .where(
            precommit_offsets.c.pipeline_id == pipeline_id,
            precommit_offsets.c.checkpoint_id.in_(checkpoint_ids),
        )
        .order_by(precommit_offsets.c.topic, precommit_offsets.c.partition)
    ).all()
    return [
        (
            CheckpointId(int(r.checkpoint_id)),
            TaskId(r.task_id),
            TopicPartition(r.topic, int(r.partition)),
            int(r.start_offset),
            int(r.end_offset),
        )
        for r in rows
    ]
