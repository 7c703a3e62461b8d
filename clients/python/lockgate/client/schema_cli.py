"""``lockgate schema ...``: the schema registry from the command line.

Speaks the registry's Confluent-compatible REST API, so it also works against Confluent
Schema Registry or Karapace. Readable tables by default, ``-o json|yaml`` (or ``--json``) for
scripts: the registry's answer as it is. The lead
wires ``app`` into the main CLI with ``app.add_typer(schema_cli.app, name="schema")``.

Exit status as every ``lockgate`` command: 0 on success, 2 for invalid input (a missing file,
HTTP 400 or 422: an invalid schema, version or compatibility level), 1 for other failures.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import httpx
import typer
from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table

from lockgate.client.output import (
    JsonOption,
    OutputFormat,
    OutputOption,
    chosen_format,
    print_document,
)
from lockgate.client.security_options import current_security

#: Where the local registry's REST API listens (``lockgate-schema-registry`` defaults;
#: ``https://`` when the CLI calls over TLS).
DEFAULT_REGISTRY = "http://127.0.0.1:8081"
REGISTRY_ENV = "LOCKGATE_SCHEMA_REGISTRY"
LEVELS = (
    "NONE",
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
)

app = typer.Typer(
    name="schema",
    help="Register, inspect and check Avro, JSON Schema and Protobuf schemas in the registry.",
    no_args_is_help=True,
)
_out = Console()
_err = Console(stderr=True)

TypeOption = Annotated[
    str | None,
    typer.Option(
        "--type",
        help="Schema type: AVRO (default), JSON or PROTOBUF (a .proto file is PROTOBUF).",
    ),
]
RegistryOption = Annotated[
    str,
    typer.Option(
        "--registry",
        envvar=REGISTRY_ENV,
        help=f"Registry REST URL (env {REGISTRY_ENV}).",
        show_default=True,
    ),
]
DeletedOption = Annotated[bool, typer.Option("--deleted", help="Include soft-deleted entries.")]


#: HTTP statuses that mean the request itself is invalid (Confluent: 42201 invalid schema,
#: 42202 invalid version, 42203 invalid compatibility level, ...): exit status 2, as every
#: `lockgate` command exits for invalid input.
_INVALID_INPUT_STATUSES = frozenset({400, 422})


class RegistryCallError(Exception):
    """The registry answered an error, or could not be reached; the message says which.

    ``invalid_input`` is true when the registry refused the request as invalid (HTTP 400 or
    422), as opposed to a missing subject, a conflict or an unreachable registry."""

    def __init__(self, message: str, *, invalid_input: bool = False) -> None:
        super().__init__(message)
        self.invalid_input = invalid_input


def _call(registry: str, method: str, path: str, **kwargs: Any) -> Any:
    """One REST call; Confluent errors and connection failures become RegistryCallError."""
    security = current_security()
    if registry == DEFAULT_REGISTRY and security.tls:
        registry = DEFAULT_REGISTRY.replace("http://", "https://", 1)
    url = registry.rstrip("/") + path
    headers = {"Content-Type": "application/vnd.schemaregistry.v1+json"}
    if security.token:
        headers["Authorization"] = f"Bearer {security.token}"
    try:
        response = httpx.request(
            method,
            url,
            headers=headers,
            timeout=30.0,
            verify=security.ssl_context() if security.tls else True,
            **kwargs,
        )
    except httpx.TransportError as exc:
        raise RegistryCallError(
            f"cannot reach the schema registry at {registry} ({exc}); start it with"
            " `lockgate-schema-registry` or pass --registry"
        ) from None
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.status_code >= 400:
        invalid = response.status_code in _INVALID_INPUT_STATUSES
        if isinstance(body, dict) and "message" in body:
            raise RegistryCallError(
                f"error {body.get('error_code')}: {body['message']}", invalid_input=invalid
            )
        raise RegistryCallError(f"HTTP {response.status_code} from {url}", invalid_input=invalid)
    return body


def _run(registry: str, method: str, path: str, **kwargs: Any) -> Any:
    try:
        return _call(registry, method, path, **kwargs)
    except RegistryCallError as exc:
        _err.print(f"[red]{exc}[/red]", highlight=False)
        raise typer.Exit(2 if exc.invalid_input else 1) from None


def _subject_path(subject: str) -> str:
    return "/subjects/" + quote(subject, safe="")


def _read_schema(source: str) -> str:
    """Schema text from a file path, ``-`` (stdin), or an inline JSON document."""
    if source == "-":
        return sys.stdin.read()
    if source.lstrip().startswith(("{", "[", '"')):
        return source
    path = Path(source)
    if not path.is_file():
        _err.print(
            f"[red]schema file {source!r} not found: pass a file path, '-' or inline JSON[/red]"
        )
        raise typer.Exit(2)
    return path.read_text(encoding="utf-8")


def _schema_body(schema: str, schema_type: str | None) -> dict[str, Any]:
    """The request body of a schema; the type from ``--type``, else from a ``.proto`` file."""
    body: dict[str, Any] = {"schema": _read_schema(schema)}
    chosen = schema_type or ("PROTOBUF" if schema.endswith(".proto") else None)
    if chosen is not None:
        body["schemaType"] = chosen.upper()
    return body


def _schema_syntax(answer: dict[str, Any]) -> Syntax:
    """A schema shown as what it is: Protobuf as .proto text, the others as indented JSON."""
    if answer.get("schemaType") == "PROTOBUF":
        return Syntax(str(answer["schema"]), "protobuf")
    return Syntax(json.dumps(json.loads(answer["schema"]), indent=2), "json")


def _show_version(answer: dict[str, Any]) -> None:
    table = Table(show_header=False, box=None)
    table.add_row("subject", str(answer.get("subject", "")))
    table.add_row("version", str(answer.get("version", "")))
    table.add_row("id", str(answer.get("id", "")))
    _out.print(table)
    _out.print(_schema_syntax(answer))


@app.command()
def register(
    subject: Annotated[str, typer.Argument(help="Subject, e.g. orders-value.")],
    schema: Annotated[
        str,
        typer.Argument(help="Schema: .avsc, .json or .proto file, '-' for stdin, or inline JSON."),
    ],
    schema_type: TypeOption = None,
    registry: RegistryOption = DEFAULT_REGISTRY,
    as_json: JsonOption = False,
    output: OutputOption = None,
) -> None:
    """Register a schema under a subject (idempotent); prints its global id."""
    fmt = chosen_format(output, as_json)
    answer = _run(
        registry,
        "POST",
        _subject_path(subject) + "/versions",
        json=_schema_body(schema, schema_type),
    )
    if fmt is not OutputFormat.TABLE:
        print_document(answer, fmt)
        return
    found = _run(registry, "POST", _subject_path(subject), json=_schema_body(schema, schema_type))
    _out.print(
        f"registered [bold]{subject}[/bold] version {found['version']} with id {answer['id']}"
    )


@app.command()
def get(
    subject: Annotated[str | None, typer.Argument(help="Subject (omit with --id).")] = None,
    version: Annotated[str, typer.Argument(help="Version number or 'latest'.")] = "latest",
    schema_id: Annotated[int | None, typer.Option("--id", help="Get by global schema id.")] = None,
    registry: RegistryOption = DEFAULT_REGISTRY,
    as_json: JsonOption = False,
    output: OutputOption = None,
) -> None:
    """Show one version of a subject, or a schema by id."""
    fmt = chosen_format(output, as_json)
    if schema_id is not None:
        answer = _run(registry, "GET", f"/schemas/ids/{schema_id}")
        if fmt is not OutputFormat.TABLE:
            print_document(answer, fmt)
        else:
            _out.print(f"id {schema_id}")
            _out.print(_schema_syntax(answer))
        return
    if subject is None:
        _err.print("[red]pass a SUBJECT (and optionally VERSION), or --id N[/red]")
        raise typer.Exit(2)
    answer = _run(registry, "GET", f"{_subject_path(subject)}/versions/{quote(version, safe='')}")
    if fmt is not OutputFormat.TABLE:
        print_document(answer, fmt)
    else:
        _show_version(answer)


@app.command()
def versions(
    subject: Annotated[str, typer.Argument(help="Subject.")],
    deleted: DeletedOption = False,
    registry: RegistryOption = DEFAULT_REGISTRY,
    as_json: JsonOption = False,
    output: OutputOption = None,
) -> None:
    """List a subject's versions with their schema ids."""
    fmt = chosen_format(output, as_json)
    numbers = _run(
        registry, "GET", f"{_subject_path(subject)}/versions", params={"deleted": deleted}
    )
    rows = [
        _run(registry, "GET", f"{_subject_path(subject)}/versions/{n}", params={"deleted": deleted})
        for n in numbers
    ]
    if fmt is not OutputFormat.TABLE:
        print_document(rows, fmt)
        return
    table = Table("version", "id", "fields")
    for row in rows:
        if row.get("schemaType") == "PROTOBUF":
            messages = re.findall(r"^message (\w+)", row["schema"], flags=re.MULTILINE)
            table.add_row(str(row["version"]), str(row["id"]), ", ".join(messages))
            continue
        document = json.loads(row["schema"])
        fields = document.get("fields") if isinstance(document, dict) else None
        summary = (
            ", ".join(f["name"] for f in fields) if isinstance(fields, list) else str(document)
        )
        table.add_row(str(row["version"]), str(row["id"]), summary)
    _out.print(table)


