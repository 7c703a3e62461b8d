"""The store's session timeouts are derived from the lease and stay below it (issue 14, Also)."""

from __future__ import annotations

from lockgate.coordinator.store.engine import SessionTimeouts


def test_the_timeouts_are_below_the_lease() -> None:
    timeouts = SessionTimeouts.within_lease(3_000)
    assert (
        max(
            timeouts.lock_ms,
            timeouts.statement_ms,
            timeouts.idle_in_transaction_ms,
            timeouts.tcp_user_timeout_ms,
        )
        < 3_000
    )
    args = timeouts.postgresql_connect_args()
    assert "-c lock_timeout=1500" in args["options"]
    assert "-c idle_in_transaction_session_timeout=1500" in args["options"]
    assert args["keepalives"] == 1 and args["tcp_user_timeout"] == 1500
