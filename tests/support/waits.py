"""The one way a test waits: poll a condition until it holds or a deadline passes.

A test never sleeps to let something happen; it names what it waits for and gives a deadline.
On timeout the failure says what was awaited, the condition's last value and the last exception
it raised, plus whatever the caller's ``explain`` adds (e.g. the tail of every process's log), so
a red test tells why without a rerun.

Exceptions from the condition count as "not yet" (a replica not answering during an election, a
topic not created yet): the last one is shown and chained if the deadline passes. The polling
interval starts short and grows to a quarter second, so a quick event is seen at once and a long
wait does not load the two shared cores.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NoReturn, TypeVar

_T = TypeVar("_T")

#: First polling interval (s); it grows by half each round up to :data:`MAX_INTERVAL_S`.
FIRST_INTERVAL_S = 0.01
#: Longest pause between two polls (s).
MAX_INTERVAL_S = 0.25


def wait_for(
    what: str,
    condition: Callable[[], _T | None],
    *,
    timeout_s: float,
    abort_if: Callable[[], str | None] | None = None,
    explain: Callable[[], str] | None = None,
) -> _T:
    """Poll ``condition`` until it returns a truthy value, and return that value.

    Fails the test (``AssertionError``) naming ``what`` after ``timeout_s`` seconds, with the last
    value and exception seen; at once if ``abort_if`` returns a reason (e.g. the process being
    waited for has died). ``explain`` is called only on failure and its text appended.
    """
    deadline = time.monotonic() + timeout_s
    interval = FIRST_INTERVAL_S
    last_value: object = None
    last_error: Exception | None = None
    while True:
        try:
            value = condition()
        except Exception as exc:  # "not yet": kept for the failure message
            last_error = exc
        else:
            if value:
                return value
            last_value = value
        reason = abort_if() if abort_if is not None else None
        if reason is not None:
            _fail(f"gave up waiting for {what}: {reason}", last_value, last_error, explain)
        if time.monotonic() >= deadline:
            _fail(
                f"timed out after {timeout_s:g} s waiting for {what}",
                last_value,
                last_error,
                explain,
            )
        time.sleep(interval)  # the polling interval of a deadline wait, not a synchronisation
        interval = min(interval * 1.5, MAX_INTERVAL_S)


def _fail(
    message: str,
    last_value: object,
    last_error: Exception | None,
    explain: Callable[[], str] | None,
) -> NoReturn:
    details = [message, f"last value: {last_value!r}"]
    if last_error is not None:
        details.append(f"last error: {type(last_error).__name__}: {last_error}")
    if explain is not None:
        details.append(explain())
    raise AssertionError("\n".join(details)) from last_error
