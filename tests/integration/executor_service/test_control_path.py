"""The executor process against a scripted coordinator: membership, fencing, failpoints.

These run the executor with ``--data-plane none`` (empty pre-commits, no Spark): they
prove the control path, not the data path (see test_kafka_commit.py and test_end_to_end.py).
"""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest

from lockgate.common.failpoints import FAILPOINT_EXIT_CODE
from lockgate.common.grpc_client import fencing_failure_of
from lockgate.v1 import common_pb2, executor_pb2
from tests.integration.executor_service.scripted import (
    CoordinatorServer,
    ExecutorProcess,
    ScriptedCoordinator,
    assignment,
    trigger_request,
)
from tests.support.waits import wait_for


def _running(coordinator: CoordinatorServer, pipeline: str, index: int, generation: int) -> bool:
    status = coordinator.coordinator.last_status(pipeline, index)
    return (
        status is not None
        and status.task_generation == generation
        and status.state == common_pb2.TASK_STATE_RUNNING
    )


def _empty_commit(
    executor: ExecutorProcess, epoch: common_pb2.LeaderEpoch
) -> executor_pb2.CommitCheckpointResponse:
    """CommitCheckpoint of checkpoint p/1 with no handle, for registration e1/1 at `epoch`."""
    response: executor_pb2.CommitCheckpointResponse = executor.stub.CommitCheckpoint(
        executor_pb2.CommitCheckpointRequest(
            leader_epoch=epoch,
            executor_id="e1",
            executor_generation=1,
            pipeline_name="p",
            checkpoint_id=1,
        ),
        timeout=5,
    )
    return response


def _logged(executor: ExecutorProcess, line: str) -> Callable[[], bool]:
    return lambda: line in executor.log_text()


def _trigger_of_another_registration(
    executor: ExecutorProcess,
    script: ScriptedCoordinator,
    *,
    checkpoint_id: int,
    task_generation: int,
    executor_generation: int,
) -> grpc.RpcError:
    """Trigger task p/0 as if the executor were still (or already) ``executor_generation``:
    the call is refused as a whole with FAILED_PRECONDITION; the error."""
    with pytest.raises(grpc.RpcError) as refused:
        executor.stub.TriggerCheckpoint(
            trigger_request(
                executor,
                script,
                pipeline="p",
                checkpoint_id=checkpoint_id,
                tasks=[(0, task_generation)],
                executor_generation=executor_generation,
            ),
            timeout=5,
        )
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    return refused.value


def test_registers_heartbeats_takes_and_drops_tasks_and_deregisters(
    coordinator: CoordinatorServer, launch_executor: Callable[..., ExecutorProcess]
) -> None:
    script = coordinator.coordinator
    executor = launch_executor("e1")
    registration = script.registrations[0]
    assert registration.executor_id == "e1"
    assert registration.address == executor.address
    assert registration.spark_master == "local[2]"

    wait_for("three heartbeats", lambda: len(script.heartbeats) >= 3, timeout_s=20)
    assert {h.executor_id for h in script.heartbeats} == {"e1"}
    assert {h.executor_generation for h in script.heartbeats} == {1}
    assert script.heartbeats[-1].highest_leader_epoch_seen.epoch == 1

    status = executor.stub.GetExecutorStatus(executor_pb2.GetExecutorStatusRequest(), timeout=5)
    assert (status.executor_id, status.executor_generation) == ("e1", 1)
    assert status.highest_leader_epoch_seen.epoch == 1
    assert status.session_id == "session-1"

    script.set_assignments([assignment(pipeline="copy", task_index=0, generation=1)])
    wait_for("task RUNNING", lambda: _running(coordinator, "copy", 0, 1), timeout_s=20)
    script.set_assignments([])
    wait_for(
        "task dropped",
        lambda: (
            script.last_status("copy", 0) is None and len(script.heartbeats[-1].task_statuses) == 0
        ),
        timeout_s=20,
    )

    assert executor.stop() == 0
    assert [(d.executor_id, d.executor_generation) for d in script.deregistrations] == [("e1", 1)]


