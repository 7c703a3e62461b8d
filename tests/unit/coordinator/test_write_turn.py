"""The replica's write turn: the lease's renewal goes before every other waiting write."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from lockgate.coordinator.store.write_turn import WriteTurn

pytestmark = pytest.mark.unit


def _until(condition: Callable[[], bool], *, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the waiters to queue"
        time.sleep(0.001)


def _waiters(condition: threading.Condition) -> int:
    return len(condition._waiters)  # type: ignore[attr-defined]


def _queue(turn: WriteTurn, order: list[str], name: str, *, urgent: bool) -> threading.Thread:
    def take() -> None:
        with turn.held(urgent=urgent):
            order.append(name)

    thread = threading.Thread(target=take, name=name)
    thread.start()
    return thread


def test_an_urgent_waiter_goes_before_writes_that_queued_earlier() -> None:
    turn = WriteTurn()
    order: list[str] = []
    threads = []
    with turn.held():
        for i in range(8):
            threads.append(_queue(turn, order, f"write-{i}", urgent=False))
        _until(lambda: _waiters(turn._normal) == 8)
        threads.append(_queue(turn, order, "renewal", urgent=True))
        _until(lambda: turn._urgent_waiting == 1)
    for thread in threads:
        thread.join(timeout=10)
    assert order[0] == "renewal"
    assert sorted(order[1:]) == [f"write-{i}" for i in range(8)]


def test_a_write_arriving_while_an_urgent_one_waits_queues_behind_it() -> None:
    turn = WriteTurn()
    order: list[str] = []
    with turn.held():
        renewal = _queue(turn, order, "renewal", urgent=True)
        _until(lambda: turn._urgent_waiting == 1)
        late = _queue(turn, order, "late write", urgent=False)
        _until(lambda: _waiters(turn._normal) == 1)
    renewal.join(timeout=10)
    late.join(timeout=10)
    assert order == ["renewal", "late write"]


def test_the_turn_is_reentrant_and_exclusive() -> None:
    turn = WriteTurn()
    inside = 0
    most = 0
    guard = threading.Lock()

    def write() -> None:
        nonlocal inside, most
        for _ in range(200):
            with turn.held(), turn.held(urgent=True):  # nested: the same thread again
                with guard:
                    inside += 1
                    most = max(most, inside)
                with guard:
                    inside -= 1

    threads = [threading.Thread(target=write) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert most == 1
    assert turn._owner is None and turn._depth == 0
