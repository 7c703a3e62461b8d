"""How one coordinator replica behaves: the durations its herder runs on."""

from __future__ import annotations

from dataclasses import dataclass

from lockgate.common.model.ids import CoordinatorId
from lockgate.coordinator.domain.assignment import (
    DEFAULT_REASSIGN_DELAY_MS,
    DEFAULT_SESSION_TIMEOUT_MS,
)
from lockgate.coordinator.domain.history import DEFAULT_CHECKPOINT_HISTORY
from lockgate.coordinator.domain.transaction_timeout import RecoveryTime

DEFAULT_HEARTBEAT_INTERVAL_MS = 1_000
DEFAULT_TICK_MS = 1000


@dataclass(frozen=True)
class CoordinatorSettings:
    """How one coordinator replica behaves; every duration in milliseconds."""

    coordinator_id: CoordinatorId
    advertise: str
    """host:port clients and followers' redirects use to reach this replica."""
    lease_ms: int = 3_000
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS
    reassign_delay_ms: int = DEFAULT_REASSIGN_DELAY_MS
    tick_ms: int = DEFAULT_TICK_MS
    """Longest sleep of the work loop between passes, a safety net: it wakes sooner on
    reports and changes, and when something falls due (`Herder.next_pass_in_ms`)."""
    checkpoint_history: int = DEFAULT_CHECKPOINT_HISTORY
    """Final checkpoints kept per pipeline (`domain/history.py`)."""

    @property
    def lease_safety_ms(self) -> int:
        """How much earlier than the database's expiry the leader stops trusting its lease."""
        return max(50, self.lease_ms // 5)

    @property
    def lease_poll_s(self) -> float:
        """Time between two lease attempts (renewal or acquisition)."""
        return max(0.02, self.lease_ms / 4 / 1000.0)

    @property
    def recovery_time(self) -> RecoveryTime:
        """The durations a COMPLETE checkpoint's commit may wait for (the timeout guard)."""
        return RecoveryTime(
            session_timeout_ms=self.session_timeout_ms,
            reassign_delay_ms=self.reassign_delay_ms,
            lease_ms=self.lease_ms,
        )
