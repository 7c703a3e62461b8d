"""How every Lockgate service serves gRPC: one builder, one error mapping.

``build_server`` gives each service the same server: tracing interceptor (when telemetry is
on), ``rpc.server.duration`` (when metrics are on), the error-mapping interceptor, the
authentication and role check (``lockgate.common.auth``, with ``--auth-tokens``), the
request bounds (``model.limits``), TLS or mTLS (``lockgate.common.security``), a bound on
message size and on concurrent calls (RESOURCE_EXHAUSTED beyond), ``grpc.health.v1``, server
reflection, a bind that names the address (and the process holding it) when the port is
taken, and a graceful stop on SIGTERM.

The error mapping is the one place where domain errors (``lockgate.common.errors``) become
gRPC statuses with ``google.rpc`` details; servicers just let them propagate. Anything else
a servicer raises is a bug: the caller gets ``INTERNAL`` with an incident id, the log gets
the traceback, and the exception's text (which may hold a secret) stays on the server.
"""

from __future__ import annotations

import collections
import logging
import re
import signal
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.protobuf.message import Message
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from grpc_status import rpc_status
from opentelemetry import metrics, trace

from lockgate.common.errors import (
    ERROR_DOMAIN,
    LEADER_METADATA_KEY,
    Aborted,
    AlreadyExists,
    DataLoss,
    DeadlineExceeded,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    LockgateError,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    StaleTokenError,
    Unauthenticated,
    Unavailable,
    Unimplemented,
)
from lockgate.common.metrics import RPC_SERVER_DURATION, Instruments
from lockgate.common.model.limits import can_exceed_limits, check_request_limits
from lockgate.common.ports import describe_port_holder
from lockgate.common.process_heap import freeze_startup_heap
from lockgate.common.security import ServerSecurity
from lockgate.common.server_signals import CaughtSignals
from lockgate.common.telemetry import Telemetry
from lockgate.v1 import common_pb2

_LOG = logging.getLogger(__name__)

# The one table from domain error class to gRPC status code. Subclasses (NotLeader,
# StaleTokenError) inherit their parent's code; lookup walks the class's MRO.
STATUS_CODES: dict[type[LockgateError], grpc.StatusCode] = {
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    NotFound: grpc.StatusCode.NOT_FOUND,
    AlreadyExists: grpc.StatusCode.ALREADY_EXISTS,
    FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    Aborted: grpc.StatusCode.ABORTED,
    PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    Unauthenticated: grpc.StatusCode.UNAUTHENTICATED,
    ResourceExhausted: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Unimplemented: grpc.StatusCode.UNIMPLEMENTED,
    DeadlineExceeded: grpc.StatusCode.DEADLINE_EXCEEDED,
    DataLoss: grpc.StatusCode.DATA_LOSS,
    Unavailable: grpc.StatusCode.UNAVAILABLE,
    Internal: grpc.StatusCode.INTERNAL,
}

# Probes and reflection pass through untouched: the health servicer's Watch relies on a
# non-blocking attribute of its own method that a wrapper would hide.
_PASS_THROUGH_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")


class _Status(
    collections.namedtuple("_Status", ("code", "details", "trailing_metadata")),
    grpc.Status,
):
    """A concrete ``grpc.Status`` (grpc only ships the abstract class)."""


def status_code_for(error: LockgateError) -> grpc.StatusCode:
    """The gRPC status code of a domain error (``INTERNAL`` for an unmapped subclass)."""
    for cls in type(error).__mro__:
        code = STATUS_CODES.get(cls)
        if code is not None:
            return code
    return grpc.StatusCode.INTERNAL


def _pack(message: Any) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def fencing_failure(error: StaleTokenError) -> common_pb2.FencingFailure:
    """The ``lockgate.v1.FencingFailure`` detail of a stale-token refusal."""
    return common_pb2.FencingFailure(
        token=common_pb2.FencingToken.Value(f"FENCING_TOKEN_{error.token.name}"),
        subject=error.subject,
        presented=error.presented,
        current=error.current,
    )


