"""The executor's record counters move when a checkpoint commits, once, and never for an
aborted one: they must match what read_committed readers of the sink see."""

from __future__ import annotations

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader

from lockgate.common.metrics import Instruments
from lockgate.executor.dataplane.protocol import PrecommitOutput
from lockgate.executor.runtime.batch_counts import MAX_PENDING, BatchCounts
from lockgate.executor.runtime.values import TaskRef


def _counts() -> tuple[BatchCounts, InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    counts = BatchCounts(Instruments(provider.get_meter("t")), wall_clock=lambda: 100.0)
    return counts, reader


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
    counts.precommitted(TaskRef("p", 0), 1, _output(10), 0.2)
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
    counts.precommitted(TaskRef("p", 0), 1, _output(10), 0.2)
    counts.committed("p", 1)
    counts.committed("p", 1)
    assert _values(reader)[WRITTEN] == 10


def test_an_aborted_checkpoint_is_never_counted() -> None:
    counts, reader = _counts()
    counts.precommitted(TaskRef("p", 0), 1, _output(10), 0.2)
    counts.aborted("p", 1)
    counts.committed("p", 1)
    counts.precommitted(TaskRef("p", 0), 2, _output(7), 0.2)
    counts.committed("p", 2)
    assert _values(reader)[WRITTEN] == 7


def test_pending_batches_are_bounded() -> None:
    counts, reader = _counts()
    for checkpoint in range(MAX_PENDING + 1):
        counts.precommitted(TaskRef("p", 0), checkpoint, _output(1), 0.1)
    counts.committed("p", 0)  # the oldest was dropped
    assert WRITTEN not in _values(reader)
    counts.committed("p", MAX_PENDING)
    assert _values(reader)[WRITTEN] == 1
