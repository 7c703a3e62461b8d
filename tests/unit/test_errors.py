"""Domain errors -> gRPC status + google.rpc details, and back (no sockets)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any, cast

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from lockgate.common.errors import (
    ERROR_DOMAIN,
    LEADER_METADATA_KEY,
    Aborted,
    AlreadyExists,
    DataLoss,
    DeadlineExceeded,
    FailedPrecondition,
    FencingToken,
    FieldViolation,
    Internal,
    InvalidArgument,
    LockgateError,
    NotFound,
    NotLeader,
    PermissionDenied,
    PreconditionViolation,
    ResourceExhausted,
    StaleTokenError,
    Unavailable,
    Unimplemented,
)
from lockgate.common.grpc_client import error_details, fencing_failure_of
from lockgate.common.grpc_server import ErrorMappingInterceptor, rpc_status_for_error
from lockgate.v1 import common_pb2

SECRET = "sasl.password=hunter2"

CASES: list[tuple[LockgateError, grpc.StatusCode]] = [
    (
        InvalidArgument(
            "pipeline.sources[0].topic: must not be empty",
            violations=[FieldViolation("pipeline.sources[0].topic", "must not be empty")],
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    ),
    (
        NotFound("pipeline orders not found", resource_type="Pipeline", resource_name="orders"),
        grpc.StatusCode.NOT_FOUND,
    ),
    (
        AlreadyExists("pipeline orders exists", resource_type="Pipeline", resource_name="orders"),
        grpc.StatusCode.ALREADY_EXISTS,
    ),
    (
        FailedPrecondition(
            "pipeline is stopped; resume it first",
            violations=[PreconditionViolation("PIPELINE_STATE", "orders", "state is STOPPED")],
        ),
        grpc.StatusCode.FAILED_PRECONDITION,
    ),
    (Aborted("version 3 expected, found 4"), grpc.StatusCode.ABORTED),
    (PermissionDenied("not allowed"), grpc.StatusCode.PERMISSION_DENIED),
    (
        StaleTokenError(token=FencingToken.LEADER_EPOCH, subject="", presented=3, current=5),
        grpc.StatusCode.FAILED_PRECONDITION,
    ),
    (ResourceExhausted("too many pipelines"), grpc.StatusCode.RESOURCE_EXHAUSTED),
    (Unimplemented("not yet"), grpc.StatusCode.UNIMPLEMENTED),
    (DeadlineExceeded("checkpoint 7 timed out"), grpc.StatusCode.DEADLINE_EXCEEDED),
    (Unavailable("starting up", retry_after_seconds=1.5), grpc.StatusCode.UNAVAILABLE),
    (NotLeader(leader_address="10.0.0.7:50051"), grpc.StatusCode.UNAVAILABLE),
    (Internal("invariant broken"), grpc.StatusCode.INTERNAL),
    (DataLoss("transaction aborted by the broker"), grpc.StatusCode.DATA_LOSS),
]


class _AbortCalled(Exception):
    """What a real ServicerContext.abort raises is a bare Exception(); keep it distinct."""


class FakeContext:
    """Records abort_with_status like grpc's ServicerContext (the method is all we need)."""

    def __init__(self) -> None:
        self.status: grpc.Status | None = None

    def abort_with_status(self, status: grpc.Status) -> None:
        self.status = status
        raise Exception()


class FakeRpcError(grpc.RpcError, grpc.Call):
    """A failed call as the client sees it, made from the status the server would send."""

    def __init__(self, status: grpc.Status) -> None:
        self._status = status

    def code(self) -> grpc.StatusCode:
        return self._status.code

    def details(self) -> str:
        return self._status.details

    def trailing_metadata(self) -> Any:
        return self._status.trailing_metadata

    def initial_metadata(self) -> Any:
        return ()

    def is_active(self) -> bool:
        return False

    def time_remaining(self) -> float:
        return 0.0

    def cancel(self) -> bool:
        return False

    def add_callback(self, callback: Callable[[], None]) -> bool:
        return False


def _rich_status(status: grpc.Status) -> status_pb2.Status:
    for key, value in status.trailing_metadata:
        if key == "grpc-status-details-bin":
            return status_pb2.Status.FromString(value)
    raise AssertionError("no grpc-status-details-bin in trailing metadata")


