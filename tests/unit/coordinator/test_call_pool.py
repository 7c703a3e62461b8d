"""When a job of the leader's call pool wakes the work loop (`herder/call_pool.py`).

One worker thread, so jobs run one after the other and each ends (its wake decided) before
the next begins: the last job, started with `wake=True`, is the fence that says every
earlier job's decision has been made."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

from lockgate.coordinator.herder.call_pool import CallPool

WAIT_S = 10.0


class Wakes:
    """The loop's wake: counts calls, and lets a test wait for the n-th."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self.count = 0

    def __call__(self) -> None:
        with self._changed:
            self.count += 1
            self._changed.notify_all()

    def wait_for(self, n: int) -> int:
        with self._changed:
            assert self._changed.wait_for(lambda: self.count >= n, timeout=WAIT_S)
            return self.count


@pytest.fixture
def wakes() -> Wakes:
    return Wakes()


@pytest.fixture
def pool(wakes: Wakes) -> Iterator[CallPool]:
    calls = CallPool(on_done=wakes, workers=1)
    yield calls
    calls.close()


def held() -> tuple[Callable[[], None], threading.Event, threading.Event]:
    """A job that signals it started and runs until released."""
    started, release = threading.Event(), threading.Event()

    def job() -> None:
        started.set()
        assert release.wait(WAIT_S)

    return job, started, release


def fence(pool: CallPool, wakes: Wakes, expected: int) -> None:
    """Run a waking job after everything queued; `expected` wakes in all, its own included."""
    pool.run("fence", lambda: None, wait=False)
    assert wakes.wait_for(expected) == expected


def test_a_job_wakes_the_loop_when_it_ends_unless_started_without_wake(
    pool: CallPool, wakes: Wakes
) -> None:
    pool.run("commit", lambda: None, wait=False)
    assert wakes.wait_for(1) == 1
    pool.run("trigger", lambda: None, wait=False, wake=False)
    fence(pool, wakes, 2)  # the fence's wake only


def test_a_job_that_fails_wakes_the_loop_even_without_wake(pool: CallPool, wakes: Wakes) -> None:
    def failing() -> None:
        raise RuntimeError("the executor answered nonsense")

    pool.run("trigger", failing, wait=False, wake=False)
    fence(pool, wakes, 2)  # the failed job's wake, then the fence's


def test_a_job_a_pass_found_busy_wakes_the_loop_when_it_ends(pool: CallPool, wakes: Wakes) -> None:
    """A pass skipped the job's pipeline while it ran: it must look again at its end."""
    job, started, release = held()
    pool.run("trigger", job, wait=False, wake=False)
    assert started.wait(WAIT_S)
    assert pool.busy("trigger")
    release.set()
    fence(pool, wakes, 2)  # the busy job's wake, then the fence's

    job, started, release = held()
    pool.run("trigger", job, wait=False, wake=False)
    assert started.wait(WAIT_S)
    assert not pool.run("trigger", lambda: None, wait=False), "refused: one job per key"
    release.set()
    fence(pool, wakes, 4)


def test_a_job_nobody_asked_about_does_not_wake_the_loop_for_an_earlier_one(
    pool: CallPool, wakes: Wakes
) -> None:
    """Being found busy wakes the loop once, at that job's end, not at every later job's."""
    job, started, release = held()
    pool.run("trigger", job, wait=False, wake=False)
    assert started.wait(WAIT_S)
    assert pool.busy("trigger")
    release.set()
    fence(pool, wakes, 2)
    pool.run("trigger", lambda: None, wait=False, wake=False)
    fence(pool, wakes, 3)  # the second fence's wake only
