"""The leader's own record of its term's in-flight checkpoints: what a report batch would
otherwise read back from the database (issue 14).

Every report batch checks each report against its checkpoint's trigger rows and the
tasks that already pre-committed it (`domain/precommits.py`). Those rows are the leader's
own writes: it wrote the trigger rows when it triggered N, and each pre-commit when it
recorded one. Reading them back was a fifth of the report transaction, the leader's
serial write at scale. So a leader keeps, for its term, each checkpoint it triggered
with its trigger rows and its pre-committed tasks, and a report batch reads only what it
does not find here. The database stays the record; this is a copy of some of it, and it
is used only where it cannot differ from what the database holds:

- Only for a checkpoint the transaction's own read under the pipeline's lock finds
  TRIGGERED (`checkpoint_states_of`). Of a TRIGGERED checkpoint, nothing but a pre-commit
  changes a trigger row or the pre-committed set (aborts, data loss, acknowledgements and
  pruning touch checkpoints in other states only), and every pre-commit is written
  through a `Turn` here.
- Only in the leader term (`LeaderEpoch`) that wrote it: a new term starts empty, since
  another leader may have written in between. Within a term every fenced write is this
  replica's.
- A change is applied only after its transaction has committed, and a transaction that
  failed (in its block or at its commit, where the outcome may be unknown) empties the
  record. A recreated pipeline's checkpoint N is written by a trigger of this term,
  which replaces what was kept of the deleted pipeline's N.
- Between a commit and the application of its changes the record is stale. The store
  holds the replica's write turn until they are applied (`Database.write_turn`), and a
  transaction that starts while another's changes are unapplied all the same reads
  everything from the database: `Turn.enter` decides that under the write turn, where
  transactions take their turns one at a time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence

from lockgate.common.model.ids import CheckpointId, LeaderEpoch, PipelineId, TaskId
from lockgate.coordinator.domain.checkpoints import CheckpointRecord
from lockgate.coordinator.domain.precommits import CheckpointKey
from lockgate.coordinator.domain.states import CheckpointState

#: More kept checkpoints than this (a leader at scale keeps a few per pipeline; those of
#: deleted pipelines or aborted checkpoints never reported again linger) empties the record.
DEFAULT_LIMIT = 50_000


class InFlightCheckpoints:
    """Checkpoints this replica triggered in its current term, each as triggered with the
    tasks that have pre-committed it since. Thread-safe."""

    def __init__(self, *, limit: int = DEFAULT_LIMIT) -> None:
        self._lock = threading.Lock()
        self._limit = limit
        self._epoch: LeaderEpoch | None = None
        self._kept: dict[CheckpointKey, CheckpointRecord] = {}
        self._open = 0  # turns entered whose changes are not applied yet

    @contextlib.contextmanager
    def turn(self, epoch: LeaderEpoch) -> Iterator[Turn]:
        """A fenced transaction's use of the record, around the transaction (which the
        turn's block opens and commits): changes noted in the block are applied when it
        ends normally, and the record is emptied when it raises."""
        turn = Turn(self, epoch)
        try:
            yield turn
        except BaseException:
            self._end(turn, applied=False)
            raise
        self._end(turn, applied=True)

    def __len__(self) -> int:
        with self._lock:
            return len(self._kept)

    def _enter(self, turn: Turn) -> bool:
        """Whether `turn`'s transaction may read the record (see the module docstring)."""
        with self._lock:
            if self._epoch != turn.epoch:
                self._kept.clear()
                self._epoch = turn.epoch
            usable = self._open == 0
            self._open += 1
            return usable

    def _lookup(
        self,
        keys: Iterable[CheckpointKey],
        states: Mapping[PipelineId, Mapping[CheckpointId, CheckpointState]],
    ) -> dict[CheckpointKey, CheckpointRecord]:
        found = {}
        with self._lock:
            for key in keys:
                record = self._kept.get(key)
                if record is None:
                    continue
                if states.get(key[0], {}).get(key[1]) is CheckpointState.TRIGGERED:
                    found[key] = record
                else:  # it left TRIGGERED (aborted, or completed by another path): for good
                    del self._kept[key]
        return found

    def _end(self, turn: Turn, *, applied: bool) -> None:
        with self._lock:
            if turn.entered:
                self._open -= 1
            if not turn.entered or turn.epoch != self._epoch:
                return
            if not applied:
                self._kept.clear()
                return
            for record in turn.triggered:
                self._kept[(record.pipeline_id, record.checkpoint_id)] = record
            for key, task_ids in turn.precommitted.items():
                kept = self._kept.get(key)
                if kept is not None:
                    self._kept[key] = dataclasses.replace(
                        kept, precommitted=kept.precommitted | task_ids
                    )
            for key in turn.left:
                self._kept.pop(key, None)
            if len(self._kept) > self._limit:
                self._kept.clear()


class Turn:
    """One fenced transaction's reads from and changes to `InFlightCheckpoints`."""

    def __init__(self, owner: InFlightCheckpoints, epoch: LeaderEpoch) -> None:
        self._owner = owner
        self.epoch = epoch
        self.entered = False
        self._usable = False
        self.triggered: list[CheckpointRecord] = []
        self.precommitted: dict[CheckpointKey, frozenset[TaskId]] = {}
        self.left: set[CheckpointKey] = set()

    def enter(self) -> None:
        """Called first inside the transaction, under the write turn (its fence checked)."""
        self.entered = True
        self._usable = self._owner._enter(self)

    def lookup(
        self,
        keys: Iterable[CheckpointKey],
        states: Mapping[PipelineId, Mapping[CheckpointId, CheckpointState]],
    ) -> dict[CheckpointKey, CheckpointRecord]:
        """Those of these checkpoints kept, with all their trigger rows and pre-committed
        tasks, that `states` (read in this transaction, under the pipelines' locks) finds
        TRIGGERED; none when the record may be stale."""
        if not self._usable:
            return {}
        return self._owner._lookup(keys, states)

    def note_triggered(self, records: Iterable[CheckpointRecord]) -> None:
        """Checkpoints this transaction triggered, with their trigger rows."""
        self.triggered.extend(records)

    def note_precommitted(self, accepted: Mapping[CheckpointKey, Sequence[TaskId]]) -> None:
        """Tasks whose pre-commits this transaction stored, per checkpoint."""
        for key, task_ids in accepted.items():
            self.precommitted[key] = self.precommitted.get(key, frozenset()) | frozenset(task_ids)

    def note_left(self, keys: Iterable[CheckpointKey]) -> None:
        """Checkpoints this transaction moved out of TRIGGERED."""
        self.left.update(keys)


__all__ = ["DEFAULT_LIMIT", "InFlightCheckpoints", "Turn"]
