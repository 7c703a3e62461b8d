"""The coordinator process end to end: election, fencing, pipelines, the checkpoint protocol.

Coordinators run as real processes (`python -m lockgate.coordinator`) on one SQLite file
(or one PostgreSQL database). The checkpoint tests drive them with scripted executor
peers: real gRPC `ExecutorService` servers in this process that register and heartbeat
through `CoordinatorService` like a real executor, and can be told to report, fail, stay
silent, or refuse commits. Every wait is a condition polled against a deadline.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
import sqlalchemy as sa
from google.protobuf import field_mask_pb2
from grpc_status import rpc_status

from lockgate.common.errors import FencingToken, StaleTokenError
from lockgate.common.grpc_client import error_details, leader_address_of, open_channel
from lockgate.common.grpc_server import rpc_status_for_error
from lockgate.localcluster.commands import coordinator_command
from lockgate.localcluster.ports import free_port
from lockgate.v1 import (
    common_pb2,
    coordinator_pb2,
    coordinator_pb2_grpc,
    executor_pb2,
    executor_pb2_grpc,
)
from tests.fixtures.kafka import KafkaBroker
from tests.support.processes import ChildProcess, pid_stopped, start_child
from tests.support.waits import wait_for

LEASE_MS = 1_000


# ---------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------


@dataclass
class CoordinatorProcess(ChildProcess):
    """One coordinator replica started by a test: its process (to SIGSTOP or SIGKILL) and the
    address it serves on."""

    coordinator_id: str
    address: str

    def stub(self) -> coordinator_pb2_grpc.CoordinatorServiceStub:
        """A stub bound to this replica only (no leader following)."""
        return coordinator_pb2_grpc.CoordinatorServiceStub(
            open_channel(self.address, follow_leader=False)
        )

    def cluster_info(self) -> coordinator_pb2.GetClusterInfoResponse:
        """GetClusterInfo as this replica answers it."""
        response: coordinator_pb2.GetClusterInfoResponse = self.stub().GetClusterInfo(
            coordinator_pb2.GetClusterInfoRequest(), timeout=2
        )
        return response


class CoordinatorCluster:
    """Starts coordinator processes on one database and stops them at teardown."""

    def __init__(self, workdir: Path, db_url: str) -> None:
        self.workdir = workdir
        self.db_url = db_url
        self.members: list[CoordinatorProcess] = []

    def start(
        self,
        count: int,
        *,
        lease_ms: int = LEASE_MS,
        session_timeout_ms: int = 3000,
        heartbeat_interval_ms: int = 200,
    ) -> list[CoordinatorProcess]:
        """Start `count` replicas and wait until each answers."""
        started: list[CoordinatorProcess] = []
        for _ in range(count):
            coordinator_id = f"c{len(self.members) + 1}"
            address = f"127.0.0.1:{free_port()}"
            argv = coordinator_command(
                coordinator_id=coordinator_id,
                db_url=self.db_url,
                listen=address,
                lease_ms=lease_ms,
                extra=[
                    "--session-timeout-ms",
                    str(session_timeout_ms),
                    "--heartbeat-interval-ms",
                    str(heartbeat_interval_ms),
                    "--reassign-delay-ms",
                    "500",
                ],
            )
            child = start_child(
                coordinator_id,
                argv,
                log_path=self.workdir / f"{coordinator_id}.log",
                cwd=self.workdir,
            )
            member = CoordinatorProcess(
                name=child.name,
                process=child.process,
                log_path=child.log_path,
                coordinator_id=coordinator_id,
                address=address,
            )
            self.members.append(member)
            started.append(member)
        for member in started:
            wait_for(
                f"{member.coordinator_id} to answer",
                member.cluster_info,
                timeout_s=30,
                abort_if=member.died,
            )
        return started

    def alive(self) -> list[CoordinatorProcess]:
        """Replicas whose process still runs."""
        return [m for m in self.members if m.process.poll() is None]

    def leader(self, among: list[CoordinatorProcess] | None = None) -> CoordinatorProcess:
        """The replica every live replica names as leader (waits until they agree)."""
        candidates = among or self.alive()

        def agreed() -> CoordinatorProcess | None:
            infos = [m.cluster_info() for m in candidates]
            leaders = {i.leader_epoch.leader_id for i in infos}
            if len(leaders) != 1 or "" in leaders:
                return None
            (leader_id,) = leaders
            return next((m for m in self.members if m.coordinator_id == leader_id), None)

        return wait_for("the replicas to agree on a leader", agreed, timeout_s=20)

    def stop_all(self) -> None:
        """Stop every replica this cluster started (only those, by their own handle)."""
        for member in self.members:
            member.stop(grace_s=10)


def rpc_error(call: Callable[[], object]) -> grpc.RpcError:
    """The RpcError `call` raises (fails the test if it succeeds)."""
    try:
        call()
    except grpc.RpcError as exc:
        return exc
    raise AssertionError("the call succeeded but an error was expected")


def pipeline_spec(
    name: str,
    *,
    bootstrap: str,
    source_topic: str,
    sink_topic: str,
    tasks_max: int = 1,
    interval_ms: int = 300,
    timeout_ms: int = 1_500,
) -> common_pb2.PipelineSpec:
    """A valid Kafka-to-Kafka pipeline spec."""
    return common_pb2.PipelineSpec(
        name=name,
        source=common_pb2.SourceSpec(
            kafka=common_pb2.KafkaSourceSpec(bootstrap_servers=bootstrap, topics=[source_topic])
        ),
        sink=common_pb2.SinkSpec(
            kafka=common_pb2.KafkaSinkSpec(bootstrap_servers=bootstrap, topic=sink_topic)
        ),
        checkpoint=common_pb2.CheckpointSpec(interval_ms=interval_ms, timeout_ms=timeout_ms),
        tasks_max=tasks_max,
    )


def unique_name(prefix: str) -> str:
    """A pipeline name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# ---------------------------------------------------------------------------------------
# Scripted executor peer
# ---------------------------------------------------------------------------------------


@dataclass
class PeerScript:
    """What the peer does at each step; tests flip these while it runs."""

    precommit: str = "report"
    """`report` the pre-commit, `fail` it (ReportCheckpointFailure), or stay `silent`."""
    commit: str = "ack"
    """`ack` commits, answer them `unavailable` (not acked: the leader must retry), or
    `hold` each unanswered until `release_held` is set, then ack it."""
    trigger: str = "answer"
    """`answer` triggers at once, or `hold` each unanswered until `release_held` is set."""
    trigger_batches: bool = True
    """False: answer TriggerCheckpoints UNIMPLEMENTED, as an executor without it would."""


