"""The coordinator store against real databases (a SQLite file and a real PostgreSQL):
leader lease, fencing, membership, pipelines, offsets, migrations.

Every test runs twice, `[sqlite]` and `[postgres]`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from lockgate.common.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    NotLeader,
)
from lockgate.common.model.ids import (
    CheckpointId,
    CoordinatorId,
    ExecutorId,
    Generation,
    PipelineId,
    TaskId,
)
from lockgate.common.model.offsets import TopicPartition
from lockgate.common.model.pipeline_spec import PipelineSpec, parse_pipeline_spec
from lockgate.coordinator.domain.assignment import ExecutorLiveness
from lockgate.coordinator.domain.checkpoints import CheckpointRecord
from lockgate.coordinator.domain.errors import FencedError, StaleGeneration
from lockgate.coordinator.domain.lease import Fence
from lockgate.coordinator.domain.membership import ExecutorRecord
from lockgate.coordinator.domain.pipelines import TaskRecord
from lockgate.coordinator.domain.states import LeaseRole, TargetState, TaskState
from lockgate.coordinator.domain.tasks import split_partitions
from lockgate.coordinator.herder import CoordinatorSettings, Herder
from lockgate.coordinator.herder.lease_keeper import LeaseKeeper
from lockgate.coordinator.herder.membership import RebalanceResult
from lockgate.coordinator.store import SqlStore, open_store
from lockgate.coordinator.store.tables import pipelines
from tests.support.topics import FixedTopics
from tests.support.waits import wait_for

REPO = Path(__file__).resolve().parents[3]


# ---------------------------------------------------------------------------- fixtures


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database: a SQLite file, or a new PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'coordinator.db'}"
    request.applymarker(pytest.mark.postgres)
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.fixture
def open_stores(store_url: str) -> Iterator[Callable[..., SqlStore]]:
    """Open as many stores (separate engines, as separate replicas) as a test needs."""
    opened: list[SqlStore] = []

    def open_one(**kwargs: Any) -> SqlStore:
        store = open_store(store_url, **kwargs)
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        store.close()


# ---------------------------------------------------------------------------- helpers


def lead(store: SqlStore, holder: str = "c1", *, lease_ms: int = 30_000) -> Fence:
    """Acquire the lease for `holder` and return its fence (fails the test if refused)."""
    lease = store.lease.try_acquire_lease(
        holder=CoordinatorId(holder), holder_address=f"{holder}:7070", lease_ms=lease_ms
    )
    assert lease.fence is not None and lease.holder == holder, f"{holder} did not get {lease}"
    return lease.fence


def wait_for_expiry(store: SqlStore) -> None:
    """Wait until nobody holds the lease (the holder stopped renewing it)."""
    wait_for("lease expiry", lambda: not store.lease.read_lease().is_held, timeout_s=10)


def herder(
    store: SqlStore, holder: str, *, monotonic: Callable[[], float] | None = None, **settings: Any
) -> Herder:
    """A replica's herder over `store` (Kafka metadata from `FixedTopics`), not started."""
    return Herder(
        store=store,
        settings=CoordinatorSettings(
            coordinator_id=CoordinatorId(holder), advertise=f"{holder}:1", **settings
        ),
        topics=FixedTopics(),  # type: ignore[arg-type]
        **({} if monotonic is None else {"monotonic": monotonic}),
    )


def trigger(store: SqlStore, *, fence: Fence, pipeline_id: PipelineId) -> CheckpointRecord:
    """One pipeline's next checkpoint (`trigger_checkpoints` of one), raising its refusal."""
    answer = store.checkpoints.trigger_checkpoints(fence=fence, pipeline_ids=[pipeline_id])
    triggered = answer[pipeline_id]
    if isinstance(triggered, Exception):
        raise triggered
    return triggered


