"""The `Herder`: the coordinator's leader (Kafka Connect's DistributedHerder), composing
the lease keeper, membership, pipelines, the checkpoint driver and executors' reports,
and running the work loop.

Two threads per replica do the work:
- the `LeaseKeeper` acquires or renews the lease row every `lease_ms / 4` and keeps this
  replica's role and fence;
- the work loop (its checkpoint duties are in `checkpoints.py`), which does nothing on a
  follower and, on the leader: recovery when it becomes leader (abort every TRIGGERED
  checkpoint, then re-commit every COMPLETE-not-COMMITTED one in creation order and
  abort what never became COMPLETE), then on every pass: rebalance (expire dead
  executors after the session timeout, move their tasks after the reassignment delay;
  planned only when membership or the pipelines changed, `membership.py`), abort
  timed-out checkpoints, send aborts, send commits (retried until acked, then COMMITTED),
  trigger each RUNNING pipeline's next checkpoint on its interval (reading only the due
  ones, `trigger_schedule.py`), and end the trace of each checkpoint decided since
  (`traces.py`). A pass's cost follows what changed and what is due, not the cluster.
  Its calls to executors (trigger, commit, abort) run on the call pool (`call_pool.py`),
  never in the pass. The loop runs a pass when woken (a report COMPLETE, a commit acked,
  an executor or pipeline changed, a retry failed) and when the first thing to fall due
  by time alone does (`next_pass_in_ms`: a trigger, a checkpoint's timeout, a session's
  expiry or grace, a retry), and at least every `tick_ms` (1 s) as a safety net: a
  blind 100 ms tick was most of the passes of a checkpoint in the round-trip bench,
  and all of an idle leader's.
A third thread measures the pipelines' lag every few seconds for the lag gauge
(`progress.py`), on the leader only.

Every write is leader-only and goes through `LeaseKeeper.leader_call` (the one leader
check): it takes the current term's `Fence` just before the write (or the fence of the
pass that decided it), and the store refuses the write if that term is over. Every RPC to
an executor carries the same fence's epoch. The fencing rules and known races are written
in `lease_keeper.py` (the lease) and `checkpoints.py` (the checkpoint protocol).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from lockgate.common.failpoints import Failpoints
from lockgate.common.kafka_resume_clients import RESUME_CLIENTS
from lockgate.common.metrics import Instruments
from lockgate.coordinator.domain.errors import FencedError, NotLeader, Unavailable
from lockgate.coordinator.domain.lease import Fence
from lockgate.coordinator.herder.assignment_notices import AssignmentNotices
from lockgate.coordinator.herder.call_pool import CallPool
from lockgate.coordinator.herder.checkpoints import CheckpointDriver
from lockgate.coordinator.herder.executors import ExecutorClient, LeaderEpochRefused
from lockgate.coordinator.herder.lease_keeper import LeaseKeeper
from lockgate.coordinator.herder.membership import Membership
from lockgate.coordinator.herder.outcomes import CheckpointOutcomes
from lockgate.coordinator.herder.pipelines import Pipelines
from lockgate.coordinator.herder.planner_statistics import PlannerStatistics
from lockgate.coordinator.herder.progress import Progress
from lockgate.coordinator.herder.reports import Reports
from lockgate.coordinator.herder.requests import IdempotentCalls
from lockgate.coordinator.herder.settings import CoordinatorSettings
from lockgate.coordinator.herder.traces import CheckpointTraces
from lockgate.coordinator.store.kafka_topics import KafkaTopics
from lockgate.coordinator.store.sql_store import ClusterView, SqlStore

_LOG = logging.getLogger(__name__)

RETRY_PASS_S = 0.1
"""How soon the loop tries again after a pass that failed (the database busy or down)."""


class Herder:
    """One replica's leader: its parts, and the work loop (see the module docstring).

    `membership`, `pipelines`, `checkpoints`, `reports` and `requests` (mutating calls
    run once per request_id) are what the api calls; their writes are
    leader-only (NotLeader on a follower: UNAVAILABLE with the leader's address, as the
    lease row says now).
    """

    _woken = False
    """Whether a pass was asked for now (`wake`) since the last one started."""
    _pass_at: float | None = None
    """The `time.monotonic` time a pass was asked for by (`pass_by`), if any."""

    def __init__(
        self,
        *,
        store: SqlStore,
        settings: CoordinatorSettings,
        executor_client: ExecutorClient | None = None,
        topics: KafkaTopics | None = None,
        failpoints: Failpoints | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        instruments: Instruments | None = None,
        traces: CheckpointTraces | None = None,
    ) -> None:
        instruments = instruments or Instruments.disabled()
        outcomes, topics = CheckpointOutcomes(instruments), topics or KafkaTopics()
        self.store = store
        self.settings = settings
        self._executors = executor_client or ExecutorClient()
        # A stuck executor holds up no pass; a failed call asks for a pass at its retry.
        self._calls = CallPool(on_done=self.wake, on_retry=self.pass_by)
        self._loop = threading.Condition()  # guards the two below (`wake`, `pass_by`)
        self._stop = threading.Event()
        self._recover_term: Fence | None = None
        self._recover_lock = threading.Lock()
        # One leader duty at a time: the loop's pass, or a deleted pipeline's last commits.
        self._duty_lock = threading.Lock()
        self.lease_keeper = LeaseKeeper(
            store=store,
            settings=settings,
            on_became_leader=self._became_leader,
            monotonic=monotonic,
            instruments=instruments,
        )
        self.membership = Membership(
            store=store,
            settings=settings,
            lease=self.lease_keeper,
            wake=self.wake,
            outcomes=outcomes,
        )
        self.checkpoints = CheckpointDriver(
            store=store,
            lease=self.lease_keeper,
            membership=self.membership,
            executors=self._executors,
            calls=self._calls,
            failpoints=failpoints or Failpoints(),
            wake=self.wake,
            duty_lock=self._duty_lock,
            outcomes=outcomes,
            instruments=instruments,
            keep_history=settings.checkpoint_history,
            traces=traces,
        )
        self.reports = Reports(
            store=store,
            lease=self.lease_keeper,
            checkpoints=self.checkpoints,
            wake=self.wake,
            traces=self.checkpoints.traces,
        )
        self.notices = AssignmentNotices(
            store=store,
            lease=self.lease_keeper,
            membership=self.membership,
            executors=self._executors,
            calls=self._calls,
        )
        self.pipelines = self._pipelines(topics, outcomes)
        self.requests = IdempotentCalls(store=store, lease=self.lease_keeper)
        self.progress = Progress(
            store=store,
            topics=topics,
            lease=self.lease_keeper,
            membership=self.membership,
            instruments=instruments,
        )
        self.statistics = PlannerStatistics(store=store, lease=self.lease_keeper)
        self._thread = threading.Thread(
            target=self._run, name=f"leader-{settings.coordinator_id}", daemon=True
        )

    def _pipelines(self, topics: KafkaTopics, outcomes: CheckpointOutcomes) -> Pipelines:
        """The pipelines' lifecycle, over the parts built before it in `__init__`."""
        return Pipelines(
            store=self.store,
            lease=self.lease_keeper,
            topics=topics,
            checkpoints=self.checkpoints,
            wake=self.wake,
            notices=self.notices,
            outcomes=outcomes,
            recovery=self.settings.recovery_time,
        )

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the lease keeper, the work loop, the lag measurement and the planner
        statistics' upkeep."""
        self.lease_keeper.start()
        self._thread.start()
        self.progress.start()
        self.statistics.start()

    def stop(self) -> None:
        """Stop its threads and, if leading, give the lease up so a follower takes over
        without waiting for it to expire."""
        self._stop.set()
        self.wake()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self.progress.stop()
        self.statistics.stop()
        self._calls.close()
        RESUME_CLIENTS.close_all()  # the leader's own commits' kept-open Kafka clients
        self.lease_keeper.stop()
        if self.lease_keeper.current_fence() is not None:
            try:
                self.lease_keeper.resign()
                _LOG.info("coordinator %s released the lease", self.settings.coordinator_id)
            except Exception:
                _LOG.warning("could not release the lease; it will expire", exc_info=True)
        self._executors.close()
        self.checkpoints.traces.close()

    def wake(self) -> None:
        """Run a pass of the work loop now (a report arrived, an executor joined)."""
        with self._loop:
            self._woken = True
            self._loop.notify_all()

    def pass_by(self, at_s: float) -> None:
        """Run a pass of the work loop no later than `at_s` (`time.monotonic`): a call's
        retry falls due then. It does not wake the loop before: woken at once, a pass
        found the retry not due, and a leader whose executors had all gone spun."""
        with self._loop:
            if self._pass_at is None or at_s < self._pass_at:
                self._pass_at = at_s
                self._loop.notify_all()

    def _sleep(self, sleep_s: float) -> None:
        """Until woken, `sleep_s` passed, or a pass asked for by `pass_by` is due."""
        until = time.monotonic() + sleep_s
        with self._loop:
            while not self._woken and not self._stop.is_set():
                left = min(until, self._pass_at or until) - time.monotonic()
                if left <= 0:
                    break
                self._loop.wait(left)
            self._woken = False
            self._pass_at = None

    def require_fence(self) -> Fence:
        """The current term's fence; NotLeader naming the leader on a follower."""
        return self.lease_keeper.require_fence()

    def _became_leader(self, fence: Fence) -> None:
        with self._recover_lock:
            self._recover_term = fence
        self.wake()

    # ------------------------------------------------------------------ the work loop

    def _run(self) -> None:
        sleep_s = self.settings.tick_ms / 1000.0
        while not self._stop.is_set():
            self._sleep(sleep_s)
            sleep_s = RETRY_PASS_S  # a pass that fails is tried again soon
            if self._stop.is_set():
                return
            fence = self.lease_keeper.current_fence()
            if fence is None:
                sleep_s = self.settings.tick_ms / 1000.0
                continue
            try:
                started = time.monotonic()
                with self._duty_lock:
                    next_pass_ms = self.run_pass(fence, wait=False)
                sleep_s = self.settings.tick_ms / 1000.0
                if next_pass_ms is not None:  # sooner than the tick: wake for it
                    passed_s = time.monotonic() - started
                    sleep_s = max(0.0, min(sleep_s, next_pass_ms / 1000.0 - passed_s))
            except (FencedError, NotLeader, LeaderEpochRefused) as exc:
                # The term ended under us; the lease keeper will see it on its next try.
                _LOG.warning("leader pass stopped: %s", exc)
            except Unavailable as exc:
                # The state database is down or busy: the next pass tries again.
                _LOG.warning("leader pass skipped: %s", exc)
            except Exception:
                _LOG.exception("leader pass failed; retrying on the next pass")

    def run_pass(self, fence: Fence, *, wait: bool = True) -> int | None:
        """One pass of the leader's duties (see module docstring). Leader-only. The calls
        to executors run on the call pool (`call_pool.py`); the work loop does not wait for
        them (`wait=False`): a pass never waits on an executor. Returns how long after the
        pass's start the next pass is due (ms; None: nothing falls due by time alone), the
        longest the loop may sleep (`next_pass_in_ms`)."""
        with self._recover_lock:
            recover = self._recover_term == fence
        if recover:
            with self.checkpoints.traces.recovery(leader_epoch=int(fence.leader_epoch)):
                plan = self.checkpoints.recover(fence)
            _LOG.info(
                "leader epoch %s recovery: aborted %d in-flight checkpoints; %d to commit "
                "again, %d transactions to abort",
                fence.leader_epoch,
                len(plan.aborted),
                len(plan.to_commit),
                len(plan.to_abort),
            )
            with self._recover_lock:
                self._recover_term = None
        view = self.membership.cluster_view()  # read once for every step of the pass
        rebalance = self.membership.rebalance(fence, view)
        self.notices.tell(fence, rebalance.told)
        aborted = view.timed_out and self.checkpoints.abort_timed_out(fence)
        # A checkpoint aborted now (timed out, or its task moved) has transactions the
        # view's read predates: read them again.
        fresh = aborted or bool(rebalance.changed)
        self.checkpoints.send_aborts(fence, wait=wait, known=None if fresh else view.lingering)
        self.checkpoints.commit_pending(fence, wait=wait, known=view.pending_commits)
        self.checkpoints.trigger_due(fence, view, wait=wait)
        self.checkpoints.settle_traces()
        return self.next_pass_in_ms(view)

    def next_pass_in_ms(self, view: ClusterView) -> int | None:
        """How long after `view`'s read the first thing a pass acts on falls due by time
        alone (ms; None: nothing will): a pipeline's next trigger (not while a checkpoint
        of it is TRIGGERED, which holds it back and whose end wakes the loop), a TRIGGERED
        checkpoint's timeout, an executor's session expiring or its grace ending, or a
        commit or abort's retry. Everything else that gives a pass work wakes the loop."""
        retry_s = self._calls.backoff.next_in_s()
        due = [
            self.checkpoints.schedule.next_due_in_ms(view.now_ms, waiting=view.in_flight),
            None if retry_s is None else int(retry_s * 1000) + 1,
            *(
                None if at is None else at - view.now_ms
                for at in (
                    view.next_timeout_at_ms,
                    self.membership.next_liveness_change_at_ms(view),
                )
            ),
        ]
        return min((d for d in due if d is not None), default=None)
