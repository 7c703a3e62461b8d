"""The decisions the store applies to checkpoints: trigger, completion, abort, timeouts,
restore states (pure functions of `domain/checkpoints.py`, no database)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockgate.common.model.handles import TransactionHandle
from lockgate.common.model.ids import (
    CheckpointId,
    ExecutorId,
    Generation,
    LeaderEpoch,
    PipelineId,
    TaskId,
)
from lockgate.common.model.offsets import TopicPartition
from lockgate.common.model.pipeline_spec import parse_pipeline_spec
from lockgate.coordinator.domain.checkpoints import (
    DEFAULT_MAX_IN_FLIGHT,
    CheckpointRecord,
    LingeringTransaction,
    PendingCommit,
    PrecommitCount,
    TaskHandles,
    TaskTrigger,
    TriggeredCheckpoint,
    abort_reason,
    check_handles_abortable,
    checkpoints_to_complete,
    committed_on_completion,
    first_timed_out,
    next_timeout_at_ms,
    plan_abort,
    plan_trigger,
    restore_states_of,
    trigger_due,
)
from lockgate.coordinator.domain.errors import FailedPrecondition, IllegalTransition
from lockgate.coordinator.domain.pipelines import PipelineRecord, TaskRecord
from lockgate.coordinator.domain.states import CheckpointState, TargetState, TaskState
from lockgate.coordinator.domain.transactional_ids import TRANSACTIONAL_ID_SLOTS

C = CheckpointId
P = PipelineId("p")
T, A, K, X = (
    CheckpointState.TRIGGERED,
    CheckpointState.ABORTED,
    CheckpointState.COMPLETE,
    CheckpointState.COMMITTED,
)
SPEC = parse_pipeline_spec(
    {
        "name": "p",
        "source": {"kafka": {"bootstrap_servers": "127.0.0.1:9092", "topics": ["in"]}},
        "sink": {"kafka": {"bootstrap_servers": "127.0.0.1:9092", "topic": "out"}},
    }
)


def pipeline(target: TargetState = TargetState.RUNNING, next_id: int = 1) -> PipelineRecord:
    return PipelineRecord(P, SPEC, 1, target, C(next_id), 0, 0)


def task(index: int, executor: str | None = "e1", generation: int = 1) -> TaskRecord:
    return TaskRecord(
        task_id=TaskId(f"p/{index}"),
        pipeline_id=P,
        task_index=index,
        partitions=(TopicPartition("in", index),),
        executor_id=ExecutorId(executor) if executor else None,
        generation=Generation(generation),
        state=TaskState.RUNNING,
        state_executor_id=None,
        state_executor_generation=None,
        last_error=None,
        updated_at_ms=0,
    )


def record(n: int, state: CheckpointState, tasks: int, precommitted: int) -> CheckpointRecord:
    triggers = tuple(
        TaskTrigger(TaskId(f"p/{i}"), Generation(1), ExecutorId("e1"), f"lockgate-p-{i}-g1-0", 0)
        for i in range(tasks)
    )
    return CheckpointRecord(
        pipeline_id=P,
        checkpoint_id=C(n),
        state=state,
        leader_epoch=LeaderEpoch(1),
        tasks=triggers,
        precommitted=frozenset(t.task_id for t in triggers[:precommitted]),
        triggered_at_ms=0,
        completed_at_ms=None,
        committed_at_ms=None,
        aborted_at_ms=None,
        abort_reason=None,
    )


def refusal(**kwargs: object) -> str:
    with pytest.raises(FailedPrecondition) as caught:
        plan_trigger(**kwargs)  # type: ignore[arg-type]
    return caught.value.reason


def test_trigger_allots_each_task_its_lowest_free_slot() -> None:
    plan = plan_trigger(
        pipeline=pipeline(next_id=7),
        tasks=[task(0), task(1, generation=4)],
        states={C(6): K},
        slot_use={0: {0: K}, 1: {0: X}},
    )
    assert plan.checkpoint_id == 7
    # Each id carries the task's generation: a task moved to generation 4 never writes on
    # an id its earlier owners (generations 1-3) may still open.
    assert [(t.task_id, t.slot, t.transactional_id) for t in plan.tasks] == [
        ("p/0", 1, "lockgate-p-0-g1-1"),
        ("p/1", 0, "lockgate-p-1-g4-0"),
    ]


def test_trigger_refusals_write_nothing_and_say_why() -> None:
    ok = {"tasks": [task(0)], "states": {}, "slot_use": {}}
    assert refusal(pipeline=pipeline(TargetState.PAUSED), **ok) == "PIPELINE_NOT_RUNNING"
    assert refusal(pipeline=pipeline(), tasks=[], states={}, slot_use={}) == "NO_TASKS"
    unassigned = {**ok, "tasks": [task(0, executor=None)]}
    assert refusal(pipeline=pipeline(), **unassigned) == "TASKS_UNASSIGNED"
    full = {**ok, "states": {C(n): T for n in range(DEFAULT_MAX_IN_FLIGHT)}}
    assert refusal(pipeline=pipeline(), **full) == "TOO_MANY_IN_FLIGHT"
    busy = {**ok, "slot_use": {0: {s: K for s in range(TRANSACTIONAL_ID_SLOTS)}}}
    assert refusal(pipeline=pipeline(), **busy) == "NO_FREE_SLOT"


@given(
    st.dictionaries(st.integers(1, 8), st.sampled_from([T, K, A])),
    st.dictionaries(
        st.integers(0, TRANSACTIONAL_ID_SLOTS - 1), st.sampled_from([None, T, K, A, X])
    ),
)
def test_a_trigger_never_exceeds_the_limit_or_takes_a_live_slot(
    states: dict[int, CheckpointState], slots: dict[int, CheckpointState | None]
) -> None:
    in_flight = sum(1 for s in states.values() if s in (T, K))
    try:
        plan = plan_trigger(
            pipeline=pipeline(next_id=9),
            tasks=[task(0)],
            states={C(c): s for c, s in states.items()},
            slot_use={0: slots},
        )
    except FailedPrecondition:
        return
    assert in_flight < DEFAULT_MAX_IN_FLIGHT
    assert slots.get(plan.tasks[0].slot) not in (T, K)


def test_completion_walks_on_while_checkpoints_are_ready() -> None:
    states = {C(1): T, C(2): T, C(3): T}
    counts = {C(1): PrecommitCount(2, 2), C(2): PrecommitCount(2, 2), C(3): PrecommitCount(2, 1)}
    assert checkpoints_to_complete(C(1), states=states, counts=counts) == [1, 2]
    # N+1 waits for N, even if all of N+1's tasks pre-committed.
    assert checkpoints_to_complete(C(2), states=states, counts=counts) == []
    assert checkpoints_to_complete(C(3), states={C(3): K}, counts={}) == []
    # A checkpoint triggered for no task never completes.
    no_task = {C(1): PrecommitCount(0, 0)}
    assert checkpoints_to_complete(C(1), states={C(1): T}, counts=no_task) == []


@given(st.lists(st.tuples(st.sampled_from([T, K, A]), st.integers(0, 2)), max_size=6))
def test_completion_is_in_order_and_only_of_fully_precommitted_checkpoints(
    shape: list[tuple[CheckpointState, int]],
) -> None:
    states = {C(n + 1): s for n, (s, _) in enumerate(shape)}
    counts = {C(n + 1): PrecommitCount(2, done) for n, (s, done) in enumerate(shape) if s is T}
    for start in states:
        done = checkpoints_to_complete(start, states=states, counts=counts)
        assert done == list(range(start, start + len(done)))
        for c in done:
            assert counts[c].precommitted == counts[c].tasks
            assert all(states[e] is not T for e in states if e < start)


def test_a_completed_checkpoint_with_nothing_to_commit_commits_at_once_in_order() -> None:
    # Nothing waits: 1 and 2 completed together, neither left a handle.
    both = committed_on_completion([C(2), C(1)], states={C(1): T, C(2): T}, with_handles=set())
    assert both == [1, 2]
    # 1 has handles to commit: 1 waits for its commit, and 2 waits for 1.
    assert committed_on_completion([C(1), C(2)], states={}, with_handles={C(1)}) == []
    # 2 has handles: 1 commits now, 2 waits for its own commit.
    assert committed_on_completion([C(1), C(2)], states={}, with_handles={C(2)}) == [1]
    # An earlier COMPLETE checkpoint still committing holds back an empty later one.
    assert committed_on_completion([C(4)], states={C(3): K, C(4): T}, with_handles=set()) == []
    # An earlier ABORTED one does not (it commits nothing).
    assert committed_on_completion([C(4)], states={C(3): A, C(4): T}, with_handles=set()) == [4]


@given(
    st.lists(st.sampled_from([K, A]), max_size=4),
    st.integers(1, 4),
    st.sets(st.integers(0, 9)),
)
def test_a_checkpoint_commits_at_completion_only_with_no_handle_and_no_earlier_commit_waiting(
    before: list[CheckpointState], completing: int, handles: set[int]
) -> None:
    states = {C(n): s for n, s in enumerate(before)}
    completed = [C(len(before) + n) for n in range(completing)]
    with_handles = {C(n) for n in handles}
    done = committed_on_completion(completed, states=states, with_handles=with_handles)
    assert done == completed[: len(done)]  # a prefix, in order
    for c in done:
        assert c not in with_handles
        assert all(s is not K for e, s in states.items() if e < c)
    if len(done) < len(completed):  # stopped by a handle or a commit waiting
        stopper = completed[len(done)]
        assert stopper in with_handles or K in states.values()


def test_abort_takes_later_in_flight_checkpoints_and_is_idempotent() -> None:
    states = {C(1): K, C(2): T, C(3): T}
    assert plan_abort(C(2), current=T, states=states) == [2, 3]
    assert plan_abort(C(2), current=A, states=states) == []
    with pytest.raises(IllegalTransition):
        plan_abort(C(1), current=K, states=states)
    assert abort_reason(C(2), first=C(2), reason="slow") == "slow"
    assert abort_reason(C(3), first=C(2), reason="slow") == "checkpoint 2 aborted (slow)"


def test_only_the_first_timed_out_checkpoint_of_each_pipeline_is_named() -> None:
    def at(pipeline_id: str, n: int, ms: int) -> TriggeredCheckpoint:
        return TriggeredCheckpoint(PipelineId(pipeline_id), C(n), ms, 100)

    late = first_timed_out(
        [at("b", 2, 0), at("a", 1, 950), at("a", 2, 0), at("b", 1, 0), at("c", 1, 900)],
        now_ms=1000,
    )
    assert [(c.pipeline_id, c.checkpoint_id) for c in late] == [("a", 2), ("b", 1)]


@given(
    st.lists(st.tuples(st.integers(0, 5_000), st.integers(1, 3_000)), max_size=6),
    st.integers(0, 10_000),
)
def test_the_next_timeout_is_the_first_moment_a_checkpoint_not_yet_late_is_late(
    started: list[tuple[int, int]], now_ms: int
) -> None:
    """The leader's loop sleeps until then: not a millisecond late, and never for one
    already timed out (which the pass aborts; a past time would spin the loop)."""
    triggered = [
        TriggeredCheckpoint(P, C(n), at, timeout) for n, (at, timeout) in enumerate(started)
    ]
    at_ms = next_timeout_at_ms(triggered, now_ms=now_ms)
    not_late = [c for c in triggered if not first_timed_out([c], now_ms=now_ms)]
    if not not_late:
        assert at_ms is None
        return
    assert at_ms is not None and at_ms > now_ms
    assert any(first_timed_out([c], now_ms=at_ms) for c in not_late), "late by then"
    assert not any(first_timed_out([c], now_ms=at_ms - 1) for c in not_late), "not sooner"


def test_handles_are_recorded_aborted_only_for_aborted_checkpoints() -> None:
    check_handles_abortable(record(1, A, 1, 0))
    with pytest.raises(FailedPrecondition, match="only an ABORTED"):
        check_handles_abortable(record(1, K, 1, 1))


def test_each_task_restores_its_own_offsets_handles_and_aborts() -> None:
    t0, t1 = task(0), dataclasses.replace(task(1), generation=Generation(4))
    handles = (
        TaskHandles(t0.task_id, (TransactionHandle("lockgate-p-0-g1-0-0", 1, 0),)),
        TaskHandles(t1.task_id, (TransactionHandle("lockgate-p-1-g1-0-0", 2, 0),)),
    )
    abort = LingeringTransaction(P, C(3), A, t1.task_id, "lockgate-p-1-g1-1-0", 5, 0)
    got = restore_states_of(
        [t0, t1],
        offsets={TopicPartition("in", 0): 10, TopicPartition("other", 0): 3},
        pending=[PendingCommit(P, C(2), handles)],
        lingering=[abort],
    )
    assert got[t0.task_id].start_offsets == {TopicPartition("in", 0): 10}
    assert got[t0.task_id].to_commit == (PendingCommit(P, C(2), handles[:1]),)
    assert got[t0.task_id].to_abort == ()
    assert got[t1.task_id].task_generation == 4
    assert got[t1.task_id].start_offsets == {}
    assert got[t1.task_id].to_commit == (PendingCommit(P, C(2), handles[1:]),)
    assert got[t1.task_id].to_abort == (abort,)


def test_the_trigger_loop_waits_for_running_tasks_lingering_aborts_and_the_interval() -> None:
    live = frozenset({ExecutorId("e1")})
    running = dataclasses.replace(task(0), state_executor_id=ExecutorId("e1"))
    last = dataclasses.replace(record(1, X, 1, 1), triggered_at_ms=1_000)

    def due(**changes: object) -> bool:
        args: dict[str, object] = {
            "pipeline": pipeline(),
            "tasks": [running],
            "live_executors": live,
            "recent": [last],
            "has_lingering": False,
            "now_ms": 1_000 + SPEC.checkpoint.interval_ms,
        }
        return trigger_due(**{**args, **changes})  # type: ignore[arg-type]

    assert due()
    assert not due(now_ms=999 + SPEC.checkpoint.interval_ms)
    assert not due(pipeline=pipeline(TargetState.PAUSED))
    assert not due(tasks=[])
    assert not due(has_lingering=True)
    assert not due(live_executors=frozenset())
    assert not due(tasks=[dataclasses.replace(running, state=TaskState.RESTARTING)])
    # RUNNING as reported by the task's previous executor is not RUNNING here.
    assert not due(tasks=[dataclasses.replace(running, state_executor_id=ExecutorId("e0"))])
    assert not due(recent=[record(2, T, 1, 0), last])
    assert not due(recent=[record(n, K, 1, 1) for n in range(DEFAULT_MAX_IN_FLIGHT)])
    assert due(recent=[])
    # Behind its source (a pre-commit of its newest checkpoint left records), the next one
    # does not wait for the interval; it still waits for everything else.
    assert due(now_ms=1_001, behind=True)
    assert not due(now_ms=1_001, behind=True, recent=[record(2, T, 1, 0), last])
    assert not due(behind=True, recent=[record(n, K, 1, 1) for n in range(DEFAULT_MAX_IN_FLIGHT)])
    assert not due(behind=True, has_lingering=True)
    assert not due(behind=True, pipeline=pipeline(TargetState.PAUSED))
