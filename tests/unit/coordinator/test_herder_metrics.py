"""The leader's metrics as the herder records them, on one replica over a SQLite file with
Kafka faked (no sockets): the lag gauge after a pass, and checkpoint outcomes by reason."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader

from lockgate.common.metrics import Instruments
from lockgate.common.model.ids import CheckpointId, CoordinatorId, PipelineId
from lockgate.common.model.pipeline_spec import parse_pipeline_spec
from lockgate.coordinator.domain.checkpoints import CheckpointRecord
from lockgate.coordinator.domain.states import CheckpointState, TargetState
from lockgate.coordinator.herder import CoordinatorSettings, Herder
from lockgate.coordinator.herder.outcomes import CheckpointOutcomes
from lockgate.coordinator.store import open_store
from tests.support.topics import FixedTopics

Points = dict[tuple[str, tuple[tuple[str, object], ...]], float]


def _points(reader: InMemoryMetricReader) -> Points:
    data = reader.get_metrics_data()
    found: Points = {}
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    key = (metric.name, tuple(sorted((point.attributes or {}).items())))
                    found[key] = float(
                        point.sum if isinstance(point, HistogramDataPoint) else point.value  # type: ignore[union-attr]
                    )
    return found


@pytest.fixture
def reader() -> InMemoryMetricReader:
    return InMemoryMetricReader()


@pytest.fixture
def leader(tmp_path: Path, reader: InMemoryMetricReader) -> Iterator[Herder]:
    """A replica that leads, its metrics read in memory, each source partition holding 10
    records."""
    store = open_store(f"sqlite:///{tmp_path / 'state.db'}")
    herder = Herder(
        store=store,
        settings=CoordinatorSettings(
            coordinator_id=CoordinatorId("c1"), advertise="127.0.0.1:7071", lease_ms=60_000
        ),
        topics=FixedTopics(partitions=2, end_offset=10),  # type: ignore[arg-type]
        instruments=Instruments(MeterProvider(metric_readers=[reader]).get_meter("t")),
    )
    herder.lease_keeper.attempt()
    yield herder
    store.close()


def _create(leader: Herder) -> None:
    spec = parse_pipeline_spec(
        {
            "name": "p",
            "source": {"kafka": {"bootstrap_servers": "k:9092", "topics": ["in"]}},
            "sink": {"kafka": {"bootstrap_servers": "k:9092", "topic": "out"}},
        }
    )
    leader.pipelines.create(spec=spec, target_state=TargetState.RUNNING)


def test_the_lag_of_a_pipeline_that_never_completed_is_its_whole_input(
    leader: Herder, reader: InMemoryMetricReader
) -> None:
    _create(leader)
    progress = leader.progress.measure(leader.pipelines.get(PipelineId("p")))
    assert progress.total_lag == 20 and progress.lag_known
    assert progress.last_commit_age_ms is None and progress.records_per_second == 0.0

    leader.progress.refresh(leader.require_fence())
    points = _points(reader)
    for partition in (0, 1):
        key = (
            "lockgate.source.lag",
            (("partition", partition), ("pipeline", "p"), ("topic", "in")),
        )
        assert points[key] == 10
    assert points[("lockgate.leader.failovers", ())] == 1
    assert points[("lockgate.leader.epoch", ())] >= 1
    assert points[("lockgate.lease.renewals", (("outcome", "renewed"),))] == 1
    assert points[("lockgate.tasks", (("pipeline", "p"), ("state", "unassigned")))] >= 1


def test_a_follower_reports_no_lag_task_or_session_gauge(
    leader: Herder, reader: InMemoryMetricReader
) -> None:
    _create(leader)
    leader.progress.refresh(leader.require_fence())
    gauges = {"lockgate.source.lag", "lockgate.tasks", "lockgate.executor.sessions"}
    assert gauges <= {name for name, _ in _points(reader)}
    leader.lease_keeper.resign()
    assert leader.lease_keeper.current_fence() is None
    assert not gauges & {name for name, _ in _points(reader)}


def _record(checkpoint_id: int) -> CheckpointRecord:
    return CheckpointRecord(
        pipeline_id=PipelineId("p"),
        checkpoint_id=CheckpointId(checkpoint_id),
        state=CheckpointState.COMMITTED,
        leader_epoch=1,  # type: ignore[arg-type]
        tasks=(),
        precommitted=frozenset(),
        triggered_at_ms=1_000,
        completed_at_ms=1_500,
        committed_at_ms=1_750,
        aborted_at_ms=None,
        abort_reason=None,
    )


def test_outcomes_by_state_reason_and_phase(reader: InMemoryMetricReader) -> None:
    outcomes = CheckpointOutcomes(
        Instruments(MeterProvider(metric_readers=[reader]).get_meter("t"))
    )
    pid = PipelineId("p")
    outcomes.aborted([(pid, CheckpointId(2)), (pid, CheckpointId(3))], "task reassigned")
    outcomes.aborted([(pid, CheckpointId(4))], "trigger failed: executor e1 is not alive")
    outcomes.committed(_record(1))
    points = _points(reader)
    aborted = ("pipeline", "p"), ("state", "aborted")
    assert points[("lockgate.checkpoints", (("abort_reason", "task_reassigned"), *aborted))] == 2
    assert points[("lockgate.checkpoints", (("abort_reason", "trigger_failed"), *aborted))] == 1
    committed = (("abort_reason", "none"), ("pipeline", "p"), ("state", "committed"))
    assert points[("lockgate.checkpoints", committed)] == 1
    duration = "lockgate.checkpoint.duration"
    assert points[(duration, (("phase", "trigger_to_complete"), ("pipeline", "p")))] == 0.5
    assert points[(duration, (("phase", "complete_to_committed"), ("pipeline", "p")))] == 0.25
