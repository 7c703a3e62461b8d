"""The coordinator api's pure parts (spec conversion, report parsing, fencing status,
paging). No sockets."""

from __future__ import annotations

import pytest

from lockgate.common.errors import InvalidArgument
from lockgate.common.model.pipeline_spec import (
    DEFAULT_MAX_RECORDS_PER_PARTITION,
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    Delivery,
    RecordFormat,
    StartingOffsets,
)
from lockgate.common.model.proto import spec_from_proto, spec_to_proto, spec_violations
from lockgate.coordinator.api.convert import int_token, name_token, page_size, precommit_from_proto
from lockgate.v1 import common_pb2, coordinator_pb2


def valid_spec() -> common_pb2.PipelineSpec:
    return common_pb2.PipelineSpec(
        name="orders-copy",
        source=common_pb2.SourceSpec(
            kafka=common_pb2.KafkaSourceSpec(
                bootstrap_servers="127.0.0.1:9092",
                topics=["orders"],
                starting_offsets=common_pb2.OFFSET_POSITION_LATEST,
                format=common_pb2.FormatSpec(value_format=common_pb2.DATA_FORMAT_JSON),
            )
        ),
        transform=common_pb2.TransformSpec(sql="SELECT key, value FROM orders"),
        sink=common_pb2.SinkSpec(
            kafka=common_pb2.KafkaSinkSpec(bootstrap_servers="127.0.0.1:9092", topic="out")
        ),
        delivery=common_pb2.DELIVERY_GUARANTEE_AT_LEAST_ONCE,
        checkpoint=common_pb2.CheckpointSpec(interval_ms=500, timeout_ms=9000),
        tasks_max=4,
    )


def fields(spec: common_pb2.PipelineSpec) -> dict[str, str]:
    return {v.field: v.description for v in spec_violations(spec)}


def test_valid_spec_converts_and_round_trips() -> None:
    spec = spec_from_proto(valid_spec())
    assert spec.name == "orders-copy"
    assert spec.source.topics == ("orders",)
    assert spec.source.starting_offsets is StartingOffsets.LATEST
    assert spec.source.format is RecordFormat.JSON
    assert spec.delivery is Delivery.AT_LEAST_ONCE
    assert spec.checkpoint.interval_ms == 500
    assert spec.tasks_max == 4
    assert spec.transform.sql == "SELECT key, value FROM orders"
    again = spec_from_proto(spec_to_proto(spec))
    assert again == spec


def test_unset_fields_take_the_domain_defaults() -> None:
    minimal = valid_spec()
    minimal.ClearField("checkpoint")
    minimal.ClearField("delivery")
    minimal.ClearField("transform")
    minimal.tasks_max = 0
    spec = spec_from_proto(minimal)
    assert spec.tasks_max == 1
    assert spec.delivery is Delivery.EXACTLY_ONCE
    assert spec.transform.sql is None and spec.transform.python is None
    assert spec.checkpoint.interval_ms > 0


def test_unknown_sink_type_from_a_newer_client_names_the_sink() -> None:
    spec = valid_spec()
    spec.sink.Clear()
    spec.sink.MergeFromString(b"\x12\x00")  # SinkSpec field 2: a sink this server lacks
    violations = fields(spec)
    assert list(violations) == ["sink"]
    assert "unknown sink type" in violations["sink"]


def test_missing_sections_and_bad_values_name_their_fields() -> None:
    spec = valid_spec()
    spec.ClearField("source")
    spec.sink.kafka.topic = ""
    spec.checkpoint.interval_ms = -1
    spec.tasks_max = -2
    violations = fields(spec)
    assert {"source", "sink.kafka.topic", "checkpoint.interval_ms", "tasks_max"} <= set(violations)
    with pytest.raises(InvalidArgument) as raised:
        spec_from_proto(spec)
    assert "checkpoint.interval_ms" in raised.value.message
    assert {v.field for v in raised.value.violations} == set(violations)


def test_max_concurrent_the_coordinator_cannot_honour_is_refused_not_dropped() -> None:
    spec = valid_spec()
    spec.checkpoint.max_concurrent = 5
    assert set(fields(spec)) == {"checkpoint.max_concurrent"}
    spec.checkpoint.max_concurrent = 1
    assert "checkpoint.max_concurrent" in fields(spec)
    spec.checkpoint.max_concurrent = 2
    assert "checkpoint.max_concurrent" not in fields(spec)


