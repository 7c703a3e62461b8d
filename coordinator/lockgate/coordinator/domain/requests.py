"""Idempotent mutating calls: what a `request_id` seen before means (AIP-155).

A client sends the same `request_id` on every retry of one logical call (its answer may
have been lost: a deadline, a dropped connection, a leader failover), and a new one per
call. The leader records, per id, the RPC, a hash of the request without its id, and the
answer; a retry of the same request gets that answer again instead of running twice (a
retried CreatePipeline does not become ALREADY_EXISTS, a retried DeletePipeline not
NOT_FOUND). The same id with another RPC or another request is a client bug:
INVALID_ARGUMENT naming `request_id`.

Rules and known limits, written down here:
- Only a success is recorded: a refused call changed nothing, and its retry is judged
  again against the state of then (it may succeed once the precondition holds).
- The record is written right after the call's own writes, not in their transaction: a
  leader that dies between the two leaves a call done but unrecorded, whose retry runs
  again (and may be refused, e.g. ALREADY_EXISTS).
- Records are kept `REQUEST_RETENTION_MS` (24 h, by the database's clock), then pruned:
  a client retries within its call's deadline, far less.
- The Report* calls of executors carry a request_id but are not recorded: a repeat is
  recognised by its checkpoint, task and generation, on the hot path of every checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass

from lockgate.coordinator.domain.errors import InvalidArgument

REQUEST_RETENTION_MS = 24 * 60 * 60 * 1000
"""How long a recorded answer is replayed: 24 hours."""

MAX_REQUEST_ID_LENGTH = 255
"""Longest request_id accepted (a UUID is 36 characters)."""


@dataclass(frozen=True)
class RecordedRequest:
    """A mutating call that succeeded, as the leader recorded it."""

    request_id: str
    method: str
    """The RPC's name, e.g. "CreatePipeline"."""
    request_hash: str
    """SHA-256 (hex) of the request without its request_id."""
    response: bytes
    """The serialized response it answered."""
    created_at_ms: int


def check_request_id(request_id: str) -> None:
    """InvalidArgument naming `request_id` if it is too long to record."""
    if len(request_id) > MAX_REQUEST_ID_LENGTH:
        raise InvalidArgument.for_field(
            "request_id",
            f"is {len(request_id)} characters, more than {MAX_REQUEST_ID_LENGTH}; send a UUID",
        )


def replay(recorded: RecordedRequest | None, *, method: str, request_hash: str) -> bytes | None:
    """The answer to give again for a request seen before, or None to run it.

    InvalidArgument naming `request_id` if the id was used for another RPC or another
    request: a new call needs a new id.
    """
    if recorded is None:
        return None
    if recorded.method != method:
        raise InvalidArgument.for_field(
            "request_id",
            f"{recorded.request_id!r} was already used for a {recorded.method} call; send a "
            f"new request_id for each {method} call (the same one only for its retries)",
        )
    if recorded.request_hash != request_hash:
        raise InvalidArgument.for_field(
            "request_id",
            f"{recorded.request_id!r} was already used for a different {method} request; "
            "send a new request_id for each call (the same one only to retry the same request)",
        )
    return recorded.response