def _invoke(
    behavior: Callable[[Any, Any], Any], *, streaming: bool = False
) -> tuple[FakeContext, BaseException | None]:
    interceptor = ErrorMappingInterceptor(service_name="test")

    class Details(grpc.HandlerCallDetails):
        method = "/lockgate.test.v1.Echo/Echo"
        invocation_metadata = ()

    def continuation(_: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler[Any, Any]:
        if streaming:
            return grpc.unary_stream_rpc_method_handler(behavior)
        return grpc.unary_unary_rpc_method_handler(behavior)

    handler = interceptor.intercept_service(continuation, Details())
    assert handler is not None
    context = FakeContext()
    # The fake stands in for grpc.ServicerContext: only abort_with_status is used.
    servicer_context = cast(grpc.ServicerContext, context)
    try:
        if streaming:
            assert handler.unary_stream is not None
            list(handler.unary_stream(b"", servicer_context))
        else:
            assert handler.unary_unary is not None
            handler.unary_unary(b"", servicer_context)
    except Exception as exc:
        return context, exc
    return context, None


@pytest.mark.parametrize(("error", "code"), CASES, ids=lambda c: type(c).__name__)
def test_each_domain_error_maps_to_its_code_with_decodable_details(
    error: LockgateError, code: grpc.StatusCode
) -> None:
    def behavior(request: Any, context: Any) -> Any:
        raise error

    context, raised = _invoke(behavior)
    assert raised is not None and type(raised) is Exception  # the abort, not the domain error
    assert context.status is not None
    assert context.status.code == code
    assert context.status.details == error.message
    rich = _rich_status(context.status)
    assert rich.code == code.value[0]
    assert rich.message == error.message

    details = error_details(FakeRpcError(context.status))
    assert details.code == code
    assert details.reason == error.reason
    assert details.domain == ERROR_DOMAIN
    assert dict(details.metadata) == dict(error.metadata)
    assert details.message == error.message


def test_field_violations_reach_the_client() -> None:
    error = InvalidArgument(
        "2 fields are wrong",
        violations=[
            FieldViolation("pipeline.sink.topic", "must not be empty"),
            FieldViolation("pipeline.checkpoint_interval", "must be at least 1s, got 0s"),
        ],
    )
    details = error_details(FakeRpcError(rpc_status_for_error(error)))
    assert details.field_violations == error.violations
    # Any language can read it: the standard BadRequest message is in the details.
    rich = _rich_status(rpc_status_for_error(error))
    bad_request = error_details_pb2.BadRequest()
    assert any(d.Unpack(bad_request) for d in rich.details)
    assert [v.field for v in bad_request.field_violations] == [
        "pipeline.sink.topic",
        "pipeline.checkpoint_interval",
    ]


def test_for_field_names_field_in_message() -> None:
    error = InvalidArgument.for_field("pipeline.name", "must match [a-z0-9-]+")
    assert "pipeline.name" in error.message
    assert error.violations == (FieldViolation("pipeline.name", "must match [a-z0-9-]+"),)


def test_follower_unavailable_carries_leader_metadata() -> None:
    status = rpc_status_for_error(NotLeader(leader_address="10.0.0.7:50051"))
    assert (LEADER_METADATA_KEY, "10.0.0.7:50051") in tuple(status.trailing_metadata)
    details = error_details(FakeRpcError(status))
    assert details.leader_address == "10.0.0.7:50051"
    assert details.reason == "NOT_LEADER"
    assert details.retry_after_seconds is None


def test_no_leader_yet_asks_to_retry_later() -> None:
    details = error_details(FakeRpcError(rpc_status_for_error(NotLeader(leader_address=None))))
    assert details.leader_address is None
    assert details.retry_after_seconds == pytest.approx(1.0)


def test_a_stale_token_round_trips_with_its_fencing_failure_detail() -> None:
    refused = StaleTokenError(
        token=FencingToken.TASK_GENERATION, subject="p/1", presented=3, current=5, rpc="Trigger"
    )
    status = rpc_status_for_error(refused)
    error = error_details(FakeRpcError(status))
    assert error.code == grpc.StatusCode.FAILED_PRECONDITION
    assert {k: error.metadata[k] for k in ("token", "subject", "presented", "current")} == {
        "token": FencingToken.TASK_GENERATION.value,
        "subject": "p/1",
        "presented": "3",
        "current": "5",
    }
    assert error.reason == "STALE_FENCING_TOKEN"
    assert error.message == refused.message
    failure = fencing_failure_of(FakeRpcError(status))
    assert failure is not None
    assert failure.token == common_pb2.FENCING_TOKEN_TASK_GENERATION
    assert (failure.subject, failure.presented, failure.current) == ("p/1", 3, 5)


def test_resource_info_round_trips() -> None:
    status = rpc_status_for_error(
        NotFound("no such pipeline", resource_type="Pipeline", resource_name="orders")
    )
    details = error_details(FakeRpcError(status))
    assert (details.resource_type, details.resource_name) == ("Pipeline", "orders")


@pytest.mark.parametrize("streaming", [False, True])
def test_unexpected_exception_is_internal_and_its_text_is_not_sent(
    streaming: bool, caplog: pytest.LogCaptureFixture
) -> None:
    def behavior(request: Any, context: Any) -> Any:
        raise RuntimeError(f"cannot connect with {SECRET}")

    def streaming_behavior(request: Any, context: Any) -> Iterator[bytes]:
        yield b"first"
        raise RuntimeError(f"cannot connect with {SECRET}")

    with caplog.at_level(logging.ERROR, logger="lockgate.common.grpc_server"):
        context, raised = _invoke(
            streaming_behavior if streaming else behavior, streaming=streaming
        )
    assert raised is not None
    assert context.status is not None
    assert context.status.code == grpc.StatusCode.INTERNAL
    sent = repr(context.status.details) + repr(context.status.trailing_metadata)
    assert "hunter2" not in sent
    assert "RuntimeError" not in sent
    details = error_details(FakeRpcError(context.status))
    incident = details.metadata["incident_id"]
    assert incident in details.message
    # The operator finds the traceback in the log by the incident id.
    logged = [r for r in caplog.records if incident in r.getMessage()]
    assert logged and logged[0].exc_info is not None
    assert "hunter2" in str(logged[0].exc_info[1])


def test_grpc_abort_passes_through_unchanged() -> None:
    def behavior(request: Any, context: FakeContext) -> Any:
        # What ServicerContext.abort does after recording the status.
        raise Exception()

    context, raised = _invoke(behavior)
    assert raised is not None and type(raised) is Exception
    assert context.status is None  # not turned into INTERNAL


def test_success_is_untouched() -> None:
    context, raised = _invoke(lambda request, ctx: b"pong")
    assert raised is None and context.status is None


def test_status_without_details_still_decodes() -> None:
    class Plain(grpc.Status):
        code = grpc.StatusCode.UNAVAILABLE
        details = "connection refused"
        trailing_metadata = ()

    details = error_details(FakeRpcError(Plain()))
    assert details.code == grpc.StatusCode.UNAVAILABLE
    assert details.message == "connection refused"
    assert details.reason is None
