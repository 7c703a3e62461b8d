"""Repeated checkpoint aborts show where a user looks (issue 16, item 1): against a
coordinator process and scripted executor peers, a task that never pre-commits times every
checkpoint out, and GetPipelineStatus, `lockgate pipeline status` (and `--json`) and
`lockgate pipeline checkpoints` say so: the reason, the count growing, the task named."""

from __future__ import annotations

import json
from collections.abc import Callable

import typer
from typer.testing import CliRunner

from lockgate.client.coordinator_cli import pipeline_app
from lockgate.v1 import common_pb2, coordinator_pb2
from tests.fixtures.kafka import KafkaBroker
from tests.integration.coordinator.test_service_coordinator import (
    CoordinatorCluster,
    checkpoint_setup,
    wait_committed,
)
from tests.support.waits import wait_for

NO_REPORT = "no pre-commit report within 1500 ms"  # pipeline_spec's timeout_ms is 1500


def test_status_and_the_cli_show_repeated_timeouts_and_the_silent_task(
    cluster: CoordinatorCluster,
    kafka_broker: KafkaBroker,
    new_topic: Callable[..., str],
) -> None:
    """e2 never reports its pre-commits: the status names the newest abort's reason and
    the task on e2 that did not pre-commit, the count of aborts in a row grows with each
    timeout, the CLI prints all of it, and the count returns to 0 once e2 reports again."""
    with checkpoint_setup(cluster, kafka_broker, new_topic, replicas=1) as setup:
        stub, name = setup.stub, setup.name
        wait_committed(setup, "a first committed checkpoint", timeout_s=30)

        def status() -> coordinator_pb2.GetPipelineStatusResponse:
            return stub.GetPipelineStatus(
                coordinator_pb2.GetPipelineStatusRequest(name=name), timeout=5
            )

        before = status()
        assert not before.HasField("last_aborted_checkpoint")
        assert before.consecutive_aborted_checkpoints == 0
        assert not before.last_abort_missing_tasks
        (silent,) = [t for t in before.tasks if t.executor_id == "e2"]
        silent_task = f"{name}/{silent.task_id.task_index}"

        setup.peers[1].script.precommit = "silent"
        first = wait_for(
            "a checkpoint to time out",
            lambda: (lambda s: s if s.consecutive_aborted_checkpoints >= 1 else None)(status()),
            timeout_s=20,
        )
        grown = wait_for(
            "a second checkpoint to time out",
            lambda: (
                lambda s: (
                    s
                    if s.consecutive_aborted_checkpoints > first.consecutive_aborted_checkpoints
                    else None
                )
            )(status()),
            timeout_s=20,
        )
        aborted = grown.last_aborted_checkpoint
        assert aborted.state == common_pb2.CHECKPOINT_STATE_ABORTED
        assert aborted.checkpoint_id > first.last_aborted_checkpoint.checkpoint_id
        assert aborted.abort_reason == (
            f"timed out after 1500 ms (task {silent_task} on e2: {NO_REPORT})"
        )
        (missing,) = grown.last_abort_missing_tasks
        assert (missing.task_id.task_index, missing.executor_id) == (
            silent.task_id.task_index,
            "e2",
        )
        assert missing.state == common_pb2.TASK_CHECKPOINT_STATE_FAILED
        assert missing.error.message == NO_REPORT
        assert missing.error.checkpoint_id == aborted.checkpoint_id
        # The task itself still runs: the status must not need a FAILED task to show this.
        assert all(t.state == common_pb2.TASK_STATE_RUNNING for t in grown.tasks)

        app = typer.Typer()
        app.add_typer(pipeline_app, name="pipeline")
        runner = CliRunner()
        address = cluster.leader().address
        # A wide terminal, so the checkpoints table keeps each reason on one line.
        env = {"LOCKGATE_COORDINATOR": address, "COLUMNS": "400"}
        shown = runner.invoke(app, ["pipeline", "status", name], env=env)
        assert shown.exit_code == 0, shown.output
        assert "aborted in a row since the last complete one" in shown.output
        assert "timed out after 1500 ms" in shown.output
        assert f"not pre-committed: task {silent_task} on e2: {NO_REPORT}" in shown.output
        as_json = runner.invoke(app, ["pipeline", "status", name, "--json"], env=env)
        assert as_json.exit_code == 0, as_json.output
        document = json.loads(as_json.stdout)
        assert int(document["consecutive_aborted_checkpoints"]) >= 2
        assert document["last_aborted_checkpoint"]["abort_reason"].startswith(
            "timed out after 1500 ms"
        )
        (missing_json,) = document["last_abort_missing_tasks"]
        assert missing_json["executor_id"] == "e2"
        assert missing_json["error"]["message"] == NO_REPORT
        history = runner.invoke(app, ["pipeline", "checkpoints", name], env=env)
        assert history.exit_code == 0, history.output
        assert f"task {silent_task} on e2: {NO_REPORT}" in history.output

        setup.peers[1].script.precommit = "report"
        recovered = wait_for(
            "a checkpoint to complete again",
            lambda: (lambda s: s if s.consecutive_aborted_checkpoints == 0 else None)(status()),
            timeout_s=20,
        )
        assert recovered.last_complete_checkpoint_id > aborted.checkpoint_id
        # The newest abort stays visible as history, marked as over.
        assert recovered.last_aborted_checkpoint.checkpoint_id >= aborted.checkpoint_id
        shown = runner.invoke(app, ["pipeline", "status", name], env=env)
        assert shown.exit_code == 0, shown.output
        assert "(a checkpoint completed since)" in shown.output
        assert "aborted in a row" not in shown.output
