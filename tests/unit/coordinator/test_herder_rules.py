"""Rules the herder owns (they used to sit in the servicer), on one replica over a SQLite
file with Kafka metadata faked: no sockets."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lockgate.common.errors import (
    FailedPrecondition,
    FencingToken,
    NotFound,
    NotLeader,
    StaleTokenError,
)
from lockgate.common.model.ids import (
    CheckpointId,
    ExecutorId,
    Generation,
    PipelineId,
    TaskId,
)
from lockgate.common.model.pipeline_spec import PipelineSpec, parse_pipeline_spec
from lockgate.coordinator.domain.checkpoints import Precommit
from lockgate.coordinator.domain.states import TargetState
from lockgate.coordinator.herder import Herder
from tests.support.herders import sqlite_leader


def spec(name: str) -> PipelineSpec:
    return parse_pipeline_spec(
        {
            "name": name,
            "source": {"kafka": {"bootstrap_servers": "127.0.0.1:9092", "topics": ["in"]}},
            "sink": {"kafka": {"bootstrap_servers": "127.0.0.1:9092", "topic": "out"}},
        }
    )


@pytest.fixture
def leader(tmp_path: Path) -> Iterator[Herder]:
    """A replica that leads (lease taken by hand; threads not started)."""
    with sqlite_leader(tmp_path / "state.db") as herder:
        yield herder


def test_pausing_a_stopped_pipeline_is_refused(leader: Herder) -> None:
    leader.pipelines.create(spec=spec("p"), target_state=TargetState.STOPPED)
    with pytest.raises(FailedPrecondition) as raised:
        leader.pipelines.set_target_state(PipelineId("p"), TargetState.PAUSED)
    assert raised.value.reason == "PIPELINE_STOPPED"
    resumed = leader.pipelines.set_target_state(PipelineId("p"), TargetState.RUNNING)
    assert resumed.target_state is TargetState.RUNNING
    paused = leader.pipelines.set_target_state(PipelineId("p"), TargetState.PAUSED)
    assert paused.target_state is TargetState.PAUSED


def test_heartbeat_fencing(leader: Herder) -> None:
    e1 = ExecutorId("e1")
    with pytest.raises(NotFound):
        leader.membership.heartbeat(executor_id=e1, generation=Generation(1), reports=[])
    leader.membership.register_executor(executor_id=e1, address="127.0.0.1:7080")
    second = leader.membership.register_executor(executor_id=e1, address="127.0.0.1:7080")
    with pytest.raises(StaleTokenError) as raised:
        leader.membership.heartbeat(executor_id=e1, generation=Generation(1), reports=[])
    stale = raised.value
    assert (stale.token, stale.subject, stale.presented, stale.current) == (
        FencingToken.EXECUTOR_GENERATION,
        "e1",
        1,
        second.executor.generation,
    )
    with pytest.raises(NotLeader):  # the executor has seen a newer leader
        leader.membership.heartbeat(
            executor_id=e1,
            generation=second.executor.generation,
            reports=[],
            highest_leader_epoch_seen=2,
        )
    answer = leader.membership.heartbeat(
        executor_id=e1, generation=second.executor.generation, reports=[]
    )
    assert answer.fence.leader_epoch == 1


def test_a_report_of_an_older_leaders_trigger_is_refused(leader: Herder) -> None:
    report = Precommit(
        pipeline_id=PipelineId("p"),
        checkpoint_id=CheckpointId(1),
        task_id=TaskId("p/0"),
        task_generation=Generation(1),
        executor_id=ExecutorId("e1"),
        executor_generation=Generation(1),
        offsets=(),
        handles=(),
    )
    leader.lease_keeper.resign()
    leader.lease_keeper.campaign()  # epoch 2
    with pytest.raises(StaleTokenError) as raised:
        leader.reports.report_precommit(precommit=report, leader_epoch=1)
    assert (raised.value.token, raised.value.presented, raised.value.current) == (
        FencingToken.LEADER_EPOCH,
        1,
        2,
    )
    with pytest.raises(NotLeader):
        leader.reports.report_precommit(precommit=report, leader_epoch=3)
