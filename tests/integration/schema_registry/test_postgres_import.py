"""IMPORT mode on PostgreSQL: imported ids move the id sequence, so later ids do not collide."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from lockgate.schema_registry.sql import MAX_WRITE_ATTEMPTS
from tests.support.processes import RegistryProcess

pytestmark = [pytest.mark.postgres]


def record(name: str) -> str:
    """A one-field Avro record named ``name``."""
    return json.dumps({"type": "record", "name": name, "fields": [{"name": "a", "type": "int"}]})


def test_ids_after_an_import_continue_above_the_imported_ones(
    postgres_url: str, registry_factory: Callable[..., RegistryProcess]
) -> None:
    registry = registry_factory(postgres_url)
    url = registry.url
    assert httpx.put(f"{url}/mode/imported", json={"mode": "IMPORT"}).status_code == 200
    # More imported ids in a row than a write is retried (MAX_WRITE_ATTEMPTS): a sequence
    # left behind them would fail the next registration, not only slow it.
    imported = MAX_WRITE_ATTEMPTS + 10
    for schema_id in range(1, imported + 1):
        answer = httpx.post(
            f"{url}/subjects/imported/versions",
            json={"schema": record(f"I{schema_id}"), "id": schema_id},
        )
        assert answer.json() == {"id": schema_id}, answer.text
    # A registration that lets the database choose gets the next id, not the sequence's 1.
    fresh = httpx.post(f"{url}/subjects/fresh/versions", json={"schema": record("F")})
    assert fresh.status_code == 200, fresh.text
    assert fresh.json() == {"id": imported + 1}