def commit(
    store: SqlStore, *, fence: Fence, pipeline_id: PipelineId, checkpoint_id: CheckpointId
) -> CheckpointRecord:
    """Mark one checkpoint COMMITTED (`mark_committed` of one), raising its refusal."""
    (committed,) = store.checkpoints.mark_committed(
        fence=fence, keys=[(pipeline_id, checkpoint_id)]
    )
    return committed


def spec(name: str, *, tasks_max: int = 2, timeout_ms: int = 60_000) -> PipelineSpec:
    return parse_pipeline_spec(
        {
            "name": name,
            "source": {"kafka": {"bootstrap_servers": "127.0.0.1:9092", "topics": ["in"]}},
            "sink": {"kafka": {"bootstrap_servers": "127.0.0.1:9092", "topic": "out"}},
            "checkpoint": {"interval_ms": 100, "timeout_ms": timeout_ms},
            "tasks_max": tasks_max,
        }
    )


def pipeline_with_tasks(
    store: SqlStore, fence: Fence, name: str, *, partitions: int = 4, tasks_max: int = 2
) -> list[TaskId]:
    splits = split_partitions([TopicPartition("in", p) for p in range(partitions)], tasks_max)
    store.pipelines.create_pipeline(
        fence=fence, spec=spec(name, tasks_max=tasks_max), splits=splits
    )
    return [t.task_id for t in store.pipelines.list_tasks(pipeline_id=PipelineId(name))]


# ---------------------------------------------------------------------------- lease


def test_lease_cas_lets_exactly_one_of_many_contenders_win(
    open_stores: Callable[..., SqlStore],
) -> None:
    stores = [open_stores() for _ in range(6)]
    barrier = threading.Barrier(len(stores))
    results: dict[int, Any] = {}

    def contend(i: int) -> None:
        barrier.wait()
        results[i] = stores[i].lease.try_acquire_lease(
            holder=CoordinatorId(f"c{i}"), holder_address=f"c{i}:7070", lease_ms=30_000
        )

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(results) == len(stores)
    winners = {r.holder for r in results.values() if r.fence is not None}
    # Everyone reads back the same single holder, with epoch 1.
    assert len(winners) == 1
    final = stores[0].lease.read_lease()
    assert final.holder in winners
    assert final.leader_epoch == 1
    won = [i for i, r in results.items() if r.holder == f"c{i}"]
    assert len(won) == 1


def test_epoch_grows_on_change_of_holder_and_not_on_renewal(
    open_stores: Callable[..., SqlStore],
) -> None:
    s1, s2 = open_stores(), open_stores()
    c1, c2 = CoordinatorId("c1"), CoordinatorId("c2")
    first = s1.lease.try_acquire_lease(holder=c1, holder_address="c1:7070", lease_ms=2_000)
    assert (first.holder, first.leader_epoch) == (c1, 1)
    renewed = s1.lease.try_acquire_lease(holder=c1, holder_address="c1:7070", lease_ms=2_000)
    assert renewed.leader_epoch == 1
    assert renewed.expires_at_ms >= first.expires_at_ms
    refused = s2.lease.try_acquire_lease(holder=c2, holder_address="c2:7070", lease_ms=2_000)
    assert refused.holder == c1 and refused.fence == Fence(c1, renewed.leader_epoch)

    wait_for_expiry(s2)
    taken = s2.lease.try_acquire_lease(holder=c2, holder_address="c2:7070", lease_ms=2_000)
    assert (taken.holder, taken.leader_epoch) == (c2, 2)
    assert taken.holder_address == "c2:7070"
    late = s1.lease.try_acquire_lease(holder=c1, holder_address="c1:7070", lease_ms=2_000)
    assert late.holder == c2  # the old leader's renewal fails

    wait_for_expiry(s1)
    back = s1.lease.try_acquire_lease(holder=c1, holder_address="c1:7070", lease_ms=2_000)
    assert (back.holder, back.leader_epoch) == (c1, 3)