def test_batch_cap_and_transaction_timeout_are_kept_and_defaulted() -> None:
    spec = valid_spec()
    defaulted = spec_from_proto(spec)
    assert defaulted.source.max_records_per_partition == DEFAULT_MAX_RECORDS_PER_PARTITION
    assert defaulted.sink.transaction_timeout_ms == DEFAULT_TRANSACTION_TIMEOUT_MS
    spec.source.kafka.max_records_per_partition = 3_000
    spec.sink.kafka.transaction_timeout_ms = 120_000
    parsed = spec_from_proto(spec)
    assert parsed.source.max_records_per_partition == 3_000
    assert parsed.sink.transaction_timeout_ms == 120_000
    back = spec_to_proto(parsed)
    assert back.source.kafka.max_records_per_partition == 3_000
    assert back.sink.kafka.transaction_timeout_ms == 120_000


def test_bad_batch_cap_and_transaction_timeout_name_their_fields() -> None:
    spec = valid_spec()
    spec.source.kafka.max_records_per_partition = -1
    spec.sink.kafka.transaction_timeout_ms = 999
    violations = fields(spec)
    assert set(violations) == {
        "source.kafka.max_records_per_partition",
        "sink.kafka.transaction_timeout_ms",
    }
    assert ">= 1000" in violations["sink.kafka.transaction_timeout_ms"]


def precommit_request(**overrides: object) -> coordinator_pb2.ReportPrecommitRequest:
    request = coordinator_pb2.ReportPrecommitRequest(
        checkpoint_id=3,
        task_id=common_pb2.TaskId(pipeline_name="orders-copy", task_index=1),
        task_generation=2,
        executor_id="e1",
        executor_generation=4,
        source_ranges=[
            common_pb2.OffsetRange(topic="orders", partition=0, start_offset=10, end_offset=15)
        ],
        sink_handles=[
            common_pb2.SinkHandle(
                kafka=common_pb2.KafkaTransactionHandle(
                    transactional_id="lockgate-orders-copy-1-0", producer_id=7, producer_epoch=1
                )
            )
        ],
    )
    for name, value in overrides.items():
        setattr(request, name, value)
    return request


def test_precommit_report_converts_to_the_domain() -> None:
    precommit = precommit_from_proto(precommit_request())
    assert precommit.task_id == "orders-copy/1"
    assert precommit.offsets[0].end_offset == 15
    assert precommit.handles[0].producer_id == 7


def test_precommit_without_producer_id_is_refused_by_field() -> None:
    request = precommit_request()
    request.sink_handles[0].kafka.ClearField("producer_id")
    request.source_ranges[0].end_offset = 5  # before its start
    with pytest.raises(InvalidArgument) as raised:
        precommit_from_proto(request)
    assert {v.field for v in raised.value.violations} == {
        "sink_handles[0].kafka.producer_id",
        "source_ranges[0]",
    }


def test_page_size_defaults_caps_and_refuses_negative() -> None:
    assert page_size(0) == 100
    assert page_size(5_000) == 1_000
    with pytest.raises(InvalidArgument):
        page_size(-1)


@pytest.mark.parametrize(
    ("value_format", "record_format"),
    [
        (common_pb2.DATA_FORMAT_AVRO, RecordFormat.AVRO),
        (common_pb2.DATA_FORMAT_JSON_SCHEMA, RecordFormat.JSON_SCHEMA),
        (common_pb2.DATA_FORMAT_PROTOBUF, RecordFormat.PROTOBUF),
    ],
)
def test_registry_formats_and_registry_url_survive_the_round_trip(
    value_format: common_pb2.DataFormat.ValueType, record_format: RecordFormat
) -> None:
    proto = valid_spec()
    avro = common_pb2.FormatSpec(
        value_format=value_format, schema_registry_url="http://127.0.0.1:8081"
    )
    proto.source.kafka.format.CopyFrom(avro)
    proto.sink.kafka.format.CopyFrom(avro)
    spec = spec_from_proto(proto)
    assert spec.sink.format is record_format
    assert spec.sink.schema_registry_url == "http://127.0.0.1:8081"
    back = spec_to_proto(spec)
    assert back.sink.kafka.format == avro
    assert back.source.kafka.format == avro
    proto.sink.kafka.format.schema_registry_url = ""
    assert "sink.kafka.schema_registry_url" in fields(proto)


@pytest.mark.parametrize("token", ["²", "-1", "1e9", " 1", "1" * 19, "٣"])
def test_a_numeric_page_token_the_server_never_issues_is_invalid(token: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        int_token(token)
    assert refused.value.violations[0].field == "page_token"
    assert "next_page_token" in refused.value.message


def test_numeric_page_tokens_the_server_issues_are_read() -> None:
    assert int_token("") is None
    assert int_token("100") == 100


@pytest.mark.parametrize("token", ["²", "Orders", "a/b", "x" * 64])
def test_a_pipeline_page_token_that_is_no_pipeline_name_is_invalid(token: str) -> None:
    with pytest.raises(InvalidArgument, match="page_token"):
        name_token(token)
    assert name_token("orders-2") == "orders-2"
