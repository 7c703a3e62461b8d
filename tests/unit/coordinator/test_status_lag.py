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
from lockgate.common.model.pipeline_spec import PipelineSpec, parse_pipeline_spec
from lockgate.coordinator.domain.errors import Unavailable
from lockgate.coordinator.domain.progress import PartitionBounds
from lockgate.coordinator.domain.states import TargetState
from lockgate.coordinator.herder import CoordinatorSettings, Herder
from lockgate.coordinator.herder.progress import LAG_REFRESH_S, LAG_REFRESH_SHARE, Progress
from lockgate.coordinator.store import open_store
from tests.support.topics import FixedTopics


class CountedTopics(FixedTopics):
    """`FixedTopics` (10 records in each of 2 partitions) that counts the offset lookups
    and can stop answering."""

    def __init__(self) -> None:
        super().__init__(partitions=2, end_offset=10)
        self.lookups = 0
        self.asked: list[tuple[str, list[TopicPartition]]] = []
        self.down = False

    def partition_bounds(
        self, bootstrap_servers: str, partitions: Sequence[TopicPartition], properties: object = ()
    ) -> dict[TopicPartition, PartitionBounds]:
        self.lookups += 1
        self.asked.append((bootstrap_servers, list(partitions)))
        if self.down:
            raise ConnectionError("the source cluster does not answer")
        return super().partition_bounds(bootstrap_servers, partitions, properties)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def spec(name: str, topic: str, *, source: str = "k:9092") -> PipelineSpec:
    return parse_pipeline_spec(
        {
            "name": name,
            "source": {"kafka": {"bootstrap_servers": source, "topics": [topic]}},
            "sink": {"kafka": {"bootstrap_servers": "k:9092", "topic": f"{name}-out"}},
        }
    )


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
    herder.pipelines.create(spec=spec("p", "in"), target_state=TargetState.RUNNING)
    yield herder
    store.close()


def progress_of(
    leader: Herder, topics: CountedTopics, clock: Clock, cpu_clock: Clock | None = None
) -> Progress:
    """The leader's progress measurement over the counted topics, on `clock` (and
    `cpu_clock` for the CPU a refresh uses; default: `clock`)."""
    return Progress(
        store=leader.store,
        topics=topics,  # type: ignore[arg-type]
        lease=leader.lease_keeper,
        membership=leader.membership,
        instruments=Instruments.disabled(),
        clock=clock,
        cpu_clock=cpu_clock or clock,
    )


def test_status_on_the_leader_reads_the_measured_lag_and_says_when_it_is_old(
    leader: Herder, topics: CountedTopics
) -> None:
    clock = Clock()
    progress = progress_of(leader, topics, clock)
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


def test_a_refresh_asks_each_source_cluster_once_for_all_its_pipelines(
    leader: Herder, topics: CountedTopics
) -> None:
    """Pipelines on one cluster share one round of ListOffsets; each gets only its own
    partitions' lag from it."""
    leader.pipelines.create(spec=spec("q", "in2"), target_state=TargetState.RUNNING)
    leader.pipelines.create(
        spec=spec("r", "in3", source="other:9092"), target_state=TargetState.RUNNING
    )
    leader.pipelines.create(spec=spec("s", "in4"), target_state=TargetState.STOPPED)
    progress = progress_of(leader, topics, Clock())
    topics.asked.clear()
    progress.refresh(leader.require_fence())
    asked = {
        servers: sorted((tp.topic, tp.partition) for tp in tps) for servers, tps in topics.asked
    }
    assert len(topics.asked) == 2
    assert asked == {
        "k:9092": [("in", 0), ("in", 1), ("in2", 0), ("in2", 1)],
        "other:9092": [("in3", 0), ("in3", 1)],
    }
    for name in ("p", "q", "r"):
        status = progress.status_progress(leader.pipelines.get(PipelineId(name)))
        assert (status.total_lag, status.lag_known) == (20, True), name


def test_a_refresh_that_cannot_read_the_state_database_keeps_the_last_figures(
    leader: Herder, topics: CountedTopics, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lag thread outlives a database that is down: the refresh logs, keeps what it
    measured last, and raises nothing."""
    clock = Clock()
    progress = progress_of(leader, topics, clock)
    progress.refresh(leader.require_fence())

    def down(**_kwargs: object) -> None:
        raise Unavailable("the state database is down", reason="DATABASE_UNAVAILABLE")

    monkeypatch.setattr(leader.store.offsets, "get_offsets_of", down)
    clock.now += 3 * LAG_REFRESH_S
    progress.refresh(leader.require_fence())
    status = progress.status_progress(leader.pipelines.get(PipelineId("p")))
    assert (status.total_lag, status.lag_known) == (20, True)
    assert len(status.warnings) == 1 and "source lag measured 6 s ago" in status.warnings[0]


def test_a_slow_refresh_runs_less_often_so_measuring_stays_a_small_share_of_the_leader(
    leader: Herder, topics: CountedTopics
) -> None:
    """At scale one refresh reads every pipeline, task and position: one that takes long
    waits longer for the next, so refreshing takes at most `LAG_REFRESH_SHARE` of the
    time, and status calls judge a figure old by that longer wait."""
    clock = Clock()
    progress = progress_of(leader, topics, clock)
    pipeline = leader.pipelines.get(PipelineId("p"))
    progress.refresh(leader.require_fence())
    assert progress.refresh_every_s == LAG_REFRESH_S, "a quick refresh keeps the interval"

    slow_s = 3 * LAG_REFRESH_SHARE * LAG_REFRESH_S
    answer = topics.partition_bounds

    def slow_answer(*args: object) -> dict[TopicPartition, PartitionBounds]:
        clock.now += slow_s  # this refresh takes slow_s
        return answer(*args)  # type: ignore[arg-type]

    topics.partition_bounds = slow_answer  # type: ignore[method-assign]
    progress.refresh(leader.require_fence())
    assert progress.refresh_every_s == pytest.approx(slow_s / LAG_REFRESH_SHARE)
    assert progress.refresh_every_s == pytest.approx(3 * LAG_REFRESH_S)
    # Older than two quick refreshes, younger than two slow ones: not old yet.
    clock.now += 2 * LAG_REFRESH_S + 1
    assert progress.status_progress(pipeline).warnings == ()
    clock.now += 4 * LAG_REFRESH_S
    assert len(progress.status_progress(pipeline).warnings) == 1


def test_a_refresh_waiting_long_for_kafka_keeps_the_interval(
    leader: Herder, topics: CountedTopics
) -> None:
    """Only the CPU a refresh uses stretches the interval: one that waited 3 s for a slow
    broker (a first connection, an unreachable cluster's timeout) while using no CPU keeps
    refreshing every `LAG_REFRESH_S`, so its figures are not a minute old."""
    clock, cpu = Clock(), Clock()
    progress = progress_of(leader, topics, clock, cpu_clock=cpu)
    answer = topics.partition_bounds

    def waiting_answer(*args: object) -> dict[TopicPartition, PartitionBounds]:
        clock.now += 3.0  # the wall clock moves; the refresh thread's CPU time does not
        return answer(*args)  # type: ignore[arg-type]

    topics.partition_bounds = waiting_answer  # type: ignore[method-assign]
    progress.refresh(leader.require_fence())
    assert progress.refresh_every_s == LAG_REFRESH_S
