"""The executor's record counters move when a checkpoint commits, once, and never for an
aborted one: they must match what read_committed readers of the sink see."""

from __future__ import annotations

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader

from lockgate.common.metrics import Instruments
from lockgate.executor.dataplane.protocol import PrecommitOutput
from lockgate.executor.runtime.batch_counts import MAX_PENDING, BatchCounts
from lockgate.executor.runtime.values import TaskRef
from lockgate.v1 import common_pb2
from tests.support.waits import wait_for
from tests.unit.executor_runtime.runtime_doubles import (
    PIPELINE,
    WAIT_S,
    start_batch,
    start_worker,
    stop_worker,
)


def _instruments() -> tuple[Instruments, InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    return Instruments(MeterProvider(metric_readers=[reader]).get_meter("t")), reader


def _counts() -> tuple[BatchCounts, InMemoryMetricReader]:
    instruments, reader = _instruments()
    return BatchCounts(instruments, wall_clock=lambda: 100.0), reader


def _values(
    reader: InMemoryMetricReader,
) -> dict[tuple[str, tuple[tuple[str, object], ...]], float]:
    data = reader.get_metrics_data()
    values: dict[tuple[str, tuple[tuple[str, object], ...]], float] = {}
    if data is None:
        return values
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    key = (metric.name, tuple(sorted((point.attributes or {}).items())))
                    values[key] = float(
                        point.sum if isinstance(point, HistogramDataPoint) else point.value  # type: ignore[union-attr]
                    )
    return values


def _output(written: int, oldest_ms: int | None = 95_000) -> PrecommitOutput:
    return PrecommitOutput(
        ranges=(),
        handles=(),
        records_read=written + 1,
        records_written=written,
        records_dead_lettered=1,
        bytes_read=written * 20 + 7,
        bytes_written=written * 20,
        oldest_record_timestamp_ms=oldest_ms,
    )


WRITTEN = ("lockgate.task.records.written", (("pipeline", "p"), ("task", "0")))


def test_counted_when_committed_not_before() -> None:
    counts, reader = _counts()
    counts.held(TaskRef("p", 0), 1, _output(10))
    counts.precommitted(TaskRef("p", 0), 0.2)
    assert WRITTEN not in _values(reader)
    counts.committed("p", 1)
    values = _values(reader)
    assert values[WRITTEN] == 10
    assert values[("lockgate.task.records.read", WRITTEN[1])] == 11
    assert values[("lockgate.dead_letter.records", WRITTEN[1])] == 1
    assert values[("lockgate.task.written.size", WRITTEN[1])] == 200
    assert values[("lockgate.task.read.size", WRITTEN[1])] == 207
    # 100 s now - 95 s oldest record: one latency of 5 s.
    assert values[("lockgate.visibility.latency", (("pipeline", "p"),))] == 5.0


def test_a_repeated_commit_counts_once() -> None:
    counts, reader = _counts()
    counts.held(TaskRef("p", 0), 1, _output(10))
    counts.committed("p", 1)
    counts.committed("p", 1)
    assert _values(reader)[WRITTEN] == 10


def test_an_aborted_checkpoint_is_never_counted() -> None:
    counts, reader = _counts()
    counts.held(TaskRef("p", 0), 1, _output(10))
    counts.aborted("p", 1)
    counts.committed("p", 1)
    counts.held(TaskRef("p", 0), 2, _output(7))
    counts.committed("p", 2)
    assert _values(reader)[WRITTEN] == 7


def test_pending_batches_are_bounded() -> None:
    counts, reader = _counts()
    for checkpoint in range(MAX_PENDING + 1):
        counts.held(TaskRef("p", 0), checkpoint, _output(1))
    counts.committed("p", 0)  # the oldest was dropped
    assert WRITTEN not in _values(reader)
    counts.committed("p", MAX_PENDING)
    assert _values(reader)[WRITTEN] == 1


def test_a_dropped_batch_is_never_counted_and_its_checkpoints_other_tasks_still_are() -> None:
    counts, reader = _counts()
    counts.held(TaskRef("p", 0), 1, _output(10))
    counts.held(TaskRef("p", 1), 1, _output(4))
    counts.dropped(TaskRef("p", 0), 1)
    counts.committed("p", 1)
    values = _values(reader)
    assert WRITTEN not in values
    assert values[("lockgate.task.records.written", (("pipeline", "p"), ("task", "1")))] == 4


def test_a_commit_that_reaches_the_executor_before_its_reports_answer_is_counted() -> None:
    # The leader commits as soon as a report makes N COMPLETE, so its CommitCheckpoint can
    # reach the executor before the ReportPrecommits answer does: here it always does.
    instruments, reader = _instruments()
    runtime, coordinator, data_plane = start_worker(instruments=instruments)
    try:
        data_plane.records_written = 10
        coordinator.answer_state = common_pb2.CHECKPOINT_STATE_COMPLETE
        coordinator.before_answer = lambda checkpoint_id: runtime.commit_handles(
            pipeline_name=PIPELINE, checkpoint_id=checkpoint_id, handles=(), sink_properties={}
        )
        start_batch(runtime, data_plane, 1).set()
        wait_for(
            "the committed batch's 10 records counted",
            lambda: _values(reader).get(WRITTEN) == 10,
            timeout_s=WAIT_S,
        )
    finally:
        stop_worker(runtime, data_plane)
