"""The executor's slot claims: a fence of a task slot for checkpoint N never runs once a
later checkpoint claimed the slot, and a claim waits for a fence of its slot in progress
(the Kafka side: tests/integration/test_committer_slots.py)."""

from __future__ import annotations

import threading

from lockgate.executor.committer import SlotClaims


def test_a_claim_waits_for_a_fence_of_its_slot_in_progress() -> None:
    """A batch that claims its slot while an earlier checkpoint's fence of the slot runs
    opens its producers only after that fence ended; other slots are not held up."""
    claims = SlotClaims()
    order: list[str] = []

    def claim_2() -> None:
        claims.claim("s", 2)
        order.append("claimed")

    claimer = threading.Thread(target=claim_2)
    with claims.fencing("s", 1) as allowed:
        assert allowed
        claimer.start()
        claims.claim("other-slot", 7)  # another slot's claim does not wait
        claimer.join(timeout=0.5)
        order.append("fenced")
    claimer.join(timeout=30)
    assert order == ["fenced", "claimed"]
    with claims.fencing("s", 1) as allowed:
        assert not allowed  # checkpoint 2 claimed the slot: 1's fence would hit it
    with claims.fencing("s", 2) as allowed:
        assert allowed
    with claims.fencing("s", None) as allowed:
        assert allowed  # a restore's fence of an older generation's slot
