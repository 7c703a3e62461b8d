"""``lockgate cluster ...`` and ``lockgate pipeline ...``: the coordinator from the command line.

Calls go to ``--coordinator`` (one or several comma-separated addresses, env
``LOCKGATE_COORDINATOR``) through a leader-following channel, so any replica will do.
Readable tables by default, ``--json`` for scripts (every field, zero values included). Exit
status 0 on success, 2 for invalid input (a bad file or argument, INVALID_ARGUMENT), 1 for
other failures. The lead wires the two apps into the main CLI::

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

import contextlib
import json
import re
import sys
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import grpc
import typer
import yaml
from google.protobuf import json_format, timestamp_pb2
from google.protobuf.message import Message
from rich.console import Console
from rich.table import Table

from lockgate.client.pipeline_file import SpecFileError, read_pipeline_file
from lockgate.common.grpc_client import error_details, open_channel
from lockgate.common.model.pipeline_spec import invalid_spec
from lockgate.common.model.proto import spec_violations
from lockgate.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc

DEFAULT_COORDINATOR = "127.0.0.1:7070"
COORDINATOR_ENV = "LOCKGATE_COORDINATOR"
_TIMEOUT_S = 15.0
_T = TypeVar("_T")

cluster_app = typer.Typer(
    name="cluster", help="Inspect the coordinator cluster.", no_args_is_help=True
)
pipeline_app = typer.Typer(
    name="pipeline", help="Create, inspect and control pipelines.", no_args_is_help=True
)
_out = Console()
_err = Console(stderr=True)

CoordinatorOption = Annotated[
    str,
    typer.Option(
        "--coordinator",
        "-c",
        envvar=COORDINATOR_ENV,
        help=f"Coordinator address(es), comma-separated HOST:PORT (env {COORDINATOR_ENV}).",
    ),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print the answer as JSON, every field included.")
]
NameArgument = Annotated[str, typer.Argument(help="Pipeline name.")]


# ---------------------------------------------------------------------------------------
# Pipeline files (read by `pipeline_file.py`)
# ---------------------------------------------------------------------------------------


def check_spec(spec: common_pb2.PipelineSpec, *, written: Collection[str] = ()) -> None:
    """Exit 2 listing every violation if the coordinator would refuse `spec` as invalid,
    in the shape the coordinator's INVALID_ARGUMENT is printed. `written` (from
    `read_pipeline_file`) makes a number the file wrote as 0 count as 0, not as unset."""
    violations = spec_violations(spec, written=written)
    if violations:
        error = invalid_spec(violations)
        _fail(
            _error_text(
                "INVALID_ARGUMENT",
                error.message,
                [(v.field, v.description) for v in error.violations],
            ),
            code=2,
        )


# ---------------------------------------------------------------------------------------
# Calls and output
# ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def _stub(coordinator: str) -> Iterator[coordinator_pb2_grpc.CoordinatorServiceStub]:
    try:
        channel = open_channel([a for a in coordinator.split(",") if a.strip()])
    except ValueError as exc:
        _fail(f"--coordinator: {exc}", code=2)
    with channel:
        yield coordinator_pb2_grpc.CoordinatorServiceStub(channel)


def _error_text(code: str, message: str, violations: Sequence[tuple[str, str]]) -> str:
    """A failed call's status line and one line per field violation, each violation said
    once: the status message repeats them for clients that read only the message, so the
    parts of it that a listed violation says are left out of the status line."""
    summary = message
    for field, description in violations:
        summary = summary.replace(f"{field}: {description}", "")
    if violations:
        summary = re.sub(r"(\s*;\s*)+", "; ", summary).strip(" ;:")
    lines = [f"{code}: {summary}" if summary else f"{code}:"]
    lines.extend(f"  {field}: {description}" for field, description in violations)
    return "\n".join(lines)


def _fail(message: str, *, code: int = 1) -> NoReturn:
    _err.print(f"[red]error:[/red] {message}", highlight=False)
    raise typer.Exit(code)


def _call(
    coordinator: str, invoke: Callable[[coordinator_pb2_grpc.CoordinatorServiceStub], _T]
) -> _T:
    """Run one call; a failed call prints its status and field violations and exits."""
    with _stub(coordinator) as stub:
        try:
            return invoke(stub)
        except grpc.RpcError as err:
            details = error_details(err)
            if details.code == grpc.StatusCode.UNAVAILABLE and not details.reason:
                _fail(
                    f"cannot reach a coordinator at {coordinator} ({details.message}); start "
                    f"one (`make cluster-up`) or pass --coordinator / {COORDINATOR_ENV}"
                )
            violations = [(v.field, v.description) for v in details.field_violations]
            _fail(
                _error_text(details.code.name, details.message, violations),
                code=2 if details.code == grpc.StatusCode.INVALID_ARGUMENT else 1,
            )


def message_json(message: Message) -> dict[str, Any]:
    """`message` in the proto JSON mapping with proto field names and every field, zero
    values included (partition 0 keeps its ``partition`` key), as scripts expect."""
    document: dict[str, Any] = json_format.MessageToDict(
        message, always_print_fields_with_no_presence=True, preserving_proto_field_name=True
    )
    return document


def _print_json(document: Message | Mapping[str, Any]) -> None:
    shown = message_json(document) if isinstance(document, Message) else dict(document)
    sys.stdout.write(json.dumps(shown, indent=2) + "\n")


def _time(ts: timestamp_pb2.Timestamp) -> str:
    if not ts.seconds and not ts.nanos:
        return "-"
    return datetime.fromtimestamp(ts.ToMilliseconds() / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[
        :-3
    ]


def _enum(enum_type: Any, value: int) -> str:
    name: str = enum_type.Name(value)
    return name.split("_STATE_")[-1] if "_STATE_" in name else name


def _task(task_id: common_pb2.TaskId) -> str:
    return f"{task_id.pipeline_name}/{task_id.task_index}"


# ---------------------------------------------------------------------------------------
# lockgate cluster
# ---------------------------------------------------------------------------------------


@cluster_app.command("status")
def cluster_status(
    coordinator: CoordinatorOption = DEFAULT_COORDINATOR, as_json: JsonOption = False
) -> None:
    """Leader, epoch, every coordinator replica (role, state, last seen) and executors."""
    info = _call(
        coordinator,
        lambda s: s.GetClusterInfo(coordinator_pb2.GetClusterInfoRequest(), timeout=_TIMEOUT_S),
    )
    if as_json:
        _print_json(info)
        return
    if info.leader_epoch.leader_id:
        _out.print(
            f"leader [bold]{info.leader_epoch.leader_id}[/bold] at {info.leader_address}, "
            f"epoch {info.leader_epoch.epoch}, lease until {_time(info.lease_expire_time)} "
            f"(answered by {info.responder_id})"
        )
    else:
        _out.print(f"[yellow]no leader elected[/yellow] (answered by {info.responder_id})")
    members = Table("coordinator", "address", "role", "state", "last seen", title="Coordinators")
    for m in info.coordinators:
        members.add_row(
            m.coordinator_id,
            m.address,
            "leader" if m.is_leader else "follower",
            _enum(common_pb2.CoordinatorState, m.state),
            _time(m.last_seen_time),
        )
    _out.print(members)
    executors = Table(
        "executor", "address", "state", "generation", "tasks", "last heartbeat", title="Executors"
    )
    for e in info.executors:
        executors.add_row(
            e.executor_id,
            e.address,
            _enum(common_pb2.ExecutorState, e.state),
            str(e.executor_generation),
            str(len(e.tasks)),
            _time(e.last_heartbeat_time),
        )
    _out.print(executors)


# ---------------------------------------------------------------------------------------
# lockgate pipeline
# ---------------------------------------------------------------------------------------


@pipeline_app.command("create")
def pipeline_create(
    file: Annotated[
        Path, typer.Option("--file", "-f", help="Pipeline file (YAML or JSON).", exists=False)
    ],
    paused: Annotated[bool, typer.Option("--paused", help="Create it PAUSED.")] = False,
    coordinator: CoordinatorOption = DEFAULT_COORDINATOR,
    as_json: JsonOption = False,
) -> None:
    """Create a pipeline from a file; every invalid field is listed."""
    try:
        pipeline_file = read_pipeline_file(file)
    except SpecFileError as exc:
        _fail(str(exc), code=2)
    check_spec(pipeline_file.spec, written=pipeline_file.written)
    request = coordinator_pb2.CreatePipelineRequest(
        request_id=uuid.uuid4().hex,
        spec=pipeline_file.spec,
        initial_target_state=common_pb2.TARGET_STATE_PAUSED if paused else 0,  # type: ignore[arg-type]
    )
    response = _call(coordinator, lambda s: s.CreatePipeline(request, timeout=_TIMEOUT_S))
    if as_json:
        _print_json(response.pipeline)
        return
    _out.print(
        f"created pipeline [bold]{response.pipeline.name}[/bold] "
        f"(config version {response.pipeline.config_version}, "
        f"{_enum(common_pb2.TargetState, response.pipeline.target_state)})"
    )


@pipeline_app.command("list")
def pipeline_list(
    coordinator: CoordinatorOption = DEFAULT_COORDINATOR, as_json: JsonOption = False
) -> None:
    """Every pipeline, by name."""
    pipelines: list[common_pb2.Pipeline] = []
    token = ""
    while True:
        request = coordinator_pb2.ListPipelinesRequest(page_size=1000, page_token=token)
        page = _call(
            coordinator,
            lambda s, r=request: s.ListPipelines(r, timeout=_TIMEOUT_S),  # type: ignore[misc]
        )
        pipelines.extend(page.pipelines)
        token = page.next_page_token
        if not token:
            break
    if as_json:
        _print_json(coordinator_pb2.ListPipelinesResponse(pipelines=pipelines))
        return
    table = Table("name", "target", "version", "source", "sink", "tasks max", "updated")
    for p in pipelines:
        table.add_row(
            p.name,
            _enum(common_pb2.TargetState, p.target_state),
            str(p.config_version),
            ",".join(p.spec.source.kafka.topics),
            p.spec.sink.kafka.topic,
            str(p.spec.tasks_max),
            _time(p.update_time),
        )
    _out.print(table)


@pipeline_app.command("get")
def pipeline_get(
    name: NameArgument,
    coordinator: CoordinatorOption = DEFAULT_COORDINATOR,
    as_json: JsonOption = False,
) -> None:
    """A pipeline's spec, target state and config version."""
    response = _call(
        coordinator,
        lambda s: s.GetPipeline(coordinator_pb2.GetPipelineRequest(name=name), timeout=_TIMEOUT_S),
    )
    if as_json:
        _print_json(response.pipeline)
        return
    p = response.pipeline
    _out.print(
        f"[bold]{p.name}[/bold]: {_enum(common_pb2.TargetState, p.target_state)}, config "
        f"version {p.config_version}, updated {_time(p.update_time)}"
    )
    spec = json_format.MessageToDict(p.spec, preserving_proto_field_name=True)
    _out.print(yaml.safe_dump(spec, sort_keys=False), highlight=False)


