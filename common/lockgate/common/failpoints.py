"""Failpoints: make a process die hard, or hold, at a named step of the checkpoint protocol.

Set ``LOCKGATE_FAILPOINTS`` to a comma-separated list of names, each optionally followed
by ``@N`` to act at the N-th time the step is reached instead of the first, and by
``:hold`` to hold there instead of dying::

    LOCKGATE_FAILPOINTS=after_precommit_before_report
    LOCKGATE_FAILPOINTS=mid_commit_handles@2,after_commit_before_ack
    LOCKGATE_FAILPOINTS=before_init_transactions:hold  LOCKGATE_FAILPOINT_HOLD_DIR=/tmp/h

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
``before_init_transactions`` (executor, in the Spark write partition)
    A write partition is about to open its transactional producer, whose
    ``init_transactions()`` aborts whatever its id has open. Held there, a batch outlives
    its executor's session, as a paused executor's would (issue 14's late producer).
``inside_complete_transaction`` (coordinator, in the checkpoint store)
    The leader's SQL transaction has written checkpoint N COMPLETE (the commit point) and
    has not committed it yet. Dying there, N stays TRIGGERED and the next leader aborts
    it; held there, the leader sits in an open transaction with its locks taken, as a
    leader paused or cut from its database in the middle of a write would.

Holding is for tests only. A held step needs ``LOCKGATE_FAILPOINT_HOLD_DIR``, a
directory the test and the process share: the armed hit writes ``<name>.held`` there (its
detail and its pid inside), and waits until the test creates ``<name>.release``. A step held once
is passed by every later hit. Hits of a held step are counted in that directory, not in
memory, because a step like ``before_init_transactions`` runs in Spark's Python workers,
several processes of one executor.

Unknown names are refused at start with the list of valid ones: a typo must not silently
disarm a fault test.
"""

from __future__ import annotations

import enum
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

#: Environment variable holding the armed failpoints.
FAILPOINTS_ENV = "LOCKGATE_FAILPOINTS"
#: Exit status of a process killed by a failpoint (as if by SIGKILL).
FAILPOINT_EXIT_CODE = 137
#: Environment variable naming the directory where held failpoints meet the test.
FAILPOINT_HOLD_DIR_ENV = "LOCKGATE_FAILPOINT_HOLD_DIR"
#: How often a held step looks for its release file, in seconds.
_HOLD_POLL_S = 0.05


class Failpoint(enum.Enum):
    """A named step where a process can be made to die (or, in tests, to hold)."""

    AFTER_PRECOMMIT_BEFORE_REPORT = "after_precommit_before_report"
    AFTER_COMPLETE_BEFORE_COMMIT = "after_complete_before_commit"
    MID_COMMIT_HANDLES = "mid_commit_handles"
    AFTER_COMMIT_BEFORE_ACK = "after_commit_before_ack"
    BEFORE_INIT_TRANSACTIONS = "before_init_transactions"
    INSIDE_COMPLETE_TRANSACTION = "inside_complete_transaction"


class FailpointConfigError(ValueError):
    """``LOCKGATE_FAILPOINTS`` names an unknown step or a bad hit count."""


@dataclass(frozen=True)
class ArmedFailpoint:
    """One armed step: die (or hold) the ``on_hit``-th time (1-based) it is reached."""

    failpoint: Failpoint
    on_hit: int = 1
    hold: bool = False

    def describe(self) -> str:
        """``name@N`` (``:hold`` if it holds), as written in ``LOCKGATE_FAILPOINTS``."""
        return f"{self.failpoint.value}@{self.on_hit}{':hold' if self.hold else ''}"


