"""Two-phase commit over Kafka transactions: pre-commit in one process, commit from any other.

The executor's Kafka sink uses this module in two halves:

* **Pre-commit** (the process that writes): :func:`open_transactional_producer` creates a
  confluent-kafka transactional producer, calls ``init_transactions()`` (which fences older
  producers of the same ``transactional.id`` and aborts their open transaction), and reads the
  producer id and epoch that librdkafka only exposes in its statistics JSON. The caller begins
  a transaction, produces, ``flush()``es, then calls :meth:`TransactionalProducer.precommit`,
  which returns the :class:`TransactionHandle` to store in SQL. From then on the transaction is
  open on the broker and the producer must be let go of **without aborting** (see
  :meth:`TransactionalProducer.release_without_abort`).
* **Commit / abort** (any process, any time later, before ``transaction.timeout.ms``):
  :func:`commit_transaction` / :func:`abort_transaction` (:func:`commit_handles` /
  :func:`abort_handles` for many, the answers sorted once) send ``FindCoordinator(TRANSACTION,
  transactional.id)`` and then ``EndTxn(transactional.id, producer id, epoch, committed)``
  straight to the transaction coordinator, through kafka-python's network layer (its
  protocol classes and connections, so TLS and SASL PLAIN/SCRAM come with it: the sink's
  Kafka properties, mapped by ``kafka_config.kafka_python_settings``). No
  ``init_transactions()`` is called: that would abort the transaction. This is what
  Flink's ``FlinkKafkaInternalProducer.resumeTransaction`` achieves with reflection.

EndTxn is sent at version <= 4, the classic transaction protocol. Version 5 is KIP-890's
"transaction version 2", in which the coordinator bumps the epoch at the end of every
transaction, so a stored epoch would stop describing the transaction once it ends. Measured on
Kafka 4.3.1 (formatted with ``transaction.version=2``) with confluent-kafka 2.16.1: librdkafka
keeps the same producer id and epoch across init, commit and abort, and an EndTxn v4 commit
repeated with the same epoch answers NONE, so commit is idempotent; abort after commit answers
INVALID_TXN_STATE; a handle older than a later ``init_transactions`` answers PRODUCER_FENCED.

Error codes (Kafka protocol) this module handles, and what they mean here:

=====  ===============================  =====================================================
code   name                             handling
=====  ===============================  =====================================================
0      NONE                             done (also for a repeated commit / repeated abort)
7      REQUEST_TIMED_OUT                retried until the deadline
14     COORDINATOR_LOAD_IN_PROGRESS     retried until the deadline
15     COORDINATOR_NOT_AVAILABLE        coordinator looked up again, retried
16     NOT_COORDINATOR                  coordinator looked up again, retried
51     CONCURRENT_TRANSACTIONS          markers of this id still being written: retried
47     INVALID_PRODUCER_EPOCH           :class:`ProducerFencedError`
90     PRODUCER_FENCED                  :class:`ProducerFencedError` (a newer producer, or the
                                        broker's timeout abort, bumped the epoch)
48     INVALID_TXN_STATE                :class:`InvalidTransactionStateError` (e.g. abort
                                        after commit, commit after abort)
49     INVALID_PRODUCER_ID_MAPPING      :class:`UnknownTransactionError` (id unknown or
                                        expired, or producer id does not match)
53     TRANSACTIONAL_ID_AUTHORIZATION   :class:`TransactionResumeError`
=====  ===============================  =====================================================
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from confluent_kafka import KafkaException, Producer
from kafka.errors import KafkaError
from kafka.net.compat import KafkaNetClient
from kafka.protocol.metadata import CoordinatorType, FindCoordinatorRequest
from kafka.protocol.producer import EndTxnRequest

from lockgate.common.kafka_resume_clients import RESUME_CLIENTS, ResumeClient
from lockgate.common.model.handles import TransactionHandle
from lockgate.common.model.ids import TransactionalId

#: Highest EndTxn version this module sends (see the module docstring for why not 5).
MAX_END_TXN_VERSION = 4

# Kafka protocol error codes (org.apache.kafka.common.protocol.Errors).
NONE = 0
REQUEST_TIMED_OUT = 7
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
UNSUPPORTED_VERSION = 35
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
CONCURRENT_TRANSACTIONS = 51
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
PRODUCER_FENCED = 90

_ERROR_NAMES = {
    NONE: "NONE",
    REQUEST_TIMED_OUT: "REQUEST_TIMED_OUT",
    COORDINATOR_LOAD_IN_PROGRESS: "COORDINATOR_LOAD_IN_PROGRESS",
    COORDINATOR_NOT_AVAILABLE: "COORDINATOR_NOT_AVAILABLE",
    NOT_COORDINATOR: "NOT_COORDINATOR",
    UNSUPPORTED_VERSION: "UNSUPPORTED_VERSION",
    INVALID_PRODUCER_EPOCH: "INVALID_PRODUCER_EPOCH",
    INVALID_TXN_STATE: "INVALID_TXN_STATE",
    INVALID_PRODUCER_ID_MAPPING: "INVALID_PRODUCER_ID_MAPPING",
    CONCURRENT_TRANSACTIONS: "CONCURRENT_TRANSACTIONS",
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    PRODUCER_FENCED: "PRODUCER_FENCED",
}

#: Errors after which the same request is simply sent again.
_RETRY_SAME_COORDINATOR = frozenset(
    {REQUEST_TIMED_OUT, COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS}
)
#: Errors after which the coordinator is looked up again first.
_RETRY_NEW_COORDINATOR = frozenset({COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR})


def error_name(code: int) -> str:
    """The Kafka name of protocol error ``code`` (``UNKNOWN(<code>)`` if not listed here)."""
    return _ERROR_NAMES.get(code, f"UNKNOWN({code})")


class TransactionResumeError(RuntimeError):
    """Committing or aborting a transaction from its handle failed."""

    def __init__(self, message: str, *, handle: TransactionHandle, error_code: int | None) -> None:
        self.handle = handle
        self.error_code = error_code
        super().__init__(message)


class ProducerFencedError(TransactionResumeError):
    """The handle's epoch is no longer current (PRODUCER_FENCED / INVALID_PRODUCER_EPOCH).

    A newer producer called ``init_transactions()`` on the id, or the broker aborted the
    transaction after ``transaction.timeout.ms`` (which bumps the epoch). The transaction's
    data is not committed and cannot be any more.
    """


class InvalidTransactionStateError(TransactionResumeError):
    """The transaction is in a state that refuses this end (INVALID_TXN_STATE).

    E.g. abort after it was committed, or commit after it was aborted.
    """


class UnknownTransactionError(TransactionResumeError):
    """The coordinator does not know this transactional id with this producer id.

    (INVALID_PRODUCER_ID_MAPPING: the id never existed, expired after
    ``transactional.id.expiration.ms``, or now belongs to another producer id.)
    """


#: The answers after which a commit can never succeed: the transaction was aborted or
#: fenced (by the broker's ``transaction.timeout.ms`` or a newer producer), or its id is
#: gone. Its output is lost; every other ``TransactionResumeError`` may pass on a retry.
TRANSACTION_LOST_ERRORS: tuple[type[TransactionResumeError], ...] = (
    ProducerFencedError,
    InvalidTransactionStateError,
    UnknownTransactionError,
)


class TransactionTimeoutError(TransactionResumeError):
    """The deadline passed while the coordinator kept answering with retriable errors."""


class ProducerHandleError(RuntimeError):
    """The transactional producer's id and epoch could not be read from its statistics."""


