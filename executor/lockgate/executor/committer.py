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

import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from confluent_kafka import KafkaException

from lockgate.common.errors import (
    DataLoss,
    FailedPrecondition,
    InvalidArgument,
    Unavailable,
)
from lockgate.common.failpoints import Failpoint, Failpoints
from lockgate.common.kafka_config import SecretReferenceError, resolve_properties
from lockgate.common.kafka_slot_transactions import open_transactions_of_slot
from lockgate.common.kafka_transactions import (
    TransactionNotAnswered,
    TransactionResumeError,
    abort_handles,
    commit_handles,
    open_transactional_producer,
)
from lockgate.common.model.handles import TransactionHandle

_LOG = logging.getLogger(__name__)


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


class SlotClaims:
    """Which checkpoint last began writing on each task slot of this executor, with one
    lock per slot, so that ending "whatever is open on a slot's ids" never hits a newer
    checkpoint's transaction.

    The abort of a pre-commit that was never reported re-initialises every id of its slot
    with a transaction open. The leader reuses the slot only after such an abort was
    answered (coordinator ``domain/transactional_ids.py``), but a call it gave up on (a
    deadline passed while Kafka was down) still runs here, and it retries meanwhile: one
    of those may come after the next checkpoint began on the slot, and would abort that
    checkpoint's transaction. So a batch claims its slot before it writes, and a slot is
    fenced for checkpoint N only under the slot's lock and only while no checkpoint after
    N has claimed it (that checkpoint's own ``init_transactions`` ended N's transactions).
    """

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._newest: dict[str, int] = {}

    def claim(self, slot_id: str, checkpoint_id: int) -> None:
        """Checkpoint N's batch is about to write on ``slot_id``'s ids (waits for a fence
        of the slot in progress)."""
        with self._lock_of(slot_id):
            self._newest[slot_id] = max(self._newest.get(slot_id, checkpoint_id), checkpoint_id)

    @contextmanager
    def fencing(self, slot_id: str, checkpoint_id: int | None) -> Iterator[bool]:
        """Hold ``slot_id`` while it is fenced for checkpoint N; yields whether it may be
        (False: a later checkpoint claimed it). ``checkpoint_id`` None: a restore's fence
        of an older task generation's slot, which no batch here claims any more."""
        with self._lock_of(slot_id):
            newest = self._newest.get(slot_id)
            yield checkpoint_id is None or newest is None or newest <= checkpoint_id

    def _lock_of(self, slot_id: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(slot_id, threading.Lock())


class Committer:
    """Commits and aborts Kafka transactions through the resume path (FindCoordinator +
    EndTxn with the stored producer id and epoch), never ``init_transactions`` on a
    handle that may still need committing."""

    def __init__(self, *, failpoints: Failpoints | None = None, timeout_s: float = 30.0) -> None:
        self._failpoints = failpoints or Failpoints()
        self._timeout_s = timeout_s
        self._slots = SlotClaims()

    def claim_slot(self, slot_id: str, checkpoint_id: int) -> None:
        """Checkpoint N's batch is about to open producers on ``slot_id``'s ids: a late
        abort of an earlier checkpoint on that slot must leave them alone (`SlotClaims`)."""
        self._slots.claim(slot_id, checkpoint_id)

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
        checkpoint_id: int | None = None,
    ) -> int:
        """Abort every handle; idempotent (fenced or unknown counts as aborted).
        ``sink_properties``: the sink's Kafka properties as written (resolved here).

        A handle without producer id names a task slot whose pre-commit was never reported:
        every transaction open on the slot's ids is ended by ``init_transactions``, unless
        a checkpoint after ``checkpoint_id`` already claimed the slot here (`SlotClaims`).
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
            fence_slot=lambda handle: self._fence(handle, properties, checkpoint_id, what),
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

    def _fence(
        self,
        handle: TransactionHandle,
        properties: Mapping[str, str],
        checkpoint_id: int | None,
        what: str,
    ) -> None:
        # A handle without producer id names a task slot whose pre-commit was never
        # reported: its batch may have opened one transaction per Spark write partition on
        # "<slot id>-<k>". Kafka lists which are open; init_transactions on each aborts it.
        # Safe only while no later checkpoint writes on the slot: the leader reuses it after
        # this abort was answered, and a late or repeated call is refused here.
        with self._slots.fencing(handle.transactional_id, checkpoint_id) as allowed:
            if not allowed:
                _LOG.info(
                    "%s: slot %r left alone: a later checkpoint writes on it, and its own"
                    " init_transactions ended this one's transactions",
                    what,
                    handle.transactional_id,
                )
                return
            self._fence_open_ids(handle, properties)

    def _fence_open_ids(self, handle: TransactionHandle, properties: Mapping[str, str]) -> None:
        for transactional_id in open_transactions_of_slot(
            bootstrap_servers=handle.bootstrap_servers,
            slot_id=handle.transactional_id,
            timeout_s=self._timeout_s,
            properties=properties,
        ):
            txn = open_transactional_producer(
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


__all__ = ["Committer", "HandleLostError", "SlotClaims", "require_committable"]