def test_refuses_calls_with_a_lower_leader_epoch_and_logs_them(
    coordinator: CoordinatorServer, launch_executor: Callable[..., ExecutorProcess]
) -> None:
    script = coordinator.coordinator
    script.leader_epoch = 4
    executor = launch_executor("e1")

    for rpc, call in (
        (
            "TriggerCheckpoint",
            lambda: executor.stub.TriggerCheckpoint(
                trigger_request(
                    executor, script, pipeline="p", checkpoint_id=1, tasks=[(0, 1)], leader_epoch=3
                ),
                timeout=5,
            ),
        ),
        (
            "CommitCheckpoint",
            lambda: executor.stub.CommitCheckpoint(
                executor_pb2.CommitCheckpointRequest(
                    leader_epoch=common_pb2.LeaderEpoch(epoch=3, leader_id="c0"),
                    executor_id="e1",
                    executor_generation=1,
                    pipeline_name="p",
                    checkpoint_id=1,
                ),
                timeout=5,
            ),
        ),
    ):
        with pytest.raises(grpc.RpcError) as refused:
            call()
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION, rpc
        failure = fencing_failure_of(refused.value)
        assert failure is not None
        assert failure.token == common_pb2.FENCING_TOKEN_LEADER_EPOCH
        assert (failure.presented, failure.current) == (3, 4)
        line = f"refused leader_epoch=3 highest_seen=4 rpc={rpc}"
        wait_for(f"log {line!r}", _logged(executor, line), timeout_s=5)

    # A newer leader (epoch 5) shows up with a control call: from then on the epoch-4
    # leader is the zombie.
    _empty_commit(executor, common_pb2.LeaderEpoch(epoch=5, leader_id="c2"))
    status = executor.stub.GetExecutorStatus(executor_pb2.GetExecutorStatusRequest(), timeout=5)
    assert status.highest_leader_epoch_seen.epoch == 5
    with pytest.raises(grpc.RpcError) as refused:
        executor.stub.AbortCheckpoint(
            executor_pb2.AbortCheckpointRequest(
                leader_epoch=script.epoch(),
                executor_id="e1",
                executor_generation=1,
                pipeline_name="p",
                checkpoint_id=1,
            ),
            timeout=5,
        )
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    # The old leader's heartbeat answers are refused too, and the executor tells it so.
    wait_for(
        "heartbeat response refused",
        lambda: (
            "refused leader_epoch=4 highest_seen=5 rpc=HeartbeatResponse" in executor.log_text()
        ),
        timeout_s=10,
    )
    wait_for(
        "heartbeat carrying epoch 5",
        lambda: script.heartbeats[-1].highest_leader_epoch_seen.epoch == 5,
        timeout_s=10,
    )