# ---------------------------------------------------------------------------------------
# the pre-committing side (confluent-kafka)


@dataclass(frozen=True)
class _EosStats:
    seq: int
    producer_id: int
    producer_epoch: int
    txn_state: str


class TransactionalProducer:
    """A confluent-kafka transactional producer whose producer id and epoch can be read.

    Use :attr:`producer` for ``begin_transaction`` / ``produce`` / ``flush`` /
    ``commit_transaction`` as usual. For two-phase commit call :meth:`precommit` after the
    flush instead of committing, store the handle, then :meth:`release_without_abort`.
    """

    def __init__(self, producer: Producer, transactional_id: TransactionalId) -> None:
        self._producer: Producer | None = producer
        self._transactional_id = transactional_id
        self._lock = threading.Lock()
        self._latest: _EosStats | None = None
        self._seq = 0

    @property
    def producer(self) -> Producer:
        """The underlying ``confluent_kafka.Producer``; unusable after release."""
        if self._producer is None:
            raise RuntimeError(
                f"the producer of transactional.id {self._transactional_id!r} was released"
            )
        return self._producer

    @property
    def transactional_id(self) -> TransactionalId:
        """The producer's ``transactional.id``."""
        return self._transactional_id

    def _on_stats(self, stats_json: str) -> None:
        # Runs on the thread calling poll()/flush(); only the eos block matters here.
        eos = json.loads(stats_json).get("eos", {})
        with self._lock:
            self._seq += 1
            self._latest = _EosStats(
                seq=self._seq,
                producer_id=int(eos.get("producer_id", -1)),
                producer_epoch=int(eos.get("producer_epoch", -1)),
                txn_state=str(eos.get("txn_state", "")),
            )

    def current_handle(self, *, timeout_s: float = 10.0) -> TransactionHandle:
        """The producer id and epoch from a statistics report emitted *after* this call.

        Waiting for a fresh report matters: the epoch can change (``init_transactions``, an
        epoch bump after an abortable error), and a report from before would be stale.
        Raises :class:`ProducerHandleError` if none arrives within ``timeout_s``.
        """
        with self._lock:
            seen = self._seq
        deadline = time.monotonic() + timeout_s
        producer = self.producer
        while time.monotonic() < deadline:
            # poll() serves the statistics callback; it returns early when one fires.
            producer.poll(0.05)
            with self._lock:
                latest = self._latest
            if latest is not None and latest.seq > seen and latest.producer_id >= 0:
                return TransactionHandle(
                    transactional_id=self._transactional_id,
                    producer_id=latest.producer_id,
                    producer_epoch=latest.producer_epoch,
                )
        raise ProducerHandleError(
            f"no statistics report with a producer id arrived within {timeout_s:.1f}s for "
            f"transactional.id {self._transactional_id!r}; is statistics.interval.ms set?"
        )

    def precommit(self, *, timeout_s: float = 30.0) -> TransactionHandle:
        """Flush the open transaction and return its handle; the transaction stays open.

        Raises RuntimeError if records are still undelivered after ``timeout_s``.
        """
        remaining = self.producer.flush(timeout_s)
        if remaining:
            raise RuntimeError(
                f"{remaining} records of transactional.id {self._transactional_id!r} were not "
                f"delivered within {timeout_s:.1f}s; abort this transaction"
            )
        return self.current_handle(timeout_s=timeout_s)

    def release_without_abort(self) -> None:
        """Let go of a pre-committed producer so that its open transaction survives.

        ``Producer.close()`` (and leaving a ``with Producer(...)`` block) **aborts** the open
        transaction: measured on Kafka 4.3.1 with confluent-kafka 2.16.1, a later
        :func:`commit_transaction` then fails with INVALID_TXN_STATE (48). Destroying the
        producer without ``close()`` -- dropping the last reference, normal interpreter exit,
        ``os._exit``, SIGKILL -- leaves the transaction open (measured: the later commit
        succeeds). So this method only drops this wrapper's reference and never calls
        ``close()``, ``abort_transaction()`` or ``flush()``; callers must drop theirs too and
        must not use the producer again (its local state stays "in transaction" even after
        another process committed it: create a new producer for the next transaction).
        """
        self._producer = None


