# ruff: noqa: F811 - the fixtures imported from test_store are redefined as test parameters
"""One executor's batch of pre-commit reports (ReportPrecommits) in the store, on SQLite
and PostgreSQL: one transaction, each report checked on its own."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import sqlalchemy as sa

from lockgate.common.model.handles import TransactionHandle
from lockgate.common.model.ids import Generation, PipelineId, TaskId
from lockgate.common.model.offsets import OffsetRange
from lockgate.coordinator.domain.checkpoints import CheckpointRecord, Precommit
from lockgate.coordinator.domain.errors import FencedError, InvalidArgument, StaleGeneration
from lockgate.coordinator.domain.lease import Fence
from lockgate.coordinator.domain.states import CheckpointState
from lockgate.coordinator.store import SqlStore
from lockgate.coordinator.store.tables import precommit_handles, precommit_offsets, source_offsets
from tests.integration.coordinator.test_store import (
    lead,
    open_stores,  # noqa: F401 - fixture
    pipeline_with_tasks,
    store_url,  # noqa: F401 - fixture
    trigger,
    wait_for_expiry,
)
from tests.integration.coordinator.test_store_checkpoints import (
    E1,
    E2,
    C,
    offsets_table,
    running_pipeline,
)

PID = PipelineId("p")


def genuine_reports(store: SqlStore, fence: Fence) -> list[Precommit]:
    """Checkpoint 1 triggered on both tasks, and the report each trigger asks for."""
    t0, _ = running_pipeline(store, fence)
    n1 = trigger(store, fence=fence, pipeline_id=PID)
    return [
        Precommit(
            pipeline_id=PID,
            checkpoint_id=C(1),
            task_id=t.task_id,
            task_generation=t.task_generation,
            executor_id=t.executor_id or E1,
            executor_generation=Generation(1),
            offsets=(OffsetRange("in", 0 if t.task_id == t0 else 2, 0, 3),),
            handles=(TransactionHandle(t.transactional_id, 7, 0),),
        )
        for t in sorted(n1.tasks, key=lambda t: t.task_id)
    ]


def rows(store: SqlStore) -> tuple[int, int]:
    """How many pre-commit offset ranges and handles are stored."""
    with store.engine.connect() as conn:
        return (
            conn.execute(sa.select(sa.func.count()).select_from(precommit_offsets)).scalar_one(),
            conn.execute(sa.select(sa.func.count()).select_from(precommit_handles)).scalar_one(),
        )


def states(results: list[CheckpointRecord | Exception]) -> list[object]:
    return [r.state if isinstance(r, CheckpointRecord) else type(r) for r in results]


def test_a_forged_or_stale_report_is_refused_alone_and_the_others_are_recorded(
    open_stores: Callable[..., SqlStore],
) -> None:
    store = open_stores()
    fence = lead(store)
    good0, good1 = genuine_reports(store, fence)
    forged = dataclasses.replace(
        good1, handles=(TransactionHandle("lockgate-another-pipeline-0-g1-0", 7, 0),)
    )
    stale = dataclasses.replace(good1, executor_generation=Generation(0))

    results = store.checkpoints.record_precommit_batch(
        fence=fence, precommits=[forged, good0, stale]
    )

    assert states(results) == [InvalidArgument, CheckpointState.TRIGGERED, StaleGeneration]
    assert isinstance(results[0], InvalidArgument)
    assert [v.field for v in results[0].violations] == ["sink_handles[0].kafka.transactional_id"]
    # Task 0's report is in, nothing of task 1's: N waits for task 1's genuine report.
    record = store.checkpoints.get_checkpoint(pipeline_id=PID, checkpoint_id=C(1))
    assert record.precommitted == frozenset({good0.task_id})
    assert rows(store) == (1, 1)
    assert offsets_table(store) == {}

    [last] = store.checkpoints.record_precommit_batch(fence=fence, precommits=[good1])
    assert isinstance(last, CheckpointRecord) and last.state is CheckpointState.COMPLETE
    assert offsets_table(store) == {("in", 0): 3, ("in", 2): 3}


def test_a_batch_of_every_task_writes_complete_and_a_retried_batch_is_harmless(
    open_stores: Callable[..., SqlStore],
) -> None:
    store = open_stores()
    fence = lead(store)
    reports = genuine_reports(store, fence)

    first = store.checkpoints.record_precommit_batch(fence=fence, precommits=reports)
    assert states(first) == [CheckpointState.COMPLETE, CheckpointState.COMPLETE]
    stored = rows(store)
    assert stored == (2, 2)

    # The executor did not get the answer and sends the same batch again (twice in one).
    again = store.checkpoints.record_precommit_batch(fence=fence, precommits=[*reports, reports[0]])
    assert states(again) == [CheckpointState.COMPLETE] * 3
    assert rows(store) == stored
    assert offsets_table(store) == {("in", 0): 3, ("in", 2): 3}


def test_a_fenced_batch_records_nothing(open_stores: Callable[..., SqlStore]) -> None:
    old_store, new_store = open_stores(), open_stores()
    old = lead(old_store, "c1", lease_ms=3_000)
    reports = genuine_reports(old_store, old)
    wait_for_expiry(new_store)
    lead(new_store, "c2")

    with pytest.raises(FencedError):
        old_store.checkpoints.record_precommit_batch(fence=old, precommits=reports)

    # All or nothing: not one report, not COMPLETE, not the offsets.
    record = new_store.checkpoints.get_checkpoint(pipeline_id=PID, checkpoint_id=C(1))
    assert (record.state, record.precommitted) == (CheckpointState.TRIGGERED, frozenset())
    assert rows(new_store) == (0, 0)
    assert offsets_table(new_store) == {}


def reports_of(
    store: SqlStore, pipeline: str, checkpoint_id: int, *, start: int, end: int
) -> dict[TaskId, Precommit]:
    """Each task's genuine report of the checkpoint: [start, end) of each of its partitions."""
    record = store.checkpoints.get_checkpoint(
        pipeline_id=PipelineId(pipeline), checkpoint_id=C(checkpoint_id)
    )
    reports = {}
    for t in record.tasks:
        assert t.executor_id is not None
        reports[t.task_id] = Precommit(
            pipeline_id=PipelineId(pipeline),
            checkpoint_id=C(checkpoint_id),
            task_id=t.task_id,
            task_generation=t.task_generation,
            executor_id=t.executor_id,
            executor_generation=store.executors.get_executor(executor_id=t.executor_id).generation,
            offsets=tuple(
                OffsetRange(tp.topic, tp.partition, start, end)
                for tp in store.pipelines.get_task(task_id=t.task_id).partitions
            ),
            handles=(TransactionHandle(t.transactional_id, 7, 0),),
        )
    return reports


