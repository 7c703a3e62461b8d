"""Task assignment: balanced, sticky and incremental, as a pure function.

`assign` keeps every task where it is unless balance requires moving it, so a joining
executor takes only its fair share from the others and a leaving executor's tasks are
spread without reshuffling the rest (Kafka Connect's incremental cooperative rebalancing
without its 5-minute default delay).

`plan_assignment` adds the grace period: an executor that stopped heartbeating keeps its
tasks, unassigned to anyone else, until `reassign_delay_ms` after it was declared dead, so
a short network blip or a slow restart does not move every task twice.

`counted_heartbeat_ms` keeps a leader's own outage from counting against executors: time
no leader could record heartbeats (a failover, a database outage) is not silence.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from lockgate.common.model.ids import ExecutorId, TaskId
from lockgate.coordinator.domain.errors import NotFound
from lockgate.coordinator.domain.pipelines import TaskRecord

DEFAULT_SESSION_TIMEOUT_MS = 10_000
DEFAULT_REASSIGN_DELAY_MS = 3_000


def assign(
    current: Mapping[ExecutorId, AbstractSet[TaskId]],
    live_executors: Iterable[ExecutorId],
    all_tasks: Iterable[TaskId],
) -> dict[ExecutorId, frozenset[TaskId]]:
    """Return the new assignment of `all_tasks` over `live_executors`.

    Guarantees, for the same inputs always the same output:
    - every task is assigned to exactly one live executor (none if there is no executor);
    - balanced: task counts of live executors differ by at most one;
    - sticky: the number of tasks that leave a live executor is the minimum any balanced
      assignment allows. Tasks on executors absent from `live_executors` and tasks no
      longer in `all_tasks` are dropped; new tasks go to the least loaded executors.
    Every live executor appears in the result, possibly with no task.
    """
    live = sorted(set(live_executors))
    tasks = set(all_tasks)
    if not live:
        return {}
    # Tasks each live executor may keep: still existing, and not claimed twice (a corrupt
    # input; the first executor in id order keeps it).
    kept: dict[ExecutorId, list[TaskId]] = {}
    claimed: set[TaskId] = set()
    for executor in live:
        mine = sorted((set(current.get(executor, ())) & tasks) - claimed)
        claimed.update(mine)
        kept[executor] = mine
    base, extra = divmod(len(tasks), len(live))
    # Give the `extra` larger capacities to the executors that already hold the most:
    # that maximises the tasks that stay (an exchange argument: swapping a +1 from a
    # larger holder to a smaller one never lets more tasks stay).
    by_load = sorted(live, key=lambda e: (-len(kept[e]), e))
    capacity = {e: base + (1 if i < extra else 0) for i, e in enumerate(by_load)}
    result: dict[ExecutorId, list[TaskId]] = {}
    pool: list[TaskId] = sorted(tasks - claimed)
    for executor in live:
        keep = kept[executor][: capacity[executor]]
        pool.extend(kept[executor][capacity[executor] :])
        result[executor] = keep
    pool.sort()
    for executor in live:
        need = capacity[executor] - len(result[executor])
        if need > 0:
            result[executor].extend(pool[:need])
            del pool[:need]
    assert not pool, "capacities add up to the task count"
    return {e: frozenset(ts) for e, ts in result.items()}


class ExecutorLiveness(enum.StrEnum):
    """An executor as the leader sees it from its heartbeats."""

    ALIVE = "ALIVE"
    """Heartbeat within the session timeout."""
    DEAD_IN_GRACE = "DEAD_IN_GRACE"
    """Session expired, but its tasks stay put until the reassignment delay has passed."""
    DEAD = "DEAD"
    """Session expired and the delay passed: its tasks go to others."""


def executor_liveness(
    *,
    last_heartbeat_ms: int,
    now_ms: int,
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
    reassign_delay_ms: int = DEFAULT_REASSIGN_DELAY_MS,
) -> ExecutorLiveness:
    """Classify an executor from its last heartbeat; both times are the database's clock."""
    silent_ms = now_ms - last_heartbeat_ms
    if silent_ms <= session_timeout_ms:
        return ExecutorLiveness.ALIVE
    if silent_ms <= session_timeout_ms + reassign_delay_ms:
        return ExecutorLiveness.DEAD_IN_GRACE
    return ExecutorLiveness.DEAD


