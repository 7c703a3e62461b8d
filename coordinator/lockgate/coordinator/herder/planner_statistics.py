"""The leader's thread that keeps PostgreSQL's planner statistics current
(`store/statistics.py`: why, and the rule)."""

from __future__ import annotations

import logging
import threading

from lockgate.coordinator.herder.lease_keeper import LeaseKeeper
from lockgate.coordinator.store.sql_store import SqlStore

_LOG = logging.getLogger(__name__)

#: Seconds between two looks at the tables' change counters. PostgreSQL's own statistics
#: collector publishes a session's counts within about a second of its commit.
STATISTICS_CHECK_S = 5.0


class PlannerStatistics:
    """Every `STATISTICS_CHECK_S`, while this replica leads, analyzes the tables that
    changed enough since their last analysis (on PostgreSQL; nothing on SQLite)."""

    def __init__(
        self, *, store: SqlStore, lease: LeaseKeeper, every_s: float = STATISTICS_CHECK_S
    ) -> None:
        self._store = store
        self._lease = lease
        self._every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="planner-statistics", daemon=True)

    def start(self) -> None:
        """Start looking, on PostgreSQL only."""
        if self._store.engine.dialect.name == "postgresql":
            self._thread.start()

    def stop(self) -> None:
        """Stop the thread (an analysis under way ends first)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self._every_s):
            if self._lease.current_fence() is None:
                continue
            try:
                analyzed = self._store.refresh_statistics()
            except Exception as exc:  # the database down or slow: the next look tries again
                _LOG.warning("planner statistics not refreshed: %s", exc)
                continue
            if analyzed:
                _LOG.debug("analyzed %s", ", ".join(analyzed))