def test_stale_task_and_executor_generations_are_refused(
    coordinator: CoordinatorServer, launch_executor: Callable[..., ExecutorProcess]
) -> None:
    script = coordinator.coordinator
    script.executor_generation = 7
    script.set_assignments([assignment(pipeline="p", task_index=0, generation=2)])
    executor = launch_executor("e1")
    wait_for("task RUNNING", lambda: _running(coordinator, "p", 0, 2), timeout_s=20)
    offsets = [common_pb2.PartitionOffset(topic="input", partition=0, offset=5)]

    response = executor.stub.TriggerCheckpoint(
        trigger_request(
            executor,
            script,
            pipeline="p",
            checkpoint_id=1,
            tasks=[(0, 1), (3, 1), (0, 2)],
            start_offsets=offsets,
        ),
        timeout=5,
    )
    outcomes = [
        (r.task_id.task_index, r.outcome, r.current_task_generation) for r in response.results
    ]
    assert outcomes == [
        (0, executor_pb2.TRIGGER_OUTCOME_STALE_GENERATION, 2),
        (3, executor_pb2.TRIGGER_OUTCOME_NOT_ASSIGNED, 0),
        (0, executor_pb2.TRIGGER_OUTCOME_ACCEPTED, 2),
    ]
    assert "refused task_generation=1 current=2 subject=p/0 rpc=TriggerCheckpoint" in (
        executor.log_text()
    )
    wait_for("ReportPrecommit", lambda: len(script.precommits) == 1, timeout_s=20)
    report = script.precommits[0]
    assert (report.checkpoint_id, report.task_generation, report.executor_generation) == (1, 2, 7)
    assert report.leader_epoch.epoch == 1
    assert [(r.topic, r.partition, r.start_offset, r.end_offset) for r in report.source_ranges] == [
        ("input", 0, 5, 5)
    ]

    again = executor.stub.TriggerCheckpoint(
        trigger_request(executor, script, pipeline="p", checkpoint_id=1, tasks=[(0, 2)]), timeout=5
    )
    assert again.results[0].outcome == executor_pb2.TRIGGER_OUTCOME_DUPLICATE

    # A call meant for an earlier registration of e1 is refused as a whole.
    refused = _trigger_of_another_registration(
        executor, script, checkpoint_id=2, task_generation=2, executor_generation=6
    )
    failure = fencing_failure_of(refused)
    assert failure is not None
    assert failure.token == common_pb2.FENCING_TOKEN_EXECUTOR_GENERATION
    assert (failure.subject, failure.presented, failure.current) == ("e1", 6, 7)

    # The task is reassigned at generation 3: generation 2's triggers are now stale.
    script.set_assignments([assignment(pipeline="p", task_index=0, generation=3)])
    wait_for("generation 3", lambda: _running(coordinator, "p", 0, 3), timeout_s=20)
    stale = executor.stub.TriggerCheckpoint(
        trigger_request(executor, script, pipeline="p", checkpoint_id=2, tasks=[(0, 2)]), timeout=5
    )
    assert stale.results[0].outcome == executor_pb2.TRIGGER_OUTCOME_STALE_GENERATION
    assert stale.results[0].current_task_generation == 3
    assert len(script.precommits) == 1


def test_lost_session_stops_tasks_and_registers_again(
    coordinator: CoordinatorServer, launch_executor: Callable[..., ExecutorProcess]
) -> None:
    script = coordinator.coordinator
    script.set_assignments([assignment(pipeline="p", task_index=0, generation=1)])
    executor = launch_executor("e1")
    wait_for("task RUNNING", lambda: _running(coordinator, "p", 0, 1), timeout_s=20)

    # The leader expired the session: its next registration will be generation 2.
    with script.lock:
        script.executor_generation = 2
        script.expired_below_generation = 2
    wait_for("second registration", lambda: len(script.registrations) == 2, timeout_s=20)
    wait_for(
        "heartbeats of generation 2 with the task running again",
        lambda: script.heartbeats[-1].executor_generation == 2 and _running(coordinator, "p", 0, 1),
        timeout_s=20,
    )
    log = executor.log_text()
    assert "session of executor e1 lost" in log
    assert "stopped task p/0 generation 1: session lost" in log
    # Calls for the expired registration are refused.
    _trigger_of_another_registration(
        executor, script, checkpoint_id=1, task_generation=1, executor_generation=1
    )


def test_bad_requests_name_the_field(
    coordinator: CoordinatorServer, launch_executor: Callable[..., ExecutorProcess]
) -> None:
    script = coordinator.coordinator
    executor = launch_executor("e1")
    request = trigger_request(executor, script, pipeline="p", checkpoint_id=1, tasks=[(0, 1)])
    request.tasks[0].transactional_id_prefix = ""
    with pytest.raises(grpc.RpcError) as refused:
        executor.stub.TriggerCheckpoint(request, timeout=5)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "tasks[0].transactional_id_prefix" in (refused.value.details() or "")

    request = trigger_request(executor, script, pipeline="p", checkpoint_id=1, tasks=[(0, 1)])
    request.leader_epoch.epoch = 0
    with pytest.raises(grpc.RpcError) as refused:
        executor.stub.TriggerCheckpoint(request, timeout=5)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "leader_epoch.epoch" in (refused.value.details() or "")

    with pytest.raises(grpc.RpcError) as refused:
        executor.stub.CommitCheckpoint(
            executor_pb2.CommitCheckpointRequest(
                leader_epoch=script.epoch(),
                executor_id="e1",
                executor_generation=1,
                pipeline_name="p",
                checkpoint_id=1,
                handles=[
                    common_pb2.SinkHandle(
                        kafka=common_pb2.KafkaTransactionHandle(
                            transactional_id="lg-x-0", bootstrap_servers="127.0.0.1:1"
                        )
                    )
                ],
            ),
            timeout=5,
        )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "handles[0].kafka.producer_id" in (refused.value.details() or "")


