"""Assignment: balanced, sticky (minimal moves), incremental, deterministic."""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from hypothesis import given
from hypothesis import strategies as st

from lockgate.common.model.ids import ExecutorId, TaskId
from lockgate.coordinator.domain.assignment import (
    ExecutorLiveness,
    LeaderGap,
    assign,
    counted_heartbeat_ms,
    executor_liveness,
    liveness_changes_at_ms,
    plan_assignment,
)

EXECUTORS = [ExecutorId(f"e{i}") for i in range(6)]
TASKS = [TaskId(f"p/{i}") for i in range(25)]


@st.composite
def scenarios(
    draw: st.DrawFn,
) -> tuple[dict[ExecutorId, set[TaskId]], list[ExecutorId], list[TaskId]]:
    """A current assignment (each task on at most one executor, live or not), the live
    executors and the tasks that exist now (some old ones gone, some new)."""
    old_tasks = draw(st.lists(st.sampled_from(TASKS), unique=True, max_size=20))
    owners = {t: draw(st.sampled_from([None, *EXECUTORS])) for t in old_tasks}
    current: dict[ExecutorId, set[TaskId]] = {}
    for task, owner in owners.items():
        if owner is not None:
            current.setdefault(owner, set()).add(task)
    live = draw(st.lists(st.sampled_from(EXECUTORS), unique=True, max_size=6))
    all_tasks = draw(st.lists(st.sampled_from(TASKS), unique=True, max_size=25))
    return current, live, all_tasks


def max_stays(
    current: Mapping[ExecutorId, set[TaskId]], live: list[ExecutorId], tasks: set[TaskId]
) -> int:
    """Brute-force oracle: the most tasks any balanced assignment leaves in place."""
    base, extra = divmod(len(tasks), len(live))
    kept = {e: len(current.get(e, set()) & tasks) for e in live}
    best = 0
    for bigger in itertools.combinations(live, extra):
        stays = sum(min(kept[e], base + (1 if e in bigger else 0)) for e in live)
        best = max(best, stays)
    return best


@given(scenarios())
def test_assignment_properties(
    scenario: tuple[dict[ExecutorId, set[TaskId]], list[ExecutorId], list[TaskId]],
) -> None:
    current, live, all_tasks = scenario
    result = assign(current, live, all_tasks)
    if not live:
        assert result == {}
        return
    assert set(result) == set(live)
    # Every task exactly once.
    flat = [t for ts in result.values() for t in ts]
    assert sorted(flat) == sorted(all_tasks)
    # Balanced.
    sizes = [len(ts) for ts in result.values()]
    assert max(sizes) - min(sizes) <= 1
    # Sticky: as many tasks stay as the best balanced assignment allows.
    tasks = set(all_tasks)
    stays = sum(len(set(current.get(e, set())) & result[e]) for e in live)
    assert stays == max_stays(current, live, tasks)
    # Deterministic, whatever the order of the inputs.
    again = assign(dict(reversed(list(current.items()))), list(reversed(live)), sorted(tasks))
    assert again == result


def test_joining_executor_takes_only_its_share() -> None:
    e1, e2, e3 = ExecutorId("e1"), ExecutorId("e2"), ExecutorId("e3")
    tasks = [TaskId(f"p/{i}") for i in range(6)]
    first = assign({}, [e1, e2], tasks)
    second = assign(first, [e1, e2, e3], tasks)
    assert len(second[e3]) == 2
    # The others keep what they keep: exactly the two the newcomer took moved.
    assert second[e1] <= first[e1] and second[e2] <= first[e2]


def test_leaving_executor_moves_only_its_tasks() -> None:
    e1, e2, e3 = ExecutorId("e1"), ExecutorId("e2"), ExecutorId("e3")
    tasks = [TaskId(f"p/{i}") for i in range(9)]
    first = assign({}, [e1, e2, e3], tasks)
    second = assign(first, [e1, e2], tasks)
    # The others keep all theirs: only e3's tasks moved.
    assert first[e1] <= second[e1] and first[e2] <= second[e2]


def test_liveness_boundaries() -> None:
    def state(silent: int) -> ExecutorLiveness:
        return executor_liveness(
            last_heartbeat_ms=1_000,
            now_ms=1_000 + silent,
            session_timeout_ms=10_000,
            reassign_delay_ms=3_000,
        )

    assert state(10_000) is ExecutorLiveness.ALIVE
    assert state(10_001) is ExecutorLiveness.DEAD_IN_GRACE
    assert state(13_000) is ExecutorLiveness.DEAD_IN_GRACE
    assert state(13_001) is ExecutorLiveness.DEAD


