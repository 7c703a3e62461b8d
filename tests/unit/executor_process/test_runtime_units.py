"""Pure parts of the executor runtime: task state machine and protobuf conversions."""

from __future__ import annotations

import itertools

import pytest

from lockgate.common.errors import InvalidArgument
from lockgate.executor.errors import RecordError, RecordLocation, SinkError, TransformError
from lockgate.executor.spec import Delivery, ErrorTolerance, OrderGuarantee, parse_data_plane_spec
from lockgate.executor.worker import (
    TASK_TRANSITIONS,
    InvalidTaskTransition,
    KafkaHandle,
    TaskPhase,
    handle_from_proto,
    handle_to_proto,
    next_phase,
    pipeline_spec_to_mapping,
    require_committable,
    task_fails_on,
)
from lockgate.v1 import common_pb2


def test_task_state_machine_allows_only_listed_moves() -> None:
    for current, target in itertools.product(TaskPhase, TaskPhase):
        allowed = target is current or target is TaskPhase.STOPPED
        allowed = allowed or target in TASK_TRANSITIONS[current]
        if allowed:
            assert next_phase(current, target) is target
        else:
            with pytest.raises(InvalidTaskTransition):
                next_phase(current, target)
    # A failed task stays failed until a new generation replaces it.
    assert TASK_TRANSITIONS[TaskPhase.FAILED] == frozenset()
    with pytest.raises(InvalidTaskTransition):
        next_phase(TaskPhase.STOPPED, TaskPhase.RUNNING)


def test_pipeline_spec_converts_into_what_the_data_plane_parses() -> None:
    spec = common_pb2.PipelineSpec(
        name="copy",
        source=common_pb2.SourceSpec(
            kafka=common_pb2.KafkaSourceSpec(
                bootstrap_servers="127.0.0.1:9092",
                topics=["input"],
                starting_offsets=common_pb2.OFFSET_POSITION_LATEST,
                format=common_pb2.FormatSpec(value_format=common_pb2.DATA_FORMAT_JSON),
            )
        ),
        transform=common_pb2.TransformSpec(sql="SELECT key, value, headers FROM input"),
        sink=common_pb2.SinkSpec(
            kafka=common_pb2.KafkaSinkSpec(bootstrap_servers="127.0.0.1:9093", topic="output")
        ),
        delivery=common_pb2.DELIVERY_GUARANTEE_AT_LEAST_ONCE,
        errors=common_pb2.ErrorsSpec(
            tolerance=common_pb2.ERROR_TOLERANCE_ALL, dead_letter_topic="dlq"
        ),
        allow_reordering=True,
    )
    parsed = parse_data_plane_spec(pipeline_spec_to_mapping(spec))
    assert parsed.name == "copy"
    assert parsed.source.topics == ("input",)
    assert parsed.source.starting_offsets == "latest"
    assert parsed.source.format.value == "json"
    assert parsed.transform is not None
    assert parsed.sink.topic == "output"
    assert parsed.sink.bootstrap_servers == "127.0.0.1:9093"
    assert parsed.delivery is Delivery.AT_LEAST_ONCE
    assert parsed.errors.tolerance is ErrorTolerance.ALL
    assert parsed.errors.dead_letter_topic == "dlq"
    assert parsed.order is OrderGuarantee.NONE


def test_defaults_convert_to_exactly_once_identity_per_key_order() -> None:
    spec = common_pb2.PipelineSpec(
        name="p",
        source=common_pb2.SourceSpec(
            kafka=common_pb2.KafkaSourceSpec(bootstrap_servers="h:1", topics=["a"])
        ),
        sink=common_pb2.SinkSpec(
            kafka=common_pb2.KafkaSinkSpec(bootstrap_servers="h:1", topic="b")
        ),
    )
    parsed = parse_data_plane_spec(pipeline_spec_to_mapping(spec))
    assert parsed.delivery is Delivery.EXACTLY_ONCE
    assert parsed.transform is None
    assert parsed.order is OrderGuarantee.PER_KEY
    assert parsed.source.starting_offsets == "earliest"


def test_handles_round_trip_and_unknown_producer_id_stays_unknown() -> None:
    full = KafkaHandle("lg-p-0-7-0", "h:1", producer_id=12, producer_epoch=0)
    partial = KafkaHandle("lg-p-0-7-1", "h:1")
    assert handle_from_proto(handle_to_proto(full), field_name="h") == full
    assert handle_from_proto(handle_to_proto(partial), field_name="h") == partial
    with pytest.raises(InvalidArgument, match=r"handles\[1\].kafka.producer_id"):
        require_committable([full, partial], field_name="handles")
    with pytest.raises(InvalidArgument, match="only Kafka"):
        handle_from_proto(
            common_pb2.SinkHandle(file=common_pb2.FileStagingHandle(staged_uri="file:///x")),
            field_name="handles[0]",
        )


def test_permanent_errors_fail_the_task_transient_ones_only_the_checkpoint() -> None:
    assert task_fails_on(RecordError(RecordLocation("t", 0, 5), "not avro"))
    assert task_fails_on(TransformError("transform.sql failed: no column x"))
    assert not task_fails_on(SinkError("broker unreachable"))
    assert not task_fails_on(RuntimeError("spark hiccup"))
