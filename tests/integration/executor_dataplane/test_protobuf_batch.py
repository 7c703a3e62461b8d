"""The protobuf format in a pre-commit batch: Confluent's serializer in, deserializer out.

Records written by confluent-kafka's ``ProtobufSerializer`` are read as JSON text by the SQL
transform and written with the newest Protobuf schema of ``<sink>-value``; records that do not
decode go to the dead-letter topic with ``tolerance: all``, exactly once like the output.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyspark.sql import SparkSession

from lockgate.executor.dataplane.spark.kafka_sink import ERROR_HEADER_OFFSET, ERROR_HEADER_REASON
from tests.fixtures.schema_registry import RegistryProcess
from tests.integration.executor_dataplane.conftest import produce, read_topic
from tests.integration.executor_dataplane.test_precommit_batch import (
    _commit,
    _prefix,
    _ranges,
    _run,
    _spec,
    _wait_visible,
)
from tests.support.protobuf import compile_protos, message_class

pytestmark = pytest.mark.spark

ORDER = """syntax = "proto3";
package shop;
message Order { int64 id = 1; string item = 2; string note = 3; }
"""
SHIPMENT = """syntax = "proto3";
package shop;
message Shipment { int64 order_id = 1; string item = 2; bool priority = 3; }
"""


def test_protobuf_in_sql_protobuf_out_and_bad_records_to_the_dead_letters(
    spark: SparkSession,
    kafka_broker: Any,
    new_topic: Callable[..., str],
    module_registry: RegistryProcess,
    tmp_path: Path,
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    source, sink = new_topic(partitions=1, prefix="in"), new_topic(partitions=1, prefix="out")
    dlq = new_topic(partitions=1, prefix="dlq")
    client = SchemaRegistryClient({"url": module_registry.url})
    order = message_class(compile_protos(tmp_path, {"order.proto": ORDER}), "shop.Order")
    serialize = ProtobufSerializer(order, client)
    context = SerializationContext(source, MessageField.VALUE)
    orders = [order(id=i, item=f"item-{i}", note="x" if i % 2 else "") for i in range(6)]
    good = [(str(o.id).encode(), serialize(o, context)) for o in orders]
    # Offset 3: a Protobuf header with a truncated body; offset 5: not the wire format at all.
    schema_id = int.from_bytes(good[0][1][1:5], "big")
    truncated = b"\x00" + schema_id.to_bytes(4, "big") + b"\x00\x12\x09item"
    records = [*good[:3], (b"cut", truncated), good[3], (b"txt", b"plain text"), *good[4:]]
    produce(bootstrap, source, records, partition=0)
    client.register_schema(f"{sink}-value", Schema(SHIPMENT, "PROTOBUF"))

    registry = {"format": "protobuf", "schema_registry_url": module_registry.url}
    spec = _spec(
        bootstrap,
        source,
        sink,
        source_kafka=registry,
        sink_kafka=registry,
        errors={"tolerance": "all", "dead_letter_topic": dlq},
        # The value is the record's proto3 JSON (int64 as a string, empty fields left out).
        transform={
            "sql": "SELECT key, named_struct("
            "'order_id', CAST(get_json_object(value, '$.id') AS BIGINT), "
            "'item', upper(get_json_object(value, '$.item')), "
            "'priority', get_json_object(value, '$.note') IS NOT NULL) AS value FROM input"
        },
    )
    result = _run(spark, spec, _ranges(bootstrap, source), _prefix())
    assert (result.records_in, result.records_out, result.dead_lettered) == (8, 6, 2)
    assert read_topic(bootstrap, dlq, partitions=1) == []  # dead letters are exactly once too
    _commit(bootstrap, result)

    shipment = message_class(
        compile_protos(tmp_path, {"shipment.proto": SHIPMENT}), "shop.Shipment"
    )
    # A client of its own, as a consumer has (the one above cached the text it registered).
    reader = SchemaRegistryClient({"url": module_registry.url})
    deserialize = ProtobufDeserializer(shipment, schema_registry_client=reader)
    output = _wait_visible(bootstrap, sink, 1, 6)
    decoded = [deserialize(r.value, SerializationContext(sink, MessageField.VALUE)) for r in output]
    assert [(s.order_id, s.item, s.priority) for s in decoded] == [
        (i, f"ITEM-{i}", i % 2 == 1) for i in range(6)
    ]
    dead = _wait_visible(bootstrap, dlq, 1, 2)
    assert [(d.key, dict(d.headers)[ERROR_HEADER_OFFSET]) for d in dead] == [
        (b"cut", b"3"),
        (b"txt", b"5"),
    ]
    assert b"cannot be decoded" in (dict(dead[0].headers)[ERROR_HEADER_REASON] or b"")
    assert b"magic byte" in (dict(dead[1].headers)[ERROR_HEADER_REASON] or b"")
