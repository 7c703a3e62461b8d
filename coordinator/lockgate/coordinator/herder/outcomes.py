"""Checkpoint outcomes as metrics: `lockgate.checkpoints` by final state and abort reason,
and `lockgate.checkpoint.duration` by phase of each committed checkpoint.

Every path of the leader that commits or aborts checkpoints reports here right after its
fenced write: commits and aborts of the checkpoint driver (trigger failures, task failures,
timeouts, a new leader's recovery, stop and delete), and the aborts a reassignment or a
restart of tasks makes (membership, pipelines). Free-text reasons become one of
`domain.progress.AbortKind`, so the label set stays small.
"""

from __future__ import annotations

from collections.abc import Sequence

from lockgate.common.metrics import CHECKPOINT_DURATION, CHECKPOINTS, Instruments
from lockgate.common.model.ids import CheckpointId, PipelineId
from lockgate.coordinator.domain.checkpoints import CheckpointRecord
from lockgate.coordinator.domain.progress import AbortKind, abort_kind


class CheckpointOutcomes:
    """Records checkpoint outcomes on `instruments` (a no-op with metrics off)."""

    def __init__(self, instruments: Instruments | None = None) -> None:
        self._instruments = instruments or Instruments.disabled()

    def aborted(
        self, aborted: Sequence[tuple[PipelineId, CheckpointId]], reason: str | AbortKind
    ) -> None:
        """Checkpoints just aborted for `reason` (with the later ones it took along)."""
        kind = reason if isinstance(reason, AbortKind) else abort_kind(reason)
        for pipeline_id, _ in aborted:
            self._instruments.add(
                CHECKPOINTS,
                1,
                {"pipeline": pipeline_id, "state": "aborted", "abort_reason": kind.value},
            )

    def data_lost(self, checkpoints: Sequence[tuple[PipelineId, CheckpointId]]) -> None:
        """Checkpoints that went DATA_LOST (the broker lost a transaction of theirs, or an
        earlier one's)."""
        for pipeline_id, _ in checkpoints:
            self._instruments.add(
                CHECKPOINTS,
                1,
                {"pipeline": pipeline_id, "state": "data_lost", "abort_reason": "none"},
            )

    def committed(self, checkpoint: CheckpointRecord) -> None:
        """A checkpoint just marked COMMITTED: count it and record its two phases."""
        attributes = {"pipeline": checkpoint.pipeline_id}
        self._instruments.add(
            CHECKPOINTS, 1, {**attributes, "state": "committed", "abort_reason": "none"}
        )
        completed, committed = checkpoint.completed_at_ms, checkpoint.committed_at_ms
        if completed is None:
            return
        self._instruments.record(
            CHECKPOINT_DURATION,
            (completed - checkpoint.triggered_at_ms) / 1000,
            {**attributes, "phase": "trigger_to_complete"},
        )
        if committed is not None:
            self._instruments.record(
                CHECKPOINT_DURATION,
                (committed - completed) / 1000,
                {**attributes, "phase": "complete_to_committed"},
            )


__all__ = ["CheckpointOutcomes"]
