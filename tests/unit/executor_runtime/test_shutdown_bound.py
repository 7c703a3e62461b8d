"""The shutdown bound: the time left after the signal, and giving up when it passes (kill
the children, exit 124) -- from the main thread or from the watchdog at the deadline."""

from __future__ import annotations

import threading

import pytest

from lockgate.executor.shutdown import EXIT_SHUTDOWN_TIMEOUT, ShutdownBound


class Process:
    """What a :class:`ShutdownBound` does to the process, recorded."""

    def __init__(self) -> None:
        self.killed = 0
        self.exit_codes: list[int] = []
        self.exited = threading.Event()

    def kill_children(self) -> list[int]:
        self.killed += 1
        return [101, 102]

    def exit_process(self, code: int) -> None:
        """Records the exit; returns (``os._exit`` would not), so the test goes on."""
        self.exit_codes.append(code)
        self.exited.set()


def test_remaining_counts_from_the_signal_and_keeps_what_later_steps_need() -> None:
    now = [100.0]
    process = Process()
    bound = ShutdownBound(
        10.0,
        clock=lambda: now[0],
        kill_children=process.kill_children,
        exit_process=process.exit_process,
    )
    assert bound.remaining() == 10.0  # not armed: the whole bound

    now[0] = 200.0
    bound.arm()
    now[0] = 204.0
    assert bound.remaining() == pytest.approx(6.0)
    assert bound.remaining(keep_s=3.0) == pytest.approx(3.0)
    assert bound.remaining(keep_s=7.0) == 0.0

    bound.arm()  # a second signal does not restart the count
    assert bound.remaining() == pytest.approx(6.0)


def test_give_up_kills_the_children_then_exits_124() -> None:
    process = Process()
    bound = ShutdownBound(
        10.0, kill_children=process.kill_children, exit_process=process.exit_process
    )
    bound.give_up("a batch did not end")
    assert (process.killed, process.exit_codes) == (1, [EXIT_SHUTDOWN_TIMEOUT])


def test_the_watchdog_gives_up_at_the_deadline_whatever_the_main_thread_does() -> None:
    process = Process()
    bound = ShutdownBound(
        0.2, kill_children=process.kill_children, exit_process=process.exit_process
    )
    bound.arm()
    assert not process.exited.wait(0.05), "gave up before the deadline"
    assert process.exited.wait(5.0), "the watchdog did not give up at the deadline"
    assert (process.killed, process.exit_codes) == (1, [EXIT_SHUTDOWN_TIMEOUT])
