"""``rpc.server.duration`` for every gRPC call a Lockgate service serves.

A server interceptor times each call and records it with OpenTelemetry's RPC attributes
(``rpc.system``, ``rpc.service``, ``rpc.method``, ``rpc.grpc.status_code``). It sits
outside the error mapping, so a refused call is recorded with the status its caller got.
Health checks and reflection are left out: probes would drown the real calls.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from lockgate.common.metrics import RPC_SERVER_DURATION, Instruments

_SKIPPED_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")


def _status_code(context: grpc.ServicerContext, failed: bool) -> int:
    code = context.code()  # type: ignore[attr-defined]
    if isinstance(code, grpc.StatusCode):
        return int(code.value[0])
    if isinstance(code, int):
        return code
    return grpc.StatusCode.UNKNOWN.value[0] if failed else grpc.StatusCode.OK.value[0]


class RpcMetricsInterceptor(grpc.ServerInterceptor):
    """Records ``rpc.server.duration`` of each call (see the module docstring)."""

    def __init__(self, instruments: Instruments) -> None:
        self._instruments = instruments

    def _record(
        self, method: str, started: float, context: grpc.ServicerContext, failed: bool
    ) -> None:
        service, _, name = method.lstrip("/").rpartition("/")
        self._instruments.record(
            RPC_SERVER_DURATION,
            time.perf_counter() - started,
            {
                "rpc.system": "grpc",
                "rpc.service": service,
                "rpc.method": name,
                "rpc.grpc.status_code": _status_code(context, failed),
            },
        )

    def _unary(
        self, behavior: Callable[[Any, grpc.ServicerContext], Any], method: str
    ) -> Callable[[Any, grpc.ServicerContext], Any]:
        def call(request: Any, context: grpc.ServicerContext) -> Any:
            started = time.perf_counter()
            failed = True
            try:
                response = behavior(request, context)
                failed = False
                return response
            finally:
                self._record(method, started, context, failed)

        return call

    def _stream(
        self, behavior: Callable[[Any, grpc.ServicerContext], Iterator[Any]], method: str
    ) -> Callable[[Any, grpc.ServicerContext], Iterator[Any]]:
        def call(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            started = time.perf_counter()
            failed = True
            try:
                yield from behavior(request, context)
                failed = False
            finally:
                self._record(method, started, context, failed)

        return call

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        """Wrap the method's handler, whatever its streaming shape."""
        handler = continuation(handler_call_details)
        method: str = handler_call_details.method
        if handler is None or method.startswith(_SKIPPED_PREFIXES):
            return handler
        codec: dict[str, Any] = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(handler.unary_unary, method), **codec
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._stream(handler.unary_stream, method), **codec
            )
        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                self._unary(handler.stream_unary, method), **codec
            )
        if handler.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                self._stream(handler.stream_stream, method), **codec
            )
        return handler


__all__ = ["RpcMetricsInterceptor"]
