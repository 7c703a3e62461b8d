"""The executor's runtime: membership, task lifecycle, checkpoints, commits (issue #5).

As in Kafka Connect, the coordinator's leader decides (the Herder) and this module runs
(the Worker): it registers with the leader, heartbeats, applies the full assignment each
response carries, restores (re)assigned tasks, runs triggered pre-commits on one worker
thread per task, reports their results, and commits or aborts sink handles when called.

Threads:

* the membership thread: RegisterExecutor, then Heartbeat every ``heartbeat_interval_ms``;
  it applies assignments and notices a lost session;
* one single-thread queue per task: restore, then its pre-commits in trigger order (N+1's
  input starts where N's ended, so they must not run side by side within a task);
* the gRPC server's threads call :meth:`ExecutorRuntime.trigger_checkpoint`,
  :meth:`commit_handles`, :meth:`abort_checkpoint` and :meth:`status`.

Every mutable field of the runtime is guarded by one lock; no Kafka or Spark call is made
while holding it.

A pre-commit's handles are aborted by this executor only when no report of them can have
been recorded by a leader (the task was stopped or the checkpoint aborted before any
report was sent, or the very first report was refused). Once a report may have arrived,
the handles belong to the leader's decision: aborting them could destroy a COMPLETE
checkpoint. The leader times out and aborts whatever it never completed.

An aborted checkpoint's batch may still be running here (its task moved to another
executor, or the leader gave up on it). That batch opens producers on its task slot's
transactional ids, and ``init_transactions`` on one of them aborts whatever transaction the
id has open -- once the leader reuses the slot, a later checkpoint's pre-committed one. So
``AbortCheckpoint`` answers only when no batch of that checkpoint runs on this executor any
more (``UNAVAILABLE`` while one does, and the leader retries); the leader reuses a slot only
after every abort of its last checkpoint was answered. Known race: the leader sends the abort
to the executor that ran the task only while that one is alive to it; an executor whose
session expired (paused, cut off) while a batch ran is not waited for, and that batch could
still open a producer on a slot the leader reused.

The data plane (Spark batch) is injected as a :class:`DataPlane`: :class:`SparkDataPlane`
in production, :class:`ControlOnlyDataPlane` for tests of the control path only.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import grpc
from confluent_kafka import KafkaException
from google.protobuf import timestamp_pb2

from lockgate.common.errors import (
    FailedPrecondition,
    InvalidArgument,
    LockgateError,
    Unavailable,
)
from lockgate.common.failpoints import Failpoint, Failpoints
from lockgate.common.grpc_client import error_details
from lockgate.common.kafka_transactions import (
    InvalidTransactionStateError,
    ProducerFencedError,
    TransactionalId,
    TransactionHandle,
    TransactionResumeError,
    UnknownTransactionError,
    abort_transaction,
    commit_transaction,
    open_transactional_producer,
    open_transactions_of_slot,
)
from lockgate.executor.errors import RecordError
from lockgate.executor.fencing import (
    ExecutorGeneration,
    LeaderEpoch,
    LeaderEpochFence,
    StaleTokenError,
    TaskGeneration,
    TriggerVerdict,
    decide_trigger,
)
from lockgate.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_LOG = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------
# Identity and task state machine


@dataclass(frozen=True, order=True)
class TaskRef:
    """One task of a pipeline, shown as ``<pipeline>/<index>``."""

    pipeline_name: str
    task_index: int

    def __str__(self) -> str:
        return f"{self.pipeline_name}/{self.task_index}"


class TaskPhase(enum.Enum):
    """Observed state of a task on this executor."""

    RESTORING = "restoring"
    RUNNING = "running"
    PAUSED = "paused"
    FAILED = "failed"
    STOPPED = "stopped"


#: Allowed moves of :class:`TaskPhase`; anything else is a bug.
TASK_TRANSITIONS: Mapping[TaskPhase, frozenset[TaskPhase]] = {
    TaskPhase.RESTORING: frozenset({TaskPhase.RUNNING, TaskPhase.PAUSED, TaskPhase.FAILED}),
    TaskPhase.RUNNING: frozenset({TaskPhase.PAUSED, TaskPhase.FAILED}),
    TaskPhase.PAUSED: frozenset({TaskPhase.RUNNING, TaskPhase.FAILED}),
    TaskPhase.FAILED: frozenset(),
    TaskPhase.STOPPED: frozenset(),
}


class InvalidTaskTransition(RuntimeError):
    """A task was asked to move between two phases the state machine does not allow."""


def next_phase(current: TaskPhase, target: TaskPhase) -> TaskPhase:
    """Return ``target`` if ``current -> target`` is allowed (or a no-op); raise otherwise.

    Any phase may become STOPPED (the task left the assignment).
    """
    if target is current or target is TaskPhase.STOPPED:
        return target
    if target not in TASK_TRANSITIONS[current]:
        raise InvalidTaskTransition(f"task cannot move from {current.value} to {target.value}")
    return target


_PHASE_TO_PROTO: Mapping[TaskPhase, common_pb2.TaskState.ValueType] = {
    TaskPhase.RESTORING: common_pb2.TASK_STATE_RESTARTING,
    TaskPhase.RUNNING: common_pb2.TASK_STATE_RUNNING,
    TaskPhase.PAUSED: common_pb2.TASK_STATE_PAUSED,
    TaskPhase.FAILED: common_pb2.TASK_STATE_FAILED,
    TaskPhase.STOPPED: common_pb2.TASK_STATE_STOPPED,
}

# ---------------------------------------------------------------------------------------
# Data plane interface


@dataclass(frozen=True)
class SourceRange:
    """Half-open offset range ``[start_offset, end_offset)`` a pre-commit read."""

    topic: str
    partition: int
    start_offset: int
    end_offset: int


@dataclass(frozen=True)
class KafkaHandle:
    """A prepared Kafka transaction; producer id/epoch are None when never reported."""

    transactional_id: str
    bootstrap_servers: str
    producer_id: int | None = None
    producer_epoch: int | None = None


@dataclass(frozen=True)
class PrecommitWork:
    """Everything one task's pre-commit of checkpoint N needs, in plain values."""

    task: TaskRef
    checkpoint_id: int
    spec: Mapping[str, Any]
    source_partitions: tuple[tuple[str, int], ...]
    start_offsets: Mapping[tuple[str, int], int]
    transactional_id_prefix: str
    max_records_per_partition: int = 0
    transaction_timeout_ms: int = 0


@dataclass(frozen=True)
class PrecommitOutput:
    """What a pre-commit left prepared, for ReportPrecommit."""

    ranges: tuple[SourceRange, ...]
    handles: tuple[KafkaHandle, ...]
    records_read: int = 0
    records_written: int = 0
    records_dead_lettered: int = 0


class DataPlane(Protocol):
    """The batch runner the runtime drives; the real one is :class:`SparkDataPlane`."""

    def start(self) -> None:
        """Get ready to run batches (build and warm up the SparkSession)."""

    def validate_spec(self, spec: Mapping[str, Any]) -> None:
        """Raise ``InvalidArgument`` (``SpecError``) if this executor cannot run ``spec``."""

    def run_precommit(self, work: PrecommitWork) -> PrecommitOutput:
        """Run one pre-commit; raise a ``LockgateError`` subclass on failure."""

    def stop(self) -> None:
        """Release resources (stop the SparkSession)."""


