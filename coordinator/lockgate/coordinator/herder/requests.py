"""Mutating calls run once per `request_id`: a retry gets the first answer
(`domain/requests.py` has the rules and their limits; `store/request_store.py` keeps the
answers in SQL, so a retry at a new leader finds them too).

Two calls with the same id at once (a client that retried before the first answer came)
take turns on a lock of that id in this process: the second finds the first's answer.
Only the leader runs these calls, so one process's lock is enough.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator

from lockgate.coordinator.domain.errors import NotLeader
from lockgate.coordinator.domain.requests import REQUEST_RETENTION_MS, check_request_id, replay
from lockgate.coordinator.herder.lease_keeper import LeaseKeeper
from lockgate.coordinator.store.sql_store import SqlStore

_LOG = logging.getLogger(__name__)


class IdempotentCalls:
    """Runs a leader-only call at most once per request_id within the retention."""

    def __init__(self, *, store: SqlStore, lease: LeaseKeeper) -> None:
        self._store = store
        self._lease = lease
        self._guard = threading.Lock()
        self._in_progress: dict[str, tuple[threading.Lock, int]] = {}

    def once(
        self, *, request_id: str, method: str, request_hash: str, call: Callable[[], bytes]
    ) -> bytes:
        """The serialized answer of `call`, run now, or recorded when a call with this
        `request_id`, `method` and `request_hash` succeeded before. Leader-only.

        An empty `request_id` runs `call` without recording. InvalidArgument naming
        `request_id` if it is too long, or was used for another method or request.
        """
        if not request_id:
            return call()
        check_request_id(request_id)
        with self._turn(request_id):
            self._lease.require_fence()
            recorded = self._store.requests.find(
                request_id=request_id, retention_ms=REQUEST_RETENTION_MS
            )
            answer = replay(recorded, method=method, request_hash=request_hash)
            if answer is not None:
                _LOG.info("%s request %s answered again from its record", method, request_id)
                return answer
            response = call()
            try:
                self._lease.leader_call(
                    lambda f: self._store.requests.record(
                        fence=f,
                        request_id=request_id,
                        method=method,
                        request_hash=request_hash,
                        response=response,
                        retention_ms=REQUEST_RETENTION_MS,
                    )
                )
            except NotLeader:
                # The call itself succeeded under its fence: answer it. A retry of this id
                # (there is no reason for one) would run it again at the new leader.
                _LOG.warning(
                    "%s request %s done but not recorded: lost the lease", method, request_id
                )
            return response

    @contextlib.contextmanager
    def _turn(self, request_id: str) -> Iterator[None]:
        """Hold the lock of `request_id` (created on first use, dropped by its last user)."""
        with self._guard:
            lock, users = self._in_progress.get(request_id, (threading.Lock(), 0))
            self._in_progress[request_id] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._guard:
                lock, users = self._in_progress[request_id]
                if users == 1:
                    del self._in_progress[request_id]
                else:
                    self._in_progress[request_id] = (lock, users - 1)