def rpc_status_for_error(error: LockgateError) -> grpc.Status:
    """The status (code, message, ``google.rpc`` details, trailing metadata) sent for ``error``.

    Details: always ``ErrorInfo`` (reason, domain, metadata); ``BadRequest`` for field
    violations, ``PreconditionFailure``, ``ResourceInfo``, ``RetryInfo`` when the error has
    them. A follower's ``Unavailable`` also carries ``lockgate-leader: <address>``.
    """
    code = status_code_for(error)
    details: list[any_pb2.Any] = [
        _pack(
            error_details_pb2.ErrorInfo(
                reason=error.reason, domain=ERROR_DOMAIN, metadata=dict(error.metadata)
            )
        )
    ]
    if isinstance(error, InvalidArgument) and error.violations:
        details.append(
            _pack(
                error_details_pb2.BadRequest(
                    field_violations=[
                        error_details_pb2.BadRequest.FieldViolation(
                            field=v.field, description=v.description
                        )
                        for v in error.violations
                    ]
                )
            )
        )
    if isinstance(error, FailedPrecondition) and error.violations:
        details.append(
            _pack(
                error_details_pb2.PreconditionFailure(
                    violations=[
                        error_details_pb2.PreconditionFailure.Violation(
                            type=v.type, subject=v.subject, description=v.description
                        )
                        for v in error.violations
                    ]
                )
            )
        )
    if isinstance(error, StaleTokenError):
        details.append(_pack(fencing_failure(error)))
    if isinstance(error, NotFound | AlreadyExists) and (error.resource_type or error.resource_name):
        details.append(
            _pack(
                error_details_pb2.ResourceInfo(
                    resource_type=error.resource_type,
                    resource_name=error.resource_name,
                    description=error.message,
                )
            )
        )
    trailing: list[tuple[str, str | bytes]] = []
    if isinstance(error, Unavailable):
        if error.retry_after_seconds is not None:
            delay = duration_pb2.Duration()
            delay.FromNanoseconds(int(error.retry_after_seconds * 1e9))
            details.append(_pack(error_details_pb2.RetryInfo(retry_delay=delay)))
        if error.leader_address:
            trailing.append((LEADER_METADATA_KEY, error.leader_address))
    status = status_pb2.Status(code=code.value[0], message=error.message, details=details)
    grpc_status: grpc.Status = rpc_status.to_status(status)
    return _Status(
        code=grpc_status.code,
        details=grpc_status.details,
        trailing_metadata=tuple(grpc_status.trailing_metadata) + tuple(trailing),
    )


def internal_error_status(incident_id: str) -> grpc.Status:
    """The status for an unexpected exception: a generic message and the incident id that
    finds the traceback in the server log; never the exception's own text."""
    message = (
        f"internal error (incident {incident_id}); the server logged the details, "
        "report the incident id to the operator"
    )
    status = status_pb2.Status(
        code=code_pb2.INTERNAL,
        message=message,
        details=[
            _pack(
                error_details_pb2.ErrorInfo(
                    reason="INTERNAL", domain=ERROR_DOMAIN, metadata={"incident_id": incident_id}
                )
            )
        ],
    )
    grpc_status: grpc.Status = rpc_status.to_status(status)
    return grpc_status


def _is_grpc_abort(exc: BaseException) -> bool:
    # ServicerContext.abort() ends the RPC by raising a bare Exception() after recording the
    # status; it must propagate unchanged, not become INTERNAL.
    return type(exc) is Exception and not exc.args


class _WrappingInterceptor(grpc.ServerInterceptor):
    """An interceptor that wraps each method's behaviour, except probes and reflection.

    gRPC asks every interceptor for the handler on every call; the wrapper is built once per
    method and reused while the handler inside stays the same object (rebuilt per call, the
    wrappers were most of a schema lookup's in-process time: README, Schema registry)."""

    def __init__(self) -> None:
        self._wrapped_by_method: dict[str, tuple[grpc.RpcMethodHandler[Any, Any], Any]] = {}

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        """Wrap the method's handler, whatever its streaming shape."""
        handler = continuation(handler_call_details)
        method: str = handler_call_details.method
        if handler is None or method.startswith(_PASS_THROUGH_PREFIXES):
            return handler
        built = self._wrapped_by_method
        known = built.get(method)
        if known is not None and known[0] is handler:
            wrapped: grpc.RpcMethodHandler[Any, Any] = known[1]
            return wrapped
        wrapped = self._wrapped(handler, method)
        # Atomic under the GIL; two threads racing here build equivalent wrappers.
        built[method] = (handler, wrapped)
        return wrapped

    def _wrapped(
        self, handler: grpc.RpcMethodHandler[Any, Any], method: str
    ) -> grpc.RpcMethodHandler[Any, Any]:
        """The handler of ``method`` with its behaviour wrapped (each subclass's own)."""
        raise NotImplementedError