def open_transactional_producer(
    *,
    bootstrap_servers: str,
    transactional_id: str,
    transaction_timeout_ms: int = 60_000,
    config: Mapping[str, Any] | None = None,
    timeout_s: float = 30.0,
    connect_via_topic: str | None = None,
) -> TransactionalProducer:
    """Create a transactional producer and ``init_transactions()`` it.

    ``init_transactions()`` fences any older producer of ``transactional_id`` and aborts its
    open transaction: never call this for an id whose transaction may still need committing
    (commit it with :func:`commit_transaction` first). ``config`` adds librdkafka settings
    (the sink's resolved Kafka properties among them).
    The handle is not read here: every caller either pre-commits (which reads the handle
    after its flush) or only fences. Waiting for a statistics report after the init cost
    17 ms of each write partition's open (README, issue 13); ``current_handle()`` reads it
    when wanted.

    ``connect_via_topic``: a topic whose metadata is asked for first, so a connection to a
    broker the cluster named is up when ``init_transactions()`` starts. Started before one
    is, librdkafka often finds no broker for its producer id request and waits out its
    500 ms retry timer: a third of the write partitions' opens in `bench/checkpoint_cost.py`
    took 530-560 ms, against 60-100 ms with the connection up (README, issue 13).
    """
    if not transactional_id:
        raise ValueError("transactional_id must be a non-empty string")
    holder: list[TransactionalProducer] = []

    def on_stats(stats_json: str) -> None:
        if holder:
            holder[0]._on_stats(stats_json)

    settings: dict[str, Any] = {
        "bootstrap.servers": bootstrap_servers,
        "transactional.id": transactional_id,
        "transaction.timeout.ms": transaction_timeout_ms,
        "enable.idempotence": True,
        "acks": "all",
        # The producer id and epoch come only through statistics; a handle waits for the
        # next report twice per pre-commit: 20 ms, not 100, saves 0.16 s each (issue 13).
        "statistics.interval.ms": 20,
        "stats_cb": on_stats,
        **(config or {}),
    }
    producer = Producer(settings)
    wrapped = TransactionalProducer(producer, TransactionalId(transactional_id))
    holder.append(wrapped)
    if connect_via_topic is not None:
        # Only to connect: a failure here is init_transactions()'s to report. The first
        # answer comes over the bootstrap connection, which librdkafka then drops for the
        # brokers the answer names; the second waits until one of those is up.
        with contextlib.suppress(KafkaException):
            for _ in range(2):
                producer.list_topics(connect_via_topic, timeout=min(timeout_s, 5.0))
    producer.init_transactions(timeout_s)
    return wrapped


