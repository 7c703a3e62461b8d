"""The lease keeper: this replica's role and fence, and the one leader check.

A thread acquires or renews the `leader_lease` row every `lease_ms / 4` (compare-and-set in
SQL, expiry from the database's clock), then writes this replica's own `coordinators` row
(its address, last seen by the database's clock: `domain/replicas.py`); both writes go
before the replica's other waiting writes (`store/write_turn.py`). It keeps this
replica's view of its role and of the current term's `Fence`. Every leader-only action of
the herder goes through `require_fence` (may I act?) and `leader_call` (write with the
fence; a lost term steps down): there is no other leader check.

Fencing rules and known races (see also `domain/lease.py`):
- The local view of leadership is trusted only until `local_deadline` (send time of the
  acquiring statement + lease - safety margin); after it `require_fence` refuses, so a
  replica paused past its lease (SIGSTOP, GC) wakes up as a follower and writes nothing.
  If it was paused *inside* a write, the SQL fence check refuses the write
  (`FencedError`), and this replica steps down at once.
- An RPC sent by an old leader just before it was deposed may still reach an executor
  that has not seen the new epoch: harmless, because its SQL decisions cannot become
  COMPLETE, and commit/abort of a handle is idempotent.
- A restarted process of the same replica id is a new incarnation: it never renews the
  term of the process before it (which may be paused, not dead).
- A failed attempt (the database unreachable) ends the term locally; the next successful
  one starts a new term (same epoch if the lease had not run out). Each new term notes the
  gap since a leader last held the database (`leader_gap`): executors' sessions do not
  expire for time no leader could record their heartbeats.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import TypeVar

from lockgate.common.metrics import LEADER_FAILOVERS, LEASE_RENEWALS, Instruments
from lockgate.coordinator.domain.assignment import LeaderGap
from lockgate.coordinator.domain.errors import FencedError, NotLeader, Unavailable
from lockgate.coordinator.domain.lease import Fence, LeaseRecord, local_deadline, next_role
from lockgate.coordinator.domain.replicas import ReplicaView, replica_views
from lockgate.coordinator.domain.states import LeaseRole
from lockgate.coordinator.herder.settings import CoordinatorSettings
from lockgate.coordinator.store.sql_store import SqlStore

_LOG = logging.getLogger(__name__)
_R = TypeVar("_R")


class LeaseKeeper:
    """Acquires and renews the lease, holds this replica's role and fence, and calls
    `on_became_leader` when a new term of this replica starts (first acquisition, or
    re-acquisition after its lease ran out: the epoch changed)."""

    def __init__(
        self,
        *,
        store: SqlStore,
        settings: CoordinatorSettings,
        on_became_leader: Callable[[Fence], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        instruments: Instruments | None = None,
    ) -> None:
        self._store = store
        self._instruments = instruments or Instruments.disabled()
        self._settings = settings
        self._on_became_leader = on_became_leader
        self._monotonic = monotonic
        # This process's incarnation: a restarted replica of the same id never renews the
        # term of the process before it (which may be paused, not dead).
        self._incarnation = uuid.uuid4().hex
        self._role = LeaseRole.FOLLOWER
        self._fence: Fence | None = None
        self._trusted_until = 0.0
        self._last_lease: LeaseRecord | None = None
        self._term: Fence | None = None
        self._gap: LeaderGap | None = None
        self._last_led_ms: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"lease-{settings.coordinator_id}", daemon=True
        )

    # ------------------------------------------------------------------ the thread

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and wait for it."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        # Attempts start every `lease_poll_s` whatever one took (a slow one is followed at
        # once): the time between two renewals is what the lease must outlast.
        while not self._stop.is_set():
            started = self._monotonic()
            self.attempt()
            self._stop.wait(max(0.0, started + self._settings.lease_poll_s - self._monotonic()))

    def attempt(self) -> None:
        """One acquire-or-renew attempt, then this replica's presence row; announces a new
        term."""
        led = self._term is not None
        try:
            lease: LeaseRecord | None = self.campaign()
        except Unavailable as exc:
            # The database is down, restarting or busy: expected, so no traceback.
            _LOG.warning("lease attempt failed; not leading until it succeeds: %s", exc)
            lease = None
        except Exception:
            _LOG.warning("lease attempt failed; not leading until it succeeds", exc_info=True)
            lease = None
        if lease is not None:
            self._record_presence()
        fence = self.current_fence()
        if led or fence is not None:
            outcome = "error" if lease is None else "renewed" if fence is not None else "lost"
            self._instruments.add(LEASE_RENEWALS, 1, {"outcome": outcome})
        if fence is not None and fence != self._term:
            self._instruments.add(LEADER_FAILOVERS, 1, {})
            _LOG.info(
                "coordinator %s became leader with epoch %s",
                self._settings.coordinator_id,
                fence.leader_epoch,
            )
            self._term = fence
            if self._on_became_leader is not None:
                self._on_became_leader(fence)
        elif fence is None and self._term is not None:
            _LOG.warning(
                "coordinator %s lost the lease (holder now %s)",
                self._settings.coordinator_id,
                lease.holder if lease else "unknown",
            )
            self._term = None

    def _record_presence(self) -> None:
        """Write this replica's row (address, database clock): how the other replicas know
        it is there. A failure only makes it look missing; its role does not depend on it."""
        try:
            self._store.replicas.record_replica(
                coordinator_id=self._settings.coordinator_id, address=self._settings.advertise
            )
        except Exception:
            _LOG.warning("could not record this replica's presence", exc_info=True)

    # ------------------------------------------------------------------ role and fence

    @property
    def last_lease(self) -> LeaseRecord | None:
        """The lease row as this replica's last successful attempt read it."""
        return self._last_lease

    def campaign(self) -> LeaseRecord:
        """Try to acquire or renew the lease once; update this replica's role.

        A database error makes a leader step down (it can no longer prove it leads) and
        is re-raised.
        """
        sent_at = self._monotonic()
        try:
            lease = self._store.lease.try_acquire_lease(
                holder=self._settings.coordinator_id,
                holder_address=self._settings.advertise,
                lease_ms=self._settings.lease_ms,
                incarnation=self._incarnation,
            )
        except Exception:
            self._become(None, sent_at)
            raise
        self._become(lease, sent_at)
        return lease

    def _become(self, lease: LeaseRecord | None, sent_at: float) -> None:
        role = next_role(
            current=self._role,
            me=self._settings.coordinator_id,
            lease=lease,
            incarnation=self._incarnation,
        )
        if lease is not None:
            self._last_lease = lease
            self._note_gap(lease, role)
        self._role = role
        if self._role is LeaseRole.LEADER and lease is not None:
            self._fence = lease.fence
            self._trusted_until = local_deadline(
                sent_at_monotonic_s=sent_at,
                lease_ms=self._settings.lease_ms,
                safety_ms=self._settings.lease_safety_ms,
            )
        else:
            self._fence = None
            self._trusted_until = 0.0

    def _note_gap(self, lease: LeaseRecord, role: LeaseRole) -> None:
        """Before a new term of this replica begins (a failover, or the lease regained
        after a failed attempt), note the gap since a leader last held the database; then
        remember when one last did (this replica leading, or the holder's last renewal)."""
        leads = role is LeaseRole.LEADER
        if leads and self.current_fence() != lease.fence:
            self._gap = (
                LeaderGap(started_ms=self._last_led_ms, ended_ms=lease.db_now_ms)
                if self._last_led_ms is not None
                else None
            )
        led_at = (
            lease.db_now_ms
            if leads
            else lease.expires_at_ms - self._settings.lease_ms
            if lease.is_held
            else None
        )
        if led_at is not None:
            self._last_led_ms = max(led_at, self._last_led_ms or led_at)

    def monotonic(self) -> float:
        """This replica's monotonic clock (seconds), the one its lease is timed by: the
        leader's other periodic duties read it too (a test injects one for all)."""
        return self._monotonic()

    @property
    def leader_gap(self) -> LeaderGap | None:
        """While leading: the gap before this term, during which no leader recorded
        heartbeats (`domain.assignment.counted_heartbeat_ms`); None on a follower, or if no
        leader was ever seen before this term."""
        return self._gap if self.current_fence() is not None else None

    @property
    def role(self) -> LeaseRole:
        """LEADER while this replica's last lease attempt won and has not run out locally."""
        if self._role is LeaseRole.LEADER and self._monotonic() >= self._trusted_until:
            return LeaseRole.FOLLOWER
        return self._role

    def current_fence(self) -> Fence | None:
        """The current term's fence, or None on a follower (or a leader past its deadline)."""
        if self._fence is None or self.role is not LeaseRole.LEADER:
            return None
        return self._fence

    def require_fence(self) -> Fence:
        """The current term's fence; on a follower, NotLeader naming the leader's address
        as the lease row says now (this replica's own copy may be a paused term's)."""
        fence = self.current_fence()
        if fence is not None:
            return fence
        lease = self._last_lease
        address = lease.holder_address if lease is not None and lease.is_held else None
        if address and address != self._settings.advertise:
            raise NotLeader(leader_address=address)
        try:
            lease = self._store.lease.read_lease()
        except Exception:
            raise NotLeader(leader_address=None) from None
        held_by_other = lease.is_held and lease.holder != self._settings.coordinator_id
        raise NotLeader(leader_address=lease.holder_address if held_by_other else None)

    def leader_call(self, write: Callable[[Fence], _R], *, term: Fence | None = None) -> _R:
        """Run a leader-only write with the current fence (or `term`, the fence of the pass
        that decided it: a write decided in an ended term is refused by SQL).

        NotLeader on a follower; a lost term (FencedError, nothing written) steps this
        replica down and becomes NotLeader too.
        """
        current = self.require_fence()
        fence = term if term is not None else current
        try:
            return write(fence)
        except FencedError as exc:
            if fence == self._fence:
                self._become(None, self._monotonic())
            raise NotLeader(leader_address=exc.leader_address, message=exc.message) from None

    def read_lease(self) -> LeaseRecord:
        """Who leads now, read from the store (any replica may call it)."""
        return self._store.lease.read_lease()

    def replicas(self) -> tuple[list[ReplicaView], LeaseRecord]:
        """Every coordinator replica with its role and liveness, and the lease they were
        judged against (one snapshot); any replica may call it."""
        records, lease = self._store.replicas.list_replicas()
        return replica_views(records, lease, lease_ms=self._settings.lease_ms), lease

    def resign(self) -> None:
        """Release the lease if this replica holds it (graceful shutdown)."""
        if self._fence is not None:
            # FencedError: someone else leads already, there is nothing to give up.
            with contextlib.suppress(FencedError):
                self._store.lease.release_lease(fence=self._fence)
        self._become(None, self._monotonic())


class WhileLeading:
    """A thread of the leader's own: `work(fence)` every `every_s()` seconds (asked anew
    each time) while this replica leads, and nothing while it follows. `work` keeps its
    own errors: one that escapes ends the thread."""

    def __init__(
        self,
        *,
        name: str,
        lease: LeaseKeeper,
        work: Callable[[Fence], None],
        every_s: Callable[[], float],
    ) -> None:
        self._lease = lease
        self._work = work
        self._every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (a `work` under way ends first)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self._every_s()):
            fence = self._lease.current_fence()
            if fence is not None:
                self._work(fence)