class ErrorMappingInterceptor(_WrappingInterceptor):
    """Turns exceptions escaping a servicer into gRPC statuses (see module docstring)."""

    def __init__(self, *, service_name: str) -> None:
        super().__init__()
        self._service_name = service_name

    def _fail(self, exc: Exception, context: grpc.ServicerContext, method: str) -> None:
        """Abort the RPC for ``exc`` (raises), or return if ``exc`` already is an abort."""
        if _is_grpc_abort(exc):
            return
        span = trace.get_current_span()
        if isinstance(exc, LockgateError):
            status = rpc_status_for_error(exc)
            _LOG.info(
                "%s %s -> %s %s: %s",
                self._service_name,
                method,
                status.code.name,
                exc.reason,
                exc.message,
            )
        else:
            incident_id = uuid.uuid4().hex[:16]
            _LOG.error(
                "%s %s failed unexpectedly (incident %s)",
                self._service_name,
                method,
                incident_id,
                exc_info=exc,
            )
            span.record_exception(exc)
            status = internal_error_status(incident_id)
        span.set_attribute("rpc.grpc.status_code", status.code.value[0])
        span.set_status(trace.Status(trace.StatusCode.ERROR, status.code.name))
        context.abort_with_status(status)

    def _wrap_unary_response(
        self, behavior: Callable[[Any, grpc.ServicerContext], Any], method: str
    ) -> Callable[[Any, grpc.ServicerContext], Any]:
        def call(request: Any, context: grpc.ServicerContext) -> Any:
            try:
                return behavior(request, context)
            except Exception as exc:
                self._fail(exc, context, method)
                raise

        return call

    def _wrap_stream_response(
        self, behavior: Callable[[Any, grpc.ServicerContext], Iterator[Any]], method: str
    ) -> Callable[[Any, grpc.ServicerContext], Iterator[Any]]:
        def call(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            try:
                yield from behavior(request, context)
            except Exception as exc:
                self._fail(exc, context, method)
                raise

        return call

    def _wrapped(
        self, handler: grpc.RpcMethodHandler[Any, Any], method: str
    ) -> grpc.RpcMethodHandler[Any, Any]:
        return _rewrap(
            handler,
            unary_response=lambda behavior: self._wrap_unary_response(behavior, method),
            stream_response=lambda behavior: self._wrap_stream_response(behavior, method),
        )


_Behavior = Callable[[Any, grpc.ServicerContext], Any]


def _rewrap(
    handler: grpc.RpcMethodHandler[Any, Any],
    *,
    unary_response: Callable[[_Behavior], _Behavior],
    stream_response: Callable[[_Behavior], _Behavior],
) -> grpc.RpcMethodHandler[Any, Any]:
    """The same method handler with its behaviour wrapped: by ``unary_response`` for the
    shapes that answer one message, by ``stream_response`` for those that stream."""
    codec: dict[str, Any] = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(unary_response(handler.unary_unary), **codec)
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(stream_response(handler.unary_stream), **codec)
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(unary_response(handler.stream_unary), **codec)
    if handler.stream_stream is not None:
        return grpc.stream_stream_rpc_method_handler(
            stream_response(handler.stream_stream), **codec
        )
    return handler


class RequestLimitsInterceptor(_WrappingInterceptor):
    """Refuses a request over the bounds of ``lockgate.common.model.limits`` with
    ``INVALID_ARGUMENT`` naming each field and its limit, before the servicer runs.

    It sits inside ``ErrorMappingInterceptor``, which turns its ``InvalidArgument`` into the
    status. Probes and reflection pass through.
    """

    def _wrapped(
        self, handler: grpc.RpcMethodHandler[Any, Any], method: str
    ) -> grpc.RpcMethodHandler[Any, Any]:
        return _rewrap(handler, unary_response=_checked, stream_response=_checked)


def _checked(behavior: _Behavior) -> _Behavior:
    # Request types of this method whose fields are all numbers: no value of theirs can
    # break a bound, so they are not walked again after the first call.
    numbers_only: list[type[Message]] = []

    def call(request: Any, context: grpc.ServicerContext) -> Any:
        # A streamed request is an iterator of messages; Lockgate's services have none.
        if isinstance(request, Message) and type(request) not in numbers_only:
            if can_exceed_limits(type(request)):
                check_request_limits(request)
            else:
                numbers_only.append(type(request))
        return behavior(request, context)

    return call


class RpcMetricsInterceptor(_WrappingInterceptor):
    """Records ``rpc.server.duration`` of each call with OpenTelemetry's RPC attributes
    (``rpc.system``, ``rpc.service``, ``rpc.method``, ``rpc.grpc.status_code``). It sits
    outside the error mapping, so a refused call is recorded with the status its caller
    got; probes and reflection pass through."""

    def __init__(self, meter: metrics.Meter) -> None:
        super().__init__()
        self._instruments = Instruments(meter)

    def _wrapped(
        self, handler: grpc.RpcMethodHandler[Any, Any], method: str
    ) -> grpc.RpcMethodHandler[Any, Any]:
        service, _, name = method.lstrip("/").rpartition("/")
        attributes = {"rpc.system": "grpc", "rpc.service": service, "rpc.method": name}

        def record(started: float, context: grpc.ServicerContext, failed: bool) -> None:
            code = context.code()  # type: ignore[attr-defined]
            if not isinstance(code, grpc.StatusCode):
                code = grpc.StatusCode.UNKNOWN if failed else grpc.StatusCode.OK
            self._instruments.record(
                RPC_SERVER_DURATION,
                time.perf_counter() - started,
                {**attributes, "rpc.grpc.status_code": int(code.value[0])},
            )

        def unary(behavior: _Behavior) -> _Behavior:
            def call(request: Any, context: grpc.ServicerContext) -> Any:
                started, failed = time.perf_counter(), True
                try:
                    response = behavior(request, context)
                    failed = False
                    return response
                finally:
                    record(started, context, failed)

            return call

        def stream(behavior: _Behavior) -> _Behavior:
            def call(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
                started, failed = time.perf_counter(), True
                try:
                    yield from behavior(request, context)
                    failed = False
                finally:
                    record(started, context, failed)

            return call

        return _rewrap(handler, unary_response=unary, stream_response=stream)


class ServerBindError(OSError):
    """The server could not listen on the requested address."""


_LISTEN_RE = re.compile(r"^(?P<host>\[[0-9a-fA-F:.]+\]|[^:\[\]]+):(?P<port>\d{1,5})$")


def _parse_listen(listen: str) -> tuple[str, int]:
    match = _LISTEN_RE.match(listen)
    if match is None or int(match["port"]) > 65535:
        raise ValueError(
            f"listen address {listen!r} is not HOST:PORT; "
            "use e.g. 127.0.0.1:50051, 0.0.0.0:50051, [::]:50051 (port 0 picks a free port)"
        )
    return match["host"], int(match["port"])


MAX_RECEIVE_MESSAGE_BYTES = 4 * 1024 * 1024
"""Largest request a server reads (4 MiB); a larger one is answered RESOURCE_EXHAUSTED
without reaching a servicer. The request bounds of ``model.limits`` fit well inside it."""

MAX_CONCURRENT_RPCS = 256
"""Calls a server holds at once, running or queued for a worker thread; the next one is
answered RESOURCE_EXHAUSTED at once. With the 4 MiB message bound, requests can pin at
most about 1 GiB of memory."""

# Clients ping every 30 s (grpc_client); accept that instead of the 5-minute default that
# would answer our keepalives with GOAWAY "too_many_pings".
SERVER_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000),
    ("grpc.http2.max_ping_strikes", 0),
    ("grpc.max_receive_message_length", MAX_RECEIVE_MESSAGE_BYTES),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
)


