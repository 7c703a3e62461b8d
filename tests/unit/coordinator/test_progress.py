"""Source lag, records/s and abort kinds: the arithmetic behind status and the metrics."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockgate.common.model.ids import CheckpointId, PipelineId, TaskId
from lockgate.common.model.offsets import TopicPartition
from lockgate.common.model.pipeline_spec import StartingOffsets
from lockgate.coordinator.domain.aborts import timeout_reason
from lockgate.coordinator.domain.checkpoints import CheckpointRecord, TaskTrigger
from lockgate.coordinator.domain.progress import (
    AbortKind,
    CommittedCheckpoint,
    PartitionBounds,
    abort_kind,
    checkpoint_age_ms,
    records_per_second,
    source_lag,
)
from lockgate.coordinator.domain.states import CheckpointState

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def test_lag_is_end_minus_where_the_pipeline_resumes() -> None:
    lags = source_lag(
        bounds={A1: PartitionBounds(0, 50), A0: PartitionBounds(0, 100)},
        resume_offsets={A0: 60, A1: 50},
        starting_offsets=StartingOffsets.EARLIEST,
    )
    assert [(p.partition, p.lag) for p in lags] == [(A0, 40), (A1, 0)]


def test_a_partition_without_a_position_counts_from_where_the_pipeline_starts() -> None:
    bounds = {A0: PartitionBounds(start=10, end=30)}
    earliest = source_lag(
        bounds=bounds, resume_offsets={}, starting_offsets=StartingOffsets.EARLIEST
    )
    latest = source_lag(bounds=bounds, resume_offsets={}, starting_offsets=StartingOffsets.LATEST)
    assert earliest[0].lag == 20
    assert latest[0].lag == 0


def test_deleted_records_are_not_lag() -> None:
    # Retention deleted offsets 0..79: the pipeline can only read from 80.
    lags = source_lag(
        bounds={A0: PartitionBounds(start=80, end=100)},
        resume_offsets={A0: 5},
        starting_offsets=StartingOffsets.EARLIEST,
    )
    assert lags[0].lag == 20


def test_partitions_kafka_did_not_answer_for_are_left_out() -> None:
    lags = source_lag(
        bounds={B0: PartitionBounds(0, 7)},
        resume_offsets={A0: 1, B0: 2},
        starting_offsets=StartingOffsets.EARLIEST,
    )
    assert [p.partition for p in lags] == [B0]


@given(
    start=st.integers(0, 10**6),
    length=st.integers(0, 10**6),
    resume=st.one_of(st.none(), st.integers(0, 3 * 10**6)),
)
def test_lag_is_never_negative_nor_more_than_the_log(
    start: int, length: int, resume: int | None
) -> None:
    bounds = {A0: PartitionBounds(start, start + length)}
    (lag,) = source_lag(
        bounds=bounds,
        resume_offsets={} if resume is None else {A0: resume},
        starting_offsets=StartingOffsets.EARLIEST,
    )
    assert 0 <= lag.lag <= length


def test_records_per_second_spans_oldest_trigger_to_newest_commit() -> None:
    committed = [
        CommittedCheckpoint(triggered_at_ms=2_000, committed_at_ms=3_000, records_read=300),
        CommittedCheckpoint(triggered_at_ms=1_000, committed_at_ms=2_000, records_read=100),
    ]
    assert records_per_second(committed) == pytest.approx(200.0)
    assert records_per_second([]) == 0.0
    same_instant = [CommittedCheckpoint(5, 5, 10)]
    assert records_per_second(same_instant) == 0.0


def test_checkpoint_age() -> None:
    assert checkpoint_age_ms(committed_at_ms=None, now_ms=10) is None
    assert checkpoint_age_ms(committed_at_ms=4_000, now_ms=6_500) == 2_500
    assert checkpoint_age_ms(committed_at_ms=7_000, now_ms=6_500) == 0  # clock step back


def _triggered() -> CheckpointRecord:
    return CheckpointRecord(
        pipeline_id=PipelineId("p"),
        checkpoint_id=CheckpointId(3),
        state=CheckpointState.TRIGGERED,
        leader_epoch=1,  # type: ignore[arg-type]
        tasks=(TaskTrigger(TaskId("p/0"), 1, "e1", "p-0-0", 0),),  # type: ignore[arg-type]
        precommitted=frozenset(),
        triggered_at_ms=0,
        completed_at_ms=None,
        committed_at_ms=None,
        aborted_at_ms=None,
        abort_reason=None,
    )


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        (timeout_reason(_triggered(), timeout_ms=30_000), AbortKind.TIMEOUT),
        ("trigger failed: executor e1 is not alive", AbortKind.TRIGGER_FAILED),
        ("task p/0 failed: bad record at t[0]@5", AbortKind.TASK_FAILED),
        ("leader changed", AbortKind.LEADER_CHANGED),
        ("pipeline stopped", AbortKind.PIPELINE_STOPPED),
        ("pipeline deleted", AbortKind.PIPELINE_DELETED),
        ("task reassigned", AbortKind.TASK_REASSIGNED),
        ("task restarted", AbortKind.TASK_RESTARTED),
        ("something new", AbortKind.OTHER),
    ],
)
def test_abort_reasons_the_code_writes_have_a_kind(reason: str, kind: AbortKind) -> None:
    assert abort_kind(reason) is kind
