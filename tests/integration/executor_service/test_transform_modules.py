"""A real executor runs `transform.python` only from the modules it allows.

An executor process with its SparkSession, started with `--allow-transform-module`, against
a scripted coordinator and a real broker, is given two pipelines: one whose transform comes
from a module outside every allowed prefix fails its task with an error naming the module
and the flag (what `pipeline status` shows), and one whose transform is a project example
(allowed on every executor, flag or not) pre-commits its batch.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from lockgate.v1 import common_pb2, executor_pb2
from tests.fixtures.kafka import KafkaBroker
from tests.integration.executor_service.scripted import (
    CoordinatorServer,
    ExecutorProcess,
    assignment,
    trigger_request,
)
from tests.support.waits import wait_for

pytestmark = pytest.mark.spark

REPO_ROOT = Path(__file__).resolve().parents[3]
REFUSED = "tests.integration.executor_dataplane.unallowed_transform"
EXAMPLE = "lockgate.executor.examples.transforms:upper_case_values"


def test_an_unallowed_module_fails_its_task_and_an_allowed_one_runs(
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
    coordinator: CoordinatorServer,
    launch_executor: Callable[..., ExecutorProcess],
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    source, sink = new_topic(prefix="in"), new_topic(prefix="out")
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(source, key=b"k", value=b"abc", partition=0)
    assert producer.flush(30) == 0
    script = coordinator.coordinator
    pipelines = {"refused": f"{REFUSED}:run", "allowed": EXAMPLE}
    script.set_assignments(
        [
            assignment(
                pipeline=pipeline,
                task_index=0,
                generation=1,
                source_topic=source,
                sink_topic=sink,
                bootstrap_servers=bootstrap,
                python=python,
            )
            for pipeline, python in pipelines.items()
        ]
    )
    executor = launch_executor(
        "e1",
        data_plane="spark",
        registered_timeout_s=240,
        extra_args=["--allow-transform-module", "tests.integration.executor_service"],
        env={"PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])},
    )

    def running() -> bool:
        states = [script.last_status(p, 0) for p in pipelines]
        return all(s is not None and s.state == common_pb2.TASK_STATE_RUNNING for s in states)

    wait_for("both tasks RUNNING", running, timeout_s=30, abort_if=executor.died)
    for pipeline in pipelines:
        response = executor.stub.TriggerCheckpoint(
            trigger_request(
                executor,
                script,
                pipeline=pipeline,
                checkpoint_id=1,
                tasks=[(0, 1)],
                start_offsets=[common_pb2.PartitionOffset(topic=source, partition=0, offset=0)],
            ),
            timeout=10,
        )
        assert [r.outcome for r in response.results] == [executor_pb2.TRIGGER_OUTCOME_ACCEPTED]

    def refused_error() -> str | None:
        status = script.last_status("refused", 0)
        if status is None or status.state != common_pb2.TASK_STATE_FAILED:
            return None
        return status.last_error.message

    message = wait_for(
        "the refused task FAILED", refused_error, timeout_s=180, abort_if=executor.died
    )
    assert f"module {REFUSED!r} is not allowed on this executor" in message
    assert f"--allow-transform-module {REFUSED}" in message

    def allowed_precommit() -> bool:
        with script.lock:
            return any(r.task_id.pipeline_name == "allowed" for r in script.precommits)

    wait_for(
        "the allowed pipeline's pre-commit",
        allowed_precommit,
        timeout_s=120,
        abort_if=executor.died,
    )
