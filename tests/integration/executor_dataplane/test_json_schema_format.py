"""The json_schema format against the real registry and Kafka, with confluent-kafka's own
``JSONSerializer`` writing the input and ``JSONDeserializer`` reading the output."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyspark.sql import SparkSession

from lockgate.common.model.pipeline_spec import PipelineSpec, parse_pipeline_spec
from lockgate.executor.dataplane.spark.kafka_sink import ERROR_HEADER_OFFSET, ERROR_HEADER_REASON
from lockgate.executor.errors import RecordError
from tests.fixtures.schema_registry import RegistryProcess
from tests.integration.executor_dataplane.conftest import produce, read_topic
from tests.integration.executor_dataplane.test_precommit_batch import (
    _commit,
    _prefix,
    _ranges,
    _run,
    _wait_visible,
)

pytestmark = pytest.mark.spark

ORDER = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Order",
    "type": "object",
    "properties": {"id": {"type": "integer"}, "item": {"type": "string"}},
    "required": ["id", "item"],
}
SHIPMENT = {
    "title": "Shipment",
    "type": "object",
    "properties": {
        "order_id": {"type": "integer", "minimum": 0},
        "item": {"type": "string"},
    },
    "required": ["order_id", "item"],
    "additionalProperties": False,
}
# Order id -3 passes the source's schema and fails the sink's (minimum 0).
ORDER_IDS = [1, 2, -3, 4]


def _produce_orders(
    bootstrap: str, registry: RegistryProcess, topic: str, orders: list[dict[str, Any]]
) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    serializer = JSONSerializer(json.dumps(ORDER), client)
    context = SerializationContext(topic, MessageField.VALUE)
    produce(
        bootstrap,
        topic,
        [(str(order["id"]).encode(), serializer(order, context)) for order in orders],
        partition=0,
    )


def _spec(bootstrap: str, url: str, source: str, sink: str, **extra: Any) -> PipelineSpec:
    registry = {"format": "json_schema", "schema_registry_url": url}
    return parse_pipeline_spec(
        {
            "name": "orders",
            "source": {"kafka": {"bootstrap_servers": bootstrap, "topics": [source], **registry}},
            "sink": {"kafka": {"bootstrap_servers": bootstrap, "topic": sink, **registry}},
            # The value is the record's JSON text in Spark; the struct is written as JSON
            # (topic, partition and offset locate a record the sink refuses).
            "transform": {
                "sql": "SELECT key, named_struct("
                "'order_id', CAST(get_json_object(value, '$.id') AS BIGINT), "
                "'item', upper(get_json_object(value, '$.item'))) AS value,"
                " topic, partition, offset FROM input"
            },
            **extra,
        }
    )


def test_json_schema_in_and_out_round_trips_through_confluents_serializers(
    spark: SparkSession, kafka_broker: Any, new_topic: Callable[..., str], module_registry: Any
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    source, sink = new_topic(partitions=1, prefix="in"), new_topic(partitions=1, prefix="out")
    dlq = new_topic(partitions=1, prefix="dlq")
    _produce_orders(
        bootstrap, module_registry, source, [{"id": i, "item": "pen"} for i in ORDER_IDS]
    )
    produce(bootstrap, source, [(b"plain", b'{"id": 5, "item": "no header"}')], partition=0)
    client = SchemaRegistryClient({"url": module_registry.url})
    client.register_schema(f"{sink}-value", Schema(json.dumps(SHIPMENT), "JSON"))
    spec = _spec(
        bootstrap,
        module_registry.url,
        source,
        sink,
        errors={"tolerance": "all", "dead_letter_topic": dlq},
    )

    result = _run(spark, spec, _ranges(bootstrap, source), _prefix())

    assert (result.records_in, result.records_out, result.dead_lettered) == (5, 3, 2)
    _commit(bootstrap, result)
    output = _wait_visible(bootstrap, sink, 1, 3)
    deserializer = JSONDeserializer(None, schema_registry_client=client)
    context = SerializationContext(sink, MessageField.VALUE)
    assert [deserializer(r.value, context) for r in output] == [
        {"order_id": i, "item": "PEN"} for i in (1, 2, 4)
    ]
    dead = {r.key: r for r in _wait_visible(bootstrap, dlq, 1, 2)}
    assert dead[b"plain"].value == b'{"id": 5, "item": "no header"}'
    assert b"magic byte" in dict(dead[b"plain"].headers)[ERROR_HEADER_REASON]
    sink_reason = dict(dead[b"-3"].headers)[ERROR_HEADER_REASON].decode()
    assert "at $.order_id: -3 is less than the minimum of 0" in sink_reason
    assert dict(dead[b"-3"].headers)[ERROR_HEADER_OFFSET] == b"2"


def test_a_record_that_does_not_match_its_schema_fails_the_task_with_its_location(
    spark: SparkSession, kafka_broker: Any, new_topic: Callable[..., str], module_registry: Any
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    source, sink = new_topic(partitions=1, prefix="in"), new_topic(partitions=1, prefix="out")
    _produce_orders(bootstrap, module_registry, source, [{"id": 1, "item": "pen"}])
    # Framed with the source schema's id, but missing a required field: as a producer that
    # skipped validation would write it.
    schema_id = (
        SchemaRegistryClient({"url": module_registry.url})
        .get_latest_version(f"{source}-value")
        .schema_id
    )
    bad = b"\x00" + schema_id.to_bytes(4, "big") + b'{"id": 2}'
    produce(bootstrap, source, [(b"bad", bad)], partition=0)
    SchemaRegistryClient({"url": module_registry.url}).register_schema(
        f"{sink}-value", Schema(json.dumps(SHIPMENT), "JSON")
    )

    with pytest.raises(RecordError) as failure:
        _run(
            spark,
            _spec(bootstrap, module_registry.url, source, sink),
            _ranges(bootstrap, source),
            _prefix(),
        )

    location = failure.value.location
    assert (location.topic, location.partition, location.offset) == (source, 0, 1)
    assert f"does not match JSON Schema {schema_id}: at $: 'item' is a required property" in (
        failure.value.record_reason
    )
    assert read_topic(bootstrap, sink, partitions=1, committed=False) == []
