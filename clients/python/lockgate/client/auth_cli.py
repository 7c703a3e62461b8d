"""``lockgate auth token create``: a new bearer token, shown once, hashed into the file.

    lockgate auth token create --principal alice --role admin [--file TOKENS.yaml]

appends ``{principal, roles, token_sha256}`` to the ``--auth-tokens`` file the services read
(default ``$LOCKGATE_HOME/tls/tokens.yaml``) and prints the token, which is stored nowhere
else: give it to the caller (``--token-file`` or ``$LOCKGATE_TOKEN``). Services read the
file at start, so restart them to accept the new token.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lockgate.client.output import fail
from lockgate.common.auth import append_token_entry
from lockgate.common.security import TLS_DIR, SecurityConfigError, default_home

app = typer.Typer(name="auth", help="Manage principals and tokens.", no_args_is_help=True)
token_app = typer.Typer(name="token", help="Bearer tokens.", no_args_is_help=True)
app.add_typer(token_app, name="token")


@token_app.command("create")
def create_token(
    principal: Annotated[str, typer.Option("--principal", help="Who the token is for.")],
    role: Annotated[
        list[str],
        typer.Option(
            "--role",
            help="Role (repeatable): admin, operator, viewer, executor, coordinator,"
            " schema-writer.",
        ),
    ],
    file: Annotated[
        Path | None,
        typer.Option(
            "--file", help="The --auth-tokens file (default $LOCKGATE_HOME/tls/tokens.yaml)."
        ),
    ] = None,
) -> None:
    """Print a new token for PRINCIPAL once and append its SHA-256 entry to the file."""
    path = file or default_home() / TLS_DIR / "tokens.yaml"
    try:
        token = append_token_entry(path, principal=principal, roles=role)
    except SecurityConfigError as exc:
        fail(str(exc), code=2)
    typer.echo(token)
    typer.echo(
        f"appended {principal} ({', '.join(role)}) to {path}; restart the services", err=True
    )
