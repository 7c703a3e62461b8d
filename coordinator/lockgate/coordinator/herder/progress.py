"""How far behind each pipeline is and how fast it goes, for `GetPipelineStatus` and the
leader's gauges (`lockgate.source.lag`, `lockgate.tasks`, `lockgate.executor.sessions`,
`lockgate.leader.epoch`).

The arithmetic is `domain/progress.py`; the Kafka offsets come from
`store/kafka_topics.py` and the positions from SQL. The leader measures every pipeline every
`LAG_REFRESH_S` seconds on a thread of its own (a slow or unreachable Kafka cluster must not
hold up the work loop's triggers and commits). A refresh reads every pipeline, task and
position, so at scale it costs the leader in proportion to the cluster: it then runs less
often, so that it takes at most `LAG_REFRESH_SHARE` of the leader's CPU (`refresh_interval_s`
of the refresh thread's CPU time: issue 14, the leader under one core at 10,000 tasks). Time
spent waiting for Kafka does not count: a slow or unreachable cluster must not make the
figures older than its answers. The lag gauge and the leader's status calls
show that measurement, so neither waits for Kafka (a status call warns when the figure is
old: Kafka has not answered since). A follower's status call measures its pipeline now;
followers report no lag, task or session gauge (the leader does), so summing over
replicas does not count twice.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from lockgate.common.metrics import (
    EXECUTOR_SESSIONS,
    LEADER_EPOCH,
    SOURCE_LAG,
    TASKS,
    Attributes,
    Instruments,
)
from lockgate.common.model.ids import PipelineId
from lockgate.common.model.kafka_properties import KafkaProperties
from lockgate.common.model.offsets import TopicPartition
from lockgate.coordinator.domain.lease import Fence
from lockgate.coordinator.domain.pipelines import PartitionOffset, PipelineRecord, TaskRecord
from lockgate.coordinator.domain.progress import (
    RATE_WINDOW_CHECKPOINTS,
    PartitionBounds,
    PartitionLag,
    checkpoint_age_ms,
    records_per_second,
    source_lag,
)
from lockgate.coordinator.domain.states import TargetState
from lockgate.coordinator.herder.lease_keeper import LeaseKeeper, WhileLeading
from lockgate.coordinator.herder.membership import Membership
from lockgate.coordinator.herder.pipelines import all_pipelines
from lockgate.coordinator.store.kafka_topics import KafkaTopics
from lockgate.coordinator.store.sql_store import SqlStore

#: Seconds between two lag measurements of the leader (each asks Kafka for every pipeline).
LAG_REFRESH_S = 2.0
#: At most this share of the leader's CPU goes to measuring: a refresh that used more CPU
#: than `LAG_REFRESH_SHARE * LAG_REFRESH_S` waits longer than `LAG_REFRESH_S` for the next one.
LAG_REFRESH_SHARE = 0.05
#: A status call warns that the lag is old past this many refreshes without a new figure.
_STALE_AFTER_REFRESHES = 2
_LOG = logging.getLogger(__name__)


def refresh_interval_s(cpu_s: float) -> float:
    """How long after a refresh that used `cpu_s` of CPU the next one starts:
    `LAG_REFRESH_S`, or longer, so that refreshing takes at most `LAG_REFRESH_SHARE` of the
    leader's CPU."""
    return max(LAG_REFRESH_S, cpu_s / LAG_REFRESH_SHARE)


@dataclass(frozen=True)
class PipelineProgress:
    """A pipeline's lag, rate and freshness, as `GetPipelineStatus` returns them."""

    lags: tuple[PartitionLag, ...]
    lag_known: bool
    """False if Kafka did not answer for some source partition: `lags` has the others."""
    records_per_second: float
    """Source offsets consumed per second over the newest committed checkpoints."""
    last_commit_age_ms: int | None
    """How long ago the newest checkpoint was committed; None if none was."""
    warnings: tuple[str, ...] = ()
    """The lag is an old figure: its source cluster has not answered since."""

    @property
    def total_lag(self) -> int:
        """The lag summed over the partitions measured."""
        return sum(p.lag for p in self.lags)


@dataclass(frozen=True)
class _MeasuredLag:
    lags: tuple[PartitionLag, ...]
    lag_known: bool
    measured_at: float
    """This process's monotonic clock."""


