"""This executor's membership of the cluster: register, heartbeat, notice a lost session.

One thread: RegisterExecutor, then Heartbeat every ``heartbeat_interval_ms`` (the leader
may change both timings in any answer), and sooner when nudged (``nudge``: a task's state
changed, or the leader said the assignment did, NotifyAssignment), no sooner than
``NUDGE_MIN_GAP_S`` after the previous heartbeat: a new task starts, a restored one is
triggered, a round trip after the change, not up to an interval later. Every answer carries
the leader epoch, which is observed by the process's
:class:`~lockgate.executor.fencing.LeaderEpochFence` (a stale one is ignored), and the
assignment, handed to ``on_assignment``. The thread holds the last full assignment with its
version and presents the version in each heartbeat; an answer that says it is unchanged
carries no task, and the held one is handed on again.

The session is lost when the leader refuses a heartbeat (NOT_FOUND or
FAILED_PRECONDITION: it expired, or a newer registration of this id exists) or when no
heartbeat was answered for longer than the session timeout: the tasks already belong to
someone else, so ``on_session_lost`` stops them all, and the thread registers again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from lockgate.common.errors import StaleTokenError
from lockgate.common.model.ids import LeaderEpoch
from lockgate.executor.fencing import LeaderEpochFence
from lockgate.executor.runtime.coordinator import (
    CallFailure,
    CoordinatorCallError,
    CoordinatorClient,
)
from lockgate.executor.runtime.tasks import TaskView
from lockgate.executor.runtime.values import (
    Assignment,
    ExecutorSettings,
    LeaderStamp,
    MembershipReply,
    Registration,
)

_LOG = logging.getLogger(__name__)

#: A nudged heartbeat goes no sooner than this after the previous one (s): a burst of task
#: changes (many tasks restoring at once) costs the leader a few heartbeats, not one each.
NUDGE_MIN_GAP_S = 0.02


class Membership:
    """Registration and heartbeats of one executor process."""

    def __init__(
        self,
        settings: ExecutorSettings,
        *,
        client: CoordinatorClient,
        fence: LeaderEpochFence,
        stopping: threading.Event,
        statuses: Callable[[], list[TaskView]],
        on_assignment: Callable[[Sequence[Assignment]], None],
        on_session_lost: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        #: Replaced once by ``__main__`` when the bound address is known, before start.
        self.settings = settings
        self._client = client
        self._fence = fence
        self._stopping = stopping
        self._statuses = statuses
        self._on_assignment = on_assignment
        self._on_session_lost = on_session_lost
        self._clock = clock
        self._lock = threading.Lock()
        self._registration: Registration | None = None
        # The last full assignment received, with its version (0: none held).
        self._held: tuple[int, tuple[Assignment, ...]] = (0, ())
        self._heartbeat_interval_s = settings.heartbeat_interval_ms / 1000
        self._session_timeout_s = settings.session_timeout_ms / 1000
        self._last_heartbeat_ok = clock()
        self._nudged = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def registration(self) -> Registration | None:
        """The current registration, None until registered (or after the session was lost)."""
        with self._lock:
            return self._registration

    def start(self) -> None:
        """Start the membership thread (register, then heartbeat)."""
        self._thread = threading.Thread(target=self._loop, name="lockgate-membership", daemon=True)
        self._thread.start()

    def nudge(self) -> None:
        """A task's state changed: heartbeat now, not at the interval (module docstring)."""
        self._nudged.set()

    def stop(self) -> Registration | None:
        """Stop the thread (``stopping`` must be set); return and forget the registration."""
        self._nudged.set()  # out of its wait for the next heartbeat
        if self._thread is not None:
            self._thread.join(timeout=self.settings.rpc_timeout_s + 1)
        with self._lock:
            registration, self._registration = self._registration, None
        return registration

    def deregister(self, registration: Registration) -> None:
        """Leave the cluster cleanly; on failure the session simply expires."""
        try:
            self._client.deregister(
                executor_id=self.settings.executor_id,
                executor_generation=registration.executor_generation,
                timeout_s=self.settings.rpc_timeout_s,
            )
        except CoordinatorCallError as exc:
            _LOG.warning("deregistration failed (%s); the session will expire", exc.code)
            return
        _LOG.info(
            "deregistered executor %s generation %d",
            self.settings.executor_id,
            registration.executor_generation,
        )

    def _loop(self) -> None:
        while not self._stopping.is_set():
            if self.registration is None:
                if not self._register() and self._stopping.wait(1.0):
                    return
                continue
            self._heartbeat()
            gap = min(NUDGE_MIN_GAP_S, self._heartbeat_interval_s)
            if self._stopping.wait(gap):
                return
            self._nudged.wait(self._heartbeat_interval_s - gap)

    def _register(self) -> bool:
        settings = self.settings
        try:
            reply = self._client.register(settings, timeout_s=settings.rpc_timeout_s)
        except CoordinatorCallError as exc:
            _LOG.warning(
                "registration with the coordinator at %s failed: %s %s; retrying",
                ",".join(settings.coordinator_addresses),
                exc.code,
                exc.message,
            )
            return False
        if not self._observe_epoch(reply.leader, rpc="RegisterExecutorResponse"):
            return False
        with self._lock:
            self._registration = Registration(
                executor_generation=reply.executor_generation, session_id=reply.session_id
            )
            self._apply_timing(reply)
            self._last_heartbeat_ok = self._clock()
            self._held = (reply.assignment_version, reply.assignments)
        _LOG.info(
            "registered executor %s generation %d session %s with leader %s epoch %d",
            settings.executor_id,
            reply.executor_generation,
            reply.session_id,
            reply.leader.leader_id,
            reply.leader.epoch,
        )
        self._on_assignment(reply.assignments)
        return True

    def _apply_timing(self, reply: MembershipReply) -> None:
        if reply.heartbeat_interval_ms > 0:
            self._heartbeat_interval_s = reply.heartbeat_interval_ms / 1000
        if reply.session_timeout_ms > 0:
            self._session_timeout_s = reply.session_timeout_ms / 1000

    def _observe_epoch(self, leader: LeaderStamp, *, rpc: str) -> bool:
        if leader.epoch <= 0:
            return True
        try:
            if self._fence.observe(leader.epoch, leader_id=leader.leader_id, rpc=rpc):
                _LOG.info("new leader %s with epoch %d", leader.leader_id, leader.epoch)
        except StaleTokenError as exc:
            _LOG.warning(exc.log_line())
            return False
        return True

    def _heartbeat(self) -> None:
        registration = self.registration
        if registration is None:
            return
        highest, leader_id = self._fence.highest_seen
        with self._lock:
            held_version, held = self._held
        self._nudged.clear()  # before the statuses are read: a later change nudges again
        try:
            reply = self._client.heartbeat(
                executor_id=self.settings.executor_id,
                executor_generation=registration.executor_generation,
                statuses=self._statuses(),
                highest_leader_seen=LeaderStamp(LeaderEpoch(highest), leader_id),
                known_assignment_version=held_version,
                timeout_s=self.settings.rpc_timeout_s,
            )
        except CoordinatorCallError as exc:
            self._heartbeat_failed(exc)
            return
        if not self._observe_epoch(reply.leader, rpc="HeartbeatResponse"):
            return
        with self._lock:
            if self._registration != registration:
                return
            self._last_heartbeat_ok = self._clock()
            self._apply_timing(reply)
            if not reply.assignment_unchanged:
                self._held = (reply.assignment_version, reply.assignments)
                assignments = reply.assignments
            elif reply.assignment_version == held_version:
                assignments = held
            else:
                # "Unchanged" from another version than the one held: hold none, so the
                # next answer is in full, and change nothing until then.
                self._held = (0, ())
                return
        self._on_assignment(assignments)

    def _heartbeat_failed(self, exc: CoordinatorCallError) -> None:
        if exc.failure is CallFailure.SESSION_GONE:
            # Our session is gone (expired, or a newer registration of this id exists):
            # our tasks already belong to someone else.
            self._lose_session(f"heartbeat refused: {exc.code} {exc.message}")
            return
        silent_for = self._clock() - self._last_heartbeat_ok
        _LOG.warning(
            "heartbeat failed: %s %s (%.1fs since the last good one)",
            exc.code,
            exc.message,
            silent_for,
        )
        if silent_for > self._session_timeout_s:
            self._lose_session(
                f"no heartbeat answered for {silent_for:.1f}s, more than the session"
                f" timeout of {self._session_timeout_s:.1f}s"
            )

    def _lose_session(self, why: str) -> None:
        _LOG.warning(
            "session of executor %s lost (%s): stopping every task and registering again",
            self.settings.executor_id,
            why,
        )
        # Forget the registration first: from now on calls are answered UNAVAILABLE and
        # reports are not sent, while the tasks are stopped.
        with self._lock:
            self._registration = None
            self._held = (0, ())
        self._on_session_lost()


__all__ = ["Membership"]
