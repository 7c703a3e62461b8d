"""A data plane that reads and writes nothing (``--data-plane none``).

Tests of the control path (membership, fencing, failpoints, commit and abort of handles
made elsewhere) use it so they do not pay for a SparkSession.
"""

from __future__ import annotations

from lockgate.common.model.offsets import OffsetRange
from lockgate.executor.dataplane.protocol import PrecommitOutput, PrecommitWork


class ControlOnlyDataPlane:
    """Every pre-commit is empty: an empty range per partition, no handle."""

    def start(self) -> None:
        """Nothing to start."""

    def run_precommit(self, work: PrecommitWork) -> PrecommitOutput:
        """An empty range at the start offset of each partition, no handle."""
        ranges = tuple(
            OffsetRange(topic, partition, offset, offset)
            for (topic, partition) in work.source_partitions
            for offset in [work.start_offsets.get((topic, partition), 0)]
        )
        return PrecommitOutput(ranges=ranges, handles=())

    def cancel_running(self) -> None:
        """Nothing runs long enough to cancel."""

    def stop(self, *, timeout_s: float = 10.0) -> None:
        """Nothing to stop."""


__all__ = ["ControlOnlyDataPlane"]
