"""The ``lockgate`` command's transport options, given before the sub-command.

    lockgate [--tls-ca CA] [--tls-client-cert C --tls-client-key K] [--token-file F]
             [--insecure] pipeline list

Each has an environment variable (``LOCKGATE_TLS_CA``, ``LOCKGATE_TLS_CLIENT_CERT``,
``LOCKGATE_TLS_CLIENT_KEY``, ``LOCKGATE_TOKEN_FILE``, ``LOCKGATE_INSECURE``; a token itself
also as ``LOCKGATE_TOKEN``). Without them the CLI finds the local cluster's CA and admin token
under ``$LOCKGATE_HOME/tls`` (``lockgate.common.security.client_security``), so after
``make cluster-up`` no flag is needed. ``--insecure`` calls in plaintext without a token
whatever else is set; ``LOCKGATE_INSECURE=1`` only stops the look in the home.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Annotated

import typer

from lockgate.client.output import fail
from lockgate.common.security import (
    INSECURE_ENV,
    TOKEN_ENV,
    ClientSecurity,
    SecurityConfigError,
    client_security,
)

_VARIABLES = {
    "tls_ca": "LOCKGATE_TLS_CA",
    "tls_client_cert": "LOCKGATE_TLS_CLIENT_CERT",
    "tls_client_key": "LOCKGATE_TLS_CLIENT_KEY",
    "token_file": "LOCKGATE_TOKEN_FILE",
}


def security_callback(
    tls_ca: Annotated[
        Path | None,
        typer.Option("--tls-ca", envvar="LOCKGATE_TLS_CA", help="CA (PEM) of the services."),
    ] = None,
    tls_client_cert: Annotated[
        Path | None,
        typer.Option(
            "--tls-client-cert", envvar="LOCKGATE_TLS_CLIENT_CERT", help="Client cert (mTLS)."
        ),
    ] = None,
    tls_client_key: Annotated[
        Path | None,
        typer.Option("--tls-client-key", envvar="LOCKGATE_TLS_CLIENT_KEY", help="Its key."),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            "--token-file", envvar="LOCKGATE_TOKEN_FILE", help="File holding a bearer token."
        ),
    ] = None,
    insecure: Annotated[
        bool,
        typer.Option("--insecure", help="Plaintext, no token (ignores $LOCKGATE_HOME/tls)."),
    ] = False,
) -> None:
    """Transport security for every call of the sub-command. The options are handed to the
    sub-command as their environment variables (typer keeps its context private), and
    checked here so a bad combination exits 2 before any call."""
    given = {
        "tls_ca": tls_ca,
        "tls_client_cert": tls_client_cert,
        "tls_client_key": tls_client_key,
        "token_file": token_file,
    }
    for name, value in given.items():
        if value is not None:
            os.environ[_VARIABLES[name]] = str(value)
    if insecure:
        # Plaintext without a token, whatever else the options or the variables say.
        for variable in (*_VARIABLES.values(), TOKEN_ENV):
            os.environ.pop(variable, None)
        os.environ[INSECURE_ENV] = "1"
    current_security()


def current_security() -> ClientSecurity:
    """The security of the ``lockgate`` command's calls (options, variables, home); exits 2
    naming the option when they cannot be used."""
    args = argparse.Namespace(
        **{
            name: Path(os.environ[variable]) if os.environ.get(variable) else None
            for name, variable in _VARIABLES.items()
        },
        insecure=False,
    )
    try:
        return client_security(args)
    except SecurityConfigError as exc:
        fail(str(exc), code=2)


__all__ = ["current_security", "security_callback"]