@pipeline_app.command("status")
def pipeline_status(
    name: NameArgument,
    coordinator: CoordinatorOption = DEFAULT_COORDINATOR,
    as_json: JsonOption = False,
) -> None:
    """Target state, lag, records/s, each task's observed state and executor, latest
    checkpoints."""
    status = _call(
        coordinator,
        lambda s: s.GetPipelineStatus(
            coordinator_pb2.GetPipelineStatusRequest(name=name), timeout=_TIMEOUT_S
        ),
    )
    if as_json:
        _print_json(status)
        return
    in_flight = ", ".join(str(i) for i in status.in_flight_checkpoint_ids) or "none"
    _out.print(
        f"[bold]{status.name}[/bold]: target {_enum(common_pb2.TargetState, status.target_state)}"
        f", config version {status.config_version}; last complete checkpoint "
        f"{status.last_complete_checkpoint_id}, last committed "
        f"{status.last_committed_checkpoint_id} at {_time(status.last_commit_time)}; "
        f"in flight: {in_flight}"
    )
    _print_progress(status)
    table = Table("task", "state", "executor", "generation", "partitions", "last error")
    for t in status.tasks:
        table.add_row(
            _task(t.task_id),
            _enum(common_pb2.TaskState, t.state),
            t.executor_id or "-",
            str(t.task_generation),
            ", ".join(f"{p.topic}[{p.partition}]" for p in t.source_partitions),
            t.last_error.message or "",
        )
    _out.print(table)
    _print_last_abort(status)


