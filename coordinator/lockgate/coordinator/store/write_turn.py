"""The turn a replica's threads take at writing, with the lease's renewal first in line.

A replica's threads write one at a time (`engine.Database.transaction`): SQLite's busy
handler retries a refused `BEGIN IMMEDIATE` only after sleeping, and on PostgreSQL the row
locks would queue them anyway. A plain lock lets whichever waiter the scheduler wakes go
next, so under load (heartbeats, reports, the leader's pass, twenty gRPC threads queued)
the lease's renewal could wait behind any number of other writes and the leader lose a lease
it was only too busy to renew, and then pay for a new term (every executor registering
again). Here an urgent waiter (the renewal) goes ahead of every other waiter: it waits at
most for the one write in progress.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class WriteTurn:
    """A re-entrant lock whose urgent waiters go before the others."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._urgent = threading.Condition(self._lock)
        self._normal = threading.Condition(self._lock)
        self._owner: int | None = None
        self._depth = 0
        self._urgent_waiting = 0

    @contextlib.contextmanager
    def held(self, *, urgent: bool = False) -> Iterator[None]:
        """Hold the turn for the block (re-entrant: a thread holding it may take it again);
        `urgent` goes before every waiter that is not."""
        me = threading.get_ident()
        with self._lock:
            if self._owner == me:
                self._depth += 1
            else:
                self._wait_for_turn(urgent=urgent)
                self._owner = me
                self._depth = 1
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0:
                    self._owner = None
                    self._pass_on()

    def _wait_for_turn(self, *, urgent: bool) -> None:
        """With the lock held: wait until the turn is free (and, for a waiter that is not
        urgent, no urgent one is waiting)."""
        if urgent:
            self._urgent_waiting += 1
        try:
            while self._owner is not None or (not urgent and self._urgent_waiting):
                (self._urgent if urgent else self._normal).wait()
        except BaseException:
            # Interrupted, perhaps after being woken to take a free turn: wake another.
            if urgent:
                self._urgent_waiting -= 1
            if self._owner is None:
                self._pass_on()
            raise
        if urgent:
            self._urgent_waiting -= 1

    def _pass_on(self) -> None:
        """With the lock held and the turn free: wake one waiter, an urgent one if any."""
        (self._urgent if self._urgent_waiting else self._normal).notify()