class ControlOnlyDataPlane:
    """A data plane that reads and writes nothing: every pre-commit is empty.

    For tests of the control path (membership, fencing, failpoints, commit and abort of
    handles made elsewhere) without paying for a SparkSession; selected with
    ``--data-plane none``.
    """

    def start(self) -> None:
        """Nothing to start."""

    def validate_spec(self, spec: Mapping[str, Any]) -> None:
        """Every spec is accepted."""

    def run_precommit(self, work: PrecommitWork) -> PrecommitOutput:
        """An empty range at the start offset of each partition, no handle."""
        ranges = tuple(
            SourceRange(topic, partition, offset, offset)
            for (topic, partition) in work.source_partitions
            for offset in [work.start_offsets.get((topic, partition), 0)]
        )
        return PrecommitOutput(ranges=ranges, handles=())

    def stop(self) -> None:
        """Nothing to stop."""


#: ``transaction.timeout.ms`` used when the sink spec leaves it 0 (the broker's default cap).
DEFAULT_TRANSACTION_TIMEOUT_MS = 900_000


class SparkDataPlane:
    """The real data plane: one long-lived SparkSession, the Kafka source and 2PC sink.

    ``start`` builds the session and runs the warm-up job, so the first checkpoint does
    not pay for the JVM, the Python workers and their imports.
    """

    def __init__(self, *, master: str, conf: Mapping[str, str] | None = None) -> None:
        self._master = master
        self._conf = dict(conf or {})
        self._spark: SparkSession | None = None

    def start(self) -> None:
        """Build the SparkSession and warm it up."""
        from lockgate.executor.session import build_spark_session

        started = time.monotonic()
        self._spark = build_spark_session(master=self._master, conf=self._conf)
        _LOG.info(
            "SparkSession on %s ready (with warm-up) in %.1fs",
            self._master,
            time.monotonic() - started,
        )

    def validate_spec(self, spec: Mapping[str, Any]) -> None:
        """Parse the data-plane keys; ``SpecError`` names the wrong field."""
        from lockgate.executor.spec import parse_data_plane_spec

        parse_data_plane_spec(spec)

    def run_precommit(self, work: PrecommitWork) -> PrecommitOutput:
        """Snapshot the end offsets, run the batch, leave its transactions open."""
        from lockgate.executor.batch import (
            BatchOptions,
            CheckpointId,
            PipelineName,
            TaskId,
            run_precommit_batch,
        )
        from lockgate.executor.offsets import snapshot_offset_ranges
        from lockgate.executor.spec import parse_data_plane_spec

        if self._spark is None:
            raise Unavailable("the executor's SparkSession is not started yet; retry")
        # Batches run on task threads. Py4J pins each Python thread to its own JVM thread,
        # whose active SparkSession is unset, and the Python data sink is looked up through
        # the active session: without this, save() fails with DATA_SOURCE_NOT_FOUND
        # (lockgate_kafka_sink) on any thread but the main one (measured, PySpark 4.3.0).
        jvm = self._spark._jvm
        assert jvm is not None, "a classic (Py4J) SparkSession has a JVM gateway"
        jvm.org.apache.spark.sql.SparkSession.setActiveSession(self._spark._jsparkSession)
        spec = parse_data_plane_spec(work.spec)
        wanted = set(work.source_partitions)
        ranges = [
            r
            for r in snapshot_offset_ranges(
                bootstrap_servers=spec.source.bootstrap_servers,
                topics=sorted({topic for topic, _ in wanted}),
                start_offsets=work.start_offsets,
                starting_offsets=spec.source.starting_offsets,
                max_offsets_per_partition=work.max_records_per_partition or None,
            )
            if (r.topic, r.partition) in wanted
        ]
        result = run_precommit_batch(
            self._spark,
            spec,
            pipeline=PipelineName(work.task.pipeline_name),
            task=TaskId(str(work.task)),
            checkpoint_id=CheckpointId(work.checkpoint_id),
            offset_ranges=ranges,
            transactional_id_prefix=work.transactional_id_prefix,
            options=BatchOptions(
                transaction_timeout_ms=work.transaction_timeout_ms or DEFAULT_TRANSACTION_TIMEOUT_MS
            ),
        )
        return PrecommitOutput(
            ranges=tuple(
                SourceRange(r.topic, r.partition, r.start, r.end) for r in result.consumed_ranges
            ),
            handles=tuple(
                KafkaHandle(
                    transactional_id=h.transactional_id,
                    bootstrap_servers=spec.sink.bootstrap_servers,
                    producer_id=h.producer_id,
                    producer_epoch=h.producer_epoch,
                )
                for h in result.handles
            ),
            records_read=result.records_in,
            records_written=result.records_out,
            records_dead_lettered=result.dead_lettered,
        )

    def stop(self) -> None:
        """Stop the SparkSession."""
        if self._spark is not None:
            self._spark.stop()
            self._spark = None


# ---------------------------------------------------------------------------------------
# Committing and aborting handles (steps 4 and 5), from any executor


class HandleLostError(LockgateError):
    """A handle cannot be committed any more: the broker aborted or fenced it.

    Sent as ``DATA_LOSS``: retrying cannot help (e.g. ``transaction.timeout.ms`` passed).
    """

    default_reason = "TRANSACTION_LOST"


def _transaction_handle(handle: KafkaHandle) -> TransactionHandle:
    assert handle.producer_id is not None and handle.producer_epoch is not None
    return TransactionHandle(
        transactional_id=TransactionalId(handle.transactional_id),
        producer_id=handle.producer_id,
        producer_epoch=handle.producer_epoch,
    )


def require_committable(handles: Sequence[KafkaHandle], *, field_name: str) -> None:
    """Raise ``InvalidArgument`` if a handle has no producer id/epoch (it can only abort)."""
    for index, handle in enumerate(handles):
        if handle.producer_id is None or handle.producer_epoch is None:
            raise InvalidArgument.for_field(
                f"{field_name}[{index}].kafka.producer_id",
                f"handle of transactional.id {handle.transactional_id!r} has no producer id"
                " and epoch, so it can only be aborted (AbortCheckpoint), never committed",
            )
        if not handle.bootstrap_servers:
            raise InvalidArgument.for_field(
                f"{field_name}[{index}].kafka.bootstrap_servers",
                "is required: the Kafka cluster the transaction lives on",
            )


