"""Pipeline lifecycle (Kafka Connect's herder side of connector configs): create, update,
delete, target state, restart, offsets, and the reads of pipelines, tasks, status and
checkpoint history.

Rules written here (the api only converts):
- A pipeline is split into tasks over its source topics' partitions, read from Kafka.
  Create and update check every topic they need (sources, sink, dead-letter topic) in one
  go and refuse with one InvalidArgument naming every missing topic and every Kafka
  cluster that did not answer (`domain/topics.py`), within about 5 s
  (`store/kafka_topics.py`).
- A spec whose sink transactions could outlive `transaction.timeout.ms` before they are
  committed (checkpoint timeout plus this coordinator's recovery time) is refused at
  create and update (`domain/transaction_timeout.py`).
- An update restarts every task on the new config with a new generation, and aborts the
  TRIGGERED checkpoints, in the transaction that writes the new config version
  (`domain.pipelines.restarts_for_new_config`): executors refuse a trigger for a config
  version other than the one their task was assigned with.
- Pausing a STOPPED pipeline is refused (resume it first); restarting it, or one of its
  tasks, too.
- Stopping a pipeline releases its tasks, so its in-flight pre-commits can never complete:
  they abort at once.
- Deleting a pipeline first aborts its in-flight checkpoints and tries once to commit
  its COMPLETE ones.
- Every change to a pipeline's tasks, config or target state tells the executors that run
  (or ran) its tasks, so they heartbeat at once (`assignment_notices.py`).
- Offsets are reset only on a STOPPED pipeline (the store refuses otherwise), only for
  the pipeline's own source partitions; a reset to a position other than the pipeline's
  `starting_offsets` is resolved from Kafka at once (as `kafka-consumer-groups` does).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lockgate.common.errors import Aborted, FieldViolation
from lockgate.common.model.ids import CheckpointId, PipelineId, TaskId
from lockgate.common.model.offsets import OffsetRange, TopicPartition
from lockgate.common.model.pipeline_spec import PipelineSpec, StartingOffsets
from lockgate.coordinator.domain.aborts import MissingPrecommit, missing_precommits
from lockgate.coordinator.domain.checkpoints import CheckpointRecord
from lockgate.coordinator.domain.data_loss import PipelineHealth, pipeline_health
from lockgate.coordinator.domain.errors import FailedPrecondition, InvalidArgument, NotFound
from lockgate.coordinator.domain.pipelines import (
    PartitionOffset,
    PipelineRecord,
    TaskRecord,
    check_offsets_resettable,
)
from lockgate.coordinator.domain.progress import AbortKind
from lockgate.coordinator.domain.states import CheckpointState, TargetState
from lockgate.coordinator.domain.tasks import (
    TaskSplit,
    check_partitions_per_task,
    split_partitions,
)
from lockgate.coordinator.domain.topics import (
    cluster_properties,
    kafka_refusal,
    source_partitions,
    topic_violations,
    topics_to_describe,
)
from lockgate.coordinator.domain.transaction_timeout import (
    RecoveryTime,
    check_transaction_timeout,
    near_timeout_warnings,
)
from lockgate.coordinator.herder.lease_keeper import LeaseKeeper
from lockgate.coordinator.herder.outcomes import CheckpointOutcomes
from lockgate.coordinator.store.kafka_topics import KafkaTopics
from lockgate.coordinator.store.sql_store import SqlStore

if TYPE_CHECKING:
    from lockgate.coordinator.herder.assignment_notices import AssignmentNotices
    from lockgate.coordinator.herder.checkpoints import CheckpointDriver


@dataclass(frozen=True)
class PipelineStatus:
    """A pipeline's desired state beside its tasks' observed states and its checkpoints."""

    pipeline: PipelineRecord
    tasks: tuple[TaskRecord, ...]
    last_complete_checkpoint_id: int
    """The newest COMPLETE or COMMITTED checkpoint; 0 if none."""
    last_committed: CheckpointRecord | None
    in_flight_checkpoint_ids: tuple[int, ...]
    """TRIGGERED or COMPLETE checkpoints, oldest first."""
    last_aborted: CheckpointRecord | None
    """The newest ABORTED checkpoint, with its abort reason; None if none aborted."""
    aborted_in_a_row: int
    """ABORTED checkpoints newer than the newest COMPLETE or COMMITTED one."""
    missing_precommits: tuple[MissingPrecommit, ...]
    """The tasks that had not pre-committed `last_aborted`, and why."""
    data_lost: CheckpointRecord | None = None
    """The DATA_LOST checkpoint nobody moved past: the pipeline is FAILED while set."""
    lost_ranges: tuple[OffsetRange, ...] = ()
    """The source ranges whose output `data_lost` lost."""
    warnings: tuple[str, ...] = ()
    """COMPLETE checkpoints still uncommitted past half the sink's transaction timeout."""

    @property
    def health(self) -> PipelineHealth:
        """FAILED while a DATA_LOST checkpoint blocks the pipeline."""
        return pipeline_health(self.data_lost)


