"""Which transactions a task's slot has open on the brokers: what a pre-commit that was
never reported may have left (it has no handle, so only Kafka knows), and which ids belong to a
slot. The ids' scheme is `coordinator/domain/transactional_ids.py`; ending a transaction by
its handle is `kafka_transactions.py`.
"""

from __future__ import annotations

from collections.abc import Mapping

from kafka.errors import KafkaError
from kafka.protocol.admin.transactions import ListTransactionsRequest

from lockgate.common.kafka_resume_clients import new_resume_client
from lockgate.common.kafka_transactions import NONE, error_name
from lockgate.common.model.ids import TransactionalId


class TransactionListError(RuntimeError):
    """Kafka could not be asked which transactions are open (unreachable, or refused)."""


def open_transactions_of_slot(
    *,
    bootstrap_servers: str,
    slot_id: str,
    timeout_s: float = 30.0,
    properties: Mapping[str, str] | None = None,
) -> list[TransactionalId]:
    """The transactional ids ``slot_id`` and ``<slot_id>-<k>`` that have a transaction open.

    A pre-commit that was never reported has no handle: it may have opened one transaction
    per Spark write partition ``k`` on ``<slot_id>-<k>``, and only the broker knows which.
    This asks every broker (Kafka's ListTransactions, KIP-664) for its Ongoing transactions
    and keeps the slot's own. Raises :class:`TransactionListError` if Kafka does not
    answer within ``timeout_s``.
    """
    # kafka-python's own network client, not its KafkaAdminClient, which logs its whole
    # configuration (a SASL password included) at DEBUG.
    # A client of its own, not a kept one: the brokers to ask come from its bootstrap
    # metadata, which must be today's (a transaction on a broker added since would be missed).
    timeout_ms = int(timeout_s * 1000)
    client = new_resume_client(bootstrap_servers, properties or {}).net
    try:
        client.get_broker_version(timeout_ms=timeout_ms)
    except KafkaError as exc:
        client.close()
        raise TransactionListError(
            f"could not reach Kafka at {bootstrap_servers} to list the open transactions of"
            f" {slot_id!r}: {exc}"
        ) from exc
    found: set[str] = set()
    try:
        for broker in client.cluster.brokers():
            request = ListTransactionsRequest(state_filters=["Ongoing"], producer_id_filters=[])
            response = client.send_and_receive(broker.node_id, request, timeout_ms=timeout_ms)
            if response.error_code != NONE:
                raise TransactionListError(
                    f"broker {broker.node_id} answered {error_name(response.error_code)}"
                    f" ({response.error_code}) to ListTransactions"
                )
            found.update(
                state.transactional_id
                for state in response.transaction_states
                if belongs_to_slot(state.transactional_id, slot_id)
            )
    except KafkaError as exc:
        raise TransactionListError(
            f"listing the open transactions of {slot_id!r} on {bootstrap_servers} failed: {exc}"
        ) from exc
    finally:
        client.close()
    return [TransactionalId(t) for t in sorted(found)]


def belongs_to_slot(transactional_id: str, slot_id: str) -> bool:
    """Whether ``transactional_id`` is ``slot_id`` or one of its write partitions'
    ``<slot_id>-<k>`` (and not, say, slot 10 when ``slot_id`` ends in ``-g1-1``, another
    generation's ``-g2-1``, or another task's: only digits may follow ``<slot_id>-``)."""
    if transactional_id == slot_id:
        return True
    suffix = transactional_id.removeprefix(slot_id + "-")
    return suffix != transactional_id and suffix.isascii() and suffix.isdigit()
