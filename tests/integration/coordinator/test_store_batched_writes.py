# ruff: noqa: F811 - the fixtures imported from test_store are redefined as test parameters
"""The leader's batched writes, on SQLite and PostgreSQL: every pipeline a pass finds due
is triggered in one transaction, the COMMITTED marks of several pipelines' commit jobs
share one, and so do ReportPrecommits batches of executors that arrive together; a refused
pipeline does not stop the others' triggers, a batch of marks is all or nothing, and each
executor's batch gets its own answers."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest
import sqlalchemy as sa

from lockgate.common.errors import FailedPrecondition
from lockgate.common.model.ids import CheckpointId, PipelineId, TaskId
from lockgate.common.model.offsets import TopicPartition
from lockgate.coordinator.domain.errors import IllegalTransition, NotFound
from lockgate.coordinator.domain.lease import Fence
from lockgate.coordinator.domain.states import CheckpointState
from lockgate.coordinator.domain.tasks import split_partitions
from lockgate.coordinator.store import SqlStore
from tests.integration.coordinator.test_herder_commits import leading_herder
from tests.integration.coordinator.test_store import (
    lead,
    open_stores,  # noqa: F401 - fixture
    spec,
    store_url,  # noqa: F401 - fixture
)
from tests.integration.coordinator.test_store_checkpoints import (
    E1,
    E2,
    precommit,
    precommit_of,
)
from tests.support.waits import wait_for

P, Q, R = PipelineId("p"), PipelineId("q"), PipelineId("r")


def running_pipelines(store: SqlStore, fence: Fence, *names: str) -> dict[str, list[TaskId]]:
    """Pipelines over partitions in-0..3, two tasks each: task 0 on e1, task 1 on e2."""
    store.executors.register_executor(fence=fence, executor_id=E1, address="e1:1")
    store.executors.register_executor(fence=fence, executor_id=E2, address="e2:1")
    splits = split_partitions([TopicPartition("in", p) for p in range(4)], 2)
    tasks: dict[str, list[TaskId]] = {}
    for name in names:
        store.pipelines.create_pipeline(fence=fence, spec=spec(name, tasks_max=2))
        records = store.pipelines.set_pipeline_tasks(
            fence=fence, pipeline_id=PipelineId(name), splits=splits
        )
        tasks[name] = [t.task_id for t in records]
    store.pipelines.apply_assignment(
        fence=fence,
        assignment={E1: {t[0] for t in tasks.values()}, E2: {t[1] for t in tasks.values()}},
    )
    return tasks


@contextmanager
def counted_commits(store: SqlStore) -> Iterator[list[int]]:
    """How many transactions the store commits inside the block."""
    commits: list[int] = []

    def count(_conn: object) -> None:
        commits.append(1)

    sa.event.listen(store.engine, "commit", count)
    try:
        yield commits
    finally:
        sa.event.remove(store.engine, "commit", count)


def test_every_due_pipeline_triggers_in_one_transaction_and_a_refused_one_alone_fails(
    open_stores: Callable[..., SqlStore],
) -> None:
    store = open_stores()
    fence = lead(store)
    running_pipelines(store, fence, "p", "q")
    # r has no tasks yet: refused, with nothing written for it.
    store.pipelines.create_pipeline(fence=fence, spec=spec("r"))

    with counted_commits(store) as commits:
        outcomes = store.checkpoints.trigger_checkpoints(
            fence=fence, pipeline_ids=[Q, R, PipelineId("gone"), P]
        )
    assert len(commits) == 1
    assert {p: o.state for p, o in outcomes.items() if not isinstance(o, Exception)} == {
        P: CheckpointState.TRIGGERED,
        Q: CheckpointState.TRIGGERED,
    }
    assert isinstance(outcomes[R], FailedPrecondition)
    assert isinstance(outcomes[PipelineId("gone")], NotFound)
    assert store.checkpoints.list_checkpoints(pipeline_id=R) == []
    # The single form raises the refusal.
    with pytest.raises(FailedPrecondition):
        store.checkpoints.trigger_checkpoint(fence=fence, pipeline_id=R)


def test_committed_marks_of_several_pipelines_share_one_transaction_all_or_nothing(
    open_stores: Callable[..., SqlStore],
) -> None:
    store = open_stores()
    fence = lead(store)
    tasks = running_pipelines(store, fence, "p", "q")
    for name, (t0, t1) in tasks.items():
        store.checkpoints.trigger_checkpoint(fence=fence, pipeline_id=PipelineId(name))
        precommit(store, fence, 1, t0, start=0, end=5, pipeline=name)
        precommit(store, fence, 1, t1, start=0, end=5, pipeline=name)
    store.checkpoints.trigger_checkpoint(fence=fence, pipeline_id=P)  # 2: TRIGGERED
    one = CheckpointId(1)

    # A mark the state machine refuses (TRIGGERED -> COMMITTED) fails the whole batch.
    with pytest.raises(IllegalTransition):
        store.checkpoints.mark_committed_many(
            fence=fence, marks=[(P, one), (Q, one), (P, CheckpointId(2))]
        )
    assert {c.pipeline_id for c in store.checkpoints.list_pending_commits()} == {P, Q}

    with counted_commits(store) as commits:
        marked = store.checkpoints.mark_committed_many(fence=fence, marks=[(Q, one), (P, one)])
    assert len(commits) == 1
    assert [(c.pipeline_id, c.state) for c in marked] == [
        (Q, CheckpointState.COMMITTED),
        (P, CheckpointState.COMMITTED),
    ]
    assert store.checkpoints.list_pending_commits() == []


def test_batches_of_executors_that_report_together_share_one_transaction(
    open_stores: Callable[..., SqlStore],
) -> None:
    """e1's report of p/0 is being written (held at its transaction's start) while e2
    reports p/1 and e1 reports q/0: those two batches are written in one transaction,
    each answered on its own (p COMPLETE, q still waiting for q/1)."""
    store = open_stores()
    leader, fence = leading_herder(store)
    tasks = running_pipelines(store, fence, "p", "q")
    store.checkpoints.trigger_checkpoints(fence=fence, pipeline_ids=[P, Q])
    reports = [
        precommit_of(store, 1, tasks["p"][0], start=0, end=5, pipeline="p"),
        precommit_of(store, 1, tasks["p"][1], start=0, end=5, pipeline="p"),
        precommit_of(store, 1, tasks["q"][0], start=0, end=5, pipeline="q"),
    ]
    started, release = threading.Event(), threading.Event()

    def hold_the_first(_conn: object) -> None:
        if not started.is_set():
            started.set()
            assert release.wait(30), "the test never released the first write"

    def report(precommit: object) -> list[object]:
        return list(
            leader.reports.report_precommits(
                precommits=[precommit],  # type: ignore[list-item]
                leader_epochs=[int(fence.leader_epoch)],
            )
        )

    sa.event.listen(store.engine, "begin", hold_the_first)
    try:
        with counted_commits(store) as commits, ThreadPoolExecutor(max_workers=3) as pool:
            first = pool.submit(report, reports[0])
            assert started.wait(30)
            rest = [pool.submit(report, r) for r in reports[1:]]
            batches = leader.reports._batches  # queued behind the held write: both

            def queued() -> bool:
                with batches._lock:
                    return len(batches._queue) == 2

            wait_for("both later batches to queue behind the held write", queued, timeout_s=30)
            release.set()
            answers = [f.result(timeout=30) for f in (first, *rest)]
    finally:
        sa.event.remove(store.engine, "begin", hold_the_first)
    assert len(commits) == 2
    states = [[a.state for a in answer] for answer in answers]  # type: ignore[attr-defined]
    assert states == [
        [CheckpointState.TRIGGERED],
        [CheckpointState.COMPLETE],
        [CheckpointState.TRIGGERED],
    ]
