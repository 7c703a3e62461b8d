"""Which checkpoints of a pipeline's history may go (issue 14, Also): a pipeline running for
a month must cost what it cost on day one.

A checkpoint is *final* once nothing can ever need it again: COMMITTED; ABORTED with every
abort of its transactions acknowledged (until then its handles are still to be aborted);
DATA_LOST once an operator moved past it (until then it makes the pipeline FAILED). The
newest `keep` final checkpoints stay (history, `pipeline checkpoints`, the newest abort in
status); older final ones are deleted with their tasks, ranges and handles, once a tenth
more than `keep` have gathered (`history_slack`). Nothing that is
not final is ever deleted, however old: TRIGGERED, COMPLETE (its handles are the commit
point), ABORTED with aborts outstanding, unresolved DATA_LOST.

A slot whose last checkpoint was deleted counts as never used (`transactional_ids`), which
is right: only final checkpoints are deleted, and their slots are reusable anyway.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from lockgate.common.model.ids import CheckpointId
from lockgate.coordinator.domain.states import CheckpointState

DEFAULT_CHECKPOINT_HISTORY = 1_000
"""Final checkpoints kept per pipeline unless the coordinator's --checkpoint-history says
otherwise: at one checkpoint a second, the last quarter of an hour."""


@dataclass(frozen=True)
class HistoryEntry:
    """What pruning needs to know of one checkpoint."""

    checkpoint_id: CheckpointId
    state: CheckpointState
    aborts_outstanding: bool
    """ABORTED with a task whose abort was not acknowledged yet."""
    data_loss_resolved: bool


def is_final(entry: HistoryEntry) -> bool:
    """Whether nothing can ever need the checkpoint again."""
    if entry.state is CheckpointState.COMMITTED:
        return True
    if entry.state is CheckpointState.ABORTED:
        return not entry.aborts_outstanding
    if entry.state is CheckpointState.DATA_LOST:
        return entry.data_loss_resolved
    return False


def history_slack(keep: int) -> int:
    """How many checkpoints past `keep` a pipeline may hold before its history is pruned
    (back to `keep` final ones): a tenth of `keep`, so pruning reads the history once per
    that many commits; none below 10 (a small history is pruned exactly)."""
    return keep // 10


def checkpoints_to_prune(history: Iterable[HistoryEntry], *, keep: int) -> list[CheckpointId]:
    """The final checkpoints older than the newest `keep` final ones, oldest first."""
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    final = sorted((e.checkpoint_id for e in history if is_final(e)), reverse=True)
    return sorted(final[keep:])


__all__ = [
    "DEFAULT_CHECKPOINT_HISTORY",
    "HistoryEntry",
    "checkpoints_to_prune",
    "history_slack",
    "is_final",
]