@dataclass
class LockgateServer:
    """A started gRPC server of one service, with its health servicer."""

    server: grpc.Server
    service_name: str
    host: str
    port: int
    health: health.HealthServicer
    service_full_names: tuple[str, ...]
    telemetry: Telemetry
    grace_seconds: float
    _caught: CaughtSignals | None = field(default=None, init=False, repr=False)

    @property
    def address(self) -> str:
        """``host:port`` actually bound (the real port when ``listen`` asked for port 0)."""
        return f"{self.host}:{self.port}"

    def set_serving(self, serving: bool) -> None:
        """Report SERVING or NOT_SERVING for "" and every service on ``grpc.health.v1``."""
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ("", *self.service_full_names):
            self.health.set(name, status)

    def stop(self, grace_seconds: float | None = None) -> None:
        """Report NOT_SERVING, refuse new calls, let running ones finish for the grace
        period, then cancel them. Returns once the server is stopped."""
        grace = self.grace_seconds if grace_seconds is None else grace_seconds
        self.health.enter_graceful_shutdown()
        self.server.stop(grace).wait()

    def wait_for_termination(self, timeout: float | None = None) -> bool:
        """Block until the server stops (True) or ``timeout`` seconds pass (False)."""
        return bool(self.server.wait_for_termination(timeout))

    def catch_signals(
        self, signals: Sequence[signal.Signals] = (signal.SIGTERM, signal.SIGINT)
    ) -> None:
        """From now on ``signals`` are recorded, not fatal; `serve_until_signal` stops on the
        first (at once if it came before). Call it before announcing the service is up: a
        SIGTERM between that and `serve_until_signal` killed it without its graceful stop.
        Main thread only; a second call does nothing."""
        if self._caught is None:
            self._caught = CaughtSignals(signals)

    def serve_until_signal(
        self, *, on_signal: Callable[[signal.Signals], None] | None = None
    ) -> signal.Signals:
        """Serve until SIGTERM or SIGINT (or what `catch_signals` caught) arrives, then
        stop gracefully and flush telemetry. Main thread only (Python delivers signals
        there). ``on_signal`` runs there as soon as the signal is seen, before the server
        stops (the executor starts its shutdown bound with it). Returns the signal."""
        self.catch_signals()
        caught = self._caught
        assert caught is not None
        freeze_startup_heap()  # serving: the start-up is over
        try:
            received = caught.wait()
            _LOG.info("%s: %s received, stopping", self.service_name, received.name)
            if on_signal is not None:
                on_signal(received)
            self.stop()
        finally:
            caught.restore()
            self._caught = None
            self.telemetry.shutdown()
        return received


