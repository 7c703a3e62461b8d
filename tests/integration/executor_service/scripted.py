"""A scriptable CoordinatorService peer and an executor-process launcher for the tests.

``ScriptedCoordinator`` is a real gRPC server in the test process. It answers
RegisterExecutor and Heartbeat with the leader epoch and assignment the test sets, and
records every request the executor sends (registrations, heartbeats, pre-commit and
failure reports, deregistrations). ``start_executor`` runs ``python -m lockgate.executor``
as a separate process with its log in a file (a :class:`tests.support.processes.ChildProcess`
with the executor's id, address and a stub of its ExecutorService).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from lockgate.localcluster.commands import executor_command
from lockgate.localcluster.ports import free_port
from lockgate.v1 import (
    common_pb2,
    coordinator_pb2,
    coordinator_pb2_grpc,
    executor_pb2,
    executor_pb2_grpc,
)
from tests.support.processes import ChildProcess, failpoint_env, start_child


@dataclass
class ScriptedCoordinator(coordinator_pb2_grpc.CoordinatorServiceServicer):
    """The leader as the executor sees it, driven by the test."""

    leader_epoch: int = 1
    leader_id: str = "c1"
    executor_generation: int = 1
    heartbeat_interval_ms: int = 200
    session_timeout_ms: int = 5_000
    assignments: list[coordinator_pb2.TaskAssignment] = field(default_factory=list)
    #: Heartbeats of registrations below this generation get NOT_FOUND (session expired).
    expired_below_generation: int = 0
    registrations: list[coordinator_pb2.RegisterExecutorRequest] = field(default_factory=list)
    heartbeats: list[coordinator_pb2.HeartbeatRequest] = field(default_factory=list)
    precommits: list[coordinator_pb2.ReportPrecommitRequest] = field(default_factory=list)
    checkpoint_failures: list[coordinator_pb2.ReportCheckpointFailureRequest] = field(
        default_factory=list
    )
    task_failures: list[coordinator_pb2.ReportTaskFailureRequest] = field(default_factory=list)
    deregistrations: list[coordinator_pb2.DeregisterExecutorRequest] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def epoch(self) -> common_pb2.LeaderEpoch:
        """The epoch this leader presents."""
        return common_pb2.LeaderEpoch(epoch=self.leader_epoch, leader_id=self.leader_id)

    def set_assignments(self, assignments: Sequence[coordinator_pb2.TaskAssignment]) -> None:
        """What the next heartbeat response hands out."""
        with self.lock:
            self.assignments = list(assignments)

    def RegisterExecutor(
        self, request: coordinator_pb2.RegisterExecutorRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.RegisterExecutorResponse:
        with self.lock:
            self.registrations.append(request)
            return coordinator_pb2.RegisterExecutorResponse(
                executor_generation=self.executor_generation,
                session_id=f"session-{self.executor_generation}",
                leader_epoch=self.epoch(),
                session_timeout_ms=self.session_timeout_ms,
                heartbeat_interval_ms=self.heartbeat_interval_ms,
                assignments=self.assignments,
            )

    def Heartbeat(
        self, request: coordinator_pb2.HeartbeatRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.HeartbeatResponse:
        with self.lock:
            self.heartbeats.append(request)
            expired = request.executor_generation < self.expired_below_generation
        if expired:
            context.abort(grpc.StatusCode.NOT_FOUND, "session expired: register again")
        with self.lock:
            return coordinator_pb2.HeartbeatResponse(
                leader_epoch=self.epoch(),
                session_timeout_ms=self.session_timeout_ms,
                heartbeat_interval_ms=self.heartbeat_interval_ms,
                assignments=self.assignments,
            )

    def DeregisterExecutor(
        self, request: coordinator_pb2.DeregisterExecutorRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.DeregisterExecutorResponse:
        with self.lock:
            self.deregistrations.append(request)
        return coordinator_pb2.DeregisterExecutorResponse()

    def ReportPrecommit(
        self, request: coordinator_pb2.ReportPrecommitRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.ReportPrecommitResponse:
        with self.lock:
            self.precommits.append(request)
        return coordinator_pb2.ReportPrecommitResponse(
            checkpoint_state=common_pb2.CHECKPOINT_STATE_TRIGGERED
        )

    def ReportPrecommits(
        self, request: coordinator_pb2.ReportPrecommitsRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.ReportPrecommitsResponse:
        with self.lock:
            self.precommits.extend(request.reports)
        return coordinator_pb2.ReportPrecommitsResponse(
            results=[
                coordinator_pb2.ReportPrecommitResult(
                    checkpoint_state=common_pb2.CHECKPOINT_STATE_TRIGGERED
                )
                for _ in request.reports
            ]
        )

    def ReportTaskFailure(
        self, request: coordinator_pb2.ReportTaskFailureRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.ReportTaskFailureResponse:
        with self.lock:
            self.task_failures.append(request)
        return coordinator_pb2.ReportTaskFailureResponse()

    def ReportCheckpointFailure(
        self,
        request: coordinator_pb2.ReportCheckpointFailureRequest,
        context: grpc.ServicerContext,
    ) -> coordinator_pb2.ReportCheckpointFailureResponse:
        with self.lock:
            self.checkpoint_failures.append(request)
        return coordinator_pb2.ReportCheckpointFailureResponse(
            checkpoint_state=common_pb2.CHECKPOINT_STATE_ABORTED
        )

    def last_status(self, pipeline: str, index: int) -> common_pb2.TaskStatus | None:
        """The task's status in the latest heartbeat, None if the task was not in it."""
        with self.lock:
            if not self.heartbeats:
                return None
            for status in self.heartbeats[-1].task_statuses:
                if (status.task_id.pipeline_name, status.task_id.task_index) == (pipeline, index):
                    return status
        return None


