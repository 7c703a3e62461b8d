"""Confluent's own Python clients against Lockgate's registry and a real broker."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from lockgate.schema_registry.serde import AvroSerde
from tests.support.processes import RegistryProcess

USER_V1 = {
    "type": "record",
    "name": "User",
    "namespace": "dev.lockgate.example",
    "fields": [{"name": "name", "type": "string"}, {"name": "visits", "type": "int"}],
}
USER_V2 = {
    **USER_V1,
    "fields": [*USER_V1["fields"], {"name": "email", "type": "string", "default": "unknown"}],
}
USER_V3 = {**USER_V2, "fields": [*USER_V2["fields"], {"name": "age", "type": "int"}]}


def consume(bootstrap: str, topic: str, count: int, deadline_s: float = 60.0) -> list[Any]:
    """Read ``count`` raw records from the start of ``topic`` (fails past the deadline)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    records: list[Any] = []
    deadline = time.monotonic() + deadline_s
    try:
        while len(records) < count:
            assert time.monotonic() < deadline, f"only {len(records)} of {count} records arrived"
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            records.append(message)
    finally:
        consumer.close()
    return records


def test_serializer_round_trip_and_evolution(
    sqlite_registry: RegistryProcess, kafka_broker: Any, new_topic: Callable[..., str]
) -> None:
    topic = new_topic()
    subject = f"{topic}-value"
    client = SchemaRegistryClient({"url": sqlite_registry.url})
    context = SerializationContext(topic, MessageField.VALUE)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})

    # v1: the serializer auto-registers it.
    serialize_v1 = AvroSerializer(client, json.dumps(USER_V1))
    for i in range(5):
        producer.produce(topic, value=serialize_v1({"name": f"old{i}", "visits": i}, context))
    producer.flush(30)
    assert client.get_versions(subject) == [1]

    # v2 adds a field with a default: accepted under the default BACKWARD level.
    assert client.get_compatibility() == "BACKWARD"
    assert client.test_compatibility(subject, Schema(json.dumps(USER_V2), "AVRO"))
    v2_id = client.register_schema(subject, Schema(json.dumps(USER_V2), "AVRO"))
    serialize_v2 = AvroSerializer(
        client,
        json.dumps(USER_V2),
        conf={"auto.register.schemas": False, "use.latest.version": True},
    )
    for i in range(5):
        producer.produce(
            topic, value=serialize_v2({"name": f"new{i}", "visits": i, "email": f"n{i}@x"}, context)
        )
    producer.flush(30)

    latest = client.get_latest_version(subject)
    assert (latest.version, latest.schema_id) == (2, v2_id)

    # Old records decode with the v2 reader; new ones keep their email.
    records = consume(kafka_broker.bootstrap_servers, topic, 10)
    deserialize_v2 = AvroDeserializer(client, json.dumps(USER_V2))
    decoded = [deserialize_v2(r.value(), context) for r in records]
    assert decoded[:5] == [{"name": f"old{i}", "visits": i, "email": "unknown"} for i in range(5)]
    assert decoded[5:] == [{"name": f"new{i}", "visits": i, "email": f"n{i}@x"} for i in range(5)]
    # Without a reader schema each record decodes with its writer schema.
    plain = AvroDeserializer(client)
    assert plain(records[0].value(), context) == {"name": "old0", "visits": 0}
    # Lockgate's own serde reads Confluent's bytes the same way.
    serde = AvroSerde.for_registry(sqlite_registry.url, reader_schema=USER_V2)
    assert [serde.decode(r.value()) for r in records] == decoded

    # v3 adds a field without a default: refused with 409 and the reason.
    assert not client.test_compatibility(subject, Schema(json.dumps(USER_V3), "AVRO"))
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(subject, Schema(json.dumps(USER_V3), "AVRO"))
    assert refused.value.http_status_code == 409
    assert refused.value.error_code == 409
    assert "READER_FIELD_MISSING_DEFAULT_VALUE at /User/age" in refused.value.error_message
    assert "no default" in refused.value.error_message
    assert client.get_versions(subject) == [1, 2]


def test_client_admin_calls(sqlite_registry: RegistryProcess) -> None:
    client = SchemaRegistryClient({"url": sqlite_registry.url})
    subject = "orders/eu-value"  # a '/' travels URL-encoded
    schema = Schema(json.dumps(USER_V1), "AVRO")
    schema_id = client.register_schema(subject, schema)
    assert subject in client.get_subjects()
    found = client.lookup_schema(subject, schema)
    assert (found.schema_id, found.version) == (schema_id, 1)
    fetched = client.get_version(subject, 1).schema.schema_str
    assert json.loads(client.get_schema(schema_id).schema_str or "") == json.loads(fetched or "")
    assert json.loads(fetched or "") == USER_V1
    assert client.get_schema_types() == ["AVRO", "JSON", "PROTOBUF"]
    assert client.get_subjects_by_schema_id(schema_id) == [subject]
    assert client.get_schema_versions(schema_id)[0].subject == subject

    # The client's annotation says str; the REST answer (Confluent's too) is an object.
    answer: Any = client.set_compatibility(subject, "full_transitive")
    assert answer == {"compatibility": "FULL_TRANSITIVE"}
    assert client.get_compatibility(subject) == "FULL_TRANSITIVE"
    level = client.get_config(subject).compatibility_level
    assert level is not None and level.value == "FULL_TRANSITIVE"
    client.delete_config(subject)
    with pytest.raises(SchemaRegistryError) as no_config:
        client.get_compatibility(subject)
    assert no_config.value.error_code == 40408

    assert client.delete_version(subject, 1) == 1
    with pytest.raises(SchemaRegistryError) as gone:
        client.get_version(subject, 1)
    assert gone.value.error_code in (40401, 40402)
    assert client.get_schema(schema_id).schema_str  # ids stay resolvable
    client.register_schema(subject, schema)
    assert client.delete_subject(subject) == [2]
    assert client.delete_subject(subject, permanent=True) == [1, 2]
    assert subject not in client.get_subjects()
    assert client.get_global_mode() == "READWRITE"
