"""Group commit of concurrent reports: batched when they overlap, each answered on its own."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from lockgate.common.group_commit import GroupCommit
from tests.support.waits import wait_for


class Writes:
    """A store that records its batches; the first batch blocks until released, so the
    test can queue callers behind a running write deterministically."""

    def __init__(self, *, refuse: int | None = None) -> None:
        self.batches: list[list[int]] = []
        self.singles: list[int] = []
        self.refuse = refuse
        self.first_started = threading.Event()
        self.release_first = threading.Event()
        self._lock = threading.Lock()

    def _hold_first(self) -> None:
        if not self.first_started.is_set():
            self.first_started.set()
            assert self.release_first.wait(10), "the test never released the first write"

    def batch(self, items: Sequence[int]) -> list[int]:
        with self._lock:
            self.batches.append(list(items))
        if self.refuse in items:
            raise ValueError(f"item {self.refuse} refused")
        return [item * 10 for item in items]

    def one(self, item: int) -> int:
        self._hold_first()
        with self._lock:
            self.singles.append(item)
        if item == self.refuse:
            raise ValueError(f"item {item} refused")
        return item * 10


def _queue_behind_first_write(
    group: GroupCommit[int, int], writes: Writes, items: Sequence[int], pool: ThreadPoolExecutor
) -> list[object]:
    first = pool.submit(group.submit, items[0])
    assert writes.first_started.wait(10)
    rest = [pool.submit(group.submit, item) for item in items[1:]]

    # Every later caller must be queued behind the running write before it is released.
    def queued() -> bool:
        with group._lock:
            return len(group._queue) == len(items) - 1

    wait_for("every later caller to queue behind the running write", queued, timeout_s=10)
    writes.release_first.set()
    return [first, *rest]


def _outcomes_behind_first_write(
    group: GroupCommit[int, int], writes: Writes, items: list[int]
) -> list[object]:
    """Each item's answer, or its refusal's message, when all but the first queued behind
    the first's write (`_queue_behind_first_write`)."""
    outcomes: list[object] = []
    with ThreadPoolExecutor(max_workers=len(items)) as pool:
        for future in _queue_behind_first_write(group, writes, items, pool):
            try:
                outcomes.append(future.result(timeout=10))  # type: ignore[attr-defined]
            except ValueError as exc:
                outcomes.append(str(exc))
    return outcomes


def test_callers_that_arrive_during_a_write_share_the_next_one() -> None:
    writes = Writes()
    group: GroupCommit[int, int] = GroupCommit(write_batch=writes.batch, write_one=writes.one)
    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = _queue_behind_first_write(group, writes, list(range(1, 9)), pool)
        results = [f.result(timeout=10) for f in futures]  # type: ignore[attr-defined]
    assert results == [i * 10 for i in range(1, 9)]
    assert writes.singles == [1]  # the first was alone
    assert writes.batches == [list(range(2, 9))]  # the seven that waited: one write


def test_a_refused_item_fails_alone_and_the_rest_of_its_batch_succeeds() -> None:
    writes = Writes(refuse=5)
    group: GroupCommit[int, int] = GroupCommit(write_batch=writes.batch, write_one=writes.one)
    outcomes = _outcomes_behind_first_write(group, writes, list(range(1, 9)))
    assert outcomes == [10, 20, 30, 40, "item 5 refused", 60, 70, 80]
    assert sorted(writes.singles) == list(range(1, 9))  # 1 alone, then 2..8 one by one


def test_without_write_one_an_item_is_written_as_a_batch_of_one() -> None:
    """The default `write_one`: a lone caller, and each item of a refused batch, go through
    `write_batch` alone, each with its own answer."""
    writes = Writes(refuse=5)

    def batch(items: Sequence[int]) -> list[int]:
        if len(items) == 1:
            writes._hold_first()
        return writes.batch(items)

    group: GroupCommit[int, int] = GroupCommit(write_batch=batch)
    outcomes = _outcomes_behind_first_write(group, writes, list(range(1, 9)))
    assert outcomes == [10, 20, 30, 40, "item 5 refused", 60, 70, 80]
    assert writes.batches == [[1], list(range(2, 9)), *([i] for i in range(2, 9))]


