"""How far behind each pipeline is and how fast it goes, for `GetPipelineStatus` and the
leader's gauges (`lockgate.source.lag`, `lockgate.tasks`, `lockgate.executor.sessions`,
`lockgate.leader.epoch`).

The arithmetic is `domain/progress.py`; the Kafka offsets come from
`store/kafka_topics.py` and the positions from SQL. A status call measures its pipeline
on the replica that answers it (any replica). The leader measures every pipeline every
`LAG_REFRESH_S` seconds on a thread of its own (a slow or unreachable Kafka cluster must not
hold up the work loop's triggers and commits) and the lag gauge shows that measurement, so a
scrape never waits for Kafka; followers report no lag, task or session gauge (the leader
does), so summing over replicas does not count twice.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterable
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
from lockgate.common.model.offsets import TopicPartition
from lockgate.coordinator.domain.lease import Fence
from lockgate.coordinator.domain.pipelines import PipelineRecord
from lockgate.coordinator.domain.progress import (
    RATE_WINDOW_CHECKPOINTS,
    PartitionLag,
    checkpoint_age_ms,
    records_per_second,
    source_lag,
)
from lockgate.coordinator.domain.states import TargetState
from lockgate.coordinator.herder.lease_keeper import LeaseKeeper
from lockgate.coordinator.herder.membership import Membership
from lockgate.coordinator.herder.pipelines import all_pipelines
from lockgate.coordinator.store.kafka_topics import KafkaTopics
from lockgate.coordinator.store.sql_store import SqlStore

#: Seconds between two lag measurements of the leader (each asks Kafka for every pipeline).
LAG_REFRESH_S = 2.0
_LOG = logging.getLogger(__name__)


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

    @property
    def total_lag(self) -> int:
        """The lag summed over the partitions measured."""
        return sum(p.lag for p in self.lags)


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
    ) -> None:
        self._store = store
        self._topics = topics
        self._lease = lease
        self._membership = membership
        self._lock = threading.Lock()
        self._lags: dict[PipelineId, tuple[PartitionLag, ...]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="source-lag", daemon=True)
        instruments.observe(SOURCE_LAG, self._lag_reading)
        instruments.observe(TASKS, self._task_reading)
        instruments.observe(EXECUTOR_SESSIONS, self._session_reading)
        instruments.observe(LEADER_EPOCH, self._epoch_reading)

    def measure(self, pipeline: PipelineRecord) -> PipelineProgress:
        """The pipeline's lag (asking its source cluster now), rate and last commit age.
        Any replica."""
        tasks = self._store.pipelines.list_tasks(pipeline_id=pipeline.pipeline_id)
        partitions = sorted(
            {tp for t in tasks for tp in t.partitions}, key=lambda tp: (tp.topic, tp.partition)
        )
        bounds = self._topics.partition_bounds(
            pipeline.spec.source.bootstrap_servers, partitions, pipeline.spec.source.properties
        )
        resume = {
            TopicPartition(o.topic, o.partition): o.next_offset
            for o in self._store.offsets.get_offsets(pipeline_id=pipeline.pipeline_id)
        }
        lags = source_lag(
            bounds=bounds,
            resume_offsets=resume,
            starting_offsets=pipeline.spec.source.starting_offsets,
        )
        committed, now_ms = self._store.progress.committed_progress(
            pipeline_id=pipeline.pipeline_id, limit=RATE_WINDOW_CHECKPOINTS
        )
        return PipelineProgress(
            lags=lags,
            lag_known=len(bounds) == len(partitions),
            records_per_second=records_per_second(committed),
            last_commit_age_ms=checkpoint_age_ms(
                committed_at_ms=committed[0].committed_at_ms if committed else None,
                now_ms=now_ms,
            ),
        )

    def start(self) -> None:
        """Start measuring every `LAG_REFRESH_S` seconds while this replica leads."""
        self._thread.start()

    def stop(self) -> None:
        """Stop the measuring thread (a measurement under way ends first)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(LAG_REFRESH_S):
            fence = self._lease.current_fence()
            if fence is not None:
                self.refresh(fence)

    def refresh(self, fence: Fence) -> None:
        """Measure the lag of every pipeline that is not STOPPED, for the lag gauge.
        Leader-only; never raises (a pipeline whose cluster does not answer keeps no lag)."""
        lags: dict[PipelineId, tuple[PartitionLag, ...]] = {}
        for pipeline in all_pipelines(self._store):
            if pipeline.target_state is TargetState.STOPPED:
                continue
            try:
                lags[pipeline.pipeline_id] = self.measure(pipeline).lags
            except Exception:
                _LOG.warning("could not measure the lag of %s", pipeline.pipeline_id, exc_info=True)
        with self._lock:
            self._lags = lags

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


def _lag_attributes(pipeline_id: PipelineId, lag: PartitionLag) -> Attributes:
    return {
        "pipeline": pipeline_id,
        "topic": lag.partition.topic,
        "partition": lag.partition.partition,
    }


__all__ = ["LAG_REFRESH_S", "PipelineProgress", "Progress"]
