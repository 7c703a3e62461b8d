"""Alembic environment: runs on the connection ``store.migrate`` hands over, never its own."""

from __future__ import annotations

from alembic import context

from lockgate.schema_registry.tables import metadata

#: Own version table so the registry can share a database with the coordinator's migrations.
VERSION_TABLE = "sr_alembic_version"


def run_migrations() -> None:
    """Run the pending migrations on the connection passed in ``config.attributes``."""
    connection = context.config.attributes["connection"]
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


run_migrations()