def test_failpoint_after_precommit_before_report_kills_the_process_there(
    coordinator: CoordinatorServer, launch_executor: Callable[..., ExecutorProcess]
) -> None:
    script = coordinator.coordinator
    script.set_assignments([assignment(pipeline="p", task_index=0, generation=1)])
    executor = launch_executor("e1", failpoints="after_precommit_before_report")
    wait_for("task RUNNING", lambda: _running(coordinator, "p", 0, 1), timeout_s=20)

    try:
        response = executor.stub.TriggerCheckpoint(
            trigger_request(executor, script, pipeline="p", checkpoint_id=1, tasks=[(0, 1)]),
            timeout=5,
        )
        assert response.results[0].outcome == executor_pb2.TRIGGER_OUTCOME_ACCEPTED
    except grpc.RpcError as exc:
        # The empty pre-commit may reach the failpoint, and the process exit, before the
        # accepted trigger's answer left it (seen 2 runs in 10 before issue 15's split).
        assert exc.code() == grpc.StatusCode.UNAVAILABLE, exc
    assert executor.wait_exit(timeout_s=30) == FAILPOINT_EXIT_CODE
    assert "failpoint after_precommit_before_report hit (task p/0 checkpoint 1)" in (
        executor.log_text()
    )
    assert script.precommits == []
    assert script.deregistrations == []


def test_only_a_control_call_of_this_registration_raises_the_leader_epoch(
    coordinator: CoordinatorServer, launch_executor: Callable[..., ExecutorProcess]
) -> None:
    script = coordinator.coordinator
    executor = launch_executor("e1")
    forged = common_pb2.LeaderEpoch(epoch=2**63 - 1, leader_id="stranger")

    def highest() -> int:
        status = executor.stub.GetExecutorStatus(executor_pb2.GetExecutorStatusRequest(), timeout=5)
        return int(status.highest_leader_epoch_seen.epoch)

    # A read carrying a huge epoch answers, and records nothing.
    executor.stub.GetExecutorStatus(
        executor_pb2.GetExecutorStatusRequest(leader_epoch=forged), timeout=5
    )
    assert highest() == 1
    # A control call that names another registration is refused before its epoch counts.
    for generation, executor_id in ((7, "e1"), (1, "e2")):
        with pytest.raises(grpc.RpcError) as refused:
            executor.stub.AbortCheckpoint(
                executor_pb2.AbortCheckpointRequest(
                    leader_epoch=forged,
                    executor_id=executor_id,
                    executor_generation=generation,
                    pipeline_name="p",
                    checkpoint_id=1,
                ),
                timeout=5,
            )
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert highest() == 1
    # The real leader's calls and heartbeats still go through.
    _empty_commit(executor, script.epoch())
    seen = len(script.heartbeats)
    wait_for("a heartbeat answered", lambda: len(script.heartbeats) > seen + 1, timeout_s=10)
    assert "refused leader_epoch" not in executor.log_text()
    assert highest() == 1


def _batch_of(
    executor: ExecutorProcess,
    script: ScriptedCoordinator,
    triggers: list[executor_pb2.TriggerCheckpointRequest],
    *,
    executor_generation: int | None = None,
) -> executor_pb2.TriggerCheckpointsRequest:
    """A TriggerCheckpoints carrying `triggers` with their fencing fields moved to the call."""
    for trigger in triggers:
        for field in ("request_id", "leader_epoch", "executor_id", "executor_generation"):
            trigger.ClearField(field)
    return executor_pb2.TriggerCheckpointsRequest(
        request_id="batch",
        leader_epoch=script.epoch(),
        executor_id=executor.executor_id,
        executor_generation=(
            script.executor_generation if executor_generation is None else executor_generation
        ),
        triggers=triggers,
    )


