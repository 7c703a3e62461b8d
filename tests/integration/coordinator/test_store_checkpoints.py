# ruff: noqa: F811 - the fixtures imported from test_store are redefined as test parameters
"""The checkpoint protocol's leader side in the store, on SQLite and PostgreSQL: the
COMPLETE commit point, overlap and cascade, transactional id slots, recovery queries."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import sqlalchemy as sa

from lockgate.common.errors import FailedPrecondition
from lockgate.common.failpoints import ArmedFailpoint, Failpoint, Failpoints
from lockgate.common.model.handles import TransactionHandle
from lockgate.common.model.ids import CheckpointId, ExecutorId, Generation, PipelineId, TaskId
from lockgate.common.model.offsets import OffsetRange, TopicPartition
from lockgate.common.model.pipeline_spec import parse_pipeline_spec
from lockgate.coordinator.domain.checkpoints import CheckpointRecord, Precommit
from lockgate.coordinator.domain.errors import (
    FencedError,
    IllegalTransition,
    InvalidArgument,
    NotFound,
    StaleGeneration,
)
from lockgate.coordinator.domain.lease import Fence
from lockgate.coordinator.domain.states import CheckpointState
from lockgate.coordinator.domain.tasks import split_partitions
from lockgate.coordinator.store import SqlStore
from lockgate.coordinator.store.offset_store import next_offsets_of
from lockgate.coordinator.store.tables import (
    checkpoint_tasks,
    checkpoints,
    precommit_handles,
    precommit_offsets,
    source_offsets,
    transactional_ids,
)
from tests.integration.coordinator.test_store import (
    commit,
    herder,
    lead,
    open_stores,  # noqa: F401 - fixture
    spec,
    store_url,  # noqa: F401 - fixture
    trigger,
    wait_for_expiry,
)
from tests.support.waits import wait_for

E1, E2 = ExecutorId("e1"), ExecutorId("e2")
C = CheckpointId


#: The tasks of `running_pipeline`'s pipelines: partitions in-0..3 split over two tasks.
SPLITS = split_partitions([TopicPartition("in", p) for p in range(4)], 2)


def running_pipeline(
    store: SqlStore, fence: Fence, name: str = "p", *, timeout_ms: int = 60_000
) -> list[TaskId]:
    """A pipeline over partitions in-0..3 with two tasks, task 0 on e1 and task 1 on e2."""
    store.pipelines.create_pipeline(
        fence=fence, spec=spec(name, tasks_max=2, timeout_ms=timeout_ms), splits=SPLITS
    )
    ids = [t.task_id for t in store.pipelines.list_tasks(pipeline_id=PipelineId(name))]
    store.executors.register_executor(fence=fence, executor_id=E1, address="e1:1")
    store.executors.register_executor(fence=fence, executor_id=E2, address="e2:1")
    store.pipelines.apply_assignment(fence=fence, assignment={E1: {ids[0]}, E2: {ids[1]}})
    return ids


def precommit(
    store: SqlStore,
    fence: Fence,
    checkpoint_id: int,
    task: TaskId,
    *,
    start: int,
    end: int,
    producer_id: int = 1000,
    pipeline: str = "p",
    write_partitions: int | None = None,
) -> CheckpointState:
    """Pre-commit `task` of checkpoint N over [start, end) of each of its partitions.

    One handle on the slot's id, or, with `write_partitions`, one per Spark write
    partition k on `<slot id>-<k>` as the executor's sink reports them.
    """
    record = store.checkpoints.get_checkpoint(
        pipeline_id=PipelineId(pipeline), checkpoint_id=C(checkpoint_id)
    )
    trigger = next(t for t in record.tasks if t.task_id == task)
    task_record = store.pipelines.get_task(task_id=task)
    assert trigger.executor_id is not None
    executor = store.executors.get_executor(executor_id=trigger.executor_id)
    result = store.checkpoints.record_precommit(
        fence=fence,
        precommit=Precommit(
            pipeline_id=PipelineId(pipeline),
            checkpoint_id=C(checkpoint_id),
            task_id=task,
            task_generation=trigger.task_generation,
            executor_id=trigger.executor_id,
            executor_generation=executor.generation,
            offsets=tuple(
                OffsetRange(tp.topic, tp.partition, start, end) for tp in task_record.partitions
            ),
            handles=tuple(
                TransactionHandle(
                    transactional_id=transactional_id,
                    producer_id=producer_id + int(task.rsplit("/", 1)[1]) + 10 * k,
                    producer_epoch=checkpoint_id,
                )
                for k, transactional_id in enumerate(
                    [trigger.transactional_id]
                    if write_partitions is None
                    else [f"{trigger.transactional_id}-{k}" for k in range(write_partitions)]
                )
            ),
        ),
    )
    return result.state


def first_checkpoint_complete(
    open_stores: Callable[..., SqlStore],
) -> tuple[SqlStore, Fence, list[TaskId]]:
    """A led store whose pipeline "p" (`running_pipeline`) has checkpoint 1 COMPLETE over
    [0, 10) of each partition; the store, its fence and the two tasks."""
    store = open_stores()
    fence = lead(store)
    t0, t1 = running_pipeline(store, fence)
    trigger(store, fence=fence, pipeline_id=PipelineId("p"))
    precommit(store, fence, 1, t0, start=0, end=10)
    assert precommit(store, fence, 1, t1, start=0, end=10) is CheckpointState.COMPLETE
    return store, fence, [t0, t1]


def offsets_table(store: SqlStore) -> dict[tuple[str, int], int]:
    with store.engine.connect() as conn:
        rows = conn.execute(sa.select(source_offsets)).all()
    return {(r.topic, r.partition): r.next_offset for r in rows}


def test_complete_is_written_with_offsets_when_the_last_task_precommits(
    open_stores: Callable[..., SqlStore],
) -> None:
    store = open_stores()
    fence = lead(store)
    t0, t1 = running_pipeline(store, fence)
    n1 = trigger(store, fence=fence, pipeline_id=PipelineId("p"))
    assert (n1.checkpoint_id, n1.state, n1.leader_epoch) == (1, CheckpointState.TRIGGERED, 1)
    assert sorted(t.transactional_id for t in n1.tasks) == [
        "lockgate-p-0-g2-0",
        "lockgate-p-1-g2-0",
    ]

    assert precommit(store, fence, 1, t0, start=0, end=10) is CheckpointState.TRIGGERED
    assert offsets_table(store) == {}
    # A retried pre-commit is a no-op.
    assert precommit(store, fence, 1, t0, start=0, end=10) is CheckpointState.TRIGGERED
    assert precommit(store, fence, 1, t1, start=0, end=7) is CheckpointState.COMPLETE
    assert offsets_table(store) == {("in", 0): 10, ("in", 1): 10, ("in", 2): 7, ("in", 3): 7}
    done = store.checkpoints.get_checkpoint(pipeline_id=PipelineId("p"), checkpoint_id=C(1))
    assert done.completed_at_ms is not None and done.completed_at_ms >= done.triggered_at_ms
    pending = store.checkpoints.list_pending_commits()
    assert [(p.checkpoint_id, [h.task_id for h in p.handles]) for p in pending] == [(1, [t0, t1])]
    assert pending[0].handles[0].handles == (TransactionHandle("lockgate-p-0-g2-0", 1000, 1),)
    # Each task's handles name the executor it pre-committed on: the commit goes there.
    assert [h.executor_id for h in pending[0].handles] == [E1, E2]

    committed = commit(store, fence=fence, pipeline_id=PipelineId("p"), checkpoint_id=C(1))
    assert committed.state is CheckpointState.COMMITTED
    assert committed.committed_at_ms is not None
    assert committed == dataclasses.replace(
        store.checkpoints.get_checkpoint(pipeline_id=PipelineId("p"), checkpoint_id=C(1)),
        tasks=(),
        precommitted=frozenset(),
    )
    assert store.checkpoints.list_pending_commits() == []
    # A retried commit (the leader lost the answer) is answered the same, changing nothing;
    # a checkpoint not COMPLETE or absent is refused.
    again = commit(store, fence=fence, pipeline_id=PipelineId("p"), checkpoint_id=C(1))
    assert again == committed
    trigger(store, fence=fence, pipeline_id=PipelineId("p"))
    with pytest.raises(IllegalTransition):
        commit(store, fence=fence, pipeline_id=PipelineId("p"), checkpoint_id=C(2))
    with pytest.raises(NotFound):
        commit(store, fence=fence, pipeline_id=PipelineId("p"), checkpoint_id=C(9))
    with pytest.raises(IllegalTransition):
        store.checkpoints.abort_checkpoint(
            fence=fence, pipeline_id=PipelineId("p"), checkpoint_id=C(1), reason="late"
        )


def test_triggers_of_many_pipelines_share_a_transaction_and_a_refused_one_is_answered_alone(
    open_stores: Callable[..., SqlStore],
) -> None:
    """The pass triggers every pipeline due in one transaction: each triggered one gets
    its checkpoint; one that may not start (two in flight already, or deleted) gets its
    refusal, and nothing of it is written."""
    store = open_stores()
    fence = lead(store)
    p0, p1 = running_pipeline(store, fence)
    store.pipelines.create_pipeline(fence=fence, spec=spec("q", tasks_max=2), splits=SPLITS)
    q0, q1 = store.pipelines.list_tasks(pipeline_id=PipelineId("q"))
    store.pipelines.apply_assignment(
        fence=fence, assignment={E1: {p0, q0.task_id}, E2: {p1, q1.task_id}}
    )
    for _ in range(2):
        trigger(store, fence=fence, pipeline_id=PipelineId("p"))  # two in flight: the limit

    answers = store.checkpoints.trigger_checkpoints(
        fence=fence, pipeline_ids=[PipelineId("q"), PipelineId("p"), PipelineId("gone")]
    )

    assert isinstance(answers[PipelineId("p")], FailedPrecondition)
    assert isinstance(answers[PipelineId("gone")], NotFound)
    first = answers[PipelineId("q")]
    assert isinstance(first, CheckpointRecord)
    assert (first.checkpoint_id, first.state, len(first.tasks)) == (
        1,
        CheckpointState.TRIGGERED,
        2,
    )
    listed = store.checkpoints.list_checkpoints(pipeline_id=PipelineId("p"))
    assert sorted(c.checkpoint_id for c in listed) == [1, 2]


def test_commits_of_many_pipelines_are_marked_together_and_one_refused_undoes_them_all(
    open_stores: Callable[..., SqlStore],
) -> None:
    """What the leader's group commit writes: COMPLETE checkpoints of several pipelines
    marked COMMITTED in one transaction, answered in the order asked, a retried one
    answered as before. One that may not be marked refuses the whole batch, and nothing
    of it is written (the leader then marks each alone)."""
    store = open_stores()
    fence = lead(store)
    p, q = PipelineId("p"), PipelineId("q")
    t0, t1 = running_pipeline(store, fence)
    store.pipelines.create_pipeline(fence=fence, spec=spec("q", tasks_max=2), splits=SPLITS)
    q0, q1 = store.pipelines.list_tasks(pipeline_id=q)
    store.pipelines.apply_assignment(
        fence=fence, assignment={E1: {t0, q0.task_id}, E2: {t1, q1.task_id}}
    )
    for name, tasks in (("p", (t0, t1)), ("q", (q0.task_id, q1.task_id))):
        trigger(store, fence=fence, pipeline_id=PipelineId(name))
        for task in tasks:
            precommit(store, fence, 1, task, start=0, end=10, pipeline=name)
    trigger(store, fence=fence, pipeline_id=p)  # p's 2: TRIGGERED, not to be marked

    def states() -> dict[tuple[str, int], CheckpointState]:
        return {
            (c.pipeline_id, c.checkpoint_id): c.state
            for name in (p, q)
            for c in store.checkpoints.list_checkpoints(pipeline_id=name)
        }

    before = states()
    with pytest.raises(IllegalTransition):
        store.checkpoints.mark_committed(fence=fence, keys=[(q, C(1)), (p, C(1)), (p, C(2))])
    with pytest.raises(NotFound):
        store.checkpoints.mark_committed(fence=fence, keys=[(q, C(1)), (p, C(9))])
    assert states() == before, "a refused batch wrote nothing"

    marked = store.checkpoints.mark_committed(fence=fence, keys=[(q, C(1)), (p, C(1))])
    assert [(c.pipeline_id, c.checkpoint_id, c.state) for c in marked] == [
        (q, 1, CheckpointState.COMMITTED),
        (p, 1, CheckpointState.COMMITTED),
    ]
    for task in (t0, t1):
        precommit(store, fence, 2, task, start=10, end=20)
    again = store.checkpoints.mark_committed(fence=fence, keys=[(p, C(2)), (q, C(1))])
    assert again[1] == marked[0], "a retried commit is answered as before"
    assert states() == {
        (p, 1): CheckpointState.COMMITTED,
        (p, 2): CheckpointState.COMMITTED,
        (q, 1): CheckpointState.COMMITTED,
    }


def test_fenced_leader_cannot_write_complete(open_stores: Callable[..., SqlStore]) -> None:
    old_store, new_store = open_stores(), open_stores()
    old = lead(old_store, "c1", lease_ms=3_000)
    t0, t1 = running_pipeline(old_store, old)
    trigger(old_store, fence=old, pipeline_id=PipelineId("p"))
    precommit(old_store, old, 1, t0, start=0, end=10)
    wait_for_expiry(new_store)
    lead(new_store, "c2")
    with pytest.raises(FencedError):
        precommit(old_store, old, 1, t1, start=0, end=7)
    # Neither the last pre-commit, nor COMPLETE, nor the offsets landed.
    with new_store.engine.connect() as conn:
        state = conn.execute(sa.select(checkpoints.c.state)).scalar_one()
        task1_ranges = conn.execute(
            sa.select(sa.func.count())
            .select_from(precommit_offsets)
            .where(precommit_offsets.c.task_id == t1)
        ).scalar_one()
    assert (state, task1_ranges) == ("TRIGGERED", 0)
    assert offsets_table(new_store) == {}


def test_stale_task_generation_precommit_is_refused(open_stores: Callable[..., SqlStore]) -> None:
    store = open_stores()
    fence = lead(store)
    t0, _t1 = running_pipeline(store, fence)
    n1 = trigger(store, fence=fence, pipeline_id=PipelineId("p"))
    task_trigger = next(t for t in n1.tasks if t.task_id == t0)
    with pytest.raises(StaleGeneration):
        store.checkpoints.record_precommit(
            fence=fence,
            precommit=Precommit(
                pipeline_id=PipelineId("p"),
                checkpoint_id=C(1),
                task_id=t0,
                task_generation=Generation(task_trigger.task_generation - 1),
                executor_id=E1,
                executor_generation=Generation(1),
                offsets=(),
                handles=(),
            ),
        )
    with pytest.raises(InvalidArgument, match="allotted"):
        store.checkpoints.record_precommit(
            fence=fence,
            precommit=Precommit(
                pipeline_id=PipelineId("p"),
                checkpoint_id=C(1),
                task_id=t0,
                task_generation=task_trigger.task_generation,
                executor_id=E1,
                executor_generation=Generation(1),
                offsets=(),
                handles=(TransactionHandle("lockgate-p-0-g2-2", 1, 1),),
            ),
        )


def test_overlap_slots_and_cascading_abort(open_stores: Callable[..., SqlStore]) -> None:
    store, fence, (t0, t1) = first_checkpoint_complete(open_stores)  # its commit pending
    pid = PipelineId("p")
    n2 = trigger(store, fence=fence, pipeline_id=pid)
    # N=1's ids may still need committing: N=2 writes with the next slot.
    assert sorted(t.transactional_id for t in n2.tasks) == [
        "lockgate-p-0-g2-1",
        "lockgate-p-1-g2-1",
    ]
    with pytest.raises(FailedPrecondition, match="in flight"):
        trigger(store, fence=fence, pipeline_id=pid)
    commit(store, fence=fence, pipeline_id=pid, checkpoint_id=C(1))
    n3 = trigger(store, fence=fence, pipeline_id=pid)
    assert sorted(t.transactional_id for t in n3.tasks) == [
        "lockgate-p-0-g2-0",
        "lockgate-p-1-g2-0",
    ]

    precommit(store, fence, 2, t0, start=10, end=20, producer_id=2000)
    # N=3 fully pre-committed but N=2 is not: N=3 must wait (COMPLETE is in order).
    # Each starts where its previous checkpoint ended: t0 where its N=2 did, t1 (which has
    # not reported N=2) where N=1 did.
    precommit(store, fence, 3, t0, start=20, end=30)
    assert precommit(store, fence, 3, t1, start=10, end=30) is CheckpointState.TRIGGERED

    aborted = store.checkpoints.abort_checkpoint(
        fence=fence, pipeline_id=pid, checkpoint_id=C(2), reason="x"
    )
    assert aborted == [2, 3]
    states = {c.checkpoint_id: c.state for c in store.checkpoints.list_checkpoints(pipeline_id=pid)}
    assert states == {
        1: CheckpointState.COMMITTED,
        2: CheckpointState.ABORTED,
        3: CheckpointState.ABORTED,
    }
    n3_record = store.checkpoints.get_checkpoint(pipeline_id=pid, checkpoint_id=C(3))
    assert n3_record.abort_reason == "checkpoint 2 aborted (x)"
    # Restore resumes from N=1's end, not from the aborted ranges.
    assert offsets_table(store) == {("in", p): 10 for p in range(4)}

    lingering = {
        (t.checkpoint_id, t.task_id): (t.transactional_id, t.producer_id)
        for t in store.checkpoints.list_lingering_transactions()
    }
    assert lingering == {
        (2, t0): ("lockgate-p-0-g2-1", 2000),
        (2, t1): ("lockgate-p-1-g2-1", None),  # never reported: abort by init_transactions
        (3, t0): ("lockgate-p-0-g2-0", 1000),
        (3, t1): ("lockgate-p-1-g2-0", 1001),
    }
    # The leader's pass asks only which pipelines have aborts to send.
    assert store.checkpoints.list_lingering_pipelines() == {pid}
    assert store.checkpoints.list_lingering_pipelines(pipeline_id=PipelineId("other")) == set()
    restore = store.checkpoints.restore_states(task_ids=[t1])[t1]
    assert restore.start_offsets == {TopicPartition("in", 2): 10, TopicPartition("in", 3): 10}
    assert restore.to_commit == ()
    assert sorted((t.checkpoint_id, t.transactional_id) for t in restore.to_abort) == [
        (2, "lockgate-p-1-g2-1"),
        (3, "lockgate-p-1-g2-0"),
    ]
    reused = {
        (t.checkpoint_id, t.task_id)
        for t in store.checkpoints.list_lingering_transactions()
        if t.slot_reused
    }
    assert reused == set()  # N=2 and N=3 still hold the latest use of their slots
    store.checkpoints.mark_handles_aborted(
        fence=fence, pipeline_id=pid, checkpoint_id=C(2), task_ids=[t1]
    )
    assert (2, t1) not in {
        (t.checkpoint_id, t.task_id) for t in store.checkpoints.list_lingering_transactions()
    }
    # Aborted slots are free again.
    n4 = trigger(store, fence=fence, pipeline_id=pid)
    assert n4.checkpoint_id == 4
    assert sorted(t.slot for t in n4.tasks) == [0, 0]
    # N=3's slot 0 now belongs to N=4: its lingering entries say not to re-initialise.
    reused = {
        (t.checkpoint_id, t.task_id)
        for t in store.checkpoints.list_lingering_transactions()
        if t.slot_reused
    }
    assert reused == {(3, t0), (3, t1)}


def test_aborts_name_each_write_partitions_transaction_and_skip_in_flight_checkpoints(
    open_stores: Callable[..., SqlStore],
) -> None:
    """The sink reports one handle per Spark write partition, on "<slot id>-<k>": those are
    the transactions to abort. A task that never reported is named by its slot's id with no
    producer id (the executor ends what is open on the slot's ids), unless a later
    checkpoint reused the slot. A TRIGGERED checkpoint's pre-commits are never in a restore
    state: they may still become COMPLETE."""
    store = open_stores()
    fence = lead(store)
    t0, t1 = running_pipeline(store, fence)
    pid = PipelineId("p")
    trigger(store, fence=fence, pipeline_id=pid)
    precommit(store, fence, 1, t0, start=0, end=10, write_partitions=2)
    store.checkpoints.abort_checkpoint(fence=fence, pipeline_id=pid, checkpoint_id=C(1), reason="x")
    lingering = sorted(
        (t.task_id, t.transactional_id, t.producer_id, t.must_be_sent)
        for t in store.checkpoints.list_lingering_transactions()
    )
    assert lingering == [
        (t0, "lockgate-p-0-g2-0-0", 1000, True),
        (t0, "lockgate-p-0-g2-0-1", 1010, True),
        (t1, "lockgate-p-1-g2-0", None, True),
    ]
    assert sorted(
        t.transactional_id for t in store.checkpoints.restore_states(task_ids=[t0])[t0].to_abort
    ) == [
        "lockgate-p-0-g2-0-0",
        "lockgate-p-0-g2-0-1",
    ]

    # N=2 reuses the aborted slot 0: N=1's unreported entry must not be sent any more.
    n2 = trigger(store, fence=fence, pipeline_id=pid)
    assert sorted(t.slot for t in n2.tasks) == [0, 0]
    assert {
        t.transactional_id: t.must_be_sent
        for t in store.checkpoints.list_lingering_transactions()
        if t.task_id == t1
    } == {"lockgate-p-1-g2-0": False}
    precommit(store, fence, 2, t0, start=0, end=10, write_partitions=1)
    assert [
        (t.checkpoint_id, t.transactional_id)
        for t in store.checkpoints.restore_states(task_ids=[t0])[t0].to_abort
    ] == [(1, "lockgate-p-0-g2-0-0"), (1, "lockgate-p-0-g2-0-1")]


def test_out_of_order_precommits_complete_in_order(open_stores: Callable[..., SqlStore]) -> None:
    store = open_stores()
    fence = lead(store)
    t0, t1 = running_pipeline(store, fence)
    pid = PipelineId("p")
    trigger(store, fence=fence, pipeline_id=pid)
    trigger(store, fence=fence, pipeline_id=pid)
    precommit(store, fence, 2, t0, start=10, end=20)
    assert precommit(store, fence, 2, t1, start=10, end=20) is CheckpointState.TRIGGERED
    precommit(store, fence, 1, t0, start=0, end=10)
    assert precommit(store, fence, 1, t1, start=0, end=10) is CheckpointState.COMPLETE
    # The same transaction completed N=2 as well, and the offsets are N=2's.
    assert store.checkpoints.get_checkpoint(pipeline_id=pid, checkpoint_id=C(2)).state is (
        CheckpointState.COMPLETE
    )
    assert offsets_table(store) == {("in", p): 20 for p in range(4)}
    assert restored_from(store) == {2}, "each partition names the newest checkpoint's end"
    assert [p.checkpoint_id for p in store.checkpoints.list_pending_commits(pipeline_id=pid)] == [
        1,
        2,
    ]


def restored_from(store: SqlStore) -> set[int | None]:
    """The checkpoints the pipelines' restore offsets come from."""
    with store.engine.connect() as conn:
        return {r.checkpoint_id for r in conn.execute(sa.select(source_offsets.c.checkpoint_id))}


def test_start_offsets_are_read_for_the_partitions_asked_for_in_two_parameters(
    open_stores: Callable[..., SqlStore],
) -> None:
    """A report's start offsets are read for its own partitions only; on PostgreSQL the
    partitions go as two array parameters, not two parameters per partition (a 50-partition
    report bound 100, one at a time)."""
    store, _, _ = first_checkpoint_complete(open_stores)
    pid = PipelineId("p")
    assert restored_from(store) == {1}
    sent: list[tuple[str, object]] = []

    def record(_conn: object, _cursor: object, statement: str, params: object, *_: object) -> None:
        sent.append((statement, params))

    asked = {TopicPartition("in", 1), TopicPartition("in", 3), TopicPartition("elsewhere", 0)}
    sa.event.listen(store.engine, "before_cursor_execute", record)
    try:
        with store.engine.connect() as conn:
            found = next_offsets_of(conn, [pid], partitions=asked)
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", record)
    assert found == {pid: {TopicPartition("in", 1): 10, TopicPartition("in", 3): 10}}
    if store.engine.dialect.name == "postgresql":
        statement, params = sent[-1]
        assert "unnest" in statement
        assert isinstance(params, dict) and sorted(params) == [
            "bulk_partition",
            "bulk_topic",
            "pipeline_ids_1",
        ], params


def test_moving_a_task_aborts_its_in_flight_checkpoint(
    open_stores: Callable[..., SqlStore],
) -> None:
    store = open_stores()
    fence = lead(store)
    t0, t1 = running_pipeline(store, fence)
    pid = PipelineId("p")
    trigger(store, fence=fence, pipeline_id=pid)
    precommit(store, fence, 1, t0, start=0, end=5)
    changed = store.pipelines.apply_assignment(fence=fence, assignment={E1: {t0, t1}})
    assert [t.task_id for t in changed.tasks] == [t1]
    assert changed.aborted == ((pid, C(1)),)
    assert store.checkpoints.get_checkpoint(pipeline_id=pid, checkpoint_id=C(1)).state is (
        CheckpointState.ABORTED
    )
    # The zombie's late pre-commit for the aborted checkpoint is refused.
    with pytest.raises(StaleGeneration):
        precommit(store, fence, 1, t1, start=0, end=5)


def test_a_moved_task_writes_on_ids_no_zombie_of_it_can_open(
    open_stores: Callable[..., SqlStore],
) -> None:
    """Issue 14, hole 1: task 1 moves while its batch of N=1 (slot 0) may still wake up on
    the old executor. The next checkpoint reuses slot 0 under the task's new generation, so
    on another id; the old id's unreported pre-commit is still to be aborted by listing
    what is open on it (nothing later writes on that id); the table keeps one row per slot."""
    store = open_stores()
    fence = lead(store)
    t0, t1 = running_pipeline(store, fence)
    pid = PipelineId("p")
    trigger(store, fence=fence, pipeline_id=pid)
    before = store.pipelines.get_task(task_id=t1).generation
    store.pipelines.apply_assignment(fence=fence, assignment={E1: {t0, t1}})
    after = store.pipelines.get_task(task_id=t1).generation
    assert after > before
    assert store.checkpoints.get_checkpoint(pipeline_id=pid, checkpoint_id=C(1)).state is (
        CheckpointState.ABORTED
    )
    n2 = trigger(store, fence=fence, pipeline_id=pid)
    assert {t.task_id: (t.slot, t.transactional_id) for t in n2.tasks} == {
        t0: (0, f"lockgate-p-0-g{before}-0"),
        t1: (0, f"lockgate-p-1-g{after}-0"),
    }
    lingering = {
        t.transactional_id: (t.producer_id, t.must_be_sent)
        for t in store.checkpoints.list_lingering_transactions()
        if t.task_id == t1
    }
    assert lingering == {f"lockgate-p-1-g{before}-0": (None, True)}
    with store.engine.connect() as conn:
        rows = conn.execute(
            sa.select(transactional_ids.c.task_index, transactional_ids.c.transactional_id)
        ).all()
    assert sorted(rows) == [(0, f"lockgate-p-0-g{before}-0"), (1, f"lockgate-p-1-g{after}-0")]


def test_ids_stored_before_generations_are_still_aborted_and_replaced(
    open_stores: Callable[..., SqlStore],
) -> None:
    """A store written before ids carried the generation ("lockgate-p-<t>-<s>"): a COMPLETE
    checkpoint's handles keep their own ids; an aborted, unreported pre-commit keeps its
    old slot id (the executor lists what is open on it); the next trigger takes the slot
    under the new scheme, replacing the old row instead of colliding with it."""
    store = open_stores()
    fence = lead(store)
    t0, t1 = running_pipeline(store, fence)
    pid = PipelineId("p")
    trigger(store, fence=fence, pipeline_id=pid)
    precommit(store, fence, 1, t0, start=0, end=10)
    store.checkpoints.abort_checkpoint(fence=fence, pipeline_id=pid, checkpoint_id=C(1), reason="x")
    with store.engine.begin() as conn:  # as the previous release wrote them
        for index in (0, 1):
            old, new = f"lockgate-p-{index}-0", f"lockgate-p-{index}-g2-0"
            for table in (checkpoint_tasks, precommit_handles, transactional_ids):
                conn.execute(
                    table.update()
                    .where(table.c.transactional_id == new)
                    .values(transactional_id=old)
                )
    n2 = trigger(store, fence=fence, pipeline_id=pid)
    assert sorted(t.transactional_id for t in n2.tasks) == [
        "lockgate-p-0-g2-0",
        "lockgate-p-1-g2-0",
    ]
    lingering = {
        (t.task_id, t.transactional_id): t.must_be_sent
        for t in store.checkpoints.list_lingering_transactions()
    }
    # t0's reported handle is aborted by its stored id and producer epoch; t1's unreported
    # one by listing its old slot id (which no id of the new scheme lists under).
    assert lingering == {(t0, "lockgate-p-0-0"): True, (t1, "lockgate-p-1-0"): True}


@pytest.mark.serial  # a time bound is the assertion: not timed out 1.5 s after the trigger
def test_timed_out_checkpoint_aborts(open_stores: Callable[..., SqlStore]) -> None:
    store = open_stores()
    fence = lead(store)
    t0, _ = running_pipeline(store, fence, timeout_ms=1_500)
    pid = PipelineId("p")
    n1 = trigger(store, fence=fence, pipeline_id=pid)
    precommit(store, fence, 1, t0, start=0, end=5)
    assert store.checkpoints.abort_timed_out(fence=fence) == []
    wait_for("the timeout", lambda: store.db_now_ms() - n1.triggered_at_ms > 1_500, timeout_s=10)
    assert store.checkpoints.abort_timed_out(fence=fence) == [(pid, 1)]
    aborted = store.checkpoints.get_checkpoint(pipeline_id=pid, checkpoint_id=C(1))
    assert aborted.state is CheckpointState.ABORTED
    # The reason names the task that did not report (task 1, on e2), not the one that did.
    assert aborted.abort_reason == (
        "timed out after 1500 ms (task p/1 on e2: no pre-commit report within 1500 ms)"
    )


def test_new_leader_recovers_pending_commits_in_order(
    open_stores: Callable[..., SqlStore],
) -> None:
    old_store, new_store = open_stores(), open_stores()
    old = lead(old_store, "c1", lease_ms=3_000)
    t0, t1 = running_pipeline(old_store, old)
    pid = PipelineId("p")
    for n in (1, 2):
        trigger(old_store, fence=old, pipeline_id=pid)
        precommit(old_store, old, n, t0, start=(n - 1) * 10, end=n * 10)
        precommit(old_store, old, n, t1, start=(n - 1) * 10, end=n * 10)
    # N=1 and N=2 COMPLETE but never committed; the leader dies.
    wait_for_expiry(new_store)
    second = herder(new_store, "c2")
    second.lease_keeper.campaign()
    fence = second.require_fence()
    # Room for one more in-flight checkpoint once 1 is committed.
    commit(new_store, fence=fence, pipeline_id=pid, checkpoint_id=C(1))
    n3 = trigger(new_store, fence=fence, pipeline_id=pid)
    assert (n3.checkpoint_id, n3.leader_epoch) == (3, 2)
    precommit(new_store, fence, 3, t0, start=20, end=25)

    # Another change of leader: c2's in-flight N=3 is aborted, N=2 is re-committed.
    third_store = open_stores()
    third = herder(third_store, "c3")
    second.lease_keeper.resign()
    third.lease_keeper.campaign()
    plan = third.checkpoints.recover(third.require_fence())
    assert plan.aborted == ((pid, 3),)
    assert [(p.checkpoint_id, [h.task_id for h in p.handles]) for p in plan.to_commit] == [
        (2, [t0, t1])
    ]
    assert {(t.checkpoint_id, t.task_id) for t in plan.to_abort} == {(3, t0), (3, t1)}
    restore = third_store.checkpoints.restore_states(task_ids=[t0])[t0]
    assert restore.start_offsets == {TopicPartition("in", 0): 20, TopicPartition("in", 1): 20}
    assert [c.checkpoint_id for c in restore.to_commit] == [2]
    # A heartbeat reads every task's restore state at once: each gets its own handles only.
    both = third_store.checkpoints.restore_states(task_ids=[t0, t1])
    assert both[t0] == restore
    assert [[h.task_id for h in c.handles] for c in both[t1].to_commit] == [[t1]]
    assert {(t.checkpoint_id, t.task_id) for t in both[t1].to_abort} == {(3, t1)}
    commit(third_store, fence=third.require_fence(), pipeline_id=pid, checkpoint_id=C(2))
    assert third_store.checkpoints.list_pending_commits() == []


def test_batched_precommits_are_all_or_nothing(
    open_stores: Callable[..., SqlStore],
) -> None:
    store = open_stores()
    fence = lead(store)
    t0, t1 = running_pipeline(store, fence)
    pid = PipelineId("p")
    n1 = trigger(store, fence=fence, pipeline_id=pid)
    good = {
        t.task_id: Precommit(
            pipeline_id=pid,
            checkpoint_id=C(1),
            task_id=t.task_id,
            task_generation=t.task_generation,
            executor_id=t.executor_id or E1,
            executor_generation=Generation(1),
            offsets=(OffsetRange("in", 0 if t.task_id == t0 else 2, 0, 3),),
            handles=(TransactionHandle(t.transactional_id, 7, 0),),
        )
        for t in n1.tasks
    }
    stale = Precommit(
        pipeline_id=pid,
        checkpoint_id=C(1),
        task_id=t1,
        task_generation=good[t1].task_generation,
        executor_id=E2,
        executor_generation=Generation(0),
        offsets=(),
        handles=(),
    )
    with pytest.raises(StaleGeneration):
        store.checkpoints.record_precommits(fence=fence, precommits=[good[t0], stale])
    # Nothing of the batch landed, not even the good report.
    assert (
        store.checkpoints.get_checkpoint(pipeline_id=pid, checkpoint_id=C(1)).precommitted
        == frozenset()
    )
    [after] = store.checkpoints.record_precommits(
        fence=fence, precommits=[good[t0], good[t1], good[t0]]
    )
    assert after.state is CheckpointState.COMPLETE
    assert offsets_table(store) == {("in", 0): 3, ("in", 2): 3}


def test_abort_triggered_leaves_a_checkpoint_that_became_complete(
    open_stores: Callable[..., SqlStore],
) -> None:
    """Stop/Delete abort the TRIGGERED checkpoints as they are inside the aborting
    transaction: N=1 turned COMPLETE after a caller would have listed it TRIGGERED, so it is
    kept for its commit and only N=2 aborts (before, the abort of N=1 was refused as
    COMPLETE -> ABORTED and failed the Stop/Delete)."""
    store = open_stores()
    fence = lead(store)
    t0, t1 = running_pipeline(store, fence)
    pid = PipelineId("p")
    trigger(store, fence=fence, pipeline_id=pid)
    listed = store.checkpoints.list_checkpoints(pipeline_id=pid, states=[CheckpointState.TRIGGERED])
    assert [c.checkpoint_id for c in listed] == [1]
    precommit(store, fence, 1, t0, start=0, end=10)
    assert precommit(store, fence, 1, t1, start=0, end=10) is CheckpointState.COMPLETE
    trigger(store, fence=fence, pipeline_id=pid)

    aborted = store.checkpoints.abort_triggered(fence=fence, pipeline_id=pid, reason="stopped")

    assert aborted == [2]
    states = {c.checkpoint_id: c.state for c in store.checkpoints.list_checkpoints(pipeline_id=pid)}
    assert states == {1: CheckpointState.COMPLETE, 2: CheckpointState.ABORTED}
    assert store.checkpoints.abort_triggered(fence=fence, pipeline_id=pid, reason="again") == []


def test_triggers_allot_ids_under_the_pipelines_transactional_id_prefix(
    open_stores: Callable[..., SqlStore],
) -> None:
    store = open_stores()
    fence = lead(store)
    raw = spec("q", tasks_max=2).to_json()
    raw["sink"]["kafka"]["transactional_id_prefix"] = "team-a.q"
    store.pipelines.create_pipeline(fence=fence, spec=parse_pipeline_spec(raw), splits=SPLITS)
    tasks = store.pipelines.list_tasks(pipeline_id=PipelineId("q"))
    store.executors.register_executor(fence=fence, executor_id=E1, address="e1:1")
    store.pipelines.apply_assignment(fence=fence, assignment={E1: {t.task_id for t in tasks}})
    n1 = trigger(store, fence=fence, pipeline_id=PipelineId("q"))
    assert sorted(t.transactional_id for t in n1.tasks) == ["team-a.q-0-g2-0", "team-a.q-1-g2-0"]


class _DiedInside(Exception):
    """Stands for the process exiting at a failpoint (it raises instead of `os._exit`)."""


def test_a_leader_dying_inside_the_complete_transaction_leaves_n_triggered(
    open_stores: Callable[..., SqlStore],
) -> None:
    """`inside_complete_transaction` is reached after COMPLETE is written and before it
    commits: dying there writes nothing, so the next leader finds N TRIGGERED."""

    def die(message: str) -> None:
        raise _DiedInside(message)

    armed = (ArmedFailpoint(Failpoint.INSIDE_COMPLETE_TRANSACTION),)
    store = open_stores(failpoints=Failpoints(armed, exit_process=die))
    fence = lead(store)
    t0, t1 = running_pipeline(store, fence)
    trigger(store, fence=fence, pipeline_id=PipelineId("p"))
    # The first pre-commit completes nothing: the failpoint is not reached.
    assert precommit(store, fence, 1, t0, start=0, end=10) is CheckpointState.TRIGGERED
    with pytest.raises(_DiedInside, match="checkpoint 1 of pipeline p"):
        precommit(store, fence, 1, t1, start=0, end=10)

    after = open_stores().checkpoints.get_checkpoint(
        pipeline_id=PipelineId("p"), checkpoint_id=C(1)
    )
    assert after.state is CheckpointState.TRIGGERED
    assert offsets_table(store) == {}


def test_the_trigger_snapshot_has_each_pipelines_newest_and_unfinished_checkpoints(
    open_stores: Callable[..., SqlStore],
) -> None:
    """What the leader's trigger decision reads for all pipelines at once: a pipeline's
    newest checkpoint (its last trigger time) and every one still in flight, however old
    (each counts against the in-flight limit), newest first; committed ones in between are
    left out, and a pipeline that never triggered is absent."""
    store = open_stores()
    fence = lead(store)
    t0, t1 = running_pipeline(store, fence)
    store.pipelines.create_pipeline(fence=fence, spec=spec("idle", tasks_max=2))
    p = PipelineId("p")
    for n in (1, 2, 3):
        trigger(store, fence=fence, pipeline_id=p)
        precommit(store, fence, n, t0, start=10 * (n - 1), end=10 * n)
        precommit(store, fence, n, t1, start=10 * (n - 1), end=10 * n)
        if n != 1:
            commit(store, fence=fence, pipeline_id=p, checkpoint_id=C(n))
    trigger(store, fence=fence, pipeline_id=p)
    store.checkpoints.abort_checkpoint(fence=fence, pipeline_id=p, checkpoint_id=C(4), reason="x")

    snapshot = store.checkpoints.trigger_snapshot()
    assert list(snapshot) == [p]
    assert [(c.checkpoint_id, c.state) for c in snapshot[p]] == [
        (4, CheckpointState.ABORTED),
        (1, CheckpointState.COMPLETE),
    ]
    assert snapshot[p][0].triggered_at_ms >= snapshot[p][1].triggered_at_ms

    # What a pass reads of the due pipelines only: the same, their tasks, their aborts.
    due = store.checkpoints.trigger_inputs(pipeline_ids=[p])
    assert due.recent == snapshot
    assert [t.task_id for t in due.tasks[p]] == [t0, t1]
    assert due.lingering == {p}, "checkpoint 4's abort is not sent yet"
    idle = store.checkpoints.trigger_inputs(pipeline_ids=[PipelineId("idle")])
    assert (idle.tasks, idle.recent, idle.lingering) == ({}, {}, frozenset())
