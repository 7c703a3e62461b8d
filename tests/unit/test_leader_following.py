"""The leader-following channel's retry policy (lockgate.common.grpc_client), without a network:
the channels are placeholders and ``invoke`` plays the server."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from lockgate.common.grpc_client import LeaderFollowingChannel


class _Unavailable(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def trailing_metadata(self) -> tuple[()]:
        return ()


def _channel(max_attempts: int = 4) -> LeaderFollowingChannel:
    return LeaderFollowingChannel(
        ["a:1", "b:2", "c:3"],
        channel_factory=lambda address: address,  # type: ignore[arg-type,return-value]
        max_attempts=max_attempts,
        initial_backoff_seconds=0.001,
        max_backoff_seconds=0.002,
    )


def _failing(times: int, addresses: list[str]) -> Any:
    def invoke(channel: Any, _remaining: float | None) -> str:
        addresses.append(channel)
        if len(addresses) <= times:
            raise _Unavailable()
        return "ok"

    return invoke


def test_a_call_with_a_timeout_retries_past_max_attempts_until_it_succeeds() -> None:
    # A failover (no leader for about one lease) outlasts a few quick attempts: a call with a
    # deadline keeps retrying, round robin over the seeds, while the deadline allows.
    addresses: list[str] = []
    assert _channel(max_attempts=2).call_with_retries(_failing(7, addresses), 30.0) == "ok"
    assert len(addresses) == 8
    assert addresses[:4] == ["a:1", "b:2", "c:3", "a:1"]


def test_a_call_without_a_timeout_stops_after_max_attempts() -> None:
    addresses: list[str] = []
    with pytest.raises(_Unavailable):
        _channel(max_attempts=3).call_with_retries(_failing(100, addresses), None)
    assert len(addresses) == 3


def test_a_call_gives_up_when_its_deadline_would_pass() -> None:
    addresses: list[str] = []
    with pytest.raises(_Unavailable):
        _channel().call_with_retries(_failing(10_000, addresses), 0.05)
    assert 1 <= len(addresses) < 10_000
