"""Typed errors of the executor's data plane.

They subclass ``lockgate.common.errors`` so the executor servicer maps them to gRPC status
codes in one place. Spark runs the reader and writer in separate Python workers, so an
error raised there reaches the driver only as text inside Spark's exception; the record
error therefore also knows how to serialise itself into, and be recovered from, that text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from lockgate.common.errors import FailedPrecondition, Internal, InvalidArgument
from lockgate.common.model.offsets import record_name

_RECORD_ERROR_MARK = "LOCKGATE_RECORD_ERROR"
_RECORD_ERROR_RE = re.compile(_RECORD_ERROR_MARK + r"<<(\{.*?\})>>")


@dataclass(frozen=True)
class RecordLocation:
    """Where a bad record lives in Kafka."""

    topic: str
    partition: int
    offset: int


class RecordError(FailedPrecondition):
    """A record could not be decoded or encoded and ``errors.tolerance`` is ``none``."""

    default_reason = "BAD_RECORD"

    def __init__(self, location: RecordLocation, reason: str) -> None:
        super().__init__(
            f"bad record at {record_name(location.topic, location.partition, location.offset)}:"
            f" {reason}"
            " (set errors.tolerance: all with a dead_letter_topic to route such records"
            " to a dead-letter topic instead of failing the task)",
            metadata={
                "topic": location.topic,
                "partition": str(location.partition),
                "offset": str(location.offset),
            },
        )
        self.location = location
        self.record_reason = reason

    def to_marker(self) -> str:
        """Text that survives the trip through Spark's exception message to the driver."""
        payload = json.dumps(
            {
                "topic": self.location.topic,
                "partition": self.location.partition,
                "offset": self.location.offset,
                "reason": self.record_reason,
            }
        )
        return f"{_RECORD_ERROR_MARK}<<{payload}>>"

    @classmethod
    def from_text(cls, text: str) -> RecordError | None:
        """Recover the error a Spark worker raised from the driver-side exception text."""
        match = _RECORD_ERROR_RE.search(text)
        if match is None:
            return None
        data = json.loads(match.group(1))
        location = RecordLocation(
            topic=str(data["topic"]), partition=int(data["partition"]), offset=int(data["offset"])
        )
        return cls(location, str(data["reason"]))


class WorkerRecordError(Exception):
    """Raised inside a Spark worker; its message carries a ``RecordError`` marker."""

    def __init__(self, error: RecordError) -> None:
        super().__init__(f"{error.message} {error.to_marker()}")


class TransformError(InvalidArgument):
    """The pipeline's transform failed; the message is Spark's (or the function's) own."""

    default_reason = "TRANSFORM_FAILED"


class SourceError(FailedPrecondition):
    """The Kafka source cannot be read (missing topic, unreachable broker, stuck range)."""

    default_reason = "SOURCE_FAILED"


class OffsetOutOfRangeError(SourceError):
    """The offset a partition resumes from is no longer (retention) or not yet (past the
    log end) in the log. It fails the task: skipping to the log start would lose records
    silently, and waiting past the end would stall it; the operator decides."""

    default_reason = "OFFSET_OUT_OF_RANGE"


class SinkError(Internal):
    """The Kafka sink could not pre-commit, commit or abort (fenced, missing topic, timeout)."""

    default_reason = "SINK_FAILED"
