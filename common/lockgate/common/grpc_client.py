"""How every Lockgate process calls another: channels, leader redirects, error details.

``open_channel`` returns a ``grpc.Channel`` usable with any generated stub. It carries the
tracing interceptor (when telemetry is on), keepalive settings, and, unless told not to,
follows a follower coordinator's ``UNAVAILABLE`` + ``lockgate-leader`` answer to the leader
and retries other ``UNAVAILABLE`` failures a bounded number of times within the call's
deadline. ``error_details`` reads the ``google.rpc`` details of a failed call back, and
``fencing_failure_of`` its ``lockgate.v1.FencingFailure``.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType, TracebackType
from typing import TYPE_CHECKING, Any, cast

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from opentelemetry import trace
from opentelemetry.instrumentation.grpc import client_interceptor
from opentelemetry.instrumentation.grpc.grpcext import intercept_channel
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider

from lockgate.common.errors import (
    LEADER_METADATA_KEY,
    FieldViolation,
    PreconditionViolation,
)
from lockgate.common.security import ClientSecurity
from lockgate.common.telemetry import Telemetry
from lockgate.v1 import common_pb2

_Metadata = tuple[tuple[str, str | bytes], ...]

# Ping an idle connection every 30 s and drop it after 10 s without an answer, so a dead
# peer (killed host, dropped NAT entry) is noticed in seconds rather than minutes. The
# server side (grpc_server.SERVER_OPTIONS) accepts pings this frequent.
CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    # Reconnect quickly after a coordinator restart instead of gRPC's 20 s max backoff.
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 5_000),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    # Retries are done by LeaderFollowingChannel, which knows about leader redirects;
    # gRPC's own transparent retries would resend to the same follower.
    ("grpc.enable_retries", 0),
)


@dataclass(frozen=True)
class ErrorDetails:
    """The structured content of a failed call's status (``google.rpc`` details decoded)."""

    code: grpc.StatusCode
    message: str
    reason: str | None = None
    domain: str | None = None
    metadata: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    field_violations: tuple[FieldViolation, ...] = ()
    precondition_violations: tuple[PreconditionViolation, ...] = ()
    resource_type: str | None = None
    resource_name: str | None = None
    retry_after_seconds: float | None = None
    leader_address: str | None = None


def _trailing_metadata(err: grpc.RpcError) -> tuple[tuple[str, str | bytes], ...]:
    getter = getattr(err, "trailing_metadata", None)
    if getter is None:
        return ()
    metadata = getter()
    return tuple(metadata or ())


def leader_address_of(err: grpc.RpcError) -> str | None:
    """The leader address a follower put in the ``lockgate-leader`` trailing metadata."""
    for key, value in _trailing_metadata(err):
        if key == LEADER_METADATA_KEY:
            return value.decode() if isinstance(value, bytes) else value
    return None


def fencing_failure_of(err: grpc.RpcError) -> common_pb2.FencingFailure | None:
    """The ``lockgate.v1.FencingFailure`` detail of a refused call, if it has one."""
    try:
        status = rpc_status.from_call(err) if hasattr(err, "trailing_metadata") else None
    except ValueError:
        return None
    for detail in status.details if status is not None else ():
        if detail.Is(common_pb2.FencingFailure.DESCRIPTOR):
            failure = common_pb2.FencingFailure()
            detail.Unpack(failure)
            return failure
    return None


def error_details(err: grpc.RpcError) -> ErrorDetails:
    """Decode a failed call: code, message, and the ``google.rpc`` details if present."""
    code_getter = getattr(err, "code", None)
    details_getter = getattr(err, "details", None)
    code: grpc.StatusCode = code_getter() if code_getter else grpc.StatusCode.UNKNOWN
    message: str = (details_getter() if details_getter else None) or ""
    leader = leader_address_of(err)
    try:
        status = rpc_status.from_call(err) if hasattr(err, "trailing_metadata") else None
    except ValueError:
        # Code or message inside the details disagree with the call's: trust the call.
        status = None
    if status is None:
        return ErrorDetails(code=code, message=message, leader_address=leader)
    reason = domain = resource_type = resource_name = None
    metadata: dict[str, str] = {}
    violations: list[FieldViolation] = []
    preconditions: list[PreconditionViolation] = []
    retry_after: float | None = None
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            reason, domain, metadata = info.reason, info.domain, dict(info.metadata)
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad_request = error_details_pb2.BadRequest()
            detail.Unpack(bad_request)
            violations.extend(
                FieldViolation(v.field, v.description) for v in bad_request.field_violations
            )
        elif detail.Is(error_details_pb2.PreconditionFailure.DESCRIPTOR):
            failure = error_details_pb2.PreconditionFailure()
            detail.Unpack(failure)
            preconditions.extend(
                PreconditionViolation(v.type, v.subject, v.description) for v in failure.violations
            )
        elif detail.Is(error_details_pb2.ResourceInfo.DESCRIPTOR):
            resource = error_details_pb2.ResourceInfo()
            detail.Unpack(resource)
            resource_type, resource_name = resource.resource_type, resource.resource_name
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            retry_after = retry.retry_delay.ToNanoseconds() / 1e9
    return ErrorDetails(
        code=code,
        message=status.message or message,
        reason=reason,
        domain=domain,
        metadata=MappingProxyType(metadata),
        field_violations=tuple(violations),
        precondition_violations=tuple(preconditions),
        resource_type=resource_type,
        resource_name=resource_name,
        retry_after_seconds=retry_after,
        leader_address=leader or metadata.get("leader_address"),
    )


