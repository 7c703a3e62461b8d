"""Group commit: calls that arrive while a write is running share the next write.

Both services send or write one thing per task where one per batch would do. The leader
receives one `ReportPrecommit` per task, each on its own gRPC thread: writing each in its
own SQL transaction serialised a 100-task checkpoint into 100 transactions (100 fsyncs,
and 100 re-reads of the checkpoint). An executor's tasks each report their pre-commit from
their own thread: one ReportPrecommits call each was one leader transaction each.
`GroupCommit` lets the first caller write what is queued, in one batch, while later callers
wait; whoever arrives during that write is in the next batch (as databases group the
commits of concurrent transactions). Its one home, for both: the leader's pre-commits,
report calls, heartbeats and COMMITTED marks, and the executor's report calls
(`executor/runtime/report_batch.py`).

No thread of its own: a caller that finds no write running becomes the combiner and writes
batches until its own item is written; then, if more are queued, it hands the combiner's
role to the oldest waiter and returns, so no caller waits for work that is not its own
for longer than one batch.

Wake-ups are what a batch costs at scale (each a context switch and a hand-over of the
GIL: the executors' threads switched 16-18 times a task in the scale run when one
condition woke every waiting caller after every call). So each waiting caller sleeps on
its own event and is woken once: when its item is written, or when it is its turn to be the
combiner.

A batch is all or nothing (`write_batch`). When it fails, by default every item of it is
written on its own (`write_one`), so each caller gets its own answer: the one refused
report fails alone, the others succeed as they would have one by one (the leader's SQL
writes). With `retry_alone=False` every caller of the failed batch gets its error instead
(the executor's calls: a call that fails as a whole, no leader or its deadline passed,
fails each report in it, and each caller retries on its own schedule).

With a `linger` rule, the combiner waits before a batch while the rule says the items queued
are worth more with what is still coming (as a Kafka producer's `linger.ms`), up to
`linger_s` and never past a full batch. It is woken once, by the arrival that ends its
wait (an item submitted, or `recheck` after what the rule reads changed), not by every
arrival.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

_In = TypeVar("_In")
_Out = TypeVar("_Out")


@dataclass
class _Waiter(Generic[_In, _Out]):
    item: _In
    wake: threading.Event = field(default_factory=threading.Event)
    written: bool = False
    result: _Out | None = None
    error: BaseException | None = None


class GroupCommit(Generic[_In, _Out]):
    """Coalesces concurrent `submit` calls into batch writes (see the module docstring)."""

    def __init__(
        self,
        *,
        write_batch: Callable[[Sequence[_In]], Sequence[_Out]],
        write_one: Callable[[_In], _Out] | None = None,
        max_batch: int = 500,
        linger: Callable[[Sequence[_In]], bool] | None = None,
        linger_s: float = 0.0,
        retry_alone: bool = True,
    ) -> None:
        """`write_one` writes an item alone (a lone caller's, or each of a failed batch's);
        by default it is `write_batch` of that one item. `linger`: given the items queued,
        whether to wait for more before writing them (called under the queue's lock, so
        cheap and never blocking), for `linger_s` at most. `retry_alone`: False to fail
        every item of a failed batch with its error instead of writing each alone."""
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if linger_s < 0:
            raise ValueError(f"linger_s must be >= 0, got {linger_s}")
        if write_one is not None and not retry_alone:
            raise ValueError("write_one is only used with retry_alone")
        self._write_batch = write_batch
        self._write_one = write_one or (lambda item: write_batch([item])[0])
        self._max_batch = max_batch
        self._linger = linger if linger_s else None
        self._linger_s = linger_s
        self._retry_alone = retry_alone
        self._lock = threading.Lock()
        # Only the lingering combiner waits on it; a written batch wakes its callers and the
        # next combiner through their own events (`_Waiter.wake`).
        self._arrivals = threading.Condition(self._lock)
        self._queue: list[_Waiter[_In, _Out]] = []
        self._combining = False
        self._lingering = False

    def submit(self, item: _In, *, on_queued: Callable[[], object] | None = None) -> _Out:
        """Write ``item`` (alone or with others) and return its result or raise its error.
        `on_queued` runs under the queue's lock once the item is queued (so what the
        `linger` rule reads can say, in the same step, that the item is no longer to come)."""
        me: _Waiter[_In, _Out] = _Waiter(item)
        with self._lock:
            self._queue.append(me)
            if on_queued is not None:
                on_queued()
            combine = not self._combining
            self._combining = True
            self._end_linger_locked()
        if not combine:
            me.wake.wait()
            # Woken either because a combiner wrote our item, or to become the combiner.
            combine = not me.written
        if combine:
            self._combine(me)
        if me.error is not None:
            raise me.error
        return me.result  # type: ignore[return-value]

    def recheck(self) -> None:
        """What the `linger` rule reads changed other than by a `submit` (e.g. an item
        announced will not come): a lingering combiner writes now if the rule says so."""
        with self._lock:
            self._end_linger_locked()

    def _end_linger_locked(self) -> None:
        if self._lingering and not self._lingers_locked():
            self._arrivals.notify()  # the combiner's wait is over: its one wake-up

    def _combine(self, me: _Waiter[_In, _Out]) -> None:
        while True:
            with self._lock:
                self._linger_locked()
                batch = self._queue[: self._max_batch]
                del self._queue[: len(batch)]
                if not batch:
                    self._combining = False
                    return
            self._write(batch)
            for waiter in batch:
                waiter.written = True
                if waiter is not me:
                    waiter.wake.set()
            if me.written:
                with self._lock:
                    if not self._queue:
                        self._combining = False
                        return
                    successor = self._queue[0]
                successor.wake.set()  # not written: it becomes the combiner
                return

    def _linger_locked(self) -> None:
        """Wait while the `linger` rule says the queued items are worth waiting with, up to
        `linger_s`, unless a batch is full."""
        if self._linger is None:
            return
        until = time.monotonic() + self._linger_s
        self._lingering = True
        try:
            while self._lingers_locked():
                left = until - time.monotonic()
                if left <= 0:
                    return
                self._arrivals.wait(left)
        finally:
            self._lingering = False

    def _lingers_locked(self) -> bool:
        return (
            self._linger is not None
            and bool(self._queue)
            and len(self._queue) < self._max_batch
            and self._linger([w.item for w in self._queue])
        )

    def _write(self, batch: Sequence[_Waiter[_In, _Out]]) -> None:
        if len(batch) > 1 or not self._retry_alone:
            try:
                results = list(self._write_batch([w.item for w in batch]))
                if len(results) != len(batch):
                    raise ValueError(f"{len(results)} results for {len(batch)} items")
            except Exception as exc:
                if not self._retry_alone:  # every caller of the batch gets its error
                    for waiter in batch:
                        waiter.error = exc
                    return
                # some item is refused: write each alone for its own answer
            else:
                for waiter, result in zip(batch, results, strict=True):
                    waiter.result = result
                return
        for waiter in batch:
            try:
                waiter.result = self._write_one(waiter.item)
            except BaseException as exc:  # handed to the waiter's own caller
                waiter.error = exc
