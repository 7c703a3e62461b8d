"""Failpoints: make a process die hard at a named step of the checkpoint protocol.

Set ``LOCKGATE_FAILPOINTS`` to a comma-separated list of names, each optionally followed
by ``@N`` to die at the N-th time the step is reached instead of the first::

    LOCKGATE_FAILPOINTS=after_precommit_before_report
    LOCKGATE_FAILPOINTS=mid_commit_handles@2,after_commit_before_ack

When an armed step is reached the process writes one line to stderr
(``failpoint <name> hit (<detail>): exiting with 137``) and calls ``os._exit(137)``: no
``finally`` block, no atexit handler, no producer close, no gRPC goodbye runs, exactly as
if it had been SIGKILLed there (137 = 128 + SIGKILL is what a shell reports for that).

The steps (DESIGN.md, the checkpoint protocol):

``after_precommit_before_report`` (executor)
    The batch of checkpoint N is written in its prepared state (Kafka transactions
    flushed, open) but ReportPrecommit was not sent: the leader must time N out and
    abort the orphaned transactions.
``after_complete_before_commit`` (coordinator, used by the coordinator's leader loop)
    The leader wrote N as COMPLETE in SQL but called no executor to commit: the next
    leader must re-commit N.
``mid_commit_handles`` (executor)
    CommitCheckpoint committed the first handle of the request and not the rest: a retry
    must commit the rest and find the first already committed.
``after_commit_before_ack`` (executor)
    CommitCheckpoint committed every handle but did not answer: the leader's retry must
    succeed on already committed transactions.

Unknown names are refused at start with the list of valid ones: a typo must not silently
disarm a fault test.
"""

from __future__ import annotations

import enum
import os
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

#: Environment variable holding the armed failpoints.
FAILPOINTS_ENV = "LOCKGATE_FAILPOINTS"
#: Exit status of a process killed by a failpoint (as if by SIGKILL).
FAILPOINT_EXIT_CODE = 137


class Failpoint(enum.Enum):
    """A named step where a process can be made to die."""

    AFTER_PRECOMMIT_BEFORE_REPORT = "after_precommit_before_report"
    AFTER_COMPLETE_BEFORE_COMMIT = "after_complete_before_commit"
    MID_COMMIT_HANDLES = "mid_commit_handles"
    AFTER_COMMIT_BEFORE_ACK = "after_commit_before_ack"


class FailpointConfigError(ValueError):
    """``LOCKGATE_FAILPOINTS`` names an unknown step or a bad hit count."""


@dataclass(frozen=True)
class ArmedFailpoint:
    """One armed step: die the ``on_hit``-th time (1-based) ``failpoint`` is reached."""

    failpoint: Failpoint
    on_hit: int = 1


def parse_failpoints(text: str) -> tuple[ArmedFailpoint, ...]:
    """Parse ``name[@N][,name[@N]...]``; empty text arms nothing.

    Raises ``FailpointConfigError`` naming the bad entry and the valid names.
    """
    armed: dict[Failpoint, ArmedFailpoint] = {}
    valid = ", ".join(f.value for f in Failpoint)
    for raw_entry in text.split(","):
        entry = raw_entry.strip()
        if not entry:
            continue
        name, _, count_text = entry.partition("@")
        name = name.strip().lower()
        try:
            failpoint = Failpoint(name)
        except ValueError:
            raise FailpointConfigError(
                f"{FAILPOINTS_ENV}: unknown failpoint {name!r}; valid names: {valid}"
            ) from None
        on_hit = 1
        if count_text:
            if not count_text.strip().isdigit() or int(count_text) < 1:
                raise FailpointConfigError(
                    f"{FAILPOINTS_ENV}: {entry!r} has a bad hit count; write {name}@N with"
                    " N >= 1 (die the N-th time the step is reached)"
                )
            on_hit = int(count_text)
        if failpoint in armed:
            raise FailpointConfigError(f"{FAILPOINTS_ENV}: failpoint {name!r} is listed twice")
        armed[failpoint] = ArmedFailpoint(failpoint=failpoint, on_hit=on_hit)
    return tuple(armed.values())


def _hard_exit(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    os._exit(FAILPOINT_EXIT_CODE)


class Failpoints:
    """The armed failpoints of one process, with their hit counters."""

    def __init__(
        self,
        armed: tuple[ArmedFailpoint, ...] = (),
        *,
        exit_process: Callable[[str], None] = _hard_exit,
    ) -> None:
        self._armed = {a.failpoint: a for a in armed}
        self._hits: dict[Failpoint, int] = {}
        self._lock = threading.Lock()
        self._exit = exit_process

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Failpoints:
        """Failpoints armed by ``LOCKGATE_FAILPOINTS`` (``os.environ`` by default)."""
        env = os.environ if environ is None else environ
        return cls(parse_failpoints(env.get(FAILPOINTS_ENV, "")))

    @property
    def armed(self) -> tuple[ArmedFailpoint, ...]:
        """What is armed, for the start-up log line."""
        return tuple(self._armed.values())

    def reach(self, failpoint: Failpoint, *, detail: str = "") -> None:
        """Note that the process reached ``failpoint``; exit hard if it is armed for this hit."""
        armed = self._armed.get(failpoint)
        if armed is None:
            return
        with self._lock:
            hits = self._hits.get(failpoint, 0) + 1
            self._hits[failpoint] = hits
        if hits == armed.on_hit:
            where = f" ({detail})" if detail else ""
            self._exit(
                f"failpoint {failpoint.value} hit{where}: exiting with {FAILPOINT_EXIT_CODE}"
            )


__all__ = [
    "FAILPOINTS_ENV",
    "FAILPOINT_EXIT_CODE",
    "ArmedFailpoint",
    "Failpoint",
    "FailpointConfigError",
    "Failpoints",
    "parse_failpoints",
]
