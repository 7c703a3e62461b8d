"""The coordinator's store: one object over the sub-stores, split by what each stores.

As Kafka Connect splits its backing stores (config, offsets, status), the tables are
split into `lease` (`lease_store.py`), `replicas` (the coordinator replicas:
`replica_store.py`), `executors` (`membership_store.py`), `pipelines`
(pipelines, tasks, assignment: `pipeline_store.py`), `checkpoints` (checkpoints,
pre-commits, commits and aborts, lingering transactions, restore states:
`checkpoint_store.py`), `data_loss` (DATA_LOST checkpoints and the way past them:
`data_loss_store.py`), `offsets` (`offset_store.py`) and `requests` (the recorded answers
of mutating calls, by request_id: `request_store.py`), all on one `engine.Database`
that owns the fenced transaction. No other code in the coordinator speaks SQL.
Sub-store methods take keyword-only arguments and return domain values; leader-only ones
take the leader's `Fence` and write nothing (FencedError) once it no longer leads.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.engine import Engine

from lockgate.common.failpoints import Failpoints
from lockgate.common.model.ids import PipelineId
from lockgate.coordinator.domain.checkpoints import (
    PendingCommit,
    first_timed_out,
    next_timeout_at_ms,
)
from lockgate.coordinator.domain.lease import DEFAULT_LEASE_MS
from lockgate.coordinator.domain.membership import ExecutorRecord
from lockgate.coordinator.domain.pipelines import PipelineRecord, PipelinesFingerprint
from lockgate.coordinator.store import migrate
from lockgate.coordinator.store.checkpoint_store import CheckpointStore, triggered_checkpoints
from lockgate.coordinator.store.data_loss_store import DataLossStore
from lockgate.coordinator.store.engine import (
    Database,
    SessionTimeouts,
    create_engine,
    read_now_ms,
)
from lockgate.coordinator.store.lease_store import LeaseStore
from lockgate.coordinator.store.membership_store import MembershipStore, read_executors
from lockgate.coordinator.store.offset_store import OffsetStore
from lockgate.coordinator.store.pipeline_store import PipelineStore, read_fingerprint
from lockgate.coordinator.store.progress_store import ProgressStore
from lockgate.coordinator.store.recovery_queries import pass_duties, pending_commits
from lockgate.coordinator.store.replica_store import ReplicaStore
from lockgate.coordinator.store.request_store import RequestStore
from lockgate.coordinator.store.rows import read_pipeline
from lockgate.coordinator.store.statistics import refresh_statistics


def open_store(
    url: str,
    *,
    migrate_schema: bool = True,
    lease_ms: int = DEFAULT_LEASE_MS,
    failpoints: Failpoints | None = None,
) -> SqlStore:
    """Open the store at a SQLAlchemy URL and, by default, migrate it to the newest schema.

    `sqlite:///path/to/lockgate.db` or `postgresql+psycopg://user@host/db`. Every session
    runs under timeouts below `lease_ms` (`engine.SessionTimeouts`); the migrations run
    first on a connection of their own without them (their DDL may wait for another
    replica's). `failpoints`: the process's, for the ones reached inside a transaction.
    """
    if migrate_schema:
        migrations = create_engine(url, timeouts=None)
        try:
            migrate.upgrade_to_head(migrations)
        finally:
            migrations.dispose()
    timeouts = SessionTimeouts.within_lease(lease_ms)
    return SqlStore(
        engine=create_engine(url, timeouts=timeouts), timeouts=timeouts, failpoints=failpoints
    )


@dataclass(frozen=True)
class ClusterView:
    """What each pass of the leader reads first, in one read transaction, for all its
    steps: the pipelines' fingerprint (read first: a change after it shows in the next
    pass's read), every executor (id order), the database's clock, and what the pass has to
    do beyond its triggers: whether a TRIGGERED checkpoint is past its timeout (and when
    the next one will be, by the database's clock: the loop sleeps no longer), which
    pipelines have transactions of ABORTED checkpoints to abort (`lingering`), and which
    have COMPLETE checkpoints to commit (`pending_commits`). One read instead of four: the
    loop makes several passes per checkpoint."""

    fingerprint: PipelinesFingerprint
    executors: tuple[ExecutorRecord, ...]
    now_ms: int
    timed_out: bool
    next_timeout_at_ms: int | None
    in_flight: frozenset[PipelineId]
    """Pipelines with a TRIGGERED checkpoint (none triggers again until it ends)."""
    lingering: frozenset[PipelineId]
    pending_commits: frozenset[PipelineId]


@dataclass(frozen=True)
class CommitInputs:
    """What a pipeline's commit job reads, in one read transaction: its COMPLETE, not
    COMMITTED checkpoints with their handles (oldest first), every executor with the
    database's clock (to pick the live ones to call), and the pipeline (its sink)."""

    pending: list[PendingCommit]
    executors: list[ExecutorRecord]
    now_ms: int
    pipeline: PipelineRecord


class SqlStore:
    """All of the coordinator's state, one sub-store per kind. Thread-safe."""

    def __init__(
        self,
        *,
        engine: Engine,
        timeouts: SessionTimeouts | None = None,
        failpoints: Failpoints | None = None,
    ) -> None:
        self.database = Database(engine, timeouts=timeouts)
        """The shared engine and its `transaction(fence=...)` / `read()`."""
        self.lease = LeaseStore(database=self.database)
        self.replicas = ReplicaStore(database=self.database)
        self.executors = MembershipStore(database=self.database)
        self.pipelines = PipelineStore(database=self.database)
        self.checkpoints = CheckpointStore(database=self.database, failpoints=failpoints)
        self.offsets = OffsetStore(database=self.database)
        self.data_loss = DataLossStore(database=self.database)
        self.requests = RequestStore(database=self.database)
        self.progress = ProgressStore(database=self.database)

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (tests and benchmarks inspect the tables through it)."""
        return self.database.engine

    def close(self) -> None:
        """Release the connection pool."""
        self.database.close()

    def refresh_statistics(self) -> list[str]:
        """Analyze the tables whose size moved enough since their last analysis, on PostgreSQL
        (`statistics.py`); the names of those analyzed."""
        return refresh_statistics(self.database.engine)

    def read_cluster(self) -> ClusterView:
        """What each pass of the leader reads first (`ClusterView`), in one read
        transaction."""
        with self.database.read() as conn:
            fingerprint = read_fingerprint(conn)
            executors = read_executors(conn)
            now_ms = read_now_ms(conn)
            triggered = triggered_checkpoints(conn)
            pending_commits, lingering = pass_duties(conn)
            return ClusterView(
                fingerprint=fingerprint,
                executors=tuple(executors),
                now_ms=now_ms,
                timed_out=bool(first_timed_out(triggered, now_ms=now_ms)),
                next_timeout_at_ms=next_timeout_at_ms(triggered, now_ms=now_ms),
                in_flight=frozenset(c.pipeline_id for c in triggered),
                lingering=lingering,
                pending_commits=pending_commits,
            )

    def read_commit_inputs(self, pipeline_id: PipelineId) -> CommitInputs | None:
        """What the commit job of `pipeline_id` reads (`CommitInputs`), in one read
        transaction; None when it has nothing to commit. NotFound if the pipeline is gone
        while a checkpoint of it is pending."""
        with self.database.read() as conn:
            pending = pending_commits(conn, [pipeline_id])
            if not pending:
                return None
            return CommitInputs(
                pending=pending,
                executors=read_executors(conn),
                now_ms=read_now_ms(conn),
                pipeline=read_pipeline(conn, pipeline_id),
            )

    def db_now_ms(self) -> int:
        """The database's clock, in milliseconds since the Unix epoch."""
        return self.database.db_now_ms()
