"""`@idempotent`: a mutating RPC whose request carries a `request_id` runs once per id.

The servicer method is wrapped: the request without its id is hashed (deterministic
serialization, SHA-256), and the herder's `IdempotentCalls` either runs the method and
records its serialized answer, or gives the recorded one back (`domain/requests.py`).
Stack it under `leader_only`, so a follower redirects before anything is read.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

import grpc
from google.protobuf.message import Message

from lockgate.coordinator.herder import Herder
from lockgate.v1 import coordinator_pb2

_SERVICE = coordinator_pb2.DESCRIPTOR.services_by_name["CoordinatorService"]
#: RPC name -> response class, for the RPCs whose request has a request_id.
_RESPONSES: Mapping[str, type[Message]] = {
    m.name: getattr(coordinator_pb2, m.output_type.name)
    for m in _SERVICE.methods
    if "request_id" in m.input_type.fields_by_name
}


class _HasHerder(Protocol):
    herder: Herder


_Method = TypeVar("_Method", bound=Callable[..., Any])


def request_hash(request: Message) -> str:
    """SHA-256 (hex) of `request` without its request_id."""
    stripped = type(request)()
    stripped.CopyFrom(request)
    stripped.ClearField("request_id")
    return hashlib.sha256(stripped.SerializeToString(deterministic=True)).hexdigest()


def idempotent(method: _Method) -> _Method:
    """Run the RPC once per `request.request_id` (none: every time); a retry of the same
    request gets the first answer, the same id with another request INVALID_ARGUMENT."""
    name = method.__name__
    response_type = _RESPONSES[name]  # KeyError at import: the request has no request_id

    @functools.wraps(method)
    def wrapper(self: _HasHerder, request: Any, context: grpc.ServicerContext) -> Any:
        def run() -> bytes:
            response: Message = method(self, request, context)
            return response.SerializeToString(deterministic=True)

        if not request.request_id:
            return method(self, request, context)
        answer = self.herder.requests.once(
            request_id=request.request_id,
            method=name,
            request_hash=request_hash(request),
            call=run,
        )
        response = response_type()
        response.ParseFromString(answer)
        return response

    return wrapper  # type: ignore[return-value]
