"""How many records of each partition one checkpoint of a task may read (issues 13 and 14).

A checkpoint's batch reads a fixed offset range per partition, chosen before it starts, so
its length in time is set by how many records it may read. Too few and a backlog pays a
checkpoint's fixed cost (about 0.3 s: trigger, Spark job, producers, report) every few
records: a copy draining 1,000,000 records at 50,000 a partition ran at 0.76 of a plain
consume-produce loop, at 250,000 at 1.32 (README, issue 13). Too many and a slow
transform's checkpoint outlives its timeout and aborts every time, so the backlog never
drains (issue 14). No one number suits both, so each task measures and sizes its own.

Rules:
- `source.kafka.max_records_per_partition` is the ceiling (it bounds the memory a batch
  holds); 0 means no limit, and then nothing is sized.
- A task's first checkpoint (a new task, or a new generation of one) may read
  `FIRST_LIMIT` records a partition, or the ceiling if lower: nothing is measured yet.
- After each pre-commit, its rate (the longest range's records over the batch's seconds)
  sizes the next when the pre-commit says something about it: when it stopped a range at
  its limit (records may be left) or took longer than the target. The next limit is the
  rate times the target, within [`FLOOR`, ceiling]: a fast copy reaches the ceiling in a
  step or two, a slow transform shrinks until its checkpoints take about the target. A
  pre-commit that read all there was within the target keeps the limit (its size was the
  input's, not the rate's).
- A pre-commit that failed after the target shrinks the limit as if it had read its
  whole limit in that time: a batch cancelled at the timeout is retried smaller.
- The target is `TARGET_SHARE_OF_TIMEOUT` of the checkpoint's timeout (6 s of the default
  60 s): room for the commit, a retry and a slower batch than the last.
- `backlog_left` is what the leader hears (`ReportPrecommit.backlog_left`): a range as long
  as its limit. The leader then triggers the next checkpoint at once.

The sizing is the executor's alone: the leader never needs the limit, only whether a
pre-commit stopped at it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from lockgate.common.model.offsets import OffsetRange

#: Records a partition a task's first checkpoint may read (at most the ceiling).
FIRST_LIMIT = 50_000

#: The fewest records a partition a checkpoint is sized to (at most the ceiling): a
#: checkpoint still moves, however slow its records.
FLOOR = 1_000

#: The share of the checkpoint timeout a checkpoint's batch is sized to take.
TARGET_SHARE_OF_TIMEOUT = 0.1


@dataclass
class CheckpointSize:
    """One task's checkpoint size: the records a partition its next checkpoint may read."""

    ceiling: int
    limit: int

    @classmethod
    def first(cls, ceiling: int) -> CheckpointSize:
        """A task's size before any checkpoint ran: `FIRST_LIMIT` or the ceiling if lower
        (0, no limit, if the ceiling is 0)."""
        return cls(ceiling=ceiling, limit=min(ceiling, FIRST_LIMIT) if ceiling > 0 else 0)

    def observe(
        self, *, limit: int, ranges: Iterable[OffsetRange], seconds: float, timeout_s: float
    ) -> bool:
        """Size the next checkpoint from a pre-commit that read `ranges` under `limit` in
        `seconds` of its batch; returns whether it may have left records (a range as long
        as `limit`)."""
        if limit <= 0:
            return False
        longest = max((r.size for r in ranges), default=0)
        backlog_left = longest >= limit
        target_s = timeout_s * TARGET_SHARE_OF_TIMEOUT
        if longest > 0 and (backlog_left or seconds > target_s):
            self._resize(rate=longest / max(seconds, 1e-3), target_s=target_s)
        return backlog_left

    def failed(self, *, limit: int, seconds: float, timeout_s: float) -> None:
        """A pre-commit under `limit` failed after `seconds`: shrink if it ran past the
        target, as if it had read all of `limit` in that time."""
        target_s = timeout_s * TARGET_SHARE_OF_TIMEOUT
        if limit > 0 and seconds > target_s:
            self._resize(rate=limit / seconds, target_s=target_s)

    def _resize(self, *, rate: float, target_s: float) -> None:
        floor = min(FLOOR, self.ceiling)
        self.limit = max(floor, min(self.ceiling, int(rate * target_s)))


__all__ = ["FIRST_LIMIT", "FLOOR", "TARGET_SHARE_OF_TIMEOUT", "CheckpointSize"]
