"""The explicit state machines: the table is the only source of truth."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockgate.coordinator.domain.errors import IllegalTransition
from lockgate.coordinator.domain.states import (
    CHECKPOINT_TRANSITIONS,
    TASK_STATE_TRANSITIONS,
    CheckpointState,
    TaskState,
    transition_checkpoint,
    transition_task_state,
)


@given(st.lists(st.sampled_from(CheckpointState), max_size=20))
def test_checkpoint_walk_follows_the_table(steps: list[CheckpointState]) -> None:
    state = CheckpointState.TRIGGERED
    history = [state]
    for target in steps:
        if target in CHECKPOINT_TRANSITIONS[state]:
            state = transition_checkpoint(state, target)
            assert state is target
        else:
            with pytest.raises(IllegalTransition):
                transition_checkpoint(state, target)
        history.append(state)
    # Once COMPLETE was reached, ABORTED never follows: the commit point is final.
    if CheckpointState.COMPLETE in history:
        after = history[history.index(CheckpointState.COMPLETE) :]
        assert CheckpointState.ABORTED not in after
    # A checkpoint is never both committed and aborted.
    assert not (CheckpointState.COMMITTED in history and CheckpointState.ABORTED in history)


def test_complete_never_aborts_and_says_why() -> None:
    with pytest.raises(IllegalTransition, match="COMPLETE to ABORTED"):
        transition_checkpoint(CheckpointState.COMPLETE, CheckpointState.ABORTED)


def test_commit_is_idempotent_but_final() -> None:
    assert (
        transition_checkpoint(CheckpointState.COMMITTED, CheckpointState.COMMITTED)
        is CheckpointState.COMMITTED
    )
    for target in (CheckpointState.TRIGGERED, CheckpointState.ABORTED, CheckpointState.COMPLETE):
        with pytest.raises(IllegalTransition):
            transition_checkpoint(CheckpointState.COMMITTED, target)


def test_triggered_cannot_skip_to_committed() -> None:
    with pytest.raises(IllegalTransition):
        transition_checkpoint(CheckpointState.TRIGGERED, CheckpointState.COMMITTED)


@given(st.sampled_from(TaskState), st.sampled_from(TaskState))
def test_task_transitions_match_the_table(current: TaskState, target: TaskState) -> None:
    if target in TASK_STATE_TRANSITIONS[current]:
        assert transition_task_state(current, target) is target
    else:
        with pytest.raises(IllegalTransition):
            transition_task_state(current, target)


def test_failed_task_needs_a_restart_to_run_again() -> None:
    with pytest.raises(IllegalTransition):
        transition_task_state(TaskState.FAILED, TaskState.RUNNING)
    restarting = transition_task_state(TaskState.FAILED, TaskState.RESTARTING)
    assert transition_task_state(restarting, TaskState.RUNNING) is TaskState.RUNNING


def test_every_state_has_a_table_row() -> None:
    assert set(TASK_STATE_TRANSITIONS) == set(TaskState)
    assert set(CHECKPOINT_TRANSITIONS) == set(CheckpointState)