class HandleFinisher:
    """Commits and aborts Kafka transactions through the resume path (FindCoordinator +
    EndTxn with the stored producer id and epoch), never ``init_transactions`` on a
    handle that may still need committing."""

    def __init__(self, *, failpoints: Failpoints, timeout_s: float = 30.0) -> None:
        self._failpoints = failpoints
        self._timeout_s = timeout_s

    def commit(self, handles: Sequence[KafkaHandle], *, what: str) -> int:
        """Commit every handle, in order; idempotent. Returns how many were committed.

        ``HandleLostError`` if one was aborted or fenced by the broker, ``Unavailable`` if
        Kafka did not answer in time (retry).
        """
        require_committable(handles, field_name="handles")
        for index, handle in enumerate(handles):
            txn = _transaction_handle(handle)
            try:
                commit_transaction(
                    bootstrap_servers=handle.bootstrap_servers,
                    handle=txn,
                    timeout_s=self._timeout_s,
                )
            except (
                ProducerFencedError,
                InvalidTransactionStateError,
                UnknownTransactionError,
            ) as exc:
                raise HandleLostError(
                    f"{what}: transaction {handle.transactional_id!r} (producer id"
                    f" {handle.producer_id}, epoch {handle.producer_epoch}) cannot be committed:"
                    f" {exc}. Its output is lost; raise transaction_timeout_ms above the"
                    " checkpoint timeout plus recovery time",
                    metadata={"transactional_id": handle.transactional_id},
                ) from exc
            except TransactionResumeError as exc:
                raise Unavailable(
                    f"{what}: Kafka did not accept the commit of {handle.transactional_id!r}"
                    f" in time: {exc}; retry",
                    retry_after_seconds=1.0,
                ) from exc
            if index == 0:
                self._failpoints.reach(
                    Failpoint.MID_COMMIT_HANDLES,
                    detail=f"{what}: 1 of {len(handles)} handles committed",
                )
        return len(handles)

    def abort(self, handles: Sequence[KafkaHandle], *, what: str) -> int:
        """Abort every handle; idempotent (fenced or unknown counts as aborted).

        A handle without producer id names a task slot whose pre-commit was never reported:
        every transaction open on the slot's ids is ended by ``init_transactions``.
        ``FailedPrecondition`` if one was already committed (a decided checkpoint must never
        be aborted), ``Unavailable`` if Kafka did not answer in time.
        """
        for handle in handles:
            if not handle.bootstrap_servers:
                raise InvalidArgument.for_field(
                    "handles.kafka.bootstrap_servers",
                    f"is required for {handle.transactional_id!r}: the cluster of the transaction",
                )
            try:
                if handle.producer_id is None or handle.producer_epoch is None:
                    self._fence(handle)
                else:
                    abort_transaction(
                        bootstrap_servers=handle.bootstrap_servers,
                        handle=_transaction_handle(handle),
                        timeout_s=self._timeout_s,
                    )
            except (ProducerFencedError, UnknownTransactionError):
                continue
            except InvalidTransactionStateError as exc:
                raise FailedPrecondition(
                    f"{what}: transaction {handle.transactional_id!r} is already committed and"
                    f" cannot be aborted ({exc}); its checkpoint was decided COMPLETE",
                    reason="ABORT_AFTER_COMMIT",
                ) from exc
            except (TransactionResumeError, KafkaException, RuntimeError) as exc:
                raise Unavailable(
                    f"{what}: Kafka did not accept the abort of {handle.transactional_id!r}"
                    f" in time: {exc}; retry",
                    retry_after_seconds=1.0,
                ) from exc
        return len(handles)

    def _fence(self, handle: KafkaHandle) -> None:
        # A handle without producer id names a task slot whose pre-commit was never
        # reported: its batch may have opened one transaction per Spark write partition on
        # "<slot id>-<k>". Kafka lists which are open; init_transactions on each aborts it.
        # Safe only because the leader reuses the slot after this abort succeeded.
        for transactional_id in open_transactions_of_slot(
            bootstrap_servers=handle.bootstrap_servers,
            slot_id=handle.transactional_id,
            timeout_s=self._timeout_s,
        ):
            txn, _ = open_transactional_producer(
                bootstrap_servers=handle.bootstrap_servers,
                transactional_id=transactional_id,
                timeout_s=self._timeout_s,
            )
            # No transaction is open after init_transactions: letting go aborts nothing more.
            txn.release_without_abort()


# ---------------------------------------------------------------------------------------
# Protobuf conversions (the runtime is the coordinator's client)

_FORMAT_NAMES: Mapping[int, str] = {
    common_pb2.DATA_FORMAT_BYTES: "bytes",
    common_pb2.DATA_FORMAT_STRING: "string",
    common_pb2.DATA_FORMAT_JSON: "json",
    common_pb2.DATA_FORMAT_AVRO: "avro",
}


def _formats(fmt: common_pb2.FormatSpec) -> dict[str, str]:
    out: dict[str, str] = {}
    if fmt.value_format in _FORMAT_NAMES:
        out["format"] = _FORMAT_NAMES[fmt.value_format]
    if fmt.key_format in _FORMAT_NAMES:
        out["key_format"] = _FORMAT_NAMES[fmt.key_format]
    if fmt.schema_registry_url:
        out["schema_registry_url"] = fmt.schema_registry_url
    return out


def pipeline_spec_to_mapping(spec: common_pb2.PipelineSpec) -> dict[str, Any]:
    """The YAML-shaped mapping of a ``PipelineSpec`` that ``parse_data_plane_spec`` reads."""
    raw: dict[str, Any] = {"name": spec.name}
    if spec.source.HasField("kafka"):
        source = spec.source.kafka
        raw["source"] = {
            "kafka": {
                "bootstrap_servers": source.bootstrap_servers,
                "topics": list(source.topics),
                "starting_offsets": (
                    "latest"
                    if source.starting_offsets == common_pb2.OFFSET_POSITION_LATEST
                    else "earliest"
                ),
                **_formats(source.format),
            }
        }
    kind = spec.transform.WhichOneof("transform")
    if kind == "sql":
        raw["transform"] = {"sql": spec.transform.sql}
    elif kind == "python":
        raw["transform"] = {"python": spec.transform.python}
    if spec.sink.HasField("kafka"):
        sink = spec.sink.kafka
        raw["sink"] = {
            "kafka": {
                "bootstrap_servers": sink.bootstrap_servers,
                "topic": sink.topic,
                **_formats(sink.format),
            }
        }
    raw["delivery"] = (
        "at_least_once"
        if spec.delivery == common_pb2.DELIVERY_GUARANTEE_AT_LEAST_ONCE
        else "exactly_once"
    )
    errors: dict[str, Any] = {
        "tolerance": "all" if spec.errors.tolerance == common_pb2.ERROR_TOLERANCE_ALL else "none"
    }
    if spec.errors.dead_letter_topic:
        errors["dead_letter_topic"] = spec.errors.dead_letter_topic
    raw["errors"] = errors
    raw["order"] = "none" if spec.allow_reordering else "per_key"
    return raw


def handle_from_proto(handle: common_pb2.SinkHandle, *, field_name: str) -> KafkaHandle:
    """A ``SinkHandle`` as a :class:`KafkaHandle`; ``InvalidArgument`` for other kinds."""
    if handle.WhichOneof("handle") != "kafka":
        raise InvalidArgument.for_field(
            field_name, "only Kafka transaction handles are supported by this executor"
        )
    kafka = handle.kafka
    if not kafka.transactional_id:
        raise InvalidArgument.for_field(
            f"{field_name}.kafka.transactional_id", "is required (the transaction's id)"
        )
    return KafkaHandle(
        transactional_id=kafka.transactional_id,
        bootstrap_servers=kafka.bootstrap_servers,
        producer_id=kafka.producer_id if kafka.HasField("producer_id") else None,
        producer_epoch=kafka.producer_epoch if kafka.HasField("producer_epoch") else None,
    )