@dataclass
class PeerLog:
    """Every call the peer received, in order."""

    triggers: list[executor_pb2.TriggerCheckpointRequest] = field(default_factory=list)
    trigger_rpcs: list[str] = field(default_factory=list)
    """The trigger RPCs received, in order (TriggerCheckpoint or TriggerCheckpoints)."""
    silenced: list[executor_pb2.TriggerCheckpointRequest] = field(default_factory=list)
    """The triggers a `silent` script left unreported, in order."""
    commits: list[executor_pb2.CommitCheckpointRequest] = field(default_factory=list)
    acked_commits: list[executor_pb2.CommitCheckpointRequest] = field(default_factory=list)
    aborts: list[executor_pb2.AbortCheckpointRequest] = field(default_factory=list)
    refused_epochs: list[int] = field(default_factory=list)
    report_errors: list[str] = field(default_factory=list)
    reported: dict[tuple[str, int, int], list[common_pb2.SinkHandle]] = field(default_factory=dict)
    """(pipeline, checkpoint, task index) -> handles it pre-committed."""


class ScriptedExecutor(executor_pb2_grpc.ExecutorServiceServicer):
    """An ExecutorService peer that follows its script instead of running Spark."""

    def __init__(self, executor_id: str, coordinators: list[str]) -> None:
        self.executor_id = executor_id
        self.script = PeerScript()
        self.log = PeerLog()
        self.lock = threading.Lock()
        self.generation = 0
        self.highest_epoch = 0
        self.assignments: dict[tuple[str, int], coordinator_pb2.TaskAssignment] = {}
        self.release_held = threading.Event()
        """Ends every call a `hold` script holds (set by `stop` too)."""
        self._stop = threading.Event()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        executor_pb2_grpc.add_ExecutorServiceServicer_to_server(self, self._server)
        port = self._server.add_insecure_port("127.0.0.1:0")
        self.address = f"127.0.0.1:{port}"
        self._channel = open_channel(coordinators, max_attempts=2)
        self._coordinator = coordinator_pb2_grpc.CoordinatorServiceStub(self._channel)
        self._heartbeats = threading.Thread(target=self._heartbeat_loop, daemon=True)

    def start(self) -> ScriptedExecutor:
        """Serve, register, and heartbeat every 200 ms."""
        self._server.start()
        self._heartbeats.start()
        return self

    def stop(self) -> None:
        """Stop heartbeating and serving (the peer vanishes); idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        self.release_held.set()
        self._heartbeats.join(timeout=5)
        self._server.stop(0).wait()
        self._channel.close()

    # -- membership ------------------------------------------------------------------

    def _see_epoch(self, epoch: int) -> None:
        with self.lock:
            self.highest_epoch = max(self.highest_epoch, epoch)

    def _register(self) -> None:
        response = self._coordinator.RegisterExecutor(
            coordinator_pb2.RegisterExecutorRequest(
                request_id=uuid.uuid4().hex,
                executor_id=self.executor_id,
                address=self.address,
                spark_master="scripted",
            ),
            timeout=3,
        )
        self._see_epoch(response.leader_epoch.epoch)
        with self.lock:
            self.generation = response.executor_generation
            self._take(response.assignments)

    def _take(self, assignments: Any) -> None:
        self.assignments = {(a.task_id.pipeline_name, a.task_id.task_index): a for a in assignments}

    def _heartbeat_loop(self) -> None:
        while not self._stop.is_set():
            try:
                if self.generation == 0:
                    self._register()
                else:
                    self._heartbeat()
            except grpc.RpcError as exc:
                if exc.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION):
                    self.generation = 0  # expired or replaced: register again
            self._stop.wait(0.2)

    def _heartbeat(self) -> None:
        with self.lock:
            statuses = [
                common_pb2.TaskStatus(
                    task_id=a.task_id,
                    task_generation=a.task_generation,
                    state=(
                        common_pb2.TASK_STATE_PAUSED
                        if a.target_state == common_pb2.TARGET_STATE_PAUSED
                        else common_pb2.TASK_STATE_RUNNING
                    ),
                )
                for a in self.assignments.values()
            ]
            request = coordinator_pb2.HeartbeatRequest(
                executor_id=self.executor_id,
                executor_generation=self.generation,
                task_statuses=statuses,
                highest_leader_epoch_seen=common_pb2.LeaderEpoch(epoch=self.highest_epoch),
            )
        response = self._coordinator.Heartbeat(request, timeout=3)
        self._see_epoch(response.leader_epoch.epoch)
        with self.lock:
            self._take(response.assignments)

    # -- fencing ---------------------------------------------------------------------

    def _fenced(self, context: grpc.ServicerContext, epoch: int, generation: int) -> bool:
        with self.lock:
            if epoch < self.highest_epoch:
                self.log.refused_epochs.append(epoch)
                status = rpc_status_for_error(
                    StaleTokenError(
                        token=FencingToken.LEADER_EPOCH,
                        subject="",
                        presented=epoch,
                        current=self.highest_epoch,
                        message=f"leader epoch {epoch} is stale",
                    )
                )
            elif generation != self.generation:
                status = rpc_status_for_error(
                    StaleTokenError(
                        token=FencingToken.EXECUTOR_GENERATION,
                        subject=self.executor_id,
                        presented=generation,
                        current=self.generation,
                        message="stale executor generation",
                    )
                )
            else:
                self.highest_epoch = epoch
                return False
        context.abort_with_status(status)
        return True

    # -- ExecutorService -------------------------------------------------------------

    def TriggerCheckpoints(
        self, request: executor_pb2.TriggerCheckpointsRequest, context: grpc.ServicerContext
    ) -> executor_pb2.TriggerCheckpointsResponse:
        with self.lock:
            self.log.trigger_rpcs.append("TriggerCheckpoints")
            batches = self.script.trigger_batches
        if not batches:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!")
        self._fenced(context, request.leader_epoch.epoch, request.executor_generation)
        responses = []
        for trigger in request.triggers:
            trigger.leader_epoch.CopyFrom(request.leader_epoch)
            trigger.executor_generation = request.executor_generation
            responses.append(self._trigger(trigger))
        return executor_pb2.TriggerCheckpointsResponse(responses=responses)

    def TriggerCheckpoint(
        self, request: executor_pb2.TriggerCheckpointRequest, context: grpc.ServicerContext
    ) -> executor_pb2.TriggerCheckpointResponse:
        with self.lock:
            self.log.trigger_rpcs.append("TriggerCheckpoint")
        self._fenced(context, request.leader_epoch.epoch, request.executor_generation)
        return self._trigger(request)

    def _trigger(
        self, request: executor_pb2.TriggerCheckpointRequest
    ) -> executor_pb2.TriggerCheckpointResponse:
        with self.lock:
            self.log.triggers.append(request)
            mode = self.script.precommit
            if mode == "silent":
                self.log.silenced.append(request)
            hold = self.script.trigger == "hold"
        if hold:
            self.release_held.wait()
        threading.Thread(target=self._precommit, args=(request, mode), daemon=True).start()
        return executor_pb2.TriggerCheckpointResponse(
            results=[
                executor_pb2.TaskTriggerResult(
                    task_id=t.task_id,
                    outcome=executor_pb2.TRIGGER_OUTCOME_ACCEPTED,
                    current_task_generation=t.task_generation,
                )
                for t in request.tasks
            ]
        )

    def _precommit(self, request: executor_pb2.TriggerCheckpointRequest, mode: str) -> None:
        # A peer that vanished (stop()) reports nothing more, as a killed process would.
        with contextlib.suppress(ValueError):  # its channel is closed
            self._precommit_tasks(request, mode)

    def _precommit_tasks(self, request: executor_pb2.TriggerCheckpointRequest, mode: str) -> None:
        for task in request.tasks:
            if self._stop.is_set():
                return
            if mode == "silent":
                continue
            if mode == "fail":
                with contextlib.suppress(grpc.RpcError):
                    self._coordinator.ReportCheckpointFailure(
                        coordinator_pb2.ReportCheckpointFailureRequest(
                            leader_epoch=request.leader_epoch,
                            checkpoint_id=request.checkpoint_id,
                            task_id=task.task_id,
                            task_generation=task.task_generation,
                            executor_id=self.executor_id,
                            executor_generation=request.executor_generation,
                            error=common_pb2.TaskError(message="scripted failure"),
                        ),
                        timeout=3,
                    )
                continue
            with self.lock:
                assignment = self.assignments.get(
                    (task.task_id.pipeline_name, task.task_id.task_index)
                )
            partitions = list(assignment.source_partitions) if assignment else []
            starts = {(o.topic, o.partition): o.offset for o in task.start_offsets}
            ranges = []
            for tp in partitions:
                start = starts.get((tp.topic, tp.partition), 0)
                ranges.append(
                    common_pb2.OffsetRange(
                        topic=tp.topic,
                        partition=tp.partition,
                        start_offset=start,
                        end_offset=start + 5,
                    )
                )
            handle = common_pb2.SinkHandle(
                kafka=common_pb2.KafkaTransactionHandle(
                    transactional_id=task.transactional_id_prefix,
                    producer_id=1000 + task.task_id.task_index,
                    producer_epoch=request.checkpoint_id % 100,
                )
            )
            with self.lock:
                key = (request.pipeline_name, request.checkpoint_id, task.task_id.task_index)
                self.log.reported[key] = [handle]
            try:
                self._coordinator.ReportPrecommit(
                    coordinator_pb2.ReportPrecommitRequest(
                        request_id=uuid.uuid4().hex,
                        leader_epoch=request.leader_epoch,
                        checkpoint_id=request.checkpoint_id,
                        task_id=task.task_id,
                        task_generation=task.task_generation,
                        executor_id=self.executor_id,
                        executor_generation=request.executor_generation,
                        source_ranges=ranges,
                        sink_handles=[handle],
                    ),
                    timeout=3,
                )
            except grpc.RpcError as exc:
                with self.lock:
                    self.log.report_errors.append(f"{exc.code().name}: {exc.details()}")

    def CommitCheckpoint(
        self, request: executor_pb2.CommitCheckpointRequest, context: grpc.ServicerContext
    ) -> executor_pb2.CommitCheckpointResponse:
        self._fenced(context, request.leader_epoch.epoch, request.executor_generation)
        with self.lock:
            self.log.commits.append(request)
            mode = self.script.commit
        if mode == "hold":
            self.release_held.wait()
            mode = "ack"
        if mode == "ack":
            with self.lock:
                self.log.acked_commits.append(request)
        else:
            context.abort(grpc.StatusCode.UNAVAILABLE, "scripted: Kafka unreachable")
        return executor_pb2.CommitCheckpointResponse(handles_committed=len(request.handles))

    def GetExecutorStatus(
        self, request: executor_pb2.GetExecutorStatusRequest, context: grpc.ServicerContext
    ) -> executor_pb2.GetExecutorStatusResponse:
        with self.lock:
            return executor_pb2.GetExecutorStatusResponse(
                executor_id=self.executor_id,
                executor_generation=self.generation,
                highest_leader_epoch_seen=common_pb2.LeaderEpoch(epoch=self.highest_epoch),
            )

    def AbortCheckpoint(
        self, request: executor_pb2.AbortCheckpointRequest, context: grpc.ServicerContext
    ) -> executor_pb2.AbortCheckpointResponse:
        self._fenced(context, request.leader_epoch.epoch, request.executor_generation)
        with self.lock:
            self.log.aborts.append(request)
        return executor_pb2.AbortCheckpointResponse(handles_aborted=len(request.handles))


# ---------------------------------------------------------------------------------------
# Election and fencing
# ---------------------------------------------------------------------------------------


@pytest.mark.serial  # a time bound is the assertion
def test_three_replicas_elect_one_leader_and_followers_redirect(
    cluster: CoordinatorCluster,
) -> None:
    """Exactly one of three leads; any replica names it; a follower redirects; the
    Python client follows; SIGKILL of the leader fails over within 2 x lease."""
    members = cluster.start(3)
    leader = cluster.leader()
    infos = [m.cluster_info() for m in members]
    assert {i.leader_epoch.leader_id for i in infos} == {leader.coordinator_id}
    assert {i.leader_address for i in infos} == {leader.address}
    assert sorted(i.responder_id for i in infos) == ["c1", "c2", "c3"]
    epoch = infos[0].leader_epoch.epoch
    assert epoch >= 1

    # A follower answers a leader-only RPC with UNAVAILABLE + lockgate-leader.
    follower = next(m for m in members if m is not leader)
    probe = coordinator_pb2.PausePipelineRequest(name="no-such-pipeline")
    err = rpc_error(lambda: follower.stub().PausePipeline(probe, timeout=3))
    assert err.code() == grpc.StatusCode.UNAVAILABLE
    assert leader_address_of(err) == leader.address
    # The Python client follows it to the leader, which answers NOT_FOUND for the name.
    with open_channel(follower.address) as channel:
        stub = coordinator_pb2_grpc.CoordinatorServiceStub(channel)
        err = rpc_error(lambda: stub.PausePipeline(probe, timeout=5))
    assert err.code() == grpc.StatusCode.NOT_FOUND, err
    assert "no-such-pipeline" in (err.details() or "")

    # SIGKILL the leader: another replica leads with a higher epoch within 2 x lease.
    survivors = [m for m in members if m is not leader]
    killed_at = time.monotonic()
    leader.process.send_signal(signal.SIGKILL)
    leader.process.wait(timeout=10)

    def new_leader() -> coordinator_pb2.GetClusterInfoResponse | None:
        info = survivors[0].cluster_info()
        if info.leader_epoch.epoch > epoch and info.leader_epoch.leader_id != leader.coordinator_id:
            return info
        return None

    info = wait_for("a new leader", new_leader, timeout_s=10)
    failover_s = time.monotonic() - killed_at
    print(
        f"\nfailover ({cluster.db_url.split(':')[0]}): {failover_s * 1000:.0f} ms "
        f"(lease {LEASE_MS} ms), epoch {epoch} -> {info.leader_epoch.epoch}"
    )
    assert failover_s < 2 * LEASE_MS / 1000
    assert cluster.leader(among=survivors).coordinator_id == info.leader_epoch.leader_id


def stop_outside_a_write(member: ChildProcess, db_url: str) -> None:
    """SIGSTOP `member` at a moment it holds no write transaction. On SQLite a replica
    stopped inside a write keeps the file's write lock until it resumes (README, Database
    timeouts: no server can end its transaction), so no other replica could take the lease
    meanwhile: take the write lock first (waiting for any write in progress to end), stop
    it while the lock is ours, then let the lock go. On PostgreSQL the server ends a
    stopped leader's transaction itself."""
    if not db_url.startswith("sqlite:///"):
        os.kill(member.process.pid, signal.SIGSTOP)
        return
    probe = sqlite3.connect(db_url.removeprefix("sqlite:///"), timeout=30, isolation_level=None)
    try:
        probe.execute("BEGIN IMMEDIATE")
        os.kill(member.process.pid, signal.SIGSTOP)
        # A thread still running after kill returns (a lease renewal waiting on our lock)
        # would take the lock the moment we let it go, and keep it while stopped.
        wait_for("the replica to stop", lambda: pid_stopped(member.process.pid), timeout_s=10)
        probe.execute("ROLLBACK")
    finally:
        probe.close()