class Progress:
    """Measures pipelines' progress; registers the leader's gauges on `instruments`."""

    def __init__(
        self,
        *,
        store: SqlStore,
        topics: KafkaTopics,
        lease: LeaseKeeper,
        membership: Membership,
        instruments: Instruments,
        clock: Callable[[], float] = time.monotonic,
        cpu_clock: Callable[[], float] = time.thread_time,
    ) -> None:
        self._store = store
        self._topics = topics
        self._lease = lease
        self._membership = membership
        self._lock = threading.Lock()
        self._clock = clock
        self._cpu_clock = cpu_clock
        self._lags: dict[PipelineId, tuple[PartitionLag, ...]] = {}
        """The last refresh's lags, for the gauge: a pipeline Kafka did not answer for has none."""
        self._cache: dict[PipelineId, _MeasuredLag] = {}
        """The newest complete lag measured of each pipeline, for status calls."""
        self.refresh_every_s = LAG_REFRESH_S
        """The wait before the next refresh (`refresh_interval_s` of the last one)."""
        self._thread = WhileLeading(
            name="source-lag", lease=lease, work=self.refresh, every_s=lambda: self.refresh_every_s
        )
        instruments.observe(SOURCE_LAG, self._lag_reading)
        instruments.observe(TASKS, self._task_reading)
        instruments.observe(EXECUTOR_SESSIONS, self._session_reading)
        instruments.observe(LEADER_EPOCH, self._epoch_reading)

    def status_progress(self, pipeline: PipelineRecord) -> PipelineProgress:
        """The pipeline's progress for a status call: on the leader, the lag it measured
        last (every `refresh_every_s`; a status call never waits for Kafka), with a warning
        once that figure is older than two refreshes (Kafka has not answered since); on a
        follower, or before the leader measured it, `measure` asks Kafka now."""
        with self._lock:
            cached = self._cache.get(pipeline.pipeline_id)
        if cached is None or not self._leading():
            return self.measure(pipeline)
        age_s = self._clock() - cached.measured_at
        stale = age_s > _STALE_AFTER_REFRESHES * self.refresh_every_s
        return self._with_lag(
            pipeline,
            cached.lags,
            lag_known=cached.lag_known,
            warnings=(
                f"source lag measured {age_s:.0f} s ago: its Kafka cluster has not answered since",
            )
            if stale
            else (),
        )

    def measure(self, pipeline: PipelineRecord) -> PipelineProgress:
        """The pipeline's lag (asking its source cluster now), rate and last commit age.
        Any replica."""
        partitions = _partitions(self._store.pipelines.list_tasks(pipeline_id=pipeline.pipeline_id))
        source = pipeline.spec.source
        bounds = self._topics.partition_bounds(
            source.bootstrap_servers, partitions, source.properties
        )
        offsets = self._store.offsets.get_offsets(pipeline_id=pipeline.pipeline_id)
        lags, lag_known = _lags(pipeline, partitions, bounds, offsets)
        return self._with_lag(pipeline, lags, lag_known=lag_known)

    def _with_lag(
        self,
        pipeline: PipelineRecord,
        lags: tuple[PartitionLag, ...],
        *,
        lag_known: bool,
        warnings: tuple[str, ...] = (),
    ) -> PipelineProgress:
        """`lags` with the rate and the last commit age, read from SQL now."""
        committed, now_ms = self._store.progress.committed_progress(
            pipeline_id=pipeline.pipeline_id, limit=RATE_WINDOW_CHECKPOINTS
        )
        return PipelineProgress(
            lags=lags,
            lag_known=lag_known,
            records_per_second=records_per_second(committed),
            last_commit_age_ms=checkpoint_age_ms(
                committed_at_ms=committed[0].committed_at_ms if committed else None,
                now_ms=now_ms,
            ),
            warnings=warnings,
        )

    def start(self) -> None:
        """Start measuring every `refresh_every_s` seconds while this replica leads."""
        self._thread.start()

    def stop(self) -> None:
        """Stop the measuring thread (a measurement under way ends first)."""
        self._thread.stop()

    def refresh(self, fence: Fence) -> None:
        """Measure the lag of every pipeline that is not STOPPED, for the lag gauge and the
        status calls. Leader-only; never raises (a pipeline whose cluster does not answer
        keeps its last figure, and status says how old it is). Three reads and one round of
        ListOffsets per source cluster, however many pipelines; sets `refresh_every_s` from
        the CPU it used (this thread's: waiting for Kafka does not count)."""
        began = self._cpu_clock()
        try:
            self._refresh(fence)
        finally:
            self.refresh_every_s = refresh_interval_s(self._cpu_clock() - began)

    def _refresh(self, fence: Fence) -> None:
        try:
            running = [
                p for p in all_pipelines(self._store) if p.target_state is not TargetState.STOPPED
            ]
            partitions = {
                pipeline_id: _partitions(tasks)
                for pipeline_id, tasks in _by_pipeline(self._store.pipelines.list_tasks()).items()
            }
            offsets = self._store.offsets.get_offsets_of(
                pipeline_ids=[p.pipeline_id for p in running]
            )
        except Exception:
            # The state database is down or busy: the figures stay as they were (status
            # says how old they are) until the next refresh can read it.
            _LOG.warning("could not read the pipelines to measure their lag", exc_info=True)
            return
        clusters: dict[tuple[str, KafkaProperties], list[PipelineRecord]] = defaultdict(list)
        for pipeline in running:
            source = pipeline.spec.source
            clusters[(source.bootstrap_servers, source.properties)].append(pipeline)
        with self._lock:
            before = dict(self._cache)
        lags: dict[PipelineId, tuple[PartitionLag, ...]] = {}
        cache: dict[PipelineId, _MeasuredLag] = {}
        for (bootstrap_servers, properties), members in clusters.items():
            asked = sorted({tp for p in members for tp in partitions.get(p.pipeline_id, [])})
            measured_at = self._clock()
            try:
                bounds = self._topics.partition_bounds(bootstrap_servers, asked, properties)
            except Exception:
                _LOG.warning("could not measure the lag on %s", bootstrap_servers, exc_info=True)
                bounds = {}
            for pipeline in members:
                pipeline_id = pipeline.pipeline_id
                measured, known = _lags(
                    pipeline, partitions.get(pipeline_id, []), bounds, offsets[pipeline_id]
                )
                lags[pipeline_id] = measured
                if known or pipeline_id not in before:
                    cache[pipeline_id] = _MeasuredLag(measured, known, measured_at)
                else:
                    cache[pipeline_id] = before[pipeline_id]  # status says how old it is
        with self._lock:
            self._lags = lags
            self._cache = cache

    # ------------------------------------------------------------------ gauge readings

    def _leading(self) -> bool:
        return self._lease.current_fence() is not None

    def _lag_reading(self) -> Iterable[tuple[float, Attributes]]:
        if not self._leading():
            return []
        with self._lock:
            lags = dict(self._lags)
        return [
            (float(p.lag), _lag_attributes(pipeline_id, p))
            for pipeline_id, partitions in sorted(lags.items())
            for p in partitions
        ]

    def _task_reading(self) -> Iterable[tuple[float, Attributes]]:
        if not self._leading():
            return []
        counts = Counter(
            (t.pipeline_id, t.state.value.lower()) for t in self._store.pipelines.list_tasks()
        )
        return [
            (float(n), {"pipeline": pipeline_id, "state": state})
            for (pipeline_id, state), n in sorted(counts.items())
        ]

    def _session_reading(self) -> Iterable[tuple[float, Attributes]]:
        if not self._leading():
            return []
        executors, now_ms = self._store.executors.list_executors()
        alive = sum(1 for e in executors if self._membership.is_alive(e, now_ms))
        return [
            (float(alive), {"state": "alive"}),
            (float(len(executors) - alive), {"state": "expired"}),
        ]

    def _epoch_reading(self) -> Iterable[tuple[float, Attributes]]:
        lease = self._lease.last_lease
        if lease is None:
            return []
        return [(float(lease.leader_epoch), {})]