# ---------------------------------------------------------------------------------------
# the committing side (raw protocol, any process)


def end_txn_request(handle: TransactionHandle, *, committed: bool) -> EndTxnRequest:
    """The EndTxn request ending ``handle``, at version <= :data:`MAX_END_TXN_VERSION`."""
    return EndTxnRequest(
        transactional_id=handle.transactional_id,
        producer_id=handle.producer_id,
        producer_epoch=handle.producer_epoch,
        committed=committed,
        max_version=MAX_END_TXN_VERSION,
    )


def _find_coordinator(
    client: KafkaNetClient, transactional_id: str, *, timeout_s: float
) -> tuple[int, Any, str]:
    """Ask a broker for the transaction coordinator of ``transactional_id``.

    Returns (error code, the coordinator's node id or None, error text).
    """
    timeout_ms = int(timeout_s * 1000)
    node = client.least_loaded_node(bootstrap_fallback=True)
    # (kafka-python's compat layer needs an explicit max_version here.)
    if client.api_version(FindCoordinatorRequest, max_version=99) >= 4:
        request = FindCoordinatorRequest(
            key_type=CoordinatorType.TRANSACTION.value,
            coordinator_keys=[transactional_id],
            min_version=4,
        )
        found = client.send_and_receive(node, request, timeout_ms=timeout_ms).coordinators[0]
    else:
        request = FindCoordinatorRequest(
            key=transactional_id, key_type=CoordinatorType.TRANSACTION.value, max_version=3
        )
        found = client.send_and_receive(node, request, timeout_ms=timeout_ms)
    if found.error_code != NONE:
        return found.error_code, None, str(found.error_message or "")
    node_id = client.cluster.add_coordinator(
        found, CoordinatorType.TRANSACTION, transactional_id, synthesize_node_id=False
    )
    return NONE, node_id, ""


def _end_transaction(
    *,
    bootstrap_servers: str,
    handle: TransactionHandle,
    committed: bool,
    timeout_s: float,
    properties: Mapping[str, str],
) -> None:
    verb = "commit" if committed else "abort"
    if handle.producer_id is None or handle.producer_epoch is None:
        raise ValueError(
            f"cannot {verb} transaction {handle.transactional_id!r} with EndTxn: its producer "
            "id and epoch are unknown (re-initialise the id to abort it instead)"
        )
    deadline = time.monotonic() + timeout_s
    last = "no attempt made"
    last_code: int | None = None
    backoff_s = 0.05
    while True:
        not_bootstrapped = ""
        try:
            # Keyed by the resolved properties: the callers hold no others. The broker's
            # final answers (TransactionResumeError) leave the client fine: it is kept.
            with RESUME_CLIENTS.using(
                bootstrap_servers,
                properties,
                resolved=properties,
                keep_on=(TransactionResumeError,),
            ) as client:
                not_bootstrapped = "no bootstrap server answered: "
                client.net.get_broker_version(timeout_ms=int(_io_timeout_s(deadline) * 1000))
                not_bootstrapped = ""
                done, last, last_code = _end_once(client, handle, committed, deadline, verb)
            if done:
                return
        except KafkaError as exc:
            # Unreachable, timed out, or a refused login (kafka-python retries that until
            # the deadline too): the message names the broker, never a credential. The pool
            # dropped the client; the next attempt builds a new one.
            last, last_code = f"{not_bootstrapped}{type(exc).__name__}: {exc}", None
        if time.monotonic() >= deadline:
            raise TransactionTimeoutError(
                f"could not {verb} transaction of transactional.id"
                f" {handle.transactional_id!r} (producer id {handle.producer_id}, epoch"
                f" {handle.producer_epoch}) within {timeout_s:.1f}s; last answer: {last}",
                handle=handle,
                error_code=last_code,
            )
        time.sleep(backoff_s)
        backoff_s = min(backoff_s * 2, 1.0)