def test_same_holder_reacquiring_after_expiry_gets_a_new_epoch(
    open_stores: Callable[..., SqlStore],
) -> None:
    store = open_stores()
    c1 = CoordinatorId("c1")
    store.lease.try_acquire_lease(holder=c1, holder_address="c1:7070", lease_ms=200)
    wait_for_expiry(store)
    again = store.lease.try_acquire_lease(holder=c1, holder_address="c1:7070", lease_ms=200)
    assert again.leader_epoch == 2


def test_restarted_process_of_the_leader_gets_a_new_epoch_not_the_old_term(
    open_stores: Callable[..., SqlStore],
) -> None:
    """A coordinator restarted under the same id is a new incarnation: it must not renew
    the term of the process before it (which may be paused, not dead), so it leads only
    after that lease expires, with epoch + 1, and the old process's fence stops working."""
    old_store, new_store = open_stores(), open_stores()
    old, restarted = (
        LeaseKeeper(
            store=store,
            settings=CoordinatorSettings(
                coordinator_id=CoordinatorId("c1"), advertise="c1:1", lease_ms=1_000
            ),
        )
        for store in (old_store, new_store)
    )
    old.campaign()
    assert old.role is LeaseRole.LEADER
    old_fence = old.require_fence()
    restarted.campaign()
    assert restarted.role is LeaseRole.FOLLOWER, "took over an unexpired term of its old process"
    assert new_store.lease.read_lease().leader_epoch == old_fence.leader_epoch
    old.campaign()  # the old process may still renew its own term
    assert old.role is LeaseRole.LEADER

    wait_for_expiry(new_store)
    restarted.campaign()
    assert restarted.role is LeaseRole.LEADER
    assert restarted.require_fence().leader_epoch == old_fence.leader_epoch + 1
    old.campaign()
    assert old.role is LeaseRole.FOLLOWER
    with pytest.raises(FencedError, match="no longer holds the lease"):
        old_store.pipelines.create_pipeline(fence=old_fence, spec=spec("zombie-incarnation"))


def test_fenced_leader_cannot_write(open_stores: Callable[..., SqlStore]) -> None:
    old_store, new_store = open_stores(), open_stores()
    old = lead(old_store, "c1", lease_ms=300)
    wait_for_expiry(new_store)
    # Expired, nobody took over yet: the old leader is already fenced.
    with pytest.raises(FencedError, match="no longer holds the lease"):
        old_store.pipelines.create_pipeline(fence=old, spec=spec("zombie-1"))
    new = lead(new_store, "c2")
    assert new.leader_epoch == old.leader_epoch + 1
    with pytest.raises(FencedError) as caught:
        old_store.pipelines.create_pipeline(fence=old, spec=spec("zombie-2"))
    assert caught.value.leader_address == "c2:7070"
    with pytest.raises(FencedError):
        old_store.executors.register_executor(fence=old, executor_id=ExecutorId("e1"), address="x")
    # Nothing landed, as SQL shows; the new leader writes fine.
    with new_store.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(pipelines)).scalar_one() == 0
    new_store.pipelines.create_pipeline(fence=new, spec=spec("fresh"))
    assert [p.pipeline_id for p in new_store.pipelines.list_pipelines()[0]] == ["fresh"]