@dataclass(frozen=True)
class PipelineOffsets:
    """Where a pipeline resumes each source partition."""

    pipeline: PipelineRecord
    offsets: tuple[PartitionOffset, ...]
    restored_checkpoint_id: int
    """The COMPLETE checkpoint the offsets come from; 0 if any was set by a reset."""


def restored_checkpoint(offsets: Sequence[PartitionOffset]) -> int:
    """The COMPLETE checkpoint the offsets come from; 0 if any was set by a reset."""
    if not offsets or any(o.checkpoint_id is None for o in offsets):
        return 0
    return max(int(o.checkpoint_id or 0) for o in offsets)


def all_pipelines(store: SqlStore) -> list[PipelineRecord]:
    """Every pipeline, reading the store page by page."""
    result: list[PipelineRecord] = []
    token = ""
    while True:
        page, token = store.pipelines.list_pipelines(page_size=500, page_token=token)
        result.extend(page)
        if not token:
            return result


class Pipelines:
    """Pipeline configs, target states and offsets; every method that writes is
    leader-only (NotLeader on a follower), reads answer on any replica."""

    def __init__(
        self,
        *,
        store: SqlStore,
        lease: LeaseKeeper,
        topics: KafkaTopics,
        checkpoints: CheckpointDriver,
        wake: Callable[[], None],
        notices: AssignmentNotices,
        outcomes: CheckpointOutcomes | None = None,
        recovery: RecoveryTime,
    ) -> None:
        self._store = store
        self._notices = notices
        self._recovery = recovery
        self._lease = lease
        self._topics = topics
        self._checkpoints = checkpoints
        self._wake = wake
        self._outcomes = outcomes or CheckpointOutcomes()

    # ------------------------------------------------------------------ reads

    def get(self, pipeline_id: PipelineId) -> PipelineRecord:
        """One pipeline (NotFound if unknown)."""
        return self._store.pipelines.get_pipeline(pipeline_id=pipeline_id)

    def exists(self, pipeline_id: PipelineId) -> bool:
        """Whether a pipeline of that name exists."""
        try:
            self._store.pipelines.get_pipeline(pipeline_id=pipeline_id)
        except NotFound:
            return False
        return True

    def list_pipelines(
        self, *, page_size: int, page_token: str
    ) -> tuple[list[PipelineRecord], str]:
        """A page of pipelines in name order and the next page's token ("" at the end)."""
        return self._store.pipelines.list_pipelines(page_size=page_size, page_token=page_token)

    def tasks(
        self, *, pipeline_id: PipelineId | None = None, executor_id: str = ""
    ) -> list[TaskRecord]:
        """Tasks by pipeline and index, of one pipeline (NotFound if unknown) or all, and
        of one executor if `executor_id` is set."""
        if pipeline_id is not None:
            self._store.pipelines.get_pipeline(pipeline_id=pipeline_id)
        return [
            t
            for t in self._store.pipelines.list_tasks(pipeline_id=pipeline_id)
            if not executor_id or t.executor_id == executor_id
        ]

    def status(self, pipeline_id: PipelineId) -> PipelineStatus:
        """The pipeline's target state with each task's observed state, its latest
        complete, committed and in-flight checkpoints, its newest abort (why, how many in a
        row since the last COMPLETE one, which tasks had not pre-committed), the DATA_LOST
        checkpoint that makes it FAILED with its lost ranges, and its warnings."""
        pipeline = self._store.pipelines.get_pipeline(pipeline_id=pipeline_id)
        tasks = self._store.pipelines.list_tasks(pipeline_id=pipeline_id)
        complete = self._store.checkpoints.list_checkpoints(
            pipeline_id=pipeline_id,
            limit=1,
            states=[CheckpointState.COMPLETE, CheckpointState.COMMITTED],
            with_tasks=False,
        )
        committed = self._store.checkpoints.list_checkpoints(
            pipeline_id=pipeline_id, limit=1, states=[CheckpointState.COMMITTED], with_tasks=False
        )
        # Read before the checkpoints in flight (the reads are separate snapshots): a loss
        # shown has then taken its later checkpoints along, so a FAILED pipeline never
        # shows checkpoints in flight that the loss already ended.
        data_lost = self._store.data_loss.blocking_loss(pipeline_id=pipeline_id)
        in_flight = self._store.checkpoints.list_checkpoints(
            pipeline_id=pipeline_id,
            limit=100,
            states=[CheckpointState.TRIGGERED, CheckpointState.COMPLETE],
            with_tasks=False,
        )
        last_complete = complete[0].checkpoint_id if complete else CheckpointId(0)
        # Counted before the newest abort is read (the reads are separate snapshots): the
        # abort shown is then at least as new as the count, never older.
        aborted_in_a_row = self._store.checkpoints.count_checkpoints(
            pipeline_id=pipeline_id, states=[CheckpointState.ABORTED], after=last_complete
        )
        aborted = self._store.checkpoints.list_checkpoints(
            pipeline_id=pipeline_id, limit=1, states=[CheckpointState.ABORTED]
        )
        last_aborted = aborted[0] if aborted else None
        return PipelineStatus(
            pipeline=pipeline,
            tasks=tuple(tasks),
            last_complete_checkpoint_id=last_complete,
            last_committed=committed[0] if committed else None,
            in_flight_checkpoint_ids=tuple(sorted(c.checkpoint_id for c in in_flight)),
            last_aborted=last_aborted,
            aborted_in_a_row=aborted_in_a_row,
            missing_precommits=missing_precommits(
                last_aborted, timeout_ms=pipeline.spec.checkpoint.timeout_ms, tasks=tasks
            )
            if last_aborted is not None
            else (),
            data_lost=data_lost,
            lost_ranges=tuple(
                self._store.data_loss.lost_ranges(
                    pipeline_id=pipeline_id, checkpoint_id=data_lost.checkpoint_id
                )
            )
            if data_lost is not None
            else (),
            warnings=tuple(
                near_timeout_warnings(
                    in_flight,
                    transaction_timeout_ms=pipeline.spec.sink.transaction_timeout_ms,
                    now_ms=self._store.db_now_ms(),
                )
            ),
        )

    def offsets(self, pipeline_id: PipelineId) -> PipelineOffsets:
        """Where the pipeline resumes each source partition."""
        pipeline = self._store.pipelines.get_pipeline(pipeline_id=pipeline_id)
        offsets = self._store.offsets.get_offsets(pipeline_id=pipeline_id)
        return PipelineOffsets(
            pipeline=pipeline,
            offsets=tuple(offsets),
            restored_checkpoint_id=restored_checkpoint(offsets),
        )

    def list_checkpoints(
        self,
        *,
        pipeline_id: PipelineId,
        limit: int,
        before: CheckpointId | None = None,
        states: Sequence[CheckpointState] | None = None,
    ) -> list[CheckpointRecord]:
        """Checkpoint history with timings, newest first, without the tasks' parts (a
        page is one query). Any replica."""
        return self._store.checkpoints.list_checkpoints(
            pipeline_id=pipeline_id, limit=limit, before=before, states=states, with_tasks=False
        )

    def get_checkpoint(
        self, *, pipeline_id: PipelineId, checkpoint_id: CheckpointId
    ) -> CheckpointRecord:
        """One checkpoint with each task's part (NotFound naming the pipeline or the
        checkpoint). Any replica."""
        self._store.pipelines.get_pipeline(pipeline_id=pipeline_id)
        return self._store.checkpoints.get_checkpoint(
            pipeline_id=pipeline_id, checkpoint_id=checkpoint_id
        )

    def get_checkpoint_with_ranges(
        self, *, pipeline_id: PipelineId, checkpoint_id: CheckpointId
    ) -> tuple[CheckpointRecord, dict[TaskId, list[OffsetRange]]]:
        """One checkpoint (as `get_checkpoint`) with the source ranges each task
        pre-committed. Any replica."""
        record = self.get_checkpoint(pipeline_id=pipeline_id, checkpoint_id=checkpoint_id)
        ranges = self._store.checkpoints.precommit_ranges(
            pipeline_id=pipeline_id, checkpoint_id=checkpoint_id
        )
        return record, ranges

    def topic_violations(self, spec: PipelineSpec) -> list[FieldViolation]:
        """Every topic of the spec that does not exist in Kafka and every Kafka cluster
        that does not answer (what `create` would refuse); any replica may ask."""
        clusters = self._topics.describe(
            topics_to_describe(spec, source=True, sink=True),
            cluster_properties(spec, source=True, sink=True),
        )
        return topic_violations(spec, clusters, source=True, sink=True)

    def _check_kafka(self, spec: PipelineSpec, *, source: bool, sink: bool) -> list[TopicPartition]:
        """The source partitions (with `source`); InvalidArgument listing every missing
        topic and unreachable cluster of the parts checked, or naming a `tasks_max` that
        gives a task more partitions than it may report."""
        clusters = self._topics.describe(
            topics_to_describe(spec, source=source, sink=sink),
            cluster_properties(spec, source=source, sink=sink),
        )
        violations = topic_violations(spec, clusters, source=source, sink=sink)
        if violations:
            raise kafka_refusal(violations)
        if not source:
            return []
        partitions = source_partitions(spec, clusters)
        check_partitions_per_task(len(partitions), spec.tasks_max)
        return partitions

    # ------------------------------------------------------------------ configs

    def create(self, *, spec: PipelineSpec, target_state: TargetState) -> PipelineRecord:
        """Create a pipeline and split it into tasks over its source partitions.

        Leader-only. InvalidArgument if a transaction could outlive the sink's timeout
        (`domain/transaction_timeout.py`), or naming every missing topic and unreachable
        cluster.
        """
        self._lease.require_fence()
        check_transaction_timeout(spec, self._recovery)
        splits = split_partitions(self._check_kafka(spec, source=True, sink=True), spec.tasks_max)
        # One transaction: a lease lost or a crash leaves no pipeline without its tasks.
        record = self._lease.leader_call(
            lambda f: self._store.pipelines.create_pipeline(
                fence=f, spec=spec, splits=splits, target_state=target_state
            )
        )
        self._wake()
        return record

    def for_update(self, pipeline_id: PipelineId, *, expected_version: int) -> PipelineRecord:
        """The pipeline an update starts from; Aborted (CONFIG_VERSION_MISMATCH) if
        `expected_version` (0: any) is not its config version."""
        current = self._store.pipelines.get_pipeline(pipeline_id=pipeline_id)
        if expected_version and expected_version != current.config_version:
            raise Aborted(
                f"pipeline {pipeline_id!r} is at config version {current.config_version}, not "
                f"{expected_version}; read it again and retry",
                reason="CONFIG_VERSION_MISMATCH",
            )
        return current

    def update(self, *, spec: PipelineSpec, expected_version: int | None) -> PipelineRecord:
        """Replace a pipeline's spec (config version + 1) and re-split its tasks if its
        topics or tasks_max changed. Leader-only. Aborted if another update came first;
        InvalidArgument as `create`."""
        self._lease.require_fence()
        check_transaction_timeout(spec, self._recovery)
        before = self._store.pipelines.get_pipeline(pipeline_id=spec.name)
        owners = self._notices.owners(spec.name)  # a re-split may drop some of their tasks
        resplit = before.spec.source != spec.source or before.spec.tasks_max != spec.tasks_max
        sink_changed = spec.sink != before.spec.sink or spec.errors != before.spec.errors
        partitions = self._check_kafka(spec, source=resplit, sink=sink_changed)
        splits = split_partitions(partitions, spec.tasks_max) if resplit else None
        try:
            record = self._lease.leader_call(
                lambda f: self._store.pipelines.update_pipeline(
                    fence=f, spec=spec, expected_version=expected_version, splits=splits
                )
            )
        except FailedPrecondition as exc:
            if exc.reason == "CONFIG_VERSION_MISMATCH":
                raise Aborted(exc.message, reason=exc.reason) from None
            raise
        self._notices.tell_owners(spec.name, also=owners)
        self._wake()
        return record

    def _splits_now(self, pipeline: PipelineRecord) -> list[TaskSplit]:
        """The stored pipeline's split over its source partitions as Kafka has them now;
        FailedPrecondition if its Kafka refuses (the stored spec is not this request's
        argument: its Kafka is what is wrong now)."""
        try:
            partitions = self._check_kafka(pipeline.spec, source=True, sink=False)
        except InvalidArgument as exc:
            raise FailedPrecondition(exc.message, reason=exc.reason) from None
        return split_partitions(partitions, pipeline.spec.tasks_max)

    def delete(self, pipeline_id: PipelineId) -> None:
        """Abort the pipeline's in-flight checkpoints, try once to commit its COMPLETE ones,
        then delete it with its history. Leader-only."""
        fence = self._lease.require_fence()
        self._store.pipelines.get_pipeline(pipeline_id=pipeline_id)
        self._checkpoints.finish_deleted(fence, pipeline_id)
        owners = self._notices.owners(pipeline_id)
        self._lease.leader_call(
            lambda f: self._store.pipelines.delete_pipeline(fence=f, pipeline_id=pipeline_id)
        )
        self._notices.tell_owners(pipeline_id, also=owners)
        self._wake()

    # ------------------------------------------------------------------ target state

    def set_target_state(
        self, pipeline_id: PipelineId, target_state: TargetState
    ) -> PipelineRecord:
        """Pause, resume or stop a pipeline. Leader-only. Pausing a STOPPED pipeline is
        refused (FailedPrecondition PIPELINE_STOPPED): resume it first."""
        self._lease.require_fence()
        if target_state is TargetState.PAUSED:
            current = self._store.pipelines.get_pipeline(pipeline_id=pipeline_id)
            if current.target_state is TargetState.STOPPED:
                raise FailedPrecondition(
                    f"pipeline {pipeline_id!r} is STOPPED; resume it first, then pause it",
                    reason="PIPELINE_STOPPED",
                )
        record = self._write_target(pipeline_id, target_state)
        if target_state is TargetState.STOPPED:
            # Stopped tasks are released: their in-flight pre-commits can never complete.
            self._checkpoints.abort_triggered(pipeline_id, reason="pipeline stopped")
        self._notices.tell_owners(pipeline_id)
        self._wake()
        return record

    def _write_target(self, pipeline_id: PipelineId, target_state: TargetState) -> PipelineRecord:
        return self._lease.leader_call(
            lambda f: self._store.pipelines.set_target_state(
                fence=f, pipeline_id=pipeline_id, target_state=target_state
            )
        )

    def restart(
        self,
        pipeline_id: PipelineId,
        *,
        include_tasks: bool,
        only_failed: bool,
        from_checkpoint: CheckpointId | None = None,
    ) -> tuple[PipelineRecord, list[TaskRecord]]:
        """Re-plan a pipeline's tasks and, with `include_tasks`, give them (or only the
        FAILED ones) new generations, as Kafka Connect's restart with
        `includeTasks`/`onlyFailed`. With `from_checkpoint` N, first move the pipeline past
        its DATA_LOST checkpoint N: it triggers again, re-reading N's lost ranges
        (`domain/data_loss.py`). Returns the pipeline and the tasks restarted.
        Leader-only; refused for a STOPPED pipeline."""
        self._lease.require_fence()
        current = self._store.pipelines.get_pipeline(pipeline_id=pipeline_id)
        if current.target_state is TargetState.STOPPED:
            raise FailedPrecondition(
                f"pipeline {pipeline_id!r} is STOPPED; resume it to restart it",
                reason="PIPELINE_STOPPED",
            )
        splits = self._splits_now(current)
        # One transaction: a lease lost or a crash between moving past a loss and
        # restarting the tasks would leave a retry refused (N already moved past).
        result = self._lease.leader_call(
            lambda f: self._store.pipelines.restart_pipeline(
                fence=f,
                pipeline_id=pipeline_id,
                splits=splits,
                restart_tasks=include_tasks,
                only_failed=only_failed,
                past_data_loss=from_checkpoint,
            )
        )
        self._outcomes.aborted(result.aborted, AbortKind.TASK_RESTARTED)
        restarted = list(result.tasks)
        self._notices.tell_owners(pipeline_id)
        self._wake()
        return self._store.pipelines.get_pipeline(pipeline_id=pipeline_id), restarted

    def restart_task(self, task_id: TaskId) -> tuple[TaskRecord, PipelineRecord]:
        """Restart one task with a new generation and its error cleared, as Kafka Connect's
        task restart: it runs again from the last COMPLETE checkpoint, on its executor or,
        if that one is dead, where the assignment moves it. Returns the task and its
        pipeline. Leader-only; refused for a STOPPED pipeline, NotFound for an unknown
        task."""
        self._lease.require_fence()
        result = self._lease.leader_call(
            lambda f: self._store.pipelines.restart_task(fence=f, task_id=task_id)
        )
        self._outcomes.aborted(result.aborted, AbortKind.TASK_RESTARTED)
        (task,) = result.tasks
        self._notices.tell_owners(task.pipeline_id)
        self._wake()
        return task, self._store.pipelines.get_pipeline(pipeline_id=task.pipeline_id)

    # ------------------------------------------------------------------ offsets

    def reset_offsets_to_position(
        self, pipeline_id: PipelineId, position: StartingOffsets | None
    ) -> list[PartitionOffset] | None:
        """Reset a STOPPED pipeline's offsets to EARLIEST or LATEST. Leader-only.

        Its own `starting_offsets` forgets every offset (each task resolves the position
        when it next starts); the other position is resolved now from the source cluster
        (log start, or the read_committed log end) and stored as explicit offsets, which
        are returned (None after a forget), as `kafka-consumer-groups --reset-offsets`.
        """
        pipeline = self._store.pipelines.get_pipeline(pipeline_id=pipeline_id)
        if position is None:
            raise InvalidArgument.for_field(
                "position", "must be OFFSET_POSITION_EARLIEST or OFFSET_POSITION_LATEST"
            )
        # Refuse a running pipeline before asking Kafka; the store checks it all again.
        check_offsets_resettable(pipeline, {})
        wanted: dict[TopicPartition, int] | None = None
        if position is not pipeline.spec.source.starting_offsets:
            wanted = self._topics.log_offsets(
                pipeline.spec.source.bootstrap_servers,
                self._source_partitions(pipeline_id),
                latest=position is StartingOffsets.LATEST,
                properties=pipeline.spec.source.properties,
            )
        self._lease.leader_call(
            lambda f: self._store.offsets.reset_offsets(
                fence=f, pipeline_id=pipeline_id, offsets=wanted
            )
        )
        return None if wanted is None else self._store.offsets.get_offsets(pipeline_id=pipeline_id)

    def _source_partitions(self, pipeline_id: PipelineId) -> list[TopicPartition]:
        """The pipeline's source partitions, as its tasks split them."""
        return sorted(
            tp
            for t in self._store.pipelines.list_tasks(pipeline_id=pipeline_id)
            for tp in t.partitions
        )

    def reset_offsets(
        self, pipeline_id: PipelineId, offsets: Sequence[tuple[TopicPartition, int]]
    ) -> list[PartitionOffset]:
        """Set where a STOPPED pipeline resumes its own source partitions (InvalidArgument
        naming `offsets.offsets[i]` for another partition or a negative offset).
        Leader-only. Returns the offsets stored."""
        self._store.pipelines.get_pipeline(pipeline_id=pipeline_id)
        known = set(self._source_partitions(pipeline_id))
        wanted: dict[TopicPartition, int] = {}
        violations: list[FieldViolation] = []
        for i, (tp, offset) in enumerate(offsets):
            if tp not in known:
                violations.append(
                    FieldViolation(
                        f"offsets.offsets[{i}]",
                        f"{tp} is not a source partition of {pipeline_id!r}",
                    )
                )
            if offset < 0:
                violations.append(
                    FieldViolation(f"offsets.offsets[{i}].offset", f"must be >= 0, got {offset}")
                )
            wanted[tp] = offset
        if violations:
            raise InvalidArgument(
                "invalid ResetOffsets: "
                + "; ".join(f"{v.field}: {v.description}" for v in violations),
                violations=violations,
            )
        self._lease.leader_call(
            lambda f: self._store.offsets.reset_offsets(
                fence=f, pipeline_id=pipeline_id, offsets=wanted
            )
        )
        return self._store.offsets.get_offsets(pipeline_id=pipeline_id)