def _print_progress(status: coordinator_pb2.GetPipelineStatusResponse) -> None:
    """Lag (total and per partition), records/s and the last committed checkpoint's age."""
    per_partition = ", ".join(f"{p.topic}[{p.partition}] {p.lag}" for p in status.source_lags)
    lag = f"lag {status.total_source_lag} records" + (
        f" ({per_partition})" if per_partition else ""
    )
    if not status.source_lag_complete:
        lag += " (Kafka did not answer for every source partition)"
    age = (
        f"{status.last_commit_age.ToMilliseconds() / 1000:.1f} s ago"
        if status.HasField("last_commit_age")
        else "never"
    )
    _out.print(
        f"{lag}; {status.records_per_second:.1f} records/s; last commit {age}",
        soft_wrap=True,
        highlight=False,
        markup=False,
    )


def _print_last_abort(status: coordinator_pb2.GetPipelineStatusResponse) -> None:
    """The newest abort: its reason, how many in a row, the tasks that did not pre-commit."""
    if not status.HasField("last_aborted_checkpoint"):
        return
    aborted = status.last_aborted_checkpoint
    in_a_row = status.consecutive_aborted_checkpoints
    since = (
        f"{in_a_row} aborted in a row since the last complete one"
        if in_a_row
        else "a checkpoint completed since"
    )
    # soft_wrap: a reason is one line a script can grep, whatever the terminal's width.
    _out.print(
        f"last abort: checkpoint {aborted.checkpoint_id} at {_time(aborted.abort_time)} "
        f"({since}): {aborted.abort_reason}",
        soft_wrap=True,
        highlight=False,
        markup=False,
    )
    for t in status.last_abort_missing_tasks:
        _out.print(
            f"  not pre-committed: task {_task(t.task_id)} on {t.executor_id or '-'}: "
            f"{t.error.message}",
            soft_wrap=True,
            highlight=False,
            markup=False,
        )


