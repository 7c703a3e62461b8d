"""``lockgate cluster ...`` and ``lockgate pipeline ...``: the coordinator from the command line.

Calls go to ``--coordinator`` (``coordinator_calls.py``: any replica will do).
Readable tables by default, ``-o json|yaml`` (or ``--json``) for scripts, every field and zero
values included (``output.py``). Exit status 0 on success, 2 for invalid input (a bad file or
argument, INVALID_ARGUMENT), 1 for other failures. The lead wires the two apps into the main CLI::

    app.add_typer(coordinator_cli.cluster_app, name="cluster")
    app.add_typer(coordinator_cli.pipeline_app, name="pipeline")

A pipeline file (YAML or JSON, read by ``pipeline_file.py``) has the shape of
``lockgate.v1.PipelineSpec`` with two shorthands. Before it is sent, the same parser the
coordinator and the executors use (``lockgate.common.model``) checks it (``check_spec``), so
a bad file is refused at once, every bad field listed, without a coordinator; only what needs
Kafka (do the topics exist, does the broker answer?) is left to the coordinator. A refusal
prints each violation once.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from google.protobuf import json_format
from rich.table import Table

from lockgate.client.coordinator_calls import (
    DEFAULT_COORDINATOR,
    TIMEOUT_S,
    CoordinatorOption,
    call,
    existing_pipeline,
)
from lockgate.client.output import (
    JsonOption,
    OutputFormat,
    OutputOption,
    chosen_format,
    error_text,
    fail,
    message_json,
    out,
    print_document,
    state_name,
    task_text,
    timestamp_text,
)
from lockgate.client.pipeline_file import PipelineFile, SpecFileError, read_pipeline_file
from lockgate.client.status_view import show_status, watch_status
from lockgate.common.model.offsets import range_name
from lockgate.common.model.pipeline_spec import invalid_spec
from lockgate.common.model.proto import spec_from_proto, spec_violations
from lockgate.common.model.spec_changes import SpecChange, spec_changes
from lockgate.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc

cluster_app = typer.Typer(
    name="cluster", help="Inspect the coordinator cluster.", no_args_is_help=True
)
pipeline_app = typer.Typer(
    name="pipeline", help="Create, inspect and control pipelines.", no_args_is_help=True
)

NameArgument = Annotated[str, typer.Argument(help="Pipeline name.")]
FileOption = Annotated[
    Path, typer.Option("--file", "-f", help="Pipeline file (YAML or JSON).", exists=False)
]


# ---------------------------------------------------------------------------------------
# Pipeline files (read by `pipeline_file.py`)
# ---------------------------------------------------------------------------------------


def _file_violations(pipeline_file: PipelineFile) -> list[tuple[str, str]]:
    """Every (field, description) the coordinator would refuse the file's spec for."""
    violations = spec_violations(pipeline_file.spec, written=pipeline_file.written)
    if not violations:
        return []
    return [(v.field, v.description) for v in invalid_spec(violations).violations]


def check_spec(spec: common_pb2.PipelineSpec, *, written: Collection[str] = ()) -> None:
    """Exit 2 listing every violation if the coordinator would refuse `spec` as invalid,
    in the shape the coordinator's INVALID_ARGUMENT is printed. `written` (from
    `read_pipeline_file`) makes a number the file wrote as 0 count as 0, not as unset."""
    violations = spec_violations(spec, written=written)
    if violations:
        error = invalid_spec(violations)
        fail(
            error_text(
                "INVALID_ARGUMENT",
                error.message,
                [(v.field, v.description) for v in error.violations],
            ),
            code=2,
        )


def _read_file(file: Path) -> PipelineFile:
    """The pipeline file, or exit 2 naming what cannot be read in it."""
    try:
        return read_pipeline_file(file)
    except SpecFileError as exc:
        fail(str(exc), code=2)


# ---------------------------------------------------------------------------------------
# lockgate cluster
# ---------------------------------------------------------------------------------------