@dataclass
class CoordinatorServer:
    """A started scripted coordinator."""

    coordinator: ScriptedCoordinator
    server: grpc.Server
    address: str


def start_coordinator(coordinator: ScriptedCoordinator) -> CoordinatorServer:
    """Serve ``coordinator`` on a free port of 127.0.0.1."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    coordinator_pb2_grpc.add_CoordinatorServiceServicer_to_server(coordinator, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return CoordinatorServer(coordinator=coordinator, server=server, address=f"127.0.0.1:{port}")


@dataclass
class ExecutorProcess(ChildProcess):
    """``python -m lockgate.executor`` running as a separate process, with a stub of its
    ExecutorService."""

    executor_id: str
    address: str
    channel: grpc.Channel
    stub: executor_pb2_grpc.ExecutorServiceStub

    def stop(self, *, grace_s: float = 20.0) -> int:
        """Stop the process (SIGTERM, SIGKILL if it lingers) and close the channel; the exit
        status."""
        code = super().stop(grace_s=grace_s)
        self.channel.close()
        return code


def start_executor(
    *,
    executor_id: str,
    coordinator_address: str,
    log_path: Path,
    data_plane: str = "none",
    failpoints: str = "",
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> ExecutorProcess:
    """Start an executor registering with ``coordinator_address`` on a free port, with
    ``failpoints`` armed (none: disarmed even if this process has some) and ``env`` on top
    of this process's environment; returns at once."""
    address = f"127.0.0.1:{free_port()}"
    argv = executor_command(
        executor_id=executor_id,
        listen=address,
        coordinators=[coordinator_address],
        data_plane=data_plane,
        spark_master="local[2]",
        extra=extra_args,
    )
    child = start_child(
        f"executor {executor_id}",
        argv,
        log_path=log_path,
        env={**(env or {}), **failpoint_env(failpoints)},
    )
    channel = grpc.insecure_channel(address)
    return ExecutorProcess(
        name=child.name,
        process=child.process,
        log_path=child.log_path,
        executor_id=executor_id,
        address=address,
        channel=channel,
        stub=executor_pb2_grpc.ExecutorServiceStub(channel),
    )


def trigger_request(
    executor: ExecutorProcess,
    coordinator: ScriptedCoordinator,
    *,
    pipeline: str,
    checkpoint_id: int,
    tasks: Sequence[tuple[int, int]],
    start_offsets: Sequence[common_pb2.PartitionOffset] = (),
    leader_epoch: int | None = None,
    executor_generation: int | None = None,
    prefix: str = "lg-test",
) -> executor_pb2.TriggerCheckpointRequest:
    """A TriggerCheckpoint for ``tasks`` as (task_index, task_generation) pairs."""
    return executor_pb2.TriggerCheckpointRequest(
        request_id=f"trigger-{checkpoint_id}",
        leader_epoch=common_pb2.LeaderEpoch(
            epoch=coordinator.leader_epoch if leader_epoch is None else leader_epoch,
            leader_id=coordinator.leader_id,
        ),
        executor_id=executor.executor_id,
        executor_generation=(
            coordinator.executor_generation if executor_generation is None else executor_generation
        ),
        pipeline_name=pipeline,
        checkpoint_id=checkpoint_id,
        tasks=[
            executor_pb2.CheckpointTask(
                task_id=common_pb2.TaskId(pipeline_name=pipeline, task_index=index),
                task_generation=generation,
                start_offsets=start_offsets,
                transactional_id_prefix=f"{prefix}-{pipeline}-{index}-{checkpoint_id}",
            )
            for index, generation in tasks
        ],
        timeout_ms=30_000,
    )


def assignment(
    *,
    pipeline: str,
    task_index: int,
    generation: int,
    source_topic: str = "input",
    sink_topic: str = "output",
    bootstrap_servers: str = "127.0.0.1:1",
    partitions: Sequence[int] = (0,),
    restore: coordinator_pb2.TaskRestoreState | None = None,
    sql: str | None = None,
    python: str | None = None,
) -> coordinator_pb2.TaskAssignment:
    """A RUNNING task assignment reading ``source_topic`` and writing ``sink_topic``, through
    the ``sql`` or ``python`` (``module:function``) transform if one is given."""
    spec = common_pb2.PipelineSpec(
        name=pipeline,
        source=common_pb2.SourceSpec(
            kafka=common_pb2.KafkaSourceSpec(
                bootstrap_servers=bootstrap_servers, topics=[source_topic]
            )
        ),
        sink=common_pb2.SinkSpec(
            kafka=common_pb2.KafkaSinkSpec(bootstrap_servers=bootstrap_servers, topic=sink_topic)
        ),
    )
    if sql is not None:
        spec.transform.sql = sql
    if python is not None:
        spec.transform.python = python
    return coordinator_pb2.TaskAssignment(
        task_id=common_pb2.TaskId(pipeline_name=pipeline, task_index=task_index),
        task_generation=generation,
        config_version=1,
        pipeline_spec=spec,
        source_partitions=[
            common_pb2.TopicPartition(topic=source_topic, partition=p) for p in partitions
        ],
        target_state=common_pb2.TARGET_STATE_RUNNING,
        restore=restore or coordinator_pb2.TaskRestoreState(),
    )