def test_contender_waits_for_a_write_that_passed_its_fence_check(
    open_stores: Callable[..., SqlStore],
) -> None:
    """A leader paused *inside* a write (after its fence check) past its lease, but not past
    its sessions' idle-in-transaction bound: the contender's acquisition waits for that
    transaction, so every write of epoch 1 is ordered before epoch 2 begins (SQLite: the
    write lock; PostgreSQL: FOR SHARE). A longer pause: test_store_timeouts."""
    # The old leader's sessions allow 5 s idle in a transaction: longer than this pause.
    old_store, new_store = open_stores(lease_ms=10_000), open_stores()
    old = lead(old_store, "c1", lease_ms=1_500)
    taken: dict[str, Any] = {}
    done = threading.Event()

    def contend() -> None:
        taken["lease"] = new_store.lease.try_acquire_lease(
            holder=CoordinatorId("c2"), holder_address="c2:7070", lease_ms=30_000
        )
        done.set()

    # The fence check passed on entering; the "pause" starts.
    with old_store.database.transaction(fence=old) as conn:
        wait_for_expiry(new_store)
        contender = threading.Thread(target=contend)
        contender.start()
        # The lease has expired, yet the contender cannot take it while we write.
        assert not done.wait(0.5), "the contender acquired the lease during a fenced write"
        conn.execute(
            pipelines.insert().values(
                pipeline_id="written-by-epoch-1",
                spec_json=json.dumps(spec("written-by-epoch-1").to_json()),
                config_version=1,
                target_state="RUNNING",
                next_checkpoint_id=1,
                created_at_ms=0,
                updated_at_ms=0,
            )
        )
    contender.join(timeout=30)
    assert done.is_set()
    assert (taken["lease"].holder, taken["lease"].leader_epoch) == ("c2", 2)
    assert (
        new_store.pipelines.get_pipeline(
            pipeline_id=PipelineId("written-by-epoch-1")
        ).config_version
        == 1
    )
    with pytest.raises(FencedError):
        old_store.pipelines.create_pipeline(fence=old, spec=spec("after-epoch-2"))


def test_released_lease_goes_to_the_next_replica_at_once(
    open_stores: Callable[..., SqlStore],
) -> None:
    s1, s2 = open_stores(), open_stores()
    fence = lead(s1, "c1", lease_ms=60_000)
    s1.lease.release_lease(fence=fence)
    taken = lead(s2, "c2", lease_ms=60_000)
    assert taken.leader_epoch == fence.leader_epoch + 1


def test_herder_steps_down_when_fenced(open_stores: Callable[..., SqlStore]) -> None:
    s1, s2 = open_stores(), open_stores()
    c1 = herder(s1, "c1")
    # c2's local clock is frozen: it keeps believing it leads while its lease expires.
    frozen = herder(s2, "c2", lease_ms=2_000, monotonic=lambda: 0.0)
    frozen.lease_keeper.campaign()
    assert frozen.lease_keeper.role is LeaseRole.LEADER
    c1.lease_keeper.campaign()
    assert c1.lease_keeper.role is LeaseRole.FOLLOWER
    with pytest.raises(NotLeader, match="not the leader") as caught:
        c1.pipelines.create(spec=spec("x"), target_state=TargetState.RUNNING)
    assert caught.value.leader_address == "c2:1"
    # The lease expires and c1 takes over: c2's next write is fenced (nothing written,
    # NotLeader to its caller) and it steps down.
    wait_for_expiry(s1)
    assert c1.lease_keeper.campaign().holder == "c1"
    with pytest.raises(NotLeader):
        frozen.pipelines.create(spec=spec("late"), target_state=TargetState.RUNNING)
    assert frozen.lease_keeper.role is LeaseRole.FOLLOWER
    with pytest.raises(NotFound):
        c1.pipelines.get(PipelineId("late"))


# ---------------------------------------------------------------------------- membership


