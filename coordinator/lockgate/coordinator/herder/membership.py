"""Executor membership and task assignment: register, heartbeat, deregister, liveness by
the database's clock, what each executor must run, and the rebalance of the work loop.

Rules written here (the api only converts):
- A heartbeat from an executor that has seen a newer leader epoch ends this replica's
  term (NotLeader); one whose session expired must register again (NotFound
  SESSION_EXPIRED); one with an older generation is a zombie (`StaleTokenError`).
  Heartbeats that arrive while one is written share the next write (`GroupCommit`), each
  session still checked on its own.
- A task report about an old assignment (other executor, other task generation) is
  ignored: the heartbeat's answer tells the executor its new assignment.
- Tasks of STOPPED pipelines are released: neither assigned nor sent to an executor.
- A dead executor's tasks move only after its session timeout plus the reassignment
  delay (`domain/assignment.py`), so an executor that pauses briefly keeps them.
- Time no leader could record heartbeats (a failover, this leader cut from its database:
  the lease keeper's `leader_gap`) is not an executor's silence: a session alive when the
  gap began gets a full session timeout from the start of this term.
- A changed answer reads from SQL only the tasks the executor does not hold yet
  (`SentAssignments`): those of the answer this term last sent its session, which it
  presents the version of, still assigned alike, are sent again as they were.
- A heartbeat reads its executor's tasks only when the assignment stamp moved since it
  last read them (`AssignedTasks`): the database's triggers bump it with every change of a
  task or a pipeline an answer or a state report is checked against, so an unchanged
  cluster costs a heartbeat one row, whatever the number of its executor's tasks.
- The rebalance plans only when its inputs changed since the last plan: the term, the
  executors (id, generation, liveness) or the pipelines' fingerprint
  (`PipelinesFingerprint`); and every `FULL_REBALANCE_EVERY_S` whatever they say. A new
  term always plans (a new leader, or this one after losing the lead, starts afresh).
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from lockgate.common.errors import FencingToken, StaleTokenError
from lockgate.common.group_commit import GroupCommit
from lockgate.common.model.ids import ExecutorId, Generation, PipelineId, TaskId
from lockgate.coordinator.domain.assignment import (
    AssignmentPlan,
    ExecutorLiveness,
    counted_heartbeat_ms,
    executor_liveness,
    liveness_changes_at_ms,
    plan_assignment,
)
from lockgate.coordinator.domain.checkpoints import RestoreState
from lockgate.coordinator.domain.errors import (
    IllegalTransition,
    NotFound,
    NotLeader,
    StaleGeneration,
)
from lockgate.coordinator.domain.lease import Fence
from lockgate.coordinator.domain.membership import (
    AssignedTask,
    AssignmentKey,
    ExecutorRecord,
    assignment_key,
    assignment_version,
)
from lockgate.coordinator.domain.pipelines import (
    PartitionOffset,
    PipelineRecord,
    PipelinesFingerprint,
    TaskRecord,
)
from lockgate.coordinator.domain.progress import AbortKind
from lockgate.coordinator.domain.states import TargetState, TaskState
from lockgate.coordinator.herder.lease_keeper import LeaseKeeper
from lockgate.coordinator.herder.outcomes import CheckpointOutcomes
from lockgate.coordinator.herder.pipelines import all_pipelines, restored_checkpoint
from lockgate.coordinator.herder.settings import CoordinatorSettings
from lockgate.coordinator.store.sql_store import ClusterView, SqlStore

_LOG = logging.getLogger(__name__)

#: At most this many executors' heartbeats share one write transaction, so the lease's
#: renewal never waits long behind one (as `REPORT_CALLS_PER_TRANSACTION`).
HEARTBEATS_PER_TRANSACTION = 32

#: The rebalance plans at least this often (s) even when nothing it reads seems changed: a
#: safety net under the fingerprint (a change it cannot see, e.g. a clock stepping back).
FULL_REBALANCE_EVERY_S = 5.0


@dataclass(frozen=True)
class HeartbeatTaskReport:
    """One task status an executor reported in a heartbeat."""

    task_id: TaskId
    task_generation: Generation
    state: TaskState
    error: str | None


@dataclass(frozen=True)
class TaskAssignment:
    """One task an executor must run, with what it must finish before its first batch."""

    task: TaskRecord
    pipeline: PipelineRecord
    restore: RestoreState
    restored_checkpoint_id: int
    """The COMPLETE checkpoint the pipeline's offsets come from; 0 after a reset."""


