"""Wrapping a gRPC method handler whatever its streaming shape, for server interceptors.

A server interceptor that wants to run code around a call gets a ``RpcMethodHandler`` of one
of four shapes; :func:`rewrap_handler` builds the same handler around the wrapped behaviour,
and :class:`CallWrappingInterceptor` applies it to every method but health checks and
reflection, so each interceptor (the error mapping, the RPC metrics) only says how to wrap a
call that returns one response and one that yields a stream.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc

UnaryBehavior = Callable[[Any, grpc.ServicerContext], Any]
StreamBehavior = Callable[[Any, grpc.ServicerContext], Iterator[Any]]


def rewrap_handler(
    handler: grpc.RpcMethodHandler[Any, Any],
    *,
    unary: Callable[[UnaryBehavior], UnaryBehavior],
    stream: Callable[[StreamBehavior], StreamBehavior],
) -> grpc.RpcMethodHandler[Any, Any]:
    """``handler`` with its behaviour wrapped: ``unary`` for a single response (unary or
    client-streaming request), ``stream`` for a streamed response."""
    codec: dict[str, Any] = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(unary(handler.unary_unary), **codec)
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(stream(handler.unary_stream), **codec)
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(unary(handler.stream_unary), **codec)
    if handler.stream_stream is not None:
        return grpc.stream_stream_rpc_method_handler(stream(handler.stream_stream), **codec)
    return handler


#: Methods no interceptor wraps: probes and reflection would drown the real calls.
PASS_THROUGH_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")


class CallWrappingInterceptor(grpc.ServerInterceptor):
    """Wraps each call of every method but those of ``PASS_THROUGH_PREFIXES``; subclasses
    say how with ``wrap_unary`` and ``wrap_stream``."""

    def wrap_unary(self, behavior: UnaryBehavior, method: str) -> UnaryBehavior:
        """``behavior`` (one response) of ``method`` (``/package.Service/Method``), wrapped."""
        raise NotImplementedError

    def wrap_stream(self, behavior: StreamBehavior, method: str) -> StreamBehavior:
        """``behavior`` (a streamed response) of ``method``, wrapped."""
        raise NotImplementedError

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        """Wrap the method's handler, whatever its streaming shape."""
        handler = continuation(handler_call_details)
        method: str = handler_call_details.method
        if handler is None or method.startswith(PASS_THROUGH_PREFIXES):
            return handler
        return rewrap_handler(
            handler,
            unary=lambda behavior: self.wrap_unary(behavior, method),
            stream=lambda behavior: self.wrap_stream(behavior, method),
        )


__all__ = [
    "PASS_THROUGH_PREFIXES",
    "CallWrappingInterceptor",
    "StreamBehavior",
    "UnaryBehavior",
    "rewrap_handler",
]
