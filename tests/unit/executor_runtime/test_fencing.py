"""Fencing rules of the executor: leader epoch, executor and task generations."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockgate.common.errors import FencingToken, StaleTokenError
from lockgate.common.model.ids import Generation, LeaderEpoch
from lockgate.executor.fencing import (
    LeaderEpochFence,
    TriggerVerdict,
    check_executor_generation,
    decide_leader_epoch,
    decide_trigger,
)


def test_lower_epoch_is_refused_with_both_epochs_in_message_and_log_line() -> None:
    fence = LeaderEpochFence()
    fence.observe(LeaderEpoch(4), leader_id="c2", rpc="TriggerCheckpoint")
    with pytest.raises(StaleTokenError) as refused:
        fence.observe(LeaderEpoch(3), leader_id="c1", rpc="CommitCheckpoint")
    error = refused.value
    assert (error.presented, error.current, error.token) == (3, 4, FencingToken.LEADER_EPOCH)
    assert "3" in error.message and "4" in error.message
    assert error.log_line() == "refused leader_epoch=3 highest_seen=4 rpc=CommitCheckpoint"
    # The refusal changes nothing: the highest stays 4, from c2.
    assert fence.highest_seen == (4, "c2")


def test_equal_epoch_is_accepted_and_higher_becomes_new_highest() -> None:
    fence = LeaderEpochFence()
    assert fence.observe(LeaderEpoch(2), leader_id="c1", rpc="x") is True
    assert fence.observe(LeaderEpoch(2), leader_id="c1", rpc="x") is False
    assert fence.observe(LeaderEpoch(5), leader_id="c3", rpc="x") is True
    assert fence.highest_seen == (5, "c3")


@given(st.lists(st.integers(min_value=1, max_value=50), min_size=1, max_size=40))
def test_highest_seen_is_the_running_maximum_and_only_lower_epochs_are_refused(
    epochs: list[int],
) -> None:
    highest = LeaderEpoch(0)
    for position, epoch in enumerate(epochs):
        decision = decide_leader_epoch(highest_seen=highest, presented=LeaderEpoch(epoch))
        assert decision.accepted == (epoch >= highest)
        assert decision.is_new_leader == (epoch > highest)
        highest = decision.highest_seen
        assert highest == max(epochs[: position + 1])
    assert highest == max(epochs)


def test_fence_is_monotonic_under_concurrent_observers() -> None:
    fence = LeaderEpochFence()
    refusals: list[int] = []
    lock = threading.Lock()

    def observe(epoch: int) -> None:
        try:
            fence.observe(LeaderEpoch(epoch), rpc="x")
        except StaleTokenError:
            with lock:
                refusals.append(epoch)

    threads = [threading.Thread(target=observe, args=(e,)) for e in range(1, 201)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert fence.highest_seen[0] == 200
    assert all(epoch < 200 for epoch in refusals)


@pytest.mark.parametrize("presented", [1, 3])
def test_executor_generation_must_match_exactly(presented: int) -> None:
    with pytest.raises(StaleTokenError) as refused:
        check_executor_generation(
            executor_id="e1",
            current=Generation(2),
            presented=Generation(presented),
            rpc="AbortCheckpoint",
        )
    assert refused.value.token is FencingToken.EXECUTOR_GENERATION
    assert refused.value.subject == "e1"
    assert refused.value.log_line() == (
        f"refused executor_generation={presented} current=2 subject=e1 rpc=AbortCheckpoint"
    )
    check_executor_generation(
        executor_id="e1",
        current=Generation(2),
        presented=Generation(2),
        rpc="AbortCheckpoint",
    )


def _trigger(**overrides: object) -> TriggerVerdict:
    values: dict[str, object] = {
        "running_generation": Generation(3),
        "presented_generation": Generation(3),
        "ready": True,
        "config_version_matches": True,
        "already_triggered": False,
    }
    values.update(overrides)
    return decide_trigger(**values)  # type: ignore[arg-type]


def test_trigger_verdicts() -> None:
    assert _trigger() is TriggerVerdict.ACCEPTED
    assert _trigger(running_generation=None) is TriggerVerdict.NOT_ASSIGNED
    assert _trigger(presented_generation=Generation(2)) is TriggerVerdict.STALE_GENERATION
    assert _trigger(presented_generation=Generation(4)) is TriggerVerdict.STALE_GENERATION
    assert _trigger(already_triggered=True) is TriggerVerdict.DUPLICATE
    assert _trigger(ready=False) is TriggerVerdict.NOT_READY
    assert _trigger(config_version_matches=False) is TriggerVerdict.NOT_READY


def test_stale_generation_wins_over_duplicate() -> None:
    # A zombie leader re-sending an old generation's trigger must hear "stale", not
    # "duplicate", even for a checkpoint id the current generation already took.
    verdict = _trigger(presented_generation=Generation(2), already_triggered=True)
    assert verdict is TriggerVerdict.STALE_GENERATION


def test_check_refuses_a_lower_epoch_and_never_records_a_higher_one() -> None:
    fence = LeaderEpochFence()
    fence.observe(LeaderEpoch(4), leader_id="c2", rpc="Heartbeat")
    fence.check(LeaderEpoch(2**63 - 1), rpc="GetExecutorStatus")
    fence.check(LeaderEpoch(4), rpc="GetExecutorStatus")
    assert fence.highest_seen == (4, "c2")
    with pytest.raises(StaleTokenError) as refused:
        fence.check(LeaderEpoch(3), rpc="GetExecutorStatus")
    assert refused.value.log_line() == "refused leader_epoch=3 highest_seen=4 rpc=GetExecutorStatus"
