"""The leader's trigger schedule: each RUNNING pipeline's next due time, so a pass of the
work loop reads only the pipelines whose interval has passed (issue 14: a pass read every
pipeline, task and recent checkpoint to find the few that were due).

Rules:
- Seeded (each RUNNING pipeline, due at its newest checkpoint's trigger time plus its
  interval, at once if it has none) when a term starts (a new leader knows nothing of its
  predecessor's schedule), whenever the pipelines' part of `PipelinesFingerprint` changed
  (a pipeline created, updated, paused, resumed, stopped or deleted) and every
  `RESEED_EVERY_S` whatever it says. The fingerprint is read before what is seeded from it:
  a change after that read is seen by the next pass.
- A pipeline this leader triggers is due again at its new checkpoint's trigger time plus
  its interval (only the leader triggers). One that is due but not triggered (its tasks
  not running, a checkpoint in flight, aborts still to send, a job still out) stays due:
  each pass reads it again until it is triggered.
- A pipeline behind its source is due at once, not an interval after its newest checkpoint
  (issue 13: a backlog drained at one capped checkpoint per interval, 200,000 records/s at
  4 partitions and a 1 s interval, whatever the pre-commits allowed). It is behind when a
  pre-commit of its newest checkpoint stopped a range at the most records the executor let
  it read (`Precommit.backlog_left`; the executor sizes each checkpoint, up to
  `source.kafka.max_records_per_partition`, so only it knows where it stopped): executors'
  reports say so (`precommitted`, from the report threads, under a lock; everything else
  is the work loop's). The checkpoint still triggers only once the one behind is COMPLETE and
  within the in-flight limit (`checkpoints_allow_trigger`), so back-to-back checkpoints
  overlap one commit with the next pre-commit and no more. A report of a checkpoint older
  than the newest is ignored; a new term's seed keeps what it knew of the newest one.
- Times are the database's clock, as the checkpoints' trigger times; the work loop is its
  only caller but for `precommitted`, and sleeps no longer than until the next due time
  (`next_due_in_ms`).
"""

from __future__ import annotations

import threading
from collections.abc import Set as AbstractSet

from lockgate.common.model.ids import CheckpointId, PipelineId
from lockgate.coordinator.domain.checkpoints import CheckpointRecord, Precommit
from lockgate.coordinator.domain.lease import Fence
from lockgate.coordinator.domain.pipelines import PipelineRecord, PipelinesFingerprint
from lockgate.coordinator.domain.states import TargetState
from lockgate.coordinator.herder.lease_keeper import LeaseKeeper
from lockgate.coordinator.herder.pipelines import all_pipelines
from lockgate.coordinator.store.sql_store import SqlStore

#: The schedule is seeded afresh at least this often (s): a safety net under the
#: fingerprint (a change it cannot see, e.g. a clock stepping back).
RESEED_EVERY_S = 5.0