def restore_points(store: SqlStore) -> dict[tuple[str, str, int], tuple[int, int | None]]:
    """Each pipeline's restore offset per partition, with the checkpoint it came from."""
    with store.engine.connect() as conn:
        return {
            (r.pipeline_id, r.topic, r.partition): (r.next_offset, r.checkpoint_id)
            for r in conn.execute(sa.select(source_offsets))
        }


def two_pipelines_in_flight(store: SqlStore, fence: Fence) -> list[TaskId]:
    """Pipelines p and q of two tasks each, task 0 of both on e1 and task 1 on e2; p's
    checkpoints 1 and 2 and q's 1 triggered. Returns p's tasks."""
    p_tasks = pipeline_with_tasks(store, fence, "p")
    q_tasks = pipeline_with_tasks(store, fence, "q")
    store.executors.register_executor(fence=fence, executor_id=E1, address="e1:1")
    store.executors.register_executor(fence=fence, executor_id=E2, address="e2:1")
    store.pipelines.apply_assignment(
        fence=fence, assignment={E1: {p_tasks[0], q_tasks[0]}, E2: {p_tasks[1], q_tasks[1]}}
    )
    for pipeline in ("p", "p", "q"):
        trigger(store, fence=fence, pipeline_id=PipelineId(pipeline))
    return p_tasks


