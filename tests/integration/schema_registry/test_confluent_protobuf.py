"""Protobuf through Confluent's ProtobufSerializer/ProtobufDeserializer, a registry and a broker.

The message classes are compiled at test time (``tests.support.protobuf``); the serializer
registers the imported ``money.proto`` under its own subject and the order schema with a
reference to it, both as base64 descriptors, and the deserializer fetches them back with
``format=serialized``.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2

from tests.integration.schema_registry.test_confluent_clients import consume
from tests.support.processes import RegistryProcess
from tests.support.protobuf import compile_protos, message_class

MONEY = """syntax = "proto3";
package acme.common;
message Money { int64 units = 1; string currency = 2; }
"""
ORDER_V1 = """syntax = "proto3";
package acme;
import "money.proto";
message Order { string id = 1; acme.common.Money total = 2; }
"""
#: Adds a field: compatible both ways (Confluent's FIELD_ADDED).
ORDER_V2 = ORDER_V1.replace("total = 2;", "total = 2; string note = 3;")
#: "id" becomes a number and "total" a string: refused at every level but NONE.
ORDER_BAD = ORDER_V1.replace(
    "string id = 1; acme.common.Money total = 2;", "int64 id = 1; string total = 2;"
)


def test_protobuf_records_round_trip_with_a_reference_and_evolve(
    sqlite_registry: RegistryProcess,
    kafka_broker: Any,
    new_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    topic = new_topic()
    subject = f"{topic}-value"
    client = SchemaRegistryClient({"url": sqlite_registry.url})
    context = SerializationContext(topic, MessageField.VALUE)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    v1 = compile_protos(tmp_path, {"money.proto": MONEY, "order.proto": ORDER_V1})
    order_v1, money = message_class(v1, "acme.Order"), message_class(v1, "acme.common.Money")

    # v1: the serializer registers money.proto (subject "money.proto") and the order with a
    # reference to it, both as base64 FileDescriptorProtos.
    serialize_v1 = ProtobufSerializer(order_v1, client)
    old = [order_v1(id=f"o{i}", total=money(units=i, currency="EUR")) for i in range(3)]
    for record in old:
        producer.produce(topic, value=serialize_v1(record, context))
    producer.flush(30)
    registered = client.get_version(subject, 1)
    assert registered.schema.schema_type == "PROTOBUF"
    assert [(r.name, r.subject, r.version) for r in registered.schema.references] == [
        ("money.proto", "money.proto", 1)
    ]
    assert client.get_version("money.proto", 1).schema.schema_type == "PROTOBUF"

    # v2 adds a field: accepted at BACKWARD (the default); written by a v2 producer.
    reference = [SchemaReference("money.proto", "money.proto", 1)]
    assert client.test_compatibility(subject, Schema(ORDER_V2, "PROTOBUF", reference))
    v2 = compile_protos(tmp_path, {"money.proto": MONEY, "order.proto": ORDER_V2})
    order_v2, money_v2 = message_class(v2, "acme.Order"), message_class(v2, "acme.common.Money")
    serialize_v2 = ProtobufSerializer(order_v2, client)
    new = [order_v2(id="n1", total=money_v2(units=9, currency="GBP"), note="gift")]
    for record in new:
        producer.produce(topic, value=serialize_v2(record, context))
    producer.flush(30)
    assert client.get_versions(subject) == [1, 2]

    # Each record decodes, its writer schema fetched by id (format=serialized) with the
    # reference resolved; the message index is the single 0 of the first message.
    # A client of its own, as a consumer has: this one cached the .proto text get_version
    # answered above, whatever format is asked later.
    reader = SchemaRegistryClient({"url": sqlite_registry.url})
    deserialize = ProtobufDeserializer(order_v2, schema_registry_client=reader)
    records = consume(kafka_broker.bootstrap_servers, topic, len(old) + len(new))
    decoded = [deserialize(r.value(), context) for r in records]
    assert [(d.id, d.total.units, d.total.currency, d.note) for d in decoded] == [
        ("o0", 0, "EUR", ""), ("o1", 1, "EUR", ""), ("o2", 2, "EUR", ""), ("n1", 9, "GBP", "gift")
    ]  # fmt: skip
    assert records[0].value()[5] == 0
    v2_id = int.from_bytes(records[-1].value()[1:5], "big")

    # The same schema as .proto text (other whitespace) is the id the serializer registered.
    rewritten = ORDER_V2.replace("; ", ";\n  ")
    assert client.register_schema(subject, Schema(rewritten, "PROTOBUF", reference)) == v2_id
    got = httpx.get(f"{sqlite_registry.url}/schemas/ids/{v2_id}")
    assert got.json()["schemaType"] == "PROTOBUF"
    # format=serialized: the compiled file as base64, its references kept (what a reader
    # needs to build the message class).
    as_text = ORDER_V1 + "message Note { string text = 1; }\n"
    text_id = client.register_schema("orders-text", Schema(as_text, "PROTOBUF", reference))
    serialized = httpx.get(
        f"{sqlite_registry.url}/schemas/ids/{text_id}", params={"format": "serialized"}
    ).json()
    file = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(serialized["schema"]))
    assert (file.package, list(file.dependency)) == ("acme", ["money.proto"])
    assert serialized["references"] == [
        {"name": "money.proto", "subject": "money.proto", "version": 1}
    ]
    # Whichever form a schema came in, it is shown as canonical .proto text, as Confluent's.
    for path in (f"/schemas/ids/{v2_id}", "/subjects/orders-text/versions/1"):
        shown = httpx.get(f"{sqlite_registry.url}{path}").json()["schema"]
        assert shown.startswith('syntax = "proto3";\npackage acme;\nimport "money.proto";\n')
    assert (
        "  .acme.common.Money total = 2;\n  string note = 3;\n"
        in httpx.get(f"{sqlite_registry.url}/schemas/ids/{v2_id}").json()["schema"]
    )

    # An incompatible change is refused with 409 and every reason, by field path.
    bad = Schema(ORDER_BAD, "PROTOBUF", reference)
    assert not client.test_compatibility(subject, bad)
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(subject, bad)
    assert (refused.value.http_status_code, refused.value.error_code) == (409, 409)
    message = refused.value.error_message
    assert "FIELD_SCALAR_KIND_CHANGED at #/Order/id=1" in message
    assert "FIELD_KIND_CHANGED at #/Order/total=2" in message
    assert client.get_versions(subject) == [1, 2]


def test_bad_protobuf_schemas_are_42201_with_protocs_reason(
    sqlite_registry: RegistryProcess,
) -> None:
    for text, reason in [
        ('syntax = "proto3";\nmessage X {\n  int32 a = 1\n}', 'line 4 column 1: Expected ";"'),
        ('syntax = "proto3";\nimport "money.proto";\nmessage X {}', 'imports "money.proto"'),
    ]:
        answer = httpx.post(
            f"{sqlite_registry.url}/subjects/bad-proto/versions",
            json={"schema": text, "schemaType": "PROTOBUF"},
        )
        assert answer.status_code == 422, answer.text
        assert answer.json()["error_code"] == 42201
        assert reason in answer.json()["message"]


#: Adding a member to a oneof: BACKWARD accepts (Confluent's ONEOF_FIELD_ADDED), FORWARD
#: refuses (the old schema misses a member the new one may set: ONEOF_FIELD_REMOVED).
EVOLVING_V1 = 'syntax = "proto3";\nmessage Pay { oneof method { string card = 1; } }'
EVOLVING_V2 = (
    'syntax = "proto3";\nmessage Pay { oneof method { string card = 1; string iban = 2; } }'
)
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
        subject = f"payments-{level.lower()}"
        client.register_schema(subject, Schema(EVOLVING_V1, "PROTOBUF"))
        client.set_compatibility(subject, level)
        candidate = Schema(EVOLVING_V2, "PROTOBUF")
        assert client.test_compatibility(subject, candidate) is accepted, level
        if accepted:
            assert client.register_schema(subject, candidate)
            assert client.get_versions(subject) == [1, 2]
            continue
        with pytest.raises(SchemaRegistryError) as refused:
            client.register_schema(subject, candidate)
        assert refused.value.error_code == 409, level
        assert "ONEOF_FIELD_REMOVED at #/Pay/oneof method/iban=2" in (
            refused.value.error_message
        ), level