def _observing_interceptors(telemetry: Telemetry) -> list[grpc.ServerInterceptor]:
    """Tracing (when traces are on), then ``rpc.server.duration`` (when metrics are on)."""
    metering = [RpcMetricsInterceptor(telemetry.meter())] if telemetry.records_metrics else []
    return [*telemetry.server_interceptors(), *metering]


def _interceptors(
    service_name: str,
    telemetry: Telemetry,
    security: ServerSecurity,
    extra: Sequence[grpc.ServerInterceptor],
) -> list[grpc.ServerInterceptor]:
    """Outermost first: the SERVER span also covers the error mapping, so a failed call's
    span carries its status code; authentication comes before the request bounds."""
    # auth builds on this module's interceptor base, so it is imported when used.
    from lockgate.common.auth import Authenticator, AuthInterceptor

    authenticating = (
        [AuthInterceptor(Authenticator.from_file(security.auth_tokens))]
        if security.auth_tokens
        else []
    )
    return [
        *_observing_interceptors(telemetry),
        ErrorMappingInterceptor(service_name=service_name),
        *authenticating,
        RequestLimitsInterceptor(),
        *extra,
    ]


def _bind(server: grpc.Server, listen: str, service_name: str, security: ServerSecurity) -> int:
    """Add the listening port (TLS when ``security`` has it); the bound port.
    ``ServerBindError`` names the address and the process holding it."""
    try:
        return (
            server.add_secure_port(listen, security.tls.grpc_credentials())
            if security.tls
            else server.add_insecure_port(listen)
        )
    except RuntimeError:
        requested_host, requested_port = _parse_listen(listen)
        holder = describe_port_holder(requested_port, requested_host) if requested_port else None
        raise ServerBindError(
            f"{service_name} cannot listen on {listen}: "
            + (
                f"port {requested_port} is in use by {holder}; stop it or choose another port"
                if holder
                else "the address is in use or not assignable; choose another listen address"
            )
        ) from None


