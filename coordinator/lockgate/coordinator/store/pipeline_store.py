"""Pipelines (config, target state, version) and their tasks (split, assignment, state).

Kafka Connect's config and status backing stores in one: what the user asked for (the
spec, `TargetState`) beside what executors observed (`TaskState`, stamped with the
reporting executor and its generation). Re-splits, reassignments and restarts bump task
generations so the old instance's reports become stale; reassigning or restarting a task
aborts the TRIGGERED checkpoints it is in, in the same transaction.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from lockgate.common.model.ids import (
    CheckpointId,
    ExecutorId,
    Generation,
    PipelineId,
    TaskId,
    task_id,
)
from lockgate.common.model.pipeline_spec import PipelineSpec
from lockgate.coordinator.domain.assignment import assignment_changes
from lockgate.coordinator.domain.errors import AlreadyExists, InvalidArgument
from lockgate.coordinator.domain.lease import Fence
from lockgate.coordinator.domain.membership import (
    AssignedTask,
    check_executor_session,
    check_task_owner,
)
from lockgate.coordinator.domain.pipelines import (
    PipelineRecord,
    PipelinesFingerprint,
    TaskRecord,
    TasksChanged,
    check_config_version,
    check_task_restartable,
    plan_task_split,
    restarts_for_new_config,
    tasks_to_restart,
)
from lockgate.coordinator.domain.states import (
    TargetState,
    TaskState,
    transition_target_state,
    transition_task_state,
)
from lockgate.coordinator.domain.tasks import TaskSplit
from lockgate.coordinator.domain.transactional_ids import check_prefix_free
from lockgate.coordinator.store.checkpoint_aborts import abort_checkpoints_of_tasks
from lockgate.coordinator.store.data_loss_store import move_past_data_loss
from lockgate.coordinator.store.engine import Database, db_now_ms
from lockgate.coordinator.store.rows import (
    executor_generations,
    partitions_json,
    pipeline_record,
    read_pipeline,
    read_task,
    read_tasks,
    task_record,
)
from lockgate.coordinator.store.tables import (
    ASSIGNMENT_STAMP_ROW_ID,
    assignment_stamp,
    checkpoint_tasks,
    checkpoints,
    pipelines,
    precommit_handles,
    precommit_offsets,
    source_offsets,
    tasks,
    transactional_ids,
)


def _check_prefix_free(conn: Connection, spec: PipelineSpec) -> None:
    """InvalidArgument if another pipeline's transactional ids start with `spec`'s prefix.

    Known race: two leader calls creating pipelines with the same explicit prefix at the
    same instant may both pass on PostgreSQL (each misses the other's uncommitted row); the
    leader's API calls are rare and a user's, and the second pipeline's producers would
    only fence the first's until one is changed."""
    taken = {
        record.spec.transactional_id_prefix: record.pipeline_id
        for record in (pipeline_record(row) for row in conn.execute(sa.select(pipelines)))
    }
    check_prefix_free(PipelineId(spec.name), spec.transactional_id_prefix, taken)


def write_task_split(
    conn: Connection, pipeline_id: PipelineId, splits: Sequence[TaskSplit]
) -> None:
    """Make the pipeline's tasks match `splits` (`domain.pipelines.plan_task_split`), inside
    the caller's transaction, which holds the pipeline row."""
    plan = plan_task_split(read_tasks(conn, pipeline_id), splits)
    for removed in plan.removed:
        conn.execute(tasks.delete().where(tasks.c.task_id == removed))
    for split in plan.added:
        conn.execute(
            tasks.insert().values(
                task_id=task_id(pipeline_id, split.index),
                pipeline_id=pipeline_id,
                task_index=split.index,
                partitions_json=partitions_json(split.partitions),
                executor_id=None,
                generation=1,
                state=TaskState.UNASSIGNED.value,
                updated_at_ms=db_now_ms(),
            )
        )
    for changed, split in plan.changed:
        conn.execute(
            tasks.update()
            .where(tasks.c.task_id == changed)
            .values(
                partitions_json=partitions_json(split.partitions),
                generation=tasks.c.generation + 1,
                state=TaskState.UNASSIGNED.value,
                updated_at_ms=db_now_ms(),
            )
        )


def _restart_tasks(conn: Connection, pipeline_id: PipelineId, *, only_failed: bool) -> TasksChanged:
    """Give the pipeline's tasks (or only the FAILED ones) state RESTARTING and a new
    generation, and abort the TRIGGERED checkpoints they are in; the caller holds the
    pipeline row."""
    chosen = tasks_to_restart(read_tasks(conn, pipeline_id), only_failed=only_failed)
    for task in chosen:
        conn.execute(
            tasks.update()
            .where(tasks.c.task_id == task.task_id)
            .values(
                state=TaskState.RESTARTING.value,
                generation=tasks.c.generation + 1,
                last_error=None,
                updated_at_ms=db_now_ms(),
            )
        )
    chosen_ids = {t.task_id for t in chosen}
    aborted = abort_checkpoints_of_tasks(conn, chosen_ids, reason="task restarted")
    return TasksChanged(
        tasks=tuple(t for t in read_tasks(conn, pipeline_id) if t.task_id in chosen_ids),
        aborted=tuple(aborted),
    )


# The fingerprint's two reads, built once (SQLAlchemy caches their compiled form, but
# building a statement on every pass cost more than running it).
_PIPELINES_FINGERPRINT = sa.select(
    sa.func.count(),
    sa.func.coalesce(sa.func.sum(pipelines.c.config_version), 0),
    sa.func.coalesce(sa.func.max(pipelines.c.updated_at_ms), 0),
    # How many are in each target state: a pause and a resume within one millisecond (the
    # same `updated_at_ms`) still change it.
    *(
        sa.func.coalesce(sa.func.sum(sa.case((pipelines.c.target_state == s.value, 1), else_=0)), 0)
        for s in TargetState
    ),
).select_from(pipelines)
_TASKS_FINGERPRINT = sa.select(
    sa.func.count(),
    sa.func.coalesce(sa.func.sum(tasks.c.generation), 0),
    sa.func.count(tasks.c.executor_id),
).select_from(tasks)
_PIPELINES_COLUMNS = len(_PIPELINES_FINGERPRINT.selected_columns)
# Both in one statement, each table's aggregates a one-row subquery (read on every pass),
# joined on true: the product of two one-row results is one row.
_PIPELINES_AGGREGATES = _PIPELINES_FINGERPRINT.subquery()
_TASKS_AGGREGATES = _TASKS_FINGERPRINT.subquery()
_FINGERPRINT = sa.select(*_PIPELINES_AGGREGATES.c, *_TASKS_AGGREGATES.c).select_from(
    _PIPELINES_AGGREGATES.join(_TASKS_AGGREGATES, sa.true())
)


def read_fingerprint(conn: Connection) -> PipelinesFingerprint:
    """What changes whenever the pipeline set, a config version, a target state or a
    task's assignment or generation does (`PipelinesFingerprint`): an aggregate read
    per table in one statement, no row mapped (read on every pass of the leader)."""
    values = tuple(int(v) for v in conn.execute(_FINGERPRINT).one())
    return PipelinesFingerprint(
        pipelines=values[:_PIPELINES_COLUMNS], tasks=values[_PIPELINES_COLUMNS:]
    )


#: An executor's tasks, with their pipelines' versions and target states: every heartbeat
#: reads it (built once, as `rows`' keyed reads: building it cost about twice executing it).
_ASSIGNED = (
    sa.select(tasks, pipelines.c.config_version, pipelines.c.target_state)
    .join(pipelines, pipelines.c.pipeline_id == tasks.c.pipeline_id)
    .where(tasks.c.executor_id == sa.bindparam("executor_id"))
    .order_by(tasks.c.pipeline_id, tasks.c.task_index)
)
_ASSIGNMENT_STAMP = sa.select(assignment_stamp.c.stamp).where(
    assignment_stamp.c.id == ASSIGNMENT_STAMP_ROW_ID
)


def _assigned(conn: Connection, executor_id: ExecutorId) -> list[AssignedTask]:
    return [
        AssignedTask(
            task=task_record(r),
            config_version=int(r.config_version),
            target_state=TargetState(r.target_state),
        )
        for r in conn.execute(_ASSIGNED, {"executor_id": executor_id})
    ]


class PipelineStore:
    """Pipelines, their tasks and the assignment of tasks to executors."""

    def __init__(self, *, database: Database) -> None:
        self._db = database

    def create_pipeline(
        self,
        *,
        fence: Fence,
        spec: PipelineSpec,
        splits: Sequence[TaskSplit] = (),
        target_state: TargetState = TargetState.RUNNING,
    ) -> PipelineRecord:
        """Store a new pipeline (config version 1) with its target state and its tasks
        (`splits`, from `split_partitions`), in one transaction: a lease lost or a crash
        leaves either all of it or nothing, never a pipeline without its tasks.
        Leader-only.

        AlreadyExists if the name is taken.
        """
        initial = transition_target_state(TargetState.RUNNING, target_state)
        with self._db.transaction(fence=fence) as conn:
            exists = conn.execute(
                sa.select(pipelines.c.pipeline_id).where(pipelines.c.pipeline_id == spec.name)
            ).first()
            if exists is not None:
                raise AlreadyExists(
                    f"a pipeline named {spec.name!r} already exists; pick another name, or "
                    f"delete it (`lockgate pipeline delete {spec.name}`: its offsets and "
                    "checkpoint history go with it) and create it again, or change it in "
                    "place with the UpdatePipeline call",
                    resource_type="pipeline",
                    resource_name=spec.name,
                )
            _check_prefix_free(conn, spec)
            conn.execute(
                pipelines.insert().values(
                    pipeline_id=spec.name,
                    spec_json=json.dumps(spec.to_json(), sort_keys=True),
                    config_version=1,
                    target_state=initial.value,
                    next_checkpoint_id=1,
                    created_at_ms=db_now_ms(),
                    updated_at_ms=db_now_ms(),
                )
            )
            write_task_split(conn, PipelineId(spec.name), splits)
            return read_pipeline(conn, PipelineId(spec.name))

    def update_pipeline(
        self,
        *,
        fence: Fence,
        spec: PipelineSpec,
        expected_version: int | None = None,
        splits: Sequence[TaskSplit] | None = None,
    ) -> PipelineRecord:
        """Replace a pipeline's config; its config version grows by one. Leader-only.

        With `expected_version`, FailedPrecondition unless the stored version matches
        (optimistic concurrency for read-modify-write clients). Every task restarts on the
        new config with a new generation (`domain.pipelines.restarts_for_new_config`) and
        the TRIGGERED checkpoints, which ran the old one, abort, in the same transaction;
        with `splits` (the topics or `tasks_max` changed) the tasks are re-split there too
        (`write_task_split`, as `create_pipeline` and `restart_pipeline` do).
        """
        pipeline_id = PipelineId(spec.name)
        with self._db.transaction(fence=fence) as conn:
            check_config_version(
                read_pipeline(conn, pipeline_id, for_update=True), expected_version
            )
            _check_prefix_free(conn, spec)
            conn.execute(
                pipelines.update()
                .where(pipelines.c.pipeline_id == pipeline_id)
                .values(
                    spec_json=json.dumps(spec.to_json(), sort_keys=True),
                    config_version=pipelines.c.config_version + 1,
                    updated_at_ms=db_now_ms(),
                )
            )
            restarts = restarts_for_new_config(read_tasks(conn, pipeline_id))
            for task, state in restarts:
                conn.execute(
                    tasks.update()
                    .where(tasks.c.task_id == task.task_id)
                    .values(
                        generation=tasks.c.generation + 1,
                        state=state.value,
                        updated_at_ms=db_now_ms(),
                    )
                )
            abort_checkpoints_of_tasks(
                conn, {t.task_id for t, _ in restarts}, reason="pipeline config updated"
            )
            if splits is not None:
                write_task_split(conn, pipeline_id, splits)
            return read_pipeline(conn, pipeline_id)

    def delete_pipeline(self, *, fence: Fence, pipeline_id: PipelineId) -> None:
        """Delete a pipeline with its tasks, checkpoints and offsets. Leader-only.

        Open transactions of its in-flight checkpoints are left to the broker's
        `transaction.timeout.ms`; stop the pipeline first to end them cleanly.
        """
        with self._db.transaction(fence=fence) as conn:
            read_pipeline(conn, pipeline_id, for_update=True)
            # Explicit deletes, child tables first: SQLite enforces ON DELETE CASCADE only
            # when the connection enabled foreign keys, and we would rather not depend on it.
            for table in (
                precommit_handles,
                precommit_offsets,
                checkpoint_tasks,
                checkpoints,
                transactional_ids,
                source_offsets,
                tasks,
            ):
                conn.execute(table.delete().where(table.c.pipeline_id == pipeline_id))
            conn.execute(pipelines.delete().where(pipelines.c.pipeline_id == pipeline_id))

    def set_target_state(
        self, *, fence: Fence, pipeline_id: PipelineId, target_state: TargetState
    ) -> PipelineRecord:
        """Pause, resume or stop a pipeline (what the user wants). Leader-only."""
        with self._db.transaction(fence=fence) as conn:
            current = read_pipeline(conn, pipeline_id, for_update=True)
            new_state = transition_target_state(current.target_state, target_state)
            conn.execute(
                pipelines.update()
                .where(pipelines.c.pipeline_id == pipeline_id)
                .values(target_state=new_state.value, updated_at_ms=db_now_ms())
            )
            return read_pipeline(conn, pipeline_id)

    def get_pipeline(self, *, pipeline_id: PipelineId) -> PipelineRecord:
        """One pipeline; NotFound if there is none by that name."""
        with self._db.read() as conn:
            return read_pipeline(conn, pipeline_id)

    def get_pipelines(
        self, *, pipeline_ids: Sequence[PipelineId]
    ) -> dict[PipelineId, PipelineRecord]:
        """These pipelines, those that exist, in one query."""
        with self._db.read() as conn:
            return {
                PipelineId(r.pipeline_id): pipeline_record(r)
                for r in conn.execute(
                    sa.select(pipelines).where(
                        pipelines.c.pipeline_id.in_(sorted(set(pipeline_ids)))
                    )
                )
            }

    def list_pipelines(
        self, *, page_size: int = 100, page_token: str = ""
    ) -> tuple[list[PipelineRecord], str]:
        """Pipelines in name order, a page at a time; the token is "" after the last page."""
        if page_size <= 0:
            raise InvalidArgument.for_field("page_size", f"must be > 0, got {page_size}")
        with self._db.read() as conn:
            stmt = sa.select(pipelines).order_by(pipelines.c.pipeline_id).limit(page_size + 1)
            if page_token:
                stmt = stmt.where(pipelines.c.pipeline_id > page_token)
            rows = conn.execute(stmt).all()
        records = [pipeline_record(r) for r in rows[:page_size]]
        next_token = records[-1].pipeline_id if len(rows) > page_size else ""
        return records, next_token

    def list_tasks(self, *, pipeline_id: PipelineId | None = None) -> list[TaskRecord]:
        """Tasks of one pipeline, or of all, in (pipeline, index) order."""
        with self._db.read() as conn:
            return read_tasks(conn, pipeline_id)

    def list_assigned_since(
        self, *, executor_id: ExecutorId, stamp: int | None
    ) -> tuple[int, list[AssignedTask] | None]:
        """The assignment stamp now (`tables.assignment_stamp`) and, unless it is still
        `stamp` (nothing a heartbeat's answer is made of changed since), the tasks assigned
        to the executor, each with its pipeline's config version and target state, in
        (pipeline, index) order: one indexed read of that executor's rows, whatever the
        size of the cluster, and one row read when nothing changed. The stamp
        is read first, so tasks are never labelled with a stamp older than what they show
        was written after (at worst, read again next time)."""
        with self._db.read() as conn:
            now = int(conn.execute(_ASSIGNMENT_STAMP).scalar_one())
            return now, None if now == stamp else _assigned(conn, executor_id)

    def get_task(self, *, task_id: TaskId) -> TaskRecord:
        """One task; NotFound if it does not exist."""
        with self._db.read() as conn:
            return read_task(conn, task_id)

    def apply_assignment(
        self,
        *,
        fence: Fence,
        assignment: Mapping[ExecutorId, AbstractSet[TaskId]],
    ) -> TasksChanged:
        """Write a new assignment (from `plan_assignment`); return the tasks that changed
        and the checkpoints that aborted.

        Leader-only. Every task whose executor changes gets generation + 1 and state
        UNASSIGNED (its old executor's reports become stale); tasks absent from
        `assignment` lose their executor. Checkpoints still TRIGGERED that include a moved
        task abort (with every later in-flight one of the pipeline), in the same
        transaction: the moved task's new owner restarts from the last COMPLETE one.
        """
        owner = {t: e for e, ts in assignment.items() for t in ts}
        with self._db.transaction(fence=fence) as conn:
            changed = assignment_changes(read_tasks(conn, None), assignment)
            for pipeline_id in sorted({t.pipeline_id for t in changed}):
                read_pipeline(conn, pipeline_id, for_update=True)
            for task in changed:
                conn.execute(
                    tasks.update()
                    .where(tasks.c.task_id == task.task_id)
                    .values(
                        executor_id=owner.get(task.task_id),
                        generation=tasks.c.generation + 1,
                        state=TaskState.UNASSIGNED.value,
                        state_executor_id=None,
                        state_executor_generation=None,
                        updated_at_ms=db_now_ms(),
                    )
                )
            changed_ids = {t.task_id for t in changed}
            aborted = abort_checkpoints_of_tasks(conn, changed_ids, reason="task reassigned")
            return TasksChanged(
                tasks=tuple(t for t in read_tasks(conn, None) if t.task_id in changed_ids),
                aborted=tuple(aborted),
            )

    def report_task_state(
        self,
        *,
        fence: Fence,
        task_id: TaskId,
        task_generation: Generation,
        executor_id: ExecutorId,
        executor_generation: Generation,
        state: TaskState,
        error: str | None = None,
    ) -> TaskRecord:
        """Record a task state observed by its executor. Leader-only.

        StaleGeneration unless the executor's session and the task's assignment are both
        current and the task is assigned to that executor; IllegalTransition if the state
        table forbids the move (e.g. FAILED -> RUNNING without a restart).
        """
        with self._db.transaction(fence=fence) as conn:
            check_executor_session(
                executor_id,
                reported=executor_generation,
                current=executor_generations(conn, [executor_id]).get(executor_id),
            )
            task = read_task(conn, task_id, for_update=True)
            check_task_owner(task, executor_id, task_generation)
            new_state = transition_task_state(task.state, state)
            conn.execute(
                tasks.update()
                .where(tasks.c.task_id == task_id)
                .values(
                    state=new_state.value,
                    state_executor_id=executor_id,
                    state_executor_generation=executor_generation,
                    last_error=error if new_state is TaskState.FAILED else None,
                    updated_at_ms=db_now_ms(),
                )
            )
            return read_task(conn, task_id)

    def restart_tasks(
        self, *, fence: Fence, pipeline_id: PipelineId, only_failed: bool = False
    ) -> TasksChanged:
        """Mark a pipeline's tasks RESTARTING with a new generation. Leader-only.

        The new generation makes the old instance's reports stale; its executor restarts
        the task with restore state. Returns the tasks restarted and the checkpoints that
        aborted.
        """
        with self._db.transaction(fence=fence) as conn:
            read_pipeline(conn, pipeline_id, for_update=True)
            return _restart_tasks(conn, pipeline_id, only_failed=only_failed)

    def restart_pipeline(
        self,
        *,
        fence: Fence,
        pipeline_id: PipelineId,
        splits: Sequence[TaskSplit],
        restart_tasks: bool,
        only_failed: bool = False,
        past_data_loss: CheckpointId | None = None,
    ) -> TasksChanged:
        """A pipeline's restart in one transaction. Leader-only: with `past_data_loss` N,
        move past its DATA_LOST checkpoint N (FailedPrecondition unless N is the one that
        blocks it); re-split its tasks to `splits`; with `restart_tasks`, restart them (or
        only the FAILED ones) as `restart_tasks`. A lease lost or a crash leaves all of it
        or nothing, so a retry of the same restart finds N still to move past.
        """
        with self._db.transaction(fence=fence) as conn:
            read_pipeline(conn, pipeline_id, for_update=True)
            if past_data_loss is not None:
                move_past_data_loss(conn, pipeline_id, past_data_loss)
            write_task_split(conn, pipeline_id, splits)
            if not restart_tasks:
                return TasksChanged(tasks=(), aborted=())
            return _restart_tasks(conn, pipeline_id, only_failed=only_failed)

    def restart_task(self, *, fence: Fence, task_id: TaskId) -> TasksChanged:
        """Restart one task with a new generation, its error cleared (Kafka Connect's task
        restart). Leader-only.

        Its executor (or, if that one is dead, the next one the assignment picks) starts it
        again from the last COMPLETE checkpoint; the old generation's reports become stale
        and the TRIGGERED checkpoints it is in abort, in the same transaction.
        FailedPrecondition while the pipeline is STOPPED; NotFound for an unknown task.
        """
        with self._db.transaction(fence=fence) as conn:
            pipeline_id = read_task(conn, task_id).pipeline_id
            pipeline = read_pipeline(conn, pipeline_id, for_update=True)
            task = read_task(conn, task_id, for_update=True)
            state = check_task_restartable(pipeline, task)
            conn.execute(
                tasks.update()
                .where(tasks.c.task_id == task_id)
                .values(
                    state=state.value,
                    generation=tasks.c.generation + 1,
                    last_error=None,
                    updated_at_ms=db_now_ms(),
                )
            )
            aborted = abort_checkpoints_of_tasks(conn, {task_id}, reason="task restarted")
            return TasksChanged(tasks=(read_task(conn, task_id),), aborted=tuple(aborted))
