"""The api's gRPC edges shared by every RPC: the leader-only guard, and refusals of a stale
fencing token.

A stale fencing token is answered with FAILED_PRECONDITION and a `FencingFailure` detail,
which the shared error-mapping interceptor's table (`lockgate.common.grpc_server`) has no
room for: `answers_stale_tokens` turns the herder's `StaleToken` into that status. Every
other domain error propagates to the interceptor.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from lockgate.common.errors import ERROR_DOMAIN
from lockgate.coordinator.domain.fencing import FencingToken, StaleToken
from lockgate.coordinator.herder import Herder
from lockgate.v1 import common_pb2

FENCING_TOKEN_TO_PB: Mapping[FencingToken, int] = {
    FencingToken.LEADER_EPOCH: common_pb2.FENCING_TOKEN_LEADER_EPOCH,
    FencingToken.EXECUTOR_GENERATION: common_pb2.FENCING_TOKEN_EXECUTOR_GENERATION,
    FencingToken.TASK_GENERATION: common_pb2.FENCING_TOKEN_TASK_GENERATION,
}


def _pack(message: Any) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def fencing_status(
    *, token: int, subject: str, presented: int, current: int, message: str
) -> grpc.Status:
    """The status of a call refused for a stale fencing token: FAILED_PRECONDITION with
    ErrorInfo (reason STALE_FENCING_TOKEN) and a lockgate.v1.FencingFailure detail."""
    token_name = common_pb2.FencingToken.Name(token)  # type: ignore[arg-type]
    status = status_pb2.Status(
        code=code_pb2.FAILED_PRECONDITION,
        message=message,
        details=[
            _pack(
                error_details_pb2.ErrorInfo(
                    reason="STALE_FENCING_TOKEN",
                    domain=ERROR_DOMAIN,
                    metadata={
                        "token": token_name.removeprefix("FENCING_TOKEN_").lower(),
                        "subject": subject,
                        "presented": str(presented),
                        "current": str(current),
                    },
                )
            ),
            _pack(
                common_pb2.FencingFailure(
                    token=token,  # type: ignore[arg-type]
                    subject=subject,
                    presented=presented,
                    current=current,
                )
            ),
        ],
    )
    result: grpc.Status = rpc_status.to_status(status)
    return result


def stale_token_status(exc: StaleToken) -> grpc.Status:
    """The status of a call the herder refused for a stale fencing token."""
    return fencing_status(
        token=FENCING_TOKEN_TO_PB[exc.token],
        subject=exc.subject,
        presented=exc.presented,
        current=exc.current,
        message=exc.message,
    )


class _HasHerder(Protocol):
    @property
    def herder(self) -> Herder: ...


_Method = TypeVar("_Method", bound=Callable[..., Any])


def leader_only(method: _Method) -> _Method:
    """Answer NotLeader (UNAVAILABLE + `lockgate-leader`) on a follower before reading
    anything: the caller must retry at the leader, whatever the request holds."""

    @functools.wraps(method)
    def wrapper(self: _HasHerder, request: Any, context: grpc.ServicerContext) -> Any:
        self.herder.require_fence()
        return method(self, request, context)

    return wrapper  # type: ignore[return-value]


def answers_stale_tokens(method: _Method) -> _Method:
    """Answer the herder's `StaleToken` with FAILED_PRECONDITION + `FencingFailure`."""

    @functools.wraps(method)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return method(self, request, context)
        except StaleToken as exc:
            context.abort_with_status(stale_token_status(exc))
            raise

    return wrapper  # type: ignore[return-value]
