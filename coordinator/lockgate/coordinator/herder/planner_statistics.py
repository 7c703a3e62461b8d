"""The leader's thread that keeps PostgreSQL's planner statistics current
(`store/statistics.py`: why, and the rule)."""

from __future__ import annotations

import logging

from lockgate.coordinator.domain.lease import Fence
from lockgate.coordinator.herder.lease_keeper import LeaseKeeper, WhileLeading
from lockgate.coordinator.store.sql_store import SqlStore

_LOG = logging.getLogger(__name__)

#: Seconds between two looks at the tables' change counters (PostgreSQL publishes a
#: session's counts at most once a second, and an idle one's within some seconds).
STATISTICS_CHECK_S = 5.0


class PlannerStatistics:
    """Every `STATISTICS_CHECK_S`, while this replica leads, analyzes the tables that
    grew or shrank enough since their last analysis (on PostgreSQL; nothing on SQLite)."""

    def __init__(self, *, store: SqlStore, lease: LeaseKeeper) -> None:
        self._store = store
        self._thread = WhileLeading(
            name="planner-statistics",
            lease=lease,
            work=self.refresh,
            every_s=lambda: STATISTICS_CHECK_S,
        )

    def start(self) -> None:
        """Start looking, on PostgreSQL only."""
        if self._store.engine.dialect.name == "postgresql":
            self._thread.start()

    def stop(self) -> None:
        """Stop the thread (an analysis under way ends first)."""
        self._thread.stop()

    def refresh(self, _fence: Fence) -> None:
        """Analyze the tables that need it now. Never raises: a database down or slow is
        tried again at the next look."""
        try:
            analyzed = self._store.refresh_statistics()
        except Exception as exc:
            _LOG.warning("planner statistics not refreshed: %s", exc)
            return
        if analyzed:
            _LOG.debug("analyzed %s", ", ".join(analyzed))
