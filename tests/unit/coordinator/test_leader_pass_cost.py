"""What the leader's work-loop pass reads (issue 14, the control plane at scale), on one
replica over a SQLite file with Kafka metadata and executors faked: no sockets. Each test
counts what a pass parses or reads, so a pass that goes back to reading everything fails."""

from __future__ import annotations

import contextlib
import dataclasses
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from lockgate.common.errors import StaleTokenError
from lockgate.common.group_commit import GroupCommit
from lockgate.common.model.handles import TransactionHandle
from lockgate.common.model.ids import (
    CheckpointId,
    CoordinatorId,
    ExecutorId,
    Generation,
    PipelineId,
)
from lockgate.common.model.offsets import OffsetRange
from lockgate.common.model.pipeline_spec import PipelineSpec, parse_pipeline_spec
from lockgate.coordinator.api.convert import assignments_to_proto
from lockgate.coordinator.domain.checkpoints import Precommit
from lockgate.coordinator.domain.errors import NotFound
from lockgate.coordinator.domain.states import CheckpointState, TargetState, TaskState
from lockgate.coordinator.herder import CoordinatorSettings, Herder, membership
from lockgate.coordinator.herder import checkpoints as checkpoint_driver
from lockgate.coordinator.herder.executors import (
    ExecutorCallFailed,
    ExecutorClient,
    TriggerResult,
)
from lockgate.coordinator.herder.membership import HeartbeatTaskReport
from lockgate.coordinator.store import rows, trigger_queries
from lockgate.coordinator.store.tables import executors, tasks
from tests.support.herders import sqlite_leader
from tests.support.topics import FixedTopics
from tests.support.waits import wait_for


class AcceptingExecutors(ExecutorClient):
    """Every trigger, commit and abort is accepted, as a live executor's would be."""

    def __init__(self) -> None:
        super().__init__()
        self.triggered: list[tuple[str, int]] = []
        self.trigger_calls: list[list[str]] = []

    def send_commit(self, **kwargs: Any) -> Callable[[], int]:
        return lambda: len(kwargs["handles"])

    def abort_checkpoint(self, **kwargs: Any) -> int:
        return len(kwargs["transactions"])

    def send_triggers(self, **kwargs: Any) -> list[Callable[[], list[TriggerResult]]]:
        self.trigger_calls.append([t.pipeline_name for t in kwargs["triggers"]])
        answers = []
        for trigger in kwargs["triggers"]:
            self.triggered.append((trigger.pipeline_name, trigger.checkpoint_id))
            results = [
                TriggerResult(task_index=t.task_index, accepted=True, outcome="", reason="")
                for t in trigger.tasks
            ]
            answers.append(lambda r=results: r)
        return answers


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
    with sqlite_leader(tmp_path / "state.db", executor_client=AcceptingExecutors()) as herder:
        yield herder