@app.command()
def subjects(
    deleted: DeletedOption = False,
    registry: RegistryOption = DEFAULT_REGISTRY,
    as_json: JsonOption = False,
    output: OutputOption = None,
) -> None:
    """List subjects."""
    fmt = chosen_format(output, as_json)
    names = _run(registry, "GET", "/subjects", params={"deleted": deleted})
    if fmt is not OutputFormat.TABLE:
        print_document(names, fmt)
        return
    table = Table("subject")
    for name in names:
        table.add_row(name)
    _out.print(table)


@app.command()
def check(
    subject: Annotated[str, typer.Argument(help="Subject.")],
    schema: Annotated[
        str,
        typer.Argument(help="Schema: .avsc, .json or .proto file, '-' for stdin, or inline JSON."),
    ],
    version: Annotated[
        str | None,
        typer.Option(
            "--version", help="Check against this version only (default: what the level names)."
        ),
    ] = None,
    schema_type: TypeOption = None,
    registry: RegistryOption = DEFAULT_REGISTRY,
    as_json: JsonOption = False,
    output: OutputOption = None,
) -> None:
    """Would the subject accept this schema? Exit status 0 yes, 1 no (reasons printed),
    2 if the schema itself is invalid."""
    fmt = chosen_format(output, as_json)
    path = f"/compatibility{_subject_path(subject)}/versions"
    if version is not None:
        path += "/" + quote(version, safe="")
    answer = _run(
        registry, "POST", path, params={"verbose": "true"}, json=_schema_body(schema, schema_type)
    )
    if fmt is not OutputFormat.TABLE:
        print_document(answer, fmt)
    elif answer["is_compatible"]:
        _out.print("[green]compatible[/green]")
    else:
        _out.print("[red]incompatible[/red]")
        for reason in answer.get("messages", []):
            _out.print(f"  - {reason}", highlight=False)
    if not answer["is_compatible"]:
        raise typer.Exit(1)


