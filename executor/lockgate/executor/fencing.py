"""Fencing rules of the executor: which calls a zombie may no longer make.

Three tokens only grow (common.proto, "Conventions"):

* ``leader_epoch``: one more per change of coordinator leader. The executor remembers the
  highest epoch it has seen and refuses a call carrying a lower one; an equal or higher
  epoch is accepted. A higher one becomes the new highest (is *adopted*) only from the
  coordinator's RegisterExecutor/Heartbeat responses and from a control call
  (TriggerCheckpoint, CommitCheckpoint, AbortCheckpoint) that names this process's current
  registration, after that check: never from a read (GetExecutorStatus), nor from a call
  that is refused. One stray call carrying 2^63-1 would otherwise make the executor refuse
  the real leader for good (issue 8). Without caller authentication a control call that
  guesses the registration can still raise it; authenticating the coordinator closes that.
  Kafka's brokers treat the controller epoch the same way.
* ``executor_generation``: one more per registration of an executor id. A call must name
  this process's current registration exactly: a lower one was meant for an earlier
  process on the same address; a higher one means the coordinator registered us again
  and we never saw the answer, so our tasks are not the ones it thinks.
* ``task_generation``: one more per (re)assignment or restart of a task. A trigger must
  carry exactly the generation the executor runs the task at.

Known races, and why they are harmless:

* Two calls from leaders with epochs 4 and 5 may race; whichever the executor sees first,
  the epoch-4 call is refused once epoch 5 was seen, and accepted before. Accepting it
  earlier is safe because a deposed leader's SQL writes are conditional on its epoch: its
  decisions cannot become COMPLETE, and commit/abort of handles is idempotent.
* A heartbeat response with a new task generation and a trigger at that generation may
  race: the trigger is refused STALE_GENERATION and the leader retries on the next
  checkpoint.

This module is pure (no gRPC, no protobuf): its refusals are ``StaleTokenError``s, which the
shared error interceptor answers with a ``FencingFailure`` detail, as every service's.
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass

from lockgate.common.errors import FencingToken, StaleTokenError
from lockgate.common.model.ids import Generation, LeaderEpoch

#: The value of an unset leader epoch (proto3 default): "not given".
NO_EPOCH = LeaderEpoch(0)


@dataclass(frozen=True)
class EpochDecision:
    """Outcome of presenting a leader epoch: accepted or not, and the highest epoch after."""

    accepted: bool
    highest_seen: LeaderEpoch
    #: True if the presented epoch is higher than every epoch seen before.
    is_new_leader: bool


def decide_leader_epoch(*, highest_seen: LeaderEpoch, presented: LeaderEpoch) -> EpochDecision:
    """Accept ``presented`` unless it is lower than ``highest_seen``; pure.

    ``presented`` must be set (>= 1); callers treat an unset epoch before calling.
    """
    if presented < highest_seen:
        return EpochDecision(accepted=False, highest_seen=highest_seen, is_new_leader=False)
    return EpochDecision(
        accepted=True,
        highest_seen=LeaderEpoch(max(highest_seen, presented)),
        is_new_leader=presented > highest_seen,
    )


class LeaderEpochFence:
    """The highest leader epoch this process has seen, shared by all its threads."""

    def __init__(self, initial: LeaderEpoch = NO_EPOCH, leader_id: str = "") -> None:
        self._lock = threading.Lock()
        self._highest = initial
        self._leader_id = leader_id

    @property
    def highest_seen(self) -> tuple[LeaderEpoch, str]:
        """The highest epoch seen and the id of the leader that presented it."""
        with self._lock:
            return self._highest, self._leader_id

    def check(self, presented: LeaderEpoch, *, rpc: str) -> None:
        """Raise ``StaleTokenError`` if ``presented`` is lower than the highest seen; record
        nothing (a read, or a call not yet checked further, cannot raise the epoch)."""
        with self._lock:
            self._decide(presented, rpc)

    def _decide(self, presented: LeaderEpoch, rpc: str) -> EpochDecision:
        """The decision on ``presented``; raises ``StaleTokenError`` if it is refused.
        The caller holds the lock."""
        decision = decide_leader_epoch(highest_seen=self._highest, presented=presented)
        if not decision.accepted:
            raise StaleTokenError(
                token=FencingToken.LEADER_EPOCH,
                subject="",
                presented=presented,
                current=self._highest,
                rpc=rpc,
            )
        return decision

    def observe(self, presented: LeaderEpoch, *, leader_id: str = "", rpc: str) -> bool:
        """Record ``presented`` or raise ``StaleTokenError`` if it is lower than the highest.

        Returns True if ``presented`` is a new highest epoch (a new leader took over).
        """
        with self._lock:
            decision = self._decide(presented, rpc)
            if decision.is_new_leader or not self._leader_id:
                self._leader_id = leader_id or self._leader_id
            self._highest = decision.highest_seen
            return decision.is_new_leader


def check_executor_generation(
    *,
    executor_id: str,
    current: Generation,
    presented: Generation,
    rpc: str,
) -> None:
    """Raise ``StaleTokenError`` unless ``presented`` is this process's registration."""
    if presented != current:
        raise StaleTokenError(
            token=FencingToken.EXECUTOR_GENERATION,
            subject=executor_id,
            presented=presented,
            current=current,
            rpc=rpc,
        )


class TriggerVerdict(enum.Enum):
    """Whether one task of a TriggerCheckpoint may start (``lockgate.v1.TriggerOutcome``)."""

    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    STALE_GENERATION = "stale_generation"
    NOT_ASSIGNED = "not_assigned"
    NOT_READY = "not_ready"


def decide_trigger(
    *,
    running_generation: Generation | None,
    presented_generation: Generation,
    ready: bool,
    config_version_matches: bool,
    already_triggered: bool,
) -> TriggerVerdict:
    """Decide one task's answer to a trigger; pure.

    Order matters: a task this executor does not run is NOT_ASSIGNED whatever else; a
    generation mismatch (lower: the leader is behind; higher: our assignment is behind)
    refuses before anything about the task's state, so a zombie's trigger never counts as
    a duplicate of the current generation's.
    """
    if running_generation is None:
        return TriggerVerdict.NOT_ASSIGNED
    if presented_generation != running_generation:
        return TriggerVerdict.STALE_GENERATION
    if already_triggered:
        return TriggerVerdict.DUPLICATE
    if not ready or not config_version_matches:
        return TriggerVerdict.NOT_READY
    return TriggerVerdict.ACCEPTED


__all__ = [
    "NO_EPOCH",
    "EpochDecision",
    "LeaderEpochFence",
    "TriggerVerdict",
    "check_executor_generation",
    "decide_leader_epoch",
    "decide_trigger",
]
