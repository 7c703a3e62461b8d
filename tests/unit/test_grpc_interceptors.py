"""The common server interceptors build each method's wrapper once and still check every call."""

from __future__ import annotations

from typing import Any, cast

import grpc
import pytest

from lockgate.common.errors import InvalidArgument
from lockgate.common.grpc_server import RequestLimitsInterceptor
from lockgate.common.model.limits import MAX_STRING_CHARS
from lockgate.v1 import schema_registry_pb2 as pb

_CONTEXT = cast(grpc.ServicerContext, object())


class _Details(grpc.HandlerCallDetails):
    def __init__(self, method: str) -> None:
        self.method = method
        self.invocation_metadata = ()


def _echo(request: Any, context: grpc.ServicerContext) -> Any:
    return request


def test_request_bounds_are_checked_on_every_call_through_the_reused_wrapper() -> None:
    interceptor = RequestLimitsInterceptor()
    inner = grpc.unary_unary_rpc_method_handler(_echo)
    details = _Details("/lockgate.v1.SchemaRegistryService/RegisterSchema")
    first = interceptor.intercept_service(lambda _: inner, details)
    second = interceptor.intercept_service(lambda _: inner, details)
    assert first is second  # built once per method
    assert second is not None and second.unary_unary is not None
    fine = pb.RegisterSchemaRequest(subject="orders-value", schema="{}")
    assert second.unary_unary(fine, _CONTEXT) is fine
    too_long = pb.RegisterSchemaRequest(subject="s" * (MAX_STRING_CHARS + 1), schema="{}")
    with pytest.raises(InvalidArgument, match="subject: has 4097 characters"):
        second.unary_unary(too_long, _CONTEXT)
    # Numbers-only requests pass (and are not walked again), the others are still checked.
    number = pb.GetSchemaRequest(schema_id=7)
    assert second.unary_unary(number, _CONTEXT) is number
    assert second.unary_unary(number, _CONTEXT) is number
    with pytest.raises(InvalidArgument):
        second.unary_unary(too_long, _CONTEXT)


def test_a_new_inner_handler_gets_a_new_wrapper() -> None:
    interceptor = RequestLimitsInterceptor()
    details = _Details("/lockgate.v1.SchemaRegistryService/GetSchema")
    first = interceptor.intercept_service(
        lambda _: grpc.unary_unary_rpc_method_handler(_echo), details
    )
    replaced = grpc.unary_unary_rpc_method_handler(lambda request, context: "replaced")
    second = interceptor.intercept_service(lambda _: replaced, details)
    assert second is not first
    assert second is not None and second.unary_unary is not None
    assert second.unary_unary(pb.GetSchemaRequest(schema_id=1), _CONTEXT) == "replaced"
