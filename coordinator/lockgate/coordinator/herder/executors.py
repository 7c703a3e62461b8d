"""The herder's edge to executors: the client of `ExecutorService`, where the leader's
domain values (fence, handles, start offsets) become protos. Every call carries the
leader epoch.

The leader calls executors to run steps 1 and 4 of the checkpoint protocol (trigger,
commit) and to abort what never became COMPLETE. Each call names the executor
registration it is meant for (`executor_id`, `executor_generation`) and the leader's
`Fence` (epoch + holder), so an executor that has seen a newer leader refuses it.

Failures come back as three kinds the leader loop acts on differently:
- `LeaderEpochRefused`: the executor has seen a higher epoch, so this replica no longer
  leads; stop acting and let the lease loop find out.
- `ExecutorRegistrationStale`: the address now belongs to another registration of the id
  (or none); skip this executor until the next heartbeat tells the new one.
- `ExecutorCallFailed`: anything else (unreachable, timeout, DATA_LOSS, a bug); retried
  by the caller where the protocol says so (commit: until acked).
"""

from __future__ import annotations

import threading
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from opentelemetry import context as otel_context
from opentelemetry import propagate

from lockgate.common.grpc_client import error_details, open_channel
from lockgate.common.model.handles import TransactionHandle
from lockgate.common.model.ids import ExecutorId
from lockgate.common.model.offsets import TopicPartition
from lockgate.common.model.pipeline_spec import KafkaSink
from lockgate.common.model.proto import handle_to_proto
from lockgate.common.security import ClientSecurity
from lockgate.coordinator.domain.checkpoints import CheckpointRecord, LingeringTransaction
from lockgate.coordinator.domain.lease import Fence
from lockgate.coordinator.domain.membership import ExecutorRecord
from lockgate.coordinator.domain.pipelines import PipelineRecord, TaskRecord
from lockgate.v1 import common_pb2, executor_pb2, executor_pb2_grpc

_R = TypeVar("_R")

DEFAULT_TRIGGER_TIMEOUT_S = 2.0
#: Triggers per TriggerCheckpoints call (the executor takes up to 1024).
TRIGGERS_PER_CALL = 256
DEFAULT_COMMIT_TIMEOUT_S = 5.0

# The executor's refusal reason for a stale token (executor/fencing.py StaleTokenError).
_STALE_TOKEN_REASON = "STALE_FENCING_TOKEN"


