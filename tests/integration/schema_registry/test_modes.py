"""/mode through Confluent's SchemaRegistryClient and an import with explicit ids, over REST."""

from __future__ import annotations

import json

import httpx
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from tests.support.processes import RegistryProcess

USER = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]}


def test_modes_over_rest(sqlite_registry: RegistryProcess) -> None:
    client = SchemaRegistryClient({"url": sqlite_registry.url})
    schema = Schema(json.dumps(USER), "AVRO")
    client.register_schema("users-value", schema)

    # READONLY on one subject: its registrations and deletes are 42205; others go on.
    assert client.update_mode("users-value", "READONLY") == "READONLY"
    assert client.get_mode("users-value") == "READONLY"
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema("users-value", Schema(json.dumps({**USER, "doc": "x"}), "AVRO"))
    assert (refused.value.http_status_code, refused.value.error_code) == (422, 42205)
    with pytest.raises(SchemaRegistryError) as refused_delete:
        client.delete_subject("users-value")
    assert refused_delete.value.error_code == 42205
    assert client.register_schema("orders-value", schema)
    assert client.delete_mode("users-value") == "READONLY"
    with pytest.raises(SchemaRegistryError) as no_mode:
        client.get_mode("users-value")
    assert no_mode.value.error_code == 40409

    # IMPORT needs an empty registry (or force), then keeps the ids it is given.
    with pytest.raises(SchemaRegistryError) as not_empty:
        client.update_global_mode("IMPORT")
    assert not_empty.value.error_code == 42205
    assert client.update_mode("imported-value", "IMPORT") == "IMPORT"
    body = {"schema": json.dumps(USER | {"name": "Imported"}), "id": 4242, "version": 7}
    answer = httpx.post(f"{sqlite_registry.url}/subjects/imported-value/versions", json=body)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"id": 4242}
    assert client.get_version("imported-value", 7).schema_id == 4242
    assert json.loads(client.get_schema(4242).schema_str or "")["name"] == "Imported"
    clash = {"schema": json.dumps(USER | {"name": "Other"}), "id": 4242}
    refused_id = httpx.post(f"{sqlite_registry.url}/subjects/imported-value/versions", json=clash)
    assert refused_id.status_code == 422
    assert refused_id.json()["error_code"] == 42207

    # An id outside IMPORT, and a mode that does not exist, are refused by name.
    outside = httpx.post(
        f"{sqlite_registry.url}/subjects/users-value/versions",
        json={"schema": json.dumps(USER), "id": 9},
    )
    assert outside.json()["error_code"] == 42205
    assert "not in import mode" in outside.json()["message"]
    with pytest.raises(SchemaRegistryError) as bad_mode:
        client.update_global_mode("SOMETIMES")
    assert bad_mode.value.error_code == 42204
    assert client.get_global_mode() == "READWRITE"
