"""The sink's `transaction.timeout.ms` against the checkpoint protocol (issue 14, hole 3).

A sink transaction opens when its task starts a checkpoint's batch and must be committed
before the broker's `transaction.timeout.ms` runs out, or the broker aborts it and a
COMPLETE checkpoint loses its records (DATA_LOST). In the worst case a transaction lives:

- `checkpoint.timeout_ms`: the batch may pre-commit just before the checkpoint times out;
- plus the recovery time, counted as the coordinator runs it (`recovery_ms`): the executor
  that must commit dies right after COMPLETE, so the leader waits `session_timeout_ms`
  before it is dead and `reassign_delay_ms` before its tasks move (the leader then commits
  through another executor, or itself when none is alive); the leader itself may fail
  over meanwhile (`lease_ms`); and one commit attempt may fail and be retried
  (`COMMIT_ROUND_MS`: the commit call's deadline plus the longest retry backoff).

`check_transaction_timeout` refuses a spec whose sum reaches the sink's timeout, at create
and update; `near_timeout_warnings` is what status and the logs say when a COMPLETE
checkpoint's transactions are still uncommitted past half of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lockgate.common.model.pipeline_spec import PipelineSpec
from lockgate.coordinator.domain.checkpoints import CheckpointRecord
from lockgate.coordinator.domain.errors import FieldViolation, InvalidArgument
from lockgate.coordinator.domain.states import CheckpointState

COMMIT_ROUND_MS = 7_000
"""One commit attempt that fails and is retried: the executor call's 5 s deadline plus
the work loop's longest retry backoff (2 s)."""

NEAR_TIMEOUT_FRACTION = 0.5
"""A COMPLETE checkpoint still uncommitted past this share of the sink's timeout warns."""


@dataclass(frozen=True)
class RecoveryTime:
    """The coordinator's durations that recovery waits for, in milliseconds."""

    session_timeout_ms: int
    reassign_delay_ms: int
    lease_ms: int

    def recovery_ms(self) -> int:
        """How long committing a COMPLETE checkpoint may wait after its pre-commit."""
        return self.session_timeout_ms + self.reassign_delay_ms + self.lease_ms + COMMIT_ROUND_MS


def check_transaction_timeout(spec: PipelineSpec, recovery: RecoveryTime) -> None:
    """InvalidArgument naming `checkpoint.timeout_ms` and `sink.kafka.transaction_timeout_ms`
    if a transaction could outlive the sink's timeout before it is committed."""
    needed = spec.checkpoint.timeout_ms + recovery.recovery_ms()
    timeout = spec.sink.transaction_timeout_ms
    if needed < timeout:
        return
    description = (
        f"checkpoint.timeout_ms {spec.checkpoint.timeout_ms} plus this coordinator's recovery"
        f" time {recovery.recovery_ms()} ms (session timeout {recovery.session_timeout_ms} +"
        f" reassignment delay {recovery.reassign_delay_ms} + lease {recovery.lease_ms} + one"
        f" commit retry {COMMIT_ROUND_MS}) = {needed} ms reaches"
        f" sink.kafka.transaction_timeout_ms {timeout}: the broker could abort a COMPLETE"
        " checkpoint's transactions before they are committed, losing their records"
    )
    fix = (
        f"lower checkpoint.timeout_ms below {max(timeout - recovery.recovery_ms(), 0)} or raise"
        f" sink.kafka.transaction_timeout_ms above {needed} (at most the broker's"
        " transaction.max.timeout.ms)"
    )
    raise InvalidArgument(
        f"invalid pipeline config: {description}; fix: {fix}",
        violations=[
            FieldViolation(field=f, description=f"{description}; fix: {fix}")
            for f in ("checkpoint.timeout_ms", "sink.kafka.transaction_timeout_ms")
        ],
        reason="TRANSACTION_TIMEOUT_TOO_SHORT",
    )


def near_timeout_warnings(
    checkpoints: Sequence[CheckpointRecord], *, transaction_timeout_ms: int, now_ms: int
) -> list[str]:
    """One sentence per COMPLETE checkpoint whose transactions have been open (counted
    from its trigger, when its batches may open them) past `NEAR_TIMEOUT_FRACTION` of the
    sink's timeout and are still not committed."""
    warnings: list[str] = []
    for c in sorted(checkpoints, key=lambda c: c.checkpoint_id):
        age_ms = now_ms - c.triggered_at_ms
        if c.state is CheckpointState.COMPLETE and age_ms > NEAR_TIMEOUT_FRACTION * (
            transaction_timeout_ms
        ):
            warnings.append(
                f"checkpoint {c.checkpoint_id} is COMPLETE but not committed after {age_ms} ms,"
                f" {100 * age_ms // transaction_timeout_ms}% of"
                f" sink.kafka.transaction_timeout_ms ({transaction_timeout_ms} ms): the broker"
                " aborts its transactions, losing their records, if no commit reaches it in"
                f" {max(transaction_timeout_ms - age_ms, 0)} ms; check that an executor is"
                " alive and the sink's Kafka answers"
            )
    return warnings


__all__ = [
    "COMMIT_ROUND_MS",
    "NEAR_TIMEOUT_FRACTION",
    "RecoveryTime",
    "check_transaction_timeout",
    "near_timeout_warnings",
]
