"""What the leader's work-loop pass reads (issue 14, the control plane at scale), on one
replica over a SQLite file with Kafka metadata and executors faked: no sockets. Each test
counts what a pass parses or reads, so a pass that goes back to reading everything fails."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lockgate.common.model.ids import CoordinatorId, ExecutorId, Generation, PipelineId
from lockgate.common.model.pipeline_spec import PipelineSpec, parse_pipeline_spec
from lockgate.coordinator.domain.states import TargetState, TaskState
from lockgate.coordinator.herder import CoordinatorSettings, Herder, membership
from lockgate.coordinator.herder.executors import ExecutorClient, TriggerResult
from lockgate.coordinator.herder.membership import HeartbeatTaskReport
from lockgate.coordinator.store import open_store, rows
from tests.support.topics import FixedTopics


class AcceptingExecutors(ExecutorClient):
    """Every trigger is accepted, as a live executor's would be; nothing else is called."""

    def __init__(self) -> None:
        super().__init__()
        self.triggered: list[tuple[str, int]] = []

    def trigger_checkpoint(self, **kwargs: Any) -> list[TriggerResult]:
        self.triggered.append((kwargs["pipeline_name"], kwargs["checkpoint_id"]))
        return [
            TriggerResult(task_index=t.task_index, accepted=True, outcome="", reason="")
            for t in kwargs["tasks"]
        ]


def spec(name: str, *, interval_ms: int = 3_600_000, tasks_max: int = 2) -> PipelineSpec:
    return parse_pipeline_spec(
        {
            "name": name,
            "tasks_max": tasks_max,
            "checkpoint": {"interval_ms": interval_ms},
            "source": {"kafka": {"bootstrap_servers": "127.0.0.1:9092", "topics": ["in"]}},
            "sink": {"kafka": {"bootstrap_servers": "127.0.0.1:9092", "topic": "out"}},
        }
    )


@pytest.fixture
def leader(tmp_path: Path) -> Iterator[Herder]:
    """A replica that leads (lease taken by hand; threads not started)."""
    store = open_store(f"sqlite:///{tmp_path / 'state.db'}")
    herder = Herder(
        store=store,
        settings=CoordinatorSettings(
            coordinator_id=CoordinatorId("c1"), advertise="127.0.0.1:7071", lease_ms=60_000
        ),
        topics=FixedTopics(),  # type: ignore[arg-type]
        executor_client=AcceptingExecutors(),
    )
    herder.lease_keeper.campaign()
    yield herder
    store.close()


def run_tasks(leader: Herder, executor: str = "e1") -> Generation:
    """Register `executor`, let a pass assign it every task, and report them RUNNING."""
    e = ExecutorId(executor)
    generation = leader.membership.register_executor(executor_id=e, address="e:1").executor
    leader.run_pass(leader.require_fence())
    assigned = leader.membership.heartbeat(
        executor_id=e, generation=generation.generation, reports=[]
    )
    leader.membership.heartbeat(
        executor_id=e,
        generation=generation.generation,
        reports=[
            HeartbeatTaskReport(
                task_id=a.task.task_id,
                task_generation=a.task.generation,
                state=TaskState.RUNNING,
                error=None,
            )
            for a in assigned.tasks
        ],
    )
    return generation.generation


def counting(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[Any]:
    """Wrap `owner.name` so each call's arguments are recorded in the returned list."""
    calls: list[Any] = []
    real: Callable[..., Any] = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append((args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def test_a_stored_spec_is_parsed_once_per_config_version_across_passes(
    leader: Herder, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("a", "b", "c"):
        leader.pipelines.create(spec=spec(name), target_state=TargetState.RUNNING)
    run_tasks(leader)
    rows.parsed_spec.cache_clear()
    parses = counting(monkeypatch, rows, "parse_pipeline_spec")
    fence = leader.require_fence()
    for _ in range(5):  # the first triggers each pipeline: its checkpoint stays in flight
        leader.run_pass(fence)
    executors = leader._executors
    assert isinstance(executors, AcceptingExecutors)
    assert sorted(executors.triggered) == [("a", 1), ("b", 1), ("c", 1)]
    assert len(parses) == 3, "each stored spec parsed once, however many passes read it"

    leader.pipelines.update(spec=spec("b", interval_ms=7_200_000), expected_version=None)
    for _ in range(3):
        leader.run_pass(fence)
    assert len(parses) == 4, "the new config version parsed once"
    assert (
        leader.store.pipelines.get_pipeline(pipeline_id=PipelineId("b")).spec.checkpoint.interval_ms
        == 7_200_000
    )


def test_the_rebalance_plans_only_when_what_it_reads_changed(
    leader: Herder, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("a", "b"):
        leader.pipelines.create(spec=spec(name), target_state=TargetState.RUNNING)
    run_tasks(leader)
    fence = leader.require_fence()
    leader.run_pass(fence)  # plans once more after its own write, then nothing changed
    plans = counting(monkeypatch, membership, "plan_assignment")
    writes = counting(monkeypatch, leader.store.pipelines, "apply_assignment")
    clock = [time.monotonic()]
    monkeypatch.setattr(leader.lease_keeper, "monotonic", lambda: clock[0])

    def passes(n: int = 3) -> int:
        """Run `n` passes; how many planned."""
        before = len(plans)
        for _ in range(n):
            leader.run_pass(leader.require_fence())
        return len(plans) - before

    assert passes(5) == 0, "nothing changed: no plan, no write"
    assert writes == []

    e2 = leader.membership.register_executor(executor_id=ExecutorId("e2"), address="e:2")
    assert passes() >= 1, "an executor joined"
    assert len(writes) == 1, "and took its share of the tasks"
    assert {len(v.tasks) for v in leader.membership.list_executors()} == {2}
    assert passes() == 0

    leader.pipelines.create(spec=spec("c"), target_state=TargetState.RUNNING)
    assert passes() >= 1, "a pipeline was created"
    assert passes() == 0
    leader.pipelines.set_target_state(PipelineId("c"), TargetState.STOPPED)
    assert passes() >= 1, "a pipeline stopped: its tasks are released"
    assert all(
        t.executor_id is None
        for t in leader.store.pipelines.list_tasks(pipeline_id=PipelineId("c"))
    )
    leader.membership.heartbeat(
        executor_id=e2.executor.executor_id, generation=e2.executor.generation, reports=[]
    )
    assert passes() == 0, "a heartbeat is no change"

    clock[0] += membership.FULL_REBALANCE_EVERY_S
    assert passes() == 1, "the periodic full pass"

    leader.lease_keeper.resign()
    leader.lease_keeper.campaign()  # a new term: as a new leader would, it plans afresh
    assert passes() == 1