def test_paused_leader_cannot_write_after_it_wakes(cluster: CoordinatorCluster) -> None:
    """SIGSTOP the leader past its lease, let the new leader register an executor, queue a
    write at the old leader, SIGCONT: the write is refused and SQL shows only the new
    leader's change."""
    members = cluster.start(3)
    old = cluster.leader()
    old_epoch = old.cluster_info().leader_epoch.epoch
    survivors = [m for m in members if m is not old]
    stop_outside_a_write(old, cluster.db_url)
    try:
        new = wait_for(
            "a new leader while the old one is stopped",
            lambda: next(
                (
                    m
                    for m in survivors
                    if m.cluster_info().leader_epoch.leader_id == m.coordinator_id
                ),
                None,
            ),
            timeout_s=20,
        )
        new_epoch = new.cluster_info().leader_epoch.epoch
        assert new_epoch > old_epoch
        register = coordinator_pb2.RegisterExecutorRequest(
            executor_id="e-fence", address="127.0.0.1:1"
        )
        first = new.stub().RegisterExecutor(register, timeout=5)
        assert first.executor_generation == 1
        assert first.leader_epoch.epoch == new_epoch
        # Queue the same write at the stopped old leader; it runs when the process wakes.
        queued = old.stub().RegisterExecutor.future(register, timeout=15)
    finally:
        os.kill(old.process.pid, signal.SIGCONT)
    err = queued.exception()
    assert isinstance(err, grpc.RpcError), "the old leader accepted a write after waking"
    assert err.code() == grpc.StatusCode.UNAVAILABLE
    assert leader_address_of(err) == new.address
    engine = sa.create_engine(cluster.db_url)
    try:
        with engine.connect() as conn:
            generation = conn.execute(
                sa.text("SELECT generation FROM executors WHERE executor_id = 'e-fence'")
            ).scalar_one()
            holder, epoch = conn.execute(
                sa.text("SELECT holder, leader_epoch FROM leader_lease")
            ).one()
    finally:
        engine.dispose()
    print(
        f"\nafter SIGCONT: executors.generation={generation} (1 = only the new leader's "
        f"write), leader_lease=({holder}, {epoch})"
    )
    assert generation == 1
    assert (holder, epoch) == (new.coordinator_id, new_epoch)
    # The woken replica knows it follows now.
    wait_for(
        "the old leader to name the new one",
        lambda: old.cluster_info().leader_epoch.leader_id == new.coordinator_id,
        timeout_s=20,
    )


