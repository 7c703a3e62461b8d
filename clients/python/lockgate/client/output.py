"""How the ``lockgate`` commands print: the one rendering home of the CLI.

Every command that prints an answer takes ``-o/--output table|json|yaml``: ``table`` (the
default) is for people, ``json`` and ``yaml`` are for scripts and hold every field, zero
values included (partition 0 keeps its ``partition`` key). ``--json`` is kept as an alias of
``-o json``.
"""

from __future__ import annotations

import enum
import json
import re
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, NoReturn

import typer
import yaml
from google.protobuf import json_format, timestamp_pb2
from google.protobuf.message import Message
from rich.console import Console

from lockgate.v1 import common_pb2

out = Console()
err = Console(stderr=True)


class OutputFormat(enum.StrEnum):
    """What ``-o`` asks for."""

    TABLE = "table"
    JSON = "json"
    YAML = "yaml"


OutputOption = Annotated[
    OutputFormat | None,
    typer.Option(
        "--output",
        "-o",
        case_sensitive=False,
        help="table (default), json or yaml; json and yaml print every field.",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="The same as -o json.")]


def timestamp_text(ts: timestamp_pb2.Timestamp) -> str:
    """A timestamp in UTC to the millisecond, or ``-`` when unset."""
    if not ts.seconds and not ts.nanos:
        return "-"
    moment = datetime.fromtimestamp(ts.ToMilliseconds() / 1000, UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def state_name(enum_type: Any, value: int) -> str:
    """An enum value without its type's prefix (``TASK_STATE_RUNNING`` -> ``RUNNING``)."""
    name: str = enum_type.Name(value)
    return name.split("_STATE_")[-1] if "_STATE_" in name else name


def task_text(task_id: common_pb2.TaskId) -> str:
    """``pipeline/index``."""
    return f"{task_id.pipeline_name}/{task_id.task_index}"


def age_text(ts: timestamp_pb2.Timestamp, now: datetime) -> str:
    """How long ago ``ts`` was (``4.2 s ago``), or ``never`` when unset."""
    if not ts.seconds and not ts.nanos:
        return "never"
    seconds = max(0.0, now.timestamp() - ts.ToMilliseconds() / 1000)
    return f"{seconds:.1f} s ago" if seconds < 120 else f"{seconds / 60:.1f} min ago"


def fail(message: str, *, code: int = 1) -> NoReturn:
    """Print ``error: message`` on stderr and exit with ``code`` (2: bad input)."""
    err.print(f"[red]error:[/red] {message}", highlight=False)
    raise typer.Exit(code)


def chosen_format(output: OutputFormat | None, as_json: bool) -> OutputFormat:
    """The format of ``-o`` and its ``--json`` alias (both: they must agree, exit 2)."""
    if as_json and output not in (None, OutputFormat.JSON):
        fail(f"--json and -o {output} disagree; pass one of them", code=2)
    if as_json:
        return OutputFormat.JSON
    return output or OutputFormat.TABLE


def message_json(message: Message) -> dict[str, Any]:
    """`message` in the proto JSON mapping with proto field names and every field, zero
    values included, as scripts expect."""
    document: dict[str, Any] = json_format.MessageToDict(
        message, always_print_fields_with_no_presence=True, preserving_proto_field_name=True
    )
    return document


def error_text(code: str, message: str, violations: Sequence[tuple[str, str]]) -> str:
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


def render_document(document: Message | Any, fmt: OutputFormat, *, stream: bool = False) -> str:
    """A message or a JSON value as JSON or YAML text, ending with a newline. ``stream``: one
    of a sequence (``--watch``): JSON on one line (JSON Lines), YAML starting with ``---``."""
    shown = message_json(document) if isinstance(document, Message) else document
    if fmt is OutputFormat.YAML:
        return yaml.safe_dump(shown, sort_keys=False, explicit_start=stream)
    if stream:
        return json.dumps(shown, separators=(",", ":")) + "\n"
    return json.dumps(shown, indent=2) + "\n"


def print_document(document: Message | Any, fmt: OutputFormat, *, stream: bool = False) -> None:
    """Write a document as `fmt` to stdout (plain text: a script gets it whatever the
    terminal's width)."""
    sys.stdout.write(render_document(document, fmt, stream=stream))
    if stream:
        sys.stdout.flush()


__all__ = [
    "JsonOption",
    "OutputFormat",
    "OutputOption",
    "age_text",
    "chosen_format",
    "err",
    "error_text",
    "fail",
    "message_json",
    "out",
    "print_document",
    "render_document",
    "state_name",
    "task_text",
    "timestamp_text",
]
