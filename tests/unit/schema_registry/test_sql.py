"""The store's retried write transaction on a real SQLite file."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from lockgate.schema_registry.errors import StoreUnavailableError
from lockgate.schema_registry.registry import SchemaRegistry
from lockgate.schema_registry.sql import MAX_WRITE_ATTEMPTS


def test_a_write_that_keeps_conflicting_gives_up_without_leaking_sql(
    registry: SchemaRegistry,
) -> None:
    attempts: list[int] = []

    def always_conflicts(connection: Connection) -> None:
        attempts.append(1)
        raise sa.exc.IntegrityError(
            "INSERT INTO sr_schemas VALUES (%(secret)s)", {"secret": "the schema text"}, None
        )

    with pytest.raises(StoreUnavailableError) as gave_up:
        registry.store._write(always_conflicts)
    assert len(attempts) == MAX_WRITE_ATTEMPTS
    assert gave_up.value.error_code == 50001
    assert "INSERT" not in gave_up.value.message
    assert "the schema text" not in gave_up.value.message