# ---------------------------------------------------------------------------------------
# Pipelines and bad input
# ---------------------------------------------------------------------------------------


def violations_of(err: grpc.RpcError) -> dict[str, str]:
    """field -> description of a failed call's google.rpc.BadRequest."""
    return {v.field: v.description for v in error_details(err).field_violations}


def test_pipeline_crud_and_bad_input(
    cluster: CoordinatorCluster,
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
) -> None:
    """Create/get/list/update/pause/resume/stop/offsets/delete, and every bad input gets
    the right status code and names its field."""
    (coordinator,) = cluster.start(1)
    bootstrap = kafka_broker.bootstrap_servers
    source, sink = new_topic(partitions=3), new_topic()
    name = unique_name("crud")
    with open_channel(coordinator.address) as channel:
        stub = coordinator_pb2_grpc.CoordinatorServiceStub(channel)
        cluster.leader()
        spec = pipeline_spec(
            name, bootstrap=bootstrap, source_topic=source, sink_topic=sink, tasks_max=2
        )
        created = stub.CreatePipeline(coordinator_pb2.CreatePipelineRequest(spec=spec), timeout=10)
        assert created.pipeline.config_version == 1
        assert created.pipeline.target_state == common_pb2.TARGET_STATE_RUNNING
        got = stub.GetPipeline(coordinator_pb2.GetPipelineRequest(name=name), timeout=5)
        assert got.pipeline.spec.source.kafka.topics == [source]
        listed = stub.ListPipelines(coordinator_pb2.ListPipelinesRequest(), timeout=5)
        assert name in [p.name for p in listed.pipelines]
        status = stub.GetPipelineStatus(
            coordinator_pb2.GetPipelineStatusRequest(name=name), timeout=5
        )
        assert [len(t.source_partitions) for t in status.tasks] == [2, 1]

        # Duplicate name.
        err = rpc_error(
            lambda: stub.CreatePipeline(coordinator_pb2.CreatePipelineRequest(spec=spec), timeout=5)
        )
        assert err.code() == grpc.StatusCode.ALREADY_EXISTS
        assert name in (err.details() or "")

        # Unknown sink type: SinkSpec field 2, as a newer client would send it.
        unknown_sink = common_pb2.PipelineSpec()
        unknown_sink.CopyFrom(spec)
        unknown_sink.name = unique_name("bad")
        unknown_sink.sink.Clear()
        unknown_sink.sink.MergeFromString(b"\x12\x00")
        err = rpc_error(
            lambda: stub.CreatePipeline(
                coordinator_pb2.CreatePipelineRequest(spec=unknown_sink), timeout=5
            )
        )
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "unknown sink type" in violations_of(err)["sink"]

        # Negative checkpoint interval.
        negative = common_pb2.PipelineSpec()
        negative.CopyFrom(spec)
        negative.name = unique_name("bad")
        negative.checkpoint.interval_ms = -5
        err = rpc_error(
            lambda: stub.CreatePipeline(
                coordinator_pb2.CreatePipelineRequest(spec=negative), timeout=5
            )
        )
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "checkpoint.interval_ms" in violations_of(err)
        assert "checkpoint.interval_ms" in (err.details() or "")

        # Missing sink topic, and a source topic that does not exist.
        no_topic = common_pb2.PipelineSpec()
        no_topic.CopyFrom(spec)
        no_topic.name = unique_name("bad")
        no_topic.sink.kafka.topic = ""
        err = rpc_error(
            lambda: stub.CreatePipeline(
                coordinator_pb2.CreatePipelineRequest(spec=no_topic), timeout=5
            )
        )
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "sink.kafka.topic" in violations_of(err)
        absent = common_pb2.PipelineSpec()
        absent.CopyFrom(spec)
        absent.name = unique_name("bad")
        absent.source.kafka.topics[:] = ["no-such-topic-" + uuid.uuid4().hex[:6]]
        err = rpc_error(
            lambda: stub.CreatePipeline(
                coordinator_pb2.CreatePipelineRequest(spec=absent), timeout=10
            )
        )
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "does not exist" in violations_of(err)["source.kafka.topics[0]"]

        # ValidatePipeline reports the same, without creating.
        checked = stub.ValidatePipeline(
            coordinator_pb2.ValidatePipelineRequest(spec=negative), timeout=5
        )
        assert not checked.valid
        assert [v.field for v in checked.violations] == ["checkpoint.interval_ms"]
        checked = stub.ValidatePipeline(
            coordinator_pb2.ValidatePipelineRequest(spec=absent), timeout=10
        )
        assert [v.field for v in checked.violations] == ["source.kafka.topics[0]"]
        checked = stub.ValidatePipeline(
            coordinator_pb2.ValidatePipelineRequest(spec=spec), timeout=10
        )
        assert checked.valid and checked.name_taken

        # Unknown pipeline.
        for call in (
            lambda: stub.GetPipeline(coordinator_pb2.GetPipelineRequest(name="nope"), timeout=5),
            lambda: stub.PausePipeline(
                coordinator_pb2.PausePipelineRequest(name="nope"), timeout=5
            ),
            lambda: stub.GetOffsets(
                coordinator_pb2.GetOffsetsRequest(pipeline_name="nope"), timeout=5
            ),
        ):
            err = rpc_error(call)
            assert err.code() == grpc.StatusCode.NOT_FOUND
            assert "'nope'" in (err.details() or "")

        # Reset offsets of a running pipeline: refused until it is stopped.
        reset = coordinator_pb2.ResetOffsetsRequest(
            pipeline_name=name,
            offsets=coordinator_pb2.PartitionOffsets(
                offsets=[common_pb2.PartitionOffset(topic=source, partition=0, offset=7)]
            ),
        )
        err = rpc_error(lambda: stub.ResetOffsets(reset, timeout=5))
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "stop it" in (err.details() or "")

        # Lifecycle verbs.
        paused = stub.PausePipeline(coordinator_pb2.PausePipelineRequest(name=name), timeout=5)
        assert paused.pipeline.target_state == common_pb2.TARGET_STATE_PAUSED
        stopped = stub.StopPipeline(coordinator_pb2.StopPipelineRequest(name=name), timeout=5)
        assert stopped.pipeline.target_state == common_pb2.TARGET_STATE_STOPPED
        err = rpc_error(
            lambda: stub.PausePipeline(coordinator_pb2.PausePipelineRequest(name=name), timeout=5)
        )
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
        bad_partition = coordinator_pb2.ResetOffsetsRequest(
            pipeline_name=name,
            offsets=coordinator_pb2.PartitionOffsets(
                offsets=[common_pb2.PartitionOffset(topic=source, partition=9, offset=1)]
            ),
        )
        err = rpc_error(lambda: stub.ResetOffsets(bad_partition, timeout=5))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "offsets.offsets[0]" in violations_of(err)
        stub.ResetOffsets(reset, timeout=5)
        offsets = stub.GetOffsets(coordinator_pb2.GetOffsetsRequest(pipeline_name=name), timeout=5)
        assert [(o.topic, o.partition, o.offset) for o in offsets.offsets] == [(source, 0, 7)]
        resumed = stub.ResumePipeline(coordinator_pb2.ResumePipelineRequest(name=name), timeout=5)
        assert resumed.pipeline.target_state == common_pb2.TARGET_STATE_RUNNING

        # Update with a field mask: the version grows and the tasks are re-split.
        update = coordinator_pb2.UpdatePipelineRequest(
            name=name,
            spec=common_pb2.PipelineSpec(tasks_max=3),
            update_mask=field_mask_pb2.FieldMask(paths=["tasks_max"]),
            expected_config_version=1,
        )
        updated = stub.UpdatePipeline(update, timeout=10)
        assert updated.pipeline.config_version == 2
        assert updated.pipeline.spec.tasks_max == 3
        status = stub.GetPipelineStatus(
            coordinator_pb2.GetPipelineStatusRequest(name=name), timeout=5
        )
        assert len(status.tasks) == 3
        err = rpc_error(lambda: stub.UpdatePipeline(update, timeout=5))
        assert err.code() == grpc.StatusCode.ABORTED

        stub.DeletePipeline(coordinator_pb2.DeletePipelineRequest(name=name), timeout=10)
        err = rpc_error(
            lambda: stub.GetPipeline(coordinator_pb2.GetPipelineRequest(name=name), timeout=5)
        )
        assert err.code() == grpc.StatusCode.NOT_FOUND


