"""Kafka `transactional.id` allocation per task slot.

The id of task `t` of pipeline `p` in slot `s` is `lockgate-<p>-<t>-<s>`; each task owns a
small pool of slots (`TRANSACTIONAL_ID_SLOTS`).

Why slots: `init_transactions()` on a transactional id aborts whatever transaction is open
on it (DESIGN.md, Kafka facts). With overlapping checkpoints, task t pre-commits N (its
transaction on some id stays open until the leader commits it) while it already writes
N+1. If N+1 used the same id, the producer for N+1 would abort N's pre-committed
transaction, possibly after the leader wrote COMPLETE for N: data loss.

Rule: a slot may be reused only once the checkpoint that last used it is COMMITTED or
ABORTED.
- COMMITTED: the transaction is committed and acked; a new `init_transactions` on the id
  only bumps the epoch.
- ABORTED: the transaction must die anyway; `init_transactions` by the next user is
  exactly how it gets aborted (and fences a zombie still writing on it).
- TRIGGERED (in flight) or COMPLETE (committing): never reused; N+1 takes another slot.

Walk-through, pool of 3, overlap of two: N=1 takes slot 0; N=2 triggers while 1 commits,
slot 0 is busy (1 is COMPLETE) so it takes slot 1; 1 becomes COMMITTED; N=3 triggers and
takes slot 0 again (lowest free). If 2 aborts, slot 1 is free for N=4 and its producer's
`init_transactions` aborts 2's transaction if no one did. A task is triggered only when
a slot is free, which bounds the checkpoints in flight per task by the pool size.
The id is deterministic per (task, slot) so Spark's retried or speculative attempts of a
batch writer share it and fence each other (DESIGN.md).
"""

from __future__ import annotations

from collections.abc import Mapping

from lockgate.common.model.ids import PipelineId
from lockgate.coordinator.domain.states import CheckpointState

TRANSACTIONAL_ID_SLOTS = 3
"""Slots per task: one committing checkpoint, one pre-committing, one spare."""

_REUSABLE = frozenset({CheckpointState.COMMITTED, CheckpointState.ABORTED})


def transactional_id(pipeline_id: PipelineId, task_index: int, slot: int) -> str:
    """Return the Kafka `transactional.id` of a task's slot."""
    return f"lockgate-{pipeline_id}-{task_index}-{slot}"


def choose_slot(
    last_use: Mapping[int, CheckpointState | None], *, pool_size: int = TRANSACTIONAL_ID_SLOTS
) -> int | None:
    """Return the lowest slot that may be used now, or None if all are busy.

    `last_use` maps a slot to the state of the checkpoint that last used it (None or
    absent: never used).
    """
    for slot in range(pool_size):
        state = last_use.get(slot)
        if state is None or state in _REUSABLE:
            return slot
    return None
