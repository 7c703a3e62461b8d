"""The Alembic migrations create exactly the schema `tables.py` declares.

For the coordinator (`coordinator/store/migrations` vs `coordinator/store/tables.py`) and
the schema registry (`schema_registry/migrations` vs `schema_registry/tables.py`): an
empty database is upgraded to head, then compared with the declared metadata by Alembic's
own autogenerate comparison (tables, columns and their types and nullability, indexes,
unique and foreign-key constraints). Each runs on SQLite and on a real PostgreSQL, as the
products do. A change to one side without the other fails here, not in production.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.engine import Engine

from lockgate.coordinator.store import migrate as coordinator_migrate
from lockgate.coordinator.store.engine import create_engine as coordinator_engine
from lockgate.coordinator.store.tables import metadata as coordinator_metadata
from lockgate.schema_registry.sql import create_db_engine
from lockgate.schema_registry.store import SchemaStore
from lockgate.schema_registry.tables import metadata as registry_metadata

REGISTRY_VERSIONS = "sr_alembic_version"
"""The registry's Alembic version table, as `schema_registry/migrations/env.py` names it
(that module runs the migrations when imported, so it is not imported here; a wrong name
shows up below as a table to remove)."""


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database: a SQLite file, or a new PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'migrations.db'}"
    request.applymarker(pytest.mark.postgres)
    url: str = request.getfixturevalue("postgres_url")
    return url


def schema_differences(engine: Engine, metadata: sa.MetaData, *, version_table: str) -> list[Any]:
    """What would make the database's schema equal `metadata` (Alembic's autogenerate
    diff), leaving out Alembic's own version table."""

    def declared_or_ours(obj: Any, name: str | None, kind: str, reflected: bool, _: Any) -> bool:
        return not (kind == "table" and name == version_table)

    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "include_object": declared_or_ours}
        )
        return list(compare_metadata(context, metadata))


def migrated_coordinator(url: str) -> Engine:
    engine = coordinator_engine(url, timeouts=None)
    coordinator_migrate.upgrade_to_head(engine)
    return engine


def migrated_registry(url: str) -> Engine:
    store = SchemaStore(create_db_engine(url))
    store.migrate()
    return store.engine


SERVICES: dict[str, tuple[Callable[[str], Engine], sa.MetaData, str]] = {
    "coordinator": (migrated_coordinator, coordinator_metadata, coordinator_migrate.VERSION_TABLE),
    "schema_registry": (migrated_registry, registry_metadata, REGISTRY_VERSIONS),
}


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_migrations_create_exactly_the_declared_tables(database_url: str, service: str) -> None:
    migrated, metadata, version_table = SERVICES[service]
    engine = migrated(database_url)
    try:
        assert schema_differences(engine, metadata, version_table=version_table) == []
    finally:
        engine.dispose()


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_the_comparison_sees_a_drift(database_url: str, service: str) -> None:
    """The check is live: a table and a column declared but never migrated are reported."""
    migrated, metadata, version_table = SERVICES[service]
    drifted = sa.MetaData()
    for table in metadata.tables.values():
        table.to_metadata(drifted)
    first = drifted.tables[sorted(drifted.tables)[0]]
    first.append_column(sa.Column("added_without_migration", sa.Integer, nullable=True))
    sa.Table("declared_without_migration", drifted, sa.Column("id", sa.Integer, primary_key=True))
    engine = migrated(database_url)
    try:
        found = schema_differences(engine, drifted, version_table=version_table)
    finally:
        engine.dispose()
    kinds = {(d[0], d[3].name if d[0] == "add_column" else d[1].name) for d in found}
    assert kinds == {
        ("add_column", "added_without_migration"),
        ("add_table", "declared_without_migration"),
    }
