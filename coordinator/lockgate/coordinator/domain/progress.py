"""How far behind a pipeline is, and how fast it goes: pure arithmetic over plain values.

- **Source lag** of a partition: its log end offset as a read_committed consumer sees it
  (the last stable offset) minus where the pipeline resumes it (the end offset of its last
  COMPLETE checkpoint). A partition the pipeline has no position for yet resumes from its
  log start offset with ``starting_offsets: earliest``, and counts 0 with ``latest`` (it will
  start at whatever end it finds). Records the broker already deleted cannot be read, so the
  position is never taken below the log start offset; a lag is never negative.
- **Records per second**: records read by the most recent COMMITTED checkpoints divided by
  the time from the oldest one's trigger to the newest one's commit (database clock).
- **Age** of the last committed checkpoint: now minus its commit time.

Abort reasons are free text (they name executors and tasks); `abort_kind` maps one to the
small fixed set the ``lockgate.checkpoints`` metric is labelled with.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lockgate.common.model.offsets import TopicPartition
from lockgate.common.model.pipeline_spec import StartingOffsets

#: How many of the newest COMMITTED checkpoints the records/s rate is taken over.
RATE_WINDOW_CHECKPOINTS = 10


@dataclass(frozen=True)
class PartitionBounds:
    """A source partition's log start offset and read_committed end offset."""

    start: int
    end: int


@dataclass(frozen=True)
class PartitionLag:
    """Records of one source partition not yet in a COMPLETE checkpoint."""

    partition: TopicPartition
    lag: int


def source_lag(
    *,
    bounds: Mapping[TopicPartition, PartitionBounds],
    resume_offsets: Mapping[TopicPartition, int],
    starting_offsets: StartingOffsets,
) -> tuple[PartitionLag, ...]:
    """The lag of every partition in ``bounds``, in topic-partition order (module docstring)."""
    lags: list[PartitionLag] = []
    for tp in sorted(bounds, key=lambda p: (p.topic, p.partition)):
        edge = bounds[tp]
        resume = resume_offsets.get(tp)
        if resume is None:
            resume = edge.start if starting_offsets is StartingOffsets.EARLIEST else edge.end
        lags.append(PartitionLag(tp, max(0, edge.end - max(resume, edge.start))))
    return tuple(lags)


@dataclass(frozen=True)
class CommittedCheckpoint:
    """What the rate needs of one COMMITTED checkpoint."""

    triggered_at_ms: int
    committed_at_ms: int
    records_read: int


def records_per_second(committed: Sequence[CommittedCheckpoint]) -> float:
    """Records read per second over ``committed`` (the newest ones, any order); 0.0 with
    none, or when they span no time."""
    if not committed:
        return 0.0
    span_ms = max(c.committed_at_ms for c in committed) - min(c.triggered_at_ms for c in committed)
    if span_ms <= 0:
        return 0.0
    return sum(c.records_read for c in committed) * 1000.0 / span_ms


def checkpoint_age_ms(*, committed_at_ms: int | None, now_ms: int) -> int | None:
    """How long ago the last checkpoint was committed; None if none was."""
    if committed_at_ms is None:
        return None
    return max(0, now_ms - committed_at_ms)


class AbortKind(enum.StrEnum):
    """Why a checkpoint aborted, as the ``abort_reason`` label of ``lockgate.checkpoints``."""

    TIMEOUT = "timeout"
    TRIGGER_FAILED = "trigger_failed"
    TASK_FAILED = "task_failed"
    LEADER_CHANGED = "leader_changed"
    PIPELINE_STOPPED = "pipeline_stopped"
    PIPELINE_DELETED = "pipeline_deleted"
    TASK_REASSIGNED = "task_reassigned"
    TASK_RESTARTED = "task_restarted"
    OTHER = "other"


# The reasons the herder and the store write (herder/checkpoints.py, herder/reports.py,
# herder/pipelines.py, store/pipeline_store.py, domain/checkpoints.py timeout_reason),
# matched by how they start.
_KIND_BY_PREFIX: tuple[tuple[str, AbortKind], ...] = (
    ("trigger failed", AbortKind.TRIGGER_FAILED),
    ("leader changed", AbortKind.LEADER_CHANGED),
    ("pipeline stopped", AbortKind.PIPELINE_STOPPED),
    ("pipeline deleted", AbortKind.PIPELINE_DELETED),
    ("task reassigned", AbortKind.TASK_REASSIGNED),
    ("task restarted", AbortKind.TASK_RESTARTED),
    ("task ", AbortKind.TASK_FAILED),
    ("no pre-commit", AbortKind.TIMEOUT),
    ("timed out", AbortKind.TIMEOUT),
)


def abort_kind(reason: str) -> AbortKind:
    """The fixed kind of a free-text abort reason (OTHER when none matches)."""
    text = reason.strip().lower()
    for prefix, kind in _KIND_BY_PREFIX:
        if text.startswith(prefix):
            return kind
    return AbortKind.OTHER


__all__ = [
    "RATE_WINDOW_CHECKPOINTS",
    "AbortKind",
    "CommittedCheckpoint",
    "PartitionBounds",
    "PartitionLag",
    "abort_kind",
    "checkpoint_age_ms",
    "records_per_second",
    "source_lag",
]