def test_register_bumps_generation_and_zombie_reports_are_refused(
    open_stores: Callable[..., SqlStore],
) -> None:
    store = open_stores()
    fence = lead(store)
    e1 = ExecutorId("e1")
    first = store.executors.register_executor(fence=fence, executor_id=e1, address="127.0.0.1:8001")
    assert first.generation == 1
    second = store.executors.register_executor(
        fence=fence, executor_id=e1, address="127.0.0.1:8002"
    )
    assert second.generation == 2 and second.address == "127.0.0.1:8002"
    checked: list[tuple[ExecutorId, Generation]] = []

    def check(current: ExecutorRecord, generation: Generation, now_ms: int) -> None:
        assert now_ms >= current.last_heartbeat_ms
        checked.append((current.executor_id, generation))

    def heartbeat(generation: int) -> list[ExecutorRecord]:
        return store.executors.heartbeat_executors(
            fence=fence, sessions=[(e1, Generation(generation))], check=check
        )

    with pytest.raises(StaleGeneration, match="generation 1"):
        heartbeat(1)
    assert store.executors.get_executor(executor_id=e1) == second, "a refusal writes nothing"
    assert heartbeat(2) == [second], "each session's executor as it was before its heartbeat"
    beat = store.executors.get_executor(executor_id=e1)
    assert beat.last_heartbeat_ms >= second.last_heartbeat_ms
    assert checked == [(e1, 1), (e1, 2)]
    with pytest.raises(NotFound, match="not registered"):
        store.executors.heartbeat_executors(
            fence=fence,
            sessions=[(e1, Generation(2)), (ExecutorId("e9"), Generation(1))],
            check=check,
        )
    assert store.executors.get_executor(executor_id=e1) == beat, "a refusal writes nothing"

    tasks = pipeline_with_tasks(store, fence, "members")
    store.pipelines.apply_assignment(fence=fence, assignment={e1: set(tasks)})
    task = store.pipelines.get_task(task_id=tasks[0])
    with pytest.raises(StaleGeneration):
        store.pipelines.report_task_state(
            fence=fence,
            task_id=task.task_id,
            task_generation=task.generation,
            executor_id=e1,
            executor_generation=Generation(1),
            state=TaskState.RUNNING,
        )
    running = store.pipelines.report_task_state(
        fence=fence,
        task_id=task.task_id,
        task_generation=task.generation,
        executor_id=e1,
        executor_generation=Generation(2),
        state=TaskState.RUNNING,
    )
    assert (running.state, running.state_executor_id, running.state_executor_generation) == (
        TaskState.RUNNING,
        e1,
        2,
    )
    failed = store.pipelines.report_task_state(
        fence=fence,
        task_id=task.task_id,
        task_generation=task.generation,
        executor_id=e1,
        executor_generation=Generation(2),
        state=TaskState.FAILED,
        error="bad record at in-0@17",
    )
    assert failed.last_error == "bad record at in-0@17"


def test_rebalance_moves_a_dead_executors_tasks_after_the_delay(
    open_stores: Callable[..., SqlStore],
) -> None:
    session_ms, delay_ms = 1_000, 1_000
    store = open_stores()
    leader = herder(
        store, "c1", lease_ms=60_000, session_timeout_ms=session_ms, reassign_delay_ms=delay_ms
    )
    leader.lease_keeper.campaign()
    fence = leader.require_fence()
    tasks = pipeline_with_tasks(store, fence, "moving", partitions=4, tasks_max=4)
    members = leader.membership
    e1 = members.register_executor(executor_id=ExecutorId("e1"), address="a:1").executor
    e2 = members.register_executor(executor_id=ExecutorId("e2"), address="b:1").executor
    first = members.rebalance(fence)
    # Balanced between the two (both heartbeated well within the session timeout), and
    # both are to be told (NotifyAssignment); a rebalance that changes nothing tells no one.
    assert sorted(len(ts) for ts in first.plan.assignment.values()) == [2, 2]
    assert first.told == {e1.executor_id, e2.executor_id}
    assert members.rebalance(fence).told == frozenset()
    lost = first.plan.assignment[e2.executor_id]
    generations = {t.task_id: t.generation for t in store.pipelines.list_tasks()}
    e2_last_heartbeat = store.executors.get_executor(executor_id=e2.executor_id).last_heartbeat_ms

    # e2 stops heartbeating, e1 goes on. e2 keeps its tasks until its session timeout
    # plus the reassignment delay have passed by the database's clock, then they move.
    def e2_tasks_moved() -> tuple[int, RebalanceResult] | None:
        """The database time before the rebalance that moved them, and its result."""
        members.heartbeat(executor_id=e1.executor_id, generation=e1.generation, reports=[])
        before_ms = store.db_now_ms()
        result = members.rebalance(fence)
        if result.plan.assignment.get(e2.executor_id) == lost:
            return None
        return before_ms, result

    before_ms, moved = wait_for("e2's tasks to move to e1", e2_tasks_moved, timeout_s=20)
    plan = moved.plan
    # The gaining executor and the one that lost them (it may be alive after all).
    assert moved.told == {e1.executor_id, e2.executor_id}
    assert before_ms >= e2_last_heartbeat + session_ms, "moved before the session expired"
    assert plan.assignment[e1.executor_id] == frozenset(tasks)
    assert store.db_now_ms() > e2_last_heartbeat + session_ms + delay_ms
    after = {t.task_id: t for t in store.pipelines.list_tasks()}
    for task in lost:
        assert after[task].executor_id == e1.executor_id
        assert after[task].generation == generations[task] + 1
        assert after[task].state is TaskState.UNASSIGNED
    views = {v.record.executor_id: v for v in members.list_executors()}
    assert frozenset(views[e1.executor_id].tasks) == frozenset(tasks)
    assert views[e2.executor_id].liveness is ExecutorLiveness.DEAD


