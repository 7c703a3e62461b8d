"""The leader's calls to executors run on a bounded pool of threads, one job per key at a
time, so an executor that stops answering (paused, cut off) holds up only the jobs that
call it, each for at most its call deadline, and never the work loop or other pipelines.

The work loop keys each job by what must stay in order: a pipeline's commits (checkpoint
N+1's commit waits for N's ack), its aborts, its trigger. A key whose job still runs is
skipped by the loop and taken again on a later pass (`busy`); a caller that must know the
outcome (a pipeline being deleted, a test) waits for the key (`run(..., wait=True)`).
A job that ends wakes the work loop (`on_done`) unless it was started with `wake=False`
(a trigger or a notice, whose end leaves the loop nothing new to do) and no pass found its
key busy meanwhile: a pass that skipped a pipeline for its job must look again at its end.

Known limit: with more executors stuck than `workers`, jobs queue behind their calls (each
ends at its deadline); the default leaves room for a few.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from lockgate.coordinator.domain.errors import FencedError, NotLeader
from lockgate.coordinator.herder.executors import LeaderEpochRefused

_LOG = logging.getLogger(__name__)

#: Threads calling executors at once.
DEFAULT_CALL_WORKERS = 32
_MAX_BACKOFF_S = 2.0


class CallPool:
    """Jobs that call executors, at most one per key at a time. Thread-safe."""

    def __init__(
        self,
        *,
        on_done: Callable[[], None],
        on_retry: Callable[[float], None] = lambda at_s: None,
        workers: int = DEFAULT_CALL_WORKERS,
    ) -> None:
        """`on_retry`: told the `time.monotonic` time of each retry `backoff` schedules."""
        self._on_done = on_done
        self.backoff = Backoff(on_retry=on_retry)
        """The retry schedule of the jobs' calls (`CheckpointDriver`'s commits and aborts)."""
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="leader-calls")
        self._changed = threading.Condition()
        self._running: set[Hashable] = set()
        # Keys a caller found busy: their jobs wake the loop when they end, whatever `wake`.
        self._waited_on: set[Hashable] = set()

    def busy(self, key: Hashable) -> bool:
        """Whether a job of `key` is queued or running (its end then wakes the loop)."""
        with self._changed:
            if key in self._running:
                self._waited_on.add(key)
                return True
            return False

    def run(self, key: Hashable, job: Callable[[], None], *, wait: bool, wake: bool = True) -> bool:
        """Run `job` on the pool under `key`. Without `wait`: False (and nothing runs) if
        a job of `key` is still running (its end then wakes the loop). With `wait`: wait for
        that one first, then for this one to end. `wake`: whether this job's end wakes the
        loop even if no caller found its key busy."""
        with self._changed:
            if wait:
                self._changed.wait_for(lambda: key not in self._running)
            elif key in self._running:
                self._waited_on.add(key)
                return False
            self._running.add(key)
        self._pool.submit(self._job, key, job, wake)
        if wait:
            with self._changed:
                self._changed.wait_for(lambda: key not in self._running)
        return True

    def wait_idle(self, timeout_s: float | None = None) -> bool:
        """Wait until no job runs; False if `timeout_s` passed first."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._running, timeout=timeout_s)

    def close(self) -> None:
        """Stop taking jobs; the running ones end at their call deadlines."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._changed:
            self._running.clear()
            self._changed.notify_all()

    def _job(self, key: Hashable, job: Callable[[], None], wake: bool) -> None:
        try:
            job()
        except (FencedError, NotLeader, LeaderEpochRefused) as exc:
            # The term ended under us; the lease keeper will see it on its next try.
            _LOG.warning("leader call %s stopped: %s", key, exc)
        except Exception:
            _LOG.exception("leader call %s failed; retrying on a later pass", key)
            wake = True
        finally:
            with self._changed:
                self._running.discard(key)
                wake = wake or key in self._waited_on
                self._waited_on.discard(key)
                self._changed.notify_all()
            if wake:
                self._on_done()


@dataclass
class Backoff:
    """Per-key retry schedule of the jobs (a commit, an abort): doubling delays from 0.1 s
    up to `_MAX_BACKOFF_S`. Thread-safe."""

    next_at: dict[object, float] = field(default_factory=dict)
    delay: dict[object, float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def due(self, key: object) -> bool:
        with self.lock:
            return time.monotonic() >= self.next_at.get(key, 0.0)

    on_retry: Callable[[float], None] = lambda at_s: None
    """Told when each retry falls due: the work loop runs a pass then."""

    def failed(self, key: object) -> None:
        with self.lock:
            delay = min(_MAX_BACKOFF_S, self.delay.get(key, 0.05) * 2)
            self.delay[key] = delay
            at_s = self.next_at[key] = time.monotonic() + delay
        self.on_retry(at_s)

    def next_in_s(self) -> float | None:
        """How long until the first retry still to come is due (s); None if none is."""
        with self.lock:
            now = time.monotonic()
            later = [at for at in self.next_at.values() if at > now]
        return min(later) - now if later else None

    def succeeded(self, key: object) -> None:
        with self.lock:
            self.next_at.pop(key, None)
            self.delay.pop(key, None)

    def attempt(self, key: object, call: Callable[[], bool]) -> bool | None:
        """Run `call` (True: it succeeded) if `key` is due, and schedule its next try:
        none after a success, a doubled delay after a failure. None if not due."""
        if not self.due(key):
            return None
        done = call()
        if done:
            self.succeeded(key)
        else:
            self.failed(key)
        return done
