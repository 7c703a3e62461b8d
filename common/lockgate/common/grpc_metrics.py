"""``rpc.server.duration`` for every gRPC call a Lockgate service serves.

A server interceptor times each call and records it with OpenTelemetry's RPC attributes
(``rpc.system``, ``rpc.service``, ``rpc.method``, ``rpc.grpc.status_code``). It sits
outside the error mapping, so a refused call is recorded with the status its caller got.
Health checks and reflection are left out: probes would drown the real calls.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import grpc

from lockgate.common.grpc_handlers import CallWrappingInterceptor, StreamBehavior, UnaryBehavior
from lockgate.common.metrics import RPC_SERVER_DURATION, Instruments


def _status_code(context: grpc.ServicerContext, failed: bool) -> int:
    code = context.code()  # type: ignore[attr-defined]
    if isinstance(code, grpc.StatusCode):
        return int(code.value[0])
    if isinstance(code, int):
        return code
    return grpc.StatusCode.UNKNOWN.value[0] if failed else grpc.StatusCode.OK.value[0]


class RpcMetricsInterceptor(CallWrappingInterceptor):
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

    def wrap_unary(self, behavior: UnaryBehavior, method: str) -> UnaryBehavior:
        """Time a call with one response."""

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

    def wrap_stream(self, behavior: StreamBehavior, method: str) -> StreamBehavior:
        """Time a call with a streamed response, to its last message."""

        def call(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            started = time.perf_counter()
            failed = True
            try:
                yield from behavior(request, context)
                failed = False
            finally:
                self._record(method, started, context, failed)

        return call


__all__ = ["RpcMetricsInterceptor"]