def test_batches_are_bounded_and_every_caller_is_answered() -> None:
    writes = Writes()
    group: GroupCommit[int, int] = GroupCommit(
        write_batch=writes.batch, write_one=writes.one, max_batch=3
    )
    with ThreadPoolExecutor(max_workers=10) as pool:
        futures = _queue_behind_first_write(group, writes, list(range(1, 11)), pool)
        results = [f.result(timeout=10) for f in futures]  # type: ignore[attr-defined]
    assert results == [i * 10 for i in range(1, 11)]
    assert all(len(b) <= 3 for b in writes.batches)
    assert sorted(i for b in writes.batches for i in b) + writes.singles == [
        *range(2, 11),
        1,
    ]


def test_many_concurrent_callers_each_get_their_own_result() -> None:
    lock = threading.Lock()
    written: list[int] = []

    def batch(items: Sequence[int]) -> list[int]:
        with lock:
            written.extend(items)
        return [-i for i in items]

    def one(item: int) -> int:
        with lock:
            written.append(item)
        return -item

    group: GroupCommit[int, int] = GroupCommit(write_batch=batch, write_one=one)
    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(group.submit, range(2000)))
    assert results == [-i for i in range(2000)]
    assert sorted(written) == list(range(2000))  # each written exactly once


def test_max_batch_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_batch"):
        GroupCommit(write_batch=lambda b: list(b), write_one=lambda i: i, max_batch=0)


def _lingering(group: GroupCommit[int, int], queued: int) -> Callable[[], bool]:
    """Whether `queued` items wait in the queue with no write started: the combiner lingers."""

    def check() -> bool:
        with group._lock:
            return group._combining and len(group._queue) == queued

    return check


def test_a_lingering_write_waits_for_what_its_rule_awaits_and_writes_it_with_it() -> None:
    """A rule that says item 1 is worth more with item 2 holds 1's write (for up to a
    minute here) until 2 arrives; then both go in one batch, and the wait ended with the
    arrival, not with the linger's bound."""
    batches: list[list[int]] = []

    def batch(items: Sequence[int]) -> list[int]:
        batches.append(list(items))
        return [i * 10 for i in items]

    group: GroupCommit[int, int] = GroupCommit(
        write_batch=batch, linger=lambda items: 2 not in items, linger_s=60
    )
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=2) as pool:
        first = pool.submit(group.submit, 1)
        wait_for("item 1's write to linger", _lingering(group, 1), timeout_s=10)
        assert batches == []
        second = pool.submit(group.submit, 2)
        assert (first.result(timeout=30), second.result(timeout=30)) == (10, 20)
    assert batches == [[1, 2]]
    assert time.monotonic() - started < 60


def test_a_linger_is_bounded_by_its_time_and_by_a_full_batch() -> None:
    """A rule that always wants more: a lone item is written alone once `linger_s` passed;
    items that fill a batch are written at once, however long the linger."""
    batches: list[list[int]] = []

    def batch(items: Sequence[int]) -> list[int]:
        batches.append(list(items))
        return [i * 10 for i in items]

    alone: GroupCommit[int, int] = GroupCommit(
        write_batch=batch, linger=lambda items: True, linger_s=0.2
    )
    started = time.monotonic()
    assert alone.submit(1) == 10
    assert time.monotonic() - started >= 0.2
    assert batches == [[1]]

    full: GroupCommit[int, int] = GroupCommit(
        write_batch=batch, linger=lambda items: True, linger_s=60, max_batch=2
    )
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=2) as pool:
        first = pool.submit(full.submit, 2)
        wait_for("item 2's write to linger", _lingering(full, 1), timeout_s=10)
        second = pool.submit(full.submit, 3)
        assert (first.result(timeout=30), second.result(timeout=30)) == (20, 30)
    assert batches == [[1], [2, 3]]
    assert time.monotonic() - started < 60


def test_a_rule_that_wants_nothing_more_writes_at_once() -> None:
    group: GroupCommit[int, int] = GroupCommit(
        write_batch=lambda items: [i * 10 for i in items],
        linger=lambda items: False,
        linger_s=60,
    )
    started = time.monotonic()
    assert group.submit(4) == 40
    assert time.monotonic() - started < 60


