"""The interface between the executor's runtime and a data plane, in plain values.

The runtime hands a data plane one :class:`PrecommitWork` per triggered checkpoint of a
task and gets back a :class:`PrecommitOutput`: the offset ranges it read and the Kafka
transactions it left prepared, in the protocol's own vocabulary (``OffsetRange``,
``TransactionHandle`` and ``PipelineSpec`` of ``lockgate.common.model``), which the runtime
reports to the leader and the committer later commits or aborts. Nothing here knows about
gRPC or Spark.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from lockgate.common.model.handles import TransactionHandle
from lockgate.common.model.offsets import OffsetRange
from lockgate.common.model.pipeline_spec import PipelineSpec

if TYPE_CHECKING:
    from lockgate.executor.runtime.values import TaskRef


@dataclass(frozen=True)
class PrecommitWork:
    """Everything one task's pre-commit of checkpoint N needs, in plain values."""

    task: TaskRef
    checkpoint_id: int
    spec: PipelineSpec
    source_partitions: tuple[tuple[str, int], ...]
    start_offsets: Mapping[tuple[str, int], int]
    transactional_id_prefix: str
    max_records_per_partition: int = 0
    transaction_timeout_ms: int = 0


@dataclass(frozen=True)
class PrecommitOutput:
    """What a pre-commit left prepared, for ReportPrecommit."""

    ranges: tuple[OffsetRange, ...]
    handles: tuple[TransactionHandle, ...]
    records_read: int = 0
    records_written: int = 0
    records_dead_lettered: int = 0
    bytes_read: int = 0
    """Bytes of the source records' keys and values."""
    bytes_written: int = 0
    """Bytes of the keys and values written to the sink topic, as encoded."""
    oldest_record_timestamp_ms: int | None = None
    """The oldest Kafka timestamp of the batch's records (ms since the epoch), if known."""
    #: The Spark jobs the batch ran (none for an empty batch or without Spark), for traces.
    spark_job_ids: tuple[int, ...] = ()


class DataPlane(Protocol):
    """The batch runner the runtime drives; the real one is ``SparkDataPlane``."""

    def start(self) -> None:
        """Get ready to run batches (build and warm up the SparkSession)."""

    def run_precommit(self, work: PrecommitWork) -> PrecommitOutput:
        """Run one pre-commit; raise a ``LockgateError`` subclass on failure."""

    def cancel_running(self) -> None:
        """Cancel every batch running now (the executor is stopping): each ends soon after,
        failed, its prepared transactions aborted."""

    def stop(self, *, timeout_s: float = 10.0) -> None:
        """Release resources (stop the SparkSession and its JVM) within ``timeout_s``."""


__all__ = ["DataPlane", "PrecommitOutput", "PrecommitWork"]
