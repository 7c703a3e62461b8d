"""Task lifecycle across the coordinator and its executors: a config update reaches running
tasks, and RestartTask brings one task back with a new generation.

A real coordinator process; the update test runs real executor processes with
`--data-plane none` (they check a trigger's config version against their assignment), the
restart test scripted peers (`test_service_coordinator.ScriptedExecutor`).
"""

from __future__ import annotations

from collections.abc import Callable

import grpc
from google.protobuf import field_mask_pb2
from grpc_status import rpc_status

from lockgate.common.grpc_client import open_channel
from lockgate.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from tests.fixtures.kafka import KafkaBroker
from tests.integration.coordinator.test_service_coordinator import (
    CoordinatorCluster,
    checkpoint_setup,
    checkpoints,
    first_in_state,
    pipeline_spec,
    rpc_error,
    unique_name,
    wait_committed,
)
from tests.support.processes import ChildProcess
from tests.support.waits import wait_for


def _tasks(stub: coordinator_pb2_grpc.CoordinatorServiceStub, name: str) -> list[common_pb2.Task]:
    return list(
        stub.GetPipelineStatus(coordinator_pb2.GetPipelineStatusRequest(name=name), timeout=5).tasks
    )


def test_an_update_reaches_running_tasks_and_checkpoints_commit_on_the_new_config(
    sqlite_cluster: CoordinatorCluster,
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
    control_executors: Callable[[str, list[str]], ChildProcess],
) -> None:
    """A RUNNING pipeline updated right after its tasks started (no re-split: only the
    checkpoint interval changes) restarts them on config version 2 with new generations,
    and its checkpoints commit again, instead of every trigger being refused NOT_READY
    ("runs config version 1, the trigger is for 2") and aborting in a loop."""
    (coordinator,) = sqlite_cluster.start(1)
    sqlite_cluster.leader()
    executor = control_executors("e1", [coordinator.address])
    name = unique_name("update")
    source, sink = new_topic(partitions=2), new_topic()
    with open_channel(coordinator.address) as channel:
        stub = coordinator_pb2_grpc.CoordinatorServiceStub(channel)
        stub.CreatePipeline(
            coordinator_pb2.CreatePipelineRequest(
                spec=pipeline_spec(
                    name,
                    bootstrap=kafka_broker.bootstrap_servers,
                    source_topic=source,
                    sink_topic=sink,
                    tasks_max=2,
                    timeout_ms=3_000,
                )
            ),
            timeout=10,
        )
        before = wait_for(
            "both tasks RUNNING on e1",
            lambda: (
                tasks
                if len(tasks := _tasks(stub, name)) == 2
                and all(t.state == common_pb2.TASK_STATE_RUNNING for t in tasks)
                else None
            ),
            timeout_s=60,
            abort_if=executor.died,
        )
        updated = stub.UpdatePipeline(
            coordinator_pb2.UpdatePipelineRequest(
                name=name,
                spec=common_pb2.PipelineSpec(
                    checkpoint=common_pb2.CheckpointSpec(interval_ms=200, timeout_ms=3_000)
                ),
                update_mask=field_mask_pb2.FieldMask(paths=["checkpoint.interval_ms"]),
            ),
            timeout=10,
        )
        assert updated.pipeline.config_version == 2
        after_update = max(checkpoints(stub, name), default=0)
        committed = wait_for(
            "a checkpoint triggered after the update to commit",
            lambda: first_in_state(
                stub, name, common_pb2.CHECKPOINT_STATE_COMMITTED, after=after_update
            ),
            timeout_s=30,
            abort_if=executor.died,
        )
        stale = [
            c
            for i, c in checkpoints(stub, name).items()
            if i > after_update and "config version" in c.abort_reason
        ]
        assert not stale, [c.abort_reason for c in stale]
        now = {t.task_id.task_index: t for t in _tasks(stub, name)}
        for task in before:
            assert now[task.task_id.task_index].task_generation > task.task_generation
            assert now[task.task_id.task_index].config_version == 2
        print(f"\ncheckpoint {committed.checkpoint_id} committed on config version 2")


def test_restart_task_brings_a_failed_task_back_with_a_new_generation(
    sqlite_cluster: CoordinatorCluster,
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
) -> None:
    """A FAILED task restarted with RestartTask: the answer shows it RESTARTING at
    generation + 1 with its error cleared; its executor runs it again (RUNNING at the new
    generation, checkpoints commit again), and a report from the old generation is refused
    with a FencingFailure. Unknown tasks are NOT_FOUND; a STOPPED pipeline is
    FAILED_PRECONDITION naming the fix."""
    with checkpoint_setup(sqlite_cluster, kafka_broker, new_topic, replicas=1) as setup:
        stub, peers, name = setup.stub, setup.peers, setup.name
        wait_committed(setup, "a first committed checkpoint", timeout_s=30)
        peer = peers[0]
        with peer.lock:
            (assignment,) = peer.assignments.values()
            executor_generation = peer.generation
        old = assignment.task_generation

        def report_failure(message: str) -> coordinator_pb2.ReportTaskFailureResponse:
            """The peer reports the task failed, at the generation it was assigned first."""
            response: coordinator_pb2.ReportTaskFailureResponse = stub.ReportTaskFailure(
                coordinator_pb2.ReportTaskFailureRequest(
                    task_id=assignment.task_id,
                    task_generation=old,
                    executor_id=peer.executor_id,
                    executor_generation=executor_generation,
                    error=common_pb2.TaskError(message=message),
                ),
                timeout=5,
            )
            return response

        report_failure("scripted task failure")
        failed = next(
            t for t in _tasks(stub, name) if t.task_id.task_index == assignment.task_id.task_index
        )
        assert failed.state == common_pb2.TASK_STATE_FAILED
        assert "scripted task failure" in failed.last_error.message

        restarted = stub.RestartTask(
            coordinator_pb2.RestartTaskRequest(task_id=assignment.task_id), timeout=10
        ).task
        assert restarted.task_generation == old + 1
        assert restarted.state == common_pb2.TASK_STATE_RESTARTING
        assert not restarted.last_error.message

        def running_again() -> common_pb2.Task | None:
            task = next(
                t
                for t in _tasks(stub, name)
                if t.task_id.task_index == assignment.task_id.task_index
            )
            ok = task.state == common_pb2.TASK_STATE_RUNNING and task.task_generation == old + 1
            return task if ok else None

        wait_for("the restarted task to run at the new generation", running_again, timeout_s=15)
        after = max(checkpoints(stub, name))
        wait_committed(setup, "checkpoints to commit again", after=after, timeout_s=20)

        # The old generation is fenced.
        err = rpc_error(lambda: report_failure("late report of the old generation"))
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, err
        status = rpc_status.from_call(err)
        assert status is not None
        failure = common_pb2.FencingFailure()
        assert any(d.Unpack(failure) for d in status.details)
        assert failure.token == common_pb2.FENCING_TOKEN_TASK_GENERATION
        assert (failure.presented, failure.current) == (old, old + 1)

        unknown = common_pb2.TaskId(pipeline_name=name, task_index=7)
        err = rpc_error(
            lambda: stub.RestartTask(coordinator_pb2.RestartTaskRequest(task_id=unknown), timeout=5)
        )
        assert err.code() == grpc.StatusCode.NOT_FOUND, err

        stub.StopPipeline(coordinator_pb2.StopPipelineRequest(name=name), timeout=10)
        err = rpc_error(
            lambda: stub.RestartTask(
                coordinator_pb2.RestartTaskRequest(task_id=assignment.task_id), timeout=5
            )
        )
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, err
        assert "resume" in (err.details() or "")
