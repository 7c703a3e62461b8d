"""Alembic environment: runs on the connection `migrate.upgrade_to_head` passes in."""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from lockgate.coordinator.store.migrate import VERSION_TABLE

connection = context.config.attributes.get("connection")
if not isinstance(connection, Connection):
    raise RuntimeError(
        "the coordinator's migrations run only through "
        "lockgate.coordinator.store.migrate.upgrade_to_head (no alembic.ini)"
    )
context.configure(
    connection=connection,
    target_metadata=None,
    version_table=VERSION_TABLE,
    render_as_batch=True,  # SQLite alters tables by copying them
)
with context.begin_transaction():
    context.run_migrations()
