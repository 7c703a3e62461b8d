"""Domain errors every Lockgate service raises, independent of gRPC.

Domain and store code raise these plain exceptions; ``lockgate.common.grpc_server`` maps
them, in one interceptor, to a gRPC status code plus ``google.rpc`` error details
(``BadRequest``, ``PreconditionFailure``, ``ResourceInfo``, ``ErrorInfo``, ``RetryInfo``),
so a client in any language can read which field was wrong. This module imports no
``grpc`` and no ``*_pb2``: domain code can use it without a network stack.

Each class corresponds to exactly one gRPC status code (see ``grpc_server.STATUS_CODES``).
Every error carries a machine-readable ``reason`` (UPPER_SNAKE_CASE, the ``ErrorInfo``
reason) and string ``metadata``; the human ``message`` should say what was wrong and how to
fix it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

# The ``ErrorInfo.domain`` of every error Lockgate raises: the logical owner of ``reason``.
ERROR_DOMAIN = "lockgate.dev"

# Trailing metadata key of a follower's UNAVAILABLE answer: the leader's ``host:port``.
LEADER_METADATA_KEY = "lockgate-leader"


@dataclass(frozen=True)
class FieldViolation:
    """One bad field of a request: ``field`` is a path such as ``pipeline.sources[0].topic``."""

    field: str
    description: str


@dataclass(frozen=True)
class PreconditionViolation:
    """One unmet precondition: ``type`` (e.g. ``PIPELINE_STATE``), ``subject``, what is wrong."""

    type: str
    subject: str
    description: str


class LockgateError(Exception):
    """Base class of the errors a Lockgate RPC may return to its caller.

    ``message`` is sent to the caller verbatim, so it must never contain a secret.
    """

    default_reason: ClassVar[str] = "ERROR"

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason or self.default_reason
        self.metadata: Mapping[str, str] = MappingProxyType(dict(metadata or {}))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, reason={self.reason!r})"


class InvalidArgument(LockgateError):
    """The request itself is wrong, whatever the system's state (``INVALID_ARGUMENT``)."""

    default_reason = "INVALID_ARGUMENT"

    def __init__(
        self,
        message: str,
        *,
        violations: Sequence[FieldViolation] = (),
        reason: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message, reason=reason, metadata=metadata)
        self.violations: tuple[FieldViolation, ...] = tuple(violations)

    @classmethod
    def for_field(cls, field: str, description: str) -> InvalidArgument:
        """An error about a single field; the message names the field and the fix."""
        return cls(f"{field}: {description}", violations=[FieldViolation(field, description)])


class _ResourceError(LockgateError):
    """An error about one named resource (``google.rpc.ResourceInfo``)."""

    def __init__(
        self,
        message: str,
        *,
        resource_type: str = "",
        resource_name: str = "",
        reason: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message, reason=reason, metadata=metadata)
        self.resource_type = resource_type
        self.resource_name = resource_name


class NotFound(_ResourceError):
    """The named resource does not exist (``NOT_FOUND``)."""

    default_reason = "NOT_FOUND"


class AlreadyExists(_ResourceError):
    """A resource with that name already exists (``ALREADY_EXISTS``)."""

    default_reason = "ALREADY_EXISTS"


class FailedPrecondition(LockgateError):
    """The request is valid but the system is not in a state to run it (``FAILED_PRECONDITION``).

    The caller should not retry until the state changes (e.g. resume the pipeline first).
    """

    default_reason = "FAILED_PRECONDITION"

    def __init__(
        self,
        message: str,
        *,
        violations: Sequence[PreconditionViolation] = (),
        reason: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message, reason=reason, metadata=metadata)
        self.violations: tuple[PreconditionViolation, ...] = tuple(violations)


class Aborted(LockgateError):
    """A concurrency conflict (version mismatch, lost compare-and-set); retry the whole
    read-modify-write (``ABORTED``)."""

    default_reason = "ABORTED"


class PermissionDenied(LockgateError):
    """The caller may not do this (``PERMISSION_DENIED``)."""

    default_reason = "PERMISSION_DENIED"


class Unauthenticated(LockgateError):
    """The caller did not prove who it is: no, or an unknown, token or client certificate
    (``UNAUTHENTICATED``)."""

    default_reason = "UNAUTHENTICATED"


class FencingToken(enum.Enum):
    """Which fencing token a refusal is about (``lockgate.v1.FencingToken``)."""

    LEADER_EPOCH = "leader_epoch"
    EXECUTOR_GENERATION = "executor_generation"
    TASK_GENERATION = "task_generation"