# ---------------------------------------------------------------------------------------
# The checkpoint protocol's leader side
# ---------------------------------------------------------------------------------------


def checkpoints(
    stub: coordinator_pb2_grpc.CoordinatorServiceStub, name: str
) -> dict[int, common_pb2.Checkpoint]:
    """Checkpoint id -> checkpoint, the pipeline's whole recent history."""
    response = stub.ListCheckpoints(
        coordinator_pb2.ListCheckpointsRequest(pipeline_name=name, page_size=1000), timeout=5
    )
    return {c.checkpoint_id: c for c in response.checkpoints}


def first_in_state(
    stub: coordinator_pb2_grpc.CoordinatorServiceStub, name: str, state: int, after: int = 0
) -> common_pb2.Checkpoint | None:
    """The oldest checkpoint later than `after` in `state`, if any."""
    found = [
        c for i, c in sorted(checkpoints(stub, name).items()) if i > after and c.state == state
    ]
    return found[0] if found else None


@dataclass
class CheckpointSetup:
    """Coordinators, two scripted peers and one running pipeline over two partitions."""

    stub: coordinator_pb2_grpc.CoordinatorServiceStub
    peers: list[ScriptedExecutor]
    name: str


def wait_committed(
    setup: CheckpointSetup, what: str, *, after: int = 0, timeout_s: float
) -> common_pb2.Checkpoint:
    """Wait for a COMMITTED checkpoint of the setup's pipeline later than `after`; the oldest."""
    return wait_for(
        what,
        lambda: first_in_state(
            setup.stub, setup.name, common_pb2.CHECKPOINT_STATE_COMMITTED, after=after
        ),
        timeout_s=timeout_s,
    )