@dataclass(frozen=True)
class _Sent:
    """The last answer with tasks sent to one executor session in one term."""

    generation: Generation
    fence: Fence
    version: int
    tasks: Mapping[AssignmentKey, TaskAssignment]


class SentAssignments:
    """The last assignment this leader sent each executor session, by task.

    An executor reads a task's spec, partitions and restore state only when it starts the
    task, and starts one only when it does not run it at that generation yet
    (`executor/runtime/tasks.py`, `TaskBoard.apply`; a config change or a move gives a new
    generation). So when an executor presents the version of the answer this term last
    sent its session, every task of it still assigned alike is running there, and its entry
    is sent again as it was, read from SQL only once: a changed answer costs SQL reads for
    what changed, not for every task of the executor. Any doubt reads everything afresh:
    another session or term, or another version (that answer was lost, or another leader's
    is held).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sent: dict[ExecutorId, _Sent] = {}

    def held(
        self, executor: ExecutorRecord, fence: Fence, known_version: int
    ) -> Mapping[AssignmentKey, TaskAssignment]:
        """The entries `executor` holds if it presents the version last sent to it; else none."""
        with self._lock:
            sent = self._sent.get(executor.executor_id)
        if (
            sent is None
            or sent.generation != executor.generation
            or sent.fence != fence
            or sent.version != known_version
        ):
            return {}
        return sent.tasks

    def record(
        self,
        executor: ExecutorRecord,
        fence: Fence,
        version: int,
        tasks: Mapping[AssignmentKey, TaskAssignment],
    ) -> None:
        """Remember the answer just built for `executor`'s session."""
        with self._lock:
            self._sent[executor.executor_id] = _Sent(executor.generation, fence, version, tasks)

    def forget(self, executor_id: ExecutorId) -> None:
        """The executor left: nothing of its answers is held any more."""
        with self._lock:
            self._sent.pop(executor_id, None)


@dataclass(frozen=True)
class _Assigned:
    """An executor's tasks as read at one assignment stamp, with what a heartbeat derives
    from them."""

    stamp: int
    by_id: Mapping[TaskId, TaskRecord]
    """Every task assigned to the executor, by id (what its state reports are checked
    against)."""
    kept: Sequence[AssignedTask]
    """Those not of STOPPED pipelines (released: never sent)."""
    version: int
    """`assignment_version` of `kept`."""

    @classmethod
    def read_at(cls, stamp: int, tasks: Sequence[AssignedTask]) -> _Assigned:
        """`tasks`, as read at `stamp`, with what a heartbeat derives from them."""
        kept = [a for a in tasks if a.target_state is not TargetState.STOPPED]
        return cls(
            stamp=stamp,
            by_id={a.task.task_id: a.task for a in tasks},
            kept=kept,
            version=assignment_version(kept),
        )


