"""Confluent's serializers through Lockgate's schema registry (run against a live cluster).

    lockgate-schema-registry &                      # REST on 127.0.0.1:8081
    python examples/schema_registry/confluent_round_trip.py --bootstrap 127.0.0.1:9092

Produces three v1 records, evolves the schema to v2 (adds ``email`` with a default), and
reads everything back with the v2 reader: old records get ``email = "unknown"``.
"""

from __future__ import annotations

import argparse
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

HERE = Path(__file__).parent


def main() -> None:
    """Produce with v1 and v2, consume with the v2 reader, print the records."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--registry", default="http://127.0.0.1:8081")
    parser.add_argument("--topic", default=f"users-{uuid.uuid4().hex[:6]}")
    args = parser.parse_args()

    registry = SchemaRegistryClient({"url": args.registry})
    context = SerializationContext(args.topic, MessageField.VALUE)
    producer = Producer({"bootstrap.servers": args.bootstrap})
    v1 = AvroSerializer(registry, (HERE / "user_v1.avsc").read_text())
    v2 = AvroSerializer(registry, (HERE / "user_v2.avsc").read_text())
    for i in range(3):
        producer.produce(args.topic, value=v1({"name": f"old-{i}", "visits": i}, context))
    producer.produce(args.topic, value=v2({"name": "new", "visits": 9, "email": "n@x"}, context))
    producer.flush(30)

    reader = AvroDeserializer(registry, (HERE / "user_v2.avsc").read_text())
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": "example",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([args.topic])
    seen = 0
    while seen < 4:
        message = consumer.poll(5.0)
        if message is None or message.error():
            continue
        print(reader(message.value(), context))
        seen += 1
    consumer.close()


if __name__ == "__main__":
    main()
