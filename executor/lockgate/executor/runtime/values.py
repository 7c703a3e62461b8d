"""Plain values the executor's runtime exchanges with its edges (no protobuf here).

The coordinator client (:mod:`lockgate.executor.coordinator_client`) and the gRPC
servicer (:mod:`lockgate.executor.servicer`) convert between these and the ``lockgate.v1``
messages (:mod:`lockgate.executor.convert`); everything in :mod:`lockgate.executor.runtime`
takes and returns only these.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass

from lockgate.common.errors import LockgateError
from lockgate.common.model.handles import TransactionHandle
from lockgate.common.model.ids import Generation, LeaderEpoch
from lockgate.common.model.pipeline_spec import PipelineSpec
from lockgate.executor.dataplane.protocol import PrecommitOutput
from lockgate.executor.errors import RecordLocation
from lockgate.executor.fencing import TriggerVerdict

#: The executor generation of an answer that is not a registration's.
_NO_GENERATION = Generation(0)


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


@dataclass(frozen=True, order=True)
class TaskRef:
    """One task of a pipeline, shown as ``<pipeline>/<index>``."""

    pipeline_name: str
    task_index: int

    def __str__(self) -> str:
        return f"{self.pipeline_name}/{self.task_index}"


@dataclass(frozen=True)
class LeaderStamp:
    """A leader epoch as a call or an answer carries it; epoch 0 means "not set"."""

    epoch: LeaderEpoch
    leader_id: str = ""


@dataclass(frozen=True)
class Registration:
    """This process's current registration with the coordinator."""

    executor_generation: Generation
    session_id: str


@dataclass(frozen=True)
class TaskError:
    """A task's last error, stamped with who reported it (``lockgate.v1.TaskError``)."""

    message: str
    error_type: str
    checkpoint_id: int
    executor_id: str
    executor_generation: int
    task_generation: int
    time: datetime.datetime
    record: RecordLocation | None = None


@dataclass(frozen=True)
class RestorePlan:
    """What a (re)assigned task must finish before it runs (DESIGN.md step 5).

    ``commits`` are COMPLETE checkpoints' handles, oldest first; ``aborts`` the handles
    of pre-commits that never became COMPLETE. ``invalid`` is set when the leader's
    restore state could not be read: the restore fails the task with it.
    """

    commits: tuple[tuple[int, tuple[TransactionHandle, ...]], ...] = ()
    aborts: tuple[TransactionHandle, ...] = ()
    invalid: LockgateError | None = None


@dataclass(frozen=True)
class Assignment:
    """One task the leader assigns to this executor, at one generation."""

    task: TaskRef
    generation: Generation
    config_version: int
    #: The pipeline spec, parsed by the model's one parser; None if it could not be, and
    #: then ``invalid_spec`` says why (the task's restore fails with it, not the heartbeat).
    spec: PipelineSpec | None
    source_partitions: tuple[tuple[str, int], ...]
    restore_offsets: Mapping[tuple[str, int], int]
    target_running: bool
    max_records_per_partition: int
    transaction_timeout_ms: int
    restore: RestorePlan
    invalid_spec: LockgateError | None = None

    def require_spec(self) -> PipelineSpec:
        """The spec to run; raises why it could not be read if it could not."""
        if self.spec is None:
            assert self.invalid_spec is not None, "an assignment without a spec says why"
            raise self.invalid_spec
        return self.spec


@dataclass(frozen=True)
class MembershipReply:
    """What RegisterExecutor and Heartbeat answer: the leader, timings and assignment.

    ``executor_generation`` and ``session_id`` are set by a registration only. With
    ``assignment_unchanged`` the assignment is the one of ``assignment_version`` the
    executor holds, and ``assignments`` is empty.
    """

    leader: LeaderStamp
    heartbeat_interval_ms: int
    session_timeout_ms: int
    assignments: tuple[Assignment, ...]
    assignment_version: int = 0
    assignment_unchanged: bool = False
    executor_generation: Generation = _NO_GENERATION
    session_id: str = ""


@dataclass(frozen=True)
class TriggerTask:
    """One task of a TriggerCheckpoint request, in plain values."""

    task: TaskRef
    task_generation: Generation
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
class ReportStamp:
    """Who sends a report and under which tokens; ``request_id`` is kept across retries."""

    request_id: str
    leader: LeaderStamp
    checkpoint_id: int
    task: TaskRef
    task_generation: Generation
    executor_id: str
    executor_generation: Generation


@dataclass(frozen=True)
class PrecommitReport:
    """ReportPrecommit: what one task's pre-commit of checkpoint N left prepared."""

    stamp: ReportStamp
    output: PrecommitOutput
    precommit_duration_ms: int
    #: A range stopped at the checkpoint's limit: records may be left (`checkpoint_size.py`).
    backlog_left: bool = False


@dataclass(frozen=True)
class CheckpointFailureReport:
    """ReportCheckpointFailure: a task's pre-commit of N failed (and maybe the task)."""

    stamp: ReportStamp
    error: TaskError
    task_failed: bool


@dataclass(frozen=True)
class TaskFailureReport:
    """ReportTaskFailure: a task failed outside any checkpoint (e.g. its restore)."""

    request_id: str
    task: TaskRef
    task_generation: Generation
    executor_id: str
    executor_generation: Generation
    error: TaskError


@dataclass(frozen=True)
class PrecommitAnswer:
    """The leader's answer to a ReportPrecommit: the checkpoint's state after it."""

    #: ``lockgate.v1.CheckpointState`` name without its prefix, e.g. "TRIGGERED".
    checkpoint_state: str

    @property
    def aborted(self) -> bool:
        """True if the leader decided N aborted: it will never be COMPLETE."""
        return self.checkpoint_state == "ABORTED"


__all__ = [
    "Assignment",
    "CheckpointFailureReport",
    "ExecutorSettings",
    "LeaderStamp",
    "MembershipReply",
    "PrecommitAnswer",
    "PrecommitReport",
    "Registration",
    "ReportStamp",
    "RestorePlan",
    "TaskError",
    "TaskFailureReport",
    "TaskRef",
    "TriggerResult",
    "TriggerTask",
]
