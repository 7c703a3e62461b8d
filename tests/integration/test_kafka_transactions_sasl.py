"""The resume path (FindCoordinator + EndTxn, ListTransactions) through a SASL_SSL listener
(SCRAM-SHA-512 over TLS), with the sink's librdkafka properties mapped to kafka-python's."""

from __future__ import annotations

import uuid

import pytest

from lockgate.common.kafka_config import resolve_properties
from lockgate.common.kafka_slot_transactions import open_transactions_of_slot
from lockgate.common.kafka_transactions import (
    TransactionTimeoutError,
    abort_transaction,
    commit_transaction,
)
from lockgate.common.model.handles import TransactionHandle
from lockgate.common.model.ids import TransactionalId
from lockgate.localcluster.kafka import create_topic, read_visible
from tests.fixtures.kafka_sasl import SaslSslBroker
from tests.support.transactions import left_open


def _precommit(
    broker: SaslSslBroker, properties: dict[str, str], transactional_id: str, topic: str
) -> TransactionHandle:
    return left_open(
        broker.sasl_servers,
        topic,
        [transactional_id.encode()],
        transactional_id=transactional_id,
        config=properties,
        partition=None,
    )


def test_commit_abort_and_listing_speak_sasl_ssl(sasl_ssl_broker: SaslSslBroker) -> None:
    broker = sasl_ssl_broker
    properties = resolve_properties(broker.pipeline_properties())
    topic = f"sasl-{uuid.uuid4().hex[:10]}"
    create_topic(broker.plaintext_servers, topic)
    slot = f"slot-{uuid.uuid4().hex[:8]}"
    kept = _precommit(broker, properties, f"{slot}-0", topic)
    dropped = _precommit(broker, properties, f"{slot}-1", topic)

    listed = open_transactions_of_slot(
        bootstrap_servers=broker.sasl_servers, slot_id=slot, properties=properties
    )
    assert listed == [f"{slot}-0", f"{slot}-1"]
    abort_transaction(bootstrap_servers=broker.sasl_servers, handle=dropped, properties=properties)
    commit_transaction(bootstrap_servers=broker.sasl_servers, handle=kept, properties=properties)

    seen = read_visible(broker.sasl_servers, topic, settings=broker.client_settings())
    assert [r.value for r in seen] == [f"{slot}-0".encode()]


def test_a_wrong_password_fails_the_commit_without_printing_either_password(
    sasl_ssl_broker: SaslSslBroker,
) -> None:
    broker = sasl_ssl_broker
    wrong = f"wrong-{uuid.uuid4().hex}"
    properties = {**resolve_properties(broker.pipeline_properties()), "sasl.password": wrong}
    handle = TransactionHandle(
        transactional_id=TransactionalId("never-opened"), producer_id=1, producer_epoch=0
    )
    with pytest.raises(TransactionTimeoutError) as info:
        commit_transaction(
            bootstrap_servers=broker.sasl_servers,
            handle=handle,
            properties=properties,
            timeout_s=3.0,
        )
    assert broker.password not in str(info.value)
    assert wrong not in str(info.value)