@app.command()
def config(
    subject: Annotated[
        str | None, typer.Argument(help="Subject (omit for the global level).")
    ] = None,
    set_level: Annotated[
        str | None, typer.Option("--set", help=f"New level: {', '.join(LEVELS)}.")
    ] = None,
    delete: Annotated[
        bool, typer.Option("--delete", help="Remove the subject's own level.")
    ] = False,
    registry: RegistryOption = DEFAULT_REGISTRY,
    as_json: JsonOption = False,
    output: OutputOption = None,
) -> None:
    """Show or change the compatibility level (global, or of one subject)."""
    fmt = chosen_format(output, as_json)
    path = "/config" + ("" if subject is None else "/" + quote(subject, safe=""))
    if set_level is not None and delete:
        _err.print("[red]use either --set LEVEL or --delete, not both[/red]")
        raise typer.Exit(2)
    if set_level is not None:
        answer = _run(registry, "PUT", path, json={"compatibility": set_level.upper()})
        level = answer["compatibility"]
    elif delete:
        answer = _run(registry, "DELETE", path)
        level = answer["compatibilityLevel"]
    else:
        answer = _run(registry, "GET", path, params={"defaultToGlobal": "true"})
        level = answer["compatibilityLevel"]
    if fmt is not OutputFormat.TABLE:
        print_document(answer, fmt)
    else:
        scope = "global" if subject is None else subject
        verb = "was" if delete else "is"
        _out.print(f"{scope}: compatibility {verb} [bold]{level}[/bold]")


@app.command()
def delete(
    subject: Annotated[str, typer.Argument(help="Subject.")],
    version: Annotated[
        str | None, typer.Option("--version", help="Delete one version only.")
    ] = None,
    permanent: Annotated[
        bool, typer.Option("--permanent", help="Hard-delete (must be soft-deleted first).")
    ] = False,
    registry: RegistryOption = DEFAULT_REGISTRY,
    as_json: JsonOption = False,
    output: OutputOption = None,
) -> None:
    """Soft-delete a subject or one version; --permanent removes a soft-deleted one."""
    fmt = chosen_format(output, as_json)
    path = _subject_path(subject)
    if version is not None:
        path += "/versions/" + quote(version, safe="")
    answer = _run(registry, "DELETE", path, params={"permanent": permanent})
    if fmt is not OutputFormat.TABLE:
        print_document(answer, fmt)
        return
    kind = "permanently deleted" if permanent else "soft-deleted"
    deleted_versions = answer if isinstance(answer, list) else [answer]
    _out.print(f"{kind} {subject} version(s) {', '.join(str(v) for v in deleted_versions)}")


def main() -> None:
    """Run the schema sub-app on its own (``python -m lockgate.client.schema_cli``)."""
    app(prog_name=os.environ.get("LOCKGATE_PROG", "lockgate schema"))


if __name__ == "__main__":
    main()