def build_server(
    *,
    service_name: str,
    listen: str,
    register: Callable[[grpc.Server], None],
    service_full_names: Sequence[str],
    telemetry: Telemetry | None = None,
    max_workers: int = 16,
    maximum_concurrent_rpcs: int = MAX_CONCURRENT_RPCS,
    grace_seconds: float = 10.0,
    extra_interceptors: Sequence[grpc.ServerInterceptor] = (),
    options: Sequence[tuple[str, Any]] = (),
    reuse_port: bool = False,
    security: ServerSecurity | None = None,
) -> LockgateServer:
    """Create, bind and start the gRPC server of one Lockgate service.

    ``register`` adds the servicers (e.g. ``add_CoordinatorServiceServicer_to_server``);
    ``service_full_names`` are their full names (``lockgate.v1.CoordinatorService``), reported
    SERVING on ``grpc.health.v1`` (with "") and listed by reflection. ``listen`` is
    ``HOST:PORT``; port 0 picks a free one (see ``LockgateServer.port``). Raises
    ``ServerBindError`` naming the address, and the process holding it, if the bind fails.

    ``maximum_concurrent_rpcs`` bounds the calls held at once (``MAX_CONCURRENT_RPCS``);
    requests are bounded by ``MAX_RECEIVE_MESSAGE_BYTES`` and ``model.limits``.

    ``reuse_port`` binds with ``SO_REUSEPORT`` so that several worker processes serve one
    port; the caller must have checked that nobody else holds it. Off by default, because
    gRPC's own default (on) would let two servers share a port silently.

    ``security`` (``lockgate.common.security``): TLS (mTLS with a client CA) and, with a
    token file, ``AuthInterceptor`` (``lockgate.common.auth``) before the request bounds.
    """
    host, _ = _parse_listen(listen)
    telemetry = telemetry or Telemetry.disabled(service_name)
    security = security or ServerSecurity()
    interceptors = _interceptors(service_name, telemetry, security, extra_interceptors)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=service_name),
        interceptors=interceptors,
        maximum_concurrent_rpcs=maximum_concurrent_rpcs,
        # gRPC keeps the first value of a repeated option, so ours come first.
        options=[("grpc.so_reuseport", int(reuse_port)), *SERVER_OPTIONS, *options],
    )
    register(server)
    health_servicer = health.HealthServicer(experimental_non_blocking=True)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = tuple(service_full_names)
    reflection.enable_server_reflection(
        (*names, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    port = _bind(server, listen, service_name, security)
    server.start()
    running = LockgateServer(
        server=server,
        service_name=service_name,
        host=host,
        port=port,
        health=health_servicer,
        service_full_names=names,
        telemetry=telemetry,
        grace_seconds=grace_seconds,
    )
    running.set_serving(True)
    _LOG.info(
        "%s listening on %s (%s, %s)",
        service_name,
        running.address,
        "mTLS"
        if security.tls and security.tls.client_ca
        else "TLS"
        if security.tls
        else "plaintext",
        "authenticated" if security.auth_tokens else "no authentication",
    )
    return running


__all__ = [
    "MAX_CONCURRENT_RPCS",
    "MAX_RECEIVE_MESSAGE_BYTES",
    "SERVER_OPTIONS",
    "STATUS_CODES",
    "ErrorMappingInterceptor",
    "LockgateServer",
    "RequestLimitsInterceptor",
    "ServerBindError",
    "build_server",
    "describe_port_holder",
    "internal_error_status",
    "rpc_status_for_error",
    "status_code_for",
]
