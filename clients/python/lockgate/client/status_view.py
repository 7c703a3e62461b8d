"""The table view of ``lockgate pipeline status`` (and of each ``--watch`` refresh).

The fields this view knows get their own words (target, checkpoints, the age of the last
commit, lag and records/s, the tasks, the newest abort); every other field of
``GetPipelineStatusResponse`` and of its ``Task`` that is set is shown too, by its proto
name, so a field the coordinator starts sending appears without a change here.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message
from rich.console import Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from lockgate.client.output import (
    OutputFormat,
    age_text,
    out,
    print_document,
    state_name,
    task_text,
    timestamp_text,
)
from lockgate.common.model.offsets import partition_name, range_name
from lockgate.v1 import common_pb2, coordinator_pb2

#: Status fields the header, the task table or the abort lines already say.
_SHOWN = frozenset(
    {
        "name",
        "target_state",
        "config_version",
        "tasks",
        "last_complete_checkpoint_id",
        "last_committed_checkpoint_id",
        "last_commit_time",
        "in_flight_checkpoint_ids",
        "last_aborted_checkpoint",
        "consecutive_aborted_checkpoints",
        "last_abort_missing_tasks",
        "health",
        "data_lost_checkpoint",
        "warnings",
        "source_lags",
        "total_source_lag",
        "source_lag_complete",
        "records_per_second",
        # The header says the age, from last_commit_time.
        "last_commit_age",
    }
)
#: Task fields the task table has a column for.
_TASK_SHOWN = frozenset(
    {
        "task_id",
        "state",
        "executor_id",
        "task_generation",
        "source_partitions",
        "last_error",
        "config_version",
        "executor_generation",
        "state_change_time",
    }
)


def _is_set(message: Message, field: Any) -> bool:
    if field.has_presence:
        return message.HasField(field.name)
    value = getattr(message, field.name)
    return bool(len(value)) if hasattr(value, "__len__") else bool(value)


def extra_fields(message: Message, shown: frozenset[str]) -> dict[str, Any]:
    """The set fields of `message` not in `shown`, as JSON values, in declaration order."""
    document = json_format.MessageToDict(message, preserving_proto_field_name=True)
    return {
        f.name: document[f.name]
        for f in message.DESCRIPTOR.fields
        if f.name not in shown and _is_set(message, f) and f.name in document
    }


def _value_text(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={_value_text(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(_value_text(v) for v in value)
    if isinstance(value, float):
        return f"{value:,.2f}"
    return str(value)


def _task_table(status: coordinator_pb2.GetPipelineStatusResponse) -> Table:
    extras = [extra_fields(t, _TASK_SHOWN) for t in status.tasks]
    extra_names = [n for n in dict.fromkeys(k for e in extras for k in e)]
    table = Table("task", "state", "executor", "generation", "partitions", *extra_names)
    table.add_column("last error")
    for task, extra in zip(status.tasks, extras, strict=True):
        table.add_row(
            task_text(task.task_id),
            state_name(common_pb2.TaskState, task.state),
            task.executor_id or "-",
            str(task.task_generation),
            ", ".join(partition_name(p.topic, p.partition) for p in task.source_partitions),
            *(_value_text(extra[n]) if n in extra else "-" for n in extra_names),
            task.last_error.message or "",
        )
    return table


def _abort_lines(status: coordinator_pb2.GetPipelineStatusResponse) -> list[Text]:
    """The newest abort: its reason, how many in a row, the tasks that did not pre-commit."""
    if not status.HasField("last_aborted_checkpoint"):
        return []
    aborted = status.last_aborted_checkpoint
    in_a_row = status.consecutive_aborted_checkpoints
    since = (
        f"{in_a_row} aborted in a row since the last complete one"
        if in_a_row
        else "a checkpoint completed since"
    )
    lines = [
        Text(
            f"last abort: checkpoint {aborted.checkpoint_id} at "
            f"{timestamp_text(aborted.abort_time)} ({since}): {aborted.abort_reason}"
        )
    ]
    lines.extend(
        Text(
            f"  not pre-committed: task {task_text(t.task_id)} on {t.executor_id or '-'}: "
            f"{t.error.message}"
        )
        for t in status.last_abort_missing_tasks
    )
    return lines


def _health_lines(status: coordinator_pb2.GetPipelineStatusResponse) -> list[Text]:
    """FAILED with the DATA_LOST checkpoint, its lost ranges and the command that moves on;
    then each warning."""
    lines: list[Text] = []
    if status.health == coordinator_pb2.PIPELINE_HEALTH_FAILED:
        lost = status.data_lost_checkpoint
        ranges = ", ".join(
            range_name(r.topic, r.partition, r.start_offset, r.end_offset) for r in lost.lost_ranges
        )
        lines.append(
            Text(
                f"FAILED: checkpoint {lost.checkpoint_id} lost its data at"
                f" {timestamp_text(lost.data_loss_time)}: {lost.data_loss_error}"
            )
        )
        lines.append(Text(f"  lost ranges (half-open): {ranges or 'none'}"))
        lines.append(
            Text(
                f"  move on: lockgate pipeline restart {status.name} --from-checkpoint"
                f" {lost.checkpoint_id} (reads the lost ranges again)"
            )
        )
    lines.extend(Text(f"warning: {warning}") for warning in status.warnings)
    return lines


def _progress_line(status: coordinator_pb2.GetPipelineStatusResponse) -> Text:
    """Lag, total and per source partition, and records/s over the newest commits."""
    per_partition = ", ".join(
        f"{partition_name(p.topic, p.partition)} {p.lag}" for p in status.source_lags
    )
    lag = f"lag {status.total_source_lag} records" + (
        f" ({per_partition})" if per_partition else ""
    )
    if not status.source_lag_complete:
        lag += " (Kafka did not answer for every source partition)"
    return Text(f"{lag}; {status.records_per_second:.1f} records/s")


def status_view(
    status: coordinator_pb2.GetPipelineStatusResponse, *, now: datetime
) -> list[RenderableType]:
    """The header, the progress line (lag, records/s), any further status fields, the task
    table, the newest abort, and the pipeline's health (FAILED after a data loss) with its
    warnings."""
    in_flight = ", ".join(str(i) for i in status.in_flight_checkpoint_ids) or "none"
    header = Text.from_markup(
        f"[bold]{status.name}[/bold]: target "
        f"{state_name(common_pb2.TargetState, status.target_state)}, config version "
        f"{status.config_version}; last complete checkpoint "
        f"{status.last_complete_checkpoint_id}, last committed "
        f"{status.last_committed_checkpoint_id} at {timestamp_text(status.last_commit_time)} "
        f"({age_text(status.last_commit_time, now)}); in flight: {in_flight}"
    )
    parts: list[RenderableType] = [header, _progress_line(status)]
    parts.extend(
        Text(f"{name}: {_value_text(value)}")
        for name, value in extra_fields(status, _SHOWN).items()
    )
    parts.append(_task_table(status))
    parts.extend(_abort_lines(status))
    parts.extend(_health_lines(status))
    return parts


def show_status(status: coordinator_pb2.GetPipelineStatusResponse, fmt: OutputFormat) -> None:
    """Print one status: the table view, or the whole message as JSON or YAML."""
    if fmt is not OutputFormat.TABLE:
        print_document(status, fmt)
        return
    for part in status_view(status, now=datetime.now(UTC)):
        # soft_wrap: a line (an abort reason) stays one line a script can grep.
        out.print(part, soft_wrap=True, highlight=False)


def watch_status(
    fetch: Callable[[], coordinator_pb2.GetPipelineStatusResponse],
    *,
    fmt: OutputFormat,
    interval_s: float,
    count: int | None,
) -> None:
    """Fetch and show the status every `interval_s` seconds, `count` times (None: until
    Ctrl-C). On a terminal the table view is redrawn in place; otherwise each refresh is
    printed after the last (JSON: one document per line; YAML: one per ``---``)."""
    live = fmt is OutputFormat.TABLE and out.is_terminal
    shown = 0
    try:
        view_context: AbstractContextManager[Live | None] = (
            Live(console=out, auto_refresh=False) if live else contextlib.nullcontext()
        )
        with view_context as view:
            while True:
                status = fetch()
                now = datetime.now(UTC)
                if view is not None:
                    view.update(_frame(status, now, interval_s), refresh=True)
                elif fmt is OutputFormat.TABLE:
                    out.rule(f"{status.name} at {now:%H:%M:%S}", style="dim")
                    show_status(status, fmt)
                else:
                    print_document(status, fmt, stream=True)
                shown += 1
                if count is not None and shown >= count:
                    return
                time.sleep(interval_s)  # the refresh period the user asked for
    except KeyboardInterrupt:
        return


def _frame(
    status: coordinator_pb2.GetPipelineStatusResponse, now: datetime, interval_s: float
) -> Group:
    footer = Text(
        f"refreshed {now:%H:%M:%S} UTC every {interval_s:g} s; Ctrl-C to stop", style="dim"
    )
    return Group(*status_view(status, now=now), footer)


__all__ = ["extra_fields", "show_status", "status_view", "watch_status"]
