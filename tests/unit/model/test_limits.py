"""The request bounds every gRPC server checks before its servicer runs."""

from __future__ import annotations

import time
from typing import Any

import pytest
from google.protobuf import (
    descriptor_pb2,
    descriptor_pool,
    field_mask_pb2,
    message_factory,
    struct_pb2,
)
from google.protobuf.descriptor import FieldDescriptor

from lockgate.common.errors import InvalidArgument
from lockgate.common.model import limits
from lockgate.common.model.limits import (
    MAX_REPEATED_ITEMS,
    MAX_STRING_CHARS,
    can_exceed_limits,
    check_request_limits,
    request_violations,
)
from lockgate.v1 import common_pb2, coordinator_pb2, executor_pb2, schema_registry_pb2


def test_a_request_within_bounds_passes() -> None:
    request = coordinator_pb2.CreatePipelineRequest(
        spec=common_pb2.PipelineSpec(
            name="orders",
            source=common_pb2.SourceSpec(
                kafka=common_pb2.KafkaSourceSpec(
                    bootstrap_servers="127.0.0.1:9092", topics=[f"t{i}" for i in range(1000)]
                )
            ),
            transform=common_pb2.TransformSpec(sql="SELECT * FROM input " + "x" * 100_000),
        )
    )
    check_request_limits(request)


@pytest.mark.serial  # a time bound is the assertion
def test_too_many_topics_are_named_by_path_and_limit_without_walking_them() -> None:
    request = coordinator_pb2.CreatePipelineRequest(
        spec=common_pb2.PipelineSpec(
            source=common_pb2.SourceSpec(
                kafka=common_pb2.KafkaSourceSpec(topics=[f"t{i}" for i in range(200_000)])
            )
        )
    )
    started = time.monotonic()
    with pytest.raises(InvalidArgument) as refused:
        check_request_limits(request)
    assert time.monotonic() - started < 0.1
    assert refused.value.reason == "LIMIT_EXCEEDED"
    assert [(v.field, v.description) for v in refused.value.violations] == [
        ("spec.source.kafka.topics", "has 200000 items, more than the limit of 1000")
    ]


def test_a_long_string_inside_a_repeated_message_is_named_by_index() -> None:
    request = coordinator_pb2.ReportPrecommitRequest(
        source_ranges=[
            common_pb2.OffsetRange(topic="ok"),
            common_pb2.OffsetRange(topic="t" * (MAX_STRING_CHARS + 1)),
        ]
    )
    (violation,) = request_violations(request)
    assert violation.field == "source_ranges[1].topic"
    assert f"has {MAX_STRING_CHARS + 1} characters" in violation.description


def test_too_many_handles_are_refused_on_the_executor_too() -> None:
    handle = common_pb2.SinkHandle(kafka=common_pb2.KafkaTransactionHandle(transactional_id="x"))
    request = executor_pb2.CommitCheckpointRequest(handles=[handle] * (MAX_REPEATED_ITEMS + 1))
    (violation,) = request_violations(request)
    assert violation.field == "handles"
    assert f"more than the limit of {MAX_REPEATED_ITEMS}" in violation.description


def test_a_registry_schema_may_be_long_but_a_subject_may_not() -> None:
    request = schema_registry_pb2.RegisterSchemaRequest(
        subject="s" * (MAX_STRING_CHARS + 1), schema="x" * 500_000
    )
    assert [v.field for v in request_violations(request)] == ["subject"]


def test_a_refusal_lists_at_most_twenty_violations_and_counts_the_rest() -> None:
    request = coordinator_pb2.HeartbeatRequest(
        task_statuses=[
            common_pb2.TaskStatus(task_id=common_pb2.TaskId(pipeline_name="p" * 5_000))
            for _ in range(30)
        ]
    )
    with pytest.raises(InvalidArgument) as refused:
        check_request_limits(request)
    assert len(refused.value.violations) == 20
    assert "and 10 more" in refused.value.message


def test_map_fields_are_bounded_in_entries_keys_and_values() -> None:
    # No Lockgate request has a map yet (Kafka client properties will); Struct's is one.
    fine = struct_pb2.Struct()
    fine.update({"a": "x" * 100, "b": {"c": "y"}})
    assert request_violations(fine) == []
    long_value = struct_pb2.Struct()
    long_value.update({"sasl.mechanism": "x" * (MAX_STRING_CHARS + 1)})
    assert [v.field for v in request_violations(long_value)] == [
        "fields['sasl.mechanism'].string_value"
    ]
    long_key = struct_pb2.Struct()
    long_key.update({"k" * (MAX_STRING_CHARS + 1): 1})
    (violation,) = request_violations(long_key)
    assert violation.field.endswith("(key)")
    many = struct_pb2.Struct()
    many.update({f"k{i}": i for i in range(MAX_REPEATED_ITEMS + 1)})
    assert [v.field for v in request_violations(many)] == ["fields"]