@contextlib.contextmanager
def checkpoint_setup(
    cluster: CoordinatorCluster,
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
    *,
    replicas: int,
    unbatched: frozenset[str] = frozenset(),
) -> Iterator[CheckpointSetup]:
    """Start `replicas` coordinators and two peers (e1, e2; those in `unbatched` without
    TriggerCheckpoints), wait until both peers are registered, then create a pipeline
    whose two tasks spread over them."""
    members = cluster.start(replicas)
    addresses = [m.address for m in members]
    bootstrap = kafka_broker.bootstrap_servers
    source, sink = new_topic(partitions=2), new_topic()
    name = unique_name("ckpt")
    peers = [ScriptedExecutor(f"e{i}", addresses) for i in (1, 2)]
    for peer in peers:
        peer.script.trigger_batches = peer.executor_id not in unbatched
        peer.start()
    channel = open_channel(addresses)
    try:
        stub = coordinator_pb2_grpc.CoordinatorServiceStub(channel)
        cluster.leader()
        wait_for(
            "both peers to register",
            lambda: (
                len(
                    [
                        e
                        for e in members[0].cluster_info().executors
                        if e.state == common_pb2.EXECUTOR_STATE_ALIVE
                    ]
                )
                == 2
            ),
            timeout_s=20,
        )
        spec = pipeline_spec(
            name, bootstrap=bootstrap, source_topic=source, sink_topic=sink, tasks_max=2
        )
        stub.CreatePipeline(coordinator_pb2.CreatePipelineRequest(spec=spec), timeout=10)
        yield CheckpointSetup(stub=stub, peers=peers, name=name)
    finally:
        for peer in peers:
            peer.stop()
        channel.close()


def test_checkpoints_commit_and_a_new_leader_finishes_a_commit(
    cluster: CoordinatorCluster,
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
) -> None:
    """Against two scripted executor peers: checkpoints complete and commit with contiguous
    offsets and exactly the pre-committed handles; the leader dies between COMPLETE and
    the commit acks and the new leader finishes the commit."""
    with checkpoint_setup(cluster, kafka_broker, new_topic, replicas=2) as setup:
        stub, peers, name = setup.stub, setup.peers, setup.name
        # 1. Checkpoints complete and commit; each starts where the previous ended.
        wait_committed(setup, "five committed checkpoints", after=4, timeout_s=30)
        done = [
            c
            for c in checkpoints(stub, name).values()
            if c.state == common_pb2.CHECKPOINT_STATE_COMMITTED
        ]
        assert all(c.total_duration_ms >= c.precommit_duration_ms >= 0 for c in done)
        totals = sorted(c.total_duration_ms for c in done)
        print(
            f"\ntrigger->COMMITTED with scripted peers (2 tasks, {cluster.db_url.split(':')[0]}): "
            f"p50 {totals[len(totals) // 2]} ms, max {totals[-1]} ms over {len(totals)}"
        )
        owners = {p.executor_id: p for p in peers}
        status = stub.GetPipelineStatus(
            coordinator_pb2.GetPipelineStatusRequest(name=name), timeout=5
        )
        assert {t.executor_id for t in status.tasks} == {"e1", "e2"}, "tasks spread over both"
        for peer in owners.values():
            with peer.lock:
                triggers = {t.checkpoint_id: t for t in peer.log.triggers}
                acked = {c.checkpoint_id: c for c in peer.log.acked_commits}
                reported = dict(peer.log.reported)
            assert 1 in acked and 2 in acked
            # Commits carry exactly the handles that were pre-committed.
            for checkpoint_id in (1, 2):
                sent = [h for k, hs in reported.items() if k[1] == checkpoint_id for h in hs]
                got = acked[checkpoint_id].handles
                assert sorted(h.kafka.transactional_id for h in got) == sorted(
                    h.kafka.transactional_id for h in sent
                )
            first = {
                (o.topic, o.partition): o.offset for t in triggers[1].tasks for o in t.start_offsets
            }
            second = {
                (o.topic, o.partition): o.offset for t in triggers[2].tasks for o in t.start_offsets
            }
            assert first == {}, "checkpoint 1 starts from starting_offsets"
            assert second and all(v == 5 for v in second.values()), second

        # 3. The leader dies between COMPLETE and the commit acks; the new leader commits.
        # From here on every commit call is refused (the log and the switch under the peer's
        # lock, as its handler reads them). Commits go oldest first, so the checkpoint that
        # stays COMPLETE is the oldest COMPLETE one: the newest checkpoint at the switch, if
        # its commit came after it, or a later one.
        refused_from: dict[str, int] = {}
        for peer in peers:
            with peer.lock:
                refused_from[peer.executor_id] = len(peer.log.commits)
                peer.script.commit = "unavailable"

        def refused_commit() -> common_pb2.Checkpoint | None:
            oldest = first_in_state(stub, name, common_pb2.CHECKPOINT_STATE_COMPLETE)
            tried = set()
            for peer in peers:
                with peer.lock:
                    refused = peer.log.commits[refused_from[peer.executor_id] :]
                    tried |= {c.checkpoint_id for c in refused}
            return oldest if oldest is not None and oldest.checkpoint_id in tried else None

        stuck = wait_for(
            "the leader to try committing a COMPLETE checkpoint, refused",
            refused_commit,
            timeout_s=30,
        )
        leader = cluster.leader()
        old_epoch = leader.cluster_info().leader_epoch.epoch
        leader.process.send_signal(signal.SIGKILL)
        leader.process.wait(timeout=10)
        for peer in peers:
            peer.script.commit = "ack"
        committed = wait_for(
            "the new leader to commit the COMPLETE checkpoint",
            lambda: (
                lambda c: c if c and c.state == common_pb2.CHECKPOINT_STATE_COMMITTED else None
            )(checkpoints(stub, name).get(stuck.checkpoint_id)),
            timeout_s=20,
        )
        assert committed.commit_time.ToMilliseconds() > 0
        acks = [
            c for p in peers for c in p.log.acked_commits if c.checkpoint_id == stuck.checkpoint_id
        ]
        # One peer may have acked N for the old leader before the switch to `unavailable`
        # reached it (the other refused, so N stayed COMPLETE), or after the switch back (a
        # call sent just before the SIGKILL): the new leader's commit must be acked.
        assert any(c.leader_epoch.epoch > old_epoch for c in acks), acks
        print(
            f"\ncheckpoint {stuck.checkpoint_id} COMPLETE under epoch {old_epoch}, committed by "
            f"epoch {acks[0].leader_epoch.epoch} ({acks[0].leader_epoch.leader_id})"
        )