def _verb(
    name: str,
    coordinator: str,
    as_json: bool,
    invoke: Callable[[coordinator_pb2_grpc.CoordinatorServiceStub], Any],
    done: str,
) -> None:
    response = _call(coordinator, invoke)
    if as_json:
        _print_json(response)
        return
    _out.print(f"pipeline [bold]{name}[/bold] {done}")


@pipeline_app.command("pause")
def pipeline_pause(
    name: NameArgument,
    coordinator: CoordinatorOption = DEFAULT_COORDINATOR,
    as_json: JsonOption = False,
) -> None:
    """Take no new checkpoints; tasks stay assigned."""
    request = coordinator_pb2.PausePipelineRequest(request_id=uuid.uuid4().hex, name=name)
    _verb(
        name, coordinator, as_json, lambda s: s.PausePipeline(request, timeout=_TIMEOUT_S), "paused"
    )


@pipeline_app.command("resume")
def pipeline_resume(
    name: NameArgument,
    coordinator: CoordinatorOption = DEFAULT_COORDINATOR,
    as_json: JsonOption = False,
) -> None:
    """Run again (from PAUSED or STOPPED)."""
    request = coordinator_pb2.ResumePipelineRequest(request_id=uuid.uuid4().hex, name=name)
    _verb(
        name,
        coordinator,
        as_json,
        lambda s: s.ResumePipeline(request, timeout=_TIMEOUT_S),
        "resumed",
    )


@pipeline_app.command("stop")
def pipeline_stop(
    name: NameArgument,
    coordinator: CoordinatorOption = DEFAULT_COORDINATOR,
    as_json: JsonOption = False,
) -> None:
    """Release the tasks; offsets may be reset only when stopped."""
    request = coordinator_pb2.StopPipelineRequest(request_id=uuid.uuid4().hex, name=name)
    _verb(
        name, coordinator, as_json, lambda s: s.StopPipeline(request, timeout=_TIMEOUT_S), "stopped"
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
    coordinator: CoordinatorOption = DEFAULT_COORDINATOR,
    as_json: JsonOption = False,
) -> None:
    """Re-plan the tasks and, with --include-tasks, restart them."""
    request = coordinator_pb2.RestartPipelineRequest(
        request_id=uuid.uuid4().hex, name=name, include_tasks=include_tasks, only_failed=only_failed
    )
    response = _call(coordinator, lambda s: s.RestartPipeline(request, timeout=_TIMEOUT_S))
    if as_json:
        _print_json(response)
        return
    restarted = ", ".join(_task(t) for t in response.restarted_tasks) or "no tasks"
    _out.print(f"pipeline [bold]{name}[/bold] re-planned; restarted: {restarted}")


