"""Checkpoints: triggers, pre-commits, the commit point, commits, aborts, restore states.

Tables `checkpoints`, `checkpoint_tasks`, `precommit_offsets`, `precommit_handles` and
`transactional_ids`. Every write is: read a snapshot inside the fenced transaction
(`engine.Database.transaction`), let a pure function of `domain/` decide
(`plan_trigger`, `accept_precommits`, `checkpoints_to_complete`, `plan_abort`,
`first_timed_out`), write what it returned. COMPLETE and the pipeline's restore offsets
are written in one transaction: that row is the commit point (DESIGN.md step 3). Triggers
and reports also keep the leader's copy of its in-flight checkpoints (`in_flight.py`),
which a report's snapshot reads instead of those checkpoints' rows.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from lockgate.common.failpoints import Failpoint, Failpoints
from lockgate.common.model.ids import (
    CheckpointId,
    PipelineId,
    TaskId,
)
from lockgate.common.model.offsets import OffsetRange
from lockgate.coordinator.domain.aborts import timeout_reason
from lockgate.coordinator.domain.checkpoints import (
    CheckpointRecord,
    LingeringTransaction,
    PendingCommit,
    Precommit,
    RestoreState,
    TriggeredCheckpoint,
    check_handles_abortable,
    first_timed_out,
    restore_states_of,
)
from lockgate.coordinator.domain.lease import Fence
from lockgate.coordinator.domain.pipelines import TaskRecord
from lockgate.coordinator.domain.precommits import (
    CheckpointKey,
    PrecommitRefusal,
    group_by_checkpoint,
    sort_precommits,
)
from lockgate.coordinator.domain.states import CheckpointState, transition_checkpoint
from lockgate.coordinator.store.checkpoint_aborts import apply_abort
from lockgate.coordinator.store.engine import Database, db_now_ms, read_now_ms
from lockgate.coordinator.store.history import prune_histories
from lockgate.coordinator.store.in_flight import InFlightCheckpoints, Turn
from lockgate.coordinator.store.keyed import execute_keyed
from lockgate.coordinator.store.offset_store import next_offsets_of
from lockgate.coordinator.store.precommit_rows import (
    commit_without_handles,
    complete_ready,
    precommit_snapshot,
    store_precommits,
    summaries_after,
    write_precommits,
)
from lockgate.coordinator.store.recovery_queries import (
    lingering_pipelines,
    lingering_transactions,
    pending_commit_pipelines,
    pending_commits,
)
from lockgate.coordinator.store.rows import (
    checkpoint_record,
    commit_where,
    lock_pipelines,
    parsed_spec,
    read_checkpoint,
    read_checkpoint_summaries,
    read_pipeline,
    read_precommit_ranges,
    read_tasks_by_id,
)
from lockgate.coordinator.store.tables import (
    checkpoint_tasks,
    checkpoints,
    pipelines,
)
from lockgate.coordinator.store.trigger_queries import (
    AllowedByCheckpoints,
    TriggerInputs,
    trigger_inputs,
    trigger_snapshot,
)
from lockgate.coordinator.store.trigger_rows import Triggered, trigger_pipelines


class CheckpointStore:
    """The checkpoint protocol's state (DESIGN.md, two-phase commit)."""

    def __init__(self, *, database: Database, failpoints: Failpoints | None = None) -> None:
        self._db = database
        self._failpoints = failpoints or Failpoints()
        self._in_flight = InFlightCheckpoints()

    def trigger_checkpoints(
        self, *, fence: Fence, pipeline_ids: Sequence[PipelineId]
    ) -> dict[PipelineId, Triggered]:
        """Start the next checkpoint N of each of these pipelines over all its tasks, in
        ONE transaction: one fence check and one fsync for every pipeline a pass finds due
        (issue 14). Leader-only. Pipelines are locked in name order.

        Allocates each task a transactional id slot (see `transactional_ids.py`). A
        pipeline that may not start one is answered with its refusal, and nothing of it is
        written; the others are triggered. FailedPrecondition when the pipeline is not
        RUNNING, has no tasks, has a task without an executor, already has
        `DEFAULT_MAX_IN_FLIGHT` checkpoints in flight, or a task has no free slot
        (`domain.checkpoints.plan_trigger`), or it is FAILED by an unresolved DATA_LOST
        checkpoint; NotFound when it was deleted. A few statements for all of them
        (`trigger_rows.py`).
        """
        with self._leader_write(fence) as (conn, turn):
            answers = trigger_pipelines(conn, pipeline_ids, fence.leader_epoch)
            turn.note_triggered(a for a in answers.values() if isinstance(a, CheckpointRecord))
            return answers

    def record_precommit(
        self,
        *,
        fence: Fence,
        precommit: Precommit,
        complete_if_ready: bool = True,
        committed: list[CheckpointRecord] | None = None,
        keep_history: int | None = None,
    ) -> CheckpointRecord:
        """Store one task's pre-commit of N; write COMPLETE in the same transaction if it
        was the last one and every earlier checkpoint is COMPLETE. Leader-only. With a
        `committed` list, a checkpoint so completed that has nothing to commit is COMMITTED
        in the same transaction too, and appended to it (`_complete`; read the list only
        when the call returns: a failed call committed nothing), its pipeline's history
        pruned to `keep_history`.

        Idempotent: the same task pre-committing again is a no-op. StaleGeneration if the
        report comes from a replaced executor session or task assignment;
        FailedPrecondition if N was aborted (the executor must abort its handles);
        InvalidArgument if its ranges or handles are not what N asked of the task: another
        start offset, another task's partition, another transactional id or sink cluster
        (`domain/precommits.py`).
        """
        with self._leader_write(fence) as (conn, turn):
            read_pipeline(conn, precommit.pipeline_id, for_update=True)
            read = store_precommits(conn, [precommit], turn)
            if complete_if_ready:
                key = (precommit.pipeline_id, precommit.checkpoint_id)
                self._complete(
                    conn,
                    turn,
                    [key],
                    read.checkpoint_states,
                    committed=committed,
                    keep_history=keep_history,
                )
            return read_checkpoint(conn, precommit.pipeline_id, precommit.checkpoint_id)

    def record_precommits(
        self,
        *,
        fence: Fence,
        precommits: Sequence[Precommit],
        committed: list[CheckpointRecord] | None = None,
        keep_history: int | None = None,
    ) -> list[CheckpointRecord]:
        """`record_precommit` for many reports in ONE transaction (one fsync), as the
        leader batches the reports that arrived together. All or nothing: one stale or
        refused report fails the batch, so callers batch only reports already checked or
        retry the rest one by one. Returns each touched checkpoint's state and times as
        they are afterwards, without its tasks (a reporter needs only the state; reading a
        100-task checkpoint again per batch was a third of the batch's cost). `committed`
        and `keep_history` as for `record_precommit`."""
        touched = list(group_by_checkpoint(precommits))
        with self._leader_write(fence) as (conn, turn):
            read = store_precommits(conn, precommits, turn)  # locks the pipelines first
            completed, moved = self._complete(
                conn,
                turn,
                touched,
                read.checkpoint_states,
                committed=committed,
                keep_history=keep_history,
            )
            return summaries_after(read, touched, completed, moved)

    def record_precommit_batch(
        self,
        *,
        fence: Fence,
        precommits: Sequence[Precommit],
        committed: list[CheckpointRecord] | None = None,
        keep_history: int | None = None,
    ) -> list[CheckpointRecord | PrecommitRefusal]:
        """One executor's batch of reports in ONE transaction, each checked on its own
        (`domain.precommits.sort_precommits`): the accepted ones are stored and COMPLETE is
        written for each checkpoint they make ready; a refused one is answered with its
        error and nothing of it is stored. Returns, per report and in order, its
        checkpoint's state and times afterwards (without its tasks) or its refusal.
        Leader-only. Idempotent as `record_precommit`: a retried batch stores nothing new.
        The transaction is all or nothing: a lost lease or a failed write stores none.
        `committed` and `keep_history` as for `record_precommit`."""
        with self._leader_write(fence) as (conn, turn):
            # The snapshot locks the pipelines first; a deleted pipeline has no checkpoint:
            # the domain refuses its reports.
            read = precommit_snapshot(conn, precommits, turn)
            accepted, refused = sort_precommits(precommits, read)
            write_precommits(conn, accepted, turn)
            touched = sorted(
                {
                    (p.pipeline_id, p.checkpoint_id)
                    for i, p in enumerate(precommits)
                    if i not in refused
                }
            )
            completed, moved = self._complete(
                conn,
                turn,
                touched,
                read.checkpoint_states,
                committed=committed,
                keep_history=keep_history,
            )
            states = {
                (r.pipeline_id, r.checkpoint_id): r
                for r in summaries_after(read, touched, completed, moved)
            }
        return [
            refused[i] if i in refused else states[(p.pipeline_id, p.checkpoint_id)]
            for i, p in enumerate(precommits)
        ]

    @contextlib.contextmanager
    def _leader_write(self, fence: Fence) -> Iterator[tuple[Connection, Turn]]:
        """A fenced transaction that may read and change the leader's in-flight
        checkpoints (`in_flight.py`): those of triggers and reports. The write turn is
        held until its changes are applied, so the next write can read them."""
        with (
            self._db.write_turn(),
            self._in_flight.turn(fence.leader_epoch) as turn,
            self._db.transaction(fence=fence) as conn,
        ):
            turn.enter()
            yield conn, turn

    def _complete(
        self,
        conn: Connection,
        turn: Turn,
        keys: Sequence[CheckpointKey],
        read: Mapping[PipelineId, Mapping[CheckpointId, CheckpointState]],
        *,
        committed: list[CheckpointRecord] | None,
        keep_history: int | None,
    ) -> tuple[dict[CheckpointKey, int], dict[CheckpointKey, CheckpointRecord]]:
        """Write COMPLETE for the checkpoints these reports made ready (`complete_ready`).
        With a `committed` list, also COMMITTED for those of them with nothing to commit
        (`commit_without_handles`), appended to the list (the caller counts each once: a
        retried report answers COMMITTED too), pruning those pipelines' histories to
        `keep_history` as `mark_committed` does. Returns when each became COMPLETE, and the
        COMMITTED ones as written."""
        completed, with_handles = complete_ready(conn, keys, read)
        turn.note_left(completed)
        self._reach_inside_complete(completed)
        if committed is None:
            return completed, {}
        moved = commit_without_handles(conn, list(completed), read, with_handles)
        if keep_history is not None:
            prune_histories(conn, (pipeline_id for pipeline_id, _ in moved), keep=keep_history)
        committed.extend(moved.values())
        return completed, moved

    def _reach_inside_complete(self, completed: Iterable[CheckpointKey]) -> None:
        """The `inside_complete_transaction` failpoint: COMPLETE is written, not committed."""
        for pipeline_id, checkpoint_id in completed:
            self._failpoints.reach(
                Failpoint.INSIDE_COMPLETE_TRANSACTION,
                detail=f"checkpoint {checkpoint_id} of pipeline {pipeline_id}",
            )

    def mark_committed(
        self,
        *,
        fence: Fence,
        keys: Sequence[CheckpointKey],
        keep_history: int | None = None,
    ) -> list[CheckpointRecord]:
        """Mark these COMPLETE checkpoints COMMITTED (every handle acked) and return them
        without their tasks, in the order of `keys`. Leader-only; idempotent. With
        `keep_history`, prune each pipeline's final checkpoints beyond the newest that many
        in the same transaction (`store/history.py`).

        Checkpoints of any pipelines, in ONE transaction (issue 14: at scale many
        pipelines' commits are acked at once; one fence check and one fsync for them all).
        All or nothing: IllegalTransition if one is not COMPLETE or COMMITTED, NotFound if
        one does not exist, and nothing is written (`GroupCommit` then marks each alone,
        for its own answer). Pipelines are locked in name order.

        The move returns the rows as written (the database's time), so the usual case is
        one statement for the batch; a checkpoint is read alone only when it was not
        COMPLETE (a retried commit, or a refusal)."""
        with self._db.transaction(fence=fence) as conn:
            lock_pipelines(conn, (pipeline_id for pipeline_id, _ in keys))
            rows = execute_keyed(conn, commit_where, checkpoints, keys)
            marked = {(c.pipeline_id, c.checkpoint_id): c for c in map(checkpoint_record, rows)}
            moved = sorted({pipeline_id for pipeline_id, _ in marked})
            for key in sorted(set(keys) - marked.keys()):
                checkpoint = read_checkpoint(conn, *key, with_tasks=False)
                transition_checkpoint(checkpoint.state, CheckpointState.COMMITTED)
                marked[key] = checkpoint  # already COMMITTED: a retried commit
            if keep_history is not None:
                prune_histories(conn, moved, keep=keep_history)
            return [marked[key] for key in keys]

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
        with self._db.transaction(fence=fence) as conn:
            read_pipeline(conn, pipeline_id, for_update=True)
            return apply_abort(conn, pipeline_id, checkpoint_id, reason)

    def abort_triggered(
        self, *, fence: Fence, pipeline_id: PipelineId, reason: str
    ) -> list[CheckpointId]:
        """Abort the pipeline's TRIGGERED checkpoints, whichever they are when this
        transaction runs (one that became COMPLETE meanwhile is left to its commit).
        Leader-only. Returns the checkpoints aborted now."""
        with self._db.transaction(fence=fence) as conn:
            read_pipeline(conn, pipeline_id, for_update=True)
            first = conn.execute(
                sa.select(sa.func.min(checkpoints.c.checkpoint_id)).where(
                    checkpoints.c.pipeline_id == pipeline_id,
                    checkpoints.c.state == CheckpointState.TRIGGERED.value,
                )
            ).scalar_one_or_none()
            if first is None:
                return []
            return apply_abort(conn, pipeline_id, CheckpointId(first), reason)

    def abort_in_flight(
        self, *, fence: Fence, reason: str
    ) -> list[tuple[PipelineId, CheckpointId]]:
        """Abort every TRIGGERED checkpoint of every pipeline (a new leader's first step:
        it cannot know which pre-commit RPCs its predecessor had outstanding). Leader-only.
        """
        aborted: list[tuple[PipelineId, CheckpointId]] = []
        with self._db.transaction(fence=fence) as conn:
            rows = conn.execute(
                sa.select(checkpoints.c.pipeline_id, sa.func.min(checkpoints.c.checkpoint_id))
                .where(checkpoints.c.state == CheckpointState.TRIGGERED.value)
                .group_by(checkpoints.c.pipeline_id)
                .order_by(checkpoints.c.pipeline_id)
            ).all()
            for pipeline_id, first in rows:
                read_pipeline(conn, PipelineId(pipeline_id), for_update=True)
                for c in apply_abort(conn, PipelineId(pipeline_id), CheckpointId(first), reason):
                    aborted.append((PipelineId(pipeline_id), c))
        return aborted

    def abort_timed_out(self, *, fence: Fence) -> list[tuple[PipelineId, CheckpointId]]:
        """Abort every TRIGGERED checkpoint older than its pipeline's `checkpoint.timeout_ms`
        (database clock), with the later ones it takes along. Leader-only.

        Looks in a read first: a write transaction each time (the replica's write turn,
        SQLite's write lock) held up the pre-commit reports for nothing; the work loop's
        pass looks in its own first read (`SqlStore.read_cluster`) and calls this only when
        that found one. Re-checked inside the fenced transaction."""
        with self._db.read() as conn:
            if not timed_out_checkpoints(conn):
                return []
        aborted: list[tuple[PipelineId, CheckpointId]] = []
        with self._db.transaction(fence=fence) as conn:
            for late in timed_out_checkpoints(conn):
                read_pipeline(conn, late.pipeline_id, for_update=True)
                reason = timeout_reason(
                    read_checkpoint(conn, late.pipeline_id, late.checkpoint_id),
                    timeout_ms=late.timeout_ms,
                )
                for c in apply_abort(conn, late.pipeline_id, late.checkpoint_id, reason):
                    aborted.append((late.pipeline_id, c))
        return aborted

    def mark_handles_aborted(
        self,
        *,
        fence: Fence,
        pipeline_id: PipelineId,
        checkpoint_id: CheckpointId,
        task_ids: Collection[TaskId],
        keep_history: int | None = None,
    ) -> None:
        """Record that these tasks' transactions of ABORTED checkpoint N were aborted, so
        they leave the lingering list: one write for all of them. Leader-only. Idempotent.
        `keep_history` as for `mark_committed` (N may have just become final)."""
        with self._db.transaction(fence=fence) as conn:
            if keep_history is not None:  # the pipeline row first, as every write here
                read_pipeline(conn, pipeline_id, for_update=True)
            check_handles_abortable(read_checkpoint(conn, pipeline_id, checkpoint_id))
            conn.execute(
                checkpoint_tasks.update()
                .where(
                    checkpoint_tasks.c.pipeline_id == pipeline_id,
                    checkpoint_tasks.c.checkpoint_id == checkpoint_id,
                    checkpoint_tasks.c.task_id.in_(sorted(task_ids)),
                    checkpoint_tasks.c.abort_acked_at_ms.is_(None),
                )
                .values(abort_acked_at_ms=db_now_ms())
            )
            if keep_history is not None:
                prune_histories(conn, [pipeline_id], keep=keep_history)

    def get_checkpoint(
        self, *, pipeline_id: PipelineId, checkpoint_id: CheckpointId
    ) -> CheckpointRecord:
        """One checkpoint with its tasks and timings; NotFound if absent."""
        with self._db.read() as conn:
            return read_checkpoint(conn, pipeline_id, checkpoint_id)

    def get_summaries(self, keys: Sequence[CheckpointKey]) -> list[CheckpointRecord]:
        """These checkpoints (those that exist), their states and times without their
        tasks, in one read."""
        with self._db.read() as conn:
            return read_checkpoint_summaries(conn, keys)

    def precommit_ranges(
        self, *, pipeline_id: PipelineId, checkpoint_id: CheckpointId
    ) -> dict[TaskId, list[OffsetRange]]:
        """The source ranges each task of checkpoint N pre-committed."""
        ranges: dict[TaskId, list[OffsetRange]] = defaultdict(list)
        with self._db.read() as conn:
            for _, task, tp, start, end in read_precommit_ranges(
                conn, pipeline_id, [checkpoint_id]
            ):
                ranges[task].append(OffsetRange(tp.topic, tp.partition, start, end))
        return dict(ranges)

    def list_checkpoints(
        self,
        *,
        pipeline_id: PipelineId,
        limit: int = 100,
        before: CheckpointId | None = None,
        states: Iterable[CheckpointState] | None = None,
        with_tasks: bool = True,
    ) -> list[CheckpointRecord]:
        """Checkpoint history of a pipeline, newest first, `limit` at most (older than
        `before` when given); without `with_tasks`, summaries (states and times, no task
        rows) in one query for the whole page."""
        with self._db.read() as conn:
            read_pipeline(conn, pipeline_id)
            stmt = (
                sa.select(checkpoints)
                .where(checkpoints.c.pipeline_id == pipeline_id)
                .order_by(checkpoints.c.checkpoint_id.desc())
                .limit(limit)
            )
            if before is not None:
                stmt = stmt.where(checkpoints.c.checkpoint_id < before)
            if states is not None:
                stmt = stmt.where(checkpoints.c.state.in_([s.value for s in states]))
            rows = conn.execute(stmt).all()
            if not with_tasks:
                return [checkpoint_record(r) for r in rows]
            return [
                read_checkpoint(conn, pipeline_id, CheckpointId(int(r.checkpoint_id))) for r in rows
            ]

    def trigger_snapshot(self) -> dict[PipelineId, list[CheckpointRecord]]:
        """Per pipeline, newest first, its newest and unfinished checkpoints: what the
        trigger schedule is seeded from (`trigger_queries`)."""
        with self._db.read() as conn:
            return trigger_snapshot(conn)

    def trigger_inputs(
        self, *, pipeline_ids: Sequence[PipelineId], allowed: AllowedByCheckpoints | None = None
    ) -> TriggerInputs:
        """What the trigger decision reads of these pipelines only, as one snapshot; the
        tasks and start offsets of those `allowed` lets through only (`trigger_queries`)."""
        with self._db.read() as conn:
            return trigger_inputs(conn, pipeline_ids, allowed)

    def count_checkpoints(
        self,
        *,
        pipeline_id: PipelineId,
        states: Iterable[CheckpointState],
        after: CheckpointId,
    ) -> int:
        """How many of the pipeline's checkpoints newer than `after` are in `states`."""
        with self._db.read() as conn:
            return int(
                conn.execute(
                    sa.select(sa.func.count()).where(
                        checkpoints.c.pipeline_id == pipeline_id,
                        checkpoints.c.checkpoint_id > after,
                        checkpoints.c.state.in_([s.value for s in states]),
                    )
                ).scalar_one()
            )

    def list_pending_commits(self, *, pipeline_id: PipelineId | None = None) -> list[PendingCommit]:
        """COMPLETE but not COMMITTED checkpoints with all their handles, oldest first per
        pipeline: what a new leader (re-)commits before anything else."""
        with self._db.read() as conn:
            return pending_commits(conn, None if pipeline_id is None else [pipeline_id])

    def list_pending_commit_pipelines(
        self, *, pipeline_id: PipelineId | None = None
    ) -> frozenset[PipelineId]:
        """The pipelines (this one, or all) `list_pending_commits` would name, without
        reading their handles."""
        with self._db.read() as conn:
            return pending_commit_pipelines(conn, None if pipeline_id is None else [pipeline_id])

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
        wanted = [CheckpointState.ABORTED]
        if include_in_flight:
            wanted.append(CheckpointState.TRIGGERED)
        with self._db.read() as conn:
            return lingering_transactions(
                conn, None if pipeline_id is None else [pipeline_id], wanted
            )

    def list_lingering_pipelines(
        self, *, pipeline_id: PipelineId | None = None
    ) -> frozenset[PipelineId]:
        """The pipelines (this one, or all) `list_lingering_transactions` would name,
        without reading its entries."""
        with self._db.read() as conn:
            return lingering_pipelines(conn, None if pipeline_id is None else [pipeline_id])

    def restore_states(self, *, task_ids: Sequence[TaskId]) -> dict[TaskId, RestoreState]:
        """What each (re)assigned task needs before reading (DESIGN.md step 5): the next
        offset of each of its partitions, its handles of COMPLETE-not-COMMITTED checkpoints
        (oldest first) to re-commit, and its transactions of ABORTED checkpoints whose
        abort is not recorded yet (not of TRIGGERED ones: a pre-commit the task's previous
        process reported may still become COMPLETE). A heartbeat's whole assignment in one
        read transaction of five queries, however many tasks and pipelines; tasks that no
        longer exist are left out."""
        with self._db.read() as conn:
            found = read_tasks_by_id(conn, task_ids)
            by_pipeline: dict[PipelineId, list[TaskRecord]] = defaultdict(list)
            for task_id in dict.fromkeys(task_ids):
                if task_id in found:
                    by_pipeline[found[task_id].pipeline_id].append(found[task_id])
            pipeline_ids = sorted(by_pipeline)
            offsets = next_offsets_of(conn, pipeline_ids)
            pending: dict[PipelineId, list[PendingCommit]] = defaultdict(list)
            for commit in pending_commits(conn, pipeline_ids):
                pending[commit.pipeline_id].append(commit)
            lingering: dict[PipelineId, list[LingeringTransaction]] = defaultdict(list)
            for item in lingering_transactions(conn, pipeline_ids, [CheckpointState.ABORTED]):
                lingering[item.pipeline_id].append(item)
        result: dict[TaskId, RestoreState] = {}
        for pipeline_id, pipeline_tasks in by_pipeline.items():
            result.update(
                restore_states_of(
                    pipeline_tasks,
                    offsets=offsets.get(pipeline_id, {}),
                    pending=pending[pipeline_id],
                    lingering=lingering[pipeline_id],
                )
            )
        return result