def test_one_trigger_call_starts_several_pipelines_checkpoints_and_is_checked_whole(
    coordinator: CoordinatorServer, launch_executor: Callable[..., ExecutorProcess]
) -> None:
    script = coordinator.coordinator
    script.set_assignments(
        [
            assignment(pipeline="p", task_index=0, generation=1),
            assignment(pipeline="q", task_index=0, generation=1),
        ]
    )
    executor = launch_executor("e1")
    wait_for("p/0 RUNNING", lambda: _running(coordinator, "p", 0, 1), timeout_s=20)
    wait_for("q/0 RUNNING", lambda: _running(coordinator, "q", 0, 1), timeout_s=20)

    def trigger(
        pipeline: str, tasks: list[tuple[int, int]]
    ) -> executor_pb2.TriggerCheckpointRequest:
        return trigger_request(executor, script, pipeline=pipeline, checkpoint_id=1, tasks=tasks)

    # One malformed trigger refuses the call whole: nothing of p starts either.
    bad = trigger("q", [(0, 1)])
    bad.tasks[0].transactional_id_prefix = ""
    with pytest.raises(grpc.RpcError) as refused:
        executor.stub.TriggerCheckpoints(
            _batch_of(executor, script, [trigger("p", [(0, 1)]), bad]), timeout=5
        )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "triggers[1].tasks[0].transactional_id_prefix" in (refused.value.details() or "")

    # Over the limit: refused whole, naming the limit.
    with pytest.raises(grpc.RpcError) as refused:
        executor.stub.TriggerCheckpoints(
            _batch_of(executor, script, [trigger("p", [(0, 1)]) for _ in range(1025)]), timeout=5
        )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "over the limit of 1024" in (refused.value.details() or "")

    # A trigger naming another registration than its call's is refused, not fenced by nothing.
    mismatched = _batch_of(executor, script, [trigger("p", [(0, 1)])])
    mismatched.triggers[0].executor_generation = script.executor_generation + 1
    with pytest.raises(grpc.RpcError) as refused:
        executor.stub.TriggerCheckpoints(mismatched, timeout=5)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "triggers[0].executor_generation" in (refused.value.details() or "")

    # The call is fenced once, by its own registration.
    with pytest.raises(grpc.RpcError) as refused:
        executor.stub.TriggerCheckpoints(
            _batch_of(
                executor,
                script,
                [trigger("p", [(0, 1)])],
                executor_generation=script.executor_generation + 5,
            ),
            timeout=5,
        )
    failure = fencing_failure_of(refused.value)
    assert failure is not None and failure.token == common_pb2.FENCING_TOKEN_EXECUTOR_GENERATION
    assert script.precommits == []

    # Both pipelines' checkpoints start from one call; each trigger is answered in order.
    response = executor.stub.TriggerCheckpoints(
        _batch_of(executor, script, [trigger("p", [(0, 1)]), trigger("q", [(0, 1), (5, 1)])]),
        timeout=5,
    )
    assert [[(r.task_id.task_index, r.outcome) for r in t.results] for t in response.responses] == [
        [(0, executor_pb2.TRIGGER_OUTCOME_ACCEPTED)],
        [
            (0, executor_pb2.TRIGGER_OUTCOME_ACCEPTED),
            (5, executor_pb2.TRIGGER_OUTCOME_NOT_ASSIGNED),
        ],
    ]
    wait_for("both ReportPrecommits", lambda: len(script.precommits) == 2, timeout_s=20)
    reports = sorted((r.task_id.pipeline_name, r.checkpoint_id) for r in script.precommits)
    assert reports == [("p", 1), ("q", 1)]
    # Each report carries the call's leader epoch (its triggers carry none of their own).
    assert {r.leader_epoch.epoch for r in script.precommits} == {script.leader_epoch}
