"""`pipeline status`'s table view: the last commit's age, and fields the view has no words
for shown by their proto name (so fields the coordinator adds appear without a change)."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.console import Console

from lockgate.client.status_view import extra_fields, status_view
from lockgate.v1 import common_pb2, coordinator_pb2

NOW = datetime(2026, 11, 25, 8, 0, 10, tzinfo=UTC)


def render(status: coordinator_pb2.GetPipelineStatusResponse) -> str:
    console = Console(width=200, record=True)
    for part in status_view(status, now=NOW):
        console.print(part)
    return console.export_text()


def status() -> coordinator_pb2.GetPipelineStatusResponse:
    response = coordinator_pb2.GetPipelineStatusResponse(
        name="orders",
        target_state=common_pb2.TARGET_STATE_RUNNING,
        config_version=3,
        last_committed_checkpoint_id=41,
        tasks=[
            common_pb2.Task(
                task_id=common_pb2.TaskId(pipeline_name="orders", task_index=0),
                state=common_pb2.TASK_STATE_RUNNING,
                executor_id="e1",
            )
        ],
    )
    response.last_commit_time.FromDatetime(datetime(2026, 11, 25, 8, 0, 5, tzinfo=UTC))
    return response


def test_the_header_says_how_old_the_last_commit_is() -> None:
    text = render(status())
    assert "last committed 41 at 2026-11-25 08:00:05.000 (5.0 s ago)" in text, text
    assert "orders/0" in text and "RUNNING" in text
    never = status()
    never.ClearField("last_commit_time")
    assert "(never)" in render(never)


def test_set_fields_the_view_does_not_name_are_listed_by_proto_name() -> None:
    shown_by_header = status()
    shown_by_header.consecutive_aborted_checkpoints = 2
    # Pretend the view had no words for the count, as for a field added later.
    extra = extra_fields(shown_by_header, frozenset({"name", "tasks", "last_commit_time"}))
    assert extra["consecutive_aborted_checkpoints"] == "2"
    assert extra["config_version"] == "3"
    assert "in_flight_checkpoint_ids" not in extra, "unset fields are left out"
    task_extra = extra_fields(shown_by_header.tasks[0], frozenset({"task_id"}))
    assert task_extra == {"executor_id": "e1", "state": "TASK_STATE_RUNNING"}


def test_a_failed_pipeline_names_its_partitions_lost_ranges_and_lags() -> None:
    failed = status()
    failed.tasks[0].source_partitions.add(topic="in", partition=2)
    failed.health = coordinator_pb2.PIPELINE_HEALTH_FAILED
    failed.data_lost_checkpoint.checkpoint_id = 7
    failed.data_lost_checkpoint.data_loss_error = "transaction timed out"
    failed.data_lost_checkpoint.lost_ranges.add(
        topic="in", partition=2, start_offset=150, end_offset=170
    )
    failed.source_lags.add(topic="in", partition=2, lag=20)
    text = render(failed)
    assert "in[2]" in text.split("FAILED")[0], text  # the task's partition, in the table
    assert "lost ranges (half-open): in[2] 150..170" in text, text
    assert "--from-checkpoint 7" in text, text
    assert "(in[2] 20)" in text, text
