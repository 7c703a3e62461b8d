"""Executor membership: sessions and the generation check that refuses zombies.

Each `register` of an executor id starts a new session and grows its generation by one;
every later report (heartbeat, task status, pre-commit, commit ack) carries the generation
it registered with. A report with an older generation comes from a process that the
cluster already replaced (a zombie: paused, partitioned, or a previous incarnation) and is
refused, so it cannot overwrite what its successor reported.
"""

from __future__ import annotations

from dataclasses import dataclass

from lockgate.coordinator.domain.errors import StaleGeneration
from lockgate.coordinator.domain.ids import ExecutorId, Generation


@dataclass(frozen=True)
class ExecutorRecord:
    """An executor as the store knows it; times are the database's clock."""

    executor_id: ExecutorId
    address: str
    generation: Generation
    registered_at_ms: int
    last_heartbeat_ms: int


def check_generation(*, what: str, reported: Generation, current: Generation) -> None:
    """Refuse a report whose generation is not the current one (StaleGeneration)."""
    if reported != current:
        raise StaleGeneration(
            f"{what} reported generation {reported} but the current generation is {current}: "
            "this process was replaced; register again to get a new generation"
        )