def parse_failpoints(text: str) -> tuple[ArmedFailpoint, ...]:
    """Parse ``name[@N][:hold][,...]``; empty text arms nothing.

    Raises ``FailpointConfigError`` naming the bad entry and the valid names.
    """
    armed: dict[Failpoint, ArmedFailpoint] = {}
    valid = ", ".join(f.value for f in Failpoint)
    for raw_entry in text.split(","):
        entry = raw_entry.strip()
        if not entry:
            continue
        entry, _, action = entry.partition(":")
        if action.strip().lower() not in ("", "hold"):
            raise FailpointConfigError(
                f"{FAILPOINTS_ENV}: {raw_entry.strip()!r} has an unknown action; the only"
                " one is ':hold' (without it the process dies at the step)"
            )
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
        armed[failpoint] = ArmedFailpoint(
            failpoint=failpoint, on_hit=on_hit, hold=bool(action.strip())
        )
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
        hold_dir: Path | None = None,
        exit_process: Callable[[str], None] = _hard_exit,
    ) -> None:
        held = [a.describe() for a in armed if a.hold]
        if held and hold_dir is None:
            raise FailpointConfigError(
                f"{FAILPOINTS_ENV}: {', '.join(held)} holds, so {FAILPOINT_HOLD_DIR_ENV} must"
                " name the directory where the test releases it"
            )
        self._armed = {a.failpoint: a for a in armed}
        self._hits: dict[Failpoint, int] = {}
        self._lock = threading.Lock()
        self._hold_dir = hold_dir
        self._exit = exit_process

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Failpoints:
        """Failpoints armed by ``LOCKGATE_FAILPOINTS`` and, for held ones, the directory
        ``LOCKGATE_FAILPOINT_HOLD_DIR`` (``os.environ`` by default)."""
        env = os.environ if environ is None else environ
        hold_dir = env.get(FAILPOINT_HOLD_DIR_ENV, "")
        return cls(
            parse_failpoints(env.get(FAILPOINTS_ENV, "")),
            hold_dir=Path(hold_dir) if hold_dir else None,
        )

    @property
    def armed(self) -> tuple[ArmedFailpoint, ...]:
        """What is armed, for the start-up log line."""
        return tuple(self._armed.values())

    def reach(self, failpoint: Failpoint, *, detail: str = "") -> None:
        """Note that the process reached ``failpoint``; exit hard (or hold until released)
        if it is armed for this hit."""
        armed = self._armed.get(failpoint)
        if armed is None:
            return
        if armed.hold and self._hold_dir is not None:
            self._hold(armed, self._hold_dir, detail)
            return
        with self._lock:
            hits = self._hits.get(failpoint, 0) + 1
            self._hits[failpoint] = hits
        if hits == armed.on_hit:
            where = f" ({detail})" if detail else ""
            self._exit(
                f"failpoint {failpoint.value} hit{where}: exiting with {FAILPOINT_EXIT_CODE}"
            )

    def _hold(self, armed: ArmedFailpoint, hold_dir: Path, detail: str) -> None:
        name = armed.failpoint.value
        held, release = hold_dir / f"{name}.held", hold_dir / f"{name}.release"
        if held.exists() or _claim_hit(hold_dir, name) != armed.on_hit:
            return
        # The pid names the holder, a Spark Python worker perhaps, for a test to kill.
        held.write_text(f"{detail}\npid {os.getpid()}\n")
        sys.stderr.write(f"failpoint {name} hit ({detail}): holding until {release} exists\n")
        sys.stderr.flush()
        while not release.exists():
            time.sleep(_HOLD_POLL_S)  # a test-only wait for the test's release file


def _claim_hit(hold_dir: Path, name: str) -> int:
    """Count one hit of ``name`` across processes: claim the first free ``<name>.hit<i>``."""
    hit = 1
    while True:
        try:
            os.close(os.open(hold_dir / f"{name}.hit{hit}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            hit += 1
            continue
        return hit


__all__ = [
    "FAILPOINTS_ENV",
    "FAILPOINT_EXIT_CODE",
    "FAILPOINT_HOLD_DIR_ENV",
    "ArmedFailpoint",
    "Failpoint",
    "FailpointConfigError",
    "Failpoints",
    "parse_failpoints",
]
