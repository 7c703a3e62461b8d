"""JSON Schema through Confluent's JSONSerializer and JSONDeserializer, a registry and a broker."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.integration.schema_registry.test_confluent_clients import consume
from tests.support.processes import RegistryProcess

#: A closed content model: under BACKWARD it may gain optional properties, not lose them.
ORDER_V1 = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Order",
    "type": "object",
    "properties": {"id": {"type": "integer"}, "item": {"type": "string"}},
    "required": ["id", "item"],
    "additionalProperties": False,
}
ORDER_V2 = {**ORDER_V1, "properties": {**ORDER_V1["properties"], "note": {"type": "string"}}}
#: Drops "item" (closed model) and makes "id" a string: refused under BACKWARD.
ORDER_BAD = {**ORDER_V1, "properties": {"id": {"type": "string"}}, "required": ["id"]}


def test_json_records_round_trip_and_evolve(
    sqlite_registry: RegistryProcess, kafka_broker: Any, new_topic: Callable[..., str]
) -> None:
    topic = new_topic()
    subject = f"{topic}-value"
    client = SchemaRegistryClient({"url": sqlite_registry.url})
    context = SerializationContext(topic, MessageField.VALUE)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})

    # v1: the serializer auto-registers it (schemaType JSON).
    serialize_v1 = JSONSerializer(json.dumps(ORDER_V1), client)
    old = [{"id": i, "item": f"book{i}"} for i in range(3)]
    for record in old:
        producer.produce(topic, value=serialize_v1(record, context))
    producer.flush(30)
    # (get_version, not get_latest_version: the client would cache "latest" as v1.)
    registered = client.get_version(subject, 1)
    assert registered.schema.schema_type == "JSON"

    # v2 adds an optional property to the closed model: accepted at BACKWARD.
    assert client.get_compatibility() == "BACKWARD"
    assert client.test_compatibility(subject, Schema(json.dumps(ORDER_V2), "JSON"))
    v2_id = client.register_schema(subject, Schema(json.dumps(ORDER_V2), "JSON"))
    serialize_v2 = JSONSerializer(
        json.dumps(ORDER_V2),
        client,
        conf={"auto.register.schemas": False, "use.latest.version": True},
    )
    new = [{"id": 10 + i, "item": "pen", "note": f"n{i}"} for i in range(2)]
    for record in new:
        producer.produce(topic, value=serialize_v2(record, context))
    producer.flush(30)

    # Each record decodes with its writer schema, fetched by id from the facade.
    deserialize = JSONDeserializer(None, schema_registry_client=client)
    records = consume(kafka_broker.bootstrap_servers, topic, len(old) + len(new))
    assert [deserialize(r.value(), context) for r in records] == old + new
    assert int.from_bytes(records[-1].value()[1:5], "big") == v2_id

    # The same schema with other key order and whitespace is the same id.
    shuffled = json.dumps(dict(reversed(list(ORDER_V2.items()))), indent=2)
    assert client.register_schema(subject, Schema(shuffled, "JSON")) == v2_id

    # An incompatible change is refused with 409 and every reason.
    assert not client.test_compatibility(subject, Schema(json.dumps(ORDER_BAD), "JSON"))
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(subject, Schema(json.dumps(ORDER_BAD), "JSON"))
    assert (refused.value.http_status_code, refused.value.error_code) == (409, 409)
    message = refused.value.error_message
    assert "TYPE_CHANGED at #/properties/id" in message
    assert "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL at #/properties/item" in message
    assert client.get_versions(subject) == [1, 2]
    assert client.get_schema_types() == ["AVRO", "JSON", "PROTOBUF"]


def test_json_ref_to_another_subject_and_bad_schemas(
    sqlite_registry: RegistryProcess, kafka_broker: Any, new_topic: Callable[..., str]
) -> None:
    topic = new_topic()
    client = SchemaRegistryClient({"url": sqlite_registry.url})
    address = {"type": "object", "properties": {"city": {"type": "string"}}}
    client.register_schema("address-json", Schema(json.dumps(address), "JSON"))
    customer = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "home": {"$ref": "address.json"}},
    }
    schema = Schema(
        json.dumps(customer), "JSON", [SchemaReference("address.json", "address-json", 1)]
    )
    serialize = JSONSerializer(schema, client)
    context = SerializationContext(topic, MessageField.VALUE)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    record = {"name": "ada", "home": {"city": "London"}}
    producer.produce(topic, value=serialize(record, context))
    producer.flush(30)
    deserialize = JSONDeserializer(None, schema_registry_client=client)
    [message] = consume(kafka_broker.bootstrap_servers, topic, 1)
    assert deserialize(message.value(), context) == record

    # Not a valid JSON Schema: 42201 naming the keyword.
    answer = httpx.post(
        f"{sqlite_registry.url}/subjects/bad-json/versions",
        json={"schema": json.dumps({"type": "strng"}), "schemaType": "JSON"},
    )
    assert answer.status_code == 422
    assert answer.json()["error_code"] == 42201
    assert "not a valid JSON Schema at /type" in answer.json()["message"]


#: Adding an optional property to a closed model: the old schema's documents all fit the new
#: one (BACKWARD), but a new document with "note" breaks the old one (FORWARD) — Confluent's
#: OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL / PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL.
LEVEL_VERDICTS = {
    "NONE": True,
    "BACKWARD": True,
    "BACKWARD_TRANSITIVE": True,
    "FORWARD": False,
    "FORWARD_TRANSITIVE": False,
    "FULL": False,
    "FULL_TRANSITIVE": False,
}


def test_the_same_evolution_at_each_compatibility_level(sqlite_registry: RegistryProcess) -> None:
    client = SchemaRegistryClient({"url": sqlite_registry.url})
    for level, accepted in LEVEL_VERDICTS.items():
        subject = f"orders-{level.lower()}"
        client.register_schema(subject, Schema(json.dumps(ORDER_V1), "JSON"))
        client.set_compatibility(subject, level)
        candidate = Schema(json.dumps(ORDER_V2), "JSON")
        assert client.test_compatibility(subject, candidate) is accepted, level
        if accepted:
            assert client.register_schema(subject, candidate)
            assert client.get_versions(subject) == [1, 2]
            continue
        with pytest.raises(SchemaRegistryError) as refused:
            client.register_schema(subject, candidate)
        assert refused.value.error_code == 409, level
        assert "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL at #/properties/note" in (
            refused.value.error_message
        ), level
