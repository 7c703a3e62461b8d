"""The ``lockgate`` command: one entry point whose sub-commands speak to each service.

- ``lockgate schema ...``   the schema registry (its Confluent-compatible REST API)
- ``lockgate cluster ...``  the coordinators: leader, epoch, members, executors
- ``lockgate pipeline ...`` pipelines: create, list, status, pause/resume/stop/restart, offsets
- ``lockgate auth ...``     tokens for the services' ``--auth-tokens`` file

Transport options (``--tls-ca``, ``--token-file``, ``--insecure``, ...) come before the
sub-command (``security_options.py``).
"""

from __future__ import annotations

import typer

from lockgate.client import auth_cli, coordinator_cli, schema_cli
from lockgate.client.security_options import security_callback

app = typer.Typer(
    name="lockgate",
    help="Lockgate: exactly-once Kafka -> PySpark -> Kafka pipelines.",
    no_args_is_help=True,
    callback=security_callback,
)
app.add_typer(schema_cli.app, name="schema")
app.add_typer(auth_cli.app, name="auth")
app.add_typer(coordinator_cli.cluster_app, name="cluster")
app.add_typer(coordinator_cli.pipeline_app, name="pipeline")


def main() -> None:
    """Run the ``lockgate`` command line."""
    app()


if __name__ == "__main__":
    main()