# ---------------------------------------------------------------------- snapshot reads


# Statements that run on every pass, report, trigger or commit, built once with bound
# parameters (as `rows`' keyed reads: building one cost about twice executing it).
_TRIGGERED_WITH_SPECS = (
    sa.select(
        checkpoints.c.pipeline_id,
        checkpoints.c.checkpoint_id,
        checkpoints.c.triggered_at_ms,
        pipelines.c.spec_json,
    )
    .join(pipelines, pipelines.c.pipeline_id == checkpoints.c.pipeline_id)
    .where(checkpoints.c.state == CheckpointState.TRIGGERED.value)
)


def triggered_checkpoints(conn: Connection) -> list[TriggeredCheckpoint]:
    """Every TRIGGERED checkpoint with its pipeline's timeout."""
    return [
        TriggeredCheckpoint(
            pipeline_id=PipelineId(r.pipeline_id),
            checkpoint_id=CheckpointId(int(r.checkpoint_id)),
            triggered_at_ms=int(r.triggered_at_ms),
            timeout_ms=parsed_spec(r.spec_json).checkpoint.timeout_ms,
        )
        for r in conn.execute(_TRIGGERED_WITH_SPECS)
    ]


def timed_out_checkpoints(conn: Connection) -> list[TriggeredCheckpoint]:
    """The earliest timed-out TRIGGERED checkpoint of each pipeline (`first_timed_out`) by
    the database's clock."""
    triggered = triggered_checkpoints(conn)
    return first_timed_out(triggered, now_ms=read_now_ms(conn)) if triggered else []