# ---------------------------------------------------------------------------- pipelines


def test_pipeline_lifecycle_and_errors(open_stores: Callable[..., SqlStore]) -> None:
    store = open_stores()
    fence = lead(store)
    created = store.pipelines.create_pipeline(fence=fence, spec=spec("orders"))
    assert (created.config_version, created.target_state) == (1, TargetState.RUNNING)
    with pytest.raises(AlreadyExists, match="orders"):
        store.pipelines.create_pipeline(fence=fence, spec=spec("orders"))
    updated = store.pipelines.update_pipeline(fence=fence, spec=spec("orders", tasks_max=5))
    assert (updated.config_version, updated.spec.tasks_max) == (2, 5)
    with pytest.raises(FailedPrecondition, match="config version 2"):
        store.pipelines.update_pipeline(fence=fence, spec=spec("orders"), expected_version=1)
    paused = store.pipelines.set_target_state(
        fence=fence, pipeline_id=PipelineId("orders"), target_state=TargetState.PAUSED
    )
    assert paused.target_state is TargetState.PAUSED
    with pytest.raises(NotFound, match="no pipeline named 'nope'"):
        store.pipelines.get_pipeline(pipeline_id=PipelineId("nope"))
    with pytest.raises(NotFound):
        store.pipelines.set_target_state(
            fence=fence, pipeline_id=PipelineId("nope"), target_state=TargetState.PAUSED
        )
    for name in ("a-1", "b-2", "c-3"):
        store.pipelines.create_pipeline(fence=fence, spec=spec(name))
    page, token = store.pipelines.list_pipelines(page_size=2)
    rest, end = store.pipelines.list_pipelines(page_size=2, page_token=token)
    assert [p.pipeline_id for p in page + rest] == ["a-1", "b-2", "c-3", "orders"]
    assert end == ""
    pipeline_with_tasks(store, fence, "doomed")
    store.pipelines.delete_pipeline(fence=fence, pipeline_id=PipelineId("doomed"))
    with pytest.raises(NotFound):
        store.pipelines.get_pipeline(pipeline_id=PipelineId("doomed"))
    assert store.pipelines.list_tasks(pipeline_id=PipelineId("doomed")) == []


def test_configs_are_refused_with_field_errors(open_stores: Callable[..., SqlStore]) -> None:
    leader = herder(open_stores(), "c1")
    leader.lease_keeper.campaign()
    bad = spec("ok").to_json()
    bad["checkpoint"]["interval_ms"] = -1
    with pytest.raises(InvalidArgument) as caught:
        parse_pipeline_spec(bad)
    assert [v.field for v in caught.value.violations] == ["checkpoint.interval_ms"]
    assert leader.pipelines.list_pipelines(page_size=100, page_token="") == ([], "")


