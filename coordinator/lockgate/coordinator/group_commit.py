"""Group commit: calls that arrive while a write is running share the next write.

The leader receives one `ReportPrecommit` per task, each on its own gRPC thread; writing
each in its own SQL transaction serialises a 100-task checkpoint into 100 transactions
(100 fsyncs, and 100 re-reads of the checkpoint). `GroupCommit` lets the first caller write
what is queued, in one transaction, while later callers wait; whoever arrives during that
write is in the next batch (as databases group the commits of concurrent transactions).

No thread of its own: a caller that finds no write running becomes the combiner and writes
batches until its own item is written; then, if more are queued, it hands the combiner's
role to the oldest waiter and returns, so no caller waits for work that is not its own
for longer than one batch.

A batch is all or nothing (`write_batch`); when it fails, every item of it is written on
its own (`write_one`), so each caller gets its own answer: the one refused report fails
alone, the others succeed as they would have one by one.

With a `linger` rule, the combiner waits before a batch while the rule says the items queued
are worth more with what is still coming (as a Kafka producer's `linger.ms`), up to
`linger_s` and never past a full batch; each arrival ends the wait to ask the rule again.
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
    ) -> None:
        """`write_one` writes an item alone (a lone caller's, or each of a failed batch's);
        by default it is `write_batch` of that one item. `linger`: given the items queued,
        whether to wait for more before writing them (called under the queue's lock, so
        cheap and never blocking), for `linger_s` at most."""
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if linger_s < 0:
            raise ValueError(f"linger_s must be >= 0, got {linger_s}")
        self._write_batch = write_batch
        self._write_one = write_one or (lambda item: write_batch([item])[0])
        self._max_batch = max_batch
        self._linger = linger
        self._linger_s = linger_s
        self._lock = threading.Lock()
        self._arrivals = threading.Condition(self._lock)  # the lingering combiner waits on it
        self._queue: list[_Waiter[_In, _Out]] = []
        self._combining = False

    def submit(self, item: _In) -> _Out:
        """Write ``item`` (alone or with others) and return its result or raise its error."""
        me: _Waiter[_In, _Out] = _Waiter(item)
        with self._lock:
            self._queue.append(me)
            combine = not self._combining
            self._combining = True
            self._arrivals.notify()
        if not combine:
            me.wake.wait()
            # Woken either because a combiner wrote our item, or to become the combiner.
            combine = not me.written
        if combine:
            self._combine(me)
        if me.error is not None:
            raise me.error
        return me.result  # type: ignore[return-value]

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
        if self._linger is None or not self._linger_s:
            return
        until = time.monotonic() + self._linger_s
        while (
            self._queue
            and len(self._queue) < self._max_batch
            and self._linger([w.item for w in self._queue])
        ):
            left = until - time.monotonic()
            if left <= 0:
                return
            self._arrivals.wait(left)

    def _write(self, batch: Sequence[_Waiter[_In, _Out]]) -> None:
        if len(batch) > 1:
            try:
                results = list(self._write_batch([w.item for w in batch]))
                if len(results) != len(batch):
                    raise ValueError(f"{len(results)} results for {len(batch)} items")
            except Exception:
                pass  # some item is refused: write each alone for its own answer
            else:
                for waiter, result in zip(batch, results, strict=True):
                    waiter.result = result
                return
        for waiter in batch:
            try:
                waiter.result = self._write_one(waiter.item)
            except BaseException as exc:  # handed to the waiter's own caller
                waiter.error = exc
