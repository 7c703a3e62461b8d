"""Checkpoint decisions and transactional id slots."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lockgate.common.kafka_slot_transactions import belongs_to_slot
from lockgate.common.model.ids import CheckpointId, Generation, PipelineId
from lockgate.common.model.pipeline_spec import default_transactional_id_prefix
from lockgate.coordinator.domain.checkpoints import (
    PendingCommit,
    PrecommitCount,
    aborts_cascading_from,
    commit_order,
    completion_blocker,
    is_complete,
    is_timed_out,
    should_trigger,
)
from lockgate.coordinator.domain.states import CheckpointState
from lockgate.coordinator.domain.transactional_ids import (
    TRANSACTIONAL_ID_SLOTS,
    choose_slot,
    transactional_id,
)

C = CheckpointId
T, A, K, X = (
    CheckpointState.TRIGGERED,
    CheckpointState.ABORTED,
    CheckpointState.COMPLETE,
    CheckpointState.COMMITTED,
)


def test_complete_only_when_every_task_precommitted() -> None:
    assert not is_complete(PrecommitCount(tasks=2, precommitted=1))
    assert is_complete(PrecommitCount(tasks=2, precommitted=2))
    assert not is_complete(PrecommitCount(tasks=0, precommitted=0))


def test_completion_waits_for_earlier_checkpoints() -> None:
    assert completion_blocker(C(3), {C(1): X, C(2): T, C(3): T}) == C(2)
    assert completion_blocker(C(3), {C(1): X, C(2): K, C(3): T}) is None
    # An earlier ABORTED one does not block: its in-flight successors aborted with it,
    # so a TRIGGERED one after it started from the last COMPLETE offsets.
    assert completion_blocker(C(3), {C(2): A, C(3): T}) is None
    assert completion_blocker(C(4), {C(2): A, C(3): T, C(4): T}) == C(3)


def test_abort_cascades_to_every_later_in_flight_checkpoint() -> None:
    states = {C(1): K, C(2): T, C(3): T, C(4): T}
    assert aborts_cascading_from(C(2), states) == [C(3), C(4)]
    assert aborts_cascading_from(C(4), states) == []


def test_timeout_and_trigger_decisions() -> None:
    assert not is_timed_out(triggered_at_ms=0, now_ms=1000, timeout_ms=1000)
    assert is_timed_out(triggered_at_ms=0, now_ms=1001, timeout_ms=1000)
    assert should_trigger(last_triggered_at_ms=None, now_ms=0, interval_ms=10, in_flight=0)
    assert not should_trigger(last_triggered_at_ms=5, now_ms=10, interval_ms=10, in_flight=0)
    assert should_trigger(last_triggered_at_ms=0, now_ms=10, interval_ms=10, in_flight=1)
    assert not should_trigger(
        last_triggered_at_ms=0, now_ms=99, interval_ms=10, in_flight=2, max_in_flight=2
    )


def test_commit_order_is_creation_order() -> None:
    p = PipelineId("p")
    pending = [PendingCommit(p, C(5), ()), PendingCommit(p, C(2), ())]
    assert [c.checkpoint_id for c in commit_order(pending)] == [C(2), C(5)]


def test_transactional_id_format_is_unchanged_under_the_default_prefix() -> None:
    # The ids stored before prefixes existed are the default prefix's: nothing to migrate.
    prefix = default_transactional_id_prefix("orders")
    assert transactional_id(prefix, 3, Generation(7), 1) == "lockgate-orders-3-g7-1"
    assert transactional_id("team-a.orders", 3, Generation(7), 1) == "team-a.orders-3-g7-1"


_PREFIXES = st.one_of(
    st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True).map(default_transactional_id_prefix),
    st.from_regex(r"[a-zA-Z0-9._-]{1,16}", fullmatch=True),  # prefixes users choose
)
_IDS = st.tuples(
    _PREFIXES,
    st.integers(0, 12),  # task index
    st.integers(0, 12),  # task generation
    st.integers(0, 12),  # slot
    st.none() | st.integers(0, 12),  # Spark write partition, or the slot id itself
)


@given(_IDS, _IDS)
def test_distinct_prefix_task_generation_slot_and_partition_never_share_an_id(
    one: tuple[str, int, int, int, int | None], other: tuple[str, int, int, int, int | None]
) -> None:
    """Pipeline `a-1`'s ids and pipeline `a`'s (and any two prefixes' the leader lets
    coexist, since it refuses equal ones) never meet, slot ids and write ids alike."""

    def written(key: tuple[str, int, int, int, int | None]) -> str:
        prefix, task, generation, slot, partition = key
        slot_id = transactional_id(prefix, task, Generation(generation), slot)
        return slot_id if partition is None else f"{slot_id}-{partition}"

    assert (written(one) == written(other)) == (one == other)


def test_the_issue_8_pair_no_longer_collides() -> None:
    a_task_1 = transactional_id(default_transactional_id_prefix("a"), 1, Generation(0), 0)
    a_1_task_0 = transactional_id(default_transactional_id_prefix("a-1"), 0, Generation(0), 0)
    assert a_1_task_0 not in (a_task_1, f"{a_task_1}-0")
    assert not belongs_to_slot(a_1_task_0, a_task_1)


_SLOT_KEYS = st.tuples(
    st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True),  # pipeline names may hold '-'
    st.integers(0, 12),  # task index
    st.integers(0, 12),  # task generation
    st.integers(0, 12),  # slot
)


@given(_SLOT_KEYS, _SLOT_KEYS, st.integers(0, 12))
def test_an_id_belongs_to_exactly_its_own_task_generation_and_slot(
    mine: tuple[str, int, int, int], other: tuple[str, int, int, int], partition: int
) -> None:
    """A zombie of an older generation, another slot (`g1-1` vs `g1-10`), another task or
    another pipeline never writes on an id that lists as this slot's, and vice versa."""

    def slot_id(key: tuple[str, int, int, int]) -> str:
        pipeline, task, generation, slot = key
        prefix = default_transactional_id_prefix(pipeline)
        return transactional_id(prefix, task, Generation(generation), slot)

    written = f"{slot_id(other)}-{partition}"  # what a write partition of `other` uses
    assert belongs_to_slot(written, slot_id(mine)) == (mine == other)
    # Ids of the scheme before generations ("lockgate-<p>-<t>-<s>") and the new ones
    # never claim each other, so a stored old slot's abort leaves new ids alone.
    pipeline, task, _, slot = mine
    before = f"lockgate-{pipeline}-{task}-{slot}"
    assert not belongs_to_slot(written, before) or pipeline != other[0]
    assert not belongs_to_slot(f"{before}-{partition}", slot_id(mine))


