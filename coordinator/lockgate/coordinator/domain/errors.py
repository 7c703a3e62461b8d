"""Errors of the coordinator's domain and store.

They are `lockgate.common.errors` types, so the shared gRPC interceptor maps each to one
status code: `InvalidArgument` (with field violations), `NotFound`, `AlreadyExists`,
`FailedPrecondition` (and `StaleGeneration`, `IllegalTransition`), `Unavailable` (and
`FencedError`, `NotLeader`: the caller retries against the current leader).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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
    "SpecViolation",
    "StaleGeneration",
    "Unavailable",
    "invalid_spec",
]


@dataclass(frozen=True)
class SpecViolation:
    """One invalid config field: where it is, what is wrong, and how to fix it."""

    field: str
    """Dotted path into the config, e.g. `sink.kafka.topic` or `source.kafka.topics[1]`."""
    description: str
    """What is wrong with the value."""
    fix: str
    """What to write instead."""

    def __str__(self) -> str:
        return f"{self.field or '<config>'}: {self.description}; fix: {self.fix}"

    def to_field_violation(self) -> FieldViolation:
        """The `google.rpc.BadRequest` form: the fix is folded into the description."""
        return FieldViolation(field=self.field, description=f"{self.description}; fix: {self.fix}")


def invalid_spec(violations: Sequence[SpecViolation]) -> InvalidArgument:
    """Return the InvalidArgument that reports every violation of a pipeline config."""
    return InvalidArgument(
        "invalid pipeline config: " + "; ".join(str(v) for v in violations),
        violations=[v.to_field_violation() for v in violations],
        reason="INVALID_PIPELINE_CONFIG",
    )


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