class ExecutorCallFailed(Exception):
    """A call to an executor failed for a reason other than fencing; may be retried."""

    def __init__(self, message: str, *, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        self.code = code


class LeaderEpochRefused(ExecutorCallFailed):
    """The executor has seen a higher leader epoch: this replica is no longer the leader."""

    def __init__(self, message: str, *, highest_seen: int | None) -> None:
        super().__init__(message, code=grpc.StatusCode.FAILED_PRECONDITION)
        self.highest_seen = highest_seen


class ExecutorRegistrationStale(ExecutorCallFailed):
    """The executor at that address runs another registration than the one called."""


@dataclass(frozen=True)
class CheckpointTaskCall:
    """One task of a TriggerCheckpoint: its generation, where it starts, its id prefix."""

    task_index: int
    task_generation: int
    start_offsets: dict[TopicPartition, int]
    transactional_id_prefix: str


@dataclass(frozen=True)
class PipelineTrigger:
    """One pipeline's checkpoint N on one executor, as `send_triggers` carries it."""

    pipeline_name: str
    checkpoint_id: int
    config_version: int
    tasks: Sequence[CheckpointTaskCall]
    timeout_ms: int
    trace_context: Mapping[str, str]
    """W3C context of the leader's trigger step of N (empty: tracing off)."""


def trigger_calls(
    pipeline: PipelineRecord,
    checkpoint: CheckpointRecord,
    tasks: Iterable[TaskRecord],
    offsets: Mapping[TopicPartition, int],
    trace_context: Mapping[str, str],
) -> dict[ExecutorId, PipelineTrigger]:
    """What to ask each executor for checkpoint N: its tasks, where each starts
    (`offsets`: the pipeline's restore positions, read with the trigger decision)."""
    task_by_id = {t.task_id: t for t in tasks}
    calls: dict[ExecutorId, list[CheckpointTaskCall]] = defaultdict(list)
    for trigger in checkpoint.tasks:
        task = task_by_id[trigger.task_id]
        assert trigger.executor_id is not None, "trigger_checkpoints refuses unassigned tasks"
        calls[trigger.executor_id].append(
            CheckpointTaskCall(
                task_index=task.task_index,
                task_generation=int(trigger.task_generation),
                start_offsets={tp: offsets[tp] for tp in task.partitions if tp in offsets},
                transactional_id_prefix=trigger.transactional_id,
            )
        )
    return {
        executor_id: PipelineTrigger(
            pipeline_name=pipeline.pipeline_id,
            checkpoint_id=checkpoint.checkpoint_id,
            config_version=pipeline.config_version,
            tasks=task_calls,
            timeout_ms=pipeline.spec.checkpoint.timeout_ms,
            trace_context=trace_context,
        )
        for executor_id, task_calls in sorted(calls.items())
    }


@dataclass(frozen=True)
class TriggerResult:
    """One task's answer to a trigger."""

    task_index: int
    accepted: bool
    """ACCEPTED or DUPLICATE: the pre-commit runs and will be reported."""
    outcome: str
    """The TriggerOutcome name, e.g. `TRIGGER_OUTCOME_NOT_READY`."""
    reason: str


def leader_epoch_pb(fence: Fence) -> common_pb2.LeaderEpoch:
    """The `LeaderEpoch` message of a fence."""
    return common_pb2.LeaderEpoch(epoch=int(fence.leader_epoch), leader_id=str(fence.holder))


def _addressed(fence: Fence, executor: ExecutorRecord, pipeline_name: str) -> dict[str, Any]:
    """What every call to an executor carries: a request id (retries are idempotent), the
    leader's epoch (the executor refuses an older one) and the registration it is for."""
    return {
        "request_id": uuid.uuid4().hex,
        "leader_epoch": leader_epoch_pb(fence),
        "executor_id": str(executor.executor_id),
        "executor_generation": int(executor.generation),
        "pipeline_name": pipeline_name,
    }


_TRIGGER_ACCEPTED = frozenset(
    {executor_pb2.TRIGGER_OUTCOME_ACCEPTED, executor_pb2.TRIGGER_OUTCOME_DUPLICATE}
)


class ExecutorClient:
    """Channels to the executors, one per address, reused across calls. Thread-safe."""

    def __init__(
        self,
        *,
        trigger_timeout_s: float = DEFAULT_TRIGGER_TIMEOUT_S,
        commit_timeout_s: float = DEFAULT_COMMIT_TIMEOUT_S,
        security: ClientSecurity | None = None,
    ) -> None:
        self._security = security
        self._trigger_timeout_s = trigger_timeout_s
        self._commit_timeout_s = commit_timeout_s
        self._lock = threading.Lock()
        self._stubs: dict[str, tuple[grpc.Channel, executor_pb2_grpc.ExecutorServiceStub]] = {}
        #: Addresses that answered TriggerCheckpoints UNIMPLEMENTED.
        self._trigger_one_by_one: set[str] = set()

    def _stub(self, address: str) -> executor_pb2_grpc.ExecutorServiceStub:
        with self._lock:
            cached = self._stubs.get(address)
            if cached is None:
                # Executors do not redirect: a plain channel, no leader following.
                channel = open_channel(address, follow_leader=False, security=self._security)
                cached = (channel, executor_pb2_grpc.ExecutorServiceStub(channel))
                self._stubs[address] = cached
            return cached[1]

    def close(self) -> None:
        """Close every channel."""
        with self._lock:
            channels = [c for c, _ in self._stubs.values()]
            self._stubs.clear()
        for channel in channels:
            channel.close()

    def send_triggers(
        self, *, fence: Fence, executor: ExecutorRecord, triggers: Sequence[PipelineTrigger]
    ) -> list[Callable[[], list[TriggerResult]]]:
        """Ask `executor` to pre-commit each pipeline's checkpoint N on its tasks (step 1),
        in one TriggerCheckpoints call per `TRIGGERS_PER_CALL`; leader-only.

        Sends without waiting, so all executors are asked at once; each returned call (one
        per trigger, in order) waits for its trigger's answer: each task's outcome (results
        arrive through ReportPrecommits), or the call's classified failure raised. An
        executor that answers UNIMPLEMENTED (another language's) is sent TriggerCheckpoint
        per pipeline from then on.
        """
        answers: list[Callable[[], list[TriggerResult]]] = []
        for start in range(0, len(triggers), TRIGGERS_PER_CALL):
            chunk = triggers[start : start + TRIGGERS_PER_CALL]
            batch = self._send_trigger_batch(fence, executor, chunk)
            answers += [lambda b=batch, i=i: _raise_or_return(b()[i]) for i in range(len(chunk))]  # type: ignore[misc]
        return answers

    def _send_trigger_batch(
        self, fence: Fence, executor: ExecutorRecord, triggers: Sequence[PipelineTrigger]
    ) -> Callable[[], list[list[TriggerResult] | ExecutorCallFailed]]:
        """One TriggerCheckpoints call (or, to an executor without it, one TriggerCheckpoint
        per trigger); the returned call waits for every answer once, whichever thread
        calls it first."""
        if executor.address in self._trigger_one_by_one:
            return _once(self._gather(self._send_each(fence, executor, triggers)))
        request = executor_pb2.TriggerCheckpointsRequest(
            request_id=uuid.uuid4().hex,
            leader_epoch=leader_epoch_pb(fence),
            executor_id=str(executor.executor_id),
            executor_generation=int(executor.generation),
            triggers=[_trigger_pb(t) for t in triggers],
        )
        sent = self._send(
            executor,
            "TriggerCheckpoints",
            lambda stub: stub.TriggerCheckpoints.future(request, timeout=self._trigger_timeout_s),
        )

        def gather() -> list[list[TriggerResult] | ExecutorCallFailed]:
            try:
                responses = sent().responses
            except ExecutorCallFailed as failure:
                if failure.code != grpc.StatusCode.UNIMPLEMENTED:
                    return [failure] * len(triggers)
                with self._lock:
                    self._trigger_one_by_one.add(executor.address)
                return self._gather(self._send_each(fence, executor, triggers))()
            if len(responses) != len(triggers):
                short = ExecutorCallFailed(
                    f"TriggerCheckpoints on executor {executor.executor_id} answered"
                    f" {len(responses)} of {len(triggers)} triggers"
                )
                return [short] * len(triggers)
            return [_trigger_results(r) for r in responses]

        return _once(gather)

    def _send_each(
        self, fence: Fence, executor: ExecutorRecord, triggers: Sequence[PipelineTrigger]
    ) -> list[Callable[[], Any]]:
        """One TriggerCheckpoint per trigger, each sent in its trigger's trace."""
        sent = []
        for trigger in triggers:
            request = _trigger_pb(trigger)
            request.MergeFrom(
                executor_pb2.TriggerCheckpointRequest(
                    **_addressed(fence, executor, trigger.pipeline_name)
                )
            )
            request.ClearField("trace_context")  # the call's metadata carries it
            token = otel_context.attach(propagate.extract(dict(trigger.trace_context)))
            try:
                sent.append(
                    self._send(
                        executor,
                        "TriggerCheckpoint",
                        lambda stub, r=request: stub.TriggerCheckpoint.future(  # type: ignore[misc]
                            r, timeout=self._trigger_timeout_s
                        ),
                    )
                )
            finally:
                otel_context.detach(token)
        return sent

    @staticmethod
    def _gather(
        sent: list[Callable[[], Any]],
    ) -> Callable[[], list[list[TriggerResult] | ExecutorCallFailed]]:
        def gather() -> list[list[TriggerResult] | ExecutorCallFailed]:
            answers: list[list[TriggerResult] | ExecutorCallFailed] = []
            for answer in sent:
                try:
                    answers.append(_trigger_results(answer()))
                except ExecutorCallFailed as failure:
                    answers.append(failure)
            return answers

        return gather

    def send_commit(
        self,
        *,
        fence: Fence,
        executor: ExecutorRecord,
        pipeline_name: str,
        checkpoint_id: int,
        handles: Sequence[TransactionHandle],
        sink: KafkaSink,
    ) -> Callable[[], int]:
        """Commit handles of COMPLETE checkpoint N (step 4) on the pipeline's sink cluster
        (its servers and Kafka properties); leader-only. Sends without waiting, so a
        checkpoint's executors are asked at once; the returned call waits for the answer:
        the count the executor acked, or an exception, which means "not acked, retry"."""
        request = executor_pb2.CommitCheckpointRequest(
            **_addressed(fence, executor, pipeline_name),
            checkpoint_id=checkpoint_id,
            handles=[handle_to_proto(h.on(sink.bootstrap_servers)) for h in handles],
            sink_properties=dict(sink.properties),
        )
        sent = self._send(
            executor,
            "CommitCheckpoint",
            lambda stub: stub.CommitCheckpoint.future(request, timeout=self._commit_timeout_s),
        )
        return lambda: int(sent().handles_committed)

    def abort_checkpoint(
        self,
        *,
        fence: Fence,
        executor: ExecutorRecord,
        pipeline_name: str,
        checkpoint_id: int,
        transactions: Sequence[LingeringTransaction],
        sink: KafkaSink,
        reason: str,
    ) -> int:
        """Abort the transactions of a checkpoint that will never be COMPLETE, on the
        pipeline's sink cluster; leader-only."""
        request = executor_pb2.AbortCheckpointRequest(
            **_addressed(fence, executor, pipeline_name),
            checkpoint_id=checkpoint_id,
            handles=[handle_to_proto(t.handle.on(sink.bootstrap_servers)) for t in transactions],
            reason=reason,
            sink_properties=dict(sink.properties),
        )
        response = self._call(
            executor,
            "AbortCheckpoint",
            lambda stub: stub.AbortCheckpoint(request, timeout=self._commit_timeout_s),
        )
        return int(response.handles_aborted)

    def notify_assignment(self, *, fence: Fence, executor: ExecutorRecord) -> None:
        """Tell `executor` its assignment changed, so it heartbeats now (a hint:
        `assignment_notices.py`); leader-only."""
        request = executor_pb2.NotifyAssignmentRequest(
            request_id=uuid.uuid4().hex,
            leader_epoch=leader_epoch_pb(fence),
            executor_id=str(executor.executor_id),
            executor_generation=int(executor.generation),
        )
        self._call(
            executor,
            "NotifyAssignment",
            lambda stub: stub.NotifyAssignment(request, timeout=self._trigger_timeout_s),
        )

    def _call(
        self,
        executor: ExecutorRecord,
        rpc: str,
        invoke: Callable[[executor_pb2_grpc.ExecutorServiceStub], _R],
    ) -> _R:
        try:
            return invoke(self._stub(executor.address))
        except grpc.RpcError as err:
            raise _classify(err, executor=executor, rpc=rpc) from None

    def _send(
        self,
        executor: ExecutorRecord,
        rpc: str,
        start: Callable[[executor_pb2_grpc.ExecutorServiceStub], grpc.Future[Any]],
    ) -> Callable[[], Any]:
        """Start a call without waiting (`start`: the stub method's ``future``); the
        returned call waits for its answer and raises its failure, classified as `_call`'s
        (one at the start too: sending never raises)."""
        try:
            sent = start(self._stub(executor.address))
        except grpc.RpcError as err:
            failure = _classify(err, executor=executor, rpc=rpc)

            def failed() -> Any:
                raise failure

            return failed
        return lambda: self._call(executor, rpc, lambda _: sent.result())


def _classify(err: grpc.RpcError, *, executor: ExecutorRecord, rpc: str) -> ExecutorCallFailed:
    details = error_details(err)
    where = f"{rpc} on executor {executor.executor_id} ({executor.address})"
    text = f"{where} failed: {details.code.name} {details.message}"
    fencing = details.reason == _STALE_TOKEN_REASON or "FENCED" in (details.reason or "")
    if details.code == grpc.StatusCode.FAILED_PRECONDITION and fencing:
        token = details.metadata.get("token", "")
        if token == "executor_generation":
            return ExecutorRegistrationStale(text, code=details.code)
        if token in ("leader_epoch", "") or "LEADER" in (details.reason or ""):
            current = details.metadata.get("current")
            return LeaderEpochRefused(
                text, highest_seen=int(current) if current and current.isdigit() else None
            )
    if details.code == grpc.StatusCode.PERMISSION_DENIED and details.reason == (
        "FENCED_LEADER_EPOCH"
    ):
        current = details.metadata.get("current_leader_epoch")
        return LeaderEpochRefused(
            text, highest_seen=int(current) if current and current.isdigit() else None
        )
    return ExecutorCallFailed(text, code=details.code)


def trigger_failure(
    pipeline_id: str, answers: Iterable[Callable[[], list[TriggerResult]]]
) -> str | None:
    """Wait for each of a checkpoint's trigger answers (`send_triggers`): why one failed or
    refused a task, or None when every task accepted. `LeaderEpochRefused` is raised."""
    failure: str | None = None
    for answer in answers:
        try:
            results = answer()
        except LeaderEpochRefused:
            raise
        except ExecutorCallFailed as exc:
            failure = failure or str(exc)
            continue
        refused = [r for r in results if not r.accepted]
        if refused and failure is None:
            failure = "; ".join(
                f"task {pipeline_id}/{r.task_index} refused the trigger: "
                f"{r.outcome} {r.reason}".strip()
                for r in refused
            )
    return failure


def _trigger_pb(trigger: PipelineTrigger) -> executor_pb2.TriggerCheckpointRequest:
    """A trigger as one item of a TriggerCheckpoints call (the call carries the fencing)."""
    name = trigger.pipeline_name
    return executor_pb2.TriggerCheckpointRequest(
        pipeline_name=name,
        checkpoint_id=trigger.checkpoint_id,
        config_version=trigger.config_version,
        timeout_ms=trigger.timeout_ms,
        trace_context=dict(trigger.trace_context),
        tasks=[
            executor_pb2.CheckpointTask(
                task_id=common_pb2.TaskId(pipeline_name=name, task_index=t.task_index),
                task_generation=t.task_generation,
                start_offsets=[
                    common_pb2.PartitionOffset(topic=tp.topic, partition=tp.partition, offset=o)
                    for tp, o in sorted(t.start_offsets.items())
                ],
                transactional_id_prefix=t.transactional_id_prefix,
            )
            for t in trigger.tasks
        ],
    )


def _trigger_results(response: executor_pb2.TriggerCheckpointResponse) -> list[TriggerResult]:
    return [
        TriggerResult(
            task_index=r.task_id.task_index,
            accepted=r.outcome in _TRIGGER_ACCEPTED,
            outcome=executor_pb2.TriggerOutcome.Name(r.outcome),
            reason=r.reason,
        )
        for r in response.results
    ]


def _raise_or_return(answer: list[TriggerResult] | ExecutorCallFailed) -> list[TriggerResult]:
    if isinstance(answer, ExecutorCallFailed):
        raise answer
    return answer


def _once(compute: Callable[[], _R]) -> Callable[[], _R]:
    """`compute`, run by the first caller only; later callers, on any thread, wait for it
    and get the same value (`compute` returns its failures, it does not raise them)."""
    lock = threading.Lock()
    done: list[_R] = []

    def once() -> _R:
        with lock:
            if not done:
                done.append(compute())
            return done[0]

    return once