class TriggerSchedule:
    """When each RUNNING pipeline is next due (see the module docstring)."""

    def __init__(self, *, store: SqlStore, lease: LeaseKeeper) -> None:
        self._store = store
        self._lease = lease
        # The term and pipelines' fingerprint the schedule was seeded from, and when.
        self._seeded: tuple[Fence, tuple[int, ...], float] | None = None
        self._pipelines: dict[PipelineId, PipelineRecord] = {}
        self._due_ms: dict[PipelineId, int] = {}
        # Each pipeline's newest checkpoint, and the pipelines a pre-commit of it left records
        # of (`Precommit.backlog_left`).
        self._newest: dict[PipelineId, CheckpointId] = {}
        self._behind: set[PipelineId] = set()
        # Pipelines triggered since the pass began: in flight, though its view predates it.
        self._just_triggered: set[PipelineId] = set()
        # Per pipeline, the newest checkpoint a report left records of, from the report
        # threads; the loop takes them at its next pass.
        self._reports_lock = threading.Lock()
        self._reported: dict[PipelineId, CheckpointId] = {}

    def due(
        self, fence: Fence, fingerprint: PipelinesFingerprint, now_ms: int
    ) -> list[PipelineRecord]:
        """The RUNNING pipelines due at `now_ms` (database clock), in name order; seeds the
        schedule first if its term or the pipelines changed (`fingerprint`, read before
        `now_ms`), or it is old."""
        self._just_triggered.clear()
        if self._stale(fence, fingerprint):
            self._seed(fence, fingerprint)
        self._take_reports()
        return [self._pipelines[p] for p, at in sorted(self._due_ms.items()) if at <= now_ms]

    def next_due_in_ms(
        self, now_ms: int, waiting: AbstractSet[PipelineId] = frozenset()
    ) -> int | None:
        """How long after `now_ms` (database clock) the next pipeline falls due; None if
        none will. The work loop sleeps no longer, so a checkpoint is triggered at its
        interval, not at the loop's next tick. A pipeline due already but not triggered
        waits for what it waits for (a report, a heartbeat) or for the tick; so does one
        `waiting` for its checkpoint in flight, or triggered by this pass, whatever its due
        time (the checkpoint's end wakes the loop: a pass at its due time found it in
        flight, once a checkpoint when checkpoints take longer than the interval)."""
        later = [
            at
            for p, at in self._due_ms.items()
            if at > now_ms and p not in waiting and p not in self._just_triggered
        ]
        return min(later) - now_ms if later else None

    def behind(self, pipeline_id: PipelineId) -> bool:
        """Whether a pre-commit of the pipeline's newest checkpoint left records unread:
        its next checkpoint need not wait for the interval (`should_trigger`)."""
        return pipeline_id in self._behind

    def precommitted(self, precommit: Precommit) -> None:
        """A task's pre-commit was recorded; the next pass sees whether it left records
        (`Precommit.backlog_left`). Called from the report threads."""
        if not precommit.backlog_left:
            return
        key = precommit.pipeline_id
        with self._reports_lock:
            known = self._reported.get(key)
            if known is None or precommit.checkpoint_id > known:
                self._reported[key] = precommit.checkpoint_id

    def triggered(self, pipeline: PipelineRecord, checkpoint: CheckpointRecord) -> None:
        """`checkpoint` of `pipeline` was triggered: its next is due an interval later."""
        self._just_triggered.add(pipeline.pipeline_id)
        self._newest[pipeline.pipeline_id] = checkpoint.checkpoint_id
        self._behind.discard(pipeline.pipeline_id)
        if pipeline.pipeline_id in self._due_ms:
            self._due_ms[pipeline.pipeline_id] = (
                checkpoint.triggered_at_ms + pipeline.spec.checkpoint.interval_ms
            )

    def _stale(self, fence: Fence, fingerprint: PipelinesFingerprint) -> bool:
        if self._seeded is None:
            return True
        term, pipelines, at = self._seeded
        return (
            term != fence
            or pipelines != fingerprint.pipelines
            or self._lease.monotonic() - at >= RESEED_EVERY_S
        )

    def _seed(self, fence: Fence, fingerprint: PipelinesFingerprint) -> None:
        running = [p for p in all_pipelines(self._store) if p.target_state is TargetState.RUNNING]
        recent = self._store.checkpoints.trigger_snapshot()
        self._pipelines = {p.pipeline_id: p for p in running}
        self._due_ms = {}
        for pipeline in running:
            newest = recent.get(pipeline.pipeline_id)
            self._due_ms[pipeline.pipeline_id] = (
                newest[0].triggered_at_ms + pipeline.spec.checkpoint.interval_ms if newest else 0
            )
        known = self._newest
        self._newest = {p: c[0].checkpoint_id for p, c in recent.items() if c}
        self._behind = {
            p for p in self._behind if p in self._pipelines and known.get(p) == self._newest.get(p)
        }
        for pipeline_id in self._behind:
            self._due_ms[pipeline_id] = 0
        self._seeded = (fence, fingerprint.pipelines, self._lease.monotonic())

    def _take_reports(self) -> None:
        """Mark behind, and due at once, each pipeline a pre-commit of whose newest
        checkpoint left records unread (reported since the last pass)."""
        with self._reports_lock:
            reported, self._reported = self._reported, {}
        for pipeline_id, checkpoint_id in reported.items():
            if pipeline_id in self._pipelines and self._newest.get(pipeline_id) == checkpoint_id:
                self._behind.add(pipeline_id)
                self._due_ms[pipeline_id] = 0
