"""SIGTERM ends an executor whose batch is stuck, within ``--shutdown-timeout-s``.

A real executor process with its SparkSession runs a checkpoint whose Python transform
never returns, against a scripted coordinator and a real broker. On SIGTERM it cancels its
Spark jobs and exits 0 within the bound, its JVM and Python workers gone; a batch no
cancellation reaches makes it kill its children and exit 124 within the bound instead of
lingering (issue 16: an executor blocked in py4j outlived SIGTERM by minutes).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from confluent_kafka import Producer

from lockgate.executor.shutdown import DEFAULT_SHUTDOWN_TIMEOUT_S, EXIT_SHUTDOWN_TIMEOUT
from lockgate.localcluster.commands import executor_command
from lockgate.v1 import common_pb2, executor_pb2
from tests.fixtures.kafka import KafkaBroker
from tests.integration.executor_service import stuck_transforms
from tests.integration.executor_service.scripted import (
    CoordinatorServer,
    ExecutorProcess,
    assignment,
    trigger_request,
)
from tests.support.processes import descendants, pid_alive
from tests.support.waits import wait_for

pytestmark = pytest.mark.spark

REPO_ROOT = Path(__file__).resolve().parents[3]
#: Slack for the signal to be seen and the exit to be reaped, on a busy machine.
EXIT_SLACK_S = 1.0


@pytest.fixture
def stuck_executor(
    tmp_path: Path,
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
    coordinator: CoordinatorServer,
    launch_executor: Callable[..., ExecutorProcess],
) -> Callable[..., ExecutorProcess]:
    """``stuck_executor(transform, extra_args=())``: an executor with its SparkSession whose
    checkpoint 1 is stuck in ``stuck_transforms.<transform>``."""

    def launch(transform: str, extra_args: Sequence[str] = ()) -> ExecutorProcess:
        return _stuck_executor(
            transform=transform,
            marker=tmp_path / f"stuck-in-{transform}",
            kafka_broker=kafka_broker,
            new_topic=new_topic,
            coordinator=coordinator,
            launch_executor=launch_executor,
            extra_args=extra_args,
        )

    return launch


def _stuck_executor(
    *,
    transform: str,
    marker: Path,
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
    coordinator: CoordinatorServer,
    launch_executor: Callable[..., ExecutorProcess],
    extra_args: Sequence[str] = (),
) -> ExecutorProcess:
    """An executor whose checkpoint 1 is stuck in ``transform`` (it created ``marker``)."""
    bootstrap = kafka_broker.bootstrap_servers
    source, sink = new_topic(prefix="in"), new_topic(prefix="out")
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(source, key=b"k", value=str(marker).encode(), partition=0)
    assert producer.flush(30) == 0
    script = coordinator.coordinator
    script.set_assignments(
        [
            assignment(
                pipeline="stuck",
                task_index=0,
                generation=1,
                source_topic=source,
                sink_topic=sink,
                bootstrap_servers=bootstrap,
                python=f"{stuck_transforms.__name__}:{transform}",
            )
        ]
    )
    executor = launch_executor(
        "e1",
        data_plane="spark",
        registered_timeout_s=240,
        extra_args=["--allow-transform-module", stuck_transforms.__name__, *extra_args],
        env={"PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])},
    )

    def running() -> bool:
        status = script.last_status("stuck", 0)
        return status is not None and status.state == common_pb2.TASK_STATE_RUNNING

    wait_for("task RUNNING", running, timeout_s=30, abort_if=executor.died)
    response = executor.stub.TriggerCheckpoint(
        trigger_request(
            executor,
            script,
            pipeline="stuck",
            checkpoint_id=1,
            tasks=[(0, 1)],
            start_offsets=[common_pb2.PartitionOffset(topic=source, partition=0, offset=0)],
        ),
        timeout=10,
    )
    assert [r.outcome for r in response.results] == [executor_pb2.TRIGGER_OUTCOME_ACCEPTED]
    wait_for(
        f"the batch to be stuck in {transform}",
        marker.exists,
        timeout_s=180,
        abort_if=lambda: executor.died() or _failure(script.checkpoint_failures),
    )
    return executor


#: How long a SIGKILLed child may take to disappear after the executor exited.
CHILD_EXIT_SLACK_S = 5.0


def _failure(failures: Sequence[object]) -> str | None:
    return f"the checkpoint failed instead of sticking: {failures}" if failures else None


def _terminate(executor: ExecutorProcess, bound_s: float) -> tuple[int, float, list[int]]:
    """SIGTERM the executor; its exit status, the seconds it took, and the processes below
    it that outlived it (a child SIGKILLed just before the executor exited gets a moment to
    finish dying: a large JVM's teardown is not instant)."""
    children = descendants(executor.pid)
    assert children, "the executor has no Spark JVM: the test proves nothing"
    sent = time.monotonic()
    executor.process.send_signal(signal.SIGTERM)
    code = executor.wait_exit(timeout_s=bound_s + 60)
    took = time.monotonic() - sent
    gone_by = time.monotonic() + CHILD_EXIT_SLACK_S
    while (left := [pid for pid in children if pid_alive(pid)]) and time.monotonic() < gone_by:
        time.sleep(0.05)  # polling the condition until its deadline
    return code, took, left


@pytest.mark.serial  # a time bound is the assertion
def test_sigterm_cancels_a_batch_stuck_in_spark_and_exits_0_within_the_bound(
    stuck_executor: Callable[..., ExecutorProcess], coordinator: CoordinatorServer
) -> None:
    executor = stuck_executor("stall_in_spark")

    code, took, left = _terminate(executor, DEFAULT_SHUTDOWN_TIMEOUT_S)

    assert code == 0, executor.log_text()[-3000:]
    assert took < DEFAULT_SHUTDOWN_TIMEOUT_S + EXIT_SLACK_S, f"exited after {took:.1f} s"
    assert not left, f"processes the executor started outlived it: {left}"
    assert coordinator.coordinator.deregistrations, "the executor did not deregister"
    assert coordinator.coordinator.precommits == [], "a cancelled batch reported a pre-commit"


@pytest.mark.serial  # a time bound is the assertion
def test_a_batch_no_cancellation_reaches_ends_within_the_bound_with_children_killed(
    stuck_executor: Callable[..., ExecutorProcess],
) -> None:
    bound_s = 4.0
    executor = stuck_executor("stall_in_driver", ["--shutdown-timeout-s", str(bound_s)])

    code, took, left = _terminate(executor, bound_s)

    assert code == EXIT_SHUTDOWN_TIMEOUT, executor.log_text()[-3000:]
    assert took < bound_s + EXIT_SLACK_S, f"exited after {took:.1f} s"
    assert not left, f"processes the executor started outlived it: {left}"
    assert "did not end when its Spark jobs were cancelled" in executor.log_text()


@pytest.mark.parametrize("bound", ["0", "-1", "nan", "inf"])
def test_a_bound_that_is_not_a_positive_number_is_refused_naming_the_flag(bound: str) -> None:
    refused = subprocess.run(
        executor_command(
            executor_id="e1",
            listen="127.0.0.1:0",
            coordinators=["127.0.0.1:1"],
            extra=["--shutdown-timeout-s", bound],
        ),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == 2, refused.stderr
    assert "--shutdown-timeout-s" in refused.stderr
    assert "finite number of seconds > 0" in refused.stderr
