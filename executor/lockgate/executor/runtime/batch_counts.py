"""The executor's per-batch metrics: records read, written and dead-lettered, pre-commit
duration and end-to-end visibility latency (``lockgate.common.metrics``).

A pre-commit's counts are held from just before its report until its checkpoint's commit
is acked here, then added, so the records-written counter matches what read_committed
readers see: an aborted checkpoint's batch is never counted (its records are read and
written again by a later one). They are held before the report goes because the leader
commits as soon as a report makes the checkpoint COMPLETE: its commit can reach this
executor before the report's answer does. Visibility latency is measured at the commit from
the batch's oldest record timestamp, so it is the worst record's latency of each batch.

Known gaps, by design: counts of a checkpoint committed by another executor (the task's
executor died after its pre-commit) or after this process restarted are not added here;
the pending counts are bounded (`MAX_PENDING`, oldest dropped first) so checkpoints never
committed nor aborted on this executor cannot grow memory.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from lockgate.common.metrics import (
    DEAD_LETTER_RECORDS,
    PRECOMMIT_DURATION,
    TASK_BYTES_READ,
    TASK_BYTES_WRITTEN,
    TASK_RECORDS_READ,
    TASK_RECORDS_WRITTEN,
    VISIBILITY_LATENCY,
    Instruments,
)
from lockgate.executor.dataplane.protocol import PrecommitOutput
from lockgate.executor.runtime.values import TaskRef

#: Most pre-committed batches whose commit or abort this executor still waits for.
MAX_PENDING = 1024


@dataclass(frozen=True)
class _BatchCount:
    task_index: int
    records_read: int
    records_written: int
    records_dead_lettered: int
    bytes_read: int
    bytes_written: int
    oldest_record_timestamp_ms: int | None


class BatchCounts:
    """Pre-committed batches' counts until their checkpoint is committed or aborted."""

    def __init__(
        self, instruments: Instruments, *, wall_clock: Callable[[], float] = time.time
    ) -> None:
        self._instruments = instruments
        self._wall_clock = wall_clock
        self._lock = threading.Lock()
        self._pending: OrderedDict[tuple[str, int], list[_BatchCount]] = OrderedDict()

    def held(self, task: TaskRef, checkpoint_id: int, output: PrecommitOutput) -> None:
        """A batch about to be reported: hold its counts until N commits or aborts."""
        count = _BatchCount(
            task_index=task.task_index,
            records_read=output.records_read,
            records_written=output.records_written,
            records_dead_lettered=output.records_dead_lettered,
            bytes_read=output.bytes_read,
            bytes_written=output.bytes_written,
            oldest_record_timestamp_ms=output.oldest_record_timestamp_ms,
        )
        with self._lock:
            self._pending.setdefault((task.pipeline_name, checkpoint_id), []).append(count)
            while len(self._pending) > MAX_PENDING:
                self._pending.popitem(last=False)

    def precommitted(self, task: TaskRef, duration_s: float) -> None:
        """A batch the leader accepted into a live checkpoint: record its duration."""
        self._instruments.record(
            PRECOMMIT_DURATION, duration_s, _attributes(task.pipeline_name, task.task_index)
        )

    def dropped(self, task: TaskRef, checkpoint_id: int) -> None:
        """A held batch that will never count: its report was refused, or the leader
        answered that N is aborted."""
        key = (task.pipeline_name, checkpoint_id)
        with self._lock:
            kept = [b for b in self._pending.get(key, []) if b.task_index != task.task_index]
            if kept:
                self._pending[key] = kept
            else:
                self._pending.pop(key, None)

    def committed(self, pipeline_name: str, checkpoint_id: int) -> None:
        """The checkpoint's commit was acked: add its batches' counts (once)."""
        with self._lock:
            batches = self._pending.pop((pipeline_name, checkpoint_id), [])
        now_ms = self._wall_clock() * 1000
        for batch in batches:
            attributes = _attributes(pipeline_name, batch.task_index)
            self._instruments.add(TASK_RECORDS_READ, batch.records_read, attributes)
            self._instruments.add(TASK_RECORDS_WRITTEN, batch.records_written, attributes)
            self._instruments.add(TASK_BYTES_READ, batch.bytes_read, attributes)
            self._instruments.add(TASK_BYTES_WRITTEN, batch.bytes_written, attributes)
            self._instruments.add(DEAD_LETTER_RECORDS, batch.records_dead_lettered, attributes)
            if batch.oldest_record_timestamp_ms is not None:
                self._instruments.record(
                    VISIBILITY_LATENCY,
                    max(0.0, now_ms - batch.oldest_record_timestamp_ms) / 1000,
                    {"pipeline": pipeline_name},
                )

    def aborted(self, pipeline_name: str, checkpoint_id: int) -> None:
        """The checkpoint aborted: its batches are never counted."""
        with self._lock:
            self._pending.pop((pipeline_name, checkpoint_id), None)


def _attributes(pipeline_name: str, task_index: int) -> dict[str, str | int]:
    return {"pipeline": pipeline_name, "task": str(task_index)}


__all__ = ["MAX_PENDING", "BatchCounts"]