def test_a_batch_mixing_pipelines_and_checkpoints_completes_each_as_it_alone_would(
    open_stores: Callable[..., SqlStore],
) -> None:
    """An executor's batch at scale holds several pipelines' reports, and may hold two
    checkpoints of one pipeline; the store checks, writes and completes them in bulk
    (issue 14). Each checkpoint still completes only when all its tasks have
    pre-committed and no earlier one of its pipeline is TRIGGERED; a checkpoint's start
    is the end of the earlier one still TRIGGERED; and each pipeline resumes from its
    latest COMPLETE checkpoint's ends, not another pipeline's or an older one's."""
    store = open_stores()
    fence = lead(store)
    p_tasks = two_pipelines_in_flight(store, fence)
    p1 = reports_of(store, "p", 1, start=0, end=3)
    p2 = reports_of(store, "p", 2, start=3, end=8)
    q1 = reports_of(store, "q", 1, start=0, end=4)

    [after] = store.checkpoints.record_precommit_batch(fence=fence, precommits=[p1[p_tasks[0]]])
    assert states([after]) == [CheckpointState.TRIGGERED]

    # p:2 (task 0's start is its p:1 end, p:1 being TRIGGERED), task 0's from the wrong
    # start; and q:1 in full.
    wrong = dataclasses.replace(
        p2[p_tasks[0]],
        offsets=tuple(dataclasses.replace(r, start_offset=0) for r in p2[p_tasks[0]].offsets),
    )
    first = store.checkpoints.record_precommit_batch(
        fence=fence, precommits=[wrong, p2[p_tasks[1]], *q1.values()]
    )
    assert states(first) == [
        InvalidArgument,
        CheckpointState.TRIGGERED,
        CheckpointState.COMPLETE,
        CheckpointState.COMPLETE,
    ]
    q_ends = {("q", "in", n): (4, 1) for n in range(4)}
    assert restore_points(store) == q_ends

    # The rest of p:1 completes it, and p:2's last report in the same batch completes p:2.
    second = store.checkpoints.record_precommit_batch(
        fence=fence, precommits=[p1[p_tasks[1]], p2[p_tasks[0]]]
    )
    assert states(second) == [CheckpointState.COMPLETE] * 2
    for n in (1, 2):
        record = store.checkpoints.get_checkpoint(pipeline_id=PipelineId("p"), checkpoint_id=C(n))
        assert record.state is CheckpointState.COMPLETE
    assert restore_points(store) == {**q_ends, **{("p", "in", n): (8, 2) for n in range(4)}}