def handle_to_proto(handle: KafkaHandle) -> common_pb2.SinkHandle:
    """The ``SinkHandle`` of a :class:`KafkaHandle`."""
    kafka = common_pb2.KafkaTransactionHandle(
        transactional_id=handle.transactional_id, bootstrap_servers=handle.bootstrap_servers
    )
    if handle.producer_id is not None:
        kafka.producer_id = handle.producer_id
    if handle.producer_epoch is not None:
        kafka.producer_epoch = handle.producer_epoch
    return common_pb2.SinkHandle(kafka=kafka)


def _now_proto() -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.GetCurrentTime()
    return stamp


def _task_error(
    exc: BaseException,
    *,
    checkpoint_id: int,
    executor_id: str,
    executor_generation: int,
    task_generation: int,
) -> common_pb2.TaskError:
    message = exc.message if isinstance(exc, LockgateError) else f"{type(exc).__name__}: {exc}"
    error = common_pb2.TaskError(
        message=message[:4000],
        error_type=type(exc).__name__,
        checkpoint_id=checkpoint_id,
        executor_id=executor_id,
        executor_generation=executor_generation,
        task_generation=task_generation,
        time=_now_proto(),
    )
    if isinstance(exc, RecordError):
        error.record.CopyFrom(
            common_pb2.RecordLocation(
                topic=exc.location.topic,
                partition=exc.location.partition,
                offset=exc.location.offset,
            )
        )
    return error


def task_fails_on(exc: BaseException) -> bool:
    """True if ``exc`` fails the task itself, not just one checkpoint.

    A bad record (tolerance none), a bad spec or a failing transform comes back at every
    retry; a missing topic, a broker outage or a Spark hiccup may not.
    """
    return isinstance(exc, RecordError | InvalidArgument)


# ---------------------------------------------------------------------------------------
# The runtime


@dataclass(frozen=True)
class ExecutorSettings:
    """How one executor process runs."""

    executor_id: str
    #: The address the coordinator calls ExecutorService on (host:port).
    advertised_address: str
    coordinator_addresses: tuple[str, ...]
    spark_master: str
    version: str = "0.1.0"
    max_tasks: int = 0
    #: Deadline of each call to the coordinator, in seconds.
    rpc_timeout_s: float = 10.0
    #: Deadline of committing or aborting one Kafka transaction, in seconds.
    handle_timeout_s: float = 30.0
    #: Used until the leader says otherwise.
    heartbeat_interval_ms: int = 1000
    session_timeout_ms: int = 10_000
    #: Attempts of a task's restore (commit/abort of its handed-in handles) before it fails.
    restore_attempts: int = 5


@dataclass(frozen=True)
class TriggerTask:
    """One task of a TriggerCheckpoint request, in plain values."""

    task: TaskRef
    task_generation: TaskGeneration
    start_offsets: Mapping[tuple[str, int], int]
    transactional_id_prefix: str


@dataclass(frozen=True)
class TriggerResult:
    """The answer for one task of a trigger."""

    task: TaskRef
    verdict: TriggerVerdict
    current_generation: int
    reason: str = ""


@dataclass(frozen=True)
class Registration:
    """This process's current registration with the coordinator."""

    executor_generation: ExecutorGeneration
    session_id: str


@dataclass(frozen=True)
class TaskView:
    """A task's observed state, as heartbeats and GetExecutorStatus show it."""

    task: TaskRef
    generation: TaskGeneration
    phase: TaskPhase
    last_precommitted_checkpoint_id: int
    in_flight_checkpoint_ids: tuple[int, ...]
    last_error: common_pb2.TaskError | None
    state_change_time: timestamp_pb2.Timestamp


@dataclass
class _Task:
    """Mutable state of one task at one generation (guarded by the runtime's lock)."""

    ref: TaskRef
    generation: TaskGeneration
    config_version: int
    spec: Mapping[str, Any]
    source_partitions: tuple[tuple[str, int], ...]
    restore_offsets: Mapping[tuple[str, int], int]
    target_running: bool
    max_records_per_partition: int
    transaction_timeout_ms: int
    queue: ThreadPoolExecutor
    phase: TaskPhase = TaskPhase.RESTORING
    state_change_time: timestamp_pb2.Timestamp = field(default_factory=_now_proto)
    last_error: common_pb2.TaskError | None = None
    last_precommitted: int = 0
    triggered: set[int] = field(default_factory=set)
    in_flight: set[int] = field(default_factory=set)
    cancelled: set[int] = field(default_factory=set)
    #: Checkpoints whose batch has started and not yet ended (a subset of ``in_flight``).
    running: set[int] = field(default_factory=set)

    def move(self, target: TaskPhase) -> None:
        if target is not self.phase:
            self.phase = next_phase(self.phase, target)
            self.state_change_time = _now_proto()

    def view(self) -> TaskView:
        return TaskView(
            task=self.ref,
            generation=self.generation,
            phase=self.phase,
            last_precommitted_checkpoint_id=self.last_precommitted,
            in_flight_checkpoint_ids=tuple(sorted(self.in_flight)),
            last_error=self.last_error,
            state_change_time=self.state_change_time,
        )


def task_view_to_proto(view: TaskView) -> common_pb2.TaskStatus:
    """The ``TaskStatus`` of a :class:`TaskView`."""
    status = common_pb2.TaskStatus(
        task_id=common_pb2.TaskId(
            pipeline_name=view.task.pipeline_name, task_index=view.task.task_index
        ),
        task_generation=view.generation,
        state=_PHASE_TO_PROTO[view.phase],
        last_precommitted_checkpoint_id=view.last_precommitted_checkpoint_id,
        in_flight_checkpoint_ids=list(view.in_flight_checkpoint_ids),
        state_change_time=view.state_change_time,
    )
    if view.last_error is not None:
        status.last_error.CopyFrom(view.last_error)
    return status


class _ReportOutcome(enum.Enum):
    ACCEPTED = "accepted"
    #: The leader said no (aborted, fenced, unknown): nothing of it was recorded.
    REFUSED = "refused"
    #: No answer before the deadline: the leader may or may not have recorded it.
    UNKNOWN = "unknown"