@pipeline_app.command("delete")
def pipeline_delete(
    name: NameArgument,
    coordinator: CoordinatorOption = DEFAULT_COORDINATOR,
    as_json: JsonOption = False,
) -> None:
    """Finish or abort its checkpoints, then remove it with its history."""
    request = coordinator_pb2.DeletePipelineRequest(request_id=uuid.uuid4().hex, name=name)
    _call(coordinator, lambda s: s.DeletePipeline(request, timeout=60.0))
    if as_json:
        # DeletePipelineResponse is empty: say what was deleted instead of printing `{}`.
        _print_json({"name": name, "deleted": True})
        return
    _out.print(f"pipeline [bold]{name}[/bold] deleted")


def _parse_offset(text: str) -> common_pb2.PartitionOffset:
    topic_partition, sep, offset = text.rpartition("=")
    topic, colon, partition = topic_partition.rpartition(":")
    if not sep or not colon or not partition.isdigit() or not offset.lstrip("-").isdigit():
        _fail(f"--set {text!r}: write TOPIC:PARTITION=OFFSET, e.g. orders:0=42", code=2)
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
) -> None:
    """Where each source partition resumes; --set resets them (pipeline STOPPED)."""
    if set_offsets:
        reset = coordinator_pb2.ResetOffsetsRequest(
            request_id=uuid.uuid4().hex,
            pipeline_name=name,
            offsets=coordinator_pb2.PartitionOffsets(
                offsets=[_parse_offset(t) for t in set_offsets]
            ),
        )
        _call(coordinator, lambda s: s.ResetOffsets(reset, timeout=_TIMEOUT_S))
    response = _call(
        coordinator,
        lambda s: s.GetOffsets(
            coordinator_pb2.GetOffsetsRequest(pipeline_name=name), timeout=_TIMEOUT_S
        ),
    )
    if as_json:
        _print_json(response)
        return
    source = (
        f"checkpoint {response.checkpoint_id}" if response.checkpoint_id else "a reset or none yet"
    )
    default = common_pb2.OffsetPosition.Name(response.default_position).removeprefix(
        "OFFSET_POSITION_"
    )
    _out.print(f"offsets of [bold]{name}[/bold] from {source}; other partitions: {default}")
    table = Table("topic", "partition", "next offset")
    for o in response.offsets:
        table.add_row(o.topic, str(o.partition), str(o.offset))
    _out.print(table)


@pipeline_app.command("checkpoints")
def pipeline_checkpoints(
    name: NameArgument,
    checkpoint_id: Annotated[
        int | None, typer.Option("--id", help="Show one checkpoint with its tasks.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", help="Most checkpoints to list.")] = 20,
    coordinator: CoordinatorOption = DEFAULT_COORDINATOR,
    as_json: JsonOption = False,
) -> None:
    """Checkpoint history, newest first, with timings (or one checkpoint with --id)."""
    if checkpoint_id is not None:
        one = _call(
            coordinator,
            lambda s: s.GetCheckpoint(
                coordinator_pb2.GetCheckpointRequest(
                    pipeline_name=name, checkpoint_id=checkpoint_id
                ),
                timeout=_TIMEOUT_S,
            ),
        )
        if as_json:
            _print_json(one.checkpoint)
            return
        _print_checkpoints([one.checkpoint])
        tasks = Table("task", "generation", "executor", "state")
        for t in one.checkpoint.tasks:
            tasks.add_row(
                _task(t.task_id),
                str(t.task_generation),
                t.executor_id,
                _enum(common_pb2.TaskCheckpointState, t.state),
            )
        _out.print(tasks)
        return
    if limit <= 0:
        _fail("--limit must be > 0", code=2)
    listed = _call(
        coordinator,
        lambda s: s.ListCheckpoints(
            coordinator_pb2.ListCheckpointsRequest(pipeline_name=name, page_size=limit),
            timeout=_TIMEOUT_S,
        ),
    )
    if as_json:
        _print_json(listed)
        return
    _print_checkpoints(list(listed.checkpoints))


def _print_checkpoints(checkpoints: list[common_pb2.Checkpoint]) -> None:
    table = Table(
        "id", "state", "epoch", "triggered", "pre-commit ms", "commit ms", "total ms", "reason"
    )
    for c in checkpoints:
        table.add_row(
            str(c.checkpoint_id),
            _enum(common_pb2.CheckpointState, c.state),
            str(c.leader_epoch.epoch),
            _time(c.trigger_time),
            str(c.precommit_duration_ms or "-"),
            str(c.commit_duration_ms or "-"),
            str(c.total_duration_ms or "-"),
            c.abort_reason,
        )
    _out.print(table)
