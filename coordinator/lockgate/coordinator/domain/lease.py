"""Leader election through the one `leader_lease` row, and the fencing token.

Rules (the store's SQL implements them, these are the words):

1. Acquire and renew are one compare-and-set statement whose expiry is computed from the
   *database's* clock inside the statement; a replica's own clock never decides who leads.
2. Renewal (same holder *and* same incarnation -- the same process --, lease not yet
   expired) keeps `leader_epoch`. Any other successful acquisition, including the same
   holder re-acquiring after its lease expired or a restarted process of the same id, adds
   one: the old term may have been a paused process whose in-memory view is stale, so the
   new term gets a new token. A restarted replica therefore waits for its previous
   process's lease to expire like any other contender.
3. Every state-changing transaction of the leader first checks, under a lock that keeps
   the lease row from changing until the transaction ends, that the row still names it
   with its epoch and an unexpired lease (`Fence`); otherwise nothing is written and
   `FencedError` is raised. So all writes of epoch e precede, in the database's order, the
   acquisition of epoch e+1.
4. The leader trusts its lease locally only until `local_deadline`: the monotonic time at
   which it *sent* the acquiring statement plus the lease minus a safety margin. The real
   expiry is later than that, so a leader that believes it leads really does, as long as
   clock *rates* agree (not clock values).

Known races, and why they are safe:
- A leader pauses (GC, SIGSTOP) past its lease, a new leader acquires, the old one wakes:
  its next transaction fails the fence check (rule 3) and writes nothing. RPCs it had
  already sent carry the old epoch and executors that saw the new epoch refuse them.
- A leader's transaction commits a few milliseconds after `expires_at` because the lease
  row lock held off the contender: harmless, the contender's epoch starts after it.
- Two replicas acquire at the same instant: the statement is a single CAS on one row, the
  database serialises them, one sees zero rows updated.
"""

from __future__ import annotations

from dataclasses import dataclass

from lockgate.common.model.ids import CoordinatorId, LeaderEpoch
from lockgate.coordinator.domain.states import LeaseRole, transition_lease_role

DEFAULT_LEASE_MS = 3_000
"""The coordinator's default `--lease-ms`; the store's session timeouts are derived from it."""


@dataclass(frozen=True)
class Fence:
    """The token a leader passes to every state-changing store call."""

    holder: CoordinatorId
    leader_epoch: LeaderEpoch


@dataclass(frozen=True)
class LeaseRecord:
    """The `leader_lease` row as read, with the database's clock at reading time."""

    holder: CoordinatorId | None
    """None before anyone ever led."""
    holder_address: str | None
    """Where the holder serves gRPC (followers redirect clients there)."""
    leader_epoch: LeaderEpoch
    expires_at_ms: int
    db_now_ms: int
    holder_incarnation: str = ""
    """Which process of `holder` took the term ("" when the store was given none)."""

    @property
    def is_held(self) -> bool:
        """Whether some replica holds an unexpired lease."""
        return self.holder is not None and self.expires_at_ms > self.db_now_ms

    @property
    def fence(self) -> Fence | None:
        """The holder's token if the lease is held."""
        if self.holder is None or not self.is_held:
            return None
        return Fence(holder=self.holder, leader_epoch=self.leader_epoch)


def local_deadline(*, sent_at_monotonic_s: float, lease_ms: int, safety_ms: int) -> float:
    """Return the monotonic time until which a freshly granted lease may be trusted.

    Counted from when the statement was *sent*: the database set the expiry no earlier.
    """
    return sent_at_monotonic_s + max(0, lease_ms - safety_ms) / 1000.0


def next_role(
    *,
    current: LeaseRole,
    me: CoordinatorId,
    lease: LeaseRecord | None,
    incarnation: str = "",
) -> LeaseRole:
    """Return a replica's role after a lease attempt that left the row as `lease`.

    `lease` None means the attempt itself failed (database unreachable): a leader steps
    down, because it can no longer prove it leads. A row naming this id but another
    incarnation is a previous process's term, not this one's.
    """
    leads = (
        lease is not None
        and lease.holder == me
        and lease.holder_incarnation == incarnation
        and lease.is_held
    )
    return transition_lease_role(current, LeaseRole.LEADER if leads else LeaseRole.FOLLOWER)
