"""Which checkpoints pruning deletes (issue 14, Also: history stays bounded)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockgate.common.model.ids import CheckpointId
from lockgate.coordinator.domain.history import HistoryEntry, checkpoints_to_prune, is_final
from lockgate.coordinator.domain.states import CheckpointState


def entry(
    n: int, state: CheckpointState, *, outstanding: bool = False, resolved: bool = False
) -> HistoryEntry:
    return HistoryEntry(CheckpointId(n), state, outstanding, resolved)


def test_only_final_checkpoints_beyond_the_newest_kept_go() -> None:
    history = [
        entry(1, CheckpointState.COMMITTED),
        entry(2, CheckpointState.ABORTED, outstanding=True),  # aborts still to send
        entry(3, CheckpointState.DATA_LOST),  # unresolved: the pipeline is FAILED
        entry(4, CheckpointState.ABORTED),
        entry(5, CheckpointState.DATA_LOST, resolved=True),
        entry(6, CheckpointState.COMMITTED),
        entry(7, CheckpointState.COMPLETE),
        entry(8, CheckpointState.TRIGGERED),
    ]
    assert checkpoints_to_prune(history, keep=2) == [1, 4]
    assert checkpoints_to_prune(history, keep=4) == []
    with pytest.raises(ValueError, match="keep must be >= 1"):
        checkpoints_to_prune(history, keep=0)


@given(
    st.lists(
        st.tuples(st.sampled_from(CheckpointState), st.booleans(), st.booleans()), max_size=40
    ),
    st.integers(min_value=1, max_value=10),
)
def test_the_history_left_is_bounded_and_keeps_everything_not_final(
    states: list[tuple[CheckpointState, bool, bool]], keep: int
) -> None:
    history = [entry(n + 1, s, outstanding=o, resolved=r) for n, (s, o, r) in enumerate(states)]
    doomed = set(checkpoints_to_prune(history, keep=keep))
    left = [e for e in history if e.checkpoint_id not in doomed]
    assert all(is_final(e) for e in history if e.checkpoint_id in doomed)
    assert sum(1 for e in left if is_final(e)) == min(keep, sum(1 for e in history if is_final(e)))
    # The newest final checkpoints are the ones kept.
    kept_final = [e.checkpoint_id for e in left if is_final(e)]
    assert all(d < min(kept_final) for d in doomed)