def liveness_changes_at_ms(
    *,
    last_heartbeat_ms: int,
    now_ms: int,
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
    reassign_delay_ms: int = DEFAULT_REASSIGN_DELAY_MS,
) -> int | None:
    """The database time at which `executor_liveness` next changes without a heartbeat:
    an ALIVE session expires, a grace period ends; None once DEAD."""
    state = executor_liveness(
        last_heartbeat_ms=last_heartbeat_ms,
        now_ms=now_ms,
        session_timeout_ms=session_timeout_ms,
        reassign_delay_ms=reassign_delay_ms,
    )
    if state is ExecutorLiveness.ALIVE:
        return last_heartbeat_ms + session_timeout_ms + 1
    if state is ExecutorLiveness.DEAD_IN_GRACE:
        return last_heartbeat_ms + session_timeout_ms + reassign_delay_ms + 1
    return None


@dataclass(frozen=True)
class LeaderGap:
    """A stretch of database time during which no leader recorded heartbeats: a failover,
    or this leader cut from its database (it steps down at its first failed lease attempt
    and starts a new term when one succeeds again)."""

    started_ms: int
    """The last time a leader is known to have held the database: this replica's last
    successful lease attempt as leader, or the previous holder's last renewal."""
    ended_ms: int
    """When the current term started (the database's clock)."""


def counted_heartbeat_ms(
    *, last_heartbeat_ms: int, session_timeout_ms: int, gap: LeaderGap | None
) -> int:
    """When an executor's silence starts counting against its session.

    Its last recorded heartbeat, except that the time of a `gap` does not count: a session
    still alive when the gap started gets a full session timeout from the start of the
    current term, as Kafka's group coordinator gives every member a fresh session when it
    loads a group after failover. A session that had expired before the gap stays expired
    (its tasks may have moved already; reviving it would hand them back to the dead).
    """
    if gap is None or last_heartbeat_ms >= gap.ended_ms:
        return last_heartbeat_ms
    if last_heartbeat_ms + session_timeout_ms < gap.started_ms:
        return last_heartbeat_ms
    return gap.ended_ms


@dataclass(frozen=True)
class AssignmentPlan:
    """What the leader should write after one rebalance decision."""

    assignment: dict[ExecutorId, frozenset[TaskId]]
    """Every assigned task's executor, grace-period executors' tasks included. Which tasks
    it moves (their generation grows) is `assignment_changes`'; when a grace period ends and
    the plan may change, the herder's `next_liveness_change_at_ms`."""


def plan_assignment(
    *,
    current: Mapping[ExecutorId, AbstractSet[TaskId]],
    last_heartbeats_ms: Mapping[ExecutorId, int],
    all_tasks: Iterable[TaskId],
    now_ms: int,
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
    reassign_delay_ms: int = DEFAULT_REASSIGN_DELAY_MS,
) -> AssignmentPlan:
    """Decide the next assignment from heartbeats, honouring the reassignment delay.

    Executors in `current` but absent from `last_heartbeats_ms` (deregistered) are treated
    as DEAD. A DEAD_IN_GRACE executor keeps the tasks it has and gets no new ones.
    """
    tasks = set(all_tasks)
    alive: list[ExecutorId] = []
    held: dict[ExecutorId, frozenset[TaskId]] = {}
    for executor, heartbeat in last_heartbeats_ms.items():
        state = executor_liveness(
            last_heartbeat_ms=heartbeat,
            now_ms=now_ms,
            session_timeout_ms=session_timeout_ms,
            reassign_delay_ms=reassign_delay_ms,
        )
        if state is ExecutorLiveness.ALIVE:
            alive.append(executor)
        elif state is ExecutorLiveness.DEAD_IN_GRACE:
            held[executor] = frozenset(set(current.get(executor, ())) & tasks)
    held_tasks = {t for ts in held.values() for t in ts}
    return AssignmentPlan(assignment={**assign(current, alive, tasks - held_tasks), **held})


def assignment_changes(
    tasks: Iterable[TaskRecord], assignment: Mapping[ExecutorId, AbstractSet[TaskId]]
) -> list[TaskRecord]:
    """The tasks whose executor a new assignment changes (tasks absent from it lose their
    executor); NotFound if it names a task that does not exist. Each one changed gets a new
    generation and UNASSIGNED, and the TRIGGERED checkpoints it is in abort."""
    owner = {t: e for e, ts in assignment.items() for t in ts}
    all_tasks = list(tasks)
    unknown = sorted(set(owner) - {t.task_id for t in all_tasks})
    if unknown:
        raise NotFound(
            f"cannot assign unknown tasks {unknown}; list the tasks again",
            resource_type="task",
            resource_name=unknown[0],
        )
    return [t for t in all_tasks if owner.get(t.task_id) != t.executor_id]