@cluster_app.command("status")
def cluster_status(
    coordinator: CoordinatorOption = DEFAULT_COORDINATOR,
    as_json: JsonOption = False,
    output: OutputOption = None,
) -> None:
    """Leader, epoch, every coordinator replica (role, state, last seen) and executors."""
    fmt = chosen_format(output, as_json)
    info = call(
        coordinator,
        lambda s: s.GetClusterInfo(coordinator_pb2.GetClusterInfoRequest(), timeout=TIMEOUT_S),
    )
    if fmt is not OutputFormat.TABLE:
        print_document(info, fmt)
        return
    if info.leader_epoch.leader_id:
        out.print(
            f"leader [bold]{info.leader_epoch.leader_id}[/bold] at {info.leader_address}, "
            f"epoch {info.leader_epoch.epoch}, lease until "
            f"{timestamp_text(info.lease_expire_time)} "
            f"(answered by {info.responder_id})"
        )
    else:
        out.print(f"[yellow]no leader elected[/yellow] (answered by {info.responder_id})")
    members = Table("coordinator", "address", "role", "state", "last seen", title="Coordinators")
    for m in info.coordinators:
        members.add_row(
            m.coordinator_id,
            m.address,
            "leader" if m.is_leader else "follower",
            state_name(common_pb2.CoordinatorState, m.state),
            timestamp_text(m.last_seen_time),
        )
    out.print(members)
    executors = Table(
        "executor", "address", "state", "generation", "tasks", "last heartbeat", title="Executors"
    )
    for e in info.executors:
        executors.add_row(
            e.executor_id,
            e.address,
            state_name(common_pb2.ExecutorState, e.state),
            str(e.executor_generation),
            str(len(e.tasks)),
            timestamp_text(e.last_heartbeat_time),
        )
    out.print(executors)


# ---------------------------------------------------------------------------------------
# lockgate pipeline
# ---------------------------------------------------------------------------------------


@pipeline_app.command("create")
def pipeline_create(
    file: FileOption,
    paused: Annotated[bool, typer.Option("--paused", help="Create it PAUSED.")] = False,
    coordinator: CoordinatorOption = DEFAULT_COORDINATOR,
    as_json: JsonOption = False,
    output: OutputOption = None,
) -> None:
    """Create a pipeline from a file; every invalid field is listed."""
    fmt = chosen_format(output, as_json)
    pipeline_file = _read_file(file)
    check_spec(pipeline_file.spec, written=pipeline_file.written)
    request = coordinator_pb2.CreatePipelineRequest(
        request_id=uuid.uuid4().hex,
        spec=pipeline_file.spec,
        initial_target_state=common_pb2.TARGET_STATE_PAUSED if paused else 0,  # type: ignore[arg-type]
    )
    response = call(coordinator, lambda s: s.CreatePipeline(request, timeout=TIMEOUT_S))
    if fmt is not OutputFormat.TABLE:
        print_document(response.pipeline, fmt)
        return
    out.print(
        f"created pipeline [bold]{response.pipeline.name}[/bold] "
        f"(config version {response.pipeline.config_version}, "
        f"{state_name(common_pb2.TargetState, response.pipeline.target_state)})"
    )


@pipeline_app.command("validate")
def pipeline_validate(
    file: FileOption, as_json: JsonOption = False, output: OutputOption = None
) -> None:
    """Check a pipeline file offline; every violation listed, exit 2 if any.

    The parser is the coordinator's own; whether the topics exist is left to the coordinator.
    """
    fmt = chosen_format(output, as_json)
    violations = _file_violations(_read_file(file))
    if fmt is not OutputFormat.TABLE:
        print_document(
            {
                "file": str(file),
                "valid": not violations,
                "violations": [{"field": f, "description": d} for f, d in violations],
            },
            fmt,
        )
        if violations:
            raise typer.Exit(2)
        return
    if violations:
        fail(error_text("INVALID_ARGUMENT", f"{file} is not a valid pipeline", violations), code=2)
    out.print(f"{file}: valid", highlight=False)


@pipeline_app.command("apply")
def pipeline_apply(
    file: FileOption,
    coordinator: CoordinatorOption = DEFAULT_COORDINATOR,
    as_json: JsonOption = False,
    output: OutputOption = None,
) -> None:
    """Create or update a pipeline from a file, printing each field that changed.

    An update is refused if the pipeline changed since it was read (its config version);
    nothing is sent when no field differs.
    """
    fmt = chosen_format(output, as_json)
    pipeline_file = _read_file(file)
    check_spec(pipeline_file.spec, written=pipeline_file.written)
    wanted = pipeline_file.spec
    current = existing_pipeline(coordinator, wanted.name)
    changes: list[SpecChange] = []
    if current is None:
        action = "created"
        create = coordinator_pb2.CreatePipelineRequest(request_id=uuid.uuid4().hex, spec=wanted)
        pipeline = call(coordinator, lambda s: s.CreatePipeline(create, timeout=TIMEOUT_S)).pipeline
    else:
        changes = spec_changes(spec_from_proto(current.spec), spec_from_proto(wanted))
        action, pipeline = "unchanged", current
        if changes:
            action = "updated"
            update = coordinator_pb2.UpdatePipelineRequest(
                request_id=uuid.uuid4().hex,
                name=wanted.name,
                spec=wanted,
                expected_config_version=current.config_version,
            )
            pipeline = call(
                coordinator, lambda s: s.UpdatePipeline(update, timeout=TIMEOUT_S)
            ).pipeline
    if fmt is not OutputFormat.TABLE:
        print_document(
            {
                "action": action,
                "pipeline": message_json(pipeline),
                "changes": [
                    {"field": c.field, "before": c.before, "after": c.after} for c in changes
                ],
            },
            fmt,
        )
        return
    out.print(
        f"pipeline [bold]{pipeline.name}[/bold] {action} (config version {pipeline.config_version})"
    )
    for change in changes:
        out.print(
            f"  {change.field}: {_change_value(change.before)} -> {_change_value(change.after)}",
            soft_wrap=True,
            highlight=False,
            markup=False,
        )


