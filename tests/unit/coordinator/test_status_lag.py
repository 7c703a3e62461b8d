"""A status call on the leader reads the lag the leader measures every `LAG_REFRESH_S`
instead of asking Kafka per call, and says when that figure is old (one replica over a
SQLite file, Kafka faked and counted: no sockets)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from lockgate.common.metrics import Instruments
from lockgate.common.model.ids import CoordinatorId, PipelineId
from lockgate.common.model.offsets import TopicPartition
from lockgate.common.model.pipeline_spec import parse_pipeline_spec
from lockgate.coordinator.domain.progress import PartitionBounds
from lockgate.coordinator.domain.states import TargetState
from lockgate.coordinator.herder import CoordinatorSettings, Herder
from lockgate.coordinator.herder.progress import LAG_REFRESH_S, Progress
from lockgate.coordinator.store import open_store
from tests.support.topics import FixedTopics


class CountedTopics(FixedTopics):
    """`FixedTopics` (10 records in each of 2 partitions) that counts the offset lookups
    and can stop answering."""

    def __init__(self) -> None:
        super().__init__(partitions=2, end_offset=10)
        self.lookups = 0
        self.down = False

    def partition_bounds(
        self, bootstrap_servers: str, partitions: Sequence[TopicPartition], properties: object = ()
    ) -> dict[TopicPartition, PartitionBounds]:
        self.lookups += 1
        if self.down:
            raise ConnectionError("the source cluster does not answer")
        return super().partition_bounds(bootstrap_servers, partitions, properties)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def topics() -> CountedTopics:
    return CountedTopics()


@pytest.fixture
def leader(tmp_path: Path, topics: CountedTopics) -> Iterator[Herder]:
    """A replica that leads, with pipeline `p` over 2 partitions of 10 records each."""
    store = open_store(f"sqlite:///{tmp_path / 'state.db'}")
    herder = Herder(
        store=store,
        settings=CoordinatorSettings(
            coordinator_id=CoordinatorId("c1"), advertise="127.0.0.1:7071", lease_ms=60_000
        ),
        topics=topics,  # type: ignore[arg-type]
    )
    herder.lease_keeper.attempt()
    spec = parse_pipeline_spec(
        {
            "name": "p",
            "source": {"kafka": {"bootstrap_servers": "k:9092", "topics": ["in"]}},
            "sink": {"kafka": {"bootstrap_servers": "k:9092", "topic": "out"}},
        }
    )
    herder.pipelines.create(spec=spec, target_state=TargetState.RUNNING)
    yield herder
    store.close()


def test_status_on_the_leader_reads_the_measured_lag_and_says_when_it_is_old(
    leader: Herder, topics: CountedTopics
) -> None:
    clock = Clock()
    progress = Progress(
        store=leader.store,
        topics=topics,  # type: ignore[arg-type]
        lease=leader.lease_keeper,
        membership=leader.membership,
        instruments=Instruments.disabled(),
        clock=clock,
    )
    pipeline = leader.pipelines.get(PipelineId("p"))
    progress.refresh(leader.require_fence())
    measured = topics.lookups
    for _ in range(5):
        status = progress.status_progress(pipeline)
        assert (status.total_lag, status.lag_known, status.warnings) == (20, True, ())
    assert topics.lookups == measured, "a status call asked Kafka for the lag"

    # Kafka stops answering: the leader's refreshes fail, status keeps the last figure and,
    # once it is older than two refreshes, says so.
    topics.down = True
    clock.now += LAG_REFRESH_S
    progress.refresh(leader.require_fence())
    assert progress.status_progress(pipeline).warnings == ()
    clock.now += 2 * LAG_REFRESH_S
    progress.refresh(leader.require_fence())
    status = progress.status_progress(pipeline)
    assert (status.total_lag, status.lag_known) == (20, True)
    assert len(status.warnings) == 1 and "source lag measured 6 s ago" in status.warnings[0]
    # Kafka back: the next refresh gives a fresh figure without the warning.
    topics.down = False
    progress.refresh(leader.require_fence())
    assert progress.status_progress(pipeline).warnings == ()


def test_status_before_the_first_measurement_asks_kafka(
    leader: Herder, topics: CountedTopics
) -> None:
    before = topics.lookups
    status = leader.progress.status_progress(leader.pipelines.get(PipelineId("p")))
    assert status.total_lag == 20 and topics.lookups == before + 1
