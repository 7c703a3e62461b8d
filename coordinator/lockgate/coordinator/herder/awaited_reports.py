"""Which executors' report calls each triggered checkpoint still awaits, so that the
leader's write of one executor's pre-commits can wait, briefly, for the rest of the
checkpoint's (`Reports`, through its group commit's `linger`).

A checkpoint whose tasks run on two executors completes only with the later of their two
ReportPrecommits calls. Written as they came, the first call's reports took one
transaction and the second's another, in series under the pipeline's lock, and the
checkpoint completed only at the end of the second: in the round-trip bench, SQLite, the
two writes were 11-12 ms and 15-17 ms of a 58 ms median (README, "Where the round trip's
time goes"). Waiting for the second call writes both in one transaction, which costs less
than the two (on PostgreSQL, in process, 30 ms against 17 + 24 ms for 100 reports).

The wait is only taken when it delays no completion: while every checkpoint the queued
calls report still awaits another executor's call. A call reporting one checkpoint that
its reports alone can complete (all its other executors' calls arrived, or it runs on one
executor only) is written at once, with whatever else is queued. A checkpoint the leader
knows nothing of (triggered by an earlier term, or an older checkpoint of a pipeline
triggered since) is not waited for either. What is waited for is bounded by the linger:
an executor that dies or is slow costs the calls of its peers that much, once.

One entry per pipeline, its latest trigger's: a pipeline's checkpoints complete in order,
so its reports rarely concern an older one, and those are written without waiting.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

from lockgate.common.model.ids import CheckpointId, ExecutorId, PipelineId
from lockgate.coordinator.domain.checkpoints import Precommit

#: How long a report call's write waits at most for the calls of the same checkpoints'
#: other executors (s): a few times their usual spread (6 ms at the median in the
#: round-trip bench), as the executors' own reports wait for each other (`LINGER_S`).
REPORT_LINGER_S = 0.02


class AwaitedReports:
    """Per pipeline, its latest triggered checkpoint and the executors whose report call
    has not arrived yet (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._awaited: dict[PipelineId, tuple[CheckpointId, set[ExecutorId]]] = {}

    def expect(
        self, pipeline_id: PipelineId, checkpoint_id: CheckpointId, executors: Iterable[ExecutorId]
    ) -> None:
        """Checkpoint N of the pipeline is about to be triggered on `executors`: each will
        report in a call of its own. N replaces any earlier checkpoint of the pipeline; one
        executor alone is nothing to wait for."""
        awaited = set(executors)
        with self._lock:
            if len(awaited) > 1:
                self._awaited[pipeline_id] = (checkpoint_id, awaited)
            else:
                self._awaited.pop(pipeline_id, None)

    def forget(self, pipeline_id: PipelineId) -> None:
        """The pipeline is gone: nothing of it is awaited."""
        with self._lock:
            self._awaited.pop(pipeline_id, None)

    def arrived(self, precommits: Sequence[Precommit]) -> None:
        """A report call of these pre-commits came: their executors are awaited no more
        for those checkpoints."""
        with self._lock:
            for p in precommits:
                entry = self._awaited.get(p.pipeline_id)
                if entry is None or entry[0] != p.checkpoint_id:
                    continue
                entry[1].discard(p.executor_id)
                if not entry[1]:
                    del self._awaited[p.pipeline_id]

    def worth_waiting(self, calls: Sequence[Sequence[Precommit]]) -> bool:
        """Whether every checkpoint these report calls (arrived: `arrived`) concern still
        awaits another executor's call, so that writing them now completes none of them."""
        with self._lock:
            for call in calls:
                for p in call:
                    entry = self._awaited.get(p.pipeline_id)
                    if entry is None or entry[0] != p.checkpoint_id:
                        return False
            return any(calls)


__all__ = ["REPORT_LINGER_S", "AwaitedReports"]