def _change_value(value: object) -> str:
    return "(unset)" if value is None else json.dumps(value)


@pipeline_app.command("list")
def pipeline_list(
    coordinator: CoordinatorOption = DEFAULT_COORDINATOR,
    as_json: JsonOption = False,
    output: OutputOption = None,
) -> None:
    """Every pipeline, by name."""
    fmt = chosen_format(output, as_json)
    pipelines: list[common_pb2.Pipeline] = []
    token = ""
    while True:
        request = coordinator_pb2.ListPipelinesRequest(page_size=1000, page_token=token)
        page = call(
            coordinator,
            lambda s, r=request: s.ListPipelines(r, timeout=TIMEOUT_S),  # type: ignore[misc]
        )
        pipelines.extend(page.pipelines)
        token = page.next_page_token
        if not token:
            break
    if fmt is not OutputFormat.TABLE:
        print_document(coordinator_pb2.ListPipelinesResponse(pipelines=pipelines), fmt)
        return
    table = Table("name", "target", "version", "source", "sink", "tasks max", "updated")
    for p in pipelines:
        table.add_row(
            p.name,
            state_name(common_pb2.TargetState, p.target_state),
            str(p.config_version),
            ",".join(p.spec.source.kafka.topics),
            p.spec.sink.kafka.topic,
            str(p.spec.tasks_max),
            timestamp_text(p.update_time),
        )
    out.print(table)


@pipeline_app.command("get")
def pipeline_get(
    name: NameArgument,
    coordinator: CoordinatorOption = DEFAULT_COORDINATOR,
    as_json: JsonOption = False,
    output: OutputOption = None,
) -> None:
    """A pipeline's spec, target state and config version."""
    fmt = chosen_format(output, as_json)
    response = call(
        coordinator,
        lambda s: s.GetPipeline(coordinator_pb2.GetPipelineRequest(name=name), timeout=TIMEOUT_S),
    )
    if fmt is not OutputFormat.TABLE:
        print_document(response.pipeline, fmt)
        return
    p = response.pipeline
    out.print(
        f"[bold]{p.name}[/bold]: {state_name(common_pb2.TargetState, p.target_state)}, config "
        f"version {p.config_version}, updated {timestamp_text(p.update_time)}"
    )
    spec = json_format.MessageToDict(p.spec, preserving_proto_field_name=True)
    out.print(yaml.safe_dump(spec, sort_keys=False), highlight=False)


@pipeline_app.command("status")
def pipeline_status(
    name: NameArgument,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="Refresh the view until interrupted.")
    ] = False,
    interval: Annotated[
        float, typer.Option("--interval", help="With --watch: seconds between refreshes.")
    ] = 2.0,
    count: Annotated[
        int | None,
        typer.Option("--count", help="With --watch: stop after this many refreshes."),
    ] = None,
    coordinator: CoordinatorOption = DEFAULT_COORDINATOR,
    as_json: JsonOption = False,
    output: OutputOption = None,
) -> None:
    """Target state, lag, records/s, tasks, checkpoints and the last commit's age; --watch
    refreshes it."""
    fmt = chosen_format(output, as_json)
    if interval <= 0:
        fail("--interval must be > 0 seconds", code=2)
    if count is not None and count <= 0:
        fail("--count must be > 0", code=2)
    request = coordinator_pb2.GetPipelineStatusRequest(name=name)

    def fetch() -> coordinator_pb2.GetPipelineStatusResponse:
        return call(coordinator, lambda s: s.GetPipelineStatus(request, timeout=TIMEOUT_S))

    if watch:
        watch_status(fetch, fmt=fmt, interval_s=interval, count=count)
    else:
        show_status(fetch(), fmt)