def _io_timeout_s(deadline: float) -> float:
    """One request's wait: what is left until ``deadline``, at least 0.1 s, at most 10 s."""
    return min(max(deadline - time.monotonic(), 0.1), 10.0)


def _end_once(
    client: ResumeClient, handle: TransactionHandle, committed: bool, deadline: float, verb: str
) -> tuple[bool, str, int | None]:
    """One attempt on a kept, bootstrapped client: its coordinator of the id (found if not
    known yet), then EndTxn; whether it is done, and the last answer."""
    transactional_id = handle.transactional_id
    coordinator = client.coordinators.get(transactional_id)
    if coordinator is None:
        code, coordinator, text = _find_coordinator(
            client.net, transactional_id, timeout_s=_io_timeout_s(deadline)
        )
        if coordinator is None:
            end_txn_outcome(code, handle=handle, verb=verb)  # raises if not retriable
            return False, f"FindCoordinator: {error_name(code)} {text}".strip(), code
        client.coordinators[transactional_id] = coordinator
    outcome, last, last_code = _send_end_txn(
        client.net, coordinator, handle, committed, deadline, verb
    )
    if outcome is EndTxnOutcome.FIND_COORDINATOR_AGAIN:
        client.coordinators.pop(transactional_id, None)
    return outcome is EndTxnOutcome.DONE, last, last_code


def _send_end_txn(
    client: KafkaNetClient,
    coordinator: Any,
    handle: TransactionHandle,
    committed: bool,
    deadline: float,
    verb: str,
) -> tuple[EndTxnOutcome, str, int | None]:
    """EndTxn to the coordinator until it is done, asks for another coordinator, or the
    deadline passes; returns the outcome and the last answer."""
    backoff_s = 0.05
    while True:
        timeout_ms = int(_io_timeout_s(deadline) * 1000)
        request = end_txn_request(handle, committed=committed)
        code = client.send_and_receive(coordinator, request, timeout_ms=timeout_ms).error_code
        outcome = end_txn_outcome(code, handle=handle, verb=verb)
        if outcome is not EndTxnOutcome.RETRY or time.monotonic() >= deadline:
            return outcome, f"EndTxn: {error_name(code)}", code
        # CONCURRENT_TRANSACTIONS & co. clear within milliseconds: back off briefly and ask
        # the same coordinator again.
        time.sleep(backoff_s)
        backoff_s = min(backoff_s * 2, 1.0)


class EndTxnOutcome(Enum):
    """What to do after an EndTxn (or FindCoordinator) answer."""

    DONE = "done"
    RETRY = "retry"
    FIND_COORDINATOR_AGAIN = "find_coordinator_again"


def end_txn_outcome(code: int, *, handle: TransactionHandle, verb: str) -> EndTxnOutcome:
    """Classify broker error ``code`` for ending ``handle``; raise the typed error if final.

    ``verb`` is "commit" or "abort" and only shapes the messages.
    """
    if code == NONE:
        return EndTxnOutcome.DONE
    if code in _RETRY_SAME_COORDINATOR:
        return EndTxnOutcome.RETRY
    if code in _RETRY_NEW_COORDINATOR:
        return EndTxnOutcome.FIND_COORDINATOR_AGAIN
    what = (
        f"cannot {verb} transaction of transactional.id {handle.transactional_id!r} "
        f"(producer id {handle.producer_id}, epoch {handle.producer_epoch}): broker answered "
        f"{error_name(code)} ({code})"
    )
    if code in (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH):
        raise ProducerFencedError(
            f"{what}; a newer producer or the broker's transaction timeout bumped the epoch, "
            "so this transaction was aborted and can no longer be committed",
            handle=handle,
            error_code=code,
        )
    if code == INVALID_TXN_STATE:
        raise InvalidTransactionStateError(
            f"{what}; the transaction was already ended the other way",
            handle=handle,
            error_code=code,
        )
    if code == INVALID_PRODUCER_ID_MAPPING:
        raise UnknownTransactionError(
            f"{what}; the coordinator does not know this id with this producer id "
            "(never used, expired, or taken over by another producer id)",
            handle=handle,
            error_code=code,
        )
    raise TransactionResumeError(what, handle=handle, error_code=code)


