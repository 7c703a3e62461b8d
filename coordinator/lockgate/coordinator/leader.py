"""The coordinator's leader: the lease keeper, and the loop that drives the cluster.

Two threads per replica:
- `LeaseKeeper` acquires or renews the lease row every `lease_ms / 4` through
  `CoordinatorCore.campaign` (compare-and-set in SQL, expiry from the database's clock),
  which keeps this replica's view of its role and fence.
- `Coordinator`'s work loop, which does nothing on a follower and, on the leader:
  recovery when it becomes leader (abort every TRIGGERED checkpoint, then re-commit every
  COMPLETE-not-COMMITTED one in creation order and abort what never became COMPLETE),
  then on every pass: rebalance (expire dead executors after the session timeout, move
  their tasks after the reassignment delay), abort timed-out checkpoints, send aborts,
  send commits (retried until acked, then COMMITTED), and trigger each RUNNING pipeline's
  next checkpoint on its interval.

Every function that writes is leader-only and says so: it goes through `CoordinatorCore`
(coordinator-core's facade), which takes the `Fence` of the current term just before the
write, and the store refuses the write if that term is over (`FencedError`). The two writes
the facade has no call for (an assignment decided here, the trigger of one pipeline) go to
the store with the fence of the pass that decided them. Every RPC to an executor carries
the same fence's epoch.

Fencing rules and known races (see also `domain/lease.py`):
- The local view of leadership is trusted only until `local_deadline` (send time of the
  acquiring statement + lease - safety margin); after it the facade's `fence()` refuses,
  so a replica paused past its lease (SIGSTOP, GC) wakes up as a follower and writes
  nothing.
  If it was paused *inside* a write, the SQL fence check refuses the write.
- An RPC sent by an old leader just before it was deposed may still reach an executor
  that has not seen the new epoch: harmless, because its SQL decisions cannot become
  COMPLETE, and commit/abort of a handle is idempotent.
- Aborting a handle whose producer id is unknown re-initialises the ids of its slot
  that have a transaction open, which would also abort a later transaction on them. The
  slot is reusable once its checkpoint is ABORTED, so the loop never triggers a pipeline
  that still has un-acked aborts, and an executor answers an abort only once no batch of
  that checkpoint runs on it any more: the abort, and the last producer a batch of the
  checkpoint opens, land before the slot is reused. An entry whose slot a later
  checkpoint took anyway is not sent (that checkpoint's init_transactions aborted it).
- Checkpoint N+1 is triggered only when no checkpoint of the pipeline is TRIGGERED: its
  start offsets are then N's end offsets, known in SQL (N is COMPLETE), while N may still
  be committing (the overlap the design allows).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from lockgate.common.errors import FieldViolation
from lockgate.common.failpoints import Failpoint, Failpoints
from lockgate.coordinator.core import CoordinatorCore
from lockgate.coordinator.domain.assignment import (
    DEFAULT_REASSIGN_DELAY_MS,
    DEFAULT_SESSION_TIMEOUT_MS,
    ExecutorLiveness,
    executor_liveness,
    plan_assignment,
)
from lockgate.coordinator.domain.checkpoints import (
    CheckpointRecord,
    LingeringTransaction,
    PendingCommit,
    Precommit,
    should_trigger,
)
from lockgate.coordinator.domain.errors import (
    FailedPrecondition,
    FencedError,
    IllegalTransition,
    InvalidArgument,
    NotFound,
    NotLeader,
    StaleGeneration,
    Unavailable,
)
from lockgate.coordinator.domain.ids import (
    CheckpointId,
    CoordinatorId,
    ExecutorId,
    Generation,
    PipelineId,
    TaskId,
)
from lockgate.coordinator.domain.lease import Fence
from lockgate.coordinator.domain.membership import ExecutorRecord
from lockgate.coordinator.domain.pipeline_spec import PipelineSpec
from lockgate.coordinator.domain.pipelines import PipelineRecord, TaskRecord
from lockgate.coordinator.domain.states import CheckpointState, TargetState, TaskState
from lockgate.coordinator.domain.tasks import TopicPartition
from lockgate.coordinator.executor_client import (
    CheckpointTaskCall,
    ExecutorCallFailed,
    ExecutorClient,
    ExecutorRegistrationStale,
    LeaderEpochRefused,
    sink_handle_pb,
)
from lockgate.coordinator.group_commit import GroupCommit
from lockgate.coordinator.store.sql_store import SqlStore
from lockgate.v1 import common_pb2

_LOG = logging.getLogger(__name__)
_T = TypeVar("_T")

DEFAULT_HEARTBEAT_INTERVAL_MS = 1_000
DEFAULT_TICK_MS = 100
_MAX_BACKOFF_S = 2.0


@dataclass(frozen=True)
class CoordinatorSettings:
    """How one coordinator replica behaves; every duration in milliseconds."""

    coordinator_id: CoordinatorId
    advertise: str
    """host:port clients and followers' redirects use to reach this replica."""
    lease_ms: int = 3_000
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS
    reassign_delay_ms: int = DEFAULT_REASSIGN_DELAY_MS
    tick_ms: int = DEFAULT_TICK_MS
    """Longest sleep of the work loop between passes (it also wakes on reports)."""

    @property
    def lease_safety_ms(self) -> int:
        """How much earlier than the database's expiry the leader stops trusting its lease."""
        return max(50, self.lease_ms // 5)

    @property
    def lease_poll_s(self) -> float:
        """Time between two lease attempts (renewal or acquisition)."""
        return max(0.02, self.lease_ms / 4 / 1000.0)


class LeaseKeeper:
    """The thread that acquires and renews the lease through `CoordinatorCore.campaign`,
    and calls `on_became_leader` when a new term of this replica starts (first
    acquisition, or re-acquisition after its lease ran out: the epoch changed)."""

    def __init__(
        self,
        *,
        core: CoordinatorCore,
        settings: CoordinatorSettings,
        on_became_leader: Callable[[Fence], None],
    ) -> None:
        self._core = core
        self._settings = settings
        self._on_became_leader = on_became_leader
        self._term: Fence | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"lease-{settings.coordinator_id}", daemon=True
        )

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and wait for it."""
        self._stop.set()
        self._thread.join(timeout=5)

    def attempt(self) -> None:
        """One acquire-or-renew attempt; announces a new term."""
        try:
            lease = self._core.campaign()
        except Exception:
            _LOG.warning("lease attempt failed; not leading until it succeeds", exc_info=True)
            lease = None
        fence = current_fence(self._core)
        if fence is not None and fence != self._term:
            _LOG.info(
                "coordinator %s became leader with epoch %s",
                self._settings.coordinator_id,
                fence.leader_epoch,
            )
            self._term = fence
            self._on_became_leader(fence)
        elif fence is None and self._term is not None:
            _LOG.warning(
                "coordinator %s lost the lease (holder now %s)",
                self._settings.coordinator_id,
                lease.holder if lease else "unknown",
            )
            self._term = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self.attempt()
            self._stop.wait(self._settings.lease_poll_s)


def current_fence(core: CoordinatorCore) -> Fence | None:
    """The current term's fence, or None on a follower (or a leader past its deadline)."""
    try:
        return core.fence()
    except NotLeader:
        return None


