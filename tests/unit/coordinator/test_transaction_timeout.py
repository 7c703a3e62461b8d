"""The sink's transaction timeout against checkpoint and recovery time (issue 14, hole 3)."""

from __future__ import annotations

import dataclasses

import pytest

from lockgate.common.model.ids import CheckpointId, LeaderEpoch, PipelineId
from lockgate.common.model.pipeline_spec import PipelineSpec, parse_pipeline_spec
from lockgate.coordinator.domain.checkpoints import CheckpointRecord
from lockgate.coordinator.domain.errors import InvalidArgument
from lockgate.coordinator.domain.states import CheckpointState
from lockgate.coordinator.domain.transaction_timeout import (
    COMMIT_ROUND_MS,
    RecoveryTime,
    check_transaction_timeout,
    near_timeout_warnings,
)

RECOVERY = RecoveryTime(session_timeout_ms=10_000, reassign_delay_ms=3_000, lease_ms=3_000)


def spec(*, checkpoint_timeout_ms: int, transaction_timeout_ms: int | None = None) -> PipelineSpec:
    sink: dict[str, object] = {"bootstrap_servers": "127.0.0.1:9092", "topic": "out"}
    if transaction_timeout_ms is not None:
        sink["transaction_timeout_ms"] = transaction_timeout_ms
    return parse_pipeline_spec(
        {
            "name": "p",
            "source": {"kafka": {"bootstrap_servers": "127.0.0.1:9092", "topics": ["in"]}},
            "sink": {"kafka": sink},
            "checkpoint": {"timeout_ms": checkpoint_timeout_ms},
        }
    )


def test_recovery_counts_session_reassignment_lease_and_one_commit_retry() -> None:
    assert RECOVERY.recovery_ms() == 10_000 + 3_000 + 3_000 + COMMIT_ROUND_MS


def test_the_defaults_fit_well_within_the_broker_cap() -> None:
    check_transaction_timeout(spec(checkpoint_timeout_ms=60_000), RECOVERY)


def test_a_checkpoint_timeout_that_can_outlive_the_transaction_names_both_fields() -> None:
    bad = spec(checkpoint_timeout_ms=60_000, transaction_timeout_ms=70_000)
    with pytest.raises(InvalidArgument) as raised:
        check_transaction_timeout(bad, RECOVERY)
    assert {v.field for v in raised.value.violations} == {
        "checkpoint.timeout_ms",
        "sink.kafka.transaction_timeout_ms",
    }
    assert "raise sink.kafka.transaction_timeout_ms above 83000" in raised.value.message
    assert "lower checkpoint.timeout_ms below 47000" in raised.value.message
    # One millisecond more than checkpoint + recovery is enough.
    check_transaction_timeout(
        spec(checkpoint_timeout_ms=60_000, transaction_timeout_ms=83_001),
        RECOVERY,
    )


def checkpoint(state: CheckpointState, *, triggered_at_ms: int) -> CheckpointRecord:
    return CheckpointRecord(
        pipeline_id=PipelineId("p"),
        checkpoint_id=CheckpointId(4),
        state=state,
        leader_epoch=LeaderEpoch(1),
        tasks=(),
        precommitted=frozenset(),
        triggered_at_ms=triggered_at_ms,
        completed_at_ms=None,
        committed_at_ms=None,
        aborted_at_ms=None,
        abort_reason=None,
    )


def test_a_complete_checkpoint_past_half_the_timeout_warns_with_what_is_left() -> None:
    old = checkpoint(CheckpointState.COMPLETE, triggered_at_ms=0)
    [warning] = near_timeout_warnings([old], transaction_timeout_ms=20_000, now_ms=12_000)
    assert "checkpoint 4 is COMPLETE but not committed after 12000 ms, 60%" in warning
    assert "in 8000 ms" in warning
    assert near_timeout_warnings([old], transaction_timeout_ms=20_000, now_ms=9_000) == []
    triggered = dataclasses.replace(old, state=CheckpointState.TRIGGERED)
    assert near_timeout_warnings([triggered], transaction_timeout_ms=20_000, now_ms=12_000) == []
