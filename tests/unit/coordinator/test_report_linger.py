"""The leader's write of one executor's pre-commit reports waits, briefly, for the reports
of the same checkpoints' other executors (`herder/awaited_reports.py`): what it waits for,
and that the write it saves is saved, on one replica over a SQLite file with the executors
faked (`AcceptingExecutors`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lockgate.common.model.ids import CheckpointId, ExecutorId, Generation, PipelineId, TaskId
from lockgate.coordinator.domain.checkpoints import Precommit
from lockgate.coordinator.domain.states import CheckpointState, TargetState
from lockgate.coordinator.herder import Herder
from lockgate.coordinator.herder import reports as reports_module
from lockgate.coordinator.herder.awaited_reports import AwaitedReports
from tests.support.herders import sqlite_leader
from tests.support.waits import wait_for
from tests.unit.coordinator.test_leader_pass_cost import (
    AcceptingExecutors,
    precommits_of,
    run_tasks,
    spec,
)


def _report(pipeline: str, checkpoint: int, executor: str, task: int = 0) -> Precommit:
    return Precommit(
        pipeline_id=PipelineId(pipeline),
        checkpoint_id=CheckpointId(checkpoint),
        task_id=TaskId(f"{pipeline}-{task}"),
        task_generation=Generation(1),
        executor_id=ExecutorId(executor),
        executor_generation=Generation(1),
        offsets=(),
        handles=(),
    )


def test_a_call_is_worth_waiting_with_only_while_each_of_its_checkpoints_awaits_another() -> None:
    awaited = AwaitedReports()
    e1, e2, e3 = ExecutorId("e1"), ExecutorId("e2"), ExecutorId("e3")
    awaited.expect(PipelineId("a"), CheckpointId(4), [e1, e2, e3])
    awaited.expect(PipelineId("solo"), CheckpointId(9), [e1])  # one executor: nothing to await
    first = [_report("a", 4, "e1", 0), _report("a", 4, "e1", 1)]
    awaited.arrived(first)
    assert awaited.worth_waiting([first])
    second = [_report("a", 4, "e2", 2)]
    awaited.arrived(second)
    assert awaited.worth_waiting([first, second]), "e3 is still to come"
    assert not awaited.worth_waiting([first, [_report("solo", 9, "e1")]]), (
        "a checkpoint the queue completes alone is not held back for another"
    )
    assert not awaited.worth_waiting([[_report("a", 3, "e1")]]), "an older checkpoint"
    assert not awaited.worth_waiting([[_report("unknown", 1, "e1")]]), "an earlier term's"
    assert not awaited.worth_waiting([])
    awaited.arrived([_report("a", 4, "e3", 3)])
    assert not awaited.worth_waiting([first, second]), "every executor of it arrived"


def test_a_newer_trigger_or_a_deleted_pipeline_ends_what_was_awaited() -> None:
    awaited = AwaitedReports()
    e1, e2 = ExecutorId("e1"), ExecutorId("e2")
    awaited.expect(PipelineId("a"), CheckpointId(1), [e1, e2])
    call = [_report("a", 1, "e1")]
    awaited.arrived(call)
    assert awaited.worth_waiting([call])
    awaited.expect(PipelineId("a"), CheckpointId(2), [e1, e2])
    assert not awaited.worth_waiting([call]), "checkpoint 1 is no longer the one awaited"
    newer = [_report("a", 2, "e1")]
    awaited.arrived(newer)
    assert awaited.worth_waiting([newer])
    awaited.forget(PipelineId("a"))
    assert not awaited.worth_waiting([newer])


@pytest.fixture
def leader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Herder]:
    """A leader whose report writes linger up to a minute, so that only an arrival (or a
    write that needs no other) ends a wait, however loaded the machine; pipeline "a" has
    tasks on both e1 and e2, "solo" one task (on one of them), each triggered once."""
    monkeypatch.setattr(reports_module, "REPORT_LINGER_S", 60.0)
    with sqlite_leader(
        tmp_path / "state.db", executor_client=AcceptingExecutors(), partitions=4
    ) as herder:
        herder.pipelines.create(spec=spec("a", tasks_max=3), target_state=TargetState.RUNNING)
        herder.pipelines.create(spec=spec("solo", tasks_max=1), target_state=TargetState.RUNNING)
        for executor in ("e1", "e2"):
            herder.membership.register_executor(executor_id=ExecutorId(executor), address="e:1")
        for executor in ("e1", "e2"):
            run_tasks(herder, executor)
        herder.run_pass(herder.require_fence())
        yield herder


def _by_executor(leader: Herder, pipeline: str) -> dict[str, list[Precommit]]:
    calls: dict[str, list[Precommit]] = {}
    for report in precommits_of(leader, pipeline, 1, start=0, end=5, with_handles=False):
        calls.setdefault(report.executor_id, []).append(report)
    return calls


def _recording_writes(leader: Herder, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Each report write's executors, in order."""
    real_write = leader.store.checkpoints.record_precommit_batch
    writes: list[list[str]] = []

    def write(**kwargs: Any) -> Any:
        writes.append(sorted({p.executor_id for p in kwargs["precommits"]}))
        return real_write(**kwargs)

    monkeypatch.setattr(leader.store.checkpoints, "record_precommit_batch", write)
    return writes