def test_slot_not_reused_while_its_checkpoint_may_commit() -> None:
    assert choose_slot({}) == 0
    assert choose_slot({0: K}) == 1
    assert choose_slot({0: K, 1: T}) == 2
    assert choose_slot({0: K, 1: T, 2: T}) is None
    assert choose_slot({0: X, 1: T}) == 0
    assert choose_slot({0: K, 1: A}) == 1


@given(st.lists(st.sampled_from(["trigger", "complete", "commit", "abort"]), max_size=60))
def test_overlapping_checkpoints_never_share_a_live_transactional_id(ops: list[str]) -> None:
    """Simulate one task's checkpoints; no two TRIGGERED/COMPLETE ones hold one slot."""
    states: dict[int, CheckpointState] = {}
    slot_of: dict[int, int] = {}
    last_use: dict[int, CheckpointState | None] = {}
    next_id = 1
    for op in ops:
        in_flight = sorted(c for c, s in states.items() if s in (T, K))
        triggered = [c for c in in_flight if states[c] is T]
        complete = [c for c in in_flight if states[c] is K]
        if op == "trigger":
            slot = choose_slot(last_use)
            if slot is None:
                assert len(in_flight) == TRANSACTIONAL_ID_SLOTS
                continue
            states[next_id] = T
            slot_of[next_id] = slot
            next_id += 1
        elif op == "complete" and triggered:
            first = triggered[0]
            if completion_blocker(C(first), {C(c): s for c, s in states.items()}) is None:
                states[first] = K
        elif op == "commit" and complete:
            states[complete[0]] = X
        elif op == "abort" and triggered:
            for c in [
                triggered[0],
                *aborts_cascading_from(C(triggered[0]), {C(c): s for c, s in states.items()}),
            ]:
                states[c] = A
        last_use = {slot_of[c]: states[c] for c in sorted(states)}
        live_slots = [slot_of[c] for c, s in states.items() if s in (T, K)]
        assert len(live_slots) == len(set(live_slots))