def _verb(
    name: str,
    coordinator: str,
    fmt: OutputFormat,
    invoke: Callable[[coordinator_pb2_grpc.CoordinatorServiceStub], Any],
    done: str,
) -> None:
    response = call(coordinator, invoke)
    if fmt is not OutputFormat.TABLE:
        print_document(response, fmt)
        return
    out.print(f"pipeline [bold]{name}[/bold] {done}")


@pipeline_app.command("pause")
def pipeline_pause(
    name: NameArgument,
    coordinator: CoordinatorOption = DEFAULT_COORDINATOR,
    as_json: JsonOption = False,
    output: OutputOption = None,
) -> None:
    """Take no new checkpoints; tasks stay assigned."""
    request = coordinator_pb2.PausePipelineRequest(request_id=uuid.uuid4().hex, name=name)
    _verb(
        name,
        coordinator,
        chosen_format(output, as_json),
        lambda s: s.PausePipeline(request, timeout=TIMEOUT_S),
        "paused",
    )


@pipeline_app.command("resume")
def pipeline_resume(
    name: NameArgument,
    coordinator: CoordinatorOption = DEFAULT_COORDINATOR,
    as_json: JsonOption = False,
    output: OutputOption = None,
) -> None:
    """Run again (from PAUSED or STOPPED)."""
    request = coordinator_pb2.ResumePipelineRequest(request_id=uuid.uuid4().hex, name=name)
    _verb(
        name,
        coordinator,
        chosen_format(output, as_json),
        lambda s: s.ResumePipeline(request, timeout=TIMEOUT_S),
        "resumed",
    )


@pipeline_app.command("stop")
def pipeline_stop(
    name: NameArgument,
    coordinator: CoordinatorOption = DEFAULT_COORDINATOR,
    as_json: JsonOption = False,
    output: OutputOption = None,
) -> None:
    """Release the tasks; offsets may be reset only when stopped."""
    request = coordinator_pb2.StopPipelineRequest(request_id=uuid.uuid4().hex, name=name)
    _verb(
        name,
        coordinator,
        chosen_format(output, as_json),
        lambda s: s.StopPipeline(request, timeout=TIMEOUT_S),
        "stopped",
    )


@pipeline_app.command("restart")
def pipeline_restart(
    name: NameArgument,
    include_tasks: Annotated[
        bool, typer.Option("--include-tasks", help="Also restart tasks (new generations).")
    ] = False,
    only_failed: Annotated[
        bool, typer.Option("--only-failed", help="With --include-tasks: only FAILED tasks.")
    ] = False,
    from_checkpoint: Annotated[
        int,
        typer.Option(
            "--from-checkpoint",
            min=1,
            help="Move a FAILED pipeline past its DATA_LOST checkpoint N, re-reading the"
            " ranges it lost (see `pipeline status`).",
        ),
    ] = 0,
    coordinator: CoordinatorOption = DEFAULT_COORDINATOR,
    as_json: JsonOption = False,
    output: OutputOption = None,
) -> None:
    """Re-plan the tasks and, with --include-tasks, restart them."""
    fmt = chosen_format(output, as_json)
    request = coordinator_pb2.RestartPipelineRequest(
        request_id=uuid.uuid4().hex,
        name=name,
        include_tasks=include_tasks,
        only_failed=only_failed,
        from_checkpoint_id=from_checkpoint,
    )
    response = call(coordinator, lambda s: s.RestartPipeline(request, timeout=TIMEOUT_S))
    if fmt is not OutputFormat.TABLE:
        print_document(response, fmt)
        return
    restarted = ", ".join(task_text(t) for t in response.restarted_tasks) or "no tasks"
    out.print(f"pipeline [bold]{name}[/bold] re-planned; restarted: {restarted}")


@pipeline_app.command("delete")
def pipeline_delete(
    name: NameArgument,
    coordinator: CoordinatorOption = DEFAULT_COORDINATOR,
    as_json: JsonOption = False,
    output: OutputOption = None,
) -> None:
    """Finish or abort its checkpoints, then remove it with its history."""
    fmt = chosen_format(output, as_json)
    request = coordinator_pb2.DeletePipelineRequest(request_id=uuid.uuid4().hex, name=name)
    call(coordinator, lambda s: s.DeletePipeline(request, timeout=60.0))
    if fmt is not OutputFormat.TABLE:
        # DeletePipelineResponse is empty: say what was deleted instead of printing `{}`.
        print_document({"name": name, "deleted": True}, fmt)
        return
    out.print(f"pipeline [bold]{name}[/bold] deleted")