@pytest.mark.parametrize("call", ["trigger", "commit"])
def test_a_checkpoints_executors_are_called_at_once(
    cluster: CoordinatorCluster,
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
    call: str,
) -> None:
    """The leader sends a checkpoint's triggers, and its commits, to all its executors at
    once, not one after the other: while e1 holds its call unanswered, e2 already has the
    same checkpoint's (sent one at a time, e2's would wait for e1's answer, and after e1's
    deadline never come)."""
    with checkpoint_setup(cluster, kafka_broker, new_topic, replicas=1) as setup:
        e1, e2 = setup.peers

        def calls(peer: ScriptedExecutor) -> list[int]:
            with peer.lock:
                log = peer.log.triggers if call == "trigger" else peer.log.commits
                return [c.checkpoint_id for c in log]

        wait_committed(setup, "a first committed checkpoint", timeout_s=30)
        with e1.lock:
            setattr(e1.script, call, "hold")
            seen = len(e1.log.triggers if call == "trigger" else e1.log.commits)
        held = wait_for(
            f"e1 to hold a {call}",
            lambda: calls(e1)[seen] if len(calls(e1)) > seen else None,
            timeout_s=20,
        )
        wait_for(
            f"e2 to receive checkpoint {held}'s {call} while e1 holds its own",
            lambda: held in calls(e2),
            timeout_s=20,
        )
        assert not e1.release_held.is_set()
        with e1.lock:
            e1.script.trigger, e1.script.commit = "answer", "ack"
        e1.release_held.set()
        wait_committed(
            setup, "a checkpoint committed after e1 answers again", after=held, timeout_s=30
        )


def test_an_executor_without_batched_triggers_is_sent_one_trigger_per_pipeline(
    cluster: CoordinatorCluster,
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
) -> None:
    """An executor that answers TriggerCheckpoints UNIMPLEMENTED (another language's, or
    an older one) is asked once, then sent TriggerCheckpoint per pipeline; its checkpoints
    commit like the batching executor's."""
    with checkpoint_setup(
        cluster, kafka_broker, new_topic, replicas=1, unbatched=frozenset({"e1"})
    ) as setup:
        e1, e2 = setup.peers
        wait_committed(setup, "three committed checkpoints", after=2, timeout_s=30)
        with e1.lock, e2.lock:
            e1_rpcs, e2_rpcs = list(e1.log.trigger_rpcs), list(e2.log.trigger_rpcs)
            e1_triggered = sorted({t.checkpoint_id for t in e1.log.triggers})
    assert e1_rpcs[0] == "TriggerCheckpoints" and e1_rpcs.count("TriggerCheckpoints") == 1
    assert set(e1_rpcs[1:]) == {"TriggerCheckpoint"}
    assert e1_triggered[:3] == [1, 2, 3], "the refused first trigger was sent again, singly"
    assert set(e2_rpcs) == {"TriggerCheckpoints"}


def _abort_one_by_script(setup: CheckpointSetup, *, precommit: str) -> common_pb2.Checkpoint:
    """Once a checkpoint committed, script e2's pre-commits as `precommit` (`silent` or
    `fail`); return the first checkpoint that aborts then, after the leader asked the
    executors to abort its transactions."""
    stub, peers, name = setup.stub, setup.peers, setup.name
    wait_committed(setup, "a first committed checkpoint", timeout_s=30)
    peers[1].script.precommit = precommit
    after = max(checkpoints(stub, name))
    aborted = wait_for(
        f"a checkpoint to abort with a {precommit} task",
        lambda: first_in_state(stub, name, common_pb2.CHECKPOINT_STATE_ABORTED, after=after),
        timeout_s=20,
    )
    wait_for(
        "the aborted checkpoint's transactions to be aborted",
        lambda: any(a.checkpoint_id == aborted.checkpoint_id for p in peers for a in p.log.aborts),
        timeout_s=20,
    )
    return aborted


def test_a_silent_task_times_the_checkpoint_out(
    cluster: CoordinatorCluster,
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
) -> None:
    """A task that never reports: its checkpoint aborts at the timeout (1.5 s here) and the
    leader aborts the checkpoint's transactions on the executors."""
    with checkpoint_setup(cluster, kafka_broker, new_topic, replicas=1) as setup:
        aborted = _abort_one_by_script(setup, precommit="silent")
        assert "timed out" in aborted.abort_reason


