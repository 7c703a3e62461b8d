"""Telling executors that their assignment changed, so they heartbeat now.

An executor learns its tasks only from its Heartbeat answers, every heartbeat interval
(1 s by default): a created pipeline, a task moved off a dead executor, a pause or an
update would otherwise wait up to an interval before the executor starts or stops
anything. After each such change the leader calls `NotifyAssignment` on the executors whose
assignment it changed; each heartbeats at once and reads its assignment the usual way.

Rules:
- A hint, never a duty: one call per executor, on the call pool (never in a pass), with
  the trigger's deadline and no retry. A lost or refused one (an executor that does not
  serve it yet, in a rolling upgrade) costs what it did before: one heartbeat interval.
- One call per executor at a time (the pool's key): a change made while a notice to the
  same executor is out is seen by the heartbeat that notice asks for, or the next one.
- Only live executors are told; a dead one's tasks move on the rebalance, which tells
  their new owners.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from lockgate.common.model.ids import ExecutorId, PipelineId
from lockgate.coordinator.domain.errors import Unavailable
from lockgate.coordinator.domain.lease import Fence
from lockgate.coordinator.domain.membership import ExecutorRecord
from lockgate.coordinator.herder.call_pool import CallPool
from lockgate.coordinator.herder.executors import ExecutorCallFailed, ExecutorClient
from lockgate.coordinator.herder.lease_keeper import LeaseKeeper
from lockgate.coordinator.herder.membership import Membership
from lockgate.coordinator.store.sql_store import SqlStore

_LOG = logging.getLogger(__name__)


class AssignmentNotices:
    """Sends `NotifyAssignment` to the executors whose assignment changed (module docstring)."""

    def __init__(
        self,
        *,
        store: SqlStore,
        lease: LeaseKeeper,
        membership: Membership,
        executors: ExecutorClient,
        calls: CallPool,
    ) -> None:
        self._store = store
        self._lease = lease
        self._membership = membership
        self._executors = executors
        self._calls = calls

    def tell(self, fence: Fence, executor_ids: Iterable[ExecutorId]) -> None:
        """Tell each live executor of `executor_ids` (the pass's `fence`)."""
        wanted = set(executor_ids)
        if not wanted:
            return
        alive = self._membership.alive_executors()
        for executor_id in sorted(wanted & alive.keys()):
            executor = alive[executor_id]
            self._calls.run(
                ("notify", executor_id),
                lambda e=executor: self._notify(fence, e),  # type: ignore[misc]
                wait=False,
                wake=False,  # a hint: its end leaves the loop nothing to do
            )

    def owners(self, pipeline_id: PipelineId) -> set[ExecutorId]:
        """The executors `pipeline_id`'s tasks are assigned to now."""
        tasks = self._store.pipelines.list_tasks(pipeline_id=pipeline_id)
        return {t.executor_id for t in tasks if t.executor_id is not None}

    def tell_owners(self, pipeline_id: PipelineId, also: Iterable[ExecutorId] = ()) -> None:
        """Tell the executors of `pipeline_id`'s tasks, and `also` (its owners before a
        change that removed tasks), after its config, target state or tasks changed in
        place (a rebalance tells of the tasks it moves)."""
        fence = self._lease.current_fence()
        if fence is None:
            return
        try:
            self.tell(fence, self.owners(pipeline_id) | set(also))
        except Unavailable as exc:
            # The change is written; only the hint is lost (the next heartbeat brings it).
            _LOG.info("executors of %s not told of its change: %s", pipeline_id, exc)

    def _notify(self, fence: Fence, executor: ExecutorRecord) -> None:
        try:
            self._executors.notify_assignment(fence=fence, executor=executor)
        except ExecutorCallFailed as exc:
            # A hint: the executor's next heartbeat brings the change anyway.
            _LOG.info("NotifyAssignment to %s not delivered: %s", executor.executor_id, exc)


__all__ = ["AssignmentNotices"]