class StaleTokenError(FailedPrecondition):
    """A call carried a stale fencing token; its sender is a zombie and must stop acting.

    Every fenced refusal of every service is this one error, as the v1 protos specify:
    ``FAILED_PRECONDITION`` with reason ``STALE_FENCING_TOKEN``, a ``PreconditionFailure``
    and a ``lockgate.v1.FencingFailure`` detail (token, subject, presented and current
    value), which ``grpc_server`` adds. Retrying the same call can never succeed.
    """

    default_reason = "STALE_FENCING_TOKEN"

    def __init__(
        self,
        *,
        token: FencingToken,
        subject: str,
        presented: int,
        current: int,
        rpc: str = "",
        message: str = "",
    ) -> None:
        what = f"{token.value} of {subject}" if subject else token.value
        super().__init__(
            message
            or (
                f"{rpc} refused: {what} {presented} is stale, this executor has seen {current};"
                " the caller is no longer entitled to act and must stop (a newer leader or"
                " registration has taken over)"
            ),
            violations=[
                PreconditionViolation(
                    type=token.name,
                    subject=subject,
                    description=f"presented {presented}, current {current}",
                )
            ],
            metadata={
                "token": token.value,
                "subject": subject,
                "presented": str(presented),
                "current": str(current),
            },
        )
        self.token = token
        self.subject = subject
        self.presented = presented
        self.current = current
        self.rpc = rpc

    def log_line(self) -> str:
        """The stable log line tests and operators grep for."""
        if self.token is FencingToken.LEADER_EPOCH:
            return (
                f"refused leader_epoch={self.presented} highest_seen={self.current} rpc={self.rpc}"
            )
        subject = f" subject={self.subject}" if self.subject else ""
        return (
            f"refused {self.token.value}={self.presented} current={self.current}"
            f"{subject} rpc={self.rpc}"
        )


class ResourceExhausted(LockgateError):
    """A quota or capacity limit was hit (``RESOURCE_EXHAUSTED``)."""

    default_reason = "RESOURCE_EXHAUSTED"


class Unimplemented(LockgateError):
    """This server does not support the operation (``UNIMPLEMENTED``)."""

    default_reason = "UNIMPLEMENTED"


class DeadlineExceeded(LockgateError):
    """Work did not finish in time; it may or may not have happened (``DEADLINE_EXCEEDED``)."""

    default_reason = "DEADLINE_EXCEEDED"


class DataLoss(LockgateError):
    """Data that was promised is gone and retrying cannot bring it back (``DATA_LOSS``),
    e.g. a pre-committed transaction the broker aborted at its timeout."""

    default_reason = "DATA_LOSS"


class Unavailable(LockgateError):
    """The service cannot serve this now; the caller may retry (``UNAVAILABLE``).

    ``leader_address`` is set by a follower coordinator: the call must go to the leader at
    that address instead. It travels as the trailing metadata ``lockgate-leader`` and in the
    ``ErrorInfo`` metadata. ``retry_after_seconds`` becomes ``google.rpc.RetryInfo``.
    """

    default_reason = "UNAVAILABLE"

    def __init__(
        self,
        message: str,
        *,
        leader_address: str | None = None,
        retry_after_seconds: float | None = None,
        reason: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        merged = dict(metadata or {})
        if leader_address:
            merged["leader_address"] = leader_address
        super().__init__(message, reason=reason, metadata=merged)
        self.leader_address = leader_address
        self.retry_after_seconds = retry_after_seconds


class NotLeader(Unavailable):
    """A follower was asked to do leader-only work; the caller must go to ``leader_address``
    (``None`` while no leader is known: retry later)."""

    default_reason = "NOT_LEADER"

    def __init__(self, *, leader_address: str | None, message: str = "") -> None:
        super().__init__(
            message
            or (
                f"this coordinator is not the leader; send the call to {leader_address}"
                if leader_address
                else "this coordinator is not the leader and no leader is elected yet; retry"
            ),
            leader_address=leader_address,
            retry_after_seconds=None if leader_address else 1.0,
        )


class Internal(LockgateError):
    """A bug or broken invariant (``INTERNAL``). Prefer letting unexpected exceptions
    propagate: the interceptor logs them and sends the caller only an incident id."""

    default_reason = "INTERNAL"


__all__ = [
    "ERROR_DOMAIN",
    "LEADER_METADATA_KEY",
    "Aborted",
    "AlreadyExists",
    "DataLoss",
    "DeadlineExceeded",
    "FailedPrecondition",
    "FencingToken",
    "FieldViolation",
    "Internal",
    "InvalidArgument",
    "LockgateError",
    "NotFound",
    "NotLeader",
    "PermissionDenied",
    "PreconditionViolation",
    "ResourceExhausted",
    "StaleTokenError",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
]