def _tracing(channel: grpc.Channel, telemetry: Telemetry | None) -> grpc.Channel:
    if telemetry is not None:
        return telemetry.intercept_channel(channel)
    # No telemetry given: follow the process-wide provider if setup_telemetry installed one,
    # otherwise add nothing (telemetry off costs nothing).
    if isinstance(trace.get_tracer_provider(), SdkTracerProvider):
        wrapped: grpc.Channel = intercept_channel(  # type: ignore[no-untyped-call]
            channel,
            client_interceptor(),  # type: ignore[no-untyped-call]
        )
        return wrapped
    return channel


class _BearerToken(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Adds ``authorization: Bearer <token>`` to every call (TLS or, on loopback, not)."""

    def __init__(self, token: str) -> None:
        self._header = ("authorization", f"Bearer {token}")

    def _with_token(self, details: Any) -> Any:
        metadata = [*(details.metadata or ()), self._header]
        return _CallDetails(
            details.method,
            details.timeout,
            metadata,
            details.credentials,
            getattr(details, "wait_for_ready", None),
            getattr(details, "compression", None),
        )

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._with_token(details), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._with_token(details), request)

    def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._with_token(details), requests)

    def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._with_token(details), requests)


class _CallDetails(
    collections.namedtuple(
        "_CallDetails",
        ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression"),
    ),
    grpc.ClientCallDetails,
):
    """A concrete ``grpc.ClientCallDetails`` (grpc only ships the abstract class)."""


def _plain_channel(
    address: str,
    telemetry: Telemetry | None,
    options: Sequence[tuple[str, Any]],
    security: ClientSecurity | None = None,
) -> grpc.Channel:
    """A channel to one address: TLS when ``security`` says so, the token on every call."""
    all_options = [*CHANNEL_OPTIONS, *options]
    if security is not None and security.tls:
        channel = grpc.secure_channel(address, security.channel_credentials(), options=all_options)
    else:
        channel = grpc.insecure_channel(address, options=all_options)
    if security is not None and security.token:
        channel = grpc.intercept_channel(channel, _BearerToken(security.token))
    return _tracing(channel, telemetry)


class LeaderFollowingChannel(grpc.Channel):
    """A channel that sends each call to the current leader.

    Unary-unary calls (``__call__`` and ``with_call``) that fail with ``UNAVAILABLE``:
    - carrying ``lockgate-leader: <address>``: switch to that address and resend at once
      (at most ``max_redirects`` times per call);
    - without it (connection refused, no leader elected yet): back off and retry on the next
      seed address until the call's ``timeout`` would pass (a failover takes about one lease,
      longer than a few quick attempts); a call without a timeout makes at most
      ``max_attempts`` attempts.
    All attempts share the call's ``timeout``. Streaming calls and ``future()`` go to the
    current leader without retry. Resending after UNAVAILABLE is safe for Lockgate RPCs:
    mutating calls are idempotent by their ``request_id``.
    """

    def __init__(
        self,
        seeds: Sequence[str],
        *,
        channel_factory: Callable[[str], grpc.Channel],
        max_redirects: int = 3,
        max_attempts: int = 4,
        initial_backoff_seconds: float = 0.1,
        max_backoff_seconds: float = 2.0,
    ) -> None:
        if not seeds:
            raise ValueError("no address given; pass at least one HOST:PORT")
        if max_redirects < 0 or max_attempts < 1:
            raise ValueError("max_redirects must be >= 0 and max_attempts >= 1")
        self._seeds = tuple(seeds)
        self._factory = channel_factory
        self._max_redirects = max_redirects
        self._max_attempts = max_attempts
        self._initial_backoff = initial_backoff_seconds
        self._max_backoff = max_backoff_seconds
        self._lock = threading.Lock()
        self._channels: dict[str, grpc.Channel] = {}
        self._current = self._seeds[0]
        self._closed = False

    @property
    def current_address(self) -> str:
        """The address calls go to now (the last known leader, or a seed)."""
        with self._lock:
            return self._current

    def channel_for(self, address: str) -> grpc.Channel:
        """The (cached) underlying channel to ``address``."""
        with self._lock:
            if self._closed:
                raise ValueError("channel is closed")
            channel = self._channels.get(address)
            if channel is None:
                channel = self._factory(address)
                self._channels[address] = channel
            return channel

    def _follow(self, from_address: str, leader: str) -> None:
        with self._lock:
            if self._current == from_address:
                self._current = leader

    def _next_seed(self, from_address: str) -> None:
        """After a failure at ``from_address``, move to the next seed (round robin); from a
        leader learned by redirect that stopped answering, start over at the first seed."""
        with self._lock:
            if self._current != from_address:
                return  # another call already moved on
            if from_address in self._seeds:
                index = self._seeds.index(from_address)
                self._current = self._seeds[(index + 1) % len(self._seeds)]
            else:
                self._current = self._seeds[0]

    def call_with_retries(
        self,
        invoke: Callable[[grpc.Channel, float | None], Any],
        timeout: float | None,
    ) -> Any:
        """Run ``invoke(channel, remaining_timeout)`` under the redirect/retry policy above."""
        deadline = None if timeout is None else time.monotonic() + timeout
        redirects = 0
        attempts = 0
        backoff = self._initial_backoff
        while True:
            address = self.current_address
            remaining = None if deadline is None else deadline - time.monotonic()
            try:
                return invoke(self.channel_for(address), remaining)
            except grpc.RpcError as err:
                code = err.code() if hasattr(err, "code") else None
                if code != grpc.StatusCode.UNAVAILABLE:
                    raise
                leader = leader_address_of(err)
                if leader and leader != address and redirects < self._max_redirects:
                    redirects += 1
                    self._follow(address, leader)
                    continue
                attempts += 1
                if deadline is None and attempts >= self._max_attempts:
                    raise
                delay = min(backoff, self._max_backoff)
                if deadline is not None and time.monotonic() + delay >= deadline:
                    raise
                # Back-off between retries of a failed call, not synchronisation.
                time.sleep(delay)
                backoff *= 2
                self._next_seed(address)

    def unary_unary(
        self,
        method: str,
        request_serializer: Callable[[Any], bytes] | None = None,
        response_deserializer: Callable[[bytes], Any] | None = None,
        _registered_method: bool | None = False,
    ) -> grpc.UnaryUnaryMultiCallable[Any, Any]:
        """A multicallable whose ``__call__``/``with_call`` follow the leader."""
        return _FollowingUnaryUnary(
            self, method, request_serializer, response_deserializer, bool(_registered_method)
        )

    def current_channel(self) -> grpc.Channel:
        """The underlying channel to the current address."""
        return self.channel_for(self.current_address)

    def unary_stream(
        self,
        method: str,
        request_serializer: Callable[[Any], bytes] | None = None,
        response_deserializer: Callable[[bytes], Any] | None = None,
        _registered_method: bool | None = False,
    ) -> grpc.UnaryStreamMultiCallable[Any, Any]:
        """Sent to the current leader, no retry."""
        # _registered_method is real in grpcio 1.85 but missing from types-grpcio.
        multicallable: grpc.UnaryStreamMultiCallable[Any, Any] = cast(
            Any, self.current_channel()
        ).unary_stream(method, request_serializer, response_deserializer, _registered_method)
        return multicallable

    def stream_unary(
        self,
        method: str,
        request_serializer: Callable[[Any], bytes] | None = None,
        response_deserializer: Callable[[bytes], Any] | None = None,
        _registered_method: bool | None = False,
    ) -> grpc.StreamUnaryMultiCallable[Any, Any]:
        """Sent to the current leader, no retry."""
        # _registered_method is real in grpcio 1.85 but missing from types-grpcio.
        multicallable: grpc.StreamUnaryMultiCallable[Any, Any] = cast(
            Any, self.current_channel()
        ).stream_unary(method, request_serializer, response_deserializer, _registered_method)
        return multicallable

    def stream_stream(
        self,
        method: str,
        request_serializer: Callable[[Any], bytes] | None = None,
        response_deserializer: Callable[[bytes], Any] | None = None,
        _registered_method: bool | None = False,
    ) -> grpc.StreamStreamMultiCallable[Any, Any]:
        """Sent to the current leader, no retry."""
        # _registered_method is real in grpcio 1.85 but missing from types-grpcio.
        multicallable: grpc.StreamStreamMultiCallable[Any, Any] = cast(
            Any, self.current_channel()
        ).stream_stream(method, request_serializer, response_deserializer, _registered_method)
        return multicallable

    def subscribe(
        self, callback: Callable[[grpc.ChannelConnectivity], None], try_to_connect: bool = False
    ) -> None:
        """Connectivity of the channel to the current address."""
        self.current_channel().subscribe(callback, try_to_connect)

    def unsubscribe(self, callback: Callable[[grpc.ChannelConnectivity], None]) -> None:
        """Stop a ``subscribe`` callback (on the current address's channel)."""
        self.current_channel().unsubscribe(callback)

    def close(self) -> None:
        """Close every underlying channel."""
        with self._lock:
            self._closed = True
            channels = list(self._channels.values())
            self._channels.clear()
        for channel in channels:
            channel.close()

    def __enter__(self) -> LeaderFollowingChannel:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


if TYPE_CHECKING:
    _UnaryUnaryBase = grpc.UnaryUnaryMultiCallable[Any, Any]
else:  # grpc's classes are not subscriptable at run time; only the stubs are generic.
    _UnaryUnaryBase = grpc.UnaryUnaryMultiCallable


class _FollowingUnaryUnary(_UnaryUnaryBase):
    def __init__(
        self,
        channel: LeaderFollowingChannel,
        method: str,
        request_serializer: Callable[[Any], bytes] | None,
        response_deserializer: Callable[[bytes], Any] | None,
        registered_method: bool,
    ) -> None:
        self._channel = channel
        self._method = method
        self._serializer = request_serializer
        self._deserializer = response_deserializer
        self._registered = registered_method

    def _callable(self, channel: grpc.Channel) -> grpc.UnaryUnaryMultiCallable[Any, Any]:
        # _registered_method is real in grpcio 1.85 but missing from types-grpcio.
        multicallable: grpc.UnaryUnaryMultiCallable[Any, Any] = cast(Any, channel).unary_unary(
            self._method, self._serializer, self._deserializer, self._registered
        )
        return multicallable

    def __call__(
        self,
        request: Any,
        timeout: float | None = None,
        metadata: _Metadata | None = None,
        credentials: grpc.CallCredentials | None = None,
        wait_for_ready: bool | None = None,
        compression: grpc.Compression | None = None,
    ) -> Any:
        return self._channel.call_with_retries(
            lambda channel, remaining: self._callable(channel)(
                request, remaining, metadata, credentials, wait_for_ready, compression
            ),
            timeout,
        )

    def with_call(
        self,
        request: Any,
        timeout: float | None = None,
        metadata: _Metadata | None = None,
        credentials: grpc.CallCredentials | None = None,
        wait_for_ready: bool | None = None,
        compression: grpc.Compression | None = None,
    ) -> tuple[Any, grpc.Call]:
        result: tuple[Any, grpc.Call] = self._channel.call_with_retries(
            lambda channel, remaining: self._callable(channel).with_call(
                request, remaining, metadata, credentials, wait_for_ready, compression
            ),
            timeout,
        )
        return result

    def future(
        self,
        request: Any,
        timeout: float | None = None,
        metadata: _Metadata | None = None,
        credentials: grpc.CallCredentials | None = None,
        wait_for_ready: bool | None = None,
        compression: grpc.Compression | None = None,
    ) -> Any:
        return self._callable(self._channel.current_channel()).future(
            request, timeout, metadata, credentials, wait_for_ready, compression
        )


def open_channel(
    address: str | Sequence[str],
    *,
    telemetry: Telemetry | None = None,
    follow_leader: bool = True,
    max_redirects: int = 3,
    max_attempts: int = 4,
    options: Sequence[tuple[str, Any]] = (),
    security: ClientSecurity | None = None,
) -> grpc.Channel:
    """Open a channel to a Lockgate service (``HOST:PORT``, or several seeds): TLS and a
    bearer token as ``security`` says (``lockgate.common.security.client_security``),
    plaintext without it.

    With ``follow_leader`` (the default) the channel is a ``LeaderFollowingChannel``;
    otherwise a plain channel to the single address. Calls are traced with ``telemetry``
    (or the process-wide provider installed by ``setup_telemetry`` when None). Close the
    channel (or use it as a context manager) when done.
    """
    seeds = [address] if isinstance(address, str) else list(address)
    seeds = [seed.strip() for seed in seeds if seed.strip()]
    if not seeds:
        raise ValueError("no address given; pass HOST:PORT, e.g. 127.0.0.1:50051")
    for seed in seeds:
        if ":" not in seed:
            raise ValueError(f"address {seed!r} has no port; use HOST:PORT")
    if not follow_leader:
        if len(seeds) != 1:
            raise ValueError("several addresses need follow_leader=True")
        return _plain_channel(seeds[0], telemetry, options, security)
    return LeaderFollowingChannel(
        seeds,
        channel_factory=lambda target: _plain_channel(target, telemetry, options, security),
        max_redirects=max_redirects,
        max_attempts=max_attempts,
    )


__all__ = [
    "CHANNEL_OPTIONS",
    "ErrorDetails",
    "LeaderFollowingChannel",
    "error_details",
    "leader_address_of",
    "open_channel",
]
