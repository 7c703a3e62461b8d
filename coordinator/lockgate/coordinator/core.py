"""The coordinator's facade: what the gRPC servicer and the leader loop call.

`CoordinatorCore` joins the pure decisions (`domain/`) to the store (`store/`): it validates
requests, holds this replica's view of the lease, and passes the leader's `Fence` to every
state-changing store call. It imports no `*_pb2`; the servicer converts messages to the
plain values taken here and maps the `lockgate.common.errors` raised here to status codes.

Leader-only methods raise `NotLeader` (with the leader's address when known) on a
follower, and `FencedError` if the lease was lost between the local check and the write;
on `FencedError` this replica also steps down at once.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from lockgate.coordinator.domain.assignment import (
    DEFAULT_REASSIGN_DELAY_MS,
    DEFAULT_SESSION_TIMEOUT_MS,
    AssignmentPlan,
    ExecutorLiveness,
    executor_liveness,
    plan_assignment,
)
from lockgate.coordinator.domain.checkpoints import (
    CheckpointRecord,
    LingeringTransaction,
    PendingCommit,
    Precommit,
    RestoreState,
    commit_order,
    should_trigger,
)
from lockgate.coordinator.domain.errors import FailedPrecondition, FencedError, NotLeader
from lockgate.coordinator.domain.ids import (
    CheckpointId,
    CoordinatorId,
    ExecutorId,
    Generation,
    PipelineId,
    TaskId,
)
from lockgate.coordinator.domain.lease import (
    DEFAULT_LEASE_MS,
    Fence,
    LeaseRecord,
    local_deadline,
    next_role,
)
from lockgate.coordinator.domain.membership import ExecutorRecord
from lockgate.coordinator.domain.pipeline_spec import parse_pipeline_spec
from lockgate.coordinator.domain.pipelines import PartitionOffset, PipelineRecord, TaskRecord
from lockgate.coordinator.domain.states import LeaseRole, TargetState, TaskState
from lockgate.coordinator.domain.tasks import TopicPartition, split_partitions
from lockgate.coordinator.store.sql_store import SqlStore

_R = TypeVar("_R")


@dataclass(frozen=True)
class ExecutorView:
    """An executor with its liveness as judged now by the database's clock."""

    record: ExecutorRecord
    liveness: ExecutorLiveness
    tasks: frozenset[TaskId]


@dataclass(frozen=True)
class PipelineStatus:
    """A pipeline's desired state beside its tasks' observed states."""

    pipeline: PipelineRecord
    tasks: tuple[TaskRecord, ...]


@dataclass(frozen=True)
class RebalanceResult:
    """The assignment decided and the tasks whose assignment changed (to be told)."""

    plan: AssignmentPlan
    changed: tuple[TaskRecord, ...]


@dataclass(frozen=True)
class RecoveryPlan:
    """What a new leader must do before triggering anything (DESIGN.md step 5)."""

    aborted: tuple[tuple[PipelineId, CheckpointId], ...]
    """In-flight checkpoints it aborted because it cannot know their outcome."""
    to_commit: tuple[PendingCommit, ...]
    """COMPLETE, not COMMITTED checkpoints, in creation order: commit them again."""
    to_abort: tuple[LingeringTransaction, ...]
    """Transactions of checkpoints that never became COMPLETE: abort them."""


