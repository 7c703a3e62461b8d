"""A late abort of an unreported pre-commit never ends a later checkpoint's transaction.

The abort of checkpoint N whose task never reported its pre-commit names only the task
slot: the executor re-initialises every id of the slot with a transaction open. Seen in a
broker-bounce run: the leader's AbortCheckpoint of N timed out while Kafka was down, the
executor went on with it, and it ran after N+1 began on the same slot, fencing N+1's
pre-committed transaction (DATA_LOSS at N+1's commit). Against a real broker, in process:
the executor's committer leaves a slot alone once a later checkpoint claimed it, and
still ends what is open on it for the checkpoint that holds it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from lockgate.common.model.handles import TransactionHandle
from lockgate.common.model.ids import TransactionalId
from lockgate.executor.committer import Committer, HandleLostError
from lockgate.localcluster.kafka import read_visible
from tests.fixtures.kafka import KafkaBroker
from tests.support.transactions import left_open

VALUES = [f"v-{i:02d}".encode() for i in range(10)]


def _open_transaction(broker: KafkaBroker, topic: str, transactional_id: str) -> TransactionHandle:
    """VALUES in a transaction left open on ``transactional_id``, as a write partition's."""
    return left_open(broker.bootstrap_servers, topic, VALUES, transactional_id=transactional_id)


def _visible(broker: KafkaBroker, topic: str) -> list[bytes]:
    return sorted(r.value or b"" for r in read_visible(broker.bootstrap_servers, topic))


def test_a_late_abort_of_an_unreported_precommit_leaves_the_next_checkpoint_alone(
    kafka_broker: KafkaBroker, new_topic: Callable[..., str]
) -> None:
    slot = f"lockgate-p-0-g1-{uuid.uuid4().hex[:8]}"
    unreported = TransactionHandle(
        TransactionalId(slot), None, None, kafka_broker.bootstrap_servers
    )
    committer = Committer(timeout_s=30)
    # Checkpoint 4 claimed the slot and has its transaction open on "<slot>-0".
    committer.claim_slot(slot, 4)
    topic_4 = new_topic()
    handle_4 = _open_transaction(kafka_broker, topic_4, f"{slot}-0")

    # The late abort of checkpoint 3 (never reported, so named by the slot) leaves it be.
    committer.abort([unreported], what="abort of 3", sink_properties={}, checkpoint_id=3)
    assert committer.commit([handle_4], what="commit of 4", sink_properties={}) == 1
    assert _visible(kafka_broker, topic_4) == VALUES

    # The slot's own checkpoint's abort still ends whatever is open on its ids.
    topic_5 = new_topic()
    committer.claim_slot(slot, 5)
    handle_5 = _open_transaction(kafka_broker, topic_5, f"{slot}-1")
    committer.abort([unreported], what="abort of 5", sink_properties={}, checkpoint_id=5)
    assert _visible(kafka_broker, topic_5) == []
    with pytest.raises(HandleLostError):
        committer.commit([handle_5], what="commit of 5", sink_properties={})
