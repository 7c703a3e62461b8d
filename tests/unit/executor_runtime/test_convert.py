"""The executor's edge conversions (convert.py, coordinator_client.py) and the committer's
refusal of handles that can only be aborted."""

from __future__ import annotations

import grpc
import pytest

from lockgate.common.errors import InvalidArgument
from lockgate.executor.committer import require_committable
from lockgate.executor.convert import (
    assignment_from_proto,
    handle_from_proto,
    handle_to_proto,
    pipeline_spec_to_mapping,
)
from lockgate.executor.coordinator_client import GrpcCoordinatorClient
from lockgate.executor.dataplane.protocol import KafkaHandle
from lockgate.executor.fencing import ExecutorGeneration
from lockgate.executor.runtime.coordinator import CallFailure, CoordinatorCallError
from lockgate.executor.spec import Delivery, ErrorTolerance, OrderGuarantee, parse_data_plane_spec
from lockgate.v1 import common_pb2, coordinator_pb2


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


def test_an_unreadable_restore_handle_fails_the_task_not_the_heartbeat() -> None:
    assignment = assignment_from_proto(
        coordinator_pb2.TaskAssignment(
            task_id=common_pb2.TaskId(pipeline_name="p", task_index=0),
            task_generation=2,
            restore=coordinator_pb2.TaskRestoreState(
                abort_before_start=[
                    common_pb2.SinkHandle(file=common_pb2.FileStagingHandle(staged_uri="f:///x"))
                ]
            ),
        )
    )
    assert assignment.generation == 2 and assignment.target_running
    assert isinstance(assignment.restore.invalid, InvalidArgument)
    assert "abort_before_start[0]" in assignment.restore.invalid.message


class _RpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return "said no"


class _RefusingStub:
    def __init__(self, code: grpc.StatusCode) -> None:
        self._code = code

    def DeregisterExecutor(self, request: object, timeout: float) -> object:
        raise _RpcError(self._code)


@pytest.mark.parametrize(
    ("code", "failure"),
    [
        (grpc.StatusCode.UNAVAILABLE, CallFailure.UNREACHABLE),
        (grpc.StatusCode.DEADLINE_EXCEEDED, CallFailure.UNREACHABLE),
        (grpc.StatusCode.NOT_FOUND, CallFailure.SESSION_GONE),
        (grpc.StatusCode.FAILED_PRECONDITION, CallFailure.SESSION_GONE),
        (grpc.StatusCode.INVALID_ARGUMENT, CallFailure.REFUSED),
    ],
)
def test_failed_coordinator_calls_are_classified_by_what_the_runtime_does(
    code: grpc.StatusCode, failure: CallFailure
) -> None:
    client = GrpcCoordinatorClient(_RefusingStub(code))  # type: ignore[arg-type]
    with pytest.raises(CoordinatorCallError) as failed:
        client.deregister(executor_id="e1", executor_generation=ExecutorGeneration(1), timeout_s=1)
    assert (failed.value.failure, failed.value.code, failed.value.message) == (
        failure,
        code.name,
        "said no",
    )
    assert failed.value.retriable is (failure is CallFailure.UNREACHABLE)
