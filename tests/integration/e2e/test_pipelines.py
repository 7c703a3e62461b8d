"""Pipelines through the whole cluster, as a user drives them with ``lockgate``.

``examples/copy.yaml`` (the keys of issue #5) copies a topic end to end; then bad input
(issue #5): an undecodable record (JSON, and Avro through Lockgate's schema registry) with
tolerance none and all, a SQL error, a missing topic; and a pipeline that reads Protobuf and
writes JSON Schema through the registry (issue #11). One coordinator and one executor (real
processes) serve the module. Each test creates its own topics and pipeline through
``lockgate pipeline create -f`` and looks at ``lockgate pipeline status`` as a user would.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from lockgate.localcluster.kafka import create_topic
from lockgate.localcluster.process import repo_root
from tests.fixtures.kafka import KafkaBroker
from tests.fixtures.schema_registry import RegistryProcess
from tests.integration.e2e.harness import (
    ServiceCluster,
    check_output,
    end_offsets,
    pipeline_yaml,
    produce_keyed,
    read_output,
    unique,
)
from tests.support.protobuf import compile_protos, message_class
from tests.support.waits import wait_for

pytestmark = [pytest.mark.spark]


@pytest.fixture(scope="module")
def cluster(
    kafka_broker: KafkaBroker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServiceCluster]:
    """c1 and e1 for the module."""
    services = ServiceCluster(
        home=tmp_path_factory.mktemp("e2e-bad-input"),
        bootstrap_servers=kafka_broker.bootstrap_servers,
        coordinator_args=("--heartbeat-interval-ms", "500"),
    )
    try:
        services.start_coordinator("c1")
        services.start_executor("e1")
        yield services
    finally:
        services.stop_all()


def _create(cluster: ServiceCluster, tmp_path: Path, text: str) -> tuple[int, str]:
    path = tmp_path / f"{unique('spec')}.yaml"
    path.write_text(text)
    result = cluster.cli("pipeline", "create", "-f", str(path), check=False)
    return result.returncode, result.stdout + result.stderr


def _task_errors(cluster: ServiceCluster, name: str) -> list[dict[str, Any]]:
    status = cluster.status_json(name)
    return [t.get("last_error", {}) for t in status.get("tasks", []) if t.get("last_error")]


def _failed_tasks(cluster: ServiceCluster, name: str) -> list[dict[str, Any]]:
    status = cluster.status_json(name)
    return [t for t in status.get("tasks", []) if t.get("state") == "TASK_STATE_FAILED"]


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i, value in enumerate(values):
        producer.produce(topic, key=f"k{i}".encode(), value=value, partition=0)
    assert producer.flush(30) == 0


ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [{"name": "n", "type": "long"}],
}
#: What the bad record holds: neither JSON nor Confluent's Avro framing (no magic byte).
NOT_DECODABLE = b"{not json, not avro"


def _bad_input(
    fmt: str, registry: RegistryProcess, topic: str, *, bad_at: int, count: int = 20
) -> tuple[list[bytes], dict[str, Any]]:
    """``count`` records of ``{"n": i}`` in ``fmt`` with an undecodable one at ``bad_at``,
    and the source keys that read them."""
    if fmt == "json":
        source: dict[str, Any] = {"format": "json"}

        def encode(record: dict[str, int]) -> bytes:
            return json.dumps(record).encode()

    else:
        serializer = AvroSerializer(SchemaRegistryClient({"url": registry.url}), json.dumps(ORDER))
        context = SerializationContext(topic, MessageField.VALUE)
        source = {"format": {"value_format": "avro", "schema_registry_url": registry.url}}

        def encode(record: dict[str, int]) -> bytes:
            return bytes(serializer(record, context))

    values = [NOT_DECODABLE if i == bad_at else encode({"n": i}) for i in range(count)]
    return values, source


def _decoded(value: bytes) -> Any:
    """A good record as the sink wrote it: the JSON text of the record."""
    return json.loads(value)


COPY_EXAMPLE = repo_root() / "examples" / "copy.yaml"


def test_examples_copy_yaml_copies_a_topic_exactly_once(
    cluster: ServiceCluster, tmp_path: Path
) -> None:
    raw = yaml.safe_load(COPY_EXAMPLE.read_text())
    # The file keeps exactly the keys issue #5 lists.
    assert list(raw) == [
        "name",
        "source",
        "transform",
        "sink",
        "delivery",
        "checkpoint",
        "tasks_max",
        "errors",
    ]
    assert raw["transform"] == {"sql": "SELECT key, value, headers FROM input"}
    bootstrap = cluster.bootstrap_servers
    source, sink = unique("copy_in"), unique("copy_out")
    create_topic(bootstrap, source, partitions=2)
    create_topic(bootstrap, sink, partitions=2)
    written = produce_keyed(bootstrap, source, records=5_000, partitions=2)
    # Only what points at this test's broker and topics changes.
    raw["name"] = unique("copy")
    raw["source"]["kafka"].update(bootstrap_servers=bootstrap, topics=[source])
    raw["sink"]["kafka"].update(bootstrap_servers=bootstrap, topic=sink)
    path = tmp_path / "copy.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    created = cluster.cli("pipeline", "create", "-f", str(path))
    assert f"created pipeline {raw['name']}" in " ".join(created.stdout.split())

    def copied() -> bool:
        offsets = cluster.offsets(raw["name"])
        return offsets.get((source, 0), 0) + offsets.get((source, 1), 0) >= len(written)

    wait_for(
        "the copy pipeline to copy the topic", copied, timeout_s=120, explain=cluster.logs_tail
    )
    output = read_output(bootstrap, sink)
    result = check_output(written, output)
    assert (result.records_out, result.duplicates, result.missing) == (5_000, 0, 0), result
    assert result.order_violations == 0
    status = cluster.status_json(raw["name"])
    assert {t["state"] for t in status["tasks"]} == {"TASK_STATE_RUNNING"}
    assert int(status["last_committed_checkpoint_id"]) >= 1


@pytest.mark.parametrize("fmt", ["json", "avro"])
def test_undecodable_record_with_tolerance_none_fails_the_task_and_shows_where(
    cluster: ServiceCluster, module_registry: RegistryProcess, tmp_path: Path, fmt: str
) -> None:
    bootstrap = cluster.bootstrap_servers
    source, sink = unique("bad_in"), unique("bad_out")
    create_topic(bootstrap, source)
    create_topic(bootstrap, sink)
    values, source_keys = _bad_input(fmt, module_registry, source, bad_at=7)
    _produce(bootstrap, source, values)
    name = unique("strict")
    code, output = _create(
        cluster,
        tmp_path,
        pipeline_yaml(
            name=name,
            bootstrap_servers=bootstrap,
            source_topic=source,
            sink_topic=sink,
            tasks_max=1,
            extra_source=source_keys,
        ),
    )
    assert code == 0, output
    wait_for(
        "the task to fail on the undecodable record",
        lambda: bool(_failed_tasks(cluster, name)),
        timeout_s=120,
        explain=cluster.logs_tail,
    )
    error = _failed_tasks(cluster, name)[0]["last_error"]
    # --json prints every field: partition 0 is there like any other partition.
    assert error.get("record") == {"topic": source, "partition": 0, "offset": "7"}
    table = cluster.cli("pipeline", "status", name).stdout
    assert "FAILED" in table
    # The human view names where, too: topic, partition and offset of the bad record.
    assert f"{source}[0]@7" in table, table
    # Nothing of the failed checkpoint is visible.
    assert read_output(bootstrap, sink) == []


@pytest.mark.parametrize("fmt", ["json", "avro"])
def test_undecodable_record_with_tolerance_all_goes_to_the_dead_letter_topic(
    cluster: ServiceCluster, module_registry: RegistryProcess, tmp_path: Path, fmt: str
) -> None:
    bootstrap = cluster.bootstrap_servers
    source, sink, dead = unique("dlq_in"), unique("dlq_out"), unique("dlq")
    for topic in (source, sink, dead):
        create_topic(bootstrap, topic)
    values, source_keys = _bad_input(fmt, module_registry, source, bad_at=3)
    _produce(bootstrap, source, values)
    name = unique("tolerant")
    code, output = _create(
        cluster,
        tmp_path,
        pipeline_yaml(
            name=name,
            bootstrap_servers=bootstrap,
            source_topic=source,
            sink_topic=sink,
            tasks_max=1,
            tolerance="all",
            dead_letter_topic=dead,
            extra_source=source_keys,
        ),
    )
    assert code == 0, output

    def copied() -> bool:
        return cluster.offsets(name).get((source, 0), 0) >= len(values)

    wait_for(
        "the tolerant pipeline to pass the input", copied, timeout_s=120, explain=cluster.logs_tail
    )
    good = sorted((_decoded(r.value or b"") for r in read_output(bootstrap, sink)), key=str)
    assert good == sorted(({"n": i} for i in range(len(values)) if i != 3), key=str)
    dead_letters = read_output(bootstrap, dead)
    assert [r.value for r in dead_letters] == [NOT_DECODABLE]
    assert end_offsets(bootstrap, dead, [0])[0] >= 1


def test_sql_error_is_refused_at_create_or_fails_with_sparks_message(
    cluster: ServiceCluster, tmp_path: Path
) -> None:
    bootstrap = cluster.bootstrap_servers
    source, sink = unique("sql_in"), unique("sql_out")
    create_topic(bootstrap, source)
    create_topic(bootstrap, sink)
    _produce(bootstrap, source, [b"a", b"b"])
    name = unique("badsql")
    code, output = _create(
        cluster,
        tmp_path,
        pipeline_yaml(
            name=name,
            bootstrap_servers=bootstrap,
            source_topic=source,
            sink_topic=sink,
            sql="SELEC key, value FROM input",
            tasks_max=1,
        ),
    )
    if code != 0:
        assert "transform.sql" in output, output
        return
    wait_for(
        "Spark's parse error in the task's last error",
        lambda: any(
            "PARSE_SYNTAX_ERROR" in e.get("message", "") for e in _task_errors(cluster, name)
        ),
        timeout_s=120,
        explain=cluster.logs_tail,
    )
    assert "SELEC" in cluster.cli("pipeline", "status", name).stdout


def test_missing_topic_is_reported_by_name(cluster: ServiceCluster, tmp_path: Path) -> None:
    bootstrap = cluster.bootstrap_servers
    sink = unique("mt_out")
    create_topic(bootstrap, sink)
    missing = unique("no_such_topic")
    name = unique("missing")
    code, output = _create(
        cluster,
        tmp_path,
        pipeline_yaml(
            name=name,
            bootstrap_servers=bootstrap,
            source_topic=missing,
            sink_topic=sink,
            tasks_max=1,
        ),
    )
    if code != 0:
        assert missing in output, output
        return
    wait_for(
        f"an error naming {missing}",
        lambda: any(missing in e.get("message", "") for e in _task_errors(cluster, name)),
        timeout_s=120,
        explain=cluster.logs_tail,
    )


READING_PROTO = """syntax = "proto3";
package plant;
message Reading { int64 n = 1; string label = 2; }
"""
READING_JSON_SCHEMA = {
    "title": "Reading",
    "type": "object",
    "properties": {"n": {"type": "integer", "minimum": 1}, "label": {"type": "string"}},
    "required": ["n", "label"],
    "additionalProperties": False,
}


def test_a_pipeline_reads_protobuf_and_writes_json_schema_records_exactly_once(
    cluster: ServiceCluster, module_registry: RegistryProcess, tmp_path: Path
) -> None:
    bootstrap = cluster.bootstrap_servers
    source, sink = unique("proto_in"), unique("jsonschema_out")
    create_topic(bootstrap, source, partitions=2)
    create_topic(bootstrap, sink, partitions=2)
    client = SchemaRegistryClient({"url": module_registry.url})
    reading = message_class(
        compile_protos(tmp_path, {"reading.proto": READING_PROTO}), "plant.Reading"
    )
    serialize = ProtobufSerializer(reading, client)
    context = SerializationContext(source, MessageField.VALUE)
    count = 400
    producer = Producer({"bootstrap.servers": bootstrap})
    for n in range(1, count + 1):
        value = serialize(reading(n=n, label=f"r{n}"), context)
        producer.produce(source, key=f"k{n % 20}".encode(), value=value, partition=n % 2)
    assert producer.flush(30) == 0
    sink_id = client.register_schema(
        f"{sink}-value", Schema(json.dumps(READING_JSON_SCHEMA), "JSON")
    )
    registry = {"schema_registry_url": module_registry.url}
    name = unique("proto-to-json")
    code, output = _create(
        cluster,
        tmp_path,
        pipeline_yaml(
            name=name,
            bootstrap_servers=bootstrap,
            source_topic=source,
            sink_topic=sink,
            # The Protobuf record is its proto3 JSON in Spark (int64 as a string); the struct
            # is validated against the sink's JSON Schema and written with its id.
            sql="SELECT key, named_struct("
            "'n', CAST(get_json_object(value, '$.n') AS BIGINT), "
            "'label', upper(get_json_object(value, '$.label'))) AS value FROM input",
            extra_source={"format": {"value_format": "protobuf", **registry}},
            extra_sink={"format": {"value_format": "json_schema", **registry}},
        ),
    )
    assert code == 0, output

    def copied() -> bool:
        offsets = cluster.offsets(name)
        return offsets.get((source, 0), 0) + offsets.get((source, 1), 0) >= count

    wait_for("the pipeline to pass the input", copied, timeout_s=120, explain=cluster.logs_tail)
    records = read_output(bootstrap, sink)
    # A consumer's own client: Confluent's JSONDeserializer reads every record by its id.
    deserialize = JSONDeserializer(
        None, schema_registry_client=SchemaRegistryClient({"url": module_registry.url})
    )
    sink_context = SerializationContext(sink, MessageField.VALUE)
    decoded = [deserialize(r.value, sink_context) for r in records]
    assert sorted(d["n"] for d in decoded) == list(range(1, count + 1))  # none lost, none twice
    assert all(d["label"] == f"R{d['n']}" for d in decoded)
    assert {int.from_bytes((r.value or b"")[1:5], "big") for r in records} == {sink_id}