class TopicPartitions:
    """Kafka metadata the leader needs to split pipelines into tasks."""

    def __init__(self, *, timeout_s: float = 5.0, settle_s: float = 2.0) -> None:
        self._timeout_s = timeout_s
        # A topic created a moment ago may not be in every broker's metadata yet: look
        # again for this long before calling it missing.
        self._settle_s = settle_s

    def _describe(self, bootstrap_servers: str, topics: Sequence[str]) -> dict[str, list[int]]:
        """Partitions of each topic of `topics` that exists (missing ones are absent)."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": bootstrap_servers})
        deadline = time.monotonic() + self._settle_s
        while True:
            try:
                # No topic argument: asking for one topic may auto-create it on the broker.
                metadata = admin.list_topics(timeout=self._timeout_s)
            except KafkaException as exc:
                raise Unavailable(
                    f"Kafka at {bootstrap_servers} did not answer within "
                    f"{self._timeout_s:.0f} s ({exc.args[0] if exc.args else exc}); check the "
                    "bootstrap servers and retry"
                ) from None
            found = {
                t: sorted(d.partitions)
                for t in topics
                if (d := metadata.topics.get(t)) is not None and d.error is None and d.partitions
            }
            if len(found) == len(set(topics)) or time.monotonic() >= deadline:
                return found
            time.sleep(0.2)  # metadata refresh interval while a new topic propagates

    def partitions(
        self, *, bootstrap_servers: str, topics: Sequence[str], field_path: str
    ) -> list[TopicPartition]:
        """Every partition of `topics`; InvalidArgument naming `field_path[i]` for a topic
        that does not exist, Unavailable if the cluster cannot be reached."""
        found = self._describe(bootstrap_servers, topics)
        missing = [(f"{field_path}[{i}]", t) for i, t in enumerate(topics) if t not in found]
        if missing:
            raise _missing_topics(missing, bootstrap_servers)
        return [TopicPartition(t, p) for t in topics for p in found[t]]

    def check_exists(self, *, bootstrap_servers: str, topic: str, field_path: str) -> None:
        """InvalidArgument naming `field_path` if `topic` does not exist."""
        if topic not in self._describe(bootstrap_servers, [topic]):
            raise _missing_topics([(field_path, topic)], bootstrap_servers)


def _missing_topics(missing: Sequence[tuple[str, str]], servers: str) -> InvalidArgument:
    violations = [
        _violation(path, f"topic {topic!r} does not exist on {servers}; create it first")
        for path, topic in missing
    ]
    return InvalidArgument(
        "; ".join(f"{v.field}: {v.description}" for v in violations),
        violations=violations,
        reason="TOPIC_NOT_FOUND",
    )


def _violation(field_path: str, description: str) -> FieldViolation:
    return FieldViolation(field=field_path, description=description)


@dataclass
class _Backoff:
    """Per-key retry schedule of the work loop (commits, aborts, splits)."""

    next_at: dict[object, float] = field(default_factory=dict)
    delay: dict[object, float] = field(default_factory=dict)

    def due(self, key: object) -> bool:
        return time.monotonic() >= self.next_at.get(key, 0.0)

    def failed(self, key: object) -> None:
        delay = min(_MAX_BACKOFF_S, self.delay.get(key, 0.05) * 2)
        self.delay[key] = delay
        self.next_at[key] = time.monotonic() + delay

    def succeeded(self, key: object) -> None:
        self.next_at.pop(key, None)
        self.delay.pop(key, None)


@dataclass(frozen=True)
class HeartbeatTaskReport:
    """One task status an executor reported in a heartbeat."""

    task_id: TaskId
    task_generation: Generation
    state: TaskState
    error: str | None


class Coordinator:
    """The leader's decisions (Kafka Connect's herder) and its work loop, over
    `CoordinatorCore`, coordinator-core's facade of the domain and the store.

    Methods that change state are leader-only: on a follower they raise NotLeader
    (UNAVAILABLE with the leader's address, as the lease row says now).
    """

    def __init__(
        self,
        *,
        store: SqlStore,
        settings: CoordinatorSettings,
        executor_client: ExecutorClient | None = None,
        topics: TopicPartitions | None = None,
        failpoints: Failpoints | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.core = CoordinatorCore(
            store=store,
            coordinator_id=settings.coordinator_id,
            advertise_address=settings.advertise,
            lease_ms=settings.lease_ms,
            lease_safety_ms=settings.lease_safety_ms,
            session_timeout_ms=settings.session_timeout_ms,
            reassign_delay_ms=settings.reassign_delay_ms,
        )
        self._executors = executor_client or ExecutorClient()
        self._topics = topics or TopicPartitions()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._recover_term: Fence | None = None
        self._recover_lock = threading.Lock()
        self._backoff = _Backoff()
        # LOCKGATE_FAILPOINTS=after_complete_before_commit[@N] makes this process exit hard
        # between a COMPLETE checkpoint and its commit calls (fault tests only).
        self._failpoints = failpoints or Failpoints()
        self._precommits: GroupCommit[Precommit, CheckpointRecord] = GroupCommit(
            write_batch=lambda batch: self._leader(lambda: self.core.precommits(batch)),
            write_one=lambda one: self._leader(lambda: self.core.precommit(one)),
        )
        # One leader duty at a time: the work loop's pass, or a servicer thread finishing a
        # deleted pipeline's checkpoints (they share the retry schedule).
        self._duty_lock = threading.Lock()
        self.lease_keeper = LeaseKeeper(
            core=self.core, settings=settings, on_became_leader=self._became_leader
        )
        self._thread = threading.Thread(
            target=self._run, name=f"leader-{settings.coordinator_id}", daemon=True
        )

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the lease keeper and the work loop."""
        self.lease_keeper.start()
        self._thread.start()

    def stop(self) -> None:
        """Stop both threads and, if leading, give the lease up so a follower takes over
        without waiting for it to expire."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=10)
        self.lease_keeper.stop()
        if current_fence(self.core) is not None:
            try:
                self.core.resign()
                _LOG.info("coordinator %s released the lease", self.settings.coordinator_id)
            except Exception:
                _LOG.warning("could not release the lease; it will expire", exc_info=True)
        self._executors.close()

    def wake(self) -> None:
        """Run a pass of the work loop now (a report arrived, an executor joined)."""
        self._wake.set()

    def _became_leader(self, fence: Fence) -> None:
        with self._recover_lock:
            self._recover_term = fence
        self._wake.set()

    def require_fence(self) -> Fence:
        """The current term's fence; on a follower, NotLeader naming the leader's address
        as the lease row says now (this replica's own copy may be a paused term's)."""
        try:
            return self.core.fence()
        except NotLeader as exc:
            if exc.leader_address:
                raise
        try:
            lease = self.core.leader()
        except Exception:
            raise NotLeader(leader_address=None) from None
        held_by_other = lease.is_held and lease.holder != self.settings.coordinator_id
        raise NotLeader(leader_address=lease.holder_address if held_by_other else None)

    def _leader(self, write: Callable[[], _T]) -> _T:
        """Run a leader-only core call; a follower's NotLeader names the leader's address
        and a lost term (FencedError, nothing written) becomes NotLeader too."""
        self.require_fence()
        try:
            return write()
        except FencedError as exc:
            raise NotLeader(leader_address=exc.leader_address, message=exc.message) from None

    # ------------------------------------------------------------------ membership

    def register_executor(self, *, executor_id: ExecutorId, address: str) -> ExecutorRecord:
        """Start a new session (generation + 1) for an executor. Leader-only."""
        record = self._leader(lambda: self.core.register_executor(executor_id, address))
        self.wake()
        return record

    def heartbeat(
        self,
        *,
        executor_id: ExecutorId,
        generation: Generation,
        reports: Sequence[HeartbeatTaskReport],
    ) -> list[TaskRecord]:
        """Keep an executor's session alive, record its tasks' states, and return the tasks
        it must run. Leader-only.

        NotFound if the session expired (the executor must register again), StaleGeneration
        if a newer registration of the id exists.
        """
        self.require_fence()
        executors, now_ms = self.store.executors.list_executors()
        current = next((e for e in executors if e.executor_id == executor_id), None)
        if current is None:
            raise NotFound(
                f"executor {executor_id!r} is not registered (never, or it deregistered); "
                "register again",
                resource_type="executor",
                resource_name=executor_id,
            )
        if current.generation == generation and not self.is_alive(current, now_ms):
            raise NotFound(
                f"the session of executor {executor_id!r} (generation {generation}) expired "
                f"after {self.settings.session_timeout_ms} ms without a heartbeat; register "
                "again",
                resource_type="executor",
                resource_name=executor_id,
                reason="SESSION_EXPIRED",
            )
        self._leader(lambda: self.core.heartbeat(executor_id, generation))
        tasks = {t.task_id: t for t in self.store.pipelines.list_tasks()}
        for report in reports:
            self._apply_task_report(executor_id, generation, report, tasks)
        return [t for t in self.store.pipelines.list_tasks() if t.executor_id == executor_id]

    def _apply_task_report(
        self,
        executor_id: ExecutorId,
        generation: Generation,
        report: HeartbeatTaskReport,
        tasks: Mapping[TaskId, TaskRecord],
    ) -> None:
        task = tasks.get(report.task_id)
        if (
            task is None
            or task.executor_id != executor_id
            or task.generation != report.task_generation
        ):
            return  # a report about an old assignment: the response tells the new one
        if task.state is report.state and task.state_executor_generation == generation:
            return
        try:
            self._leader(
                lambda: self.core.report_task_state(
                    task_id=report.task_id,
                    task_generation=report.task_generation,
                    executor_id=executor_id,
                    executor_generation=generation,
                    state=report.state,
                    error=report.error,
                )
            )
        except (StaleGeneration, IllegalTransition, NotFound) as exc:
            _LOG.info("task %s report ignored: %s", report.task_id, exc)
            return
        # A task that restored re-committed and aborted handles of its restore state, but
        # that state was read when the assignment was sent, not now: what it did is not
        # recorded here. The commit and abort loops call the executors and record only
        # what they were answered (a COMMITTED checkpoint whose handles were never
        # committed would be lost for good when its slot is reused).
        self.wake()

    def deregister_executor(self, *, executor_id: ExecutorId, generation: Generation) -> None:
        """Remove an executor; its tasks move on the next pass. Leader-only."""
        self._leader(lambda: self.core.deregister_executor(executor_id, generation))
        self.wake()

    def is_alive(self, executor: ExecutorRecord, now_ms: int) -> bool:
        """Whether an executor heartbeated within the session timeout (database clock)."""
        return (
            executor_liveness(
                last_heartbeat_ms=executor.last_heartbeat_ms,
                now_ms=now_ms,
                session_timeout_ms=self.settings.session_timeout_ms,
                reassign_delay_ms=self.settings.reassign_delay_ms,
            )
            is ExecutorLiveness.ALIVE
        )

    # ------------------------------------------------------------------ pipelines

    def create_pipeline(self, *, spec: PipelineSpec, target_state: TargetState) -> PipelineRecord:
        """Create a pipeline and split it into tasks over its source partitions.

        Leader-only. InvalidArgument naming the topic field if a topic does not exist.
        """
        self.require_fence()
        partitions = self._source_partitions(spec)
        self._topics.check_exists(
            bootstrap_servers=spec.sink.bootstrap_servers,
            topic=spec.sink.topic,
            field_path="sink.kafka.topic",
        )
        record = self._leader(lambda: self.core.create_pipeline(spec.to_json()))
        if target_state is TargetState.PAUSED:
            record = self._leader(lambda: self.core.pause_pipeline(spec.name))
        elif target_state is TargetState.STOPPED:
            record = self._leader(lambda: self.core.stop_pipeline(spec.name))
        self._leader(lambda: self.core.reconfigure_tasks(spec.name, partitions))
        self.wake()
        return record

    def update_pipeline(
        self, *, spec: PipelineSpec, expected_version: int | None
    ) -> PipelineRecord:
        """Replace a pipeline's spec (config version + 1) and re-split its tasks if its
        topics or tasks_max changed. Leader-only."""
        self.require_fence()
        before = self.core.get_pipeline(spec.name)
        resplit = before.spec.source != spec.source or before.spec.tasks_max != spec.tasks_max
        partitions = self._source_partitions(spec) if resplit else None
        if spec.sink != before.spec.sink:
            self._topics.check_exists(
                bootstrap_servers=spec.sink.bootstrap_servers,
                topic=spec.sink.topic,
                field_path="sink.kafka.topic",
            )
        record = self._leader(
            lambda: self.core.update_pipeline(spec.to_json(), expected_version=expected_version)
        )
        if partitions is not None:
            self._leader(lambda: self.core.reconfigure_tasks(spec.name, partitions))
        self.wake()
        return record

    def replan_pipeline(self, *, pipeline_id: PipelineId) -> list[TaskRecord]:
        """Split a pipeline's tasks again from its spec and the topics' partitions now.

        Leader-only.
        """
        self.require_fence()
        pipeline = self.core.get_pipeline(pipeline_id)
        partitions = self._source_partitions(pipeline.spec)
        tasks = self._leader(lambda: self.core.reconfigure_tasks(pipeline_id, partitions))
        self.wake()
        return tasks

    def topic_violations(self, spec: PipelineSpec) -> list[FieldViolation]:
        """The spec's topics that do not exist in Kafka (what CreatePipeline would refuse);
        any replica may ask. Unavailable if Kafka cannot be reached."""
        violations: list[FieldViolation] = []
        try:
            self._source_partitions(spec)
        except InvalidArgument as exc:
            violations.extend(exc.violations)
        try:
            self._topics.check_exists(
                bootstrap_servers=spec.sink.bootstrap_servers,
                topic=spec.sink.topic,
                field_path="sink.kafka.topic",
            )
        except InvalidArgument as exc:
            violations.extend(exc.violations)
        return violations

    def _source_partitions(self, spec: PipelineSpec) -> list[TopicPartition]:
        return self._topics.partitions(
            bootstrap_servers=spec.source.bootstrap_servers,
            topics=spec.source.topics,
            field_path="source.kafka.topics",
        )

    def delete_pipeline(self, *, pipeline_id: PipelineId) -> None:
        """Abort the pipeline's in-flight checkpoints, try once to commit its COMPLETE ones,
        then delete it with its history. Leader-only."""
        fence = self.require_fence()
        self.core.get_pipeline(pipeline_id)
        with self._duty_lock:
            self._abort_triggered(pipeline_id, reason="pipeline deleted")
            self._send_aborts(fence, only=pipeline_id)
            self._commit_pending(fence, only=pipeline_id)
        self._leader(lambda: self.core.delete_pipeline(pipeline_id))
        self.wake()

    def set_target_state(
        self, *, pipeline_id: PipelineId, target_state: TargetState
    ) -> PipelineRecord:
        """Pause, resume or stop a pipeline. Leader-only."""
        verbs = {
            TargetState.RUNNING: self.core.resume_pipeline,
            TargetState.PAUSED: self.core.pause_pipeline,
            TargetState.STOPPED: self.core.stop_pipeline,
        }
        record = self._leader(lambda: verbs[target_state](pipeline_id))
        if target_state is TargetState.STOPPED:
            # Stopped tasks are released: their in-flight pre-commits can never complete.
            self._abort_triggered(pipeline_id, reason="pipeline stopped")
        self.wake()
        return record

    def restart_tasks(self, *, pipeline_id: PipelineId, only_failed: bool) -> list[TaskRecord]:
        """Give a pipeline's tasks (or its FAILED ones) new generations. Leader-only."""
        tasks = self._leader(
            lambda: self.core.restart_pipeline(
                pipeline_id, include_tasks=True, only_failed=only_failed
            )
        )
        self.wake()
        return tasks

    def reset_offsets(
        self, *, pipeline_id: PipelineId, offsets: Mapping[TopicPartition, int] | None
    ) -> None:
        """Set where a STOPPED pipeline resumes. Leader-only."""
        self._leader(lambda: self.core.reset_offsets(pipeline_id, offsets))

    # ------------------------------------------------------------------ reports

    def report_precommit(self, *, precommit: Precommit) -> CheckpointRecord:
        """Record a task's pre-commit of N; COMPLETE is written in the same transaction when
        it was the last one. Leader-only. Wakes the loop to commit at once. Reports that
        arrive together share one transaction (group commit)."""
        record = self._precommits.submit(precommit)
        if record.state is CheckpointState.COMPLETE:
            self.wake()
        return record

    def report_checkpoint_failure(
        self,
        *,
        pipeline_id: PipelineId,
        checkpoint_id: CheckpointId,
        task: TaskId,
        task_generation: Generation,
        executor_id: ExecutorId,
        executor_generation: Generation,
        error: str,
        task_failed: bool,
    ) -> CheckpointState:
        """A task could not pre-commit N: abort N and every later in-flight checkpoint of
        the pipeline (a decided N stays as it is). Leader-only."""
        self.require_fence()
        checkpoint = self.store.checkpoints.get_checkpoint(
            pipeline_id=pipeline_id, checkpoint_id=checkpoint_id
        )
        trigger = next((t for t in checkpoint.tasks if t.task_id == task), None)
        if trigger is None:
            raise NotFound(
                f"task {task} is not part of checkpoint {checkpoint_id} of {pipeline_id!r}",
                resource_type="checkpoint_task",
                resource_name=task,
            )
        if trigger.task_generation != task_generation:
            raise StaleGeneration(
                f"task {task} reported generation {task_generation} but checkpoint "
                f"{checkpoint_id} was triggered at generation {trigger.task_generation}"
            )
        executor = self.store.executors.get_executor(executor_id=executor_id)
        if executor.generation != executor_generation:
            raise StaleGeneration(
                f"executor {executor_id} reported generation {executor_generation} but the "
                f"current generation is {executor.generation}"
            )
        if checkpoint.state is CheckpointState.TRIGGERED:
            reason = f"task {task} failed to pre-commit: {error}"
            # Decided meanwhile (IllegalTransition): a late failure report changes nothing.
            with contextlib.suppress(IllegalTransition):
                self._leader(lambda: self.core.abort_checkpoint(pipeline_id, checkpoint_id, reason))
        if task_failed:
            self.report_task_failure(
                task=task,
                task_generation=task_generation,
                executor_id=executor_id,
                executor_generation=executor_generation,
                error=error,
            )
        self.wake()
        return self.store.checkpoints.get_checkpoint(
            pipeline_id=pipeline_id, checkpoint_id=checkpoint_id
        ).state

    def report_task_failure(
        self,
        *,
        task: TaskId,
        task_generation: Generation,
        executor_id: ExecutorId,
        executor_generation: Generation,
        error: str,
    ) -> None:
        """Mark a task FAILED and abort the pipeline's checkpoints waiting for it.

        Leader-only.
        """
        record = self._leader(
            lambda: self.core.report_task_state(
                task_id=task,
                task_generation=task_generation,
                executor_id=executor_id,
                executor_generation=executor_generation,
                state=TaskState.FAILED,
                error=error,
            )
        )
        self._abort_triggered(record.pipeline_id, reason=f"task {task} failed: {error}")
        self.wake()

    # ------------------------------------------------------------------ the work loop

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.settings.tick_ms / 1000.0)
            self._wake.clear()
            if self._stop.is_set():
                return
            fence = current_fence(self.core)
            if fence is None:
                continue
            try:
                with self._duty_lock:
                    self.run_pass(fence)
            except (FencedError, NotLeader, LeaderEpochRefused) as exc:
                # The term ended under us; the lease keeper will see it on its next try.
                _LOG.warning("leader pass stopped: %s", exc)
            except Exception:
                _LOG.exception("leader pass failed; retrying on the next pass")

    def run_pass(self, fence: Fence) -> None:
        """One pass of the leader's duties (see module docstring). Leader-only."""
        with self._recover_lock:
            recover = self._recover_term == fence
        if recover:
            self._recover(fence)
            with self._recover_lock:
                self._recover_term = None
        self._rebalance(fence)
        self._abort_timed_out(fence)
        self._send_aborts(fence)
        self._commit_pending(fence)
        self._trigger_due(fence)

    def _recover(self, fence: Fence) -> None:
        """A new leader's first step (DESIGN.md step 5). Leader-only.

        It cannot know which pre-commit RPCs its predecessor had outstanding, so every
        TRIGGERED checkpoint aborts; COMPLETE ones are committed by `_commit_pending` in
        creation order, and the aborted ones' handles go out through `_send_aborts`.
        """
        plan = self.core.recover()
        _LOG.info(
            "leader epoch %s recovery: aborted %d in-flight checkpoints; %d to commit again, "
            "%d transactions to abort",
            fence.leader_epoch,
            len(plan.aborted),
            len(plan.to_commit),
            len(plan.to_abort),
        )

    def _rebalance(self, fence: Fence) -> None:
        """Move tasks of executors dead past the reassignment delay, spread new tasks, and
        release the tasks of STOPPED pipelines. Leader-only."""
        executors, now_ms = self.store.executors.list_executors()
        pipelines = {p.pipeline_id: p for p in self._all_pipelines()}
        tasks = self.store.pipelines.list_tasks()
        wanted = [
            t.task_id
            for t in tasks
            if t.pipeline_id in pipelines
            and pipelines[t.pipeline_id].target_state is not TargetState.STOPPED
        ]
        current: dict[ExecutorId, set[TaskId]] = defaultdict(set)
        for t in tasks:
            if t.executor_id is not None:
                current[t.executor_id].add(t.task_id)
        plan = plan_assignment(
            current=current,
            last_heartbeats_ms={e.executor_id: e.last_heartbeat_ms for e in executors},
            all_tasks=wanted,
            now_ms=now_ms,
            session_timeout_ms=self.settings.session_timeout_ms,
            reassign_delay_ms=self.settings.reassign_delay_ms,
        )
        new = {e: frozenset(ts) for e, ts in plan.assignment.items() if ts}
        old = {e: frozenset(ts) for e, ts in current.items() if ts}
        if new != old:
            changed = self.store.pipelines.apply_assignment(fence=fence, assignment=new)
            _LOG.info(
                "rebalanced: %d tasks changed executor (%s)",
                len(changed),
                ", ".join(f"{t.task_id}->{t.executor_id or '-'}" for t in changed[:10]),
            )

    def _abort_timed_out(self, fence: Fence) -> None:
        aborted = self.core.abort_timed_out()
        for pipeline_id, checkpoint_id in aborted:
            _LOG.warning("checkpoint %s of %s timed out: aborted", checkpoint_id, pipeline_id)

    def _abort_triggered(self, pipeline_id: PipelineId, *, reason: str) -> None:
        """Abort the pipeline's TRIGGERED checkpoints (the earliest takes the later ones
        along). Leader-only."""
        triggered = self.store.checkpoints.list_checkpoints(
            pipeline_id=pipeline_id, limit=100, states=[CheckpointState.TRIGGERED]
        )
        if triggered:
            first = min(c.checkpoint_id for c in triggered)
            self._leader(lambda: self.core.abort_checkpoint(pipeline_id, first, reason))

    def _alive_executors(self) -> dict[ExecutorId, ExecutorRecord]:
        executors, now_ms = self.store.executors.list_executors()
        return {e.executor_id: e for e in executors if self.is_alive(e, now_ms)}

    def _pick_executor(
        self,
        preferred: ExecutorId | None,
        alive: Mapping[ExecutorId, ExecutorRecord],
    ) -> ExecutorRecord | None:
        """The executor to send a commit/abort to: the task's own if alive, else any alive
        one (any executor may finish any handle), in id order for determinism."""
        if preferred is not None and preferred in alive:
            return alive[preferred]
        for executor_id in sorted(alive):
            return alive[executor_id]
        return None

    def _commit_pending(self, fence: Fence, *, only: PipelineId | None = None) -> None:
        """Commit every COMPLETE-not-COMMITTED checkpoint, oldest first per pipeline, until
        each is acked; then mark it COMMITTED (DESIGN.md step 4). Leader-only."""
        pending = self.store.checkpoints.list_pending_commits(pipeline_id=only)
        if not pending:
            return
        alive = self._alive_executors()
        blocked: set[PipelineId] = set()
        for commit in pending:
            if commit.pipeline_id in blocked:
                continue  # creation order: N+1 waits for N's ack
            key = ("commit", commit.pipeline_id, commit.checkpoint_id)
            if not self._backoff.due(key):
                blocked.add(commit.pipeline_id)
            elif self._commit_one(fence, commit, alive):
                self._backoff.succeeded(key)
            else:
                self._backoff.failed(key)
                blocked.add(commit.pipeline_id)

    def _commit_one(
        self, fence: Fence, commit: PendingCommit, alive: Mapping[ExecutorId, ExecutorRecord]
    ) -> bool:
        pipeline = self.store.pipelines.get_pipeline(pipeline_id=commit.pipeline_id)
        checkpoint = self.store.checkpoints.get_checkpoint(
            pipeline_id=commit.pipeline_id, checkpoint_id=commit.checkpoint_id
        )
        owner = {t.task_id: t.executor_id for t in checkpoint.tasks}
        groups: dict[ExecutorId, list[common_pb2.SinkHandle]] = defaultdict(list)
        records: dict[ExecutorId, ExecutorRecord] = {}
        for task_handles in commit.handles:
            executor = self._pick_executor(owner.get(task_handles.task_id), alive)
            if executor is None:
                _LOG.warning(
                    "checkpoint %s of %s is COMPLETE but no executor is alive to commit it",
                    commit.checkpoint_id,
                    commit.pipeline_id,
                )
                return False
            records[executor.executor_id] = executor
            groups[executor.executor_id].extend(
                sink_handle_pb(h, bootstrap_servers=pipeline.spec.sink.bootstrap_servers)
                for h in task_handles.handles
            )
        self._failpoints.reach(
            Failpoint.AFTER_COMPLETE_BEFORE_COMMIT,
            detail=f"checkpoint {commit.checkpoint_id} of {commit.pipeline_id} is COMPLETE",
        )
        for executor_id, handles in sorted(groups.items()):
            try:
                self._executors.commit_checkpoint(
                    fence=fence,
                    executor=records[executor_id],
                    pipeline_name=commit.pipeline_id,
                    checkpoint_id=commit.checkpoint_id,
                    handles=handles,
                )
            except LeaderEpochRefused:
                raise
            except ExecutorCallFailed as exc:
                _LOG.warning("commit not acked yet, will retry: %s", exc)
                return False
        self._leader(lambda: self.core.mark_committed(commit.pipeline_id, commit.checkpoint_id))
        _LOG.info("checkpoint %s of %s COMMITTED", commit.checkpoint_id, commit.pipeline_id)
        return True

    def _send_aborts(self, fence: Fence, *, only: PipelineId | None = None) -> None:
        """Abort the transactions of checkpoints that never became COMPLETE, then record
        it so they leave the lingering list. Leader-only."""
        lingering = self.store.checkpoints.list_lingering_transactions(pipeline_id=only)
        if not lingering:
            return
        alive = self._alive_executors()
        by_checkpoint: dict[tuple[PipelineId, CheckpointId], list[LingeringTransaction]] = (
            defaultdict(list)
        )
        for item in lingering:
            by_checkpoint[(item.pipeline_id, item.checkpoint_id)].append(item)
        for (pipeline_id, checkpoint_id), items in sorted(by_checkpoint.items()):
            key = ("abort", pipeline_id, checkpoint_id)
            if not self._backoff.due(key):
                continue
            if self._abort_one(fence, pipeline_id, checkpoint_id, items, alive):
                self._backoff.succeeded(key)
            else:
                self._backoff.failed(key)

    def _abort_one(
        self,
        fence: Fence,
        pipeline_id: PipelineId,
        checkpoint_id: CheckpointId,
        items: Sequence[LingeringTransaction],
        alive: Mapping[ExecutorId, ExecutorRecord],
    ) -> bool:
        try:
            pipeline = self.store.pipelines.get_pipeline(pipeline_id=pipeline_id)
            checkpoint = self.store.checkpoints.get_checkpoint(
                pipeline_id=pipeline_id, checkpoint_id=checkpoint_id
            )
        except NotFound:
            return True  # deleted meanwhile
        owner = {t.task_id: t.executor_id for t in checkpoint.tasks}
        groups: dict[ExecutorId, list[LingeringTransaction]] = defaultdict(list)
        records: dict[ExecutorId, ExecutorRecord] = {}
        for item in items:
            executor = self._pick_executor(owner.get(item.task_id), alive)
            if executor is None:
                return False
            records[executor.executor_id] = executor
            groups[executor.executor_id].append(item)
        servers = pipeline.spec.sink.bootstrap_servers
        for executor_id, group in sorted(groups.items()):
            handles = [
                common_pb2.SinkHandle(
                    kafka=common_pb2.KafkaTransactionHandle(
                        transactional_id=i.transactional_id,
                        producer_id=i.producer_id,
                        producer_epoch=i.producer_epoch,
                        bootstrap_servers=servers,
                    )
                )
                for i in group
                if i.must_be_sent
            ]
            try:
                self._executors.abort_checkpoint(
                    fence=fence,
                    executor=records[executor_id],
                    pipeline_name=pipeline_id,
                    checkpoint_id=checkpoint_id,
                    handles=handles,
                    reason=checkpoint.abort_reason or "aborted",
                )
            except LeaderEpochRefused:
                raise
            except ExecutorCallFailed as exc:
                _LOG.warning("abort not acked yet, will retry: %s", exc)
                return False
            for item in group:
                self._leader(
                    lambda item=item: self.core.handles_aborted(  # type: ignore[misc]
                        pipeline_id, checkpoint_id, item.task_id
                    )
                )
        return True

    def _trigger_due(self, fence: Fence) -> None:
        """Trigger the next checkpoint of every RUNNING pipeline whose interval has passed
        and whose tasks all run, then call the executors (DESIGN.md step 1). Leader-only."""
        pipelines = [p for p in self._all_pipelines() if p.target_state is TargetState.RUNNING]
        if not pipelines:
            return
        executors, now_ms = self.store.executors.list_executors()
        alive = {e.executor_id: e for e in executors if self.is_alive(e, now_ms)}
        tasks_by_pipeline: dict[PipelineId, list[TaskRecord]] = defaultdict(list)
        for t in self.store.pipelines.list_tasks():
            tasks_by_pipeline[t.pipeline_id].append(t)
        lingering = {t.pipeline_id for t in self.store.checkpoints.list_lingering_transactions()}
        for pipeline in pipelines:
            tasks = tasks_by_pipeline.get(pipeline.pipeline_id, [])
            if not tasks or pipeline.pipeline_id in lingering:
                continue
            if not all(
                t.executor_id in alive
                and t.state is TaskState.RUNNING
                and t.state_executor_id == t.executor_id
                for t in tasks
            ):
                continue
            recent = self.store.checkpoints.list_checkpoints(
                pipeline_id=pipeline.pipeline_id, limit=4
            )
            if any(c.state is CheckpointState.TRIGGERED for c in recent):
                continue
            in_flight = sum(1 for c in recent if c.in_flight)
            if not should_trigger(
                last_triggered_at_ms=recent[0].triggered_at_ms if recent else None,
                now_ms=now_ms,
                interval_ms=pipeline.spec.checkpoint.interval_ms,
                in_flight=in_flight,
            ):
                continue
            try:
                checkpoint = self.store.checkpoints.trigger_checkpoint(
                    fence=fence, pipeline_id=pipeline.pipeline_id
                )
            except FailedPrecondition as exc:
                _LOG.debug("not triggering %s: %s", pipeline.pipeline_id, exc)
                continue
            self._send_trigger(fence, pipeline, checkpoint, tasks, alive)

    def _send_trigger(
        self,
        fence: Fence,
        pipeline: PipelineRecord,
        checkpoint: CheckpointRecord,
        tasks: Iterable[TaskRecord],
        alive: Mapping[ExecutorId, ExecutorRecord],
    ) -> None:
        offsets = {
            TopicPartition(o.topic, o.partition): o.next_offset
            for o in self.store.offsets.get_offsets(pipeline_id=pipeline.pipeline_id)
        }
        task_by_id = {t.task_id: t for t in tasks}
        calls: dict[ExecutorId, list[CheckpointTaskCall]] = defaultdict(list)
        for trigger in checkpoint.tasks:
            task = task_by_id[trigger.task_id]
            assert trigger.executor_id is not None, "trigger_checkpoint refuses unassigned tasks"
            calls[trigger.executor_id].append(
                CheckpointTaskCall(
                    task_index=task.task_index,
                    task_generation=int(trigger.task_generation),
                    start_offsets={tp: offsets[tp] for tp in task.partitions if tp in offsets},
                    transactional_id_prefix=trigger.transactional_id,
                )
            )
        failure: str | None = None
        for executor_id, task_calls in sorted(calls.items()):
            executor = alive.get(executor_id)
            if executor is None:
                failure = f"executor {executor_id} is not alive"
                break
            try:
                results = self._executors.trigger_checkpoint(
                    fence=fence,
                    executor=executor,
                    pipeline_name=pipeline.pipeline_id,
                    checkpoint_id=checkpoint.checkpoint_id,
                    config_version=pipeline.config_version,
                    tasks=task_calls,
                    timeout_ms=pipeline.spec.checkpoint.timeout_ms,
                )
            except LeaderEpochRefused:
                raise
            except (ExecutorRegistrationStale, ExecutorCallFailed) as exc:
                failure = str(exc)
                break
            refused = [r for r in results if not r.accepted]
            if refused:
                failure = "; ".join(
                    f"task {pipeline.pipeline_id}/{r.task_index} refused the trigger: "
                    f"{r.outcome} {r.reason}".strip()
                    for r in refused
                )
                break
        if failure is not None:
            _LOG.warning(
                "checkpoint %s of %s aborted at trigger: %s",
                checkpoint.checkpoint_id,
                pipeline.pipeline_id,
                failure,
            )
            reason = f"trigger failed: {failure}"
            # Every task may have reported already (IllegalTransition): then N is decided.
            with contextlib.suppress(IllegalTransition):
                self._leader(
                    lambda: self.core.abort_checkpoint(
                        pipeline.pipeline_id, checkpoint.checkpoint_id, reason
                    )
                )

    # ------------------------------------------------------------------ helpers

    def _all_pipelines(self) -> list[PipelineRecord]:
        result: list[PipelineRecord] = []
        token = ""
        while True:
            page, token = self.store.pipelines.list_pipelines(page_size=500, page_token=token)
            result.extend(page)
            if not token:
                return result
