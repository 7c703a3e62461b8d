"""Lease decisions: who leads, how long to trust it."""

from __future__ import annotations

from lockgate.common.model.ids import CoordinatorId, LeaderEpoch
from lockgate.coordinator.domain.lease import Fence, LeaseRecord, local_deadline, next_role
from lockgate.coordinator.domain.states import LeaseRole, transition_lease_role

ME = CoordinatorId("c1")


def lease(holder: str | None, expires: int, now: int, epoch: int = 4) -> LeaseRecord:
    return LeaseRecord(
        holder=CoordinatorId(holder) if holder else None,
        holder_address="127.0.0.1:7070" if holder else None,
        leader_epoch=LeaderEpoch(epoch),
        expires_at_ms=expires,
        db_now_ms=now,
    )


def test_leads_only_with_an_unexpired_lease_in_its_name() -> None:
    assert next_role(current=LeaseRole.FOLLOWER, me=ME, lease=lease("c1", 10, 5)) is (
        LeaseRole.LEADER
    )
    assert next_role(current=LeaseRole.LEADER, me=ME, lease=lease("c2", 10, 5)) is (
        LeaseRole.FOLLOWER
    )
    assert next_role(current=LeaseRole.LEADER, me=ME, lease=lease("c1", 5, 5)) is (
        LeaseRole.FOLLOWER
    )
    assert next_role(current=LeaseRole.LEADER, me=ME, lease=None) is LeaseRole.FOLLOWER


def test_a_term_of_another_incarnation_of_the_same_id_is_not_ours() -> None:
    previous = LeaseRecord(
        holder=ME,
        holder_address="127.0.0.1:7070",
        leader_epoch=LeaderEpoch(3),
        expires_at_ms=10,
        db_now_ms=5,
        holder_incarnation="process-a",
    )
    assert (
        next_role(current=LeaseRole.FOLLOWER, me=ME, lease=previous, incarnation="process-b")
        is LeaseRole.FOLLOWER
    )
    assert (
        next_role(current=LeaseRole.FOLLOWER, me=ME, lease=previous, incarnation="process-a")
        is LeaseRole.LEADER
    )


def test_fence_only_when_held() -> None:
    assert lease("c1", 10, 5, epoch=7).fence == Fence(ME, LeaderEpoch(7))
    assert lease("c1", 5, 5).fence is None
    assert lease(None, 0, 5).fence is None


def test_local_deadline_counts_from_sending_minus_margin() -> None:
    assert local_deadline(sent_at_monotonic_s=100.0, lease_ms=3000, safety_ms=300) == 102.7
    assert local_deadline(sent_at_monotonic_s=100.0, lease_ms=100, safety_ms=300) == 100.0


def test_lease_role_table_is_complete() -> None:
    for a in LeaseRole:
        for b in LeaseRole:
            assert transition_lease_role(a, b) is b