def run_tasks(leader: Herder, executor: str = "e1") -> Generation:
    """Register `executor` (once), let a pass assign it the tasks, and report every task
    it holds RUNNING."""
    e = ExecutorId(executor)
    try:
        generation = leader.store.executors.get_executor(executor_id=e).generation
    except NotFound:
        generation = leader.membership.register_executor(
            executor_id=e, address="e:1"
        ).executor.generation
    leader.run_pass(leader.require_fence())
    assigned = leader.membership.heartbeat(executor_id=e, generation=generation, reports=[])
    leader.membership.heartbeat(
        executor_id=e,
        generation=generation,
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
    return generation


def counting(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[Any]:
    """Wrap `owner.name` so each call's arguments are recorded in the returned list."""
    calls: list[Any] = []
    real: Callable[..., Any] = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append((args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def test_the_pipelines_due_in_one_pass_reach_each_executor_in_one_trigger_call(
    leader: Herder,
) -> None:
    for name in ("a", "b", "c"):
        leader.pipelines.create(spec=spec(name), target_state=TargetState.RUNNING)
    run_tasks(leader)  # one executor: every task of the three pipelines on it
    executors = leader._executors
    assert isinstance(executors, AcceptingExecutors)
    executors.trigger_calls.clear()
    leader.run_pass(leader.require_fence())
    assert [sorted(call) for call in executors.trigger_calls] == [["a", "b", "c"]]
    assert sorted(executors.triggered) == [("a", 1), ("b", 1), ("c", 1)]


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


def precommits_of(
    leader: Herder,
    pipeline: str,
    checkpoint_id: int,
    *,
    start: int,
    end: int,
    with_handles: bool = True,
    backlog_left: bool = False,
) -> list[Precommit]:
    """Each task's report of the checkpoint: the range [start, end) of each partition, and
    (`with_handles`) the transaction left open on the task's id; the first task's says
    `backlog_left`."""
    store = leader.store
    record = store.checkpoints.get_checkpoint(
        pipeline_id=PipelineId(pipeline), checkpoint_id=CheckpointId(checkpoint_id)
    )
    reports = []
    for trigger in record.tasks:
        assert trigger.executor_id is not None
        task = store.pipelines.get_task(task_id=trigger.task_id)
        reports.append(
            Precommit(
                pipeline_id=PipelineId(pipeline),
                checkpoint_id=CheckpointId(checkpoint_id),
                task_id=trigger.task_id,
                task_generation=trigger.task_generation,
                executor_id=trigger.executor_id,
                executor_generation=store.executors.get_executor(
                    executor_id=trigger.executor_id
                ).generation,
                offsets=tuple(
                    OffsetRange(tp.topic, tp.partition, start, end) for tp in task.partitions
                ),
                handles=(TransactionHandle(trigger.transactional_id, 7, 0),)
                if with_handles
                else (),
                backlog_left=backlog_left and not reports,
            )
        )
    return reports


def complete(leader: Herder, pipeline: str, checkpoint_id: int) -> None:
    """Every task of the checkpoint pre-commits (no record read, no transaction), and a
    pass commits it."""
    fence = leader.require_fence()
    for report in precommits_of(leader, pipeline, checkpoint_id, start=0, end=0):
        leader.store.checkpoints.record_precommit(fence=fence, precommit=report)
    leader.run_pass(fence)
    state = leader.store.checkpoints.get_checkpoint(
        pipeline_id=PipelineId(pipeline), checkpoint_id=CheckpointId(checkpoint_id)
    ).state
    assert state is CheckpointState.COMMITTED


def triggered(leader: Herder) -> list[tuple[str, int]]:
    executors = leader._executors
    assert isinstance(executors, AcceptingExecutors)
    return executors.triggered


def test_a_pass_says_how_long_the_loop_may_sleep_before_the_next_pipeline_falls_due(
    leader: Herder,
) -> None:
    """The work loop sleeps until the next due time when that comes before its tick (a
    checkpoint is triggered at its interval, not up to a tick later); a pipeline due but
    waiting for its checkpoint in flight does not keep it awake."""
    fence = leader.require_fence()
    assert leader.run_pass(fence) is None  # nothing will fall due
    leader.pipelines.create(spec=spec("hourly"), target_state=TargetState.RUNNING)
    leader.pipelines.create(
        spec=spec("minutely", interval_ms=60_000), target_state=TargetState.RUNNING
    )
    leader.pipelines.create(spec=spec("busy", interval_ms=1), target_state=TargetState.RUNNING)
    run_tasks(leader)
    leader.run_pass(fence)
    assert {p for p, _ in triggered(leader)} == {"hourly", "minutely", "busy"}
    # "busy" is due again but its checkpoint is in flight (its reports wake the loop).
    next_due_ms = leader.run_pass(fence)
    assert next_due_ms is not None and 50_000 < next_due_ms <= 60_000
    assert len(triggered(leader)) == 3


def test_a_pass_says_the_loop_may_sleep_until_a_timeout_or_a_session_falls_due_not_a_tick(
    leader: Herder,
) -> None:
    """The loop's tick is a 1 s safety net, not what acts on time: the pass names when the
    first thing falls due by time alone, a session's expiry with nothing in flight, a
    checkpoint's timeout once one is."""
    fence = leader.require_fence()
    leader.membership.register_executor(executor_id=ExecutorId("e1"), address="e:1")
    session_ms = leader.settings.session_timeout_ms
    next_ms = leader.run_pass(fence)
    assert next_ms is not None and session_ms - 30_000 < next_ms <= session_ms + 1
    hourly = spec("hourly")
    leader.pipelines.create(spec=hourly, target_state=TargetState.RUNNING)
    run_tasks(leader)
    leader.run_pass(fence)
    assert triggered(leader) == [("hourly", 1)]
    timeout_ms = hourly.checkpoint.timeout_ms
    assert timeout_ms < session_ms, "the test needs the timeout to come first"
    next_ms = leader.run_pass(fence)  # checkpoint 1 in flight: its timeout comes first
    assert next_ms is not None and timeout_ms - 30_000 < next_ms <= timeout_ms + 1


def test_a_pipeline_whose_checkpoint_is_in_flight_keeps_the_loop_asleep_past_its_due_time(
    leader: Herder,
) -> None:
    """Its TRIGGERED checkpoint holds it back, and the checkpoint's end wakes the loop: a
    pass at its due time found it in flight and did nothing (once a checkpoint, whenever
    checkpoints take longer than the interval). Its due time counts again once it ends."""
    fence = leader.require_fence()
    fast = spec("fast", interval_ms=500)
    leader.pipelines.create(spec=fast, target_state=TargetState.RUNNING)
    run_tasks(leader)
    timeout_ms = fast.checkpoint.timeout_ms
    next_ms = leader.run_pass(fence)  # triggers checkpoint 1 (after its view was read)
    assert triggered(leader) == [("fast", 1)]
    assert next_ms is None or next_ms > 500, "woken for the pipeline it just triggered"
    next_ms = leader.run_pass(fence)  # checkpoint 1 in flight, as the view now says
    assert next_ms is not None and timeout_ms - 30_000 < next_ms <= timeout_ms + 1
    leader.checkpoints.abort_checkpoint(PipelineId("fast"), CheckpointId(1), "a test abort")
    next_ms = leader.run_pass(fence)  # sends the abort; its ack wakes the loop
    assert next_ms is not None and next_ms <= 500, "its interval counts again once it ended"


def test_a_retry_asked_for_ends_the_loops_sleep_when_it_is_due(leader: Herder) -> None:
    """A call that failed asks for a pass at its retry (`pass_by`), though the loop sleeps
    for up to a tick and the pass that started the call could not know of it."""
    started = time.monotonic()
    leader.pass_by(started + 0.05)
    leader._sleep(60.0)
    assert 0.05 <= time.monotonic() - started < 30, "slept past the retry it was asked for"
    started = time.monotonic()
    threading.Timer(0.05, leader.wake).start()
    leader._sleep(60.0)  # the retry was consumed by the pass it ended: only a wake ends it
    assert time.monotonic() - started < 30, "a wake did not end the sleep"


def test_a_pass_reads_only_the_pipelines_due(
    leader: Herder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nine pipelines with an hour's interval and one with 1 ms: once each has been
    triggered, a pass reads the due one only, and no pipeline or task of the others."""
    for i in range(9):
        leader.pipelines.create(spec=spec(f"slow{i}"), target_state=TargetState.RUNNING)
    leader.pipelines.create(spec=spec("fast", interval_ms=1), target_state=TargetState.RUNNING)
    run_tasks(leader)
    fence = leader.require_fence()
    leader.run_pass(fence)
    assert len(triggered(leader)) == 10
    complete(leader, "fast", 1)
    monkeypatch.setattr(leader.lease_keeper, "monotonic", lambda: 0.0)  # no periodic reseed
    leader.run_pass(fence)  # reseeds under the frozen clock
    reads = counting(monkeypatch, leader.store.checkpoints, "trigger_inputs")
    listed = counting(monkeypatch, leader.store.pipelines, "list_pipelines")
    tasks = counting(monkeypatch, leader.store.pipelines, "list_tasks")
    for n in range(2, 5):
        assert ("fast", n) in triggered(leader) or n == 2
        complete(leader, "fast", n)
        leader.run_pass(fence)
    assert [("fast", n) for n in (2, 3, 4, 5)] == [t for t in triggered(leader) if t[1] > 1]
    assert {tuple(c[1]["pipeline_ids"]) for c in reads} == {("fast",)}
    assert listed == [] and tasks == [], "no pass read every pipeline or task"


def test_a_pipeline_due_while_its_checkpoint_is_in_flight_costs_no_task_or_offset_read(
    leader: Herder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At a short interval a pipeline is due again before its checkpoint ends, and every
    pass until then (each report, each call's end wakes one) used to read its tasks and
    start offsets to find it in flight: now its checkpoints are looked at first."""
    leader.pipelines.create(spec=spec("busy", interval_ms=1), target_state=TargetState.RUNNING)
    run_tasks(leader)
    fence = leader.require_fence()
    task_rows = counting(monkeypatch, trigger_queries, "task_record")
    offset_reads = counting(monkeypatch, trigger_queries, "next_offsets_of")
    leader.run_pass(fence)
    assert triggered(leader) == [("busy", 1)]
    # The decision reads the 2 tasks and the offsets; the trigger's write transaction reads
    # the tasks again, under the pipeline's lock.
    assert (len(task_rows), len(offset_reads)) == (4, 1), "the trigger reads them"

    task_rows.clear()
    offset_reads.clear()
    for _ in range(3):
        leader.run_pass(fence)  # due, but checkpoint 1 is in flight
    assert triggered(leader) == [("busy", 1)]
    assert (task_rows, offset_reads) == ([], [])

    complete(leader, "busy", 1)  # its pass commits 1 and triggers 2
    assert triggered(leader) == [("busy", 1), ("busy", 2)]
    assert (len(task_rows), len(offset_reads)) == (4, 1)


def test_pipelines_created_updated_resumed_later_and_after_a_failover_are_triggered(
    leader: Herder,
) -> None:
    leader.pipelines.create(spec=spec("a"), target_state=TargetState.RUNNING)
    run_tasks(leader)
    fence = leader.require_fence()
    leader.run_pass(fence)
    assert triggered(leader) == [("a", 1)]
    complete(leader, "a", 1)
    leader.run_pass(fence)
    assert triggered(leader) == [("a", 1)], "due in an hour"

    leader.pipelines.update(spec=spec("a", interval_ms=1), expected_version=None)
    run_tasks(leader)  # its tasks restart on the new config
    leader.run_pass(fence)
    assert triggered(leader)[-1] == ("a", 2), "its new interval has passed already"
    complete(leader, "a", 2)

    leader.pipelines.create(spec=spec("b", interval_ms=1), target_state=TargetState.RUNNING)
    run_tasks(leader)  # the pass assigns b's tasks; their reports make b ready
    leader.run_pass(fence)
    assert ("b", 1) in triggered(leader), "created after the leader started"
    complete(leader, "b", 1)

    leader.pipelines.set_target_state(PipelineId("a"), TargetState.PAUSED)
    leader.run_pass(fence)
    paused = len(triggered(leader))
    leader.run_pass(fence)
    assert len([t for t in triggered(leader)[paused:] if t[0] == "a"]) == 0
    leader.pipelines.set_target_state(PipelineId("a"), TargetState.RUNNING)
    run_tasks(leader)
    leader.run_pass(fence)
    assert [t for t in triggered(leader) if t[0] == "a"][-1] == ("a", 3), "resumed"
    complete(leader, "a", 3)
    complete(leader, "b", max(n for p, n in triggered(leader) if p == "b"))

    # Failover: another replica on the same database takes the lead; its first pass aborts
    # what was in flight (the leader changed), then triggers both.
    successor = Herder(
        store=leader.store,
        settings=CoordinatorSettings(
            coordinator_id=CoordinatorId("c2"), advertise="127.0.0.1:7072", lease_ms=60_000
        ),
        topics=FixedTopics(),  # type: ignore[arg-type]
        executor_client=AcceptingExecutors(),
    )
    leader.lease_keeper.resign()
    successor.lease_keeper.attempt()  # takes the lead and announces the term: recovery
    successor.run_pass(successor.require_fence())
    assert sorted(p for p, _ in triggered(successor)) == ["a", "b"]


def test_a_heartbeat_reads_its_own_executor_only(
    leader: Herder, monkeypatch: pytest.MonkeyPatch
) -> None:
    leader.pipelines.create(spec=spec("a"), target_state=TargetState.RUNNING)
    generation = run_tasks(leader)
    for i in range(2, 6):
        leader.membership.register_executor(executor_id=ExecutorId(f"e{i}"), address="e:1")
    every = counting(monkeypatch, leader.store.executors, "list_executors")
    own = counting(monkeypatch, leader.store.executors, "heartbeat_executors")
    answer = leader.membership.heartbeat(
        executor_id=ExecutorId("e1"), generation=generation, reports=[]
    )
    assert answer.executor.executor_id == "e1"
    assert every == [], "no heartbeat reads every executor"
    assert [c[1]["sessions"] for c in own] == [[("e1", generation)]]
    with pytest.raises(NotFound, match="not registered"):
        leader.membership.heartbeat(executor_id=ExecutorId("e9"), generation=generation, reports=[])

    # Its own row says when it last heartbeated: silent past the session timeout, expired.
    with leader.store.engine.begin() as conn:
        conn.execute(
            executors.update()
            .where(executors.c.executor_id == "e1")
            .values(last_heartbeat_ms=leader.store.db_now_ms() - 600_000)
        )
    with pytest.raises(NotFound) as expired:
        leader.membership.heartbeat(executor_id=ExecutorId("e1"), generation=generation, reports=[])
    assert expired.value.reason == "SESSION_EXPIRED"


def test_heartbeats_arriving_together_share_a_write_and_each_keeps_its_answer(
    leader: Herder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At scale each executor's heartbeat waited its own turn at writing; heartbeats that
    arrive while one is written share the next transaction, each session still checked on
    its own, so a zombie's (an older generation) is refused alone. In each round the first
    heartbeat's write is held until every heartbeat of the round has asked."""
    generation = {
        name: leader.membership.register_executor(
            executor_id=ExecutorId(name), address="e:1"
        ).executor.generation
        for name in ("e1", "e2", "e3")
    }
    zombie = generation["e3"]
    generation["e3"] = leader.membership.register_executor(
        executor_id=ExecutorId("e3"), address="e:2"
    ).executor.generation
    asked = counting(monkeypatch, GroupCommit, "submit")
    real_write = leader.store.executors.heartbeat_executors
    writes: list[list[str]] = []

    def write(**kwargs: Any) -> Any:
        # The round's first write waits until all have asked; the later ones find it so.
        wait_for(
            "every heartbeat to ask for its write", lambda: len(asked) == expected, timeout_s=30
        )
        writes.append([e for e, _ in kwargs["sessions"]])
        return real_write(**kwargs)

    monkeypatch.setattr(leader.store.executors, "heartbeat_executors", write)

    def round_of(sessions: list[tuple[str, Generation]]) -> list[object]:
        answers: dict[int, object] = {}

        def beat(i: int) -> None:
            name, session = sessions[i]
            try:
                answer = leader.membership.heartbeat(
                    executor_id=ExecutorId(name), generation=session, reports=[]
                )
                answers[i] = answer.executor.generation
            except StaleTokenError as exc:
                answers[i] = type(exc).__name__

        threads = [threading.Thread(target=beat, args=(i,)) for i in range(len(sessions))]
        threads[0].start()  # the first asks alone, and its write waits for the others
        wait_for(
            "the first heartbeat to ask",
            lambda: len(asked) == expected - len(threads) + 1,
            timeout_s=30,
        )
        for thread in threads[1:]:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        return [answers[i] for i in range(len(sessions))]

    expected = 3
    assert round_of([(n, generation[n]) for n in ("e1", "e2", "e3")]) == [1, 1, 2]
    assert writes == [["e1"], ["e2", "e3"]], "the two that came during a write share one"

    writes.clear()
    expected = 7
    beats = [(n, generation[n]) for n in ("e1", "e2")] + [("e3", zombie), ("e3", generation["e3"])]
    assert round_of(beats) == [1, 1, "StaleTokenError", 2]
    assert writes[0] == ["e1"] and sorted(writes[1]) == ["e2", "e3", "e3"]
    assert sorted(map(tuple, writes[2:])) == [("e2",), ("e3",), ("e3",)], (
        "the shared write refused, each of its heartbeats is written alone for its answer"
    )


@contextlib.contextmanager
def on_each_statement(leader: Herder, listener: Callable[..., None]) -> Iterator[None]:
    """Call `listener` before each statement sent on the leader's connections, in the block
    (SQLAlchemy's `before_cursor_execute`: connection, cursor, statement, ...)."""
    sa.event.listen(leader.store.engine, "before_cursor_execute", listener)
    try:
        yield
    finally:
        sa.event.remove(leader.store.engine, "before_cursor_execute", listener)


def statements_of(leader: Herder, work: Callable[[], object]) -> list[str]:
    """The SQL statements `work` sends on the leader's connections."""
    statements: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)

    with on_each_statement(leader, record):
        work()
    return statements


def test_a_heartbeats_full_answer_costs_the_same_statements_however_many_pipelines(
    leader: Herder,
) -> None:
    """A full answer reads each pipeline, its offsets and its tasks' restore states in a
    few statements for the whole assignment, not a handful per pipeline or task."""

    def full_answer_statements() -> tuple[int, int]:
        e1 = ExecutorId("e1")
        generation = leader.store.executors.get_executor(executor_id=e1).generation
        answers: list[Any] = []
        statements = statements_of(
            leader,
            lambda: answers.append(
                leader.membership.heartbeat(
                    executor_id=e1, generation=generation, reports=[], known_assignment_version=0
                )
            ),
        )
        assert not answers[0].unchanged
        return len(statements), len(answers[0].tasks)

    for name in ("a", "b"):
        leader.pipelines.create(spec=spec(name), target_state=TargetState.RUNNING)
    run_tasks(leader)
    few, few_tasks = full_answer_statements()
    for name in ("c", "d", "e", "f", "g", "h"):
        leader.pipelines.create(spec=spec(name), target_state=TargetState.RUNNING)
    run_tasks(leader)
    many, many_tasks = full_answer_statements()
    assert (few_tasks, many_tasks) == (4, 16)
    assert many == few, f"{few} statements for 2 pipelines, {many} for 8"


def heartbeat_knowing(leader: Herder, generation: Generation, version: int) -> Any:
    """e1's heartbeat presenting assignment `version`."""
    return leader.membership.heartbeat(
        executor_id=ExecutorId("e1"),
        generation=generation,
        reports=[],
        known_assignment_version=version,
    )


def test_a_changed_answer_reads_only_the_tasks_the_executor_does_not_hold(
    leader: Herder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new pipeline changes e1's assignment: the answer carries every task again, but
    reads the spec, offsets and restore state of the new pipeline's tasks only (the setup
    of many pipelines re-read every task of every executor at each one), and sends what a
    read of everything sends."""
    for name in ("a", "b"):
        leader.pipelines.create(spec=spec(name), target_state=TargetState.RUNNING)
    generation = run_tasks(leader)
    held = heartbeat_knowing(leader, generation, 0)
    leader.pipelines.create(spec=spec("c"), target_state=TargetState.RUNNING)
    leader.run_pass(leader.require_fence())
    restores = counting(monkeypatch, leader.store.checkpoints, "restore_states")
    specs = counting(monkeypatch, leader.store.pipelines, "get_pipelines")
    offsets = counting(monkeypatch, leader.store.offsets, "get_offsets_of")
    changed = heartbeat_knowing(leader, generation, held.version)
    assert not changed.unchanged
    added = sorted(a.task.task_id for a in changed.tasks if a.task.pipeline_id == "c")
    assert len(added) == 2 and len(changed.tasks) == 6
    assert [sorted(kwargs["task_ids"]) for _, kwargs in restores] == [added]
    assert [kwargs["pipeline_ids"] for _, kwargs in specs + offsets] == [["c"], ["c"]]
    fresh = heartbeat_knowing(leader, generation, 0).tasks
    assert assignments_to_proto(changed.tasks) == assignments_to_proto(fresh)


def test_an_unchanged_heartbeat_reads_no_task_and_a_change_anywhere_reads_them_again(
    leader: Herder,
) -> None:
    """Heartbeat cost proportional to changes (issue 14): while no task or pipeline changes,
    a heartbeat reads the assignment stamp, not its executor's tasks; a change made behind
    the leader's back (a state written straight into SQL) or by it (a pause) is read and
    answered at the next heartbeat."""
    for name in ("a", "b"):
        leader.pipelines.create(spec=spec(name), target_state=TargetState.RUNNING)
    generation = run_tasks(leader)
    held = heartbeat_knowing(leader, generation, 0)

    def task_reads(version: int) -> tuple[list[str], Any]:
        answers: list[Any] = []
        statements = statements_of(
            leader, lambda: answers.append(heartbeat_knowing(leader, generation, version))
        )
        return [s for s in statements if re.search(r"\bFROM tasks\b", s)], answers[0]

    for _ in range(3):
        reads, answer = task_reads(held.version)
        assert reads == [] and answer.unchanged, "an unchanged heartbeat reads no task"
    task = held.tasks[0].task
    with leader.store.engine.begin() as conn:
        conn.execute(
            sa.update(tasks)
            .where(tasks.c.task_id == task.task_id)
            .values(state=TaskState.PAUSED.value)
        )
    reads, answer = task_reads(held.version)
    assert len(reads) == 1 and answer.unchanged, "a state changed: read again, same tasks"
    report = HeartbeatTaskReport(
        task_id=task.task_id, task_generation=task.generation, state=TaskState.RUNNING, error=None
    )
    leader.membership.heartbeat(
        executor_id=ExecutorId("e1"), generation=generation, reports=[report]
    )
    assert leader.store.pipelines.get_task(task_id=task.task_id).state is TaskState.RUNNING, (
        "the report is checked against the state read again, not the one read before"
    )
    leader.pipelines.set_target_state(PipelineId("a"), TargetState.STOPPED)
    reads, stopped = task_reads(held.version)
    assert len(reads) == 1 and not stopped.unchanged
    assert sorted({a.task.pipeline_id for a in stopped.tasks}) == ["b"], "a's tasks released"
    assert task_reads(stopped.version)[0] == []


def test_an_answer_is_read_afresh_for_the_tasks_the_executor_may_not_hold(
    leader: Herder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A version this leader did not last send (its answer was lost, or another leader's is
    held) reads every task; a pipeline paused reads its own tasks again, whose target state
    the executor does not hold; an executor that registers again holds nothing."""
    leader.pipelines.create(spec=spec("a"), target_state=TargetState.RUNNING)
    generation = run_tasks(leader)
    held = heartbeat_knowing(leader, generation, 0)
    leader.pipelines.create(spec=spec("b"), target_state=TargetState.RUNNING)
    leader.run_pass(leader.require_fence())
    restores = counting(monkeypatch, leader.store.checkpoints, "restore_states")

    def read() -> list[str]:
        (_, kwargs) = restores.pop()
        assert restores == []
        return sorted({task_id.split("/")[0] for task_id in kwargs["task_ids"]})

    lost = heartbeat_knowing(leader, generation, held.version ^ 1)
    assert len(lost.tasks) == 4 and read() == ["a", "b"]
    leader.pipelines.set_target_state(PipelineId("a"), TargetState.PAUSED)
    leader.run_pass(leader.require_fence())
    paused = heartbeat_knowing(leader, generation, lost.version)
    assert len(paused.tasks) == 4 and read() == ["a"]
    again = leader.membership.register_executor(executor_id=ExecutorId("e1"), address="e:1")
    assert len(again.tasks) == 4 and read() == ["a", "b"]
    assert heartbeat_knowing(leader, again.executor.generation, again.version).unchanged


def test_a_page_of_checkpoint_history_is_one_query_however_many_checkpoints(
    leader: Herder,
) -> None:
    """ListCheckpoints' page carries no task details, so it reads none: the same statements
    for 3 checkpoints as for 7 (it read each checkpoint and its tasks, two more a row)."""
    leader.pipelines.create(spec=spec("fast", interval_ms=1), target_state=TargetState.RUNNING)
    run_tasks(leader)
    pipeline = PipelineId("fast")

    def history() -> tuple[int, list[Any]]:
        statements: list[str] = []

        def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
            statements.append(statement)

        sa.event.listen(leader.store.engine, "before_cursor_execute", count)
        try:
            page = leader.pipelines.list_checkpoints(pipeline_id=pipeline, limit=100)
        finally:
            sa.event.remove(leader.store.engine, "before_cursor_execute", count)
        return len(statements), page

    for n in range(1, 7):
        leader.run_pass(leader.require_fence())
        complete(leader, "fast", n)
        if n == 2:
            few, _ = history()
    many, page = history()
    # Each pass that committed one triggered the next: 7 is in flight.
    assert [c.checkpoint_id for c in page] == [7, 6, 5, 4, 3, 2, 1]
    assert all(c.committed_at_ms is not None for c in page[1:])
    assert all(c.tasks == () for c in page)
    assert many == few, f"{few} statements for 3 checkpoints, {many} for 7"


def test_a_pass_reads_the_fingerprint_and_the_executors_once(
    leader: Herder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rebalance and the triggers share the pass's view of the cluster, read in one
    transaction."""
    for name in ("a", "b"):
        leader.pipelines.create(spec=spec(name, interval_ms=1), target_state=TargetState.RUNNING)
    run_tasks(leader)
    views = counting(monkeypatch, leader.store, "read_cluster")
    executors = counting(monkeypatch, leader.store.executors, "list_executors")
    for _ in range(4):
        leader.run_pass(leader.require_fence())
    assert len(views) == 4
    assert executors == [], "nothing to commit or abort: only the pass's view reads them"


def test_a_pass_with_nothing_due_is_one_read_transaction(
    leader: Herder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whether a checkpoint timed out, which pipelines have transactions to abort and which
    have checkpoints to commit come with the pass's view: a pass with nothing to do reads
    once (it read four times: the view, the timeouts, the lingering, the pending commits),
    and one with a COMPLETE checkpoint commits it after one more read."""
    for name in ("a", "b"):
        leader.pipelines.create(spec=spec(name), target_state=TargetState.RUNNING)
    run_tasks(leader)
    fence = leader.require_fence()
    leader.run_pass(fence)  # triggers checkpoint 1 of each (first due at once)
    reads = counting(monkeypatch, leader.store.database, "read")
    sent = statements_of(leader, lambda: [leader.run_pass(fence) for _ in range(4)])
    assert len(reads) == 4, f"{len(reads)} read transactions in 4 passes with nothing due"
    # Its statements: the fingerprint (both tables in one), the executors, the clock, the
    # TRIGGERED checkpoints, and which pipelines have commits or aborts to send (one).
    queries = [q for q in sent if q.lstrip().upper().startswith("SELECT")]
    assert len(queries) == 4 * 5, queries[:5]
    for report in precommits_of(leader, "a", 1, start=0, end=0):
        leader.store.checkpoints.record_precommit(fence=fence, precommit=report)
    reads.clear()
    leader.run_pass(fence)
    # The view, and the commit job's one read: its pending commits, the executors and the
    # pipeline (it read them in three).
    assert len(reads) == 2, reads
    committed = leader.store.checkpoints.get_checkpoint(
        pipeline_id=PipelineId("a"), checkpoint_id=CheckpointId(1)
    )
    assert committed.state is CheckpointState.COMMITTED


def sqlite_steps(leader: Herder, work: Callable[[], None]) -> int:
    """SQLite virtual-machine steps (in hundreds) that `work` costs on the leader's
    connections: what its statements make SQLite do, rows scanned included, however few
    they return. Deterministic, unlike a timing."""
    steps = [0]
    touched: list[Any] = []

    def tick() -> int:
        steps[0] += 1
        return 0  # go on

    def watch(conn: Any, *_args: Any) -> None:
        raw = conn.connection.dbapi_connection
        if raw not in touched:
            raw.set_progress_handler(tick, 100)
            touched.append(raw)

    try:
        with on_each_statement(leader, watch):
            work()
    finally:
        for raw in touched:
            raw.set_progress_handler(None, 0)
    return steps[0]


def report_all_in_one_batch(leader: Herder, pipeline: str, checkpoint_id: int) -> None:
    """Every task of the checkpoint pre-commits in one ReportPrecommits batch, as an
    executor's reports ready together do."""
    start = (checkpoint_id - 1) * 10
    reports = precommits_of(leader, pipeline, checkpoint_id, start=start, end=start + 10)
    answers = leader.store.checkpoints.record_precommit_batch(
        fence=leader.require_fence(), precommits=reports
    )
    assert all(getattr(a, "state", None) is CheckpointState.COMPLETE for a in answers), answers


def test_a_checkpoints_cost_does_not_grow_with_the_pipelines_history(leader: Herder) -> None:
    """A pipeline keeps up to `--checkpoint-history` (1,000) final checkpoints with their
    task rows and ranges. A checkpoint's round (its reports in one batch, then the pass
    that commits it and triggers the next) makes SQLite do the same work with 60 of them
    as with 10: the reads that joined a task table by its pipeline walked every row the
    pipeline ever wrote (the report's start-offset check, the pass's lingering aborts, the
    history pruning's outstanding aborts): 69 hundred steps at 10 and 193 at 60 before."""
    leader.pipelines.create(
        spec=spec("fast", interval_ms=1, tasks_max=4), target_state=TargetState.RUNNING
    )
    run_tasks(leader)
    fence = leader.require_fence()
    leader.run_pass(fence)

    def round_of(n: int) -> None:
        report_all_in_one_batch(leader, "fast", n)
        leader.run_pass(fence)
        committed = leader.store.checkpoints.get_checkpoint(
            pipeline_id=PipelineId("fast"), checkpoint_id=CheckpointId(n)
        )
        assert committed.state is CheckpointState.COMMITTED

    costs: dict[int, int] = {}
    for n in range(1, 63):
        if n in (11, 12, 61, 62):
            costs[n] = sqlite_steps(leader, lambda n=n: round_of(n))  # type: ignore[misc]
        else:
            round_of(n)
    early, late = costs[11] + costs[12], costs[61] + costs[62]
    assert late < early * 1.25, f"{early} steps at 10 checkpoints of history, {late} at 60"


def test_an_abort_no_executor_can_take_does_not_wake_the_loop_until_one_does(
    leader: Herder,
) -> None:
    """With no executor alive, a lingering abort's job fails and backs off. Its end must not
    wake the work loop: woken, the loop ran a pass, the pass started the job again, the job
    found its retry not due and ended at once, waking the loop again (a leader whose
    executors had all gone spun at half a core). It asks for a pass when its retry falls
    due instead (the loop's tick is a 1 s safety net, too late for a 0.1 s retry). Once an
    executor acks the abort, the job's end wakes the loop: the pipeline may trigger again."""
    leader.pipelines.create(spec=spec("p"), target_state=TargetState.RUNNING)
    generation = run_tasks(leader)
    fence = leader.require_fence()
    leader.run_pass(fence)
    assert triggered(leader) == [("p", 1)]
    leader.checkpoints.abort_checkpoint(PipelineId("p"), CheckpointId(1), "a test abort")
    assert leader.store.checkpoints.list_lingering_pipelines() == {PipelineId("p")}
    with leader.store.engine.begin() as conn:  # e1 silent past its session
        conn.execute(
            executors.update()
            .where(executors.c.executor_id == "e1")
            .values(last_heartbeat_ms=leader.store.db_now_ms() - 600_000)
        )
    leader._woken = False
    asked = time.monotonic()
    leader.checkpoints.send_aborts(fence, wait=True)
    retry_at = leader._pass_at
    assert retry_at is not None, "an abort that could not be sent asked for no retry"
    assert asked < retry_at <= time.monotonic() + 0.1, "the first retry is 0.1 s after"
    for _ in range(2):
        leader.checkpoints.send_aborts(fence, wait=True)
    assert not leader._woken, "an abort that could not be sent woke the loop"
    assert leader._pass_at == retry_at, "a retry not due yet was tried"
    assert leader.store.checkpoints.list_lingering_pipelines() == {PipelineId("p")}

    again = leader.membership.register_executor(executor_id=ExecutorId("e1"), address="e:1")
    assert again.executor.generation > generation, "e1 registered again, alive"
    wait_for(
        "the abort acked once its retry is due",
        lambda: (
            leader.checkpoints.send_aborts(fence, wait=True)
            or not leader.store.checkpoints.list_lingering_pipelines()
        ),
        timeout_s=10,
    )
    assert leader._woken, "an acked abort did not wake the loop"


def test_the_pass_that_moves_a_task_sends_the_aborts_of_the_checkpoint_it_aborted(
    leader: Herder,
) -> None:
    """Moving a task aborts its pipeline's in-flight checkpoint, after the pass's view was
    read: the same pass reads the lingering transactions again and sends their aborts, as
    it did when it always read them afresh, rather than leaving them to the next pass."""
    leader.pipelines.create(spec=spec("p"), target_state=TargetState.RUNNING)
    run_tasks(leader, "e1")
    run_tasks(leader, "e2")
    fence = leader.require_fence()
    leader.run_pass(fence)
    assert set(triggered(leader)) == {("p", 1)}, "one call to each executor"
    with leader.store.engine.begin() as conn:  # e1 silent past its session and the delay
        conn.execute(
            executors.update()
            .where(executors.c.executor_id == "e1")
            .values(last_heartbeat_ms=leader.store.db_now_ms() - 600_000)
        )
    leader.run_pass(fence)
    record = leader.store.checkpoints.get_checkpoint(
        pipeline_id=PipelineId("p"), checkpoint_id=CheckpointId(1)
    )
    assert record.state is CheckpointState.ABORTED
    assert leader.store.checkpoints.list_lingering_pipelines() == set(), (
        "the pass that aborted checkpoint 1 did not send its aborts"
    )


def test_a_pending_commits_handles_are_read_once_by_its_pipelines_commit_job(
    leader: Herder,
) -> None:
    """The pass asks only which pipelines have a COMPLETE checkpoint; each pipeline's
    commit job reads its own handles. The pass read every pending handle of the cluster,
    only to learn which pipelines to start a job for, on every wake while a commit was in
    flight, and the job then read its own again."""
    leader.pipelines.create(spec=spec("p", tasks_max=4), target_state=TargetState.RUNNING)
    run_tasks(leader)
    fence = leader.require_fence()
    leader.run_pass(fence)
    record = leader.store.checkpoints.get_checkpoint(
        pipeline_id=PipelineId("p"), checkpoint_id=CheckpointId(1)
    )
    ids = {t.task_id: t.transactional_id for t in record.tasks}
    reports = [
        dataclasses.replace(
            r,
            handles=(TransactionHandle(f"{ids[r.task_id]}-0", 7, 0, "127.0.0.1:9092"),),
        )
        for r in precommits_of(leader, "p", 1, start=0, end=0)
    ]
    answers = leader.store.checkpoints.record_precommit_batch(fence=fence, precommits=reports)
    assert all(getattr(a, "state", None) is CheckpointState.COMPLETE for a in answers), answers

    handle_reads: list[str] = []

    def watch(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "precommit_handles" in statement:
            handle_reads.append(statement)

    sa.event.listen(leader.store.engine, "before_cursor_execute", watch)
    try:
        leader.run_pass(fence)
    finally:
        sa.event.remove(leader.store.engine, "before_cursor_execute", watch)
    committed = leader.store.checkpoints.get_checkpoint(
        pipeline_id=PipelineId("p"), checkpoint_id=CheckpointId(1)
    )
    assert committed.state is CheckpointState.COMMITTED
    assert len(handle_reads) == 1, handle_reads


def test_the_report_that_completes_a_checkpoint_starts_its_commit_without_a_pass(
    leader: Herder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit goes out from the report's own call, on the call pool: waiting for the
    pass the report woke put the pass's reads before every commit. No pass runs here, and
    the checkpoint is COMMITTED all the same."""
    leader.pipelines.create(spec=spec("p", tasks_max=4), target_state=TargetState.RUNNING)
    run_tasks(leader)
    fence = leader.require_fence()
    leader.run_pass(fence)
    passes = counting(monkeypatch, leader, "run_pass")
    reports = precommits_of(leader, "p", 1, start=0, end=3)
    answers = leader.reports.report_precommits(
        precommits=reports, leader_epochs=[int(fence.leader_epoch)] * len(reports)
    )
    assert {getattr(a, "state", None) for a in answers} == {CheckpointState.COMPLETE}, answers

    def state() -> CheckpointState:
        return leader.store.checkpoints.get_checkpoint(
            pipeline_id=PipelineId("p"), checkpoint_id=CheckpointId(1)
        ).state

    wait_for(
        "checkpoint 1 to be COMMITTED",
        lambda: state() is CheckpointState.COMMITTED,
        timeout_s=30,
    )
    assert passes == []


def test_a_checkpoint_with_nothing_to_commit_is_committed_by_its_last_report_alone(
    leader: Herder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No task left a transaction (no handle: an idle input, or `--data-plane none`): the
    report that completes the checkpoint also writes COMMITTED, in its own transaction, on
    both report paths (an executor's batch, and single reports grouped), with no commit
    job at all; each checkpoint is counted COMMITTED once, a retried report too."""
    for name in ("p", "q"):
        leader.pipelines.create(spec=spec(name, tasks_max=2), target_state=TargetState.RUNNING)
    run_tasks(leader)
    fence = leader.require_fence()
    leader.run_pass(fence)
    commit_jobs = counting(monkeypatch, leader.checkpoints, "commit_pending")
    counted = counting(monkeypatch, leader.checkpoints, "committed")
    epoch = int(fence.leader_epoch)

    def state(pipeline: str) -> CheckpointState:
        return leader.store.checkpoints.get_checkpoint(
            pipeline_id=PipelineId(pipeline), checkpoint_id=CheckpointId(1)
        ).state

    p_reports = precommits_of(leader, "p", 1, start=0, end=3, with_handles=False)
    for _ in range(2):  # the batch, then the same batch retried
        answers = leader.reports.report_precommits(
            precommits=p_reports, leader_epochs=[epoch] * len(p_reports)
        )
        assert {getattr(a, "state", None) for a in answers} == {CheckpointState.COMMITTED}
    assert state("p") is CheckpointState.COMMITTED

    q_reports = precommits_of(leader, "q", 1, start=0, end=3, with_handles=False)
    answered = [leader.reports.report_precommit(precommit=r, leader_epoch=epoch) for r in q_reports]
    assert [a.state for a in answered] == [CheckpointState.TRIGGERED, CheckpointState.COMMITTED]
    assert state("q") is CheckpointState.COMMITTED

    assert commit_jobs == []
    marked = [_key(r) for args, _ in counted for r in args[0]]
    assert marked == [("p", 1), ("q", 1)]


#: The read of pipelines' checkpoint states (`rows.checkpoint_states_of`).
_READS_CHECKPOINT_STATES = re.compile(
    r"SELECT checkpoints\.pipeline_id, checkpoints\.checkpoint_id, checkpoints\.state\s+FROM"
    r" checkpoints\s+WHERE checkpoints\.pipeline_id IN"
)
#: A read of whole `checkpoints` rows (`rows.find_checkpoints_of_tasks`, the summaries).
_READS_CHECKPOINT_ROWS = re.compile(
    r"SELECT checkpoints\.pipeline_id, checkpoints\.checkpoint_id, checkpoints\.state,"
    r" checkpoints\.leader_epoch,"
)


def _key(checkpoint: Any) -> tuple[str, int]:
    return (checkpoint.pipeline_id, checkpoint.checkpoint_id)


def test_a_report_batch_costs_the_same_statements_however_many_pipelines_it_mixes(
    leader: Herder,
) -> None:
    """At scale an executor's ReportPrecommits batch holds many pipelines' reports (one
    executor runs tasks of hundreds). The batch reads each pipeline's lock and sink, its
    checkpoint, tasks and start offsets, writes the pre-commits, and completes the
    checkpoints they make ready, each step for the whole batch at once: a batch of 8
    pipelines' reports sends the statements one of 2 does (16 on SQLite; before, 66 against
    24: seven more per pipeline). The restore offsets are written from the pre-committed
    ranges in the database, not read and written back (one statement fewer). The
    pipelines' checkpoint states are read once, under their locks, for the start offsets
    and the completion both (they were read twice), and the answers are what the batch read
    and wrote, not a read of the rows again; the checkpoints' own rows are not read at all
    (the leader keeps those it triggered, `store/in_flight.py`). Each report is still checked
    on its own, and every checkpoint completes, as its answer says."""

    def batch_statements(names: list[str]) -> int:
        reports = [r for n in names for r in precommits_of(leader, n, 1, start=0, end=5)]
        answers: list[Any] = []
        statements = statements_of(
            leader,
            lambda: answers.extend(
                leader.store.checkpoints.record_precommit_batch(
                    fence=leader.require_fence(), precommits=reports
                )
            ),
        )
        assert len(answers) == len(reports) == 2 * len(names)
        assert {a.state for a in answers} == {CheckpointState.COMPLETE}, answers
        state_reads = [s for s in statements if _READS_CHECKPOINT_STATES.match(s)]
        assert len(state_reads) == 1, state_reads
        row_reads = [s for s in statements if _READS_CHECKPOINT_ROWS.match(s)]
        assert not row_reads, "the leader triggered them: their rows are kept, not read back"
        keys = sorted({(a.pipeline_id, a.checkpoint_id) for a in answers})
        stored = leader.store.checkpoints.get_summaries(keys)
        assert sorted(answers, key=_key) == sorted(
            [s for s in stored for _ in range(2)], key=_key
        ), "each answer is its checkpoint as stored, completion time included"
        assert all(a.completed_at_ms is not None and not a.tasks for a in answers), answers
        assert not [s for s in statements if _READS_RANGES.match(s)], "no ranges read back"
        return len(statements)

    few = ["a", "b"]
    many = ["c", "d", "e", "f", "g", "h", "i", "j"]
    for name in few + many:
        leader.pipelines.create(spec=spec(name, interval_ms=1), target_state=TargetState.RUNNING)
    run_tasks(leader)
    leader.run_pass(leader.require_fence())
    assert {n for n, c in triggered(leader) if c == 1} == set(few + many)
    assert batch_statements(many) == batch_statements(few)


@pytest.mark.parametrize(("per_transaction", "transactions"), [(64, 1), (3, 3)])
def test_a_pass_triggers_the_due_pipelines_a_chunk_per_write_transaction(
    leader: Herder, monkeypatch: pytest.MonkeyPatch, per_transaction: int, transactions: int
) -> None:
    """At scale a pass finds many pipelines due at once; their triggers share a write
    transaction (one fence check, one fsync) per `PIPELINES_PER_TRANSACTION`, not one each.
    Each is still triggered with its own checkpoint and its own executor calls."""
    monkeypatch.setattr(checkpoint_driver, "PIPELINES_PER_TRANSACTION", per_transaction)
    names = [f"p{n}" for n in range(8)]
    for name in names:
        leader.pipelines.create(spec=spec(name, interval_ms=1), target_state=TargetState.RUNNING)
    run_tasks(leader)
    assert triggered(leader) == []
    statements = statements_of(leader, lambda: leader.run_pass(leader.require_fence()))
    assert sorted(triggered(leader)) == [(n, 1) for n in names]
    writes = [s for s in statements if s.startswith("BEGIN IMMEDIATE")]
    assert len(writes) == transactions, f"{len(writes)} write transactions for 8 triggers"


def test_commits_acked_together_share_a_write_transaction(
    leader: Herder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At scale many pipelines' commits are acked at once; marking them COMMITTED shares a
    write transaction (group commit: one fence check, one fsync) instead of one each. The
    8 pipelines' commit calls are answered together, and the first mark's write is held
    until every commit job has asked for its mark: the other 7 share the next write."""
    names = [f"p{n}" for n in range(8)]
    for name in names:
        leader.pipelines.create(spec=spec(name), target_state=TargetState.RUNNING)
    run_tasks(leader)
    fence = leader.require_fence()
    leader.run_pass(fence)
    assert sorted(triggered(leader)) == [(n, 1) for n in names]
    reports = [r for n in names for r in precommits_of(leader, n, 1, start=0, end=5)]
    leader.store.checkpoints.record_precommit_batch(fence=fence, precommits=reports)

    all_acked = threading.Barrier(len(names))
    monkeypatch.setattr(
        leader._executors,
        "send_commit",
        lambda **kwargs: lambda: (all_acked.wait(timeout=30), len(kwargs["handles"]))[1],
    )
    asked = counting(monkeypatch, GroupCommit, "submit")
    real_mark = leader.store.checkpoints.mark_committed
    marks: list[list[tuple[str, int]]] = []

    def mark(**kwargs: Any) -> Any:
        if not marks:  # the first write waits for every job's request
            wait_for("every commit job to ask for its mark", lambda: len(asked) == 8, timeout_s=30)
        marks.append(list(kwargs["keys"]))
        return real_mark(**kwargs)

    monkeypatch.setattr(leader.store.checkpoints, "mark_committed", mark)
    leader.run_pass(fence, wait=False)  # the loop's way: the commit jobs run at once

    def committed() -> bool:
        states = {
            leader.store.checkpoints.get_checkpoint(
                pipeline_id=PipelineId(n), checkpoint_id=CheckpointId(1)
            ).state
            for n in names
        }
        return states == {CheckpointState.COMMITTED}

    wait_for("every checkpoint to be COMMITTED", committed, timeout_s=30)
    assert sorted(key for batch in marks for key in batch) == [(n, 1) for n in names]
    assert len(marks[0]) == 1 and len(marks) < len(names), f"marks written as {marks}"


def test_executors_report_batches_arriving_together_share_a_write_and_keep_their_answers(
    leader: Herder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At scale every executor's ReportPrecommits call waited for the others' writes; the
    calls that arrive while one is written share the next transaction (group commit), each
    report still checked on its own and each call answered with its own reports' answers
    in its order. The first call's write is held until all three have asked."""
    names = ["a", "b", "c"]
    for name in names:
        leader.pipelines.create(spec=spec(name), target_state=TargetState.RUNNING)
    run_tasks(leader)
    fence = leader.require_fence()
    leader.run_pass(fence)
    calls = {n: precommits_of(leader, n, 1, start=0, end=5, with_handles=False) for n in names}
    calls["b"][0] = dataclasses.replace(  # another pipeline's transaction: refused alone
        calls["b"][0], handles=(TransactionHandle("lockgate-another-pipeline-0-g1-0", 7, 0),)
    )
    asked = counting(monkeypatch, GroupCommit, "submit")
    real_write = leader.store.checkpoints.record_precommit_batch
    writes: list[list[str]] = []

    def write(**kwargs: Any) -> Any:
        if not writes:  # the first write waits for every call to ask for its own
            wait_for("every call to ask for its write", lambda: len(asked) == 3, timeout_s=30)
        writes.append(sorted({p.pipeline_id for p in kwargs["precommits"]}))
        return real_write(**kwargs)

    monkeypatch.setattr(leader.store.checkpoints, "record_precommit_batch", write)
    answers: dict[str, list[object]] = {}

    def report(name: str) -> None:
        reports = calls[name]
        answers[name] = [
            getattr(a, "state", type(a).__name__)
            for a in leader.reports.report_precommits(
                precommits=reports, leader_epochs=[int(fence.leader_epoch)] * len(reports)
            )
        ]

    threads = [threading.Thread(target=report, args=(n,)) for n in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert len(writes) == 2 and len(writes[0]) == 1, f"writes of {writes}"
    assert sorted(n for w in writes for n in w) == names
    assert answers == {
        "a": [CheckpointState.COMMITTED] * 2,
        "b": ["InvalidArgument", CheckpointState.TRIGGERED],
        "c": [CheckpointState.COMMITTED] * 2,
    }


def test_triggering_many_pipelines_costs_the_statements_triggering_two_does(
    leader: Herder,
) -> None:
    """A pass at scale finds tens of pipelines due at once. Their triggers read the
    pipelines' locks, data losses, tasks, checkpoint states and slots, write the
    checkpoints (returning them as written: they were read back, one statement more), their
    tasks and ids, each step for all of them at once: 8 pipelines cost the statements 2 do.
    Each still gets its own checkpoint."""

    def trigger_statements(names: list[str]) -> int:
        ids = [PipelineId(n) for n in names]
        answers: dict[PipelineId, Any] = {}
        statements = statements_of(
            leader,
            lambda: answers.update(
                leader.store.checkpoints.trigger_checkpoints(
                    fence=leader.require_fence(), pipeline_ids=ids
                )
            ),
        )
        assert {p: (a.checkpoint_id, len(a.tasks)) for p, a in answers.items()} == {
            p: (1, 2) for p in ids
        }, answers
        assert all(
            a.state is CheckpointState.TRIGGERED and a.triggered_at_ms for a in answers.values()
        ), answers
        row_reads = [s for s in statements if _READS_CHECKPOINT_ROWS.match(s)]
        assert row_reads == [], "the rows as written come back from the INSERT itself"
        return len(statements)

    few = ["a", "b"]
    many = ["c", "d", "e", "f", "g", "h", "i", "j"]
    for name in few + many:
        leader.pipelines.create(spec=spec(name), target_state=TargetState.RUNNING)
    run_tasks(leader)
    assert triggered(leader) == []
    assert trigger_statements(many) == trigger_statements(few)


class RefusingAborts(AcceptingExecutors):
    """As `AcceptingExecutors`, but the executors in `refusing` fail every abort."""

    def __init__(self) -> None:
        super().__init__()
        self.refusing: set[str] = set()

    def abort_checkpoint(self, **kwargs: Any) -> int:
        if kwargs["executor"].executor_id in self.refusing:
            raise ExecutorCallFailed(f"{kwargs['executor'].executor_id} is not answering")
        return super().abort_checkpoint(**kwargs)


def test_an_aborts_acks_are_recorded_in_one_write_and_only_the_acked_tasks_leave(
    tmp_path: Path,
) -> None:
    """An aborted checkpoint's tasks on two executors: the executor that acks has its
    tasks leave the lingering list, all in one UPDATE (it was one write transaction per
    task); the other's stay until it acks too. Nothing unacked is ever marked."""
    client = RefusingAborts()
    with sqlite_leader(tmp_path / "state.db", executor_client=client, partitions=4) as leader:
        leader.pipelines.create(spec=spec("p", tasks_max=4), target_state=TargetState.RUNNING)
        leader.membership.register_executor(executor_id=ExecutorId("e2"), address="e:2")
        run_tasks(leader, "e1")
        run_tasks(leader, "e2")
        fence = leader.require_fence()
        leader.run_pass(fence)
        assert triggered(leader) == [("p", 1)] * 2  # one call per executor
        owners = {
            t.task_id: t.executor_id
            for t in leader.store.checkpoints.get_checkpoint(
                pipeline_id=PipelineId("p"), checkpoint_id=CheckpointId(1)
            ).tasks
        }
        assert sorted(owners.values()) == ["e1", "e1", "e2", "e2"]
        leader.checkpoints.abort_checkpoint(PipelineId("p"), CheckpointId(1), "a test abort")

        def lingering() -> set[str]:
            return {t.task_id for t in leader.store.checkpoints.list_lingering_transactions()}

        client.refusing = {"e2"}
        sent = statements_of(leader, lambda: leader.checkpoints.send_aborts(fence, wait=True))
        marks = [s for s in sent if re.search(r"UPDATE checkpoint_tasks SET abort_acked_at_ms", s)]
        assert len(marks) == 1, marks
        assert lingering() == {t for t, e in owners.items() if e == "e2"}

        client.refusing = set()
        wait_for(
            "e2's abort acked once its retry is due",
            lambda: leader.checkpoints.send_aborts(fence, wait=True) or not lingering(),
            timeout_s=10,
        )


def test_a_pass_reads_a_due_pipelines_newest_and_unfinished_checkpoints_in_one_statement(
    leader: Herder,
) -> None:
    """Every pass that finds a pipeline due reads its newest checkpoint and its unfinished
    ones (to find it in flight): one statement for both, two before."""
    leader.pipelines.create(spec=spec("busy", interval_ms=1), target_state=TargetState.RUNNING)
    run_tasks(leader)
    fence = leader.require_fence()
    leader.run_pass(fence)
    assert triggered(leader) == [("busy", 1)]
    # Due again once the database's clock is past the trigger's time plus 1 ms: a pass in
    # the same millisecond finds nothing due and reads no checkpoint (CI saw it once).
    triggered_by = leader.store.db_now_ms()
    wait_for(
        "the database clock past the interval",
        lambda: leader.store.db_now_ms() > triggered_by + 1,
        timeout_s=5,
    )
    statements = statements_of(leader, lambda: leader.run_pass(fence))  # due, 1 in flight
    assert triggered(leader) == [("busy", 1)]
    row_reads = [s for s in statements if _READS_CHECKPOINT_ROWS.match(s)]
    assert len(row_reads) == 1 and "UNION ALL" in row_reads[0], row_reads


_READS_RANGES = re.compile(r"SELECT precommit_offsets\.")
_READS_HANDLES = re.compile(r"SELECT (DISTINCT )?precommit_handles\.")
_READS_HISTORY_END = re.compile(r"(min|max)\(checkpoints\.checkpoint_id\)")


@pytest.mark.parametrize("with_handles", [False, True])
def test_a_completing_report_batch_reads_the_handles_with_the_counts_and_the_history_once(
    leader: Herder, with_handles: bool
) -> None:
    """The report batch that completes a checkpoint learns whether it left any handle (so
    whether it is COMMITTED at once) from the read of its counts, not a read of the
    handles of its own; and the history it prunes then reads both ends of its span in one
    statement. Each was one statement more in every such batch."""
    leader.pipelines.create(spec=spec("a", interval_ms=1), target_state=TargetState.RUNNING)
    run_tasks(leader)
    fence = leader.require_fence()
    leader.run_pass(fence)
    reports = precommits_of(leader, "a", 1, start=0, end=5, with_handles=with_handles)
    answers: list[Any] = []
    statements = statements_of(
        leader,
        lambda: answers.extend(
            leader.reports.report_precommits(
                precommits=reports, leader_epochs=[int(fence.leader_epoch)] * len(reports)
            )
        ),
    )
    expected = CheckpointState.COMPLETE if with_handles else CheckpointState.COMMITTED
    assert [a.state for a in answers] == [expected] * len(reports)
    assert [s for s in statements if _READS_HANDLES.match(s)] == []
    span_reads = [s for s in statements if _READS_HISTORY_END.search(s)]
    assert len(span_reads) == (0 if with_handles else 1), span_reads
    assert all("min(" in s and "max(" in s for s in span_reads), span_reads


def test_a_pipeline_behind_its_source_is_triggered_as_soon_as_its_checkpoint_completes(
    leader: Herder,
) -> None:
    """A pre-commit that stopped a range at the limit its executor gave it (its report's
    `backlog_left`, one task of several) leaves its pipeline behind: the next checkpoint
    does not wait for the interval (an hour here). One after a checkpoint that left nothing
    does, and a late report of an older checkpoint changes nothing (issue 13)."""
    leader.pipelines.create(spec=spec("p"), target_state=TargetState.RUNNING)
    run_tasks(leader)
    fence = leader.require_fence()
    leader.run_pass(fence)
    assert triggered(leader) == [("p", 1)]

    def report(checkpoint_id: int, start: int, end: int, *, backlog_left: bool) -> None:
        reports = precommits_of(
            leader, "p", checkpoint_id, start=start, end=end, backlog_left=backlog_left
        )
        assert len(reports) > 1
        answers = leader.reports.report_precommits(
            precommits=reports, leader_epochs=[int(fence.leader_epoch)] * len(reports)
        )
        assert {getattr(a, "state", None) for a in answers} == {CheckpointState.COMPLETE}

    report(1, 0, 100, backlog_left=True)
    leader.run_pass(fence)
    assert triggered(leader) == [("p", 1), ("p", 2)]

    report(2, 100, 200, backlog_left=False)
    leader.run_pass(fence)
    assert triggered(leader) == [("p", 1), ("p", 2)]
    late = precommits_of(leader, "p", 1, start=0, end=100, backlog_left=True)[0]
    leader.checkpoints.schedule.precommitted(late)
    leader.run_pass(fence)
    assert triggered(leader) == [("p", 1), ("p", 2)]
