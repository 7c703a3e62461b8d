"""The executor's edge conversions (convert.py, coordinator_client.py) and the committer's
refusal of handles that can only be aborted."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from hypothesis import given

from lockgate.common.errors import InvalidArgument
from lockgate.common.model.handles import TransactionHandle
from lockgate.common.model.ids import Generation, TransactionalId
from lockgate.common.model.pipeline_spec import (
    Delivery,
    ErrorTolerance,
    RecordFormat,
    StartingOffsets,
    parse_pipeline_spec,
)
from lockgate.common.model.proto import (
    handle_from_proto,
    handle_to_proto,
    spec_from_proto,
    spec_to_proto,
)
from lockgate.executor.committer import require_committable
from lockgate.executor.convert import assignment_from_proto
from lockgate.executor.coordinator_client import GrpcCoordinatorClient
from lockgate.executor.runtime.coordinator import CallFailure, CoordinatorCallError
from lockgate.v1 import common_pb2, coordinator_pb2
from tests.support.specs import raw_specs


def _spec(**fields: object) -> common_pb2.PipelineSpec:
    spec = common_pb2.PipelineSpec(
        name="copy",
        source=common_pb2.SourceSpec(
            kafka=common_pb2.KafkaSourceSpec(
                bootstrap_servers="127.0.0.1:9092",
                topics=["input"],
                starting_offsets=common_pb2.OFFSET_POSITION_LATEST,
                format=common_pb2.FormatSpec(
                    value_format=common_pb2.DATA_FORMAT_JSON,
                    key_format=common_pb2.DATA_FORMAT_STRING,
                ),
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
    for name, value in fields.items():
        setattr(spec, name, value)
    return spec


def _assignment(spec: common_pb2.PipelineSpec) -> coordinator_pb2.TaskAssignment:
    return coordinator_pb2.TaskAssignment(
        task_id=common_pb2.TaskId(pipeline_name="copy", task_index=0),
        task_generation=1,
        pipeline_spec=spec,
    )


def test_an_assignment_carries_the_spec_the_coordinator_accepted() -> None:
    spec = _spec()
    assignment = assignment_from_proto(_assignment(spec))
    # The executor reads the spec with the coordinator's own parser: the same value.
    assert assignment.require_spec() == spec_from_proto(spec)
    parsed = assignment.require_spec()
    assert parsed.source.starting_offsets is StartingOffsets.LATEST
    assert parsed.source.key_format is RecordFormat.STRING
    assert parsed.sink.bootstrap_servers == "127.0.0.1:9093"
    assert parsed.delivery is Delivery.AT_LEAST_ONCE
    assert parsed.errors.tolerance is ErrorTolerance.ALL
    assert parsed.allow_reordering


@given(raw_specs())
def test_every_spec_the_coordinator_accepts_is_one_this_executor_runs(raw: dict[str, Any]) -> None:
    # A client sends it, CreatePipeline validates it, the store keeps its JSON, and the
    # leader sends it back in an assignment: the executor reads exactly what was accepted.
    accepted = spec_from_proto(spec_to_proto(parse_pipeline_spec(raw)))
    stored = parse_pipeline_spec(accepted.to_json())
    assignment = assignment_from_proto(
        coordinator_pb2.TaskAssignment(pipeline_spec=spec_to_proto(stored))
    )
    assert assignment.invalid_spec is None
    assert assignment.require_spec() == accepted


def test_an_unreadable_spec_fails_the_task_not_the_heartbeat() -> None:
    assignment = assignment_from_proto(_assignment(_spec(name="Not A Name")))
    assert assignment.spec is None and assignment.generation == 1
    with pytest.raises(InvalidArgument) as raised:
        assignment.require_spec()
    assert [v.field for v in raised.value.violations] == ["name"]


def test_handles_round_trip_and_unknown_producer_id_stays_unknown() -> None:
    full = TransactionHandle(TransactionalId("lg-p-0-7-0"), 12, 0, "h:1")
    partial = TransactionHandle(TransactionalId("lg-p-0-7-1"), bootstrap_servers="h:1")
    assert handle_from_proto(handle_to_proto(full), "h") == full
    assert handle_from_proto(handle_to_proto(partial), "h") == partial
    with pytest.raises(InvalidArgument, match=r"handles\[1\].kafka.producer_id"):
        require_committable([full, partial], field_name="handles")
    with pytest.raises(InvalidArgument, match="only Kafka"):
        handle_from_proto(
            common_pb2.SinkHandle(file=common_pb2.FileStagingHandle(staged_uri="file:///x")),
            "handles[0]",
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
        (grpc.StatusCode.RESOURCE_EXHAUSTED, CallFailure.UNREACHABLE),
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
        client.deregister(executor_id="e1", executor_generation=Generation(1), timeout_s=1)
    assert (failed.value.failure, failed.value.code, failed.value.message) == (
        failure,
        code.name,
        "said no",
    )
    assert failed.value.retriable is (failure is CallFailure.UNREACHABLE)