def test_a_negative_linger_is_refused() -> None:
    with pytest.raises(ValueError, match="linger_s must be >= 0, got -1"):
        GroupCommit(write_batch=lambda items: list(items), linger=lambda items: True, linger_s=-1)


def test_without_retry_alone_a_failed_batch_fails_each_caller_with_its_error() -> None:
    """The executor's calls: a call that failed as a whole is not sent again item by item;
    each caller gets the error and retries on its own schedule."""
    writes = Writes()
    failing = {"next": True}

    def batch(items: Sequence[int]) -> list[int]:
        writes.batches.append(list(items))
        if items[0] == 0:
            writes._hold_first()
        if failing["next"] and items[0] != 0:
            failing["next"] = False
            raise ConnectionError("no leader")
        return [item * 10 for item in items]

    group: GroupCommit[int, int] = GroupCommit(write_batch=batch, retry_alone=False)
    with ThreadPoolExecutor(max_workers=3) as pool:
        first = pool.submit(group.submit, 0)
        assert writes.first_started.wait(10)
        rest = [pool.submit(group.submit, item) for item in (1, 2)]
        wait_for("two callers queued", lambda: len(group._queue) == 2, timeout_s=10)
        writes.release_first.set()
        assert first.result(timeout=30) == 0
        for future in rest:
            with pytest.raises(ConnectionError, match="no leader"):
                future.result(timeout=30)
    assert writes.batches == [[0], [1, 2]]  # never one by one
    assert group.submit(1) == 10  # a retry goes through


def test_write_one_needs_retry_alone() -> None:
    with pytest.raises(ValueError, match="write_one is only used with retry_alone"):
        GroupCommit(write_batch=lambda b: list(b), write_one=lambda i: i, retry_alone=False)


class _CountingCondition(threading.Condition):
    """Counts the notifications a lingering combiner gets."""

    def __init__(self, lock: threading.Lock) -> None:
        super().__init__(lock)
        self.notified = 0

    def notify(self, n: int = 1) -> None:
        self.notified += 1
        super().notify(n)


def test_a_lingering_combiner_is_woken_once_by_the_arrival_that_ends_its_wait() -> None:
    """Arrivals the rule still wants more after do not wake the combiner (a wake-up is a
    context switch and a GIL hand-over: what a batch costs at scale); the one after which it
    wants nothing more does, once."""
    group: GroupCommit[int, int] = GroupCommit(
        write_batch=lambda items: [i * 10 for i in items],
        linger=lambda items: 3 not in items,
        linger_s=60,
    )
    counted = _CountingCondition(group._lock)
    group._arrivals = counted
    with ThreadPoolExecutor(max_workers=3) as pool:
        first = pool.submit(group.submit, 1)
        wait_for("item 1's write to linger", _lingering(group, 1), timeout_s=10)
        second = pool.submit(group.submit, 2)
        wait_for("item 2 queued behind the linger", _lingering(group, 2), timeout_s=10)
        assert counted.notified == 0
        third = pool.submit(group.submit, 3)
        assert [f.result(timeout=30) for f in (first, second, third)] == [10, 20, 30]
    assert counted.notified == 1


def test_recheck_ends_a_linger_once_the_rule_reads_that_nothing_more_comes() -> None:
    """What the rule reads changed without a submit (an announced item withdrawn): `recheck`
    lets the lingering combiner write at once instead of at the linger's bound."""
    coming = {"item 2": True}
    group: GroupCommit[int, int] = GroupCommit(
        write_batch=lambda items: [i * 10 for i in items],
        linger=lambda items: coming["item 2"],
        linger_s=60,
    )
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=1) as pool:
        first = pool.submit(group.submit, 1)
        wait_for("item 1's write to linger", _lingering(group, 1), timeout_s=10)
        group.recheck()  # nothing changed: it still lingers
        assert _lingering(group, 1)()
        coming["item 2"] = False
        group.recheck()
        assert first.result(timeout=30) == 10
    assert time.monotonic() - started < 60
