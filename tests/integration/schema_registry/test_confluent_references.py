"""Avro schema references through Confluent's own Python clients, a real registry and broker."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from lockgate.schema_registry.serde import AvroSerde
from tests.integration.schema_registry.test_confluent_clients import consume
from tests.support.processes import RegistryProcess

ADDRESS = {
    "type": "record",
    "name": "Address",
    "namespace": "dev.lockgate.geo",
    "fields": [{"name": "city", "type": "string"}, {"name": "zip", "type": "string"}],
}
CUSTOMER = {
    "type": "record",
    "name": "Customer",
    "namespace": "dev.lockgate.shop",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "home", "type": "dev.lockgate.geo.Address"},
        {"name": "work", "type": ["null", "dev.lockgate.geo.Address"], "default": None},
    ],
}


def test_records_with_a_referenced_type_round_trip_through_kafka(
    sqlite_registry: RegistryProcess, kafka_broker: Any, new_topic: Callable[..., str]
) -> None:
    topic = new_topic()
    client = SchemaRegistryClient({"url": sqlite_registry.url})
    address_id = client.register_schema("address-value", Schema(json.dumps(ADDRESS), "AVRO"))
    reference = SchemaReference("dev.lockgate.geo.Address", "address-value", 1)
    customer = Schema(json.dumps(CUSTOMER), "AVRO", [reference])

    # The serializer resolves the reference and auto-registers the schema with it.
    serialize = AvroSerializer(client, customer)
    context = SerializationContext(topic, MessageField.VALUE)
    records = [
        {"name": "ada", "home": {"city": "London", "zip": "N1"}, "work": None},
        {
            "name": "bob",
            "home": {"city": "Paris", "zip": "75001"},
            "work": {"city": "Lyon", "zip": "69001"},
        },
    ]
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    for record in records:
        producer.produce(topic, value=serialize(record, context))
    producer.flush(30)

    # The deserializer finds the references through /schemas/ids/{id}, then the version.
    deserialize = AvroDeserializer(client)
    consumed = consume(kafka_broker.bootstrap_servers, topic, len(records))
    assert [deserialize(message.value(), context) for message in consumed] == records

    # Lockgate's own serde (the pipelines' avro format) asks for the resolved schema.
    serde = AvroSerde.for_registry(sqlite_registry.url)
    assert [serde.decode(message.value()) for message in consumed] == records

    registered = client.get_latest_version(f"{topic}-value")
    assert [(r.name, r.subject, r.version) for r in registered.schema.references] == [
        ("dev.lockgate.geo.Address", "address-value", 1)
    ]
    by_id = httpx.get(f"{sqlite_registry.url}/schemas/ids/{registered.schema_id}").json()
    assert by_id["references"] == [
        {"name": "dev.lockgate.geo.Address", "subject": "address-value", "version": 1}
    ]
    resolved = httpx.get(
        f"{sqlite_registry.url}/schemas/ids/{registered.schema_id}", params={"format": "resolved"}
    ).json()
    assert "references" not in resolved
    assert json.loads(resolved["schema"])["fields"][1]["type"]["name"] == "Address"
    assert client.lookup_schema(f"{topic}-value", customer).schema_id == registered.schema_id

    # referencedby lists the referrer; the referenced version cannot be deleted (42206).
    assert client.get_referenced_by("address-value", 1) == [registered.schema_id]
    with pytest.raises(SchemaRegistryError) as refused:
        client.delete_version("address-value", 1)
    assert (refused.value.http_status_code, refused.value.error_code) == (422, 42206)
    assert str(registered.schema_id) in refused.value.error_message
    with pytest.raises(SchemaRegistryError) as refused_subject:
        client.delete_subject("address-value")
    assert refused_subject.value.error_code == 42206
    assert client.get_schema(address_id).schema_str


def test_a_missing_reference_is_refused_with_42201_naming_it(
    sqlite_registry: RegistryProcess,
) -> None:
    client = SchemaRegistryClient({"url": sqlite_registry.url})
    missing = SchemaReference("dev.lockgate.geo.Address", "no-such-subject", 3)
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema("customer-value", Schema(json.dumps(CUSTOMER), "AVRO", [missing]))
    assert (refused.value.http_status_code, refused.value.error_code) == (422, 42201)
    assert "'no-such-subject' and version 3" in refused.value.error_message
    # A malformed reference is named too.
    answer = httpx.post(
        f"{sqlite_registry.url}/subjects/customer-value/versions",
        json={"schema": json.dumps(CUSTOMER), "references": [{"name": "x", "version": 1}]},
    )
    assert answer.status_code == 422
    assert answer.json()["error_code"] == 42201
    assert "reference #1 (x) has no 'subject'" in answer.json()["message"]
