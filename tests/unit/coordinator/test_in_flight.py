"""The leader's record of its in-flight checkpoints (`store/in_flight.py`): what a
transaction may read of it, and when its changes count."""

from __future__ import annotations

import dataclasses

import pytest

from lockgate.common.model.ids import CheckpointId, LeaderEpoch
from lockgate.coordinator.domain.checkpoints import CheckpointRecord
from lockgate.coordinator.domain.states import CheckpointState
from lockgate.coordinator.store.in_flight import InFlightCheckpoints
from tests.unit.coordinator.test_precommits import T0, T1, P, checkpoint

pytestmark = pytest.mark.unit

E1, E2 = LeaderEpoch(1), LeaderEpoch(2)
KEY = (P, CheckpointId(1))
TRIGGERED = {P: {CheckpointId(1): CheckpointState.TRIGGERED}}


def triggered(n: int = 1) -> CheckpointRecord:
    """Checkpoint n of p as its trigger wrote it, on two tasks."""
    return dataclasses.replace(checkpoint(), checkpoint_id=CheckpointId(n))


def kept(record: InFlightCheckpoints, epoch: LeaderEpoch = E1) -> dict[object, CheckpointRecord]:
    """What a transaction of `epoch` entering now finds of checkpoint 1, TRIGGERED."""
    with record.turn(epoch) as turn:
        turn.enter()
        return turn.lookup([KEY], TRIGGERED)


def trigger(record: InFlightCheckpoints, epoch: LeaderEpoch = E1) -> None:
    with record.turn(epoch) as turn:
        turn.enter()
        turn.note_triggered([triggered()])


def test_a_trigger_and_its_precommits_count_once_their_transaction_ended() -> None:
    record = InFlightCheckpoints()
    with record.turn(E1) as turn:
        turn.enter()
        turn.note_triggered([triggered()])
        assert kept(InFlightCheckpoints()) == {}
    assert kept(record) == {KEY: triggered()}
    with record.turn(E1) as turn:
        turn.enter()
        assert turn.lookup([KEY], TRIGGERED)[KEY].precommitted == frozenset()
        turn.note_precommitted({KEY: [T0]})
    assert kept(record)[KEY].precommitted == {T0}
    with record.turn(E1) as turn:
        turn.enter()
        turn.note_left([KEY])
    assert kept(record) == {}, "a completed checkpoint is no longer kept"


def test_a_transaction_that_failed_empties_the_record() -> None:
    """Its commit may have failed after the database applied it: nothing kept is trusted."""
    record = InFlightCheckpoints()
    trigger(record)
    with pytest.raises(RuntimeError), record.turn(E1) as turn:
        turn.enter()
        turn.note_precommitted({KEY: [T0]})
        raise RuntimeError("commit failed")
    assert kept(record) == {}
    assert len(record) == 0


def test_a_transaction_entering_while_another_is_unapplied_reads_nothing_kept() -> None:
    """The first committed and released the write turn; its changes are not applied yet.
    The next one reads the database, and once they are, the one after reads the record."""
    record = InFlightCheckpoints()
    trigger(record)
    with record.turn(E1) as first:
        first.enter()
        first.note_precommitted({KEY: [T0]})
        with record.turn(E1) as second:
            second.enter()
            assert second.lookup([KEY], TRIGGERED) == {}
    assert kept(record)[KEY].precommitted == {T0}


def test_a_turn_not_entered_neither_reads_nor_blocks() -> None:
    """A turn whose transaction never began (its fence refused) changes nothing."""
    record = InFlightCheckpoints()
    trigger(record)
    with pytest.raises(RuntimeError), record.turn(E1):
        raise RuntimeError("fenced")
    assert kept(record) == {KEY: triggered()}


def test_a_new_term_starts_empty_and_the_last_terms_changes_are_dropped() -> None:
    record = InFlightCheckpoints()
    trigger(record)
    with record.turn(E1) as late:
        late.enter()
        late.note_precommitted({KEY: [T1]})
        late.note_triggered([triggered(2)])
        assert kept(record, E2) == {}, "another leader may have written in between"
    trigger(record, E2)
    assert kept(record, E2) == {KEY: triggered()}, "the old term's changes were not applied"
    assert len(record) == 1


def test_a_checkpoint_read_in_another_state_is_forgotten() -> None:
    """Aborted (or gone with its pipeline): it never becomes TRIGGERED again."""
    record = InFlightCheckpoints()
    trigger(record)
    with record.turn(E1) as turn:
        turn.enter()
        assert turn.lookup([KEY], {P: {CheckpointId(1): CheckpointState.ABORTED}}) == {}
        assert turn.lookup([KEY], {}) == {}
    assert len(record) == 0


def test_past_its_limit_the_record_empties() -> None:
    record = InFlightCheckpoints(limit=2)
    with record.turn(E1) as turn:
        turn.enter()
        turn.note_triggered([triggered(1), triggered(2)])
    assert len(record) == 2
    with record.turn(E1) as turn:
        turn.enter()
        turn.note_triggered([triggered(3)])
    assert len(record) == 0
