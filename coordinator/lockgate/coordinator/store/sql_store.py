"""The coordinator's store: every SQL statement the coordinator issues is in this module.

SQLite (a file in WAL mode shared by the replicas on one machine) or PostgreSQL, through
SQLAlchemy Core. Methods take keyword-only arguments and return domain values.

Fencing (see `domain/lease.py` for the rules): every state-changing method takes the
leader's `Fence` and starts its transaction with `_check_fence`, which re-reads the lease
row *under a lock that keeps it from changing until the transaction ends*:
- SQLite: write transactions begin with `BEGIN IMMEDIATE`, taking the database's single
  write lock before the first read, so no other replica can change the lease row (or
  anything else) until this transaction commits or rolls back;
- PostgreSQL: `SELECT ... FROM leader_lease ... FOR SHARE`; a contender's acquiring
  `UPDATE` waits for this transaction, then re-evaluates its condition.
The check requires holder, epoch and an unexpired lease by the database's clock; on failure
nothing is written and `FencedError` is raised. Each check-then-write inside a transaction
also locks the rows it re-reads (`FOR UPDATE` on PostgreSQL: the pipeline row first, then
the rows under it, always in that order, so two leader threads cannot deadlock), and
conditional `UPDATE ... WHERE state = ...` statements check their row counts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import FunctionElement

from lockgate.common.kafka_transactions import belongs_to_slot
from lockgate.coordinator.domain.checkpoints import (
    DEFAULT_MAX_IN_FLIGHT,
    CheckpointRecord,
    LingeringTransaction,
    PendingCommit,
    Precommit,
    RestoreState,
    SinkHandle,
    TaskHandles,
    TaskTrigger,
    aborts_cascading_from,
    completion_blocker,
)
from lockgate.coordinator.domain.errors import (
    AlreadyExists,
    FailedPrecondition,
    FencedError,
    InvalidArgument,
    NotFound,
    StaleGeneration,
)
from lockgate.coordinator.domain.ids import (
    CheckpointId,
    CoordinatorId,
    ExecutorId,
    Generation,
    LeaderEpoch,
    PipelineId,
    TaskId,
    split_task_id,
    task_id,
)
from lockgate.coordinator.domain.lease import Fence, LeaseRecord
from lockgate.coordinator.domain.membership import ExecutorRecord, check_generation
from lockgate.coordinator.domain.pipeline_spec import PipelineSpec, parse_pipeline_spec
from lockgate.coordinator.domain.pipelines import PartitionOffset, PipelineRecord, TaskRecord
from lockgate.coordinator.domain.states import (
    CheckpointState,
    TargetState,
    TaskState,
    transition_checkpoint,
    transition_target_state,
    transition_task_state,
)
from lockgate.coordinator.domain.tasks import TaskSplit, TopicPartition
from lockgate.coordinator.domain.transactional_ids import (
    TRANSACTIONAL_ID_SLOTS,
    choose_slot,
    transactional_id,
)
from lockgate.coordinator.store import migrate
from lockgate.coordinator.store.tables import (
    LEASE_ROW_ID,
    checkpoint_tasks,
    checkpoints,
    executors,
    leader_lease,
    pipelines,
    precommit_handles,
    precommit_offsets,
    source_offsets,
    tasks,
    transactional_ids,
)

DEFAULT_SQLITE_BUSY_TIMEOUT_MS = 10_000


class db_now_ms(FunctionElement[int]):
    """The database's clock in integer milliseconds since the Unix epoch.

    Rendered per dialect: never a replica's own clock (DESIGN.md, leader lease).
    """

    type = sa.BigInteger()
    inherit_cache = True


@compiles(db_now_ms, "sqlite")
def _db_now_sqlite(element: db_now_ms, compiler: SQLCompiler, **kw: Any) -> str:
    # julianday('now') has millisecond resolution; 2440587.5 is the Unix epoch's day.
    return "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"


@compiles(db_now_ms, "postgresql")
def _db_now_postgresql(element: db_now_ms, compiler: SQLCompiler, **kw: Any) -> str:
    # statement_timestamp(), not now(): now() is frozen at the start of the transaction,
    # which may be long before a fence check; clock_timestamp() would differ between the
    # several uses inside one compare-and-set statement.
    return "CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS BIGINT)"


def open_store(
    url: str,
    *,
    migrate_schema: bool = True,
    sqlite_busy_timeout_ms: int = DEFAULT_SQLITE_BUSY_TIMEOUT_MS,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> SqlStore:
    """Open the store at a SQLAlchemy URL and, by default, migrate it to the newest schema.

    `sqlite:///path/to/lockgate.db` or `postgresql+psycopg://user@host/db`.
    """
    engine = create_engine(url, sqlite_busy_timeout_ms=sqlite_busy_timeout_ms)
    if migrate_schema:
        migrate.upgrade_to_head(engine)
    return SqlStore(engine=engine, max_in_flight=max_in_flight)


def create_engine(url: str, *, sqlite_busy_timeout_ms: int) -> Engine:
    """Create an engine configured for the coordinator (WAL, busy timeout, explicit BEGIN)."""
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError as exc:
        raise InvalidArgument.for_field(
            "db",
            f"{url!r} is not a database URL; use sqlite:///path/to/file.db or "
            "postgresql+psycopg://user@host:port/database",
        ) from exc
    backend = parsed.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise InvalidArgument.for_field(
            "db", f"database {backend!r} is not supported; use sqlite or postgresql+psycopg"
        )
    if backend == "sqlite":
        engine = sa.create_engine(parsed)
        _configure_sqlite(engine, busy_timeout_ms=sqlite_busy_timeout_ms)
        return engine
    return sa.create_engine(parsed, pool_pre_ping=True)


def _configure_sqlite(engine: Engine, *, busy_timeout_ms: int) -> None:
    # pysqlite's own transaction handling issues a deferred BEGIN lazily before the first
    # write, which lets a fence check read the lease before another replica changes it.
    # Take control: autocommit at the driver level and our own BEGIN, IMMEDIATE for writes.
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        cursor.execute("PRAGMA journal_mode = WAL")
        # FULL: the COMPLETE row is a commit point; it must survive power loss, not only
        # a process crash.
        cursor.execute("PRAGMA synchronous = FULL")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        mode = "IMMEDIATE" if connection.get_execution_options().get("lockgate_write") else ""
        connection.exec_driver_sql(f"BEGIN {mode}".strip())


class SqlStore:
    """All of the coordinator's state. Thread-safe (one connection per call).

    Methods marked leader-only take a `fence` and raise `FencedError` if the caller no
    longer leads; they re-check every precondition inside their own transaction.
    """

    def __init__(self, *, engine: Engine, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT) -> None:
        if not 1 <= max_in_flight < TRANSACTIONAL_ID_SLOTS + 1:
            raise ValueError(
                f"max_in_flight must be between 1 and {TRANSACTIONAL_ID_SLOTS} "
                "(the transactional id slots per task)"
            )
        self._engine = engine
        self._max_in_flight = max_in_flight
        # The threads of one replica take turns at writing here rather than in the
        # database: SQLite's busy handler retries a refused BEGIN IMMEDIATE only after
        # sleeping (up to 100 ms a try), and on PostgreSQL the row locks would queue them
        # anyway. Other replicas still meet this one's writes in the database.
        self._write_turn = threading.RLock()

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (tests and benchmarks inspect the tables through it)."""
        return self._engine

    def close(self) -> None:
        """Release the connection pool."""
        self._engine.dispose()

    # ------------------------------------------------------------------ transactions

    @contextlib.contextmanager
    def _read(self) -> Iterator[Connection]:
        with self._engine.connect() as conn, conn.begin():
            yield conn

    @contextlib.contextmanager
    def _write(self, fence: Fence | None) -> Iterator[Connection]:
        with self._write_turn, self._engine.connect() as conn:
            conn.execution_options(lockgate_write=True)
            with conn.begin():
                if fence is not None:
                    self._check_fence(conn, fence)
                yield conn

    def _check_fence(self, conn: Connection, fence: Fence) -> None:
        row = conn.execute(
            sa.select(leader_lease.c.leader_epoch)
            .where(
                leader_lease.c.id == LEASE_ROW_ID,
                leader_lease.c.holder == fence.holder,
                leader_lease.c.leader_epoch == fence.leader_epoch,
                leader_lease.c.expires_at_ms > db_now_ms(),
            )
            .with_for_update(read=True)
        ).first()
        if row is not None:
            return
        current = self._lease_row(conn)
        raise FencedError(
            f"coordinator {fence.holder} (leader epoch {fence.leader_epoch}) no longer holds "
            f"the lease (holder {current.holder or 'none'}, epoch {current.leader_epoch}, "
            f"{'held' if current.is_held else 'expired'}); nothing was written",
            leader_address=current.holder_address if current.is_held else None,
        )

    def db_now_ms(self) -> int:
        """The database's clock, in milliseconds since the Unix epoch."""
        with self._read() as conn:
            return int(conn.execute(sa.select(db_now_ms())).scalar_one())

    # ------------------------------------------------------------------ leader lease

    def try_acquire_lease(
        self,
        *,
        holder: CoordinatorId,
        holder_address: str,
        lease_ms: int,
        incarnation: str = "",
    ) -> LeaseRecord:
        """Acquire or renew the lease in one compare-and-set statement; return the row after.

        Succeeds when the lease is free or expired (epoch + 1) or already held, unexpired,
        by this very process: `holder` *and* `incarnation` (renewal: epoch kept). A
        restarted replica is a new incarnation of the same id: it waits for its previous
        process's lease to expire and then leads with a new epoch, because that process may
        only be paused, not dead. The caller leads iff the returned row names it and its
        incarnation and `is_held`. Expiry = database clock + `lease_ms`, computed inside
        the statement.
        """
        if lease_ms <= 0:
            raise InvalidArgument.for_field("lease_ms", f"must be > 0, got {lease_ms}")
        now = db_now_ms()
        renewal = sa.and_(
            leader_lease.c.holder == holder,
            sa.func.coalesce(leader_lease.c.holder_incarnation, "") == incarnation,
            leader_lease.c.expires_at_ms > now,
        )
        with self._write(None) as conn:
            conn.execute(
                leader_lease.update()
                .where(
                    leader_lease.c.id == LEASE_ROW_ID,
                    sa.or_(renewal, leader_lease.c.expires_at_ms <= now),
                )
                .values(
                    leader_epoch=sa.case(
                        (renewal, leader_lease.c.leader_epoch),
                        else_=leader_lease.c.leader_epoch + 1,
                    ),
                    holder=holder,
                    holder_incarnation=incarnation,
                    holder_address=holder_address,
                    expires_at_ms=now + lease_ms,
                )
            )
            return self._lease_row(conn)

    def release_lease(self, *, fence: Fence) -> None:
        """Give the lease up at once (graceful shutdown) so another replica need not wait.

        Leader-only. The epoch stays; the next holder's acquisition adds one.
        """
        with self._write(fence) as conn:
            conn.execute(
                leader_lease.update()
                .where(leader_lease.c.id == LEASE_ROW_ID)
                .values(expires_at_ms=db_now_ms() - 1)
            )

    def read_lease(self) -> LeaseRecord:
        """The lease row and the database's clock (who leads, with which epoch)."""
        with self._read() as conn:
            return self._lease_row(conn)

    def _lease_row(self, conn: Connection) -> LeaseRecord:
        row = conn.execute(
            sa.select(
                leader_lease.c.holder,
                leader_lease.c.holder_incarnation,
                leader_lease.c.holder_address,
                leader_lease.c.leader_epoch,
                leader_lease.c.expires_at_ms,
                db_now_ms().label("db_now"),
            ).where(leader_lease.c.id == LEASE_ROW_ID)
        ).one()
        return LeaseRecord(
            holder=CoordinatorId(row.holder) if row.holder is not None else None,
            holder_incarnation=row.holder_incarnation or "",
            holder_address=row.holder_address,
            leader_epoch=LeaderEpoch(int(row.leader_epoch)),
            expires_at_ms=int(row.expires_at_ms),
            db_now_ms=int(row.db_now),
        )

    # ------------------------------------------------------------------ executors

    def register_executor(
        self, *, fence: Fence, executor_id: ExecutorId, address: str
    ) -> ExecutorRecord:
        """Start a new session for an executor: its generation grows by one. Leader-only.

        Reports carrying the previous generation are refused from now on.
        """
        if not executor_id:
            raise InvalidArgument.for_field("executor_id", "must not be empty")
        with self._write(fence) as conn:
            updated = conn.execute(
                executors.update()
                .where(executors.c.executor_id == executor_id)
                .values(
                    address=address,
                    generation=executors.c.generation + 1,
                    registered_at_ms=db_now_ms(),
                    last_heartbeat_ms=db_now_ms(),
                )
            )
            if updated.rowcount == 0:
                conn.execute(
                    executors.insert().values(
                        executor_id=executor_id,
                        address=address,
                        generation=1,
                        registered_at_ms=db_now_ms(),
                        last_heartbeat_ms=db_now_ms(),
                    )
                )
            return self._executor(conn, executor_id)

    def heartbeat_executor(
        self, *, fence: Fence, executor_id: ExecutorId, generation: Generation
    ) -> ExecutorRecord:
        """Record a heartbeat; StaleGeneration if `generation` is not the current one.

        Leader-only.
        """
        with self._write(fence) as conn:
            current = self._executor(conn, executor_id, for_update=True)
            check_generation(
                what=f"executor {executor_id}", reported=generation, current=current.generation
            )
            conn.execute(
                executors.update()
                .where(executors.c.executor_id == executor_id)
                .values(last_heartbeat_ms=db_now_ms())
            )
            return self._executor(conn, executor_id)

    def deregister_executor(
        self, *, fence: Fence, executor_id: ExecutorId, generation: Generation
    ) -> None:
        """Remove an executor that shuts down cleanly (its tasks move at the next rebalance).

        Leader-only; StaleGeneration if a newer session of the same id exists.
        """
        with self._write(fence) as conn:
            current = self._executor(conn, executor_id, for_update=True)
            check_generation(
                what=f"executor {executor_id}", reported=generation, current=current.generation
            )
            conn.execute(executors.delete().where(executors.c.executor_id == executor_id))

    def get_executor(self, *, executor_id: ExecutorId) -> ExecutorRecord:
        """One executor; NotFound if it never registered (or deregistered)."""
        with self._read() as conn:
            return self._executor(conn, executor_id)

    def list_executors(self) -> tuple[list[ExecutorRecord], int]:
        """Every registered executor (id order) and the database's clock at reading time."""
        with self._read() as conn:
            rows = conn.execute(sa.select(executors).order_by(executors.c.executor_id)).all()
            now = int(conn.execute(sa.select(db_now_ms())).scalar_one())
            return [_executor_record(r) for r in rows], now

    def _executor(
        self, conn: Connection, executor_id: ExecutorId, *, for_update: bool = False
    ) -> ExecutorRecord:
        stmt = sa.select(executors).where(executors.c.executor_id == executor_id)
        if for_update:
            stmt = stmt.with_for_update()
        row = conn.execute(stmt).first()
        if row is None:
            raise NotFound(
                f"executor {executor_id!r} is not registered; register it first",
                resource_type="executor",
                resource_name=executor_id,
            )
        return _executor_record(row)

    def _check_executor_generation(
        self, conn: Connection, executor_id: ExecutorId, generation: Generation
    ) -> None:
        row = conn.execute(
            sa.select(executors.c.generation).where(executors.c.executor_id == executor_id)
        ).first()
        if row is None:
            raise StaleGeneration(
                f"executor {executor_id!r} is not registered (its session expired or it "
                "deregistered); register again"
            )
        check_generation(
            what=f"executor {executor_id}", reported=generation, current=Generation(row[0])
        )

    # ------------------------------------------------------------------ pipelines

    def create_pipeline(self, *, fence: Fence, spec: PipelineSpec) -> PipelineRecord:
        """Store a new pipeline (target RUNNING, config version 1). Leader-only.

        AlreadyExists if the name is taken.
        """
        with self._write(fence) as conn:
            exists = conn.execute(
                sa.select(pipelines.c.pipeline_id).where(pipelines.c.pipeline_id == spec.name)
            ).first()
            if exists is not None:
                raise AlreadyExists(
                    f"a pipeline named {spec.name!r} already exists; pick another name or "
                    "update that pipeline",
                    resource_type="pipeline",
                    resource_name=spec.name,
                )
            conn.execute(
                pipelines.insert().values(
                    pipeline_id=spec.name,
                    spec_json=json.dumps(spec.to_json(), sort_keys=True),
                    config_version=1,
                    target_state=TargetState.RUNNING.value,
                    next_checkpoint_id=1,
                    created_at_ms=db_now_ms(),
                    updated_at_ms=db_now_ms(),
                )
            )
            return self._pipeline(conn, spec.name)

    def update_pipeline(
        self, *, fence: Fence, spec: PipelineSpec, expected_version: int | None = None
    ) -> PipelineRecord:
        """Replace a pipeline's config; its config version grows by one. Leader-only.

        With `expected_version`, FailedPrecondition unless the stored version matches
        (optimistic concurrency for read-modify-write clients). The caller re-splits tasks
        if the topics or `tasks_max` changed (`set_pipeline_tasks`).
        """
        with self._write(fence) as conn:
            current = self._pipeline(conn, spec.name, for_update=True)
            if expected_version is not None and expected_version != current.config_version:
                raise FailedPrecondition(
                    f"pipeline {spec.name!r} is at config version {current.config_version}, "
                    f"not {expected_version}; read it again and re-apply your change",
                    reason="CONFIG_VERSION_MISMATCH",
                )
            conn.execute(
                pipelines.update()
                .where(pipelines.c.pipeline_id == spec.name)
                .values(
                    spec_json=json.dumps(spec.to_json(), sort_keys=True),
                    config_version=pipelines.c.config_version + 1,
                    updated_at_ms=db_now_ms(),
                )
            )
            return self._pipeline(conn, spec.name)

    def delete_pipeline(self, *, fence: Fence, pipeline_id: PipelineId) -> None:
        """Delete a pipeline with its tasks, checkpoints and offsets. Leader-only.

        Open transactions of its in-flight checkpoints are left to the broker's
        `transaction.timeout.ms`; stop the pipeline first to end them cleanly.
        """
        with self._write(fence) as conn:
            self._pipeline(conn, pipeline_id, for_update=True)
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
        with self._write(fence) as conn:
            current = self._pipeline(conn, pipeline_id, for_update=True)
            new_state = transition_target_state(current.target_state, target_state)
            conn.execute(
                pipelines.update()
                .where(pipelines.c.pipeline_id == pipeline_id)
                .values(target_state=new_state.value, updated_at_ms=db_now_ms())
            )
            return self._pipeline(conn, pipeline_id)

    def get_pipeline(self, *, pipeline_id: PipelineId) -> PipelineRecord:
        """One pipeline; NotFound if there is none by that name."""
        with self._read() as conn:
            return self._pipeline(conn, pipeline_id)

    def list_pipelines(
        self, *, page_size: int = 100, page_token: str = ""
    ) -> tuple[list[PipelineRecord], str]:
        """Pipelines in name order, a page at a time; the token is "" after the last page."""
        if page_size <= 0:
            raise InvalidArgument.for_field("page_size", f"must be > 0, got {page_size}")
        with self._read() as conn:
            stmt = sa.select(pipelines).order_by(pipelines.c.pipeline_id).limit(page_size + 1)
            if page_token:
                stmt = stmt.where(pipelines.c.pipeline_id > page_token)
            rows = conn.execute(stmt).all()
        records = [_pipeline_record(r) for r in rows[:page_size]]
        next_token = records[-1].pipeline_id if len(rows) > page_size else ""
        return records, next_token

    def _pipeline(
        self, conn: Connection, pipeline_id: PipelineId, *, for_update: bool = False
    ) -> PipelineRecord:
        stmt = sa.select(pipelines).where(pipelines.c.pipeline_id == pipeline_id)
        if for_update:
            stmt = stmt.with_for_update()
        row = conn.execute(stmt).first()
        if row is None:
            raise NotFound(
                f"no pipeline named {pipeline_id!r}; list pipelines to see the names",
                resource_type="pipeline",
                resource_name=pipeline_id,
            )
        return _pipeline_record(row)

    # ------------------------------------------------------------------ tasks

    def set_pipeline_tasks(
        self, *, fence: Fence, pipeline_id: PipelineId, splits: Sequence[TaskSplit]
    ) -> list[TaskRecord]:
        """Make the pipeline's tasks match `splits` (from `split_partitions`). Leader-only.

        A task whose partitions changed keeps its executor but its generation grows and its
        state becomes UNASSIGNED until the executor restarts it; removed tasks are deleted,
        new ones start UNASSIGNED with no executor. Unchanged tasks are untouched.
        """
        with self._write(fence) as conn:
            self._pipeline(conn, pipeline_id, for_update=True)
            existing = {t.task_index: t for t in self._tasks(conn, pipeline_id)}
            wanted = {s.index: s for s in splits}
            for index, task in existing.items():
                if index not in wanted:
                    conn.execute(tasks.delete().where(tasks.c.task_id == task.task_id))
            for index, split in wanted.items():
                partitions_json = _partitions_json(split.partitions)
                old = existing.get(index)
                if old is None:
                    conn.execute(
                        tasks.insert().values(
                            task_id=task_id(pipeline_id, index),
                            pipeline_id=pipeline_id,
                            task_index=index,
                            partitions_json=partitions_json,
                            executor_id=None,
                            generation=1,
                            state=TaskState.UNASSIGNED.value,
                            updated_at_ms=db_now_ms(),
                        )
                    )
                elif old.partitions != tuple(sorted(split.partitions)):
                    conn.execute(
                        tasks.update()
                        .where(tasks.c.task_id == old.task_id)
                        .values(
                            partitions_json=partitions_json,
                            generation=tasks.c.generation + 1,
                            state=TaskState.UNASSIGNED.value,
                            updated_at_ms=db_now_ms(),
                        )
                    )
            return self._tasks(conn, pipeline_id)

    def list_tasks(self, *, pipeline_id: PipelineId | None = None) -> list[TaskRecord]:
        """Tasks of one pipeline, or of all, in (pipeline, index) order."""
        with self._read() as conn:
            return self._tasks(conn, pipeline_id)

    def get_task(self, *, task_id: TaskId) -> TaskRecord:
        """One task; NotFound if it does not exist."""
        with self._read() as conn:
            return self._task(conn, task_id)

    def current_assignment(self) -> dict[ExecutorId, frozenset[TaskId]]:
        """Which tasks each executor holds now (executors with none are absent)."""
        result: dict[ExecutorId, set[TaskId]] = defaultdict(set)
        for task in self.list_tasks():
            if task.executor_id is not None:
                result[task.executor_id].add(task.task_id)
        return {e: frozenset(ts) for e, ts in result.items()}

    def apply_assignment(
        self,
        *,
        fence: Fence,
        assignment: Mapping[ExecutorId, AbstractSet[TaskId]],
    ) -> list[TaskRecord]:
        """Write a new assignment (from `plan_assignment`); return the tasks that changed.

        Leader-only. Every task whose executor changes gets generation + 1 and state
        UNASSIGNED (its old executor's reports become stale); tasks absent from
        `assignment` lose their executor. Checkpoints still TRIGGERED that include a moved
        task abort (with every later in-flight one of the pipeline), in the same
        transaction: the moved task's new owner restarts from the last COMPLETE one.
        """
        owner = {t: e for e, ts in assignment.items() for t in ts}
        with self._write(fence) as conn:
            all_tasks = self._tasks(conn, None)
            known = {t.task_id for t in all_tasks}
            unknown = sorted(set(owner) - known)
            if unknown:
                raise NotFound(
                    f"cannot assign unknown tasks {unknown}; list the tasks again",
                    resource_type="task",
                    resource_name=unknown[0],
                )
            changed = [t for t in all_tasks if owner.get(t.task_id) != t.executor_id]
            for pipeline_id in sorted({t.pipeline_id for t in changed}):
                self._pipeline(conn, pipeline_id, for_update=True)
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
            self._abort_checkpoints_of_tasks(
                conn, {t.task_id for t in changed}, reason="task reassigned"
            )
            changed_ids = {t.task_id for t in changed}
            return [t for t in self._tasks(conn, None) if t.task_id in changed_ids]

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
        with self._write(fence) as conn:
            self._check_executor_generation(conn, executor_id, executor_generation)
            task = self._task(conn, task_id, for_update=True)
            self._check_task_owner(task, executor_id, task_generation)
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
            return self._task(conn, task_id)

    def restart_tasks(
        self, *, fence: Fence, pipeline_id: PipelineId, only_failed: bool = False
    ) -> list[TaskRecord]:
        """Mark a pipeline's tasks RESTARTING with a new generation. Leader-only.

        The new generation makes the old instance's reports stale; its executor restarts
        the task with restore state. Returns the tasks restarted.
        """
        with self._write(fence) as conn:
            self._pipeline(conn, pipeline_id, for_update=True)
            chosen = [
                t
                for t in self._tasks(conn, pipeline_id)
                if not only_failed or t.state is TaskState.FAILED
            ]
            for task in chosen:
                transition_task_state(task.state, TaskState.RESTARTING)
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
            self._abort_checkpoints_of_tasks(
                conn, {t.task_id for t in chosen}, reason="task restarted"
            )
            chosen_ids = {t.task_id for t in chosen}
            return [t for t in self._tasks(conn, pipeline_id) if t.task_id in chosen_ids]

    def _tasks(self, conn: Connection, pipeline_id: PipelineId | None) -> list[TaskRecord]:
        stmt = sa.select(tasks).order_by(tasks.c.pipeline_id, tasks.c.task_index)
        if pipeline_id is not None:
            stmt = stmt.where(tasks.c.pipeline_id == pipeline_id)
        return [_task_record(r) for r in conn.execute(stmt)]

    def _task(self, conn: Connection, task: TaskId, *, for_update: bool = False) -> TaskRecord:
        stmt = sa.select(tasks).where(tasks.c.task_id == task)
        if for_update:
            stmt = stmt.with_for_update()
        row = conn.execute(stmt).first()
        if row is None:
            raise NotFound(
                f"no task {task!r}; the pipeline may have been deleted or re-split",
                resource_type="task",
                resource_name=task,
            )
        return _task_record(row)

    @staticmethod
    def _check_task_owner(
        task: TaskRecord, executor_id: ExecutorId, task_generation: Generation
    ) -> None:
        if task.executor_id != executor_id:
            raise StaleGeneration(
                f"task {task.task_id} is assigned to {task.executor_id or 'no executor'}, "
                f"not {executor_id}; stop running it"
            )
        check_generation(
            what=f"task {task.task_id}", reported=task_generation, current=task.generation
        )

    # ------------------------------------------------------------------ checkpoints

    def trigger_checkpoint(self, *, fence: Fence, pipeline_id: PipelineId) -> CheckpointRecord:
        """Start the pipeline's next checkpoint N over all its tasks. Leader-only.

        Allocates each task a transactional id slot (see `transactional_ids.py`). Raises
        FailedPrecondition, writing nothing, when the pipeline is not RUNNING, has no tasks,
        has a task without an executor, already has `max_in_flight` checkpoints in flight,
        or a task has no free slot.
        """
        with self._write(fence) as conn:
            pipeline = self._pipeline(conn, pipeline_id, for_update=True)
            if pipeline.target_state is not TargetState.RUNNING:
                raise FailedPrecondition(
                    f"pipeline {pipeline_id!r} is {pipeline.target_state.value}; resume it to "
                    "run checkpoints",
                    reason="PIPELINE_NOT_RUNNING",
                )
            task_list = self._tasks(conn, pipeline_id)
            if not task_list:
                raise FailedPrecondition(
                    f"pipeline {pipeline_id!r} has no tasks yet", reason="NO_TASKS"
                )
            unassigned = [t.task_id for t in task_list if t.executor_id is None]
            if unassigned:
                raise FailedPrecondition(
                    f"tasks {unassigned} have no executor yet", reason="TASKS_UNASSIGNED"
                )
            in_flight = conn.execute(
                sa.select(sa.func.count())
                .select_from(checkpoints)
                .where(
                    checkpoints.c.pipeline_id == pipeline_id,
                    checkpoints.c.state.in_(
                        [CheckpointState.TRIGGERED.value, CheckpointState.COMPLETE.value]
                    ),
                )
            ).scalar_one()
            if in_flight >= self._max_in_flight:
                raise FailedPrecondition(
                    f"pipeline {pipeline_id!r} has {in_flight} checkpoints in flight "
                    f"(max {self._max_in_flight})",
                    reason="TOO_MANY_IN_FLIGHT",
                )
            slot_use = self._slot_use(conn, pipeline_id)
            slots: dict[TaskId, int] = {}
            for task in task_list:
                slot = choose_slot(slot_use.get(task.task_index, {}))
                if slot is None:
                    raise FailedPrecondition(
                        f"task {task.task_id} has no free transactional id slot (all used "
                        "by checkpoints not yet committed or aborted)",
                        reason="NO_FREE_SLOT",
                    )
                slots[task.task_id] = slot
            checkpoint_id = CheckpointId(pipeline.next_checkpoint_id)
            conn.execute(
                pipelines.update()
                .where(pipelines.c.pipeline_id == pipeline_id)
                .values(next_checkpoint_id=pipelines.c.next_checkpoint_id + 1)
            )
            conn.execute(
                checkpoints.insert().values(
                    pipeline_id=pipeline_id,
                    checkpoint_id=checkpoint_id,
                    state=CheckpointState.TRIGGERED.value,
                    leader_epoch=fence.leader_epoch,
                    triggered_at_ms=db_now_ms(),
                )
            )
            txids = {
                t.task_id: transactional_id(pipeline_id, t.task_index, slots[t.task_id])
                for t in task_list
            }
            conn.execute(
                checkpoint_tasks.insert(),
                [
                    {
                        "pipeline_id": pipeline_id,
                        "checkpoint_id": checkpoint_id,
                        "task_id": t.task_id,
                        "task_generation": t.generation,
                        "executor_id": t.executor_id,
                        "slot": slots[t.task_id],
                        "transactional_id": txids[t.task_id],
                    }
                    for t in task_list
                ],
            )
            self._upsert(
                conn,
                transactional_ids,
                [
                    {
                        "transactional_id": txids[t.task_id],
                        "pipeline_id": pipeline_id,
                        "task_index": t.task_index,
                        "slot": slots[t.task_id],
                        "checkpoint_id": checkpoint_id,
                        "producer_id": None,
                        "producer_epoch": None,
                    }
                    for t in task_list
                ],
                key=["transactional_id"],
            )
            return self._checkpoint(conn, pipeline_id, checkpoint_id)

    def record_precommit(
        self, *, fence: Fence, precommit: Precommit, complete_if_ready: bool = True
    ) -> CheckpointRecord:
        """Store one task's pre-commit of N; write COMPLETE in the same transaction if it
        was the last one and every earlier checkpoint is COMPLETE. Leader-only.

        Idempotent: the same task pre-committing again is a no-op. StaleGeneration if the
        report comes from a replaced executor session or task assignment;
        FailedPrecondition if N was aborted (the executor must abort its handles) or the
        handles name a transactional id other than the one N allotted to the task.
        """
        with self._write(fence) as conn:
            self._pipeline(conn, precommit.pipeline_id, for_update=True)
            self._record_precommits(conn, [precommit])
            if complete_if_ready:
                self._complete_if_ready(conn, precommit.pipeline_id, precommit.checkpoint_id)
            return self._checkpoint(conn, precommit.pipeline_id, precommit.checkpoint_id)

    def record_precommits(
        self, *, fence: Fence, precommits: Sequence[Precommit]
    ) -> list[CheckpointRecord]:
        """`record_precommit` for many reports in ONE transaction (one fsync), as the
        leader batches the reports that arrived together. All or nothing: one stale or
        refused report fails the batch, so callers batch only reports already checked or
        retry the rest one by one. Returns each touched checkpoint as it is afterwards."""
        touched: dict[tuple[PipelineId, CheckpointId], None] = {}
        for p in precommits:
            touched[(p.pipeline_id, p.checkpoint_id)] = None
        with self._write(fence) as conn:
            for pipeline_id in sorted({p.pipeline_id for p in precommits}):
                self._pipeline(conn, pipeline_id, for_update=True)
            self._record_precommits(conn, precommits)
            for pipeline_id, checkpoint_id in sorted(touched):
                self._complete_if_ready(conn, pipeline_id, checkpoint_id)
            return [self._checkpoint(conn, p, c) for p, c in touched]

    def _checkpoint_state(
        self, conn: Connection, pipeline_id: PipelineId, checkpoint_id: CheckpointId
    ) -> CheckpointState:
        state = conn.execute(
            sa.select(checkpoints.c.state).where(
                checkpoints.c.pipeline_id == pipeline_id,
                checkpoints.c.checkpoint_id == checkpoint_id,
            )
        ).scalar_one_or_none()
        if state is None:
            raise NotFound(
                f"pipeline {pipeline_id!r} has no checkpoint {checkpoint_id}",
                resource_type="checkpoint",
                resource_name=f"{pipeline_id}/{checkpoint_id}",
            )
        return CheckpointState(state)

    def _record_precommits(self, conn: Connection, precommits: Sequence[Precommit]) -> None:
        """Validate and store pre-commits with a handful of statements per checkpoint,
        however many tasks report (a 100-task checkpoint is one round of bulk writes)."""
        groups: dict[tuple[PipelineId, CheckpointId], list[Precommit]] = defaultdict(list)
        for p in precommits:
            groups[(p.pipeline_id, p.checkpoint_id)].append(p)
        executor_ids = sorted({p.executor_id for p in precommits})
        executor_generations = {
            ExecutorId(r.executor_id): Generation(int(r.generation))
            for r in conn.execute(
                sa.select(executors.c.executor_id, executors.c.generation).where(
                    executors.c.executor_id.in_(executor_ids)
                )
            )
        }
        task_rows = {
            TaskId(r.task_id): _task_record(r)
            for r in conn.execute(
                sa.select(tasks).where(tasks.c.task_id.in_(sorted({p.task_id for p in precommits})))
            )
        }
        for (pipeline_id, checkpoint_id), group in sorted(groups.items()):
            state = self._checkpoint_state(conn, pipeline_id, checkpoint_id)
            triggers = {
                TaskId(r.task_id): r
                for r in conn.execute(
                    sa.select(checkpoint_tasks).where(
                        checkpoint_tasks.c.pipeline_id == pipeline_id,
                        checkpoint_tasks.c.checkpoint_id == checkpoint_id,
                    )
                )
            }
            fresh: dict[TaskId, Precommit] = {}
            for p in group:
                trigger = triggers.get(p.task_id)
                if trigger is None:
                    raise NotFound(
                        f"task {p.task_id} is not part of checkpoint {checkpoint_id} of "
                        f"{pipeline_id!r}",
                        resource_type="checkpoint_task",
                        resource_name=p.task_id,
                    )
                current_generation = executor_generations.get(p.executor_id)
                if current_generation is None:
                    raise StaleGeneration(
                        f"executor {p.executor_id!r} is not registered (its session expired or "
                        "it deregistered); register again"
                    )
                check_generation(
                    what=f"executor {p.executor_id}",
                    reported=p.executor_generation,
                    current=current_generation,
                )
                check_generation(
                    what=f"task {p.task_id} in checkpoint {checkpoint_id}",
                    reported=p.task_generation,
                    current=Generation(int(trigger.task_generation)),
                )
                task = task_rows.get(p.task_id)
                if task is None:
                    raise NotFound(
                        f"no task {p.task_id!r}; the pipeline may have been deleted or re-split",
                        resource_type="task",
                        resource_name=p.task_id,
                    )
                # The task must still be that executor's, in that generation: a zombie whose
                # task moved since the trigger is refused, not merely told N aborted.
                self._check_task_owner(task, p.executor_id, p.task_generation)
                if trigger.precommitted_at_ms is not None or p.task_id in fresh:
                    continue  # a retried report
                if state is not CheckpointState.TRIGGERED:
                    raise FailedPrecondition(
                        f"checkpoint {checkpoint_id} of {pipeline_id!r} is {state.value}; "
                        "abort this pre-commit's transactions",
                        reason="CHECKPOINT_NOT_TRIGGERED",
                    )
                for handle in p.handles:
                    # The allotted id is the task's prefix: its Spark write partition k
                    # writes with "<allotted>-<k>" (one producer per write partition).
                    if handle.kind == "kafka" and not belongs_to_slot(
                        handle.transactional_id, trigger.transactional_id
                    ):
                        raise FailedPrecondition(
                            f"handle uses transactional id {handle.transactional_id!r} but "
                            f"checkpoint {checkpoint_id} allotted "
                            f"{trigger.transactional_id!r} to task {p.task_id}",
                            reason="WRONG_TRANSACTIONAL_ID",
                        )
                fresh[p.task_id] = p
            if not fresh:
                continue
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
                for p in fresh.values()
                for r in p.offsets
            ]
            if offset_rows:
                conn.execute(precommit_offsets.insert(), offset_rows)
            handle_rows = [
                {
                    "pipeline_id": pipeline_id,
                    "checkpoint_id": checkpoint_id,
                    "task_id": p.task_id,
                    "transactional_id": h.transactional_id,
                    "kind": h.kind,
                    "producer_id": h.producer_id,
                    "producer_epoch": h.producer_epoch,
                }
                for p in fresh.values()
                for h in p.handles
            ]
            if handle_rows:
                conn.execute(precommit_handles.insert(), handle_rows)
                conn.execute(
                    transactional_ids.update()
                    .where(transactional_ids.c.transactional_id == sa.bindparam("txid"))
                    .values(
                        producer_id=sa.bindparam("pid"),
                        producer_epoch=sa.bindparam("pepoch"),
                        updated_at_ms=db_now_ms(),
                    ),
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
                checkpoint_tasks.update()
                .where(
                    checkpoint_tasks.c.pipeline_id == pipeline_id,
                    checkpoint_tasks.c.checkpoint_id == checkpoint_id,
                    checkpoint_tasks.c.task_id.in_(sorted(fresh)),
                )
                .values(precommitted_at_ms=db_now_ms())
            )

    def complete_checkpoint(
        self, *, fence: Fence, pipeline_id: PipelineId, checkpoint_id: CheckpointId
    ) -> CheckpointRecord:
        """Write COMPLETE for N if every task pre-committed and all earlier are COMPLETE.

        Leader-only. The checkpoint's state and the pipeline's restore offsets change in
        one transaction: that row is the commit point. Returns N as it is afterwards
        (still TRIGGERED if not ready). Idempotent.
        """
        with self._write(fence) as conn:
            self._pipeline(conn, pipeline_id, for_update=True)
            self._complete_if_ready(conn, pipeline_id, checkpoint_id)
            return self._checkpoint(conn, pipeline_id, checkpoint_id)

    def _count_tasks(
        self, conn: Connection, pipeline_id: PipelineId, checkpoint_id: CheckpointId, *, where: Any
    ) -> int:
        return int(
            conn.execute(
                sa.select(sa.func.count())
                .select_from(checkpoint_tasks)
                .where(
                    checkpoint_tasks.c.pipeline_id == pipeline_id,
                    checkpoint_tasks.c.checkpoint_id == checkpoint_id,
                    where,
                )
            ).scalar_one()
        )

    def _complete_if_ready(
        self, conn: Connection, pipeline_id: PipelineId, checkpoint_id: CheckpointId
    ) -> None:
        # Completing N may unblock N+1 (all its tasks pre-committed earlier), so walk on.
        states = self._checkpoint_states(conn, pipeline_id)
        current = checkpoint_id
        while states.get(current) is CheckpointState.TRIGGERED:
            waiting = self._count_tasks(
                conn, pipeline_id, current, where=checkpoint_tasks.c.precommitted_at_ms.is_(None)
            )
            # `is_complete` in SQL: no task of N without its pre-commit (N has >= 1 task).
            if waiting > 0 or completion_blocker(current, states) is not None:
                return
            transition_checkpoint(states[current], CheckpointState.COMPLETE)
            done = conn.execute(
                checkpoints.update()
                .where(
                    checkpoints.c.pipeline_id == pipeline_id,
                    checkpoints.c.checkpoint_id == current,
                    checkpoints.c.state == CheckpointState.TRIGGERED.value,
                )
                .values(state=CheckpointState.COMPLETE.value, completed_at_ms=db_now_ms())
            )
            if done.rowcount != 1:
                return
            ranges = conn.execute(
                sa.select(precommit_offsets).where(
                    precommit_offsets.c.pipeline_id == pipeline_id,
                    precommit_offsets.c.checkpoint_id == current,
                )
            ).all()
            self._upsert(
                conn,
                source_offsets,
                [
                    {
                        "pipeline_id": pipeline_id,
                        "topic": r.topic,
                        "partition": r.partition,
                        "next_offset": r.end_offset,
                        "checkpoint_id": current,
                    }
                    for r in ranges
                ],
                key=["pipeline_id", "topic", "partition"],
            )
            states[current] = CheckpointState.COMPLETE
            current = CheckpointId(current + 1)

    def record_commit_ack(
        self,
        *,
        fence: Fence,
        pipeline_id: PipelineId,
        checkpoint_id: CheckpointId,
        task_id: TaskId,
    ) -> CheckpointRecord:
        """Record that a task's handles of COMPLETE checkpoint N are committed; when every
        task acked, N becomes COMMITTED. Leader-only. Idempotent.

        No generation check: committing a COMPLETE checkpoint's handles is right whoever
        does it (DESIGN.md step 4), even a task's previous owner.
        """
        return self.record_commit_acks(
            fence=fence, pipeline_id=pipeline_id, checkpoint_id=checkpoint_id, task_ids=[task_id]
        )

    def record_commit_acks(
        self,
        *,
        fence: Fence,
        pipeline_id: PipelineId,
        checkpoint_id: CheckpointId,
        task_ids: Sequence[TaskId],
    ) -> CheckpointRecord:
        """`record_commit_ack` for several tasks of one checkpoint in ONE transaction."""
        with self._write(fence) as conn:
            self._pipeline(conn, pipeline_id, for_update=True)
            state = self._checkpoint_state(conn, pipeline_id, checkpoint_id)
            if state is not CheckpointState.COMMITTED:
                if state is not CheckpointState.COMPLETE:
                    raise FailedPrecondition(
                        f"checkpoint {checkpoint_id} of {pipeline_id!r} is {state.value}, not "
                        "COMPLETE: there is nothing to commit",
                        reason="CHECKPOINT_NOT_COMPLETE",
                    )
                members = {
                    r[0]
                    for r in conn.execute(
                        sa.select(checkpoint_tasks.c.task_id).where(
                            checkpoint_tasks.c.pipeline_id == pipeline_id,
                            checkpoint_tasks.c.checkpoint_id == checkpoint_id,
                        )
                    )
                }
                strangers = sorted(set(task_ids) - members)
                if strangers:
                    raise NotFound(
                        f"tasks {strangers} are not part of checkpoint {checkpoint_id} of "
                        f"{pipeline_id!r}",
                        resource_type="checkpoint_task",
                        resource_name=strangers[0],
                    )
                conn.execute(
                    checkpoint_tasks.update()
                    .where(
                        checkpoint_tasks.c.pipeline_id == pipeline_id,
                        checkpoint_tasks.c.checkpoint_id == checkpoint_id,
                        checkpoint_tasks.c.task_id.in_(sorted(set(task_ids))),
                        checkpoint_tasks.c.commit_acked_at_ms.is_(None),
                    )
                    .values(commit_acked_at_ms=db_now_ms())
                )
                missing = self._count_tasks(
                    conn,
                    pipeline_id,
                    checkpoint_id,
                    where=checkpoint_tasks.c.commit_acked_at_ms.is_(None),
                )
                if missing == 0:
                    self._mark_committed(conn, pipeline_id, checkpoint_id)
            return self._checkpoint(conn, pipeline_id, checkpoint_id)

    def mark_committed(
        self, *, fence: Fence, pipeline_id: PipelineId, checkpoint_id: CheckpointId
    ) -> CheckpointRecord:
        """Mark COMPLETE checkpoint N COMMITTED (every handle acked). Leader-only; idempotent.

        IllegalTransition if N is not COMPLETE or COMMITTED.
        """
        with self._write(fence) as conn:
            self._pipeline(conn, pipeline_id, for_update=True)
            self._mark_committed(conn, pipeline_id, checkpoint_id)
            return self._checkpoint(conn, pipeline_id, checkpoint_id)

    def _mark_committed(
        self, conn: Connection, pipeline_id: PipelineId, checkpoint_id: CheckpointId
    ) -> None:
        checkpoint = self._checkpoint(conn, pipeline_id, checkpoint_id)
        transition_checkpoint(checkpoint.state, CheckpointState.COMMITTED)
        conn.execute(
            checkpoints.update()
            .where(
                checkpoints.c.pipeline_id == pipeline_id,
                checkpoints.c.checkpoint_id == checkpoint_id,
                checkpoints.c.state == CheckpointState.COMPLETE.value,
            )
            .values(state=CheckpointState.COMMITTED.value, committed_at_ms=db_now_ms())
        )

    def abort_checkpoint(
        self,
        *,
        fence: Fence,
        pipeline_id: PipelineId,
        checkpoint_id: CheckpointId,
        reason: str,
    ) -> list[CheckpointId]:
        """Abort TRIGGERED checkpoint N and every later TRIGGERED one. Leader-only.

        Returns the checkpoints aborted now (empty if N was already ABORTED).
        IllegalTransition if N is COMPLETE or COMMITTED: the commit point is final.
        """
        with self._write(fence) as conn:
            self._pipeline(conn, pipeline_id, for_update=True)
            return self._abort(conn, pipeline_id, checkpoint_id, reason)

    def abort_in_flight(
        self, *, fence: Fence, reason: str
    ) -> list[tuple[PipelineId, CheckpointId]]:
        """Abort every TRIGGERED checkpoint of every pipeline (a new leader's first step:
        it cannot know which pre-commit RPCs its predecessor had outstanding). Leader-only.
        """
        aborted: list[tuple[PipelineId, CheckpointId]] = []
        with self._write(fence) as conn:
            rows = conn.execute(
                sa.select(checkpoints.c.pipeline_id, sa.func.min(checkpoints.c.checkpoint_id))
                .where(checkpoints.c.state == CheckpointState.TRIGGERED.value)
                .group_by(checkpoints.c.pipeline_id)
                .order_by(checkpoints.c.pipeline_id)
            ).all()
            for pipeline_id, first in rows:
                self._pipeline(conn, PipelineId(pipeline_id), for_update=True)
                for c in self._abort(conn, PipelineId(pipeline_id), CheckpointId(first), reason):
                    aborted.append((PipelineId(pipeline_id), c))
        return aborted

    def abort_timed_out(self, *, fence: Fence) -> list[tuple[PipelineId, CheckpointId]]:
        """Abort every TRIGGERED checkpoint older than its pipeline's `checkpoint.timeout_ms`
        (database clock), with the later ones it takes along. Leader-only."""
        aborted: list[tuple[PipelineId, CheckpointId]] = []
        with self._write(fence) as conn:
            rows = conn.execute(
                sa.select(
                    checkpoints.c.pipeline_id,
                    checkpoints.c.checkpoint_id,
                    checkpoints.c.triggered_at_ms,
                    pipelines.c.spec_json,
                    db_now_ms().label("db_now"),
                )
                .join(pipelines, pipelines.c.pipeline_id == checkpoints.c.pipeline_id)
                .where(checkpoints.c.state == CheckpointState.TRIGGERED.value)
                .order_by(checkpoints.c.pipeline_id, checkpoints.c.checkpoint_id)
            ).all()
            done: set[str] = set()
            for row in rows:
                if row.pipeline_id in done:
                    continue
                timeout_ms = int(json.loads(row.spec_json)["checkpoint"]["timeout_ms"])
                if int(row.db_now) - int(row.triggered_at_ms) <= timeout_ms:
                    continue
                pipeline_id = PipelineId(row.pipeline_id)
                self._pipeline(conn, pipeline_id, for_update=True)
                reason = f"timed out after {timeout_ms} ms"
                for c in self._abort(conn, pipeline_id, CheckpointId(row.checkpoint_id), reason):
                    aborted.append((pipeline_id, c))
                done.add(row.pipeline_id)
        return aborted

    def _abort(
        self,
        conn: Connection,
        pipeline_id: PipelineId,
        checkpoint_id: CheckpointId,
        reason: str,
    ) -> list[CheckpointId]:
        states = self._checkpoint_states(conn, pipeline_id)
        # Raises NotFound if N does not exist; COMMITTED ones are not in `states`.
        current = self._checkpoint(conn, pipeline_id, checkpoint_id).state
        if current is CheckpointState.ABORTED:
            return []
        transition_checkpoint(current, CheckpointState.ABORTED)
        victims = [checkpoint_id, *aborts_cascading_from(checkpoint_id, states)]
        for victim in victims:
            conn.execute(
                checkpoints.update()
                .where(
                    checkpoints.c.pipeline_id == pipeline_id,
                    checkpoints.c.checkpoint_id == victim,
                    checkpoints.c.state == CheckpointState.TRIGGERED.value,
                )
                .values(
                    state=CheckpointState.ABORTED.value,
                    aborted_at_ms=db_now_ms(),
                    abort_reason=reason
                    if victim == checkpoint_id
                    else f"checkpoint {checkpoint_id} aborted ({reason})",
                )
            )
        return victims

    def _abort_checkpoints_of_tasks(
        self, conn: Connection, task_ids: AbstractSet[TaskId], *, reason: str
    ) -> None:
        if not task_ids:
            return
        rows = conn.execute(
            sa.select(checkpoint_tasks.c.pipeline_id, sa.func.min(checkpoints.c.checkpoint_id))
            .join(
                checkpoints,
                sa.and_(
                    checkpoints.c.pipeline_id == checkpoint_tasks.c.pipeline_id,
                    checkpoints.c.checkpoint_id == checkpoint_tasks.c.checkpoint_id,
                ),
            )
            .where(
                checkpoint_tasks.c.task_id.in_(sorted(task_ids)),
                checkpoints.c.state == CheckpointState.TRIGGERED.value,
            )
            .group_by(checkpoint_tasks.c.pipeline_id)
        ).all()
        for pipeline_id, first in rows:
            self._abort(conn, PipelineId(pipeline_id), CheckpointId(first), reason)

    def mark_handles_aborted(
        self,
        *,
        fence: Fence,
        pipeline_id: PipelineId,
        checkpoint_id: CheckpointId,
        task_id: TaskId,
    ) -> None:
        """Record that a task's transactions of ABORTED checkpoint N were aborted, so they
        leave the lingering list. Leader-only. Idempotent."""
        with self._write(fence) as conn:
            checkpoint = self._checkpoint(conn, pipeline_id, checkpoint_id)
            if checkpoint.state is not CheckpointState.ABORTED:
                raise FailedPrecondition(
                    f"checkpoint {checkpoint_id} of {pipeline_id!r} is "
                    f"{checkpoint.state.value}; only an ABORTED checkpoint's transactions may "
                    "be aborted",
                    reason="CHECKPOINT_NOT_ABORTED",
                )
            conn.execute(
                checkpoint_tasks.update()
                .where(
                    checkpoint_tasks.c.pipeline_id == pipeline_id,
                    checkpoint_tasks.c.checkpoint_id == checkpoint_id,
                    checkpoint_tasks.c.task_id == task_id,
                    checkpoint_tasks.c.abort_acked_at_ms.is_(None),
                )
                .values(abort_acked_at_ms=db_now_ms())
            )

    def get_checkpoint(
        self, *, pipeline_id: PipelineId, checkpoint_id: CheckpointId
    ) -> CheckpointRecord:
        """One checkpoint with its tasks and timings; NotFound if absent."""
        with self._read() as conn:
            return self._checkpoint(conn, pipeline_id, checkpoint_id)

    def list_checkpoints(
        self,
        *,
        pipeline_id: PipelineId,
        limit: int = 100,
        before: CheckpointId | None = None,
        states: Iterable[CheckpointState] | None = None,
    ) -> list[CheckpointRecord]:
        """Checkpoint history of a pipeline, newest first, `limit` at most (older than
        `before` when given)."""
        with self._read() as conn:
            self._pipeline(conn, pipeline_id)
            stmt = (
                sa.select(checkpoints.c.checkpoint_id)
                .where(checkpoints.c.pipeline_id == pipeline_id)
                .order_by(checkpoints.c.checkpoint_id.desc())
                .limit(limit)
            )
            if before is not None:
                stmt = stmt.where(checkpoints.c.checkpoint_id < before)
            if states is not None:
                stmt = stmt.where(checkpoints.c.state.in_([s.value for s in states]))
            ids = [CheckpointId(int(r[0])) for r in conn.execute(stmt)]
            return [self._checkpoint(conn, pipeline_id, c) for c in ids]

    def _checkpoint_states(
        self, conn: Connection, pipeline_id: PipelineId
    ) -> dict[CheckpointId, CheckpointState]:
        rows = conn.execute(
            sa.select(checkpoints.c.checkpoint_id, checkpoints.c.state).where(
                checkpoints.c.pipeline_id == pipeline_id,
                checkpoints.c.state.in_(
                    [
                        CheckpointState.TRIGGERED.value,
                        CheckpointState.COMPLETE.value,
                        CheckpointState.ABORTED.value,
                    ]
                ),
            )
        ).all()
        return {CheckpointId(int(r[0])): CheckpointState(r[1]) for r in rows}

    def _checkpoint(
        self, conn: Connection, pipeline_id: PipelineId, checkpoint_id: CheckpointId
    ) -> CheckpointRecord:
        row = conn.execute(
            sa.select(checkpoints).where(
                checkpoints.c.pipeline_id == pipeline_id,
                checkpoints.c.checkpoint_id == checkpoint_id,
            )
        ).first()
        if row is None:
            raise NotFound(
                f"pipeline {pipeline_id!r} has no checkpoint {checkpoint_id}",
                resource_type="checkpoint",
                resource_name=f"{pipeline_id}/{checkpoint_id}",
            )
        task_rows = conn.execute(
            sa.select(checkpoint_tasks)
            .where(
                checkpoint_tasks.c.pipeline_id == pipeline_id,
                checkpoint_tasks.c.checkpoint_id == checkpoint_id,
            )
            .order_by(checkpoint_tasks.c.task_id)
        ).all()
        return CheckpointRecord(
            pipeline_id=pipeline_id,
            checkpoint_id=checkpoint_id,
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
            completed_at_ms=_opt_int(row.completed_at_ms),
            committed_at_ms=_opt_int(row.committed_at_ms),
            aborted_at_ms=_opt_int(row.aborted_at_ms),
            abort_reason=row.abort_reason,
        )

    def _slot_use(
        self, conn: Connection, pipeline_id: PipelineId
    ) -> dict[int, dict[int, CheckpointState | None]]:
        """task index -> slot -> state of the checkpoint that last used the slot."""
        rows = conn.execute(
            sa.select(
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
            .where(transactional_ids.c.pipeline_id == pipeline_id)
        ).all()
        result: dict[int, dict[int, CheckpointState | None]] = defaultdict(dict)
        for index, slot, state in rows:
            result[int(index)][int(slot)] = CheckpointState(state) if state else None
        return result

    # ------------------------------------------------------------------ recovery

    def list_pending_commits(self, *, pipeline_id: PipelineId | None = None) -> list[PendingCommit]:
        """COMPLETE but not COMMITTED checkpoints with all their handles, oldest first per
        pipeline: what a new leader (re-)commits before anything else."""
        with self._read() as conn:
            return self._pending_commits(conn, pipeline_id, task=None)

    def _pending_commits(
        self, conn: Connection, pipeline_id: PipelineId | None, task: TaskId | None
    ) -> list[PendingCommit]:
        stmt = (
            sa.select(checkpoints.c.pipeline_id, checkpoints.c.checkpoint_id)
            .where(checkpoints.c.state == CheckpointState.COMPLETE.value)
            .order_by(checkpoints.c.pipeline_id, checkpoints.c.checkpoint_id)
        )
        if pipeline_id is not None:
            stmt = stmt.where(checkpoints.c.pipeline_id == pipeline_id)
        result: list[PendingCommit] = []
        for pid, cid in conn.execute(stmt).all():
            hstmt = (
                sa.select(precommit_handles)
                .where(
                    precommit_handles.c.pipeline_id == pid,
                    precommit_handles.c.checkpoint_id == cid,
                )
                .order_by(precommit_handles.c.task_id, precommit_handles.c.transactional_id)
            )
            if task is not None:
                hstmt = hstmt.where(precommit_handles.c.task_id == task)
            by_task: dict[TaskId, list[SinkHandle]] = defaultdict(list)
            for h in conn.execute(hstmt):
                by_task[TaskId(h.task_id)].append(_sink_handle(h))
            if task is not None and not by_task:
                continue
            result.append(
                PendingCommit(
                    pipeline_id=PipelineId(pid),
                    checkpoint_id=CheckpointId(int(cid)),
                    handles=tuple(
                        TaskHandles(task_id=t, handles=tuple(hs))
                        for t, hs in sorted(by_task.items())
                    ),
                )
            )
        return result

    def list_lingering_transactions(
        self,
        *,
        pipeline_id: PipelineId | None = None,
        include_in_flight: bool = False,
    ) -> list[LingeringTransaction]:
        """Transactions of checkpoints that never became COMPLETE and whose abort is not
        yet recorded: ABORTED ones, and TRIGGERED ones too with `include_in_flight` (a
        new leader, after `abort_in_flight`, needs only the default).

        A reported pre-commit gives one entry per handle, on the handle's own id
        (`<slot id>-<k>`, one per Spark write partition). A task that never reported may
        have opened transactions on its slot's ids before dying: its entry has the slot's
        id and no producer id, and the executor ends whatever is open on the slot's ids
        with `init_transactions` (it aborts and fences). The slot of an ABORTED checkpoint
        may already be reused by a later one: then an EndTxn abort with the stored producer
        epoch is refused by the broker as fenced, which means the transaction is already
        gone; never re-initialise such ids (`slot_reused` says so: it would abort the later
        checkpoint's transaction).
        """
        wanted = [CheckpointState.ABORTED.value]
        if include_in_flight:
            wanted.append(CheckpointState.TRIGGERED.value)
        with self._read() as conn:
            return self._lingering(conn, pipeline_id, None, wanted)

    def _lingering(
        self,
        conn: Connection,
        pipeline_id: PipelineId | None,
        task: TaskId | None,
        states: list[str],
    ) -> list[LingeringTransaction]:
        stmt = (
            sa.select(
                checkpoint_tasks.c.pipeline_id,
                checkpoint_tasks.c.checkpoint_id,
                checkpoint_tasks.c.task_id,
                checkpoint_tasks.c.transactional_id,
                checkpoints.c.state,
                precommit_handles.c.transactional_id.label("handle_transactional_id"),
                precommit_handles.c.producer_id,
                precommit_handles.c.producer_epoch,
                transactional_ids.c.checkpoint_id.label("slot_checkpoint_id"),
            )
            .select_from(
                checkpoint_tasks.join(
                    checkpoints,
                    sa.and_(
                        checkpoints.c.pipeline_id == checkpoint_tasks.c.pipeline_id,
                        checkpoints.c.checkpoint_id == checkpoint_tasks.c.checkpoint_id,
                    ),
                )
                # A reported pre-commit has one handle per Spark write partition, each on
                # its own id "<slot id>-<k>": abort exactly those. An unreported one has
                # none; its row keeps the slot's id and no producer id.
                .outerjoin(
                    precommit_handles,
                    sa.and_(
                        precommit_handles.c.pipeline_id == checkpoint_tasks.c.pipeline_id,
                        precommit_handles.c.checkpoint_id == checkpoint_tasks.c.checkpoint_id,
                        precommit_handles.c.task_id == checkpoint_tasks.c.task_id,
                    ),
                )
                .outerjoin(
                    transactional_ids,
                    transactional_ids.c.transactional_id == checkpoint_tasks.c.transactional_id,
                )
            )
            .where(
                checkpoints.c.state.in_(states),
                checkpoint_tasks.c.abort_acked_at_ms.is_(None),
            )
            .order_by(
                checkpoint_tasks.c.pipeline_id,
                checkpoint_tasks.c.checkpoint_id,
                checkpoint_tasks.c.task_id,
                precommit_handles.c.transactional_id,
            )
        )
        if pipeline_id is not None:
            stmt = stmt.where(checkpoint_tasks.c.pipeline_id == pipeline_id)
        if task is not None:
            stmt = stmt.where(checkpoint_tasks.c.task_id == task)
        return [
            LingeringTransaction(
                pipeline_id=PipelineId(r.pipeline_id),
                checkpoint_id=CheckpointId(int(r.checkpoint_id)),
                checkpoint_state=CheckpointState(r.state),
                task_id=TaskId(r.task_id),
                transactional_id=r.handle_transactional_id or r.transactional_id,
                producer_id=_opt_int(r.producer_id),
                producer_epoch=_opt_int(r.producer_epoch),
                slot_reused=r.slot_checkpoint_id is not None
                and int(r.slot_checkpoint_id) != int(r.checkpoint_id),
            )
            for r in conn.execute(stmt)
        ]

    def restore_state(self, *, task_id: TaskId) -> RestoreState:
        """What a (re)assigned task needs before reading (DESIGN.md step 5): the next offset
        of each of its partitions, its handles of COMPLETE-not-COMMITTED checkpoints
        (oldest first) to re-commit, and its transactions of ABORTED checkpoints whose
        abort is not recorded yet (not of TRIGGERED ones: a pre-commit the task's previous
        process reported may still become COMPLETE)."""
        return self.restore_states(task_ids=[task_id])[task_id]

    def restore_states(self, *, task_ids: Sequence[TaskId]) -> dict[TaskId, RestoreState]:
        """`restore_state` of many tasks (a heartbeat's whole assignment) in one read
        transaction, with a handful of queries per pipeline however many tasks it has."""
        result: dict[TaskId, RestoreState] = {}
        with self._read() as conn:
            by_pipeline: dict[PipelineId, list[TaskRecord]] = defaultdict(list)
            for task_id in dict.fromkeys(task_ids):
                task = self._task(conn, task_id)
                by_pipeline[task.pipeline_id].append(task)
            for pipeline_id, pipeline_tasks in by_pipeline.items():
                offsets = {
                    TopicPartition(r.topic, int(r.partition)): int(r.next_offset)
                    for r in conn.execute(
                        sa.select(source_offsets).where(source_offsets.c.pipeline_id == pipeline_id)
                    )
                }
                pending = self._pending_commits(conn, pipeline_id, task=None)
                # Only ABORTED ones: a TRIGGERED checkpoint whose pre-commit of this task was
                # reported by the task's previous process may still become COMPLETE.
                lingering = self._lingering(
                    conn, pipeline_id, None, [CheckpointState.ABORTED.value]
                )
                for task in pipeline_tasks:
                    to_commit: list[PendingCommit] = []
                    for commit in pending:
                        mine = tuple(h for h in commit.handles if h.task_id == task.task_id)
                        if mine:
                            to_commit.append(dataclasses.replace(commit, handles=mine))
                    result[task.task_id] = RestoreState(
                        task_id=task.task_id,
                        task_generation=task.generation,
                        start_offsets={tp: offsets[tp] for tp in task.partitions if tp in offsets},
                        to_commit=tuple(to_commit),
                        to_abort=tuple(t for t in lingering if t.task_id == task.task_id),
                    )
        return result

    # ------------------------------------------------------------------ offsets

    def get_offsets(self, *, pipeline_id: PipelineId) -> list[PartitionOffset]:
        """Where the pipeline resumes each source partition (from the last COMPLETE
        checkpoint or a reset); partitions absent start from `starting_offsets`."""
        with self._read() as conn:
            self._pipeline(conn, pipeline_id)
            rows = conn.execute(
                sa.select(source_offsets)
                .where(source_offsets.c.pipeline_id == pipeline_id)
                .order_by(source_offsets.c.topic, source_offsets.c.partition)
            ).all()
        return [
            PartitionOffset(
                topic=r.topic,
                partition=int(r.partition),
                next_offset=int(r.next_offset),
                checkpoint_id=_opt_int(r.checkpoint_id),
            )
            for r in rows
        ]

    def reset_offsets(
        self,
        *,
        fence: Fence,
        pipeline_id: PipelineId,
        offsets: Mapping[TopicPartition, int] | None,
    ) -> list[PartitionOffset]:
        """Set where a STOPPED pipeline resumes (None: forget all, back to
        `starting_offsets`). Leader-only. FailedPrecondition unless the target state is
        STOPPED and no checkpoint is still in flight (as Kafka Connect's offsets API)."""
        for tp, offset in (offsets or {}).items():
            if offset < 0:
                raise InvalidArgument.for_field(
                    f"offsets[{tp.topic}:{tp.partition}]",
                    f"must be >= 0, got {offset}; omit the partition to use starting_offsets",
                )
        with self._write(fence) as conn:
            pipeline = self._pipeline(conn, pipeline_id, for_update=True)
            if pipeline.target_state is not TargetState.STOPPED:
                raise FailedPrecondition(
                    f"pipeline {pipeline_id!r} is {pipeline.target_state.value}; stop it "
                    "before resetting its offsets",
                    reason="PIPELINE_NOT_STOPPED",
                )
            in_flight = [
                c
                for c, s in self._checkpoint_states(conn, pipeline_id).items()
                if s in (CheckpointState.TRIGGERED, CheckpointState.COMPLETE)
            ]
            if in_flight:
                raise FailedPrecondition(
                    f"pipeline {pipeline_id!r} still has checkpoints {sorted(in_flight)} in "
                    "flight; wait until they are committed or aborted",
                    reason="CHECKPOINTS_IN_FLIGHT",
                )
            if offsets is None:
                conn.execute(
                    source_offsets.delete().where(source_offsets.c.pipeline_id == pipeline_id)
                )
            self._upsert(
                conn,
                source_offsets,
                [
                    {
                        "pipeline_id": pipeline_id,
                        "topic": tp.topic,
                        "partition": tp.partition,
                        "next_offset": offset,
                        "checkpoint_id": None,
                    }
                    for tp, offset in (offsets or {}).items()
                ],
                key=["pipeline_id", "topic", "partition"],
            )
        return self.get_offsets(pipeline_id=pipeline_id)

    # ------------------------------------------------------------------ helpers

    def _upsert(
        self,
        conn: Connection,
        table: sa.Table,
        rows: Sequence[Mapping[str, Any]],
        *,
        key: Sequence[str],
    ) -> None:
        """Insert `rows`, or update those whose `key` exists, in one executemany statement;
        `updated_at_ms` is set from the database's clock."""
        if not rows:
            return
        columns = [c for c in rows[0] if c not in key]
        insert = (
            pg_dialect.insert(table)
            if conn.dialect.name == "postgresql"
            else sqlite_dialect.insert(table)
        )
        stmt = insert.values(updated_at_ms=db_now_ms()).on_conflict_do_update(
            index_elements=list(key),
            set_={**{c: insert.excluded[c] for c in columns}, "updated_at_ms": db_now_ms()},
        )
        conn.execute(stmt, [dict(r) for r in rows])


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _executor_record(row: Any) -> ExecutorRecord:
    return ExecutorRecord(
        executor_id=ExecutorId(row.executor_id),
        address=row.address,
        generation=Generation(int(row.generation)),
        registered_at_ms=int(row.registered_at_ms),
        last_heartbeat_ms=int(row.last_heartbeat_ms),
    )


def _pipeline_record(row: Any) -> PipelineRecord:
    return PipelineRecord(
        pipeline_id=PipelineId(row.pipeline_id),
        spec=parse_pipeline_spec(json.loads(row.spec_json)),
        config_version=int(row.config_version),
        target_state=TargetState(row.target_state),
        next_checkpoint_id=CheckpointId(int(row.next_checkpoint_id)),
        created_at_ms=int(row.created_at_ms),
        updated_at_ms=int(row.updated_at_ms),
    )


def _partitions_json(partitions: Iterable[TopicPartition]) -> str:
    return json.dumps([[tp.topic, tp.partition] for tp in sorted(partitions)])


def _task_record(row: Any) -> TaskRecord:
    pipeline_id, index = split_task_id(TaskId(row.task_id))
    return TaskRecord(
        task_id=TaskId(row.task_id),
        pipeline_id=pipeline_id,
        task_index=index,
        partitions=tuple(TopicPartition(t, int(p)) for t, p in json.loads(row.partitions_json)),
        executor_id=ExecutorId(row.executor_id) if row.executor_id else None,
        generation=Generation(int(row.generation)),
        state=TaskState(row.state),
        state_executor_id=ExecutorId(row.state_executor_id) if row.state_executor_id else None,
        state_executor_generation=(
            Generation(int(row.state_executor_generation))
            if row.state_executor_generation is not None
            else None
        ),
        last_error=row.last_error,
        updated_at_ms=int(row.updated_at_ms),
    )


def _sink_handle(row: Any) -> SinkHandle:
    return SinkHandle(
        transactional_id=row.transactional_id,
        producer_id=int(row.producer_id),
        producer_epoch=int(row.producer_epoch),
        kind=row.kind,
    )
