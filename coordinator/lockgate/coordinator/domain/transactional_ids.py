"""Kafka `transactional.id` allocation per task generation and slot.

The id of task `t` of a pipeline whose prefix is `P` (`sink.kafka.transactional_id_prefix`,
by default `lockgate-<pipeline>`), at task generation `g`, in slot `s` is `P-<t>-g<g>-<s>`;
its Spark write partition k writes with `<that id>-<k>`. Each task owns a small pool of
slots (`TRANSACTIONAL_ID_SLOTS`) per generation.

Why two pipelines' ids never collide: read from its end, an id has exactly one parse. Its
last "-"-separated fields are either `<t>`, `g<g>`, `<s>` or `<t>`, `g<g>`, `<s>`, `<k>`
(digits, and `g` followed by digits); the second from the end is `g<g>` in the first form
and digits in the second, so no id has both forms, and the prefix is whatever precedes
those fields, whatever "-" it holds. Equal ids thus mean equal (prefix, t, g, s, k). The
prefix is the one thing that could be shared, so the leader refuses a prefix another
pipeline has (`check_prefix_free`); default prefixes differ because pipeline names do.
(Before generations, ids were `lockgate-<p>-<t>-<s>`, with no such parse: pipeline `a-1`'s
`lockgate-a-1-0-0` was also a write id of pipeline `a`'s task 1.)

Why the generation: `init_transactions()` on a transactional id aborts whatever transaction
is open on it (DESIGN.md, Kafka facts, and "Transactional ids and zombies"). An executor
paused or cut off past its session while a batch of checkpoint N ran (a zombie) may wake
up and open a producer on N's ids at any later time: nothing can wait for it. Its task
moved meanwhile, and every move or restart gives the task a new generation, so every
later checkpoint of the task writes on ids of a newer generation. The zombie's
`init_transactions` can only touch ids of its own, older generation: it fences itself
and aborts its own batch, never a live checkpoint's transaction.

Why slots: with overlapping checkpoints, task t pre-commits N (its transaction on some id
stays open until the leader commits it) while it already writes N+1. If N+1 used the same
id, the producer for N+1 would abort N's pre-committed transaction, possibly after the
leader wrote COMPLETE for N: data loss.

Rule: a slot may be reused only once the checkpoint that last used it is COMMITTED or
ABORTED (whatever generation that checkpoint had: the rule stays the simple one, and
bounds the checkpoints in flight per task by the pool size).
- COMMITTED: the transaction is committed and acked; a new `init_transactions` on the id
  only bumps the epoch.
- ABORTED: the transaction must die anyway; `init_transactions` by the next user is
  exactly how it gets aborted (and fences a zombie still writing on it). In a new
  generation the id differs: the new task owner aborts the old id's open transactions
  itself, by listing them (`kafka_slot_transactions.open_transactions_of_slot`). The pipeline
  triggers nothing while an abort of it is unanswered (`trigger_due`, `has_lingering`),
  and an executor refuses to fence a slot for N once a later checkpoint claimed it
  (executor `committer.SlotClaims`): an abort call the leader gave up on may still run
  there after a retry was answered and the slot reused.
- TRIGGERED (in flight) or COMPLETE (committing): never reused; N+1 takes another slot.

Walk-through, pool of 3, overlap of two: N=1 takes slot 0; N=2 triggers while 1 commits,
slot 0 is busy (1 is COMPLETE) so it takes slot 1; 1 becomes COMMITTED; N=3 triggers and
takes slot 0 again (lowest free). If 2 aborts, slot 1 is free for N=4 and its producer's
`init_transactions` aborts 2's transaction if no one did. A task is triggered only when
a slot is free, which bounds the checkpoints in flight per task by the pool size.
The id is deterministic per (task, generation, slot) so Spark's retried or speculative
attempts of a batch writer share it and fence each other (DESIGN.md).

Bound on distinct ids: a task writes on at most `TRANSACTIONAL_ID_SLOTS` x (its Spark
write partitions) ids per generation, and its generation grows only when it is
(re)assigned or restarted, not per checkpoint. The broker forgets an id that no producer
used for `transactional.id.expiration.ms` (default 7 days), so it holds at most slots x
write partitions x (generations the task went through within that window) ids per task.
The coordinator's `transactional_ids` table keeps one row per (task, slot): the slot's
latest id.

Ids written before the generation was added (`lockgate-<p>-<t>-<s>`) stay valid where
they are stored: a checkpoint's handles and its tasks' rows carry their own ids, and
`belongs_to_slot` never mistakes one scheme's id for the other's (the `g` field is not
a number).
"""

from __future__ import annotations

from collections.abc import Mapping

from lockgate.common.model.ids import Generation, PipelineId
from lockgate.coordinator.domain.errors import InvalidArgument
from lockgate.coordinator.domain.states import CheckpointState

TRANSACTIONAL_ID_SLOTS = 3
"""Slots per task and generation: one committing checkpoint, one pre-committing, one spare."""

# DATA_LOST: the broker already aborted (or the leader aborted) its transactions.
_REUSABLE = frozenset(
    {CheckpointState.COMMITTED, CheckpointState.ABORTED, CheckpointState.DATA_LOST}
)


def transactional_id(prefix: str, task_index: int, generation: Generation, slot: int) -> str:
    """Return the Kafka `transactional.id` of a task's slot in the task's generation, under
    its pipeline's prefix (`PipelineSpec.transactional_id_prefix`)."""
    return f"{prefix}-{task_index}-g{generation}-{slot}"


def check_prefix_free(
    pipeline_id: PipelineId, prefix: str, taken: Mapping[str, PipelineId]
) -> None:
    """Refuse a prefix another pipeline's ids start with (`taken`: prefix -> pipeline, the
    other pipelines'): the two would write on the same ids and fence each other."""
    owner = taken.get(prefix)
    if owner is not None and owner != pipeline_id:
        raise InvalidArgument.for_field(
            "sink.kafka.transactional_id_prefix",
            f"{prefix!r} is the transactional id prefix of pipeline {owner!r}: their "
            "producers would fence each other; choose a prefix of this pipeline's own",
        )


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