class AssignedTasks:
    """Each executor's tasks as last read, by the assignment stamp they were read at
    (`PipelineStore.list_assigned_since`): a heartbeat reads them again only when the stamp
    moved, i.e. when some task or pipeline changed, not on every beat (issue 14: at 400
    tasks an executor, a tenth of the leader went into reading them again unchanged)."""

    def __init__(self, store: SqlStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._read: dict[ExecutorId, _Assigned] = {}

    def of(self, executor_id: ExecutorId) -> _Assigned:
        """The executor's tasks now: as last read if the stamp did not move, else read."""
        with self._lock:
            known = self._read.get(executor_id)
        stamp, fresh = self._store.pipelines.list_assigned_since(
            executor_id=executor_id, stamp=known.stamp if known else None
        )
        if fresh is None:
            assert known is not None  # the stamp it was read at is the one it still is
            return known
        assigned = _Assigned.read_at(stamp, fresh)
        with self._lock:
            latest = self._read.get(executor_id)
            if latest is None or latest.stamp <= stamp:
                self._read[executor_id] = assigned
        return assigned

    def forget(self, executor_id: ExecutorId) -> None:
        """The executor left: its tasks are read afresh if it comes back."""
        with self._lock:
            self._read.pop(executor_id, None)


@dataclass(frozen=True)
class ExecutorAssignment:
    """The leader's answer to a registration or a heartbeat."""

    executor: ExecutorRecord
    fence: Fence
    """The term that answered (the executor remembers the highest epoch it saw)."""
    tasks: tuple[TaskAssignment, ...]
    """Every task it must run; empty when `unchanged`."""
    version: int
    """The assignment's version (`domain/membership.py`)."""
    unchanged: bool = False
    """The executor holds this version already: `tasks` is left empty."""


@dataclass(frozen=True)
class ExecutorView:
    """An executor with its liveness as judged now by the database's clock."""

    record: ExecutorRecord
    liveness: ExecutorLiveness
    tasks: tuple[TaskId, ...]
    """Its tasks, by pipeline and index."""


@dataclass(frozen=True)
class _RebalanceInputs:
    """What a rebalance plans from, in brief: equal inputs give an equal plan."""

    fence: Fence
    pipelines: PipelinesFingerprint
    executors: tuple[tuple[ExecutorId, Generation, ExecutorLiveness], ...]


@dataclass(frozen=True)
class RebalanceResult:
    """The assignment decided and the tasks whose assignment changed (to be told)."""

    plan: AssignmentPlan
    changed: tuple[TaskRecord, ...]
    #: The executors that gained or lost a task (to be told: `assignment_notices.py`).
    told: frozenset[ExecutorId] = frozenset()


class Membership:
    """Executor sessions and the assignment of tasks to them (leader-only writes)."""

    def __init__(
        self,
        *,
        store: SqlStore,
        settings: CoordinatorSettings,
        lease: LeaseKeeper,
        wake: Callable[[], None],
        outcomes: CheckpointOutcomes | None = None,
    ) -> None:
        self._store = store
        self._settings = settings
        self._lease = lease
        self._wake = wake
        self._outcomes = outcomes or CheckpointOutcomes()
        # Heartbeats that arrive while one is written share the next write (group commit):
        # at scale each executor's heartbeat otherwise waited its own turn at writing.
        self._heartbeats: GroupCommit[tuple[ExecutorId, Generation], ExecutorRecord] = GroupCommit(
            write_batch=self._write_heartbeats,
            max_batch=HEARTBEATS_PER_TRANSACTION,
        )
        self._sent = SentAssignments()
        self._assigned = AssignedTasks(store)
        # What the last plan was made from, the plan, and when it was made (work loop only).
        self._planned: tuple[_RebalanceInputs, RebalanceResult, float] | None = None

    # ------------------------------------------------------------------ liveness

    def _counted_heartbeat_ms(self, executor: ExecutorRecord) -> int:
        """Its last heartbeat, or the start of this term if the gap before it (a failover,
        this leader cut from its database) would otherwise count as its silence."""
        return counted_heartbeat_ms(
            last_heartbeat_ms=executor.last_heartbeat_ms,
            session_timeout_ms=self._settings.session_timeout_ms,
            gap=self._lease.leader_gap,
        )

    def liveness(self, executor: ExecutorRecord, now_ms: int) -> ExecutorLiveness:
        """ALIVE, EXPIRED or DEAD by the database's clock `now_ms`; time no leader could
        record heartbeats does not count (`domain.assignment.counted_heartbeat_ms`)."""
        return executor_liveness(
            last_heartbeat_ms=self._counted_heartbeat_ms(executor),
            now_ms=now_ms,
            session_timeout_ms=self._settings.session_timeout_ms,
            reassign_delay_ms=self._settings.reassign_delay_ms,
        )

    def next_liveness_change_at_ms(self, view: ClusterView) -> int | None:
        """The database time at which the first executor's liveness changes if it sends no
        heartbeat (its session expires, its grace period ends): the pass that sees it moves
        its tasks or stops picking it, so the loop sleeps no longer. None: all are DEAD."""
        return min(
            (
                at
                for e in view.executors
                if (
                    at := liveness_changes_at_ms(
                        last_heartbeat_ms=self._counted_heartbeat_ms(e),
                        now_ms=view.now_ms,
                        session_timeout_ms=self._settings.session_timeout_ms,
                        reassign_delay_ms=self._settings.reassign_delay_ms,
                    )
                )
                is not None
            ),
            default=None,
        )

    def is_alive(self, executor: ExecutorRecord, now_ms: int) -> bool:
        """Whether an executor heartbeated within the session timeout (database clock)."""
        return self.liveness(executor, now_ms) is ExecutorLiveness.ALIVE

    def alive_executors(self) -> dict[ExecutorId, ExecutorRecord]:
        """Every executor alive now, by id."""
        executors, now_ms = self._store.executors.list_executors()
        return self.alive_among(executors, now_ms)

    def alive_among(
        self, executors: Iterable[ExecutorRecord], now_ms: int
    ) -> dict[ExecutorId, ExecutorRecord]:
        """Those of `executors` alive at `now_ms` (the database's clock, read with them),
        by id."""
        return {e.executor_id: e for e in executors if self.is_alive(e, now_ms)}

    def cluster_view(self) -> ClusterView:
        """The pass's view (`ClusterView`): one read transaction of a few small statements
        however large the cluster."""
        return self._store.read_cluster()

    def list_executors(self) -> list[ExecutorView]:
        """Every registered executor, its liveness by the database's clock, its tasks.
        Any replica may call it."""
        records, now_ms = self._store.executors.list_executors()
        tasks: dict[ExecutorId, list[TaskId]] = defaultdict(list)
        for task in self._store.pipelines.list_tasks():
            if task.executor_id is not None:
                tasks[task.executor_id].append(task.task_id)
        return [
            ExecutorView(
                record=r,
                liveness=self.liveness(r, now_ms),
                tasks=tuple(tasks.get(r.executor_id, ())),
            )
            for r in records
        ]

    # ------------------------------------------------------------------ sessions

    def register_executor(self, *, executor_id: ExecutorId, address: str) -> ExecutorAssignment:
        """Start a new session (generation + 1) for an executor and give it its tasks.
        Leader-only."""
        record = self._lease.leader_call(
            lambda f: self._store.executors.register_executor(
                fence=f, executor_id=executor_id, address=address
            )
        )
        self._wake()
        return self._answer(record, self._lease.require_fence(), self._assigned.of(executor_id))

    def heartbeat(
        self,
        *,
        executor_id: ExecutorId,
        generation: Generation,
        reports: Sequence[HeartbeatTaskReport],
        highest_leader_epoch_seen: int = 0,
        known_assignment_version: int = 0,
    ) -> ExecutorAssignment:
        """Keep an executor's session alive, record its tasks' states, and return the tasks
        it must run, or only that they are unchanged since `known_assignment_version`.
        Leader-only. Reads the executor's own tasks only.

        NotLeader if the executor has seen a newer leader; NotFound if the session expired
        (the executor must register again); StaleTokenError if a newer registration exists.
        """
        fence = self._lease.require_fence()
        if highest_leader_epoch_seen > fence.leader_epoch:
            # The executor has seen a newer leader: this replica's term is over (its lease
            # keeper notices on its next attempt).
            raise NotLeader(leader_address=None)
        try:
            current = self._heartbeats.submit((executor_id, generation))
        except StaleGeneration as exc:
            raise self._stale_executor(exc, executor_id, generation) from None
        assigned = self._assigned.of(executor_id)
        for report in reports:
            self._apply_task_report(executor_id, generation, report, assigned.by_id)
        return self._answer(current, fence, assigned, known_version=known_assignment_version)

    def _answer(
        self,
        executor: ExecutorRecord,
        fence: Fence,
        assigned: _Assigned,
        *,
        known_version: int = 0,
    ) -> ExecutorAssignment:
        """The assignment of `executor` (tasks of STOPPED pipelines left out: released), in
        full unless its version is `known_version`."""
        version = assigned.version
        if version == known_version:
            return ExecutorAssignment(
                executor=executor, fence=fence, tasks=(), version=version, unchanged=True
            )
        tasks = self._full(assigned.kept, self._sent.held(executor, fence, known_version))
        self._sent.record(executor, fence, version, tasks)
        return ExecutorAssignment(
            executor=executor, fence=fence, tasks=tuple(tasks.values()), version=version
        )

    def _write_heartbeats(
        self, sessions: Sequence[tuple[ExecutorId, Generation]]
    ) -> list[ExecutorRecord]:
        """The heartbeats that arrived together, in one write (`heartbeat_executors`)."""
        return self._lease.leader_call(
            lambda f: self._store.executors.heartbeat_executors(
                fence=f, sessions=sessions, check=self._check_session
            )
        )

    def _check_session(self, current: ExecutorRecord, generation: Generation, now_ms: int) -> None:
        """Refuse the heartbeat of a session that expired (NotFound: register again)."""
        if current.generation == generation and not self.is_alive(current, now_ms):
            raise NotFound(
                f"the session of executor {current.executor_id!r} (generation {generation}) "
                f"expired after {self._settings.session_timeout_ms} ms without a heartbeat; "
                "register again",
                resource_type="executor",
                resource_name=current.executor_id,
                reason="SESSION_EXPIRED",
            )

    def _apply_task_report(
        self,
        executor_id: ExecutorId,
        generation: Generation,
        report: HeartbeatTaskReport,
        tasks: Mapping[TaskId, TaskRecord],
    ) -> None:
        task = tasks.get(report.task_id)
        if (
            task is None
            or task.executor_id != executor_id
            or task.generation != report.task_generation
        ):
            return  # a report about an old assignment: the response tells the new one
        if task.state is report.state and task.state_executor_generation == generation:
            return
        try:
            self._lease.leader_call(
                lambda f: self._store.pipelines.report_task_state(
                    fence=f,
                    task_id=report.task_id,
                    task_generation=report.task_generation,
                    executor_id=executor_id,
                    executor_generation=generation,
                    state=report.state,
                    error=report.error,
                )
            )
        except (StaleGeneration, IllegalTransition, NotFound) as exc:
            _LOG.info("task %s report ignored: %s", report.task_id, exc)
            return
        # A task that restored re-committed and aborted handles of its restore state, but
        # that state was read when the assignment was sent, not now: what it did is not
        # recorded here. The commit and abort loops call the executors and record only
        # what they were answered (a COMMITTED checkpoint whose handles were never
        # committed would be lost for good when its slot is reused).
        self._wake()

    def deregister_executor(self, *, executor_id: ExecutorId, generation: Generation) -> None:
        """Remove an executor; its tasks move on the next pass. Leader-only."""
        try:
            self._lease.leader_call(
                lambda f: self._store.executors.deregister_executor(
                    fence=f, executor_id=executor_id, generation=generation
                )
            )
        except StaleGeneration as exc:
            raise self._stale_executor(exc, executor_id, generation) from None
        self._sent.forget(executor_id)
        self._assigned.forget(executor_id)
        self._wake()

    def _stale_executor(
        self, exc: StaleGeneration, executor_id: ExecutorId, generation: Generation
    ) -> StaleTokenError:
        """The refusal of a zombie's call, naming the generation that is current now."""
        current = self._store.executors.get_executor(executor_id=executor_id)
        return StaleTokenError(
            message=exc.message,
            token=FencingToken.EXECUTOR_GENERATION,
            subject=executor_id,
            presented=generation,
            current=int(current.generation),
        )

    # ------------------------------------------------------------------ assignment

    def _full(
        self,
        assigned: Sequence[AssignedTask],
        held: Mapping[AssignmentKey, TaskAssignment],
    ) -> dict[AssignmentKey, TaskAssignment]:
        """Each task with its pipeline and restore state, by key, in `assigned`'s order:
        those in `held` as they were sent, the others read in a few queries for them all,
        however many tasks and pipelines (tasks or pipelines deleted since `assigned` was
        read are left out: the next heartbeat's answer says so)."""
        keyed = {assignment_key(item): item for item in assigned}
        fresh = [item for key, item in keyed.items() if key not in held]
        pipelines: Mapping[PipelineId, PipelineRecord] = {}
        offsets: Mapping[PipelineId, Sequence[PartitionOffset]] = {}
        restores: Mapping[TaskId, RestoreState] = {}
        if fresh:
            pipeline_ids = sorted({a.task.pipeline_id for a in fresh})
            pipelines = self._store.pipelines.get_pipelines(pipeline_ids=pipeline_ids)
            offsets = self._store.offsets.get_offsets_of(pipeline_ids=pipeline_ids)
            restores = self._store.checkpoints.restore_states(
                task_ids=[a.task.task_id for a in fresh]
            )
        result: dict[AssignmentKey, TaskAssignment] = {}
        for key, item in keyed.items():
            task = item.task
            if key in held:
                result[key] = replace(held[key], task=task)
            elif task.pipeline_id in pipelines and task.task_id in restores:
                result[key] = TaskAssignment(
                    task=task,
                    pipeline=pipelines[task.pipeline_id],
                    restore=restores[task.task_id],
                    restored_checkpoint_id=restored_checkpoint(offsets[task.pipeline_id]),
                )
        return result

    def rebalance(self, fence: Fence, view: ClusterView | None = None) -> RebalanceResult:
        """Move tasks of executors dead past the reassignment delay, spread new tasks, and
        release the tasks of STOPPED pipelines; writes only when the assignment changed,
        and plans only when what it plans from changed (module docstring; else the last
        plan, nothing changed). Leader-only (`fence`: the pass that decides it; `view`:
        its reads, made now if not given)."""
        view = view or self.cluster_view()
        executors, now_ms = view.executors, view.now_ms
        inputs = _RebalanceInputs(
            fence=fence,
            pipelines=view.fingerprint,
            executors=tuple(
                (e.executor_id, e.generation, self.liveness(e, now_ms)) for e in executors
            ),
        )
        if self._planned is not None:
            planned_from, planned, planned_at = self._planned
            fresh = self._lease.monotonic() - planned_at < FULL_REBALANCE_EVERY_S
            if planned_from == inputs and fresh:
                return RebalanceResult(plan=planned.plan, changed=())
        result = self._plan(fence, executors, now_ms)
        self._planned = (inputs, result, self._lease.monotonic())
        return result

    def _plan(
        self, fence: Fence, executors: Sequence[ExecutorRecord], now_ms: int
    ) -> RebalanceResult:
        pipelines = {p.pipeline_id: p for p in all_pipelines(self._store)}
        tasks = self._store.pipelines.list_tasks()
        wanted = [
            t.task_id
            for t in tasks
            if t.pipeline_id in pipelines
            and pipelines[t.pipeline_id].target_state is not TargetState.STOPPED
        ]
        current: dict[ExecutorId, set[TaskId]] = defaultdict(set)
        for t in tasks:
            if t.executor_id is not None:
                current[t.executor_id].add(t.task_id)
        plan = plan_assignment(
            current=current,
            last_heartbeats_ms={e.executor_id: self._counted_heartbeat_ms(e) for e in executors},
            all_tasks=wanted,
            now_ms=now_ms,
            session_timeout_ms=self._settings.session_timeout_ms,
            reassign_delay_ms=self._settings.reassign_delay_ms,
        )
        new = {e: frozenset(ts) for e, ts in plan.assignment.items() if ts}
        old = {e: frozenset(ts) for e, ts in current.items() if ts}
        if new == old:
            return RebalanceResult(plan=plan, changed=())
        result = self._lease.leader_call(
            lambda f: self._store.pipelines.apply_assignment(fence=f, assignment=new), term=fence
        )
        self._outcomes.aborted(result.aborted, AbortKind.TASK_REASSIGNED)
        changed = list(result.tasks)
        _LOG.info(
            "rebalanced: %d tasks changed executor (%s)",
            len(changed),
            ", ".join(f"{t.task_id}->{t.executor_id or '-'}" for t in changed[:10]),
        )
        told = frozenset(e for e in new.keys() | old.keys() if new.get(e) != old.get(e))
        return RebalanceResult(plan=plan, changed=tuple(changed), told=told)


def pick_executor(
    preferred: ExecutorId | None, alive: Mapping[ExecutorId, ExecutorRecord]
) -> ExecutorRecord | None:
    """The executor to send a commit/abort to: the task's own if alive, else any alive
    one (any executor may finish any handle), in id order for determinism."""
    if preferred is not None and preferred in alive:
        return alive[preferred]
    for executor_id in sorted(alive):
        return alive[executor_id]
    return None
