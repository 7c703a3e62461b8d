"""The executor's only commit/abort path for prepared Kafka transactions (steps 4 and 5).

As Flink's Sink V2 ``Committer``: after a pre-commit, a later commit must succeed; commit
is idempotent and retried until it does; on recovery pending transactions are committed
in the order they were created and the in-flight one aborted. Transactions are ended
through the resume path (FindCoordinator + EndTxn with the stored producer id and epoch),
from any process, never with ``init_transactions`` on a handle that may still need
committing: that call aborts whatever the id has open.

Used by the runtime (restore of a task, ``CommitCheckpoint``, ``AbortCheckpoint``, and
the abort of a pre-commit's own handles that no leader can have recorded).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from confluent_kafka import KafkaException

from lockgate.common.errors import (
    DataLoss,
    FailedPrecondition,
    InvalidArgument,
    Unavailable,
)
from lockgate.common.failpoints import Failpoint, Failpoints
from lockgate.common.kafka_config import SecretReferenceError, resolve_properties
from lockgate.common.kafka_transactions import (
    TransactionNotAnswered,
    TransactionResumeError,
    abort_handles,
    commit_handles,
    open_transactional_producer,
    open_transactions_of_slot,
)
from lockgate.common.model.handles import TransactionHandle


class HandleLostError(DataLoss):
    """A handle cannot be committed any more: the broker aborted or fenced it.

    Sent as ``DATA_LOSS``: retrying cannot help (e.g. ``transaction.timeout.ms`` passed).
    """

    default_reason = "TRANSACTION_LOST"


def require_committable(handles: Sequence[TransactionHandle], *, field_name: str) -> None:
    """Raise ``InvalidArgument`` if a handle has no producer id/epoch (it can only abort)."""
    for index, handle in enumerate(handles):
        if not handle.resumable:
            raise InvalidArgument.for_field(
                f"{field_name}[{index}].kafka.producer_id",
                f"handle of transactional.id {handle.transactional_id!r} has no producer id"
                " and epoch, so it can only be aborted (AbortCheckpoint), never committed",
            )
        if not handle.bootstrap_servers:
            raise InvalidArgument.for_field(
                f"{field_name}[{index}].kafka.bootstrap_servers",
                "is required: the Kafka cluster the transaction lives on",
            )


class Committer:
    """Commits and aborts Kafka transactions through the resume path (FindCoordinator +
    EndTxn with the stored producer id and epoch), never ``init_transactions`` on a
    handle that may still need committing."""

    def __init__(self, *, failpoints: Failpoints | None = None, timeout_s: float = 30.0) -> None:
        self._failpoints = failpoints or Failpoints()
        self._timeout_s = timeout_s

    def commit(
        self,
        handles: Sequence[TransactionHandle],
        *,
        what: str,
        sink_properties: Mapping[str, str],
    ) -> int:
        """Commit every handle, in order; idempotent. Returns how many were committed.
        ``sink_properties``: the sink's Kafka properties as written (resolved here).

        ``HandleLostError`` if one was aborted or fenced by the broker, ``Unavailable`` if
        Kafka did not answer in time (retry).
        """
        require_committable(handles, field_name="handles")
        properties = _resolved(sink_properties, what)
        ended_all = commit_handles(handles, timeout_s=self._timeout_s, properties=properties)
        try:
            for index, ended in enumerate(ended_all):
                handle = ended.handle
                if ended.refused is not None:
                    raise HandleLostError(
                        f"{what}: transaction {handle.transactional_id!r} (producer id"
                        f" {handle.producer_id}, epoch {handle.producer_epoch}) cannot be"
                        f" committed: {ended.refused}. Its output is lost; raise"
                        " transaction_timeout_ms above the checkpoint timeout plus recovery time",
                        metadata={"transactional_id": handle.transactional_id},
                    ) from ended.refused
                if index == 0:
                    self._failpoints.reach(
                        Failpoint.MID_COMMIT_HANDLES,
                        detail=f"{what}: 1 of {len(handles)} handles committed",
                    )
        except TransactionNotAnswered as exc:
            raise Unavailable(f"{what}: {exc}; retry", retry_after_seconds=1.0) from exc
        return len(handles)

    def abort(
        self,
        handles: Sequence[TransactionHandle],
        *,
        what: str,
        sink_properties: Mapping[str, str],
    ) -> int:
        """Abort every handle; idempotent (fenced or unknown counts as aborted).
        ``sink_properties``: the sink's Kafka properties as written (resolved here).

        A handle without producer id names a task slot whose pre-commit was never reported:
        every transaction open on the slot's ids is ended by ``init_transactions``.
        ``FailedPrecondition`` if one was already committed (a decided checkpoint must never
        be aborted), ``Unavailable`` if Kafka did not answer in time.
        """
        properties = _resolved(sink_properties, what) if handles else {}
        for handle in handles:
            if not handle.bootstrap_servers:
                raise InvalidArgument.for_field(
                    "handles.kafka.bootstrap_servers",
                    f"is required for {handle.transactional_id!r}: the cluster of the transaction",
                )
        ended_all = abort_handles(
            handles,
            timeout_s=self._timeout_s,
            properties=properties,
            fence_slot=lambda handle: self._fence(handle, properties),
        )
        try:
            for ended in ended_all:
                if ended.refused is not None:
                    raise FailedPrecondition(
                        f"{what}: transaction {ended.handle.transactional_id!r} is already"
                        f" committed and cannot be aborted ({ended.refused}); its checkpoint"
                        " was decided COMPLETE",
                        reason="ABORT_AFTER_COMMIT",
                    ) from ended.refused
        except (TransactionResumeError, KafkaException, RuntimeError) as exc:
            raise Unavailable(
                f"{what}: Kafka did not accept an abort in time: {exc}; retry",
                retry_after_seconds=1.0,
            ) from exc
        return len(handles)

    def _fence(self, handle: TransactionHandle, properties: Mapping[str, str]) -> None:
        # A handle without producer id names a task slot whose pre-commit was never
        # reported: its batch may have opened one transaction per Spark write partition on
        # "<slot id>-<k>". Kafka lists which are open; init_transactions on each aborts it.
        # Safe only because the leader reuses the slot after this abort succeeded.
        for transactional_id in open_transactions_of_slot(
            bootstrap_servers=handle.bootstrap_servers,
            slot_id=handle.transactional_id,
            timeout_s=self._timeout_s,
            properties=properties,
        ):
            txn, _ = open_transactional_producer(
                bootstrap_servers=handle.bootstrap_servers,
                transactional_id=transactional_id,
                timeout_s=self._timeout_s,
                config=properties,
            )
            # No transaction is open after init_transactions: letting go aborts nothing more.
            txn.release_without_abort()


def _resolved(sink_properties: Mapping[str, str], what: str) -> dict[str, str]:
    """The sink's properties with their references read in this process; a reference that
    cannot be read is ``FailedPrecondition`` naming it (retrying cannot help until it is
    fixed where the executor runs)."""
    try:
        return resolve_properties(sink_properties)
    except SecretReferenceError as exc:
        raise FailedPrecondition(
            f"{what}: sink.kafka.properties: {exc}", reason="SECRET_UNRESOLVED"
        ) from None


__all__ = ["Committer", "HandleLostError", "require_committable"]