def _parse_offset(text: str) -> common_pb2.PartitionOffset:
    topic_partition, sep, offset = text.rpartition("=")
    topic, colon, partition = topic_partition.rpartition(":")
    if not sep or not colon or not partition.isdigit() or not offset.lstrip("-").isdigit():
        fail(f"--set {text!r}: write TOPIC:PARTITION=OFFSET, e.g. orders:0=42", code=2)
    return common_pb2.PartitionOffset(topic=topic, partition=int(partition), offset=int(offset))


@pipeline_app.command("offsets")
def pipeline_offsets(
    name: NameArgument,
    set_offsets: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Reset TOPIC:PARTITION=OFFSET (repeatable); the pipeline must be STOPPED.",
        ),
    ] = None,
    coordinator: CoordinatorOption = DEFAULT_COORDINATOR,
    as_json: JsonOption = False,
    output: OutputOption = None,
) -> None:
    """Where each source partition resumes; --set resets them (pipeline STOPPED)."""
    fmt = chosen_format(output, as_json)
    if set_offsets:
        reset = coordinator_pb2.ResetOffsetsRequest(
            request_id=uuid.uuid4().hex,
            pipeline_name=name,
            offsets=coordinator_pb2.PartitionOffsets(
                offsets=[_parse_offset(t) for t in set_offsets]
            ),
        )
        call(coordinator, lambda s: s.ResetOffsets(reset, timeout=TIMEOUT_S))
    response = call(
        coordinator,
        lambda s: s.GetOffsets(
            coordinator_pb2.GetOffsetsRequest(pipeline_name=name), timeout=TIMEOUT_S
        ),
    )
    if fmt is not OutputFormat.TABLE:
        print_document(response, fmt)
        return
    source = (
        f"checkpoint {response.checkpoint_id}" if response.checkpoint_id else "a reset or none yet"
    )
    default = common_pb2.OffsetPosition.Name(response.default_position).removeprefix(
        "OFFSET_POSITION_"
    )
    out.print(f"offsets of [bold]{name}[/bold] from {source}; other partitions: {default}")
    table = Table("topic", "partition", "next offset")
    for o in response.offsets:
        table.add_row(o.topic, str(o.partition), str(o.offset))
    out.print(table)


@pipeline_app.command("checkpoints")
def pipeline_checkpoints(
    name: NameArgument,
    checkpoint_id: Annotated[
        int | None, typer.Option("--id", help="Show one checkpoint with its tasks.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", help="Most checkpoints to list.")] = 20,
    coordinator: CoordinatorOption = DEFAULT_COORDINATOR,
    as_json: JsonOption = False,
    output: OutputOption = None,
) -> None:
    """Checkpoint history, newest first, with timings (or one checkpoint with --id)."""
    fmt = chosen_format(output, as_json)
    if checkpoint_id is not None:
        one = call(
            coordinator,
            lambda s: s.GetCheckpoint(
                coordinator_pb2.GetCheckpointRequest(
                    pipeline_name=name, checkpoint_id=checkpoint_id
                ),
                timeout=TIMEOUT_S,
            ),
        )
        if fmt is not OutputFormat.TABLE:
            print_document(one.checkpoint, fmt)
            return
        _print_checkpoints([one.checkpoint])
        tasks = Table("task", "generation", "executor", "state", "source ranges")
        for t in one.checkpoint.tasks:
            tasks.add_row(
                task_text(t.task_id),
                str(t.task_generation),
                t.executor_id,
                state_name(common_pb2.TaskCheckpointState, t.state),
                ", ".join(
                    range_name(r.topic, r.partition, r.start_offset, r.end_offset)
                    for r in t.source_ranges
                ),
            )
        out.print(tasks)
        return
    if limit <= 0:
        fail("--limit must be > 0", code=2)
    listed = call(
        coordinator,
        lambda s: s.ListCheckpoints(
            coordinator_pb2.ListCheckpointsRequest(pipeline_name=name, page_size=limit),
            timeout=TIMEOUT_S,
        ),
    )
    if fmt is not OutputFormat.TABLE:
        print_document(listed, fmt)
        return
    _print_checkpoints(list(listed.checkpoints))


def _print_checkpoints(checkpoints: list[common_pb2.Checkpoint]) -> None:
    table = Table(
        "id", "state", "epoch", "triggered", "pre-commit ms", "commit ms", "total ms", "reason"
    )
    for c in checkpoints:
        table.add_row(
            str(c.checkpoint_id),
            state_name(common_pb2.CheckpointState, c.state),
            str(c.leader_epoch.epoch),
            timestamp_text(c.trigger_time),
            str(c.precommit_duration_ms or "-"),
            str(c.commit_duration_ms or "-"),
            str(c.total_duration_ms or "-"),
            c.abort_reason,
        )
    out.print(table)
