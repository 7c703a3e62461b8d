"""Confluent's serializers through Lockgate's schema registry (run against a live cluster).

    make cluster-up                                 # or: lockgate-schema-registry and a broker
    python examples/schema_registry/confluent_round_trip.py --bootstrap 127.0.0.1:9092

Creates its topic (the local broker does not create topics on first use), produces three v1
records, evolves the schema to v2 (adds ``email`` with a default), and reads everything back
with the v2 reader: old records get ``email = "unknown"``. Every wait is bounded by
``--timeout``; exit status 0 when the four records came back, 1 with the reason otherwise.

Against the secure local cluster it speaks HTTPS with the CA and admin token it finds under
``$LOCKGATE_HOME/tls`` (``--tls-ca``, ``--token-file`` otherwise; ``--insecure``: plaintext),
through Confluent's own settings: ``ssl.ca.location`` and HTTP Basic (user ``--principal``,
default ``admin``; password the token).
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from lockgate.common.security import add_client_security_arguments, client_security
from lockgate.localcluster.process import lockgate_home

HERE = Path(__file__).parent
RECORDS = 4


class ExampleError(Exception):
    """Why the round trip failed, in one line for the user."""


def create_topic(bootstrap: str, topic: str, *, timeout_s: float) -> None:
    """Create `topic` (one partition) and wait until the broker confirms it."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=1, replication_factor=1)],
        operation_timeout=timeout_s,
        request_timeout=timeout_s,
    )
    try:
        futures[topic].result(timeout=timeout_s)
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return
        raise ExampleError(f"cannot create topic {topic!r} on {bootstrap}: {exc}") from None
    except TimeoutError:
        raise ExampleError(
            f"cannot create topic {topic!r}: no answer from {bootstrap} within {timeout_s} s"
        ) from None


def produce(args: argparse.Namespace, registry: SchemaRegistryClient) -> None:
    """Three records with the v1 schema, then one with v2 (registered as version 2)."""
    context = SerializationContext(args.topic, MessageField.VALUE)
    v1 = AvroSerializer(registry, (HERE / "user_v1.avsc").read_text())
    v2 = AvroSerializer(registry, (HERE / "user_v2.avsc").read_text())
    failures: list[str] = []

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            failures.append(str(error))

    producer = Producer({"bootstrap.servers": args.bootstrap, "delivery.timeout.ms": 15_000})
    for i in range(RECORDS - 1):
        value = v1({"name": f"old-{i}", "visits": i}, context)
        producer.produce(args.topic, value=value, on_delivery=delivered)
    value = v2({"name": "new", "visits": 9, "email": "n@x"}, context)
    producer.produce(args.topic, value=value, on_delivery=delivered)
    if producer.flush(args.timeout) != 0:
        raise ExampleError(f"records not delivered to {args.bootstrap} within {args.timeout} s")
    if failures:
        raise ExampleError(f"delivery to {args.topic!r} failed: {failures[0]}")


def consume(args: argparse.Namespace, registry: SchemaRegistryClient) -> list[Any]:
    """Every record of the topic, read with the v2 schema, within the timeout."""
    context = SerializationContext(args.topic, MessageField.VALUE)
    reader = AvroDeserializer(registry, (HERE / "user_v2.avsc").read_text())
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": f"example-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
        }
    )
    records: list[Any] = []
    deadline = time.monotonic() + args.timeout
    try:
        consumer.subscribe([args.topic])
        while len(records) < RECORDS:
            if time.monotonic() > deadline:
                raise ExampleError(
                    f"read {len(records)} of {RECORDS} records from {args.topic!r} "
                    f"within {args.timeout} s"
                )
            message = consumer.poll(1.0)
            if message is None:
                continue
            if message.error() is not None:
                raise ExampleError(f"reading {args.topic!r} failed: {message.error()}")
            records.append(reader(message.value(), context))
    finally:
        consumer.close()
    return records


def main() -> int:
    """Produce with v1 and v2, consume with the v2 reader, print the records."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--registry", default=None, help="default http(s)://127.0.0.1:8081")
    parser.add_argument("--topic", default=f"users-{uuid.uuid4().hex[:6]}")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per step")
    parser.add_argument("--principal", default="admin", help="HTTP Basic user of the token")
    add_client_security_arguments(parser)
    args = parser.parse_args()
    security = client_security(args, home=lockgate_home())
    if args.registry is None:
        args.registry = f"{'https' if security.tls else 'http'}://127.0.0.1:8081"
    config: dict[str, Any] = {"url": args.registry, "timeout": int(args.timeout)}
    if security.ca is not None:
        config["ssl.ca.location"] = str(security.ca)
    if security.token is not None:
        config["basic.auth.user.info"] = f"{args.principal}:{security.token}"
    registry = SchemaRegistryClient(config)
    try:
        create_topic(args.bootstrap, args.topic, timeout_s=args.timeout)
        produce(args, registry)
        records = consume(args, registry)
    except ExampleError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except SchemaRegistryError as exc:
        print(f"error: schema registry at {args.registry}: {exc}", file=sys.stderr)
        return 1
    except httpx.TransportError as exc:  # the registry client speaks httpx
        print(f"error: cannot reach the schema registry at {args.registry}: {exc}", file=sys.stderr)
        return 1
    for record in records:
        print(record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