def _send(leader: Herder, reports: list[Precommit], answers: dict[str, list[Any]]) -> None:
    epoch = int(leader.require_fence().leader_epoch)
    answers[reports[0].executor_id] = [
        getattr(a, "state", a)
        for a in leader.reports.report_precommits(
            precommits=reports, leader_epochs=[epoch] * len(reports)
        )
    ]


def test_the_first_executors_reports_wait_for_the_seconds_and_share_their_write(
    leader: Herder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checkpoint 1 of "a" runs on e1 and e2. e1's call waits (its write alone would
    complete nothing) until e2's arrives; both go in one transaction, which completes the
    checkpoint (COMMITTED with it: no handles). Before, e1's reports were written alone
    and e2's in a second transaction after it."""
    calls = _by_executor(leader, "a")
    assert sorted(calls) == ["e1", "e2"], calls
    writes = _recording_writes(leader, monkeypatch)
    answers: dict[str, list[Any]] = {}
    started = time.monotonic()
    first = threading.Thread(target=_send, args=(leader, calls["e1"], answers))
    first.start()
    wait_for(
        "e1's reports to wait for e2's",
        lambda: len(leader.reports._report_calls._queue) == 1,
        timeout_s=10,
    )
    assert writes == []
    second = threading.Thread(target=_send, args=(leader, calls["e2"], answers))
    second.start()
    for thread in (first, second):
        thread.join(timeout=30)
    assert writes == [["e1", "e2"]]
    assert answers == {
        executor: [CheckpointState.COMMITTED] * len(reports) for executor, reports in calls.items()
    }
    assert time.monotonic() - started < 60, "the wait ended at e2's arrival"


def test_a_call_that_completes_a_checkpoint_alone_is_written_at_once(
    leader: Herder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call mixing "a"'s report (which awaits the other executor) with "solo"'s (its only
    executor's) is written at once: waiting would delay "solo"'s completion. The other
    executor's "a" report then completes "a" in a write of its own."""
    a, solo = _by_executor(leader, "a"), _by_executor(leader, "solo")
    (executor,) = solo
    other = next(e for e in a if e != executor)
    writes = _recording_writes(leader, monkeypatch)
    answers: dict[str, list[Any]] = {}
    started = time.monotonic()
    _send(leader, [*a[executor], *solo[executor]], answers)
    assert time.monotonic() - started < 60
    assert answers[executor] == [CheckpointState.TRIGGERED] * len(a[executor]) + [
        CheckpointState.COMMITTED
    ]
    _send(leader, a[other], answers)
    assert answers[other] == [CheckpointState.COMMITTED] * len(a[other])
    assert writes == [[executor], [other]]