def test_resplit_bumps_only_changed_tasks(open_stores: Callable[..., SqlStore]) -> None:
    """A restart re-splits the tasks (`write_task_split`, as an update with new topics
    does): a task whose partitions changed gets a new generation, an unchanged one keeps
    its own."""
    store = open_stores()
    fence = lead(store)
    grow = PipelineId("grow")
    parts = [TopicPartition("in", p) for p in range(2)]
    store.pipelines.create_pipeline(
        fence=fence, spec=spec("grow", tasks_max=2), splits=split_partitions(parts, 2)
    )

    def resplit() -> list[TaskRecord]:
        store.pipelines.restart_pipeline(
            fence=fence, pipeline_id=grow, splits=split_partitions(parts, 2), restart_tasks=False
        )
        return store.pipelines.list_tasks(pipeline_id=grow)

    before = store.pipelines.list_tasks(pipeline_id=grow)
    parts.append(TopicPartition("in", 2))
    after = resplit()
    assert [t.generation for t in before] == [1, 1]
    # Task 0 got partitions 0-1 (changed), task 1 got partition 2 (changed from 1).
    assert [[tp.partition for tp in t.partitions] for t in after] == [[0, 1], [2]]
    assert [t.generation for t in after] == [2, 2]
    assert [t.generation for t in resplit()] == [2, 2]


def test_the_assignment_stamp_moves_with_every_change_a_heartbeat_answers_from(
    open_stores: Callable[..., SqlStore],
) -> None:
    """The database's own triggers move the stamp (migration 0008), whichever statement
    changes a task or a pipeline, the store's or one written by hand; a checkpoint's
    trigger and a heartbeat do not. Unmoved, `list_assigned_since` reads no task."""
    store = open_stores()
    fence = lead(store)
    e1 = ExecutorId("e1")
    executor = store.executors.register_executor(fence=fence, executor_id=e1, address="e:1")
    stamps = [store.pipelines.list_assigned_since(executor_id=e1, stamp=None)[0]]

    def moved(what: str) -> None:
        now, tasks = store.pipelines.list_assigned_since(executor_id=e1, stamp=stamps[-1])
        assert now > stamps[-1] and tasks is not None, f"{what} did not move the stamp"
        assert store.pipelines.list_assigned_since(executor_id=e1, stamp=now) == (now, None)
        stamps.append(now)

    def unmoved(what: str) -> None:
        answer = store.pipelines.list_assigned_since(executor_id=e1, stamp=stamps[-1])
        assert answer == (stamps[-1], None), f"{what} moved the stamp"

    tasks = pipeline_with_tasks(store, fence, "p")
    moved("a pipeline and its tasks created")
    store.pipelines.apply_assignment(fence=fence, assignment={e1: set(tasks)})
    moved("an assignment")
    _, assigned = store.pipelines.list_assigned_since(executor_id=e1, stamp=None)
    assert [a.task.task_id for a in assigned or []] == tasks
    for task_id in tasks:
        task = store.pipelines.get_task(task_id=task_id)
        store.pipelines.report_task_state(
            fence=fence,
            task_id=task_id,
            task_generation=task.generation,
            executor_id=e1,
            executor_generation=executor.generation,
            state=TaskState.RUNNING,
        )
    moved("a task's state reported")
    store.executors.heartbeat_executors(
        fence=fence, sessions=[(e1, executor.generation)], check=lambda *_: None
    )
    unmoved("a heartbeat")
    trigger(store, fence=fence, pipeline_id=PipelineId("p"))
    unmoved("a checkpoint's trigger")
    store.pipelines.set_target_state(
        fence=fence, pipeline_id=PipelineId("p"), target_state=TargetState.PAUSED
    )
    moved("a pause")
    store.pipelines.update_pipeline(fence=fence, spec=spec("p", tasks_max=3))
    moved("a config change")
    with store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE tasks SET last_error = 'by hand'"))
    moved("a statement written by hand")
    store.pipelines.delete_pipeline(fence=fence, pipeline_id=PipelineId("p"))
    moved("a pipeline deleted")
    assert store.pipelines.list_assigned_since(executor_id=e1, stamp=None)[1] == []