def commit_transaction(
    *,
    bootstrap_servers: str,
    handle: TransactionHandle,
    timeout_s: float = 30.0,
    properties: Mapping[str, str] | None = None,
) -> None:
    """Commit the pre-committed transaction ``handle`` from any process, idempotently.

    Sends FindCoordinator + EndTxn(committed=True) without ``init_transactions()``; returns
    when the coordinator accepted the commit (it then writes the markers). A repeated commit
    with the same epoch succeeds. Retries and errors as the module's table says, retried
    ones until ``timeout_s`` (:class:`TransactionTimeoutError`). ``properties`` are the
    sink's resolved Kafka properties (TLS, SASL PLAIN/SCRAM).
    """
    _end_transaction(
        bootstrap_servers=bootstrap_servers,
        handle=handle,
        committed=True,
        timeout_s=timeout_s,
        properties=properties or {},
    )


def abort_transaction(
    *,
    bootstrap_servers: str,
    handle: TransactionHandle,
    timeout_s: float = 30.0,
    properties: Mapping[str, str] | None = None,
) -> None:
    """Abort the pre-committed transaction ``handle`` from any process, idempotently.

    Same protocol, retries and errors as :func:`commit_transaction` with
    EndTxn(committed=False). Aborting an already aborted transaction with the same epoch
    succeeds; aborting a committed one raises :class:`InvalidTransactionStateError`
    (INVALID_TXN_STATE 48).
    """
    _end_transaction(
        bootstrap_servers=bootstrap_servers,
        handle=handle,
        committed=False,
        timeout_s=timeout_s,
        properties=properties or {},
    )


class TransactionNotAnswered(TransactionResumeError):
    """Kafka did not accept a commit or abort in time: nothing is known lost; retry."""


@dataclass(frozen=True)
class HandleEnded:
    """What ending one handle came to (from `commit_handles` or `abort_handles`)."""

    handle: TransactionHandle
    refused: TransactionResumeError | None = None
    """None: ended as asked, now or before (or nothing open to abort). A commit: one of
    `TRANSACTION_LOST_ERRORS` (its output is lost); an abort: it was committed."""


def commit_handles(
    handles: Sequence[TransactionHandle], *, timeout_s: float, properties: Mapping[str, str]
) -> Iterator[HandleEnded]:
    """Commit each handle in order, on its own cluster, yielding what each came to;
    `TransactionNotAnswered` at the first Kafka did not answer for (retry)."""
    for handle in handles:
        yield _end_handle(handle, committed=True, timeout_s=timeout_s, properties=properties)


def abort_handles(
    handles: Sequence[TransactionHandle],
    *,
    timeout_s: float,
    properties: Mapping[str, str],
    fence_slot: Callable[[TransactionHandle], None] | None = None,
) -> Iterator[HandleEnded]:
    """Abort each handle as `commit_handles` commits (fenced or unknown counts as aborted);
    a handle without producer id (a slot's unreported pre-commit) goes to `fence_slot`."""
    for handle in handles:
        if not handle.resumable and fence_slot is not None:
            fence_slot(handle)
            yield HandleEnded(handle)
            continue
        yield _end_handle(handle, committed=False, timeout_s=timeout_s, properties=properties)


def _end_handle(
    handle: TransactionHandle, *, committed: bool, timeout_s: float, properties: Mapping[str, str]
) -> HandleEnded:
    """The broker's answer sorted once: refused, ended, or not answered (raised)."""
    try:
        _end_transaction(
            bootstrap_servers=handle.bootstrap_servers,
            handle=handle,
            committed=committed,
            timeout_s=timeout_s,
            properties=properties,
        )
    except TRANSACTION_LOST_ERRORS as exc:
        if committed or isinstance(exc, InvalidTransactionStateError):
            return HandleEnded(handle, refused=exc)
    except (TransactionResumeError, OSError) as exc:
        verb = "commit" if committed else "abort"
        raise TransactionNotAnswered(
            f"Kafka did not accept the {verb} of {handle.transactional_id!r} in time: {exc}",
            handle=handle,
            error_code=getattr(exc, "error_code", None),
        ) from exc
    return HandleEnded(handle)
