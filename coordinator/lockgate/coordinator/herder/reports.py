"""What executors report about checkpoints and tasks: a task's pre-commit of N (the
COMPLETE commit point is written with the last one), a task that could not pre-commit,
a task that failed.

Rules and known races:
- A report answering a trigger of an older leader epoch is refused with a stale
  `LEADER_EPOCH` token (the checkpoint was aborted when this leader took over; the
  executor aborts its handles); a newer epoch means this replica's term is over.
- A report with an older executor or task generation (a zombie) is refused with the token
  that was stale and its current value (`StaleTokenError`); nothing is recorded.
- A failure report about a checkpoint decided meanwhile changes nothing; one about a
  TRIGGERED checkpoint aborts it and every later in-flight one of the pipeline.
- Reports that arrive together share one SQL transaction (group commit); a batch that
  fails is written one by one, so each caller gets its own answer.
- An executor's own batch (ReportPrecommits) is one transaction in which each report is
  checked on its own: a refused report (stale, forged, too late) is answered with its
  error and leaves the others recorded. Batches of several executors that arrive
  together share that transaction (group commit again); if it fails, each batch is
  written in its own, so each call gets its own answer. A batch whose checkpoints all
  await another executor's batch waits for it, briefly, to share its transaction
  (`awaited_reports.py`).
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard, TypeVar

from opentelemetry.trace import Status, StatusCode

from lockgate.common.errors import FencingToken, LockgateError, StaleTokenError
from lockgate.common.group_commit import GroupCommit
from lockgate.common.model.ids import CheckpointId, ExecutorId, Generation, TaskId, split_task_id
from lockgate.coordinator.domain.checkpoints import CheckpointRecord, Precommit
from lockgate.coordinator.domain.errors import (
    IllegalTransition,
    NotFound,
    NotLeader,
    StaleGeneration,
)
from lockgate.coordinator.domain.precommits import PrecommitRefusal
from lockgate.coordinator.domain.states import CheckpointState, TaskState
from lockgate.coordinator.herder.awaited_reports import REPORT_LINGER_S
from lockgate.coordinator.herder.checkpoints import CheckpointDriver
from lockgate.coordinator.herder.lease_keeper import LeaseKeeper
from lockgate.coordinator.herder.traces import STATE, CheckpointTraces
from lockgate.coordinator.store.sql_store import SqlStore

_R = TypeVar("_R")
#: A report's answer in an executor's batch: its checkpoint afterwards, or its refusal.
_Answer = CheckpointRecord | PrecommitRefusal
#: Executors' ReportPrecommits calls recorded in one transaction at most: one fsync and one
#: round of statements for all of them, short enough that the lease's renewal, which waits
#: for the replica's current write, never waits long.
REPORT_CALLS_PER_TRANSACTION = 16


@dataclass(frozen=True)
class TaskReport:
    """Who reports about a task (the task's and the executor's generations are the fencing
    tokens checked), and for a failure what went wrong."""

    task: TaskId
    task_generation: Generation
    executor_id: ExecutorId
    executor_generation: Generation
    error: str = ""


class Reports:
    """Executors' reports of pre-commits and failures; every method is leader-only."""

    def __init__(
        self,
        *,
        store: SqlStore,
        lease: LeaseKeeper,
        checkpoints: CheckpointDriver,
        wake: Callable[[], None],
        traces: CheckpointTraces | None = None,
    ) -> None:
        self._store = store
        self._lease = lease
        self._checkpoints = checkpoints
        self._wake = wake
        self._traces = traces or CheckpointTraces()
        self._precommits: GroupCommit[Precommit, CheckpointRecord] = GroupCommit(
            write_batch=self._write_precommits, write_one=self._write_precommit
        )
        self._report_calls: GroupCommit[Sequence[Precommit], list[_Answer]] = GroupCommit(
            write_batch=self._write_report_calls,
            max_batch=REPORT_CALLS_PER_TRANSACTION,
            linger=checkpoints.awaited.worth_waiting,
            linger_s=REPORT_LINGER_S,
        )

    def report_precommit(self, *, precommit: Precommit, leader_epoch: int) -> CheckpointRecord:
        """Record a task's pre-commit of N, answering the trigger of `leader_epoch`;
        COMPLETE is written in the same transaction when it was the last one. Leader-only.
        Wakes the loop to commit at once. Reports that arrive together share one
        transaction (group commit)."""
        self._check_report_epoch(leader_epoch)
        started_ns = time.time_ns()
        answer: CheckpointRecord | LockgateError
        try:
            answer = self._precommits.submit(precommit)
        except StaleGeneration as exc:
            answer = self._stale_report(
                exc, _reporter_of(precommit), checkpoint_id=precommit.checkpoint_id
            )
        except LockgateError as exc:
            answer = exc
        self._trace_report(precommit, leader_epoch, answer, started_ns=started_ns)
        if isinstance(answer, LockgateError):
            raise answer
        self._checkpoints.schedule.precommitted(precommit)
        if _is_complete(answer):
            self._commit_now([answer])
        return answer

    def report_precommits(
        self, *, precommits: Sequence[Precommit], leader_epochs: Sequence[int]
    ) -> list[CheckpointRecord | LockgateError]:
        """One executor's batch of pre-commits (each answering the trigger of its
        `leader_epochs` entry), recorded in one transaction (with other executors' batches
        that arrived meanwhile), each checked on its own:
        per report and in order, its checkpoint afterwards or why it was refused (nothing
        of a refused report is recorded). Leader-only; NotLeader if a report answers a
        newer leader than this one. Wakes the loop to commit at once when one is COMPLETE."""
        answers: list[CheckpointRecord | LockgateError | None] = []
        for epoch in leader_epochs:
            try:
                self._check_report_epoch(epoch)
                answers.append(None)
            except StaleTokenError as exc:
                answers.append(exc)
        checked = [p for p, a in zip(precommits, answers, strict=True) if a is None]
        self._checkpoints.awaited.arrived(checked)
        started_ns = time.time_ns()
        written = iter(self._report_calls.submit(checked) if checked else [])
        results: list[CheckpointRecord | LockgateError] = []
        for precommit, epoch, answer in zip(precommits, leader_epochs, answers, strict=True):
            if answer is None:
                answer = next(written)
                self._trace_report(precommit, epoch, answer, started_ns=started_ns)
            if isinstance(answer, StaleGeneration):
                answer = self._stale_report(
                    answer, _reporter_of(precommit), checkpoint_id=precommit.checkpoint_id
                )
            elif isinstance(answer, CheckpointRecord):
                self._checkpoints.schedule.precommitted(precommit)
            results.append(answer)
        self._commit_now(results)
        return results

    def _commit_now(self, answers: Sequence[CheckpointRecord | LockgateError]) -> None:
        """Start committing the checkpoints these reports made COMPLETE at once, on the
        call pool (a pipeline whose commit job still runs gets this one from the pass its
        end wakes), and wake the loop: the pipeline may trigger again. Starting the commit
        from the pass the wake-up runs put that pass's reads before every commit (COMPLETE
        to COMMITTED p99 30-34 ms, now 21-26 ms, in the SQLite round trip: README, issue
        14)."""
        completed = frozenset(a.pipeline_id for a in answers if _is_complete(a))
        if not completed:
            return
        fence = self._lease.current_fence()
        if fence is not None:
            self._checkpoints.commit_pending(fence, wait=False, known=completed)
        self._wake()

    def _trace_report(
        self,
        precommit: Precommit,
        leader_epoch: int,
        answer: CheckpointRecord | LockgateError,
        *,
        started_ns: int,
    ) -> None:
        """One report as its `lockgate.checkpoint.report_precommit` span, with the state it
        left its checkpoint in or why it was refused (a batch's call carries the trace of
        one of its reports: the others link to it)."""
        with self._traces.report(
            precommit.pipeline_id,
            precommit.checkpoint_id,
            task_id=precommit.task_id,
            leader_epoch=leader_epoch,
        ) as span:
            if isinstance(answer, CheckpointRecord):
                span.set_attribute(STATE, answer.state.name)
            else:
                span.set_status(Status(StatusCode.ERROR, answer.message))
        if _is_complete(answer):
            self._traces.completed(
                precommit.pipeline_id, precommit.checkpoint_id, started_ns=started_ns
            )

    def _write_precommits(self, batch: Sequence[Precommit]) -> list[CheckpointRecord]:
        """Many reports in one transaction, all or nothing; each report's checkpoint as it
        is afterwards."""
        records = self._recording_commits(
            self._store.checkpoints.record_precommits, precommits=batch
        )
        by_checkpoint = {(r.pipeline_id, r.checkpoint_id): r for r in records}
        return [by_checkpoint[(p.pipeline_id, p.checkpoint_id)] for p in batch]

    def _write_report_calls(self, calls: Sequence[Sequence[Precommit]]) -> list[list[_Answer]]:
        """Executors' batches that arrived together, in one transaction whose reports are
        each checked on its own (`record_precommit_batch`), as one executor's are: the same
        answers as one transaction per batch, for one transaction's fixed cost (issue 14:
        at scale every executor's batch waited for the others' writes anyway). Per batch,
        per report, its answer."""
        joined = [precommit for call in calls for precommit in call]
        answers = self._recording_commits(
            self._store.checkpoints.record_precommit_batch, precommits=joined
        )
        ends = list(itertools.accumulate(len(call) for call in calls))
        return [list(answers[end - len(call) : end]) for call, end in zip(calls, ends, strict=True)]

    def _write_precommit(self, precommit: Precommit) -> CheckpointRecord:
        """One report in its own transaction (a failed batch's)."""
        return self._recording_commits(
            self._store.checkpoints.record_precommit, precommit=precommit
        )

    def _recording_commits(self, write: Callable[..., _R], **reports: Any) -> _R:
        """Run a leader write of reports (`CheckpointStore.record_precommit` and its batch
        forms) that also COMMITs the checkpoints with nothing to commit, pruning their
        histories; then account for those once."""
        committed: list[CheckpointRecord] = []
        started_ns = time.time_ns()
        result = self._lease.leader_call(
            lambda f: write(
                fence=f,
                committed=committed,
                keep_history=self._checkpoints.keep_history,
                **reports,
            )
        )
        self._committed_now(committed, started_ns=started_ns)
        return result

    def _committed_now(self, committed: Sequence[CheckpointRecord], *, started_ns: int) -> None:
        """Checkpoints a report's transaction (begun at `started_ns`) COMMITTED itself, once
        each: their `lockgate.checkpoint.complete` spans (a root ends with COMMITTED), their
        counts, and a wake of the loop (the pipeline may trigger again)."""
        if not committed:
            return
        for record in committed:
            self._traces.completed(record.pipeline_id, record.checkpoint_id, started_ns=started_ns)
        self._checkpoints.committed(committed)
        self._wake()

    def report_checkpoint_failure(
        self,
        *,
        checkpoint_id: CheckpointId,
        failure: TaskReport,
        task_failed: bool,
        leader_epoch: int,
    ) -> CheckpointState:
        """A task could not pre-commit N: abort N and every later in-flight checkpoint of
        the pipeline (a decided N stays as it is). Leader-only."""
        self._check_report_epoch(leader_epoch)
        try:
            return self._checkpoint_failed(checkpoint_id, failure, task_failed=task_failed)
        except StaleGeneration as exc:
            raise self._stale_report(exc, failure, checkpoint_id=checkpoint_id) from None

    def _checkpoint_failed(
        self, checkpoint_id: CheckpointId, failure: TaskReport, *, task_failed: bool
    ) -> CheckpointState:
        pipeline_id, _ = split_task_id(failure.task)
        task = failure.task
        checkpoint = self._store.checkpoints.get_checkpoint(
            pipeline_id=pipeline_id, checkpoint_id=checkpoint_id
        )
        trigger = next((t for t in checkpoint.tasks if t.task_id == task), None)
        if trigger is None:
            raise NotFound(
                f"task {task} is not part of checkpoint {checkpoint_id} of {pipeline_id!r}",
                resource_type="checkpoint_task",
                resource_name=task,
            )
        if trigger.task_generation != failure.task_generation:
            raise StaleGeneration(
                f"task {task} reported generation {failure.task_generation} but checkpoint "
                f"{checkpoint_id} was triggered at generation {trigger.task_generation}"
            )
        executor = self._store.executors.get_executor(executor_id=failure.executor_id)
        if executor.generation != failure.executor_generation:
            raise StaleGeneration(
                f"executor {failure.executor_id} reported generation "
                f"{failure.executor_generation} but the current generation is "
                f"{executor.generation}"
            )
        if checkpoint.state is CheckpointState.TRIGGERED:
            reason = f"task {task} failed to pre-commit: {failure.error}"
            # Decided meanwhile (IllegalTransition): a late failure report changes nothing.
            with contextlib.suppress(IllegalTransition):
                self._checkpoints.abort_checkpoint(pipeline_id, checkpoint_id, reason)
        if task_failed:
            self._task_failed(failure)
        self._wake()
        return self._store.checkpoints.get_checkpoint(
            pipeline_id=pipeline_id, checkpoint_id=checkpoint_id
        ).state

    def report_task_failure(self, failure: TaskReport) -> None:
        """Mark a task FAILED and abort the pipeline's checkpoints waiting for it.

        Leader-only.
        """
        try:
            self._task_failed(failure)
        except StaleGeneration as exc:
            raise self._stale_report(exc, failure, checkpoint_id=None) from None

    def _task_failed(self, failure: TaskReport) -> None:
        record = self._lease.leader_call(
            lambda f: self._store.pipelines.report_task_state(
                fence=f,
                task_id=failure.task,
                task_generation=failure.task_generation,
                executor_id=failure.executor_id,
                executor_generation=failure.executor_generation,
                state=TaskState.FAILED,
                error=failure.error,
            )
        )
        self._checkpoints.abort_triggered(
            record.pipeline_id, reason=f"task {failure.task} failed: {failure.error}"
        )
        self._wake()

    def _check_report_epoch(self, presented: int) -> None:
        """Refuse a report answering a trigger of an older leader (its checkpoint was
        aborted when this leader took over); a newer epoch means this replica is stale."""
        fence = self._lease.require_fence()
        if presented and presented < fence.leader_epoch:
            raise StaleTokenError(
                message=f"the report answers a trigger of leader epoch {presented}, but epoch "
                f"{fence.leader_epoch} leads now and aborted that checkpoint; abort its "
                "handles",
                token=FencingToken.LEADER_EPOCH,
                subject="",
                presented=presented,
                current=int(fence.leader_epoch),
            )
        if presented > fence.leader_epoch:
            raise NotLeader(leader_address=None)  # a newer leader exists: this term is over

    def _stale_report(
        self, exc: StaleGeneration, reporter: TaskReport, *, checkpoint_id: CheckpointId | None
    ) -> StaleTokenError:
        """Which token of a refused report was stale, and its current value."""
        executor_id, executor_generation = reporter.executor_id, reporter.executor_generation
        task, task_generation = reporter.task, reporter.task_generation
        try:
            current_executor = int(
                self._store.executors.get_executor(executor_id=executor_id).generation
            )
        except NotFound:
            current_executor = 0
        if current_executor != executor_generation:
            return StaleTokenError(
                message=exc.message,
                token=FencingToken.EXECUTOR_GENERATION,
                subject=executor_id,
                presented=executor_generation,
                current=current_executor,
            )
        if checkpoint_id is not None:
            checkpoint = self._store.checkpoints.get_checkpoint(
                pipeline_id=split_task_id(task)[0], checkpoint_id=checkpoint_id
            )
            trigger = next((t for t in checkpoint.tasks if t.task_id == task), None)
            current_task = int(trigger.task_generation) if trigger else 0
        else:
            current_task = int(self._store.pipelines.get_task(task_id=task).generation)
        return StaleTokenError(
            message=exc.message,
            token=FencingToken.TASK_GENERATION,
            subject=task,
            presented=task_generation,
            current=current_task,
        )


def _reporter_of(precommit: Precommit) -> TaskReport:
    """Who sent a pre-commit report, as the fencing checks name it."""
    return TaskReport(
        task=precommit.task_id,
        task_generation=precommit.task_generation,
        executor_id=precommit.executor_id,
        executor_generation=precommit.executor_generation,
    )


def _is_complete(answer: CheckpointRecord | LockgateError) -> TypeGuard[CheckpointRecord]:
    return isinstance(answer, CheckpointRecord) and answer.state is CheckpointState.COMPLETE
