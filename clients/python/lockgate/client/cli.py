"""The ``lockgate`` command: one entry point whose sub-commands speak to each service.

- ``lockgate schema ...``   the schema registry (its Confluent-compatible REST API)
- ``lockgate cluster ...``  the coordinators: leader, epoch, members, executors
- ``lockgate pipeline ...`` pipelines: create, list, status, pause/resume/stop/restart, offsets
"""

from __future__ import annotations

import typer

from lockgate.client import coordinator_cli, schema_cli

app = typer.Typer(
    name="lockgate",
    help="Lockgate: exactly-once Kafka -> PySpark -> Kafka pipelines.",
    no_args_is_help=True,
)
app.add_typer(schema_cli.app, name="schema")
app.add_typer(coordinator_cli.cluster_app, name="cluster")
app.add_typer(coordinator_cli.pipeline_app, name="pipeline")


def main() -> None:
    """Run the ``lockgate`` command line."""
    app()


if __name__ == "__main__":
    main()
