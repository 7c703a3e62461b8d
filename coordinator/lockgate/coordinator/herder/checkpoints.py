"""The checkpoint driver (Flink's CheckpointCoordinator): the leader's side of the
two-phase commit (DESIGN.md) -- trigger, commit, abort, timeouts, and a new leader's
recovery. What executors report back (pre-commits, failures) is `reports.py`.

The store applies each decision inside a fenced transaction; this module decides when to
ask for it and calls the executors (through `herder/executors.py`, which builds the protos),
on the call pool (`call_pool.py`): one job per pipeline and kind, so an executor that does
not answer holds up only its own pipelines' calls, each for at most the call's deadline.

Rules and known races:
- A pipeline whose trigger or abort job is still out is not triggered (a late abort
  re-initialises a slot's ids); a job reads its pipeline's pending commits or lingering
  aborts afresh, never a snapshot a previous job has acted on since.
- Checkpoint N+1 is triggered only when no checkpoint of the pipeline is TRIGGERED: its
  start offsets are then N's end offsets, known in SQL (N is COMPLETE), while N may still
  be committing (the overlap the design allows). How many may be in flight at once is
  `DEFAULT_MAX_IN_FLIGHT` (domain/checkpoints.py), stated there only.
- A pipeline is triggered only when every task runs on an alive executor that reported it
  RUNNING, and when it has no un-acked aborts. A pass reads only the pipelines whose
  interval has passed, or that are behind their source (their newest checkpoint read to
  its cap: the next need not wait for the interval; `trigger_schedule.py`).
- Aborting a handle whose producer id is unknown re-initialises the ids of its slot
  that have a transaction open, which would also abort a later transaction on them. The
  slot is reusable once its checkpoint is ABORTED, so the loop never triggers a pipeline
  that still has un-acked aborts, and an executor answers an abort only once no batch of
  that checkpoint runs on it any more: the abort, and the last producer a batch of the
  checkpoint opens, land before the slot is reused. An entry whose id a later checkpoint
  of the same task generation took anyway is not sent (that checkpoint's
  init_transactions aborted it).
- A batch on an executor whose session expired (paused, cut off) is not waited for: it may
  open producers long after its task moved. Ids carry the task generation
  (domain/transactional_ids.py) and a move or restart bumps it, so such a late producer
  can only touch its own generation's ids, never a later checkpoint's.
- Commits are sent oldest first per pipeline and retried (with backoff) until acked;
  only then is the checkpoint marked COMMITTED. With no executor alive the leader commits
  the handles itself (`leader_commits.py`). An executor's DATA_LOSS (the broker aborted a
  handle, `transaction.timeout.ms` passed) is not retried: the leader tries each handle
  itself, and if any is lost the checkpoint goes DATA_LOST and its pipeline FAILED
  (`domain/data_loss.py`) until an operator moves past it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence

import grpc
from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

from lockgate.common.failpoints import Failpoint, Failpoints
from lockgate.common.group_commit import GroupCommit
from lockgate.common.metrics import COMMIT_RETRIES, Instruments
from lockgate.common.model.handles import TransactionHandle
from lockgate.common.model.ids import CheckpointId, ExecutorId, PipelineId, TaskId
from lockgate.common.model.pipeline_spec import KafkaSink
from lockgate.coordinator.domain.checkpoints import (
    CheckpointRecord,
    LingeringTransaction,
    PendingCommit,
    RecoveryPlan,
    checkpoints_allow_trigger,
    commit_order,
    trigger_due,
)
from lockgate.coordinator.domain.errors import FailedPrecondition, IllegalTransition, NotFound
from lockgate.coordinator.domain.history import DEFAULT_CHECKPOINT_HISTORY
from lockgate.coordinator.domain.lease import Fence
from lockgate.coordinator.domain.membership import ExecutorRecord
from lockgate.coordinator.domain.pipelines import PipelineRecord
from lockgate.coordinator.domain.precommits import CheckpointKey
from lockgate.coordinator.domain.progress import AbortKind
from lockgate.coordinator.domain.transaction_timeout import near_timeout_warnings
from lockgate.coordinator.herder.awaited_reports import AwaitedReports
from lockgate.coordinator.herder.call_pool import CallPool
from lockgate.coordinator.herder.executors import (
    ExecutorCallFailed,
    ExecutorClient,
    LeaderEpochRefused,
    PipelineTrigger,
    TriggerResult,
    trigger_calls,
    trigger_failure,
)
from lockgate.coordinator.herder.leader_commits import (
    CommitNotAcked,
    abort_from_leader,
    commit_from_leader,
)
from lockgate.coordinator.herder.lease_keeper import LeaseKeeper
from lockgate.coordinator.herder.membership import Membership, pick_executor
from lockgate.coordinator.herder.outcomes import CheckpointOutcomes
from lockgate.coordinator.herder.traces import EXECUTOR_ID, CheckpointTraces, trace_context
from lockgate.coordinator.herder.trigger_schedule import TriggerSchedule
from lockgate.coordinator.store.sql_store import ClusterView, SqlStore
from lockgate.coordinator.store.trigger_queries import TriggerInputs

_LOG = logging.getLogger(__name__)
#: Pipelines triggered, or checkpoints marked COMMITTED, per write transaction: one fsync
#: for many, and short enough that the lease's renewal, which waits for the replica's
#: current write, never waits long.
PIPELINES_PER_TRANSACTION = 64


class CheckpointDriver:
    """Drives every pipeline's checkpoints; every method that writes is leader-only."""

    def __init__(
        self,
        *,
        store: SqlStore,
        lease: LeaseKeeper,
        membership: Membership,
        executors: ExecutorClient,
        calls: CallPool,
        failpoints: Failpoints,
        wake: Callable[[], None],
        duty_lock: threading.Lock,
        outcomes: CheckpointOutcomes | None = None,
        instruments: Instruments | None = None,
        keep_history: int = DEFAULT_CHECKPOINT_HISTORY,
        traces: CheckpointTraces | None = None,
    ) -> None:
        self._store = store
        self._outcomes = outcomes or CheckpointOutcomes()
        self._instruments = instruments or Instruments.disabled()
        self._lease = lease
        self._membership = membership
        self._executors = executors
        self._calls = calls
        # LOCKGATE_FAILPOINTS=after_complete_before_commit[@N] makes this process exit hard
        # between a COMPLETE checkpoint and its commit calls (fault tests only).
        self._failpoints = failpoints
        self._wake = wake
        # One leader duty at a time: the work loop's pass, or a servicer thread finishing a
        # deleted pipeline's checkpoints (they share the retry schedule).
        self._duty_lock = duty_lock
        self._backoff = calls.backoff
        # Final checkpoints kept per pipeline; pruned as each one becomes final.
        self.keep_history = keep_history
        self.traces = traces or CheckpointTraces()
        self.schedule = TriggerSchedule(store=store, lease=lease)
        self.awaited = AwaitedReports()  # whose reports each trigger sent waits for
        self._marks: GroupCommit[CheckpointKey, CheckpointRecord] = GroupCommit(
            write_batch=self._write_marks,
            max_batch=PIPELINES_PER_TRANSACTION,
        )

    # ------------------------------------------------------------------ aborts

    def abort_checkpoint(
        self,
        pipeline_id: PipelineId,
        checkpoint_id: CheckpointId,
        reason: str,
        *,
        term: Fence | None = None,
    ) -> list[CheckpointId]:
        """Abort a TRIGGERED checkpoint and the later in-flight ones of its pipeline.
        Leader-only (`term`: the pass that decided it, if any)."""
        aborted = self._lease.leader_call(
            lambda f: self._store.checkpoints.abort_checkpoint(
                fence=f, pipeline_id=pipeline_id, checkpoint_id=checkpoint_id, reason=reason
            ),
            term=term,
        )
        self._outcomes.aborted([(pipeline_id, c) for c in aborted], reason)
        return aborted

    def abort_triggered(self, pipeline_id: PipelineId, *, reason: str) -> None:
        """Abort the pipeline's TRIGGERED checkpoints, chosen inside the aborting transaction:
        one that turns COMPLETE between a read and the abort is committed, not refused as
        an illegal COMPLETE -> ABORTED (Stop and Delete raced a report before). Leader-only."""
        self._lease.leader_call(
            lambda f: self._store.checkpoints.abort_triggered(
                fence=f, pipeline_id=pipeline_id, reason=reason
            )
        )

    def abort_timed_out(self, fence: Fence) -> bool:
        """Abort checkpoints older than their pipeline's timeout; whether it aborted any.
        Leader-only."""
        aborted = self._lease.leader_call(
            lambda f: self._store.checkpoints.abort_timed_out(fence=f)
        )
        self._outcomes.aborted(aborted, AbortKind.TIMEOUT)
        for pipeline_id, checkpoint_id in aborted:
            _LOG.warning("checkpoint %s of %s timed out: aborted", checkpoint_id, pipeline_id)
        return bool(aborted)

    def send_aborts(
        self,
        fence: Fence,
        *,
        only: PipelineId | None = None,
        wait: bool = True,
        known: frozenset[PipelineId] | None = None,
    ) -> None:
        """Abort the transactions of checkpoints that never became COMPLETE, then record
        it so they leave the lingering list: one job per pipeline on the call pool, which
        reads its lingering transactions afresh (so it never re-sends an abort a previous
        job acked, which could hit a slot reused since). Leader-only; `wait`: until done;
        `known`: the pipelines with lingering transactions, as the pass's view read them
        (None: read them now)."""
        lingering = (
            known
            if known is not None
            else self._store.checkpoints.list_lingering_pipelines(pipeline_id=only)
        )
        self._per_pipeline("abort", lingering, fence, self._abort_pipeline, wait)

    def _per_pipeline(
        self,
        kind: str,
        pipeline_ids: Iterable[PipelineId],
        fence: Fence,
        job: Callable[[Fence, PipelineId], None],
        wait: bool,
    ) -> None:
        """One `job` per pipeline on the call pool, keyed by `kind` and pipeline (a job of
        that key still running is not started again). A job's end wakes the loop only on an
        ack (`self._wake`): a retry not due yet, or backing off, would spin the loop while no
        executor can take it; the pass when it is due retries it."""
        for pipeline_id in sorted(set(pipeline_ids)):
            self._calls.run(
                (kind, pipeline_id),
                lambda p=pipeline_id: job(fence, p),  # type: ignore[misc]
                wait=wait,
                wake=False,
            )

    def _abort_pipeline(self, fence: Fence, pipeline_id: PipelineId) -> None:
        lingering = self._store.checkpoints.list_lingering_transactions(pipeline_id=pipeline_id)
        if not lingering:
            return
        alive = self._membership.alive_executors()
        by_checkpoint: dict[CheckpointId, list[LingeringTransaction]] = defaultdict(list)
        for item in lingering:
            by_checkpoint[item.checkpoint_id].append(item)
        for checkpoint_id, items in sorted(by_checkpoint.items()):
            if self._backoff.attempt(
                ("abort", pipeline_id, checkpoint_id),
                lambda c=checkpoint_id, i=items: self._abort_one(  # type: ignore[misc]
                    fence, pipeline_id, c, i, alive
                ),
            ):
                self._wake()  # acked: the pipeline may trigger again

    def _abort_one(
        self,
        fence: Fence,
        pipeline_id: PipelineId,
        checkpoint_id: CheckpointId,
        items: Sequence[LingeringTransaction],
        alive: Mapping[ExecutorId, ExecutorRecord],
    ) -> bool:
        try:
            pipeline = self._store.pipelines.get_pipeline(pipeline_id=pipeline_id)
            checkpoint = self._store.checkpoints.get_checkpoint(
                pipeline_id=pipeline_id, checkpoint_id=checkpoint_id
            )
        except NotFound:
            return True  # deleted meanwhile
        owner = {t.task_id: t.executor_id for t in checkpoint.tasks}
        groups: dict[ExecutorId, list[LingeringTransaction]] = defaultdict(list)
        for item in items:
            executor = pick_executor(owner.get(item.task_id), alive)
            if executor is None:
                return False
            groups[executor.executor_id].append(item)
        acked: set[TaskId] = set()
        for executor_id, group in sorted(groups.items()):  # pick_executor picks from `alive`
            if not self._abort_on(fence, alive[executor_id], pipeline, checkpoint, group):
                break
            acked.update(item.task_id for item in group)
        if acked:  # what was acked leaves the lingering list, in one write
            self._lease.leader_call(
                lambda f: self._store.checkpoints.mark_handles_aborted(
                    fence=f,
                    pipeline_id=pipeline_id,
                    checkpoint_id=checkpoint_id,
                    task_ids=acked,
                    keep_history=self.keep_history,
                )
            )
        return len(acked) == len({item.task_id for item in items})

    def _abort_on(
        self,
        fence: Fence,
        executor: ExecutorRecord,
        pipeline: PipelineRecord,
        checkpoint: CheckpointRecord,
        group: Sequence[LingeringTransaction],
    ) -> bool:
        """Have `executor` abort these transactions of `checkpoint`; False if not acked."""
        with self.traces.step(
            "lockgate.checkpoint.abort_transactions",
            pipeline.pipeline_id,
            checkpoint.checkpoint_id,
            leader_epoch=int(fence.leader_epoch),
            attributes={EXECUTOR_ID: executor.executor_id},
        ) as span:
            try:
                self._executors.abort_checkpoint(
                    fence=fence,
                    executor=executor,
                    pipeline_name=pipeline.pipeline_id,
                    checkpoint_id=checkpoint.checkpoint_id,
                    transactions=[i for i in group if i.must_be_sent],
                    sink=pipeline.spec.sink,
                    reason=checkpoint.abort_reason or "aborted",
                )
            except LeaderEpochRefused:
                raise
            except ExecutorCallFailed as exc:
                _LOG.warning("abort not acked yet, will retry: %s", exc)
                span.set_status(Status(StatusCode.ERROR, str(exc)))
                return False
        return True

    # ------------------------------------------------------------------ commits

    def commit_pending(
        self,
        fence: Fence,
        *,
        only: PipelineId | None = None,
        wait: bool = True,
        known: frozenset[PipelineId] | None = None,
    ) -> None:
        """Commit every COMPLETE-not-COMMITTED checkpoint, oldest first per pipeline, until
        each is acked; then mark it COMMITTED (DESIGN.md step 4): one job per pipeline on
        the call pool, so a pipeline whose executor does not answer holds up no other.
        Leader-only; `wait`: until done; `known`: the pipelines with checkpoints to commit,
        as the pass's view read them (None: read them now)."""
        pending = (
            known
            if known is not None
            else self._store.checkpoints.list_pending_commit_pipelines(pipeline_id=only)
        )
        self._per_pipeline("commit", pending, fence, self._commit_pipeline, wait)

    def _commit_pipeline(self, fence: Fence, pipeline_id: PipelineId) -> None:
        """The pipeline's pending commits, read afresh, in creation order: N+1 waits for
        N's ack."""
        inputs = self._store.read_commit_inputs(pipeline_id)  # one read for all of it
        if inputs is None:
            return
        alive = self._membership.alive_among(inputs.executors, inputs.now_ms)
        sink = inputs.pipeline.spec.sink
        for commit in inputs.pending:
            done = self._backoff.attempt(
                ("commit", commit.pipeline_id, commit.checkpoint_id),
                lambda c=commit: self._commit_one(fence, c, alive, sink),  # type: ignore[misc]
            )
            if done is None:
                return
            if not done:
                self._instruments.add(COMMIT_RETRIES, 1, {"pipeline": commit.pipeline_id})
                self._warn_near_timeout(commit)
                return
            self._wake()  # COMMITTED: the pipeline may trigger again

    def _warn_near_timeout(self, commit: PendingCommit) -> None:
        """Log what status warns: a COMPLETE checkpoint still uncommitted past half of the
        sink's transaction timeout (the broker aborts it, losing its records, at the end)."""
        pipeline = self._store.pipelines.get_pipeline(pipeline_id=commit.pipeline_id)
        checkpoint = self._store.checkpoints.get_checkpoint(
            pipeline_id=commit.pipeline_id, checkpoint_id=commit.checkpoint_id
        )
        for warning in near_timeout_warnings(
            [checkpoint],
            transaction_timeout_ms=pipeline.spec.sink.transaction_timeout_ms,
            now_ms=self._store.db_now_ms(),
        ):
            _LOG.warning("pipeline %s: %s", commit.pipeline_id, warning)

    def _commit_one(
        self,
        fence: Fence,
        commit: PendingCommit,
        alive: Mapping[ExecutorId, ExecutorRecord],
        sink: KafkaSink,
    ) -> bool:
        groups: dict[ExecutorId, list[TransactionHandle]] = defaultdict(list)
        records: dict[ExecutorId, ExecutorRecord] = {}
        for task_handles in commit.handles:
            executor = pick_executor(task_handles.executor_id, alive)
            if executor is None:
                break
            records[executor.executor_id] = executor
            groups[executor.executor_id].extend(task_handles.handles)
        self._failpoints.reach(
            Failpoint.AFTER_COMPLETE_BEFORE_COMMIT,
            detail=f"checkpoint {commit.checkpoint_id} of {commit.pipeline_id} is COMPLETE",
        )
        if not alive:
            _LOG.warning(
                "checkpoint %s of %s is COMPLETE and no executor is alive: the leader"
                " commits its transactions itself",
                commit.checkpoint_id,
                commit.pipeline_id,
            )
            return self._commit_from_leader(commit, sink)
        with self.traces.step(
            "lockgate.checkpoint.commit",
            commit.pipeline_id,
            commit.checkpoint_id,
            leader_epoch=int(fence.leader_epoch),
        ) as span:
            # All of N's executors at once: one slow to answer delays no other's commit.
            answers = [
                self._executors.send_commit(
                    fence=fence,
                    executor=records[executor_id],
                    pipeline_name=commit.pipeline_id,
                    checkpoint_id=commit.checkpoint_id,
                    handles=handles,
                    sink=sink,
                )
                for executor_id, handles in sorted(groups.items())
            ]
            failures: list[ExecutorCallFailed] = []
            for answer in answers:
                try:
                    answer()
                except LeaderEpochRefused:
                    raise
                except ExecutorCallFailed as exc:
                    span.set_status(Status(StatusCode.ERROR, str(exc)))
                    failures.append(exc)
        lost = [f for f in failures if f.code == grpc.StatusCode.DATA_LOSS]
        if lost:
            # An executor stopped at a handle the broker aborted: find out, handle by
            # handle, which tasks' output is lost, and commit the others.
            _LOG.error("checkpoint %s of %s: %s", commit.checkpoint_id, commit.pipeline_id, lost[0])
            return self._commit_from_leader(commit, sink)
        if failures:
            _LOG.warning("commit not acked yet, will retry: %s", failures[0])
            return False
        self._mark_committed(commit)
        return True

    def _mark_committed(self, commit: PendingCommit) -> None:
        """Mark `commit` COMMITTED, in one write with others marked meanwhile (`GroupCommit`)."""
        self.committed([self._marks.submit((commit.pipeline_id, commit.checkpoint_id))])

    def committed(self, records: Iterable[CheckpointRecord]) -> None:
        """Checkpoints this leader just marked COMMITTED, here or in their last report's
        transaction (nothing to commit, `reports.py`): count, end the trace, log, once each."""
        for record in records:
            self._outcomes.committed(record)
            self.traces.committed(record.pipeline_id, record.checkpoint_id)
            _LOG.info("checkpoint %s of %s COMMITTED", record.checkpoint_id, record.pipeline_id)

    def _write_marks(self, keys: Sequence[CheckpointKey]) -> list[CheckpointRecord]:
        return self._lease.leader_call(
            lambda f: self._store.checkpoints.mark_committed(
                fence=f, keys=keys, keep_history=self.keep_history
            )
        )

    def _commit_from_leader(self, commit: PendingCommit, sink: KafkaSink) -> bool:
        """Commit every handle of `commit` from this process (`leader_commits.py`); record
        DATA_LOST if the broker lost any. False if Kafka did not answer (retry)."""
        try:
            outcome = commit_from_leader(commit, sink=sink)
        except CommitNotAcked as exc:
            _LOG.warning("commit not acked yet, will retry: %s", exc)
            return False
        if not outcome.lost:
            self._mark_committed(commit)
            return True
        error = "; ".join(f"task {t}: {why}" for t, why in sorted(outcome.lost.items()))
        later = [
            c
            for c in self._store.checkpoints.list_pending_commits(pipeline_id=commit.pipeline_id)
            if c.checkpoint_id > commit.checkpoint_id
        ]
        try:
            abort_from_leader(later, sink=sink)
        except CommitNotAcked as exc:
            _LOG.warning("abort after a data loss not acked yet, will retry: %s", exc)
            return False
        aborted = self._lease.leader_call(
            lambda f: self._store.data_loss.record_data_loss(
                fence=f,
                pipeline_id=commit.pipeline_id,
                checkpoint_id=commit.checkpoint_id,
                lost_tasks=frozenset(outcome.lost),
                error=error,
            )
        )
        self._outcomes.data_lost([(commit.pipeline_id, commit.checkpoint_id)])
        self._outcomes.data_lost([(commit.pipeline_id, c) for c in aborted])
        _LOG.error(
            "checkpoint %s of %s is DATA_LOST (the pipeline is FAILED; taken along: %s):"
            " %s. Move on with `lockgate pipeline restart %s --from-checkpoint %s`, which"
            " reads the lost ranges again",
            commit.checkpoint_id,
            commit.pipeline_id,
            aborted or "none",
            error,
            commit.pipeline_id,
            commit.checkpoint_id,
        )
        self._wake()
        return True

    def finish_deleted(self, fence: Fence, pipeline_id: PipelineId) -> None:
        """Before a pipeline is deleted: abort its in-flight checkpoints and try once to
        commit its COMPLETE ones. Leader-only."""
        self.awaited.forget(pipeline_id)
        with self._duty_lock:
            self.abort_triggered(pipeline_id, reason="pipeline deleted")
            self.send_aborts(fence, only=pipeline_id, wait=True)
            self.commit_pending(fence, only=pipeline_id, wait=True)

    # ------------------------------------------------------------------ traces

    def settle_traces(self) -> None:
        """End the trace of every checkpoint decided for good since the last pass, with
        the state and abort reason SQL holds (every abort path, one place)."""
        self.traces.settle_decided(self._store.checkpoints.get_summaries)

    # ------------------------------------------------------------------ recovery

    def recover(self, fence: Fence) -> RecoveryPlan:
        """A new leader's first step (DESIGN.md step 5). Leader-only.

        It cannot know which pre-commit RPCs its predecessor had outstanding, so every
        TRIGGERED checkpoint aborts; COMPLETE ones are committed by `commit_pending` in
        creation order, and the aborted ones' handles go out through `send_aborts`.
        """
        aborted = self._lease.leader_call(
            lambda f: self._store.checkpoints.abort_in_flight(fence=f, reason="leader changed")
        )
        self._outcomes.aborted(aborted, AbortKind.LEADER_CHANGED)
        for pipeline_id, checkpoint_id in aborted:
            # Its trace ends, with the reason, at the end of this pass (settle_traces).
            self.traces.adopt(pipeline_id, checkpoint_id, leader_epoch=int(fence.leader_epoch))
        return RecoveryPlan(
            aborted=tuple(aborted),
            to_commit=tuple(commit_order(self._store.checkpoints.list_pending_commits())),
            to_abort=tuple(self._store.checkpoints.list_lingering_transactions()),
        )

    # ------------------------------------------------------------------ triggers

    def trigger_due(self, fence: Fence, view: ClusterView, *, wait: bool = True) -> None:
        """Trigger the next checkpoint of every RUNNING pipeline whose interval has passed
        and whose tasks all run, then call the executors on the call pool (DESIGN.md step
        1). Reads only the pipelines the schedule found due (`trigger_schedule.py`). A
        pipeline whose trigger or abort job still runs waits for a later pass (an abort may
        re-initialise a slot's ids). Leader-only; `view`: the pass's; `wait`: until the
        calls end."""
        executors, now_ms = view.executors, view.now_ms
        pipelines = self.schedule.due(fence, view.fingerprint, now_ms)
        if not pipelines:
            return
        alive = self._membership.alive_among(executors, now_ms)
        free = {
            p.pipeline_id: p
            for p in pipelines
            if not self._calls.busy(("trigger", p.pipeline_id))
            and not self._calls.busy(("abort", p.pipeline_id))
        }
        if not free:
            return
        inputs = self._store.checkpoints.trigger_inputs(
            pipeline_ids=list(free),
            allowed=lambda p, recent, lingering: checkpoints_allow_trigger(
                pipeline=free[p],
                recent=recent,
                has_lingering=lingering,
                now_ms=now_ms,
                behind=self.schedule.behind(p),
            ),
        )
        ready = [
            pipeline
            for pipeline in free.values()
            if trigger_due(
                pipeline=pipeline,
                tasks=inputs.tasks.get(pipeline.pipeline_id, []),
                live_executors=frozenset(alive),
                recent=inputs.recent.get(pipeline.pipeline_id, []),
                has_lingering=pipeline.pipeline_id in inputs.lingering,
                now_ms=now_ms,
                behind=self.schedule.behind(pipeline.pipeline_id),
            )
        ]
        if not ready:
            return
        # The due pipelines' triggers in a few transactions, then the executors' calls.
        triggered: dict[PipelineId, CheckpointRecord | FailedPrecondition | NotFound] = {}
        for start in range(0, len(ready), PIPELINES_PER_TRANSACTION):
            chunk = [p.pipeline_id for p in ready[start : start + PIPELINES_PER_TRANSACTION]]
            triggered |= self._lease.leader_call(
                lambda f, c=chunk: self._store.checkpoints.trigger_checkpoints(  # type: ignore[misc]
                    fence=f, pipeline_ids=c
                ),
                term=fence,
            )
        self._send_triggers(fence, ready, triggered, inputs, alive, wait=wait)

    def _send_triggers(
        self,
        fence: Fence,
        ready: Sequence[PipelineRecord],
        triggered: Mapping[PipelineId, CheckpointRecord | FailedPrecondition | NotFound],
        inputs: TriggerInputs,
        alive: Mapping[ExecutorId, ExecutorRecord],
        *,
        wait: bool,
    ) -> None:
        """Send the triggers written TRIGGERED: each executor's in one call, all at once (one
        that is slow to answer delays no other's), then a job per pipeline waits for its
        answers."""
        by_executor: dict[ExecutorId, list[PipelineTrigger]] = defaultdict(list)
        waits = []
        for pipeline in ready:
            checkpoint = triggered[pipeline.pipeline_id]
            if isinstance(checkpoint, FailedPrecondition | NotFound):
                _LOG.debug("not triggering %s: %s", pipeline.pipeline_id, checkpoint)
                continue
            self.schedule.triggered(pipeline, checkpoint)
            self.traces.triggered(
                pipeline.pipeline_id, checkpoint.checkpoint_id, leader_epoch=int(fence.leader_epoch)
            )
            span = self.traces.start_step(
                "lockgate.checkpoint.trigger",
                pipeline.pipeline_id,
                checkpoint.checkpoint_id,
                leader_epoch=int(fence.leader_epoch),
            )
            calls = trigger_calls(
                pipeline,
                checkpoint,
                inputs.tasks.get(pipeline.pipeline_id, []),
                inputs.start_offsets.get(pipeline.pipeline_id, {}),
                trace_context(span),
            )
            dead = next((f"executor {e} is not alive" for e in calls if e not in alive), None)
            sent = {} if dead else calls
            self.awaited.expect(pipeline.pipeline_id, checkpoint.checkpoint_id, sent)
            mine = []
            for executor_id, call in sent.items():
                mine.append((executor_id, len(by_executor[executor_id])))
                by_executor[executor_id].append(call)
            waits.append((pipeline, checkpoint, span, dead, mine))
        answers = {
            e: self._executors.send_triggers(fence=fence, executor=alive[e], triggers=t)
            for e, t in by_executor.items()
        }
        for pipeline, checkpoint, span, dead, mine in waits:
            mine_answered = [answers[e][i] for e, i in mine]
            self._calls.run(
                ("trigger", pipeline.pipeline_id),
                functools.partial(
                    self._await_trigger, pipeline, checkpoint, span, dead, mine_answered
                ),
                wait=wait,
                wake=False,  # accepted, it leaves a pass nothing to do; refused, it wakes one
            )

    def _await_trigger(
        self,
        pipeline: PipelineRecord,
        checkpoint: CheckpointRecord,
        span: Span,
        failure: str | None,
        answers: Sequence[Callable[[], list[TriggerResult]]],
    ) -> None:
        """Wait for N's executors' answers, in N's trigger span (ended here); abort N when
        one failed or refused (`failure`: why it could not be sent)."""
        with trace.use_span(span, end_on_exit=True):
            failure = failure or trigger_failure(pipeline.pipeline_id, answers)
            if failure is None:
                return
            span.set_status(Status(StatusCode.ERROR, failure))
        _LOG.warning(
            "checkpoint %s of %s aborted at trigger: %s",
            checkpoint.checkpoint_id,
            pipeline.pipeline_id,
            failure,
        )
        # Every task may have reported already (IllegalTransition): then N is decided.
        with contextlib.suppress(IllegalTransition):
            self.abort_checkpoint(
                pipeline.pipeline_id, checkpoint.checkpoint_id, f"trigger failed: {failure}"
            )
        self._wake()  # a pass sends the aborts and triggers again