# ---------------------------------------------------------------------------- offsets


def test_offsets_reset_only_when_stopped(open_stores: Callable[..., SqlStore]) -> None:
    store = open_stores()
    fence = lead(store)
    pipeline_with_tasks(store, fence, "resettable")
    pid = PipelineId("resettable")
    tp = TopicPartition("in", 0)
    with pytest.raises(FailedPrecondition, match="stop it"):
        store.offsets.reset_offsets(fence=fence, pipeline_id=pid, offsets={tp: 5})
    store.pipelines.set_target_state(fence=fence, pipeline_id=pid, target_state=TargetState.STOPPED)
    with pytest.raises(InvalidArgument, match=">= 0"):
        store.offsets.reset_offsets(fence=fence, pipeline_id=pid, offsets={tp: -1})
    got = store.offsets.reset_offsets(fence=fence, pipeline_id=pid, offsets={tp: 5})
    assert [(o.topic, o.partition, o.next_offset, o.checkpoint_id) for o in got] == [
        ("in", 0, 5, None)
    ]
    task = TaskId("resettable/0")
    restored = store.checkpoints.restore_states(task_ids=[task])[task]
    assert restored.start_offsets == {tp: 5}
    assert store.offsets.reset_offsets(fence=fence, pipeline_id=pid, offsets=None) == []


# ---------------------------------------------------------------------------- migrations


def test_replicas_migrating_at_once_all_start(store_url: str) -> None:
    code = (
        "import sys; from lockgate.coordinator.store import open_store; "
        "s = open_store(sys.argv[1]); print(s.lease.read_lease().leader_epoch); s.close()"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, store_url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        for _ in range(3)
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
        assert out.strip() == "0"
    # And a later start is a no-op on the migrated schema.
    store = open_store(store_url)
    assert store.lease.read_lease().holder is None
    store.close()


def prefixed(name: str, prefix: str | None) -> PipelineSpec:
    raw = spec(name).to_json()
    if prefix is not None:
        raw["sink"]["kafka"]["transactional_id_prefix"] = prefix
    return parse_pipeline_spec(raw)


def test_a_transactional_id_prefix_is_one_pipelines_own(
    open_stores: Callable[..., SqlStore],
) -> None:
    store = open_stores()
    fence = lead(store)
    store.pipelines.create_pipeline(fence=fence, spec=prefixed("orders", "team-a.orders"))
    # The same prefix again, or a custom prefix that is another pipeline's default.
    store.pipelines.create_pipeline(fence=fence, spec=prefixed("refunds", None))
    for name, prefix, owner in (
        ("copy", "team-a.orders", "orders"),
        ("other", "lockgate-refunds", "refunds"),
    ):
        with pytest.raises(InvalidArgument) as taken:
            store.pipelines.create_pipeline(fence=fence, spec=prefixed(name, prefix))
        assert [v.field for v in taken.value.violations] == ["sink.kafka.transactional_id_prefix"]
        assert f"pipeline {owner!r}" in taken.value.message
    with pytest.raises(InvalidArgument):
        store.pipelines.update_pipeline(fence=fence, spec=prefixed("refunds", "team-a.orders"))
    # A pipeline keeps its own prefix through an update, and may change it to a free one.
    store.pipelines.update_pipeline(fence=fence, spec=prefixed("orders", "team-a.orders"))
    moved = store.pipelines.update_pipeline(fence=fence, spec=prefixed("orders", "team-b"))
    assert moved.spec.transactional_id_prefix == "team-b"
    store.pipelines.create_pipeline(fence=fence, spec=prefixed("copy", "team-a.orders"))
