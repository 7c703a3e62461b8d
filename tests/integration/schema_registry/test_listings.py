"""Subject and schema listings (deleted, deletedOnly, subjectPrefix, offset/limit, /schemas)
through Confluent's SchemaRegistryClient and plain REST."""

from __future__ import annotations

import json

import httpx
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from tests.support.processes import RegistryProcess

USER = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]}


def test_deleted_only_listings(sqlite_registry: RegistryProcess) -> None:
    client = SchemaRegistryClient({"url": sqlite_registry.url})
    client.register_schema("kept", Schema(json.dumps(USER), "AVRO"))
    client.register_schema("half", Schema(json.dumps(USER), "AVRO"))
    client.register_schema("half", Schema(json.dumps(USER | {"doc": "2"}), "AVRO"))
    client.delete_version("half", 1)
    client.register_schema("gone", Schema(json.dumps(USER), "AVRO"))
    client.delete_subject("gone")
    assert client.get_versions("half", deleted_only=True) == [1]
    assert client.get_versions("half", deleted=True) == [1, 2]
    assert client.get_versions("half") == [2]
    listed = httpx.get(f"{sqlite_registry.url}/subjects", params={"deletedOnly": "true"})
    assert listed.json() == ["gone"]
    assert sorted(client.get_subjects(deleted=True)) == ["gone", "half", "kept"]


def test_subject_prefix_offset_limit_and_schemas_listing(sqlite_registry: RegistryProcess) -> None:
    client = SchemaRegistryClient({"url": sqlite_registry.url})
    for subject in ("a-value", "b-key", "b-value", "c-value"):
        client.register_schema(subject, Schema(json.dumps(USER | {"doc": subject}), "AVRO"))
    assert client.get_subjects(subject_prefix="b-") == ["b-key", "b-value"]
    assert client.get_subjects(offset=1, limit=2) == ["b-key", "b-value"]
    schemas = httpx.get(
        f"{sqlite_registry.url}/schemas", params={"subjectPrefix": "b-", "latestOnly": "true"}
    ).json()
    assert [(s["subject"], s["version"]) for s in schemas] == [("b-key", 1), ("b-value", 1)]
    assert json.loads(schemas[0]["schema"])["doc"] == "b-key"
    bad = httpx.get(f"{sqlite_registry.url}/subjects", params={"limit": "many"})
    assert (bad.status_code, bad.json()["error_code"]) == (400, 400)
    assert "limit='many'" in bad.json()["message"]