def test_a_checkpoint_with_nothing_to_commit_is_committed_by_its_last_report_in_order(
    open_stores: Callable[..., SqlStore],
) -> None:
    """A checkpoint no task left a transaction in (no handle: an idle input, or
    `--data-plane none`) has nothing for step 4 to commit: the leader's report write marks
    it COMMITTED with COMPLETE, unless an earlier checkpoint of its pipeline still waits for
    its commit (commits go in order). Each is handed back once, to be counted once; a
    retried report answers COMMITTED and hands back nothing. The history stays pruned."""
    store = open_stores()
    fence = lead(store)
    two_pipelines_in_flight(store, fence)

    def empty(reports: dict[TaskId, Precommit]) -> list[Precommit]:
        return [dataclasses.replace(r, handles=()) for r in reports.values()]

    p1 = list(reports_of(store, "p", 1, start=0, end=3).values())  # with handles
    p2 = empty(reports_of(store, "p", 2, start=3, end=3))
    q1 = empty(reports_of(store, "q", 1, start=0, end=4))
    committed: list[CheckpointRecord] = []
    answers = store.checkpoints.record_precommit_batch(
        fence=fence, precommits=[*p1, *p2, *q1], committed=committed, keep_history=2
    )

    # p:1 has handles to commit, and p:2 waits for it; q:1 had nothing to commit.
    assert states(answers) == [CheckpointState.COMPLETE] * 4 + [CheckpointState.COMMITTED] * 2
    assert [(c.pipeline_id, c.checkpoint_id, c.state) for c in committed] == [
        ("q", 1, CheckpointState.COMMITTED)
    ]
    assert committed[0].committed_at_ms is not None
    assert committed[0].completed_at_ms is not None
    assert committed[0].committed_at_ms >= committed[0].completed_at_ms
    assert restore_points(store)[("q", "in", 0)] == (4, 1)  # COMPLETE's offsets, as ever
    for n in (1, 2):
        record = store.checkpoints.get_checkpoint(pipeline_id=PipelineId("p"), checkpoint_id=C(n))
        assert record.state is CheckpointState.COMPLETE

    # The retried batch: answered COMMITTED, handed back nothing (counted once).
    again: list[CheckpointRecord] = []
    retried = store.checkpoints.record_precommit_batch(
        fence=fence, precommits=q1, committed=again, keep_history=2
    )
    assert states(retried) == [CheckpointState.COMMITTED] * 2 and again == []

    # Without the list (the store's other callers), COMPLETE only, as before.
    trigger(store, fence=fence, pipeline_id=PipelineId("q"))
    plain = store.checkpoints.record_precommits(
        fence=fence, precommits=empty(reports_of(store, "q", 2, start=4, end=4))
    )
    assert states(plain) == [CheckpointState.COMPLETE]  # one per checkpoint
    store.checkpoints.mark_committed(fence=fence, keys=[(PipelineId("q"), C(2))])

    # Each path of the leader's writes (a group of reports, a report alone), while the
    # history is pruned to the newest 2 final checkpoints.
    start = 4
    for n in range(3, 7):
        trigger(store, fence=fence, pipeline_id=PipelineId("q"))
        reports = empty(reports_of(store, "q", n, start=start, end=start + 1))
        start += 1
        committed = []
        if n % 2:
            store.checkpoints.record_precommits(
                fence=fence, precommits=reports, committed=committed, keep_history=2
            )
        else:
            for report in reports:
                store.checkpoints.record_precommit(
                    fence=fence, precommit=report, committed=committed, keep_history=2
                )
        assert [(c.checkpoint_id, c.state) for c in committed] == [(n, CheckpointState.COMMITTED)]
    kept = store.checkpoints.list_checkpoints(pipeline_id=PipelineId("q"))
    assert [(c.checkpoint_id, c.state) for c in kept] == [  # newest first
        (6, CheckpointState.COMMITTED),
        (5, CheckpointState.COMMITTED),
    ]
    assert restore_points(store)[("q", "in", 0)] == (8, 6)


def test_a_batch_prunes_each_pipelines_history_that_it_made_final(
    open_stores: Callable[..., SqlStore],
) -> None:
    """Three pipelines' checkpoints committed by one report batch each round: each
    pipeline's history is pruned to its own newest `keep_history` final checkpoints (their
    spans read in one statement, padded to four rows, each row's pipeline its own), and a
    pipeline the batch did not touch is left alone."""
    store = open_stores()
    fence = lead(store)
    names = ["p", "q", "r", "idle"]
    tasks = [t for name in names for t in pipeline_with_tasks(store, fence, name)]
    store.executors.register_executor(fence=fence, executor_id=E1, address="e1:1")
    store.executors.register_executor(fence=fence, executor_id=E2, address="e2:1")
    store.pipelines.apply_assignment(
        fence=fence, assignment={E1: set(tasks[0::2]), E2: set(tasks[1::2])}
    )
    for n in range(1, 7):
        for name in names:
            trigger(store, fence=fence, pipeline_id=PipelineId(name))
        reports = [
            dataclasses.replace(r, handles=())
            for name in names[:3]
            for r in reports_of(store, name, n, start=n - 1, end=n).values()
        ]
        committed: list[CheckpointRecord] = []
        answers = store.checkpoints.record_precommit_batch(
            fence=fence, precommits=reports, committed=committed, keep_history=2
        )
        assert states(answers) == [CheckpointState.COMMITTED] * 6
        if n < 6:  # the idle pipeline's checkpoint n, never reported, aborted
            store.checkpoints.abort_checkpoint(
                fence=fence, pipeline_id=PipelineId("idle"), checkpoint_id=C(n), reason="test"
            )

    kept = {
        name: [
            c.checkpoint_id
            for c in store.checkpoints.list_checkpoints(pipeline_id=PipelineId(name))
        ]
        for name in names
    }
    assert {name: sorted(ids) for name, ids in kept.items()} == {
        "p": [5, 6],
        "q": [5, 6],
        "r": [5, 6],
        "idle": [1, 2, 3, 4, 5, 6],
    }