def _by_pipeline(tasks: Iterable[TaskRecord]) -> dict[PipelineId, list[TaskRecord]]:
    grouped: dict[PipelineId, list[TaskRecord]] = defaultdict(list)
    for task in tasks:
        grouped[task.pipeline_id].append(task)
    return grouped


def _partitions(tasks: Iterable[TaskRecord]) -> list[TopicPartition]:
    """The source partitions of a pipeline's tasks, in topic-partition order."""
    return sorted(
        {tp for t in tasks for tp in t.partitions}, key=lambda tp: (tp.topic, tp.partition)
    )


def _lags(
    pipeline: PipelineRecord,
    partitions: Sequence[TopicPartition],
    bounds: Mapping[TopicPartition, PartitionBounds],
    offsets: Sequence[PartitionOffset],
) -> tuple[tuple[PartitionLag, ...], bool]:
    """The pipeline's lag per partition from its cluster's `bounds` (which may cover other
    pipelines' partitions too), and whether every one of its partitions was answered."""
    mine = {tp: bounds[tp] for tp in partitions if tp in bounds}
    lags = source_lag(
        bounds=mine,
        resume_offsets={TopicPartition(o.topic, o.partition): o.next_offset for o in offsets},
        starting_offsets=pipeline.spec.source.starting_offsets,
    )
    return lags, len(mine) == len(partitions)


def _lag_attributes(pipeline_id: PipelineId, lag: PartitionLag) -> Attributes:
    return {
        "pipeline": pipeline_id,
        "topic": lag.partition.topic,
        "partition": lag.partition.partition,
    }


__all__ = [
    "LAG_REFRESH_S",
    "LAG_REFRESH_SHARE",
    "PipelineProgress",
    "Progress",
    "refresh_interval_s",
]
