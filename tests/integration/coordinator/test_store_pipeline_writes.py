"""A pipeline call's writes land in one fenced transaction, on SQLite and PostgreSQL: a
failure in the middle of CreatePipeline, UpdatePipeline or RestartPipeline leaves all of
it or nothing, answers a retryable error, and a retry of the same request succeeds. And
each write the leader's pass plans from changes the pipelines' fingerprint.

The failure is injected where the second half of the old two-transaction calls wrote (the
task split), as a lease lost or a database gone there would fail it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lockgate.common.errors import Unavailable
from lockgate.common.model.ids import (
    CheckpointId,
    CoordinatorId,
    ExecutorId,
    Generation,
    PipelineId,
)
from lockgate.coordinator.domain.lease import Fence
from lockgate.coordinator.domain.states import CheckpointState, TargetState, TaskState
from lockgate.coordinator.herder import CoordinatorSettings, Herder
from lockgate.coordinator.store import SqlStore, open_store, pipeline_store
from tests.integration.coordinator.test_store import spec, trigger
from tests.integration.coordinator.test_store_checkpoints import precommit, running_pipeline
from tests.support.topics import FixedTopics

P = PipelineId("p")


@pytest.fixture
def store(db_url: str) -> Iterator[SqlStore]:
    """A store on a fresh database."""
    opened = open_store(db_url)
    yield opened
    opened.close()


@pytest.fixture
def leader(store: SqlStore) -> Herder:
    """The leading herder over `store`; Kafka's topics have four partitions each."""
    herder = Herder(
        store=store,
        settings=CoordinatorSettings(coordinator_id=CoordinatorId("c1"), advertise="c1:1"),
        topics=FixedTopics(partitions=4),  # type: ignore[arg-type]
    )
    herder.lease_keeper.campaign()
    return herder


def _fence(leader: Herder) -> Fence:
    fence = leader.lease_keeper.current_fence()
    assert fence is not None
    return fence


def _database_gone(*_args: object, **_kwargs: object) -> None:
    raise Unavailable("the connection to the state database failed", reason="DATABASE_UNAVAILABLE")


def _create(leader: Herder, request_id: str) -> bytes:
    """CreatePipeline of `p` (PAUSED) through the request_id dedupe, as the servicer runs it."""
    return leader.requests.once(
        request_id=request_id,
        method="CreatePipeline",
        request_hash="create-p",
        call=lambda: leader.pipelines.create(
            spec=spec("p", tasks_max=2), target_state=TargetState.PAUSED
        ).pipeline_id.encode(),
    )


def test_a_create_cut_short_leaves_no_pipeline_and_its_retry_succeeds(
    leader: Herder, store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patched:
        patched.setattr(pipeline_store, "write_task_split", _database_gone)
        with pytest.raises(Unavailable) as caught:
            _create(leader, "create-1")
    assert caught.value.reason == "DATABASE_UNAVAILABLE"
    assert not leader.pipelines.exists(P)
    assert store.pipelines.list_tasks(pipeline_id=P) == []
    assert _create(leader, "create-1") == b"p"
    created = leader.pipelines.get(P)
    assert created.target_state is TargetState.PAUSED
    assert [len(t.partitions) for t in store.pipelines.list_tasks(pipeline_id=P)] == [2, 2]
    # The retry's answer was recorded: a third try replays it instead of AlreadyExists.
    assert _create(leader, "create-1") == b"p"


def test_an_update_cut_short_keeps_the_old_config_and_split(
    leader: Herder, store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    leader.pipelines.create(spec=spec("p", tasks_max=2), target_state=TargetState.RUNNING)
    before = store.pipelines.list_tasks(pipeline_id=P)
    with monkeypatch.context() as patched:
        patched.setattr(pipeline_store, "write_task_split", _database_gone)
        with pytest.raises(Unavailable):
            leader.pipelines.update(spec=spec("p", tasks_max=4), expected_version=1)
    assert leader.pipelines.get(P).config_version == 1
    assert store.pipelines.list_tasks(pipeline_id=P) == before
    updated = leader.pipelines.update(spec=spec("p", tasks_max=4), expected_version=1)
    assert updated.config_version == 2
    assert len(store.pipelines.list_tasks(pipeline_id=P)) == 4


def test_a_restart_past_a_loss_cut_short_can_be_retried(
    leader: Herder, store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    fence = _fence(leader)
    t0, t1 = running_pipeline(store, fence)
    trigger(store, fence=fence, pipeline_id=P)
    precommit(store, fence, 1, t0, start=0, end=10)
    assert precommit(store, fence, 1, t1, start=0, end=10) is CheckpointState.COMPLETE
    store.data_loss.record_data_loss(
        fence=fence, pipeline_id=P, checkpoint_id=CheckpointId(1), lost_tasks={t0}, error="lost"
    )
    with monkeypatch.context() as patched:
        patched.setattr(pipeline_store, "write_task_split", _database_gone)
        with pytest.raises(Unavailable):
            leader.pipelines.restart(
                P, include_tasks=False, only_failed=False, from_checkpoint=CheckpointId(1)
            )
    blocking = store.data_loss.blocking_loss(pipeline_id=P)
    assert blocking is not None and blocking.checkpoint_id == 1
    # Before the fix the loss was moved past in a transaction of its own: the retry was
    # refused (checkpoint 1 no longer blocks the pipeline).
    leader.pipelines.restart(
        P, include_tasks=False, only_failed=False, from_checkpoint=CheckpointId(1)
    )
    assert store.data_loss.blocking_loss(pipeline_id=P) is None


def test_every_write_the_leaders_pass_plans_from_changes_the_fingerprint(
    leader: Herder, store: SqlStore
) -> None:
    """The rebalance and the trigger schedule plan again only when the fingerprint changes
    (issue 14): each write they depend on changes it, a trigger or a task's state does not."""
    last = [store.read_cluster().fingerprint]

    def changed(what: str) -> None:
        now = store.read_cluster().fingerprint
        assert now != last[-1], f"{what} left the fingerprint as it was"
        last.append(now)

    def unchanged(what: str) -> None:
        assert store.read_cluster().fingerprint == last[-1], f"{what} changed the fingerprint"

    leader.pipelines.create(spec=spec("p", tasks_max=2), target_state=TargetState.RUNNING)
    changed("a create")
    leader.membership.register_executor(executor_id=ExecutorId("e1"), address="e1:1")
    unchanged("an executor registering (the pass compares executors itself)")
    leader.membership.rebalance(_fence(leader))
    changed("an assignment")
    task = store.pipelines.list_tasks(pipeline_id=P)[0]
    store.pipelines.report_task_state(
        fence=_fence(leader),
        task_id=task.task_id,
        task_generation=task.generation,
        executor_id=ExecutorId("e1"),
        executor_generation=Generation(1),
        state=TaskState.RUNNING,
    )
    unchanged("a task's state report")
    trigger(store, fence=_fence(leader), pipeline_id=P)
    unchanged("a trigger")
    leader.checkpoints.abort_triggered(P, reason="test")
    leader.pipelines.set_target_state(P, TargetState.PAUSED)
    changed("a pause")
    leader.pipelines.set_target_state(P, TargetState.RUNNING)
    changed("a resume")
    leader.pipelines.update(spec=spec("p", tasks_max=4), expected_version=None)
    changed("an update")
    leader.pipelines.restart_task(task.task_id)
    changed("a task restart")
    leader.pipelines.set_target_state(P, TargetState.STOPPED)
    changed("a stop")
    leader.membership.rebalance(_fence(leader))
    changed("releasing a stopped pipeline's tasks")
    leader.pipelines.delete(P)
    changed("a delete")
