"""Errors of the coordinator's domain and store.

They are `lockgate.common.errors` types, so the shared gRPC interceptor maps each to one
status code: `InvalidArgument` (with field violations), `NotFound`, `AlreadyExists`,
`FailedPrecondition` (and `StaleGeneration`, `IllegalTransition`), `Unavailable` (and
`FencedError`, `NotLeader`: the caller retries against the current leader).
"""

from __future__ import annotations

from lockgate.common.errors import (
    AlreadyExists,
    FailedPrecondition,
    FieldViolation,
    InvalidArgument,
    NotFound,
    NotLeader,
    PreconditionViolation,
    Unavailable,
)

__all__ = [
    "AlreadyExists",
    "FailedPrecondition",
    "FencedError",
    "FieldViolation",
    "IllegalTransition",
    "InvalidArgument",
    "NotFound",
    "NotLeader",
    "PreconditionViolation",
    "StaleGeneration",
    "Unavailable",
]


class StaleGeneration(FailedPrecondition):
    """A report carried an older executor or task generation than the current one (zombie)."""

    default_reason = "STALE_GENERATION"


class IllegalTransition(FailedPrecondition):
    """A state machine was asked for a transition its table does not allow."""

    default_reason = "ILLEGAL_TRANSITION"


class FencedError(Unavailable):
    """A leader-only write found that its `leader_epoch` no longer holds the lease.

    Nothing was written. The replica has lost leadership and must step down; the caller
    retries against the current leader.
    """

    default_reason = "FENCED_LEADER"
