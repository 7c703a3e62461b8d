"""The executor's membership thread holds its last full assignment: a heartbeat presents
its version, and an answer that says "unchanged" (no tasks in it) hands the held tasks on
again instead of an empty assignment (which would stop every task). A task's state change
is heartbeated at once, not at the interval."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from lockgate.common.model.ids import Generation, LeaderEpoch
from lockgate.executor.fencing import LeaderEpochFence
from lockgate.executor.runtime.membership import Membership
from lockgate.executor.runtime.tasks import TaskBoard, TaskPhase, TaskView
from lockgate.executor.runtime.values import (
    Assignment,
    ExecutorSettings,
    LeaderStamp,
    MembershipReply,
    TaskRef,
)
from tests.support.waits import wait_for

_LEADER = LeaderStamp(LeaderEpoch(1), "c1")
_TASK = Assignment(
    task=TaskRef("p", 0),
    generation=Generation(1),
    config_version=1,
    spec=None,
    invalid_spec=None,
    source_partitions=(("t", 0),),
    restore_offsets={},
    target_running=True,
    max_records_per_partition=0,
    transaction_timeout_ms=0,
    restore=None,
)


class _Coordinator:
    """Registers with one task at version 7, then answers heartbeats from a script."""

    def __init__(self, heartbeats: list[MembershipReply], *, interval_ms: int = 1) -> None:
        self.heartbeats = heartbeats
        self.interval_ms = interval_ms
        self.presented: list[int] = []
        self.statuses: list[Sequence[TaskView]] = []

    def register(self, settings: ExecutorSettings, *, timeout_s: float) -> MembershipReply:
        return MembershipReply(
            leader=_LEADER,
            heartbeat_interval_ms=self.interval_ms,
            session_timeout_ms=60_000,
            assignments=(_TASK,),
            assignment_version=7,
            executor_generation=Generation(1),
            session_id="s",
        )

    def heartbeat(
        self,
        *,
        executor_id: str,
        executor_generation: Generation,
        statuses: Sequence[TaskView],
        highest_leader_seen: LeaderStamp,
        known_assignment_version: int,
        timeout_s: float,
    ) -> MembershipReply:
        self.statuses.append(statuses)
        self.presented.append(known_assignment_version)
        if len(self.presented) <= len(self.heartbeats):
            return self.heartbeats[len(self.presented) - 1]
        return self.heartbeats[-1]


def _unchanged(version: int, *, interval_ms: int = 1) -> MembershipReply:
    return MembershipReply(
        leader=_LEADER,
        heartbeat_interval_ms=interval_ms,
        session_timeout_ms=60_000,
        assignments=(),
        assignment_version=version,
        assignment_unchanged=True,
    )


def _membership(
    coordinator: _Coordinator,
    stopping: threading.Event,
    *,
    statuses: Callable[[], list[TaskView]],
    on_assignment: Callable[[Sequence[Assignment]], None],
) -> Membership:
    return Membership(
        ExecutorSettings("e1", "127.0.0.1:1", ("127.0.0.1:2",), "none"),
        client=coordinator,  # type: ignore[arg-type]
        fence=LeaderEpochFence(),
        stopping=stopping,
        statuses=statuses,
        on_assignment=on_assignment,
        on_session_lost=lambda: None,
    )


def _run(
    coordinator: _Coordinator, calls: int, heartbeats: int = 2
) -> list[tuple[Assignment, ...]]:
    received: list[tuple[Assignment, ...]] = []
    stopping = threading.Event()
    membership = _membership(
        coordinator,
        stopping,
        statuses=list,
        on_assignment=lambda tasks: received.append(tuple(tasks)),
    )
    membership.start()
    try:
        wait_for(
            f"{calls} assignments handed on after {heartbeats} heartbeats",
            lambda: len(received) >= calls and len(coordinator.presented) >= heartbeats,
            timeout_s=10,
        )
    finally:
        stopping.set()
        membership.stop()
    return received[:calls]


def test_an_unchanged_answer_hands_the_held_assignment_on() -> None:
    coordinator = _Coordinator([_unchanged(7)])
    received = _run(coordinator, calls=3)
    assert received == [(_TASK,)] * 3
    assert coordinator.presented[:2] == [7, 7]


def test_a_changed_answer_replaces_what_is_held_and_its_version_is_presented() -> None:
    changed = MembershipReply(
        leader=_LEADER,
        heartbeat_interval_ms=1,
        session_timeout_ms=60_000,
        assignments=(),
        assignment_version=8,
    )
    coordinator = _Coordinator([changed, _unchanged(8)])
    received = _run(coordinator, calls=3)
    assert received == [(_TASK,), (), ()]
    assert coordinator.presented[:2] == [7, 8]


def test_unchanged_from_a_version_not_held_changes_nothing_and_asks_for_everything() -> None:
    coordinator = _Coordinator([_unchanged(99), _unchanged(7)])
    received = _run(coordinator, calls=1, heartbeats=3)
    assert received == [(_TASK,)]  # the registration's only: no empty assignment
    assert coordinator.presented[:3] == [7, 0, 0]


def test_a_task_state_change_is_heartbeated_at_once_not_at_the_interval() -> None:
    # A minute between heartbeats: only the nudge brings the second one within the wait.
    coordinator = _Coordinator([_unchanged(7, interval_ms=60_000)], interval_ms=60_000)
    membership: Membership
    board = TaskBoard(on_change=lambda: membership.nudge())

    def assign(assignments: Sequence[Assignment]) -> None:
        board.apply(assignments)

    stopping = threading.Event()
    membership = _membership(coordinator, stopping, statuses=board.statuses, on_assignment=assign)
    membership.start()
    try:
        wait_for("the first heartbeat", lambda: len(coordinator.statuses) >= 1, timeout_s=10)
        assert [v.phase for v in coordinator.statuses[0]] == [TaskPhase.RESTORING]
        with board.lock:
            task = board.task_locked(_TASK.task)
        assert task is not None and board.restored(task)
        wait_for("the restore's heartbeat", lambda: len(coordinator.statuses) >= 2, timeout_s=10)
        assert [v.phase for v in coordinator.statuses[1]] == [TaskPhase.RUNNING]
    finally:
        stopping.set()
        membership.stop()