@pytest.mark.serial  # a time bound is the assertion
def test_dead_executor_tasks_move_after_the_delay_and_zombie_reports_are_refused(
    cluster: CoordinatorCluster,
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
) -> None:
    """An executor vanishes: its task moves to the other one after the session timeout
    (3 s) plus the reassignment delay (0.5 s); a late report from it is refused with
    FAILED_PRECONDITION and a FencingFailure naming the stale task generation."""
    with checkpoint_setup(cluster, kafka_broker, new_topic, replicas=1) as setup:
        stub, peers, name = setup.stub, setup.peers, setup.name
        wait_committed(setup, "a first committed checkpoint", timeout_s=30)
        zombie = peers[1]
        with zombie.lock:
            (old_task,) = zombie.assignments.values()
            old_generation = zombie.generation
        vanished_at = time.monotonic()
        zombie.stop()

        def all_on_e1() -> common_pb2.Task | None:
            status = stub.GetPipelineStatus(
                coordinator_pb2.GetPipelineStatusRequest(name=name), timeout=5
            )
            moved = [t for t in status.tasks if t.task_id == old_task.task_id]
            if all(t.executor_id == "e1" for t in status.tasks) and moved:
                return moved[0]
            return None

        moved = wait_for("the dead executor's task to move", all_on_e1, timeout_s=15)
        moved_after_s = time.monotonic() - vanished_at
        print(f"\ntask {moved.task_id.task_index} moved to e1 after {moved_after_s:.2f} s")
        assert 3.0 <= moved_after_s < 3.0 + 0.5 + 3.0
        assert moved.task_generation > old_task.task_generation

        late = coordinator_pb2.ReportTaskFailureRequest(
            task_id=old_task.task_id,
            task_generation=old_task.task_generation,
            executor_id="e2",
            executor_generation=old_generation,
            error=common_pb2.TaskError(message="late report from a zombie"),
        )
        err = rpc_error(lambda: stub.ReportTaskFailure(late, timeout=5))
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
        status = rpc_status.from_call(err)
        assert status is not None
        failure = common_pb2.FencingFailure()
        assert any(d.Unpack(failure) for d in status.details)
        assert failure.token == common_pb2.FENCING_TOKEN_TASK_GENERATION
        assert failure.presented == old_task.task_generation
        assert failure.current == moved.task_generation


def test_a_failed_precommit_aborts_its_checkpoint_and_the_next_ones_commit(
    sqlite_cluster: CoordinatorCluster,
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
) -> None:
    """A task that reports its pre-commit failed (ReportCheckpointFailure): the leader aborts
    the checkpoint with the task's reason, without waiting for the timeout, asks the
    executors to abort its transactions, and later checkpoints commit again."""
    with checkpoint_setup(sqlite_cluster, kafka_broker, new_topic, replicas=1) as setup:
        aborted = _abort_one_by_script(setup, precommit="fail")
        assert "failed to pre-commit" in aborted.abort_reason, aborted.abort_reason
        assert "scripted failure" in aborted.abort_reason, aborted.abort_reason
        assert "timed out" not in aborted.abort_reason
        setup.peers[1].script.precommit = "report"
        wait_committed(
            setup, "commits to resume after the failure", after=aborted.checkpoint_id, timeout_s=20
        )


def test_checkpoints_complete_again_after_an_abort(
    sqlite_cluster: CoordinatorCluster,
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
) -> None:
    """After a timed-out checkpoint, the next ones complete and commit again."""
    with checkpoint_setup(sqlite_cluster, kafka_broker, new_topic, replicas=1) as setup:
        stub, peers, name = setup.stub, setup.peers, setup.name
        peers[1].script.precommit = "silent"
        aborted = wait_for(
            "a checkpoint to time out",
            lambda: first_in_state(stub, name, common_pb2.CHECKPOINT_STATE_ABORTED),
            timeout_s=20,
        )
        peers[1].script.precommit = "report"
        wait_committed(
            setup, "commits to resume after the abort", after=aborted.checkpoint_id, timeout_s=8
        )


# ---------------------------------------------------------------------------------------
# The CLI against a live coordinator
# ---------------------------------------------------------------------------------------


def test_cli_cluster_status_and_pipeline_commands(
    sqlite_cluster: CoordinatorCluster,
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    """`lockgate cluster status` and `lockgate pipeline create -f/list/status/...` print
    readable tables or JSON, and a bad file or request exits non-zero naming the field."""
    import json

    import typer
    from typer.testing import CliRunner

    from lockgate.client.coordinator_cli import cluster_app, pipeline_app

    app = typer.Typer()
    app.add_typer(cluster_app, name="cluster")
    app.add_typer(pipeline_app, name="pipeline")
    runner = CliRunner()
    members = sqlite_cluster.start(2)
    leader = sqlite_cluster.leader()
    follower = next(m for m in members if m is not leader)
    env = {"LOCKGATE_COORDINATOR": follower.address}  # the CLI follows to the leader

    status = runner.invoke(app, ["cluster", "status"], env=env)
    assert status.exit_code == 0, status.output
    assert f"leader {leader.coordinator_id}" in status.output

    name = unique_name("cli")
    source, sink = new_topic(partitions=2), new_topic()
    spec_file = tmp_path / "pipeline.yaml"
    spec_file.write_text(
        f"name: {name}\n"
        f"source: {{kafka: {{bootstrap_servers: '{kafka_broker.bootstrap_servers}', "
        f"topics: [{source}], starting_offsets: earliest}}}}\n"
        f"sink: {{kafka: {{bootstrap_servers: '{kafka_broker.bootstrap_servers}', "
        f"topic: {sink}}}}}\n"
        "delivery: exactly_once\ntasks_max: 2\n"
    )
    created = runner.invoke(app, ["pipeline", "create", "-f", str(spec_file)], env=env)
    assert created.exit_code == 0, created.output
    assert f"created pipeline {name}" in created.output

    listed = runner.invoke(app, ["pipeline", "list", "--json"], env=env)
    assert listed.exit_code == 0, listed.output
    assert name in [p["name"] for p in json.loads(listed.output)["pipelines"]]
    shown = runner.invoke(app, ["pipeline", "status", name], env=env)
    assert shown.exit_code == 0, shown.output
    assert "config version 1" in shown.output and shown.output.count("UNASSIGNED") == 2
    for verb in ("pause", "resume", "stop"):
        result = runner.invoke(app, ["pipeline", verb, name], env=env)
        assert result.exit_code == 0, result.output
    reset = runner.invoke(app, ["pipeline", "offsets", name, "--set", f"{source}:1=3"], env=env)
    assert reset.exit_code == 0, reset.output
    assert "3" in reset.output
    history = runner.invoke(app, ["pipeline", "checkpoints", name, "--json"], env=env)
    assert history.exit_code == 0, history.output

    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nsink: {s3: {bucket: b}}\n")
    refused = runner.invoke(app, ["pipeline", "create", "-f", str(bad)], env=env)
    assert refused.exit_code == 2
    assert "sink.s3" in refused.output
    negative = tmp_path / "negative.yaml"
    negative.write_text(
        spec_file.read_text().replace(name, unique_name("neg")) + "checkpoint: {interval_ms: -1}\n"
    )
    refused = runner.invoke(app, ["pipeline", "create", "-f", str(negative)], env=env)
    assert refused.exit_code == 2
    assert "checkpoint.interval_ms" in refused.output
    missing = runner.invoke(app, ["pipeline", "get", "nope"], env=env)
    assert missing.exit_code == 1
    assert "NOT_FOUND" in missing.output
    deleted = runner.invoke(app, ["pipeline", "delete", name], env=env)
    assert deleted.exit_code == 0, deleted.output