class ExecutorRuntime:
    """Registration, heartbeats, tasks and checkpoints of one executor process."""

    def __init__(
        self,
        settings: ExecutorSettings,
        *,
        coordinator: coordinator_pb2_grpc.CoordinatorServiceStub,
        data_plane: DataPlane,
        fence: LeaderEpochFence | None = None,
        failpoints: Failpoints | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.fence = fence or LeaderEpochFence()
        self._coordinator = coordinator
        self._data_plane = data_plane
        self._failpoints = failpoints or Failpoints()
        self._finisher = HandleFinisher(
            failpoints=self._failpoints, timeout_s=settings.handle_timeout_s
        )
        self._clock = clock
        self._lock = threading.Lock()
        #: Notified (under ``_lock``) whenever a batch ends.
        self._batch_ended = threading.Condition(self._lock)
        self._stopping = threading.Event()
        self._tasks: dict[TaskRef, _Task] = {}
        #: Stopped tasks whose batch is still running (see the module docstring).
        self._draining: list[_Task] = []
        self._registration: Registration | None = None
        self._heartbeat_interval_s = settings.heartbeat_interval_ms / 1000
        self._session_timeout_s = settings.session_timeout_ms / 1000
        self._last_heartbeat_ok = clock()
        self._membership: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Start the membership thread (register, then heartbeat)."""
        self._membership = threading.Thread(
            target=self._membership_loop, name="lockgate-membership", daemon=True
        )
        self._membership.start()

    def stop(self, *, deregister: bool = True) -> None:
        """Stop heartbeating and every task; leave the cluster cleanly if registered."""
        self._stopping.set()
        if self._membership is not None:
            self._membership.join(timeout=self.settings.rpc_timeout_s + 1)
        with self._lock:
            tasks = list(self._tasks.values())
            self._tasks.clear()
            registration = self._registration
            self._registration = None
        for task in tasks:
            self._stop_task(task, why="executor shutting down")
        if deregister and registration is not None:
            try:
                self._coordinator.DeregisterExecutor(
                    coordinator_pb2.DeregisterExecutorRequest(
                        request_id=str(uuid.uuid4()),
                        executor_id=self.settings.executor_id,
                        executor_generation=registration.executor_generation,
                    ),
                    timeout=self.settings.rpc_timeout_s,
                )
                _LOG.info(
                    "deregistered executor %s generation %d",
                    self.settings.executor_id,
                    registration.executor_generation,
                )
            except grpc.RpcError as exc:
                _LOG.warning("deregistration failed (%s); the session will expire", exc.code())

    @property
    def registration(self) -> Registration | None:
        """The current registration, None until registered (or after the session was lost)."""
        with self._lock:
            return self._registration

    def statuses(self) -> list[TaskView]:
        """Observed state of every task, ordered by pipeline name and task index."""
        with self._lock:
            return [self._tasks[ref].view() for ref in sorted(self._tasks)]

    # -- membership ----------------------------------------------------------------------

    def _membership_loop(self) -> None:
        while not self._stopping.is_set():
            if self.registration is None:
                delay = 0.0 if self._register() else 1.0
            else:
                self._heartbeat()
                delay = self._heartbeat_interval_s
            if delay and self._stopping.wait(delay):
                return

    def _register(self) -> bool:
        settings = self.settings
        try:
            response: coordinator_pb2.RegisterExecutorResponse = self._coordinator.RegisterExecutor(
                coordinator_pb2.RegisterExecutorRequest(
                    request_id=str(uuid.uuid4()),
                    executor_id=settings.executor_id,
                    address=settings.advertised_address,
                    spark_master=settings.spark_master,
                    max_tasks=settings.max_tasks,
                    version=settings.version,
                ),
                timeout=settings.rpc_timeout_s,
            )
        except grpc.RpcError as exc:
            details = error_details(exc)
            _LOG.warning(
                "registration with the coordinator at %s failed: %s %s; retrying",
                ",".join(settings.coordinator_addresses),
                details.code.name,
                details.message,
            )
            return False
        if not self._observe_epoch(response.leader_epoch, rpc="RegisterExecutorResponse"):
            return False
        with self._lock:
            self._registration = Registration(
                executor_generation=ExecutorGeneration(response.executor_generation),
                session_id=response.session_id,
            )
            self._apply_timing(response.heartbeat_interval_ms, response.session_timeout_ms)
            self._last_heartbeat_ok = self._clock()
        _LOG.info(
            "registered executor %s generation %d session %s with leader %s epoch %d",
            settings.executor_id,
            response.executor_generation,
            response.session_id,
            response.leader_epoch.leader_id,
            response.leader_epoch.epoch,
        )
        self._apply_assignment(list(response.assignments))
        return True

    def _apply_timing(self, heartbeat_interval_ms: int, session_timeout_ms: int) -> None:
        if heartbeat_interval_ms > 0:
            self._heartbeat_interval_s = heartbeat_interval_ms / 1000
        if session_timeout_ms > 0:
            self._session_timeout_s = session_timeout_ms / 1000

    def _observe_epoch(self, epoch: common_pb2.LeaderEpoch, *, rpc: str) -> bool:
        if epoch.epoch <= 0:
            return True
        try:
            if self.fence.observe(LeaderEpoch(epoch.epoch), leader_id=epoch.leader_id, rpc=rpc):
                _LOG.info("new leader %s with epoch %d", epoch.leader_id, epoch.epoch)
        except StaleTokenError as exc:
            _LOG.warning(exc.log_line())
            return False
        return True

    def _heartbeat(self) -> None:
        registration = self.registration
        if registration is None:
            return
        highest, leader_id = self.fence.highest_seen
        request = coordinator_pb2.HeartbeatRequest(
            executor_id=self.settings.executor_id,
            executor_generation=registration.executor_generation,
            task_statuses=[task_view_to_proto(v) for v in self.statuses()],
            highest_leader_epoch_seen=common_pb2.LeaderEpoch(epoch=highest, leader_id=leader_id),
        )
        try:
            response: coordinator_pb2.HeartbeatResponse = self._coordinator.Heartbeat(
                request, timeout=self.settings.rpc_timeout_s
            )
        except grpc.RpcError as exc:
            details = error_details(exc)
            if details.code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION):
                # Our session is gone (expired, or a newer registration of this id exists):
                # our tasks already belong to someone else.
                self._lose_session(f"heartbeat refused: {details.code.name} {details.message}")
                return
            silent_for = self._clock() - self._last_heartbeat_ok
            _LOG.warning(
                "heartbeat failed: %s %s (%.1fs since the last good one)",
                details.code.name,
                details.message,
                silent_for,
            )
            if silent_for > self._session_timeout_s:
                self._lose_session(
                    f"no heartbeat answered for {silent_for:.1f}s, more than the session"
                    f" timeout of {self._session_timeout_s:.1f}s"
                )
            return
        if not self._observe_epoch(response.leader_epoch, rpc="HeartbeatResponse"):
            return
        with self._lock:
            if self._registration != registration:
                return
            self._last_heartbeat_ok = self._clock()
            self._apply_timing(response.heartbeat_interval_ms, response.session_timeout_ms)
        self._apply_assignment(list(response.assignments))

    def _lose_session(self, why: str) -> None:
        _LOG.warning(
            "session of executor %s lost (%s): stopping every task and registering again",
            self.settings.executor_id,
            why,
        )
        with self._lock:
            tasks = list(self._tasks.values())
            self._tasks.clear()
            self._registration = None
        for task in tasks:
            self._stop_task(task, why="session lost")

    # -- assignment ----------------------------------------------------------------------

    def _apply_assignment(self, assignments: Sequence[coordinator_pb2.TaskAssignment]) -> None:
        wanted: dict[TaskRef, coordinator_pb2.TaskAssignment] = {}
        for assignment in assignments:
            ref = TaskRef(assignment.task_id.pipeline_name, assignment.task_id.task_index)
            wanted[ref] = assignment
        to_stop: list[_Task] = []
        to_start: list[_Task] = []
        with self._lock:
            for ref, task in list(self._tasks.items()):
                assignment_or_none = wanted.get(ref)
                if (
                    assignment_or_none is None
                    or assignment_or_none.task_generation > task.generation
                ):
                    to_stop.append(self._tasks.pop(ref))
                elif assignment_or_none.task_generation == task.generation:
                    self._set_target(task, assignment_or_none.target_state)
                    del wanted[ref]
                else:
                    _LOG.warning(
                        "ignoring assignment of %s at generation %d: running generation %d",
                        ref,
                        assignment_or_none.task_generation,
                        task.generation,
                    )
                    del wanted[ref]
            for ref, assignment in wanted.items():
                task = self._new_task(ref, assignment)
                self._tasks[ref] = task
                to_start.append(task)
        for task in to_stop:
            self._stop_task(task, why="no longer assigned at this generation")
        for task in to_start:
            _LOG.info("starting task %s generation %d", task.ref, task.generation)
            task.queue.submit(self._restore, task, _restore_of(wanted[task.ref]))

    def _new_task(self, ref: TaskRef, assignment: coordinator_pb2.TaskAssignment) -> _Task:
        spec = assignment.pipeline_spec
        return _Task(
            ref=ref,
            generation=TaskGeneration(assignment.task_generation),
            config_version=assignment.config_version,
            spec=pipeline_spec_to_mapping(spec),
            source_partitions=tuple(
                (tp.topic, tp.partition) for tp in assignment.source_partitions
            ),
            restore_offsets={
                (po.topic, po.partition): po.offset for po in assignment.restore.start_offsets
            },
            target_running=_is_running_target(assignment.target_state),
            max_records_per_partition=spec.source.kafka.max_records_per_partition,
            transaction_timeout_ms=spec.sink.kafka.transaction_timeout_ms,
            queue=ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"task-{ref}"),
        )

    def _set_target(self, task: _Task, target: common_pb2.TargetState.ValueType) -> None:
        task.target_running = _is_running_target(target)
        if task.phase in (TaskPhase.RUNNING, TaskPhase.PAUSED):
            task.move(TaskPhase.RUNNING if task.target_running else TaskPhase.PAUSED)

    def _stop_task(self, task: _Task, *, why: str) -> None:
        with self._lock:
            task.move(TaskPhase.STOPPED)
            task.cancelled.update(task.in_flight)
            if task.running:
                self._draining.append(task)
        # Queued pre-commits see STOPPED and skip; a running one aborts its own handles.
        task.queue.shutdown(wait=False, cancel_futures=True)
        _LOG.info("stopped task %s generation %d: %s", task.ref, task.generation, why)

    def _is_current(self, task: _Task, checkpoint_id: int | None = None) -> bool:
        with self._lock:
            return self._is_current_locked(task, checkpoint_id)

    def _is_current_locked(self, task: _Task, checkpoint_id: int | None = None) -> bool:
        current = self._tasks.get(task.ref) is task and task.phase is not TaskPhase.STOPPED
        return current and (checkpoint_id is None or checkpoint_id not in task.cancelled)

    # -- restore (step 5) ----------------------------------------------------------------

    def _restore(self, task: _Task, restore: coordinator_pb2.TaskRestoreState) -> None:
        try:
            self._data_plane.validate_spec(task.spec)
            commits = [
                (
                    entry.checkpoint_id,
                    [
                        handle_from_proto(h, field_name=f"commit_before_start[{i}].handles[{j}]")
                        for j, h in enumerate(entry.handles)
                    ],
                )
                for i, entry in enumerate(restore.commit_before_start)
            ]
            aborts = [
                handle_from_proto(h, field_name=f"abort_before_start[{i}]")
                for i, h in enumerate(restore.abort_before_start)
            ]
            self._with_retries(
                lambda: self._finish_restore(task, commits, aborts),
                attempts=self.settings.restore_attempts,
                what=f"restore of task {task.ref}",
            )
        except LockgateError as exc:
            self._fail_task(task, exc, checkpoint_id=0)
            return
        with self._lock:
            if self._tasks.get(task.ref) is task and task.phase is TaskPhase.RESTORING:
                task.move(TaskPhase.RUNNING if task.target_running else TaskPhase.PAUSED)
                _LOG.info(
                    "task %s generation %d restored (%d checkpoints re-committed, %d handles"
                    " aborted): %s",
                    task.ref,
                    task.generation,
                    len(commits),
                    len(aborts),
                    task.phase.value,
                )

    def _finish_restore(
        self,
        task: _Task,
        commits: Sequence[tuple[int, Sequence[KafkaHandle]]],
        aborts: Sequence[KafkaHandle],
    ) -> None:
        # Oldest first, as Flink's committer recovers: N's output before N+1's.
        for checkpoint_id, handles in commits:
            self._finisher.commit(
                handles, what=f"restore of {task.ref}: commit of checkpoint {checkpoint_id}"
            )
        self._finisher.abort(aborts, what=f"restore of {task.ref}: abort")

    def _with_retries(self, action: Callable[[], None], *, attempts: int, what: str) -> None:
        for attempt in range(1, attempts + 1):
            try:
                action()
                return
            except Unavailable as exc:
                if attempt == attempts or self._stopping.is_set():
                    raise
                _LOG.warning("%s failed (attempt %d of %d): %s", what, attempt, attempts, exc)
                self._stopping.wait(min(2.0**attempt, 10.0))

    def _fail_task(self, task: _Task, exc: LockgateError, *, checkpoint_id: int) -> None:
        registration = self.registration
        error = _task_error(
            exc,
            checkpoint_id=checkpoint_id,
            executor_id=self.settings.executor_id,
            executor_generation=registration.executor_generation if registration else 0,
            task_generation=task.generation,
        )
        with self._lock:
            if self._tasks.get(task.ref) is not task or task.phase is TaskPhase.STOPPED:
                return
            task.last_error = error
            task.move(TaskPhase.FAILED)
        _LOG.error("task %s generation %d failed: %s", task.ref, task.generation, error.message)
        if registration is None:
            return
        try:
            self._coordinator.ReportTaskFailure(
                coordinator_pb2.ReportTaskFailureRequest(
                    request_id=str(uuid.uuid4()),
                    task_id=common_pb2.TaskId(
                        pipeline_name=task.ref.pipeline_name, task_index=task.ref.task_index
                    ),
                    task_generation=task.generation,
                    executor_id=self.settings.executor_id,
                    executor_generation=registration.executor_generation,
                    error=error,
                ),
                timeout=self.settings.rpc_timeout_s,
            )
        except grpc.RpcError as rpc_error:
            # The heartbeat carries the FAILED state and the error too.
            _LOG.warning("ReportTaskFailure failed: %s", error_details(rpc_error).message)

    # -- checkpoints (steps 1-2) ---------------------------------------------------------

    def trigger_checkpoint(
        self,
        *,
        pipeline_name: str,
        checkpoint_id: int,
        config_version: int,
        leader_epoch: common_pb2.LeaderEpoch,
        tasks: Sequence[TriggerTask],
        timeout_ms: int,
    ) -> list[TriggerResult]:
        """Start the pre-commit of checkpoint N on each task that may take it."""
        deadline = self._clock() + (timeout_ms or 60_000) / 1000
        received = self._clock()
        results: list[TriggerResult] = []
        to_run: list[tuple[_Task, PrecommitWork]] = []
        with self._lock:
            for requested in tasks:
                task = self._tasks.get(requested.task)
                verdict = decide_trigger(
                    running_generation=task.generation if task else None,
                    presented_generation=requested.task_generation,
                    ready=task is not None and task.phase is TaskPhase.RUNNING,
                    config_version_matches=(
                        task is not None
                        and (config_version == 0 or config_version == task.config_version)
                    ),
                    already_triggered=task is not None and checkpoint_id in task.triggered,
                )
                reason = ""
                if task is None:
                    reason = f"executor {self.settings.executor_id} does not run {requested.task}"
                elif verdict is TriggerVerdict.STALE_GENERATION:
                    reason = (
                        f"task {requested.task} runs at generation {task.generation}, the"
                        f" trigger is for generation {requested.task_generation}"
                    )
                    _LOG.warning(
                        "refused task_generation=%d current=%d subject=%s rpc=TriggerCheckpoint",
                        requested.task_generation,
                        task.generation,
                        requested.task,
                    )
                elif verdict is TriggerVerdict.NOT_READY:
                    reason = (
                        f"task {requested.task} is {task.phase.value}"
                        if task.phase is not TaskPhase.RUNNING
                        else f"task {requested.task} runs config version {task.config_version},"
                        f" the trigger is for {config_version}"
                    )
                elif verdict is TriggerVerdict.DUPLICATE:
                    reason = f"checkpoint {checkpoint_id} was already triggered on this task"
                if verdict is TriggerVerdict.ACCEPTED and task is not None:
                    task.triggered.add(checkpoint_id)
                    task.in_flight.add(checkpoint_id)
                    start_offsets = {**task.restore_offsets, **requested.start_offsets}
                    to_run.append(
                        (
                            task,
                            PrecommitWork(
                                task=task.ref,
                                checkpoint_id=checkpoint_id,
                                spec=task.spec,
                                source_partitions=task.source_partitions,
                                start_offsets=start_offsets,
                                transactional_id_prefix=requested.transactional_id_prefix,
                                max_records_per_partition=task.max_records_per_partition,
                                transaction_timeout_ms=task.transaction_timeout_ms,
                            ),
                        )
                    )
                results.append(
                    TriggerResult(
                        task=requested.task,
                        verdict=verdict,
                        current_generation=task.generation if task else 0,
                        reason=reason,
                    )
                )
        for task, work in to_run:
            try:
                task.queue.submit(self._run_precommit, task, work, leader_epoch, received, deadline)
            except RuntimeError:
                # The task was stopped between the decision and the submit; the leader
                # times the checkpoint out.
                _LOG.info(
                    "task %s stopped before checkpoint %d could start", task.ref, work.checkpoint_id
                )
        return results

    def _run_precommit(
        self,
        task: _Task,
        work: PrecommitWork,
        leader_epoch: common_pb2.LeaderEpoch,
        received: float,
        deadline: float,
    ) -> None:
        try:
            self._precommit_and_report(task, work, leader_epoch, received, deadline)
        except Exception:
            _LOG.exception("pre-commit of %s checkpoint %d crashed", task.ref, work.checkpoint_id)
        finally:
            with self._lock:
                task.in_flight.discard(work.checkpoint_id)
                task.running.discard(work.checkpoint_id)
                if not task.running and task in self._draining:
                    self._draining.remove(task)
                self._batch_ended.notify_all()

    def _precommit_and_report(
        self,
        task: _Task,
        work: PrecommitWork,
        leader_epoch: common_pb2.LeaderEpoch,
        received: float,
        deadline: float,
    ) -> None:
        what = f"task {task.ref} checkpoint {work.checkpoint_id}"
        with self._lock:
            # Checked and marked in one step: an abort either sees the batch running (and
            # waits for it) or the batch sees the abort (and never starts).
            if not self._is_current_locked(task, work.checkpoint_id):
                _LOG.info("%s skipped: stopped or aborted before it started", what)
                return
            task.running.add(work.checkpoint_id)
        try:
            output = self._data_plane.run_precommit(work)
        except Exception as exc:
            self._report_checkpoint_failure(task, work, leader_epoch, exc, deadline)
            return
        self._failpoints.reach(Failpoint.AFTER_PRECOMMIT_BEFORE_REPORT, detail=what)
        if not self._is_current(task, work.checkpoint_id):
            # Never reported, so never COMPLETE: safe to abort here.
            _LOG.info("%s finished after its task stopped or N was aborted: aborting", what)
            self._abort_quietly(output.handles, what=what)
            return
        registration = self.registration
        if registration is None:
            self._abort_quietly(output.handles, what=what)
            return
        request = coordinator_pb2.ReportPrecommitRequest(
            request_id=str(uuid.uuid4()),
            leader_epoch=leader_epoch,
            checkpoint_id=work.checkpoint_id,
            task_id=common_pb2.TaskId(
                pipeline_name=task.ref.pipeline_name, task_index=task.ref.task_index
            ),
            task_generation=task.generation,
            executor_id=self.settings.executor_id,
            executor_generation=registration.executor_generation,
            source_ranges=[
                common_pb2.OffsetRange(
                    topic=r.topic,
                    partition=r.partition,
                    start_offset=r.start_offset,
                    end_offset=r.end_offset,
                )
                for r in output.ranges
            ],
            sink_handles=[handle_to_proto(h) for h in output.handles],
            counts=common_pb2.RecordCounts(
                records_read=output.records_read,
                records_written=output.records_written,
                records_dead_lettered=output.records_dead_lettered,
            ),
            precommit_duration_ms=int((self._clock() - received) * 1000),
        )
        outcome, state = self._report(
            lambda timeout: self._coordinator.ReportPrecommit(request, timeout=timeout),
            deadline=deadline,
            what=f"ReportPrecommit of {what}",
        )
        if outcome is _ReportOutcome.ACCEPTED:
            with self._lock:
                task.last_precommitted = max(task.last_precommitted, work.checkpoint_id)
            _LOG.info(
                "%s pre-committed in %d ms: %d records read, %d written, %d handles; leader"
                " says %s",
                what,
                request.precommit_duration_ms,
                output.records_read,
                output.records_written,
                len(output.handles),
                common_pb2.CheckpointState.Name(common_pb2.CheckpointState.ValueType(state)),
            )
            if state == common_pb2.CHECKPOINT_STATE_ABORTED:
                # The leader decided: N is aborted and will never be COMPLETE.
                self._abort_quietly(output.handles, what=what)
        elif outcome is _ReportOutcome.REFUSED:
            self._abort_quietly(output.handles, what=what)

    def _report(
        self,
        call: Callable[[float], Any],
        *,
        deadline: float,
        what: str,
    ) -> tuple[_ReportOutcome, int]:
        """Send a report until answered or ``deadline``; see the module docstring.

        Returns REFUSED only if the first attempt was refused: once an attempt may have been
        recorded, a later refusal (e.g. from a new leader) says nothing about the first.
        """
        attempt = 0
        while True:
            attempt += 1
            timeout = max(0.5, min(self.settings.rpc_timeout_s, deadline - self._clock()))
            try:
                response = call(timeout)
                return _ReportOutcome.ACCEPTED, int(getattr(response, "checkpoint_state", 0))
            except grpc.RpcError as exc:
                details = error_details(exc)
                retriable = details.code in (
                    grpc.StatusCode.UNAVAILABLE,
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                )
                if not retriable:
                    _LOG.warning("%s refused: %s %s", what, details.code.name, details.message)
                    return (_ReportOutcome.REFUSED if attempt == 1 else _ReportOutcome.UNKNOWN), 0
                if self._clock() >= deadline or self._stopping.is_set():
                    _LOG.warning("%s unanswered before its deadline: %s", what, details.message)
                    return _ReportOutcome.UNKNOWN, 0
                _LOG.info("%s: %s, retrying", what, details.code.name)
                self._stopping.wait(min(1.0, max(0.0, deadline - self._clock())))

    def _report_checkpoint_failure(
        self,
        task: _Task,
        work: PrecommitWork,
        leader_epoch: common_pb2.LeaderEpoch,
        exc: Exception,
        deadline: float,
    ) -> None:
        fails_task = task_fails_on(exc)
        if isinstance(exc, LockgateError):
            _LOG.warning(
                "pre-commit of %s checkpoint %d failed: %s",
                task.ref,
                work.checkpoint_id,
                exc.message,
            )
        else:
            _LOG.error(
                "pre-commit of %s checkpoint %d failed unexpectedly",
                task.ref,
                work.checkpoint_id,
                exc_info=exc,
            )
        registration = self.registration
        error = _task_error(
            exc,
            checkpoint_id=work.checkpoint_id,
            executor_id=self.settings.executor_id,
            executor_generation=registration.executor_generation if registration else 0,
            task_generation=task.generation,
        )
        if fails_task:
            with self._lock:
                if self._tasks.get(task.ref) is task and task.phase is not TaskPhase.STOPPED:
                    task.last_error = error
                    task.move(TaskPhase.FAILED)
        if registration is None or not self._is_current(task):
            return
        request = coordinator_pb2.ReportCheckpointFailureRequest(
            request_id=str(uuid.uuid4()),
            leader_epoch=leader_epoch,
            checkpoint_id=work.checkpoint_id,
            task_id=common_pb2.TaskId(
                pipeline_name=task.ref.pipeline_name, task_index=task.ref.task_index
            ),
            task_generation=task.generation,
            executor_id=self.settings.executor_id,
            executor_generation=registration.executor_generation,
            error=error,
            task_failed=fails_task,
        )
        self._report(
            lambda timeout: self._coordinator.ReportCheckpointFailure(request, timeout=timeout),
            deadline=deadline,
            what=f"ReportCheckpointFailure of {task.ref} checkpoint {work.checkpoint_id}",
        )

    def _abort_quietly(self, handles: Sequence[KafkaHandle], *, what: str) -> None:
        if not handles:
            return
        try:
            self._finisher.abort(handles, what=what)
        except LockgateError as exc:
            # The leader aborts them too (timeout or recovery); nothing more to do here.
            _LOG.warning("%s: abort of its own handles failed: %s", what, exc.message)

    # -- commit and abort (steps 3-5) ----------------------------------------------------

    def commit_handles(
        self, *, pipeline_name: str, checkpoint_id: int, handles: Sequence[KafkaHandle]
    ) -> int:
        """Commit a COMPLETE checkpoint's handles; idempotent. Returns the count committed."""
        what = f"commit of {pipeline_name} checkpoint {checkpoint_id}"
        count = self._finisher.commit(handles, what=what)
        self._failpoints.reach(Failpoint.AFTER_COMMIT_BEFORE_ACK, detail=what)
        _LOG.info("%s: %d handles committed", what, count)
        return count

    def abort_checkpoint(
        self,
        *,
        pipeline_name: str,
        checkpoint_id: int,
        handles: Sequence[KafkaHandle],
        reason: str,
        timeout_s: float = 30.0,
    ) -> int:
        """Cancel this executor's pre-commit of N, wait until no batch of N runs here any
        more, then abort the given handles.

        ``Unavailable`` if a batch of N still runs after ``timeout_s``: the caller retries,
        and must not reuse N's transactional ids before this call succeeded (see the module
        docstring).
        """
        what = f"abort of {pipeline_name} checkpoint {checkpoint_id}"

        def batches_of_n() -> list[_Task]:
            return [
                t
                for t in [*self._tasks.values(), *self._draining]
                if t.ref.pipeline_name == pipeline_name and checkpoint_id in t.running
            ]

        with self._lock:
            for task in self._tasks.values():
                if task.ref.pipeline_name == pipeline_name:
                    task.cancelled.add(checkpoint_id)
            if not self._batch_ended.wait_for(lambda: not batches_of_n(), timeout=timeout_s):
                running = ", ".join(str(t.ref) for t in batches_of_n())
                raise Unavailable(
                    f"{what}: the batch of {running} still runs on executor"
                    f" {self.settings.executor_id} and may still open transactions on its"
                    " transactional ids; retry once it ended",
                    retry_after_seconds=1.0,
                )
        count = self._finisher.abort(handles, what=what)
        _LOG.info("%s (%s): %d handles aborted", what, reason or "no reason given", count)
        return count


def _is_running_target(target: common_pb2.TargetState.ValueType) -> bool:
    return target in (common_pb2.TARGET_STATE_RUNNING, common_pb2.TARGET_STATE_UNSPECIFIED)


def _restore_of(assignment: coordinator_pb2.TaskAssignment) -> coordinator_pb2.TaskRestoreState:
    restore = coordinator_pb2.TaskRestoreState()
    restore.CopyFrom(assignment.restore)
    return restore


__all__ = [
    "TASK_TRANSITIONS",
    "ControlOnlyDataPlane",
    "DataPlane",
    "ExecutorRuntime",
    "ExecutorSettings",
    "HandleFinisher",
    "HandleLostError",
    "InvalidTaskTransition",
    "KafkaHandle",
    "PrecommitOutput",
    "PrecommitWork",
    "Registration",
    "SourceRange",
    "SparkDataPlane",
    "TaskPhase",
    "TaskRef",
    "TaskView",
    "TriggerResult",
    "TriggerTask",
    "handle_from_proto",
    "handle_to_proto",
    "next_phase",
    "pipeline_spec_to_mapping",
    "task_fails_on",
    "task_view_to_proto",
]