@given(st.integers(0, 20_000))
def test_liveness_changes_at_the_first_moment_it_differs_and_never_once_dead(
    silent_ms: int,
) -> None:
    """The leader's loop sleeps until an executor's session expires or its grace ends:
    the pass then sees the new state, not a millisecond later or sooner."""
    timing = {"session_timeout_ms": 10_000, "reassign_delay_ms": 3_000}
    now_ms = 1_000 + silent_ms
    before = executor_liveness(last_heartbeat_ms=1_000, now_ms=now_ms, **timing)
    at_ms = liveness_changes_at_ms(last_heartbeat_ms=1_000, now_ms=now_ms, **timing)
    if before is ExecutorLiveness.DEAD:
        assert at_ms is None
        return
    assert at_ms is not None and at_ms > now_ms
    assert executor_liveness(last_heartbeat_ms=1_000, now_ms=at_ms - 1, **timing) is before
    assert executor_liveness(last_heartbeat_ms=1_000, now_ms=at_ms, **timing) is not before


def test_dead_executor_keeps_tasks_until_the_delay_passes() -> None:
    e1, e2 = ExecutorId("e1"), ExecutorId("e2")
    tasks = [TaskId(f"p/{i}") for i in range(4)]
    current = {e1: {tasks[0], tasks[1]}, e2: {tasks[2], tasks[3]}}
    heartbeats = {e1: 100_000, e2: 100_000 - 10_500}  # e2 silent for 10.5 s

    def plan_at(now_ms: int) -> dict[ExecutorId, frozenset[TaskId]]:
        return plan_assignment(
            current=current,
            last_heartbeats_ms=heartbeats,
            all_tasks=tasks,
            now_ms=now_ms,
            session_timeout_ms=10_000,
            reassign_delay_ms=3_000,
        ).assignment

    in_grace = plan_at(100_000)
    assert in_grace[e2] == frozenset({tasks[2], tasks[3]})
    assert in_grace[e1] == frozenset({tasks[0], tasks[1]})
    # The grace period of e2 ends at its heartbeat + timeout + delay.
    grace_ends_ms = liveness_changes_at_ms(
        last_heartbeat_ms=heartbeats[e2],
        now_ms=100_000,
        session_timeout_ms=10_000,
        reassign_delay_ms=3_000,
    )
    assert grace_ends_ms == 100_000 - 10_500 + 13_000 + 1
    assert plan_at(grace_ends_ms - 1) == in_grace
    assert plan_at(grace_ends_ms) == {e1: frozenset(tasks)}


def test_new_tasks_are_assigned_to_a_live_executor() -> None:
    e1 = ExecutorId("e1")
    plan = plan_assignment(
        current={},
        last_heartbeats_ms={e1: 5},
        all_tasks=[TaskId("p/0")],
        now_ms=5,
    )
    assert plan.assignment == {e1: frozenset({TaskId("p/0")})}


def test_time_no_leader_could_record_heartbeats_is_not_silence() -> None:
    # Session timeout 4 s; the leader lost its database at 10 s and got it back at 12 s.
    gap = LeaderGap(started_ms=10_000, ended_ms=12_000)

    def counted(last_heartbeat_ms: int) -> int:
        return counted_heartbeat_ms(
            last_heartbeat_ms=last_heartbeat_ms, session_timeout_ms=4_000, gap=gap
        )

    # Alive when the gap began (even just): a full session timeout from 12 s.
    assert counted(9_500) == 12_000
    assert counted(6_000) == 12_000
    assert (
        executor_liveness(last_heartbeat_ms=counted(9_500), now_ms=15_900, session_timeout_ms=4_000)
        is ExecutorLiveness.ALIVE
    )
    assert (
        executor_liveness(last_heartbeat_ms=counted(9_500), now_ms=16_001, session_timeout_ms=4_000)
        is not ExecutorLiveness.ALIVE
    )
    # Expired before the gap: stays expired (its tasks may have moved).
    assert counted(5_999) == 5_999
    # Heard from after the gap, or no gap known: its own heartbeat counts.
    assert counted(12_500) == 12_500
    assert (
        counted_heartbeat_ms(last_heartbeat_ms=9_500, session_timeout_ms=4_000, gap=None) == 9_500
    )
