"""Pipeline files of `lockgate pipeline create -f`: shorthands, errors naming the field, and
the file's spec reaching the executor as the coordinator accepted it."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockgate.client.pipeline_file import SpecFileError, read_spec_file, spec_from_mapping
from lockgate.common.model.pipeline_spec import RecordFormat
from lockgate.common.model.proto import spec_from_proto, spec_to_proto
from lockgate.executor.convert import assignment_from_proto
from lockgate.v1 import common_pb2, coordinator_pb2

PIPELINE_YAML = """
name: orders-copy
source:
  kafka:
    bootstrap_servers: 127.0.0.1:9092
    topics: [orders]
    starting_offsets: latest
    format: json
transform:
  sql: SELECT key, value FROM orders
sink:
  kafka:
    bootstrap_servers: 127.0.0.1:9092
    topic: orders-out
delivery: exactly_once
checkpoint:
  interval_ms: 500
errors:
  tolerance: all
  dead_letter_topic: orders-dlq
tasks_max: 3
"""


def test_yaml_file_with_shorthands_reads_as_the_proto_spec(tmp_path: Path) -> None:
    path = tmp_path / "pipeline.yaml"
    path.write_text(PIPELINE_YAML)
    spec = read_spec_file(path)
    assert spec.source.kafka.starting_offsets == common_pb2.OFFSET_POSITION_LATEST
    assert spec.source.kafka.format.value_format == common_pb2.DATA_FORMAT_JSON
    assert spec.delivery == common_pb2.DELIVERY_GUARANTEE_EXACTLY_ONCE
    assert spec.errors.tolerance == common_pb2.ERROR_TOLERANCE_ALL
    assert spec.tasks_max == 3
    # And the coordinator accepts what the CLI sends.
    assert spec_from_proto(spec).errors.dead_letter_topic == "orders-dlq"


def test_unknown_sink_type_names_the_field() -> None:
    with pytest.raises(SpecFileError) as raised:
        spec_from_mapping({"name": "x", "sink": {"s3": {"bucket": "b"}}})
    assert "sink.s3" in str(raised.value)
    assert "kafka" in str(raised.value)


def test_bad_enum_value_lists_the_choices() -> None:
    with pytest.raises(SpecFileError) as raised:
        spec_from_mapping({"name": "x", "delivery": "twice"})
    assert "delivery" in str(raised.value)
    assert "exactly_once" in str(raised.value)


def test_wrong_value_type_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text('{"name": "x", "tasks_max": "many"}')
    with pytest.raises(SpecFileError) as raised:
        read_spec_file(path)
    assert "tasks_max" in str(raised.value)


def test_avro_formats_in_a_pipeline_file_reach_the_executor_spec(tmp_path: Path) -> None:
    avro = "{value_format: avro, schema_registry_url: 'http://127.0.0.1:8081'}"
    path = tmp_path / "pipeline.yaml"
    path.write_text(
        PIPELINE_YAML.replace("format: json", f"format: {avro}").replace(
            "topic: orders-out", f"topic: orders-out\n    format: {avro}"
        )
    )
    stored = spec_to_proto(spec_from_proto(read_spec_file(path)))
    data_plane = assignment_from_proto(
        coordinator_pb2.TaskAssignment(pipeline_spec=stored)
    ).require_spec()
    assert data_plane.source.format is RecordFormat.AVRO
    assert data_plane.sink.format is RecordFormat.AVRO
    assert data_plane.sink.schema_registry_url == "http://127.0.0.1:8081"
    assert data_plane.sink.value_subject == "orders-out-value"


def test_kafka_properties_in_a_file_are_a_map_of_text(tmp_path: Path) -> None:
    path = tmp_path / "secured.yaml"
    path.write_text(
        "name: secured\n"
        "source: {kafka: {bootstrap_servers: 'h:9096', topics: [t],\n"
        "  properties: {security.protocol: SASL_SSL, fetch.wait.max.ms: 50, check.crcs: true,\n"
        "               sasl.password: '${file:/etc/lockgate/kafka.properties:password}'}}}\n"
        "sink: {kafka: {bootstrap_servers: 'h:9096', topic: out}}\n"
    )
    spec = spec_from_proto(read_spec_file(path))
    assert dict(spec.source.properties) == {
        "security.protocol": "SASL_SSL",
        "fetch.wait.max.ms": "50",
        "check.crcs": "true",
        "sasl.password": "${file:/etc/lockgate/kafka.properties:password}",
    }