class CoordinatorCore:
    """One coordinator replica's view of the cluster, over the shared store."""

    def __init__(
        self,
        *,
        store: SqlStore,
        coordinator_id: CoordinatorId,
        advertise_address: str,
        lease_ms: int = DEFAULT_LEASE_MS,
        lease_safety_ms: int | None = None,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        reassign_delay_ms: int = DEFAULT_REASSIGN_DELAY_MS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if lease_ms <= 0:
            raise ValueError(f"lease_ms must be > 0, got {lease_ms}")
        self._store = store
        self._id = coordinator_id
        self._address = advertise_address
        self._lease_ms = lease_ms
        # Margin for a statement's round trip and clock-rate drift; a tenth of the lease.
        self._safety_ms = lease_ms // 10 if lease_safety_ms is None else lease_safety_ms
        self._session_timeout_ms = session_timeout_ms
        self._reassign_delay_ms = reassign_delay_ms
        self._monotonic = monotonic
        # This process's incarnation: a restarted replica of the same id never renews the
        # term of the process before it (which may be paused, not dead).
        self._incarnation = uuid.uuid4().hex
        self._role = LeaseRole.FOLLOWER
        self._fence: Fence | None = None
        self._trusted_until = 0.0
        self._last_lease: LeaseRecord | None = None

    @property
    def store(self) -> SqlStore:
        """The store this replica writes through."""
        return self._store

    @property
    def coordinator_id(self) -> CoordinatorId:
        """This replica's id."""
        return self._id

    # ------------------------------------------------------------------ leadership

    def campaign(self) -> LeaseRecord:
        """Try to acquire or renew the lease once; update this replica's role.

        Call it every `lease_ms / 3` or so from one thread. A database error makes a
        leader step down (it can no longer prove it leads) and is re-raised.
        """
        sent_at = self._monotonic()
        try:
            lease = self._store.lease.try_acquire_lease(
                holder=self._id,
                holder_address=self._address,
                lease_ms=self._lease_ms,
                incarnation=self._incarnation,
            )
        except Exception:
            self._become(None, sent_at)
            raise
        self._become(lease, sent_at)
        return lease

    def _become(self, lease: LeaseRecord | None, sent_at: float) -> None:
        self._role = next_role(
            current=self._role, me=self._id, lease=lease, incarnation=self._incarnation
        )
        if lease is not None:
            self._last_lease = lease
        if self._role is LeaseRole.LEADER and lease is not None:
            self._fence = lease.fence
            self._trusted_until = local_deadline(
                sent_at_monotonic_s=sent_at, lease_ms=self._lease_ms, safety_ms=self._safety_ms
            )
        else:
            self._fence = None
            self._trusted_until = 0.0

    @property
    def role(self) -> LeaseRole:
        """LEADER while this replica's last lease attempt won and has not run out locally."""
        if self._role is LeaseRole.LEADER and self._monotonic() >= self._trusted_until:
            return LeaseRole.FOLLOWER
        return self._role

    def fence(self) -> Fence:
        """The token for leader-only writes; NotLeader if this replica does not lead now."""
        if self._fence is None or self.role is not LeaseRole.LEADER:
            lease = self._last_lease
            address = lease.holder_address if lease is not None and lease.is_held else None
            if address == self._address:
                address = None  # our own expired lease: nobody known leads
            raise NotLeader(leader_address=address)
        return self._fence

    def leader(self) -> LeaseRecord:
        """Who leads now, read from the store (any replica may call it)."""
        return self._store.lease.read_lease()

    def resign(self) -> None:
        """Release the lease if this replica holds it (graceful shutdown)."""
        if self._fence is not None:
            # FencedError: someone else leads already, there is nothing to give up.
            with contextlib.suppress(FencedError):
                self._store.lease.release_lease(fence=self._fence)
        self._become(None, self._monotonic())

    def _leader_call(self, write: Callable[[Fence], _R]) -> _R:
        fence = self.fence()
        try:
            return write(fence)
        except FencedError:
            self._become(None, self._monotonic())
            raise

    # ------------------------------------------------------------------ pipelines

    def create_pipeline(self, raw_spec: Mapping[str, object]) -> PipelineRecord:
        """Validate a config (InvalidArgument lists every bad field) and create it."""
        spec = parse_pipeline_spec(raw_spec)
        return self._leader_call(
            lambda f: self._store.pipelines.create_pipeline(fence=f, spec=spec)
        )

    def update_pipeline(
        self, raw_spec: Mapping[str, object], *, expected_version: int | None = None
    ) -> PipelineRecord:
        """Validate and replace a pipeline's config; its config version grows by one."""
        spec = parse_pipeline_spec(raw_spec)
        return self._leader_call(
            lambda f: self._store.pipelines.update_pipeline(
                fence=f, spec=spec, expected_version=expected_version
            )
        )

    def get_pipeline(self, pipeline_id: PipelineId) -> PipelineRecord:
        """One pipeline (NotFound if unknown)."""
        return self._store.pipelines.get_pipeline(pipeline_id=pipeline_id)

    def list_pipelines(
        self, *, page_size: int = 100, page_token: str = ""
    ) -> tuple[list[PipelineRecord], str]:
        """A page of pipelines in name order and the next page's token ("" at the end)."""
        return self._store.pipelines.list_pipelines(page_size=page_size, page_token=page_token)

    def delete_pipeline(self, pipeline_id: PipelineId) -> None:
        """Delete a pipeline and everything it owns."""
        self._leader_call(
            lambda f: self._store.pipelines.delete_pipeline(fence=f, pipeline_id=pipeline_id)
        )

    def pause_pipeline(self, pipeline_id: PipelineId) -> PipelineRecord:
        """Ask the pipeline's tasks to pause (target state PAUSED)."""
        return self._set_target(pipeline_id, TargetState.PAUSED)

    def resume_pipeline(self, pipeline_id: PipelineId) -> PipelineRecord:
        """Ask the pipeline to run (target state RUNNING)."""
        return self._set_target(pipeline_id, TargetState.RUNNING)

    def stop_pipeline(self, pipeline_id: PipelineId) -> PipelineRecord:
        """Ask the pipeline to stop (target state STOPPED; offsets may then be reset)."""
        return self._set_target(pipeline_id, TargetState.STOPPED)

    def _set_target(self, pipeline_id: PipelineId, target: TargetState) -> PipelineRecord:
        return self._leader_call(
            lambda f: self._store.pipelines.set_target_state(
                fence=f, pipeline_id=pipeline_id, target_state=target
            )
        )

    def restart_pipeline(
        self, pipeline_id: PipelineId, *, include_tasks: bool = True, only_failed: bool = False
    ) -> list[TaskRecord]:
        """Restart a pipeline's tasks (all, or only FAILED ones), as Kafka Connect's
        restart with `includeTasks`/`onlyFailed`. Returns the tasks restarted.

        Without `include_tasks` there is nothing to restart on the coordinator's side (the
        pipeline has no separate connector instance): the pipeline must exist, no task moves.
        """
        if not include_tasks:
            self._store.pipelines.get_pipeline(pipeline_id=pipeline_id)
            return []
        return self._leader_call(
            lambda f: self._store.pipelines.restart_tasks(
                fence=f, pipeline_id=pipeline_id, only_failed=only_failed
            )
        )

    def pipeline_status(self, pipeline_id: PipelineId) -> PipelineStatus:
        """The pipeline's target state with each task's observed state, executor, error."""
        pipeline = self._store.pipelines.get_pipeline(pipeline_id=pipeline_id)
        return PipelineStatus(
            pipeline=pipeline,
            tasks=tuple(self._store.pipelines.list_tasks(pipeline_id=pipeline_id)),
        )

    def get_offsets(self, pipeline_id: PipelineId) -> list[PartitionOffset]:
        """Where the pipeline resumes each source partition."""
        return self._store.offsets.get_offsets(pipeline_id=pipeline_id)

    def reset_offsets(
        self, pipeline_id: PipelineId, offsets: Mapping[TopicPartition, int] | None
    ) -> list[PartitionOffset]:
        """Set (or with None forget) a STOPPED pipeline's offsets; FailedPrecondition else."""
        return self._leader_call(
            lambda f: self._store.offsets.reset_offsets(
                fence=f, pipeline_id=pipeline_id, offsets=offsets
            )
        )

    def list_checkpoints(
        self, pipeline_id: PipelineId, *, limit: int = 100, before: CheckpointId | None = None
    ) -> list[CheckpointRecord]:
        """Checkpoint history with timings, newest first."""
        return self._store.checkpoints.list_checkpoints(
            pipeline_id=pipeline_id, limit=limit, before=before
        )

    # ------------------------------------------------------------------ membership

    def register_executor(self, executor_id: ExecutorId, address: str) -> ExecutorRecord:
        """Start a new session for an executor; returns its new generation."""
        return self._leader_call(
            lambda f: self._store.executors.register_executor(
                fence=f, executor_id=executor_id, address=address
            )
        )

    def heartbeat(self, executor_id: ExecutorId, generation: Generation) -> list[TaskRecord]:
        """Record a heartbeat (StaleGeneration for a zombie); return the executor's tasks."""
        self._leader_call(
            lambda f: self._store.executors.heartbeat_executor(
                fence=f, executor_id=executor_id, generation=generation
            )
        )
        return [t for t in self._store.pipelines.list_tasks() if t.executor_id == executor_id]

    def deregister_executor(self, executor_id: ExecutorId, generation: Generation) -> None:
        """Remove an executor that shuts down cleanly."""
        self._leader_call(
            lambda f: self._store.executors.deregister_executor(
                fence=f, executor_id=executor_id, generation=generation
            )
        )

    def list_executors(self) -> list[ExecutorView]:
        """Every registered executor, its liveness by the database's clock, its tasks."""
        records, now = self._store.executors.list_executors()
        assignment = self._store.pipelines.current_assignment()
        return [
            ExecutorView(
                record=r,
                liveness=executor_liveness(
                    last_heartbeat_ms=r.last_heartbeat_ms,
                    now_ms=now,
                    session_timeout_ms=self._session_timeout_ms,
                    reassign_delay_ms=self._reassign_delay_ms,
                ),
                tasks=assignment.get(r.executor_id, frozenset()),
            )
            for r in records
        ]

    def report_task_state(
        self,
        *,
        task_id: TaskId,
        task_generation: Generation,
        executor_id: ExecutorId,
        executor_generation: Generation,
        state: TaskState,
        error: str | None = None,
    ) -> TaskRecord:
        """Record a task's observed state; stale generations are refused."""
        return self._leader_call(
            lambda f: self._store.pipelines.report_task_state(
                fence=f,
                task_id=task_id,
                task_generation=task_generation,
                executor_id=executor_id,
                executor_generation=executor_generation,
                state=state,
                error=error,
            )
        )

    # ------------------------------------------------------------------ leader loop

    def reconfigure_tasks(
        self, pipeline_id: PipelineId, partitions: Sequence[TopicPartition]
    ) -> list[TaskRecord]:
        """Split the pipeline over its source partitions (from Kafka metadata) and store
        the tasks. Leader-only."""
        pipeline = self._store.pipelines.get_pipeline(pipeline_id=pipeline_id)
        splits = split_partitions(partitions, pipeline.spec.tasks_max)
        return self._leader_call(
            lambda f: self._store.pipelines.set_pipeline_tasks(
                fence=f, pipeline_id=pipeline_id, splits=splits
            )
        )

    def rebalance(self) -> RebalanceResult:
        """Decide and write the next assignment (balanced, sticky, with the reassignment
        delay for dead executors). Leader-only. `plan.recheck_at_ms` says when to call
        again at the latest."""
        fence = self.fence()
        records, now = self._store.executors.list_executors()
        current = self._store.pipelines.current_assignment()
        all_tasks = [t.task_id for t in self._store.pipelines.list_tasks()]
        plan = plan_assignment(
            current=current,
            last_heartbeats_ms={r.executor_id: r.last_heartbeat_ms for r in records},
            all_tasks=all_tasks,
            now_ms=now,
            session_timeout_ms=self._session_timeout_ms,
            reassign_delay_ms=self._reassign_delay_ms,
        )
        try:
            changed = self._store.pipelines.apply_assignment(
                fence=fence, assignment=plan.assignment
            )
        except FencedError:
            self._become(None, self._monotonic())
            raise
        return RebalanceResult(plan=plan, changed=tuple(changed))

    def trigger_due_checkpoints(
        self, *, now_ms: int | None = None, max_in_flight: int | None = None
    ) -> list[CheckpointRecord]:
        """Trigger the next checkpoint of every RUNNING pipeline whose interval elapsed.

        Leader-only. A pipeline that cannot start one now (unassigned tasks, too many in
        flight, no free transactional id) is skipped until the next call.
        """
        self.fence()
        now = self._store.db_now_ms() if now_ms is None else now_ms
        triggered: list[CheckpointRecord] = []
        token = ""
        while True:
            page, token = self._store.pipelines.list_pipelines(page_token=token)
            for pipeline in page:
                if pipeline.target_state is not TargetState.RUNNING:
                    continue
                recent = self._store.checkpoints.list_checkpoints(
                    pipeline_id=pipeline.pipeline_id, limit=4
                )
                last = recent[0].triggered_at_ms if recent else None
                in_flight = sum(1 for c in recent if c.in_flight)
                if not should_trigger(
                    last_triggered_at_ms=last,
                    now_ms=now,
                    interval_ms=pipeline.spec.checkpoint.interval_ms,
                    in_flight=in_flight,
                    **({} if max_in_flight is None else {"max_in_flight": max_in_flight}),
                ):
                    continue
                try:
                    triggered.append(self._trigger(pipeline.pipeline_id))
                except FailedPrecondition:
                    continue
            if not token:
                return triggered

    def _trigger(self, pipeline_id: PipelineId) -> CheckpointRecord:
        return self._leader_call(
            lambda f: self._store.checkpoints.trigger_checkpoint(fence=f, pipeline_id=pipeline_id)
        )

    def precommit(self, precommit: Precommit) -> CheckpointRecord:
        """Record a task's pre-commit; writes COMPLETE when it was the last. Leader-only."""
        return self._leader_call(
            lambda f: self._store.checkpoints.record_precommit(fence=f, precommit=precommit)
        )

    def precommits(self, precommits: Sequence[Precommit]) -> list[CheckpointRecord]:
        """`precommit` for many reports in one transaction, all or nothing; returns each
        report's checkpoint as it is afterwards. Leader-only."""
        records = self._leader_call(
            lambda f: self._store.checkpoints.record_precommits(fence=f, precommits=precommits)
        )
        by_checkpoint = {(r.pipeline_id, r.checkpoint_id): r for r in records}
        return [by_checkpoint[(p.pipeline_id, p.checkpoint_id)] for p in precommits]

    def mark_committed(
        self, pipeline_id: PipelineId, checkpoint_id: CheckpointId
    ) -> CheckpointRecord:
        """Mark a COMPLETE checkpoint COMMITTED after the leader committed every handle."""
        return self._leader_call(
            lambda f: self._store.checkpoints.mark_committed(
                fence=f, pipeline_id=pipeline_id, checkpoint_id=checkpoint_id
            )
        )

    def abort_checkpoint(
        self, pipeline_id: PipelineId, checkpoint_id: CheckpointId, reason: str
    ) -> list[CheckpointId]:
        """Abort a TRIGGERED checkpoint and the later in-flight ones of its pipeline."""
        return self._leader_call(
            lambda f: self._store.checkpoints.abort_checkpoint(
                fence=f, pipeline_id=pipeline_id, checkpoint_id=checkpoint_id, reason=reason
            )
        )

    def abort_timed_out(self) -> list[tuple[PipelineId, CheckpointId]]:
        """Abort checkpoints older than their pipeline's timeout. Leader-only."""
        return self._leader_call(lambda f: self._store.checkpoints.abort_timed_out(fence=f))

    def handles_aborted(
        self, pipeline_id: PipelineId, checkpoint_id: CheckpointId, task_id: TaskId
    ) -> None:
        """Record that a task's transactions of an ABORTED checkpoint were aborted."""
        self._leader_call(
            lambda f: self._store.checkpoints.mark_handles_aborted(
                fence=f, pipeline_id=pipeline_id, checkpoint_id=checkpoint_id, task_id=task_id
            )
        )

    def recover(self) -> RecoveryPlan:
        """A new leader's first step: abort in-flight checkpoints, then list what to
        commit again (oldest first) and what to abort. Leader-only."""
        aborted = self._leader_call(
            lambda f: self._store.checkpoints.abort_in_flight(fence=f, reason="leader changed")
        )
        return RecoveryPlan(
            aborted=tuple(aborted),
            to_commit=tuple(commit_order(self._store.checkpoints.list_pending_commits())),
            to_abort=tuple(self._store.checkpoints.list_lingering_transactions()),
        )

    def restore_state(self, task_id: TaskId) -> RestoreState:
        """What a (re)assigned task needs before it reads a record."""
        return self._store.checkpoints.restore_state(task_id=task_id)
