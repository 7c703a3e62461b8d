"""A COMPLETE checkpoint whose transactions the broker aborted (issue 14, hole 2), as decisions.

The broker aborts a transaction left open past its `transaction.timeout.ms`; if that
transaction belonged to a COMPLETE checkpoint N, N's commit fails for good (DATA_LOSS) and
the records of N's ranges on those tasks never reach the sink. Retrying cannot help, and
triggering N+1 would read on from N's end offsets past the gap. So:

- N goes DATA_LOST with the broker's answer and the tasks whose transactions were lost
  (`lost_tasks`: every handle of N was tried one by one, so a task whose handles all
  committed is not among them). Later checkpoints of the pipeline must not be committed
  (their records would follow the gap; they are read again): the TRIGGERED ones abort,
  and the COMPLETE ones (commits go in order, so none is COMMITTED), whose handles the
  leader aborts first, go DATA_LOST too, every task lost (`later_in_flight`). COMPLETE
  never becomes ABORTED.
- The restore offsets go back at once (`offsets_after_loss`): each partition whose
  records were lost resumes at N's start offset (the lost ranges are read and written
  again: an operator expects the records back, and skipping is one `offsets --set`
  away), every other partition from where N left it. `pipeline offsets` shows them.
- The pipeline is FAILED (`pipeline_health`) and triggers nothing until an operator moves
  past N: `RestartPipeline(from_checkpoint_id=N)` resumes from those offsets;
  `ResetOffsets` of the STOPPED pipeline resumes from the ones it sets.

A task with several handles (Spark write partitions) of which some committed and some
were lost counts as lost as a whole: its ranges are re-read, so the records of its
committed write partitions are written a second time (at least once for that range).
The broker times out every handle of a checkpoint at about the same moment, so a split
task is rare; the status names the ranges either way.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet

from lockgate.common.model.ids import CheckpointId, TaskId
from lockgate.common.model.offsets import TopicPartition
from lockgate.coordinator.domain.checkpoints import CheckpointRecord
from lockgate.coordinator.domain.errors import FailedPrecondition
from lockgate.coordinator.domain.states import CheckpointState


class PipelineHealth(enum.StrEnum):
    """Whether a pipeline makes progress without an operator."""

    OK = "OK"
    FAILED = "FAILED"


def pipeline_health(blocking: CheckpointRecord | None) -> PipelineHealth:
    """FAILED while the pipeline has a DATA_LOST checkpoint nobody moved past."""
    return PipelineHealth.FAILED if blocking is not None else PipelineHealth.OK


def later_in_flight(
    lost: CheckpointId, states: Mapping[CheckpointId, CheckpointState]
) -> tuple[list[CheckpointId], list[CheckpointId]]:
    """The pipeline's checkpoints after `lost` that must never be committed: (the COMPLETE
    ones, which go DATA_LOST with it, the TRIGGERED ones, which abort). Commits go in
    order, so none after `lost` is COMMITTED."""
    later = sorted(c for c in states if c > lost)
    return (
        [c for c in later if states[c] is CheckpointState.COMPLETE],
        [c for c in later if states[c] is CheckpointState.TRIGGERED],
    )


def check_restart_from(
    blocking: CheckpointRecord | None, requested: CheckpointId, *, pipeline: str
) -> CheckpointRecord:
    """The DATA_LOST checkpoint a restart with `from_checkpoint_id` moves past;
    FailedPrecondition naming the right one (or saying there is none)."""
    if blocking is None:
        raise FailedPrecondition(
            f"from_checkpoint_id: pipeline {pipeline!r} has no DATA_LOST checkpoint to move"
            " past; restart it without from_checkpoint_id",
            reason="NO_DATA_LOSS",
        )
    if blocking.checkpoint_id != requested:
        raise FailedPrecondition(
            f"from_checkpoint_id: checkpoint {requested} of {pipeline!r} is not its DATA_LOST"
            f" checkpoint; use --from-checkpoint {blocking.checkpoint_id}",
            reason="NOT_THE_LOST_CHECKPOINT",
        )
    return blocking


def offsets_after_loss(
    *,
    ranges_of_lost: Sequence[tuple[TaskId, TopicPartition, int, int]],
    lost_tasks: AbstractSet[TaskId],
    ranges_after: Iterable[tuple[TopicPartition, int]],
) -> dict[TopicPartition, int]:
    """Where each partition resumes once an operator moves past DATA_LOST checkpoint N.

    `ranges_of_lost` are N's (task, partition, start, end); `ranges_after` the (partition,
    start) of the later checkpoints that aborted with it. A partition whose records N lost
    resumes at N's start (they are read and written again); one N committed resumes at
    N's end, or at the start of a later checkpoint's range if one read it (never committed).
    """
    offsets: dict[TopicPartition, int] = {}
    for task_id, tp, start, end in ranges_of_lost:
        offsets[tp] = start if task_id in lost_tasks else end
    lost_partitions = {tp for task_id, tp, _, _ in ranges_of_lost if task_id in lost_tasks}
    for tp, start in ranges_after:
        if tp not in lost_partitions:
            offsets[tp] = min(start, offsets.get(tp, start))
    return offsets


__all__ = [
    "PipelineHealth",
    "check_restart_from",
    "later_in_flight",
    "offsets_after_loss",
    "pipeline_health",
]