def test_only_requests_of_numbers_alone_can_never_exceed_a_bound() -> None:
    assert not can_exceed_limits(schema_registry_pb2.GetSchemaRequest)
    assert can_exceed_limits(schema_registry_pb2.RegisterSchemaRequest)  # strings
    assert can_exceed_limits(coordinator_pb2.CreatePipelineRequest)  # a message
    assert can_exceed_limits(struct_pb2.ListValue)  # a repeated field


def _reports(count: int, *, topic: str = "orders") -> coordinator_pb2.ReportPrecommitsRequest:
    return coordinator_pb2.ReportPrecommitsRequest(
        request_id="r",
        executor_id="e1",
        reports=[
            coordinator_pb2.ReportPrecommitRequest(
                checkpoint_id=5,
                task_id=common_pb2.TaskId(pipeline_name="orders", task_index=i),
                source_ranges=[common_pb2.OffsetRange(topic=topic, partition=i, end_offset=9)],
            )
            for i in range(count)
        ],
    )


def test_a_request_no_longer_than_its_smallest_bound_is_not_walked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Its every string, list and map is shorter than its encoding: nothing can be over.
    small, large = _reports(20), _reports(200)
    assert small.ByteSize() <= MAX_STRING_CHARS < large.ByteSize()
    request_violations(large)  # the fields' rules worked out once
    looked_at: list[str] = []
    rule = limits._rule

    def counted(field: FieldDescriptor) -> limits._Rule:
        looked_at.append(field.full_name)
        return rule(field)

    monkeypatch.setattr(limits, "_rule", counted)
    assert request_violations(small) == []
    assert looked_at == []
    assert request_violations(large) == []
    assert "lockgate.v1.ReportPrecommitsRequest.reports" in looked_at


def test_measuring_before_walking_finds_every_violation_a_full_walk_finds() -> None:
    multibyte = "é" * (MAX_STRING_CHARS // 2 + 1)  # within the bound in bytes' halves
    over = "é" * (MAX_STRING_CHARS + 1)
    one_over = coordinator_pb2.UpdatePipelineRequest(
        update_mask=field_mask_pb2.FieldMask(paths=["a"] * 101)
    )
    for request in (
        _reports(3, topic=over),
        _reports(3, topic=multibyte),
        _reports(300, topic=over),
        one_over,
        coordinator_pb2.UpdatePipelineRequest(
            update_mask=field_mask_pb2.FieldMask(paths=["a"] * 100)
        ),
    ):
        assert request_violations(request) == limits._walk(request, sized=0)
    assert [v.field for v in request_violations(one_over)] == ["update_mask.paths"]
    assert [v.field for v in request_violations(_reports(3, topic=over))] == [
        f"reports[{i}].source_ranges[0].topic" for i in range(3)
    ]


def _cycle_types() -> tuple[Any, Any]:
    """`Outer { repeated Inner inner }` and `Inner { Outer outer; FieldMask mask }`: a
    recursive pair, one of them with a field of a small bound (100 paths)."""
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(field_mask_pb2.DESCRIPTOR.serialized_pb)
    proto = descriptor_pb2.FileDescriptorProto(
        name="cycle_test.proto",
        package="cycle_test",
        syntax="proto3",
        dependency=["google/protobuf/field_mask.proto"],
    )
    message = descriptor_pb2.FieldDescriptorProto
    proto.message_type.add(name="Outer").field.add(
        name="inner",
        number=1,
        type=message.TYPE_MESSAGE,
        label=message.LABEL_REPEATED,
        type_name=".cycle_test.Inner",
    )
    inner = proto.message_type.add(name="Inner")
    inner.field.add(
        name="outer", number=1, type=message.TYPE_MESSAGE, type_name=".cycle_test.Outer"
    )
    inner.field.add(
        name="mask", number=2, type=message.TYPE_MESSAGE, type_name=".google.protobuf.FieldMask"
    )
    pool.Add(proto)
    return (
        message_factory.GetMessageClass(pool.FindMessageTypeByName("cycle_test.Outer")),
        message_factory.GetMessageClass(pool.FindMessageTypeByName("cycle_test.Inner")),
    )


def test_a_recursive_type_is_measured_against_the_smallest_bound_it_can_reach() -> None:
    outer_type, inner_type = _cycle_types()
    # Inner's bound worked out first, meeting Outer on the way: Outer's is not Inner's
    # half-done view of it.
    assert request_violations(inner_type()) == []
    outer = outer_type()
    outer.inner.add().outer.inner.add().mask.paths.extend(["a"] * 101)
    assert outer.ByteSize() < MAX_STRING_CHARS
    assert [v.field for v in request_violations(outer)] == ["inner[0].outer.inner[0].mask.paths"]
    inner = inner_type()
    inner.outer.inner.add().mask.paths.extend(["a"] * 101)
    assert [v.field for v in request_violations(inner)] == ["outer.inner[0].mask.paths"]
