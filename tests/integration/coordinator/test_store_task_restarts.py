"""Task restarts in the store against real databases (`[sqlite]`, `[postgres]`): one task
restarted (RestartTask), and every task of an updated pipeline."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lockgate.common.errors import FailedPrecondition, NotFound
from lockgate.common.model.ids import ExecutorId, Generation, TaskId
from lockgate.coordinator.domain.lease import Fence
from lockgate.coordinator.domain.states import TargetState, TaskState
from lockgate.coordinator.store import SqlStore, open_store
from tests.integration.coordinator.test_store import lead, pipeline_with_tasks, spec


@pytest.fixture
def store(db_url: str) -> Iterator[SqlStore]:
    """A store on a fresh database."""
    opened = open_store(db_url)
    yield opened
    opened.close()


def _failed_task(store: SqlStore, fence: Fence, name: str) -> tuple[list[TaskId], Generation]:
    """A pipeline's tasks on e1, the first one FAILED; its generation."""
    e1 = ExecutorId("e1")
    registration = store.executors.register_executor(fence=fence, executor_id=e1, address="a:1")
    tasks = pipeline_with_tasks(store, fence, name)
    store.pipelines.apply_assignment(fence=fence, assignment={e1: set(tasks)})
    task = store.pipelines.get_task(task_id=tasks[0])
    store.pipelines.report_task_state(
        fence=fence,
        task_id=task.task_id,
        task_generation=task.generation,
        executor_id=e1,
        executor_generation=registration.generation,
        state=TaskState.FAILED,
        error="bad record at in-0@17",
    )
    return tasks, task.generation


def test_restart_task_gives_one_task_a_new_generation_and_clears_its_error(
    store: SqlStore, db_url: str
) -> None:
    fence = lead(store)
    tasks, generation = _failed_task(store, fence, "restart-one")
    other = store.pipelines.get_task(task_id=tasks[1])
    changed = store.pipelines.restart_task(fence=fence, task_id=tasks[0])
    (restarted,) = changed.tasks
    assert changed.aborted == (), "no checkpoint was in flight"
    assert (restarted.generation, restarted.state, restarted.last_error) == (
        generation + 1,
        TaskState.RESTARTING,
        None,
    )
    assert restarted.executor_id == ExecutorId("e1"), "its executor runs it again"
    assert store.pipelines.get_task(task_id=tasks[1]) == other, "the other task is untouched"
    with pytest.raises(NotFound, match="restart-one/9"):
        store.pipelines.restart_task(fence=fence, task_id=TaskId("restart-one/9"))
    store.pipelines.set_target_state(
        fence=fence, pipeline_id=restarted.pipeline_id, target_state=TargetState.STOPPED
    )
    with pytest.raises(FailedPrecondition, match="resume the pipeline") as refused:
        store.pipelines.restart_task(fence=fence, task_id=tasks[0])
    assert refused.value.reason == "PIPELINE_STOPPED"
    assert store.pipelines.get_task(task_id=tasks[0]).generation == generation + 1


def test_an_update_restarts_every_task_of_the_pipeline_on_the_new_config(
    store: SqlStore,
) -> None:
    fence = lead(store)
    tasks, _ = _failed_task(store, fence, "reconfigured")
    before = {t: store.pipelines.get_task(task_id=t) for t in tasks}
    updated = store.pipelines.update_pipeline(
        fence=fence, spec=spec("reconfigured", timeout_ms=30_000)
    )
    assert updated.config_version == 2
    for task_id, old in before.items():
        now = store.pipelines.get_task(task_id=task_id)
        assert now.generation == old.generation + 1, task_id
        # The FAILED task restarts; the one e1 has not started yet stays UNASSIGNED.
        expected = TaskState.RESTARTING if task_id == tasks[0] else TaskState.UNASSIGNED
        assert now.state is expected, task_id
        assert now.executor_id == old.executor_id
