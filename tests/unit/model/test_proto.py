"""The model's proto converters: specs, handles, offset ranges and task ids, both ways.

A spec travels CLI file -> proto -> coordinator (validated, stored as JSON) -> proto ->
executor; every hop uses these functions, so the property tests here are what makes "a spec
the coordinator accepts is one the executor runs" hold for every spec, not a few examples.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockgate.common.errors import InvalidArgument
from lockgate.common.model.handles import TransactionHandle
from lockgate.common.model.ids import TaskId, TransactionalId
from lockgate.common.model.offsets import OffsetRange, split_range
from lockgate.common.model.pipeline_spec import (
    PipelineSpec,
    RecordFormat,
    parse_pipeline_spec,
)
from lockgate.common.model.producer_batching import (
    DEFAULT_LINGER_MS,
    Compression,
    ProducerBatching,
)
from lockgate.common.model.proto import (
    handle_from_proto,
    handle_to_proto,
    offset_range_from_proto,
    offset_range_to_proto,
    spec_from_proto,
    spec_to_proto,
    spec_violations,
    task_id_from_proto,
    task_id_to_proto,
)
from lockgate.v1 import common_pb2
from tests.support.specs import raw_specs


@given(raw_specs())
def test_every_accepted_spec_crosses_every_hop_unchanged(raw: dict[str, Any]) -> None:
    spec = parse_pipeline_spec(raw)
    # CLI/any client -> coordinator: the proto form is accepted as the same spec.
    sent = spec_to_proto(spec)
    assert spec_violations(sent) == []
    accepted = spec_from_proto(sent)
    assert accepted == spec
    # Coordinator's store (JSON) -> proto -> executor: the executor reads the same spec.
    stored = parse_pipeline_spec(accepted.to_json())
    assert spec_from_proto(spec_to_proto(stored)) == spec


def _spec() -> PipelineSpec:
    return parse_pipeline_spec(
        {
            "name": "p",
            "source": {"kafka": {"bootstrap_servers": "h:1", "topics": ["in"]}},
            "sink": {"kafka": {"bootstrap_servers": "h:1", "topic": "out"}},
        }
    )


def test_the_transactional_id_prefix_in_force_is_what_the_proto_shows() -> None:
    proto = spec_to_proto(_spec())
    assert proto.sink.kafka.transactional_id_prefix == "lockgate-p"  # the default, written out
    assert spec_from_proto(proto) == _spec()  # and read back as the default
    proto.sink.kafka.transactional_id_prefix = "team-a.p"
    assert spec_from_proto(proto).transactional_id_prefix == "team-a.p"
    proto.sink.kafka.transactional_id_prefix = "team a"
    (violation,) = spec_violations(proto)
    assert violation.field == "sink.kafka.transactional_id_prefix"


def test_key_format_and_reordering_reach_the_proto_and_back() -> None:
    proto = spec_to_proto(_spec())
    assert proto.sink.kafka.format.key_format == common_pb2.DATA_FORMAT_UNSPECIFIED
    proto.source.kafka.format.key_format = common_pb2.DATA_FORMAT_STRING
    proto.sink.kafka.format.key_format = common_pb2.DATA_FORMAT_JSON
    proto.allow_reordering = True
    spec = spec_from_proto(proto)
    assert spec.source.key_format is RecordFormat.STRING
    assert spec.sink.key_format is RecordFormat.JSON
    assert spec.allow_reordering
    assert spec_to_proto(spec) == proto


def test_an_unknown_key_format_number_is_named_by_its_proto_path() -> None:
    proto = spec_to_proto(_spec())
    proto.sink.kafka.format.key_format = 99  # type: ignore[assignment]
    assert [v.field for v in spec_violations(proto)] == ["sink.kafka.format.key_format"]
    with pytest.raises(InvalidArgument) as raised:
        spec_from_proto(proto)
    assert raised.value.reason == "INVALID_PIPELINE_CONFIG"


def test_producer_batching_reaches_the_proto_and_an_unset_field_means_its_default() -> None:
    proto = spec_to_proto(_spec())
    assert proto.sink.kafka.linger_ms == DEFAULT_LINGER_MS  # defaults written out
    assert proto.sink.kafka.compression == common_pb2.KAFKA_COMPRESSION_NONE
    proto.sink.kafka.linger_ms = 0  # optional: 0 is "no linger", not "unset"
    proto.sink.kafka.compression = common_pb2.KAFKA_COMPRESSION_LZ4
    spec = spec_from_proto(proto)
    assert spec.sink.batching.linger_ms == 0
    assert spec.sink.batching.compression is Compression.LZ4
    assert spec_to_proto(spec) == proto
    proto.sink.kafka.ClearField("linger_ms")
    proto.sink.kafka.batch_size = 0
    proto.sink.kafka.compression = common_pb2.KAFKA_COMPRESSION_UNSPECIFIED
    assert spec_from_proto(proto).sink.batching == ProducerBatching()
    proto.sink.kafka.compression = 99  # type: ignore[assignment]
    assert [v.field for v in spec_violations(proto)] == ["sink.kafka.compression"]


def test_handles_round_trip_with_and_without_producer_ids() -> None:
    full = TransactionHandle(TransactionalId("lg-p-0-1-0"), 12, 3, "h:1")
    partial = TransactionHandle(TransactionalId("lg-p-0-1"), bootstrap_servers="h:1")
    assert handle_from_proto(handle_to_proto(full), "h") == full
    assert handle_from_proto(handle_to_proto(partial), "h") == partial
    assert not handle_to_proto(partial).kafka.HasField("producer_id")
    assert full.resumable and not partial.resumable
    assert partial.on("other:2").bootstrap_servers == "other:2"


@pytest.mark.parametrize(
    ("handle", "field"),
    [
        (common_pb2.SinkHandle(), "sink_handles[0]"),
        (
            common_pb2.SinkHandle(kafka=common_pb2.KafkaTransactionHandle(producer_id=1)),
            "sink_handles[0].kafka.transactional_id",
        ),
        (
            common_pb2.SinkHandle(
                kafka=common_pb2.KafkaTransactionHandle(
                    transactional_id="t", producer_id=1, producer_epoch=40_000
                )
            ),
            "sink_handles[0].kafka",
        ),
    ],
)
def test_a_bad_handle_is_refused_naming_its_field(
    handle: common_pb2.SinkHandle, field: str
) -> None:
    with pytest.raises(InvalidArgument) as raised:
        handle_from_proto(handle, "sink_handles[0]")
    assert [v.field for v in raised.value.violations] == [field]


def test_a_resumable_handle_needs_its_producer_id_and_epoch() -> None:
    proto = handle_to_proto(TransactionHandle(TransactionalId("t")))
    with pytest.raises(InvalidArgument) as raised:
        handle_from_proto(proto, "sink_handles[2]", resumable=True)
    assert raised.value.violations[0].field == "sink_handles[2].kafka.producer_id"
    assert "ReportCheckpointFailure" in raised.value.message


def test_offset_ranges_convert_and_bad_ones_name_their_field() -> None:
    good = OffsetRange("in", 2, 10, 15)
    assert offset_range_from_proto(offset_range_to_proto(good), "r") == good
    bad = common_pb2.OffsetRange(topic="in", partition=0, start_offset=9, end_offset=3)
    with pytest.raises(InvalidArgument) as raised:
        offset_range_from_proto(bad, "source_ranges[1]")
    assert raised.value.violations[0].field == "source_ranges[1]"


@given(st.integers(0, 10**6), st.integers(0, 10**5), st.integers(1, 10**4))
def test_split_ranges_cover_the_range_once_in_order(start: int, size: int, chunk: int) -> None:
    whole = OffsetRange("t", 0, start, start + size)
    parts = split_range(whole, chunk)
    assert parts[0].start_offset == start and parts[-1].end_offset == start + size
    assert all(a.end_offset == b.start_offset for a, b in itertools.pairwise(parts))
    assert all(p.size <= chunk for p in parts)
    assert all(p.topic_partition == whole.topic_partition for p in parts)


def test_task_ids_convert_and_an_unnamed_pipeline_is_refused() -> None:
    assert task_id_from_proto(task_id_to_proto(TaskId("p/3")), "t") == TaskId("p/3")
    with pytest.raises(InvalidArgument) as raised:
        task_id_from_proto(common_pb2.TaskId(task_index=1), "task_id")
    assert raised.value.violations[0].field == "task_id.pipeline_name"


def test_a_zero_is_the_default_on_the_wire_but_refused_where_the_client_says_it_was_written() -> (
    None
):
    spec = spec_to_proto(
        parse_pipeline_spec(
            {
                "name": "p",
                "source": {"kafka": {"bootstrap_servers": "h:1", "topics": ["a"]}},
                "sink": {"kafka": {"bootstrap_servers": "h:1", "topic": "b"}},
            }
        )
    )
    spec.checkpoint.interval_ms = 0
    spec.tasks_max = 0
    assert spec_violations(spec) == []
    assert spec_from_proto(spec).checkpoint.interval_ms == 1_000
    written = {"checkpoint.interval_ms", "tasks_max", "name"}
    assert [v.field for v in spec_violations(spec, written=written)] == [
        "checkpoint.interval_ms",
        "tasks_max",
    ]
