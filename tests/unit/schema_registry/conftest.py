"""A registry on a fresh SQLite file for the unit tests of its operations."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lockgate.schema_registry.registry import SchemaRegistry
from lockgate.schema_registry.sql import create_db_engine
from lockgate.schema_registry.store import SchemaStore


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[SchemaRegistry]:
    """A registry on a fresh SQLite file, migrated."""
    store = SchemaStore(create_db_engine(f"sqlite:///{tmp_path / 'registry.db'}"))
    store.migrate()
    yield SchemaRegistry(store)
    store.close()
