"""Signals a serving process records instead of dying of them (`LockgateServer`)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Any


class CaughtSignals:
    """From its creation, ``signals`` are recorded instead of running the handlers they had
    (Python's default: end the process) until `restore`. Main thread only: Python runs
    signal handlers there and refuses to install them elsewhere."""

    def __init__(self, signals: Sequence[signal.Signals]) -> None:
        self._received: list[signal.Signals] = []
        self._arrived = threading.Event()
        self._previous: dict[signal.Signals, Any] = {
            sig: signal.signal(sig, self._record) for sig in signals
        }

    def _record(self, signum: int, frame: FrameType | None) -> None:
        self._received.append(signal.Signals(signum))
        self._arrived.set()

    def wait(self) -> signal.Signals:
        """The first signal caught, once one has been (at once if one already was)."""
        # A timed wait keeps the main thread returning to the interpreter, where signal
        # handlers run.
        while not self._arrived.wait(timeout=0.5):
            pass
        return self._received[0]

    def restore(self) -> None:
        """Put back the handlers the signals had."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
